"""``LocalBackend``: the :class:`~engine.api.ChatBackend` over an in-process :class:`engine.service.EngineService`.

The engine runs on the service's own thread; this module imports only ``engine.api`` at module level,
and ``engine.service`` (itself torch-free) when a backend is made, so the UI thread never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.api import (
    Attachment,
    Capabilities,
    GenerationParams,
    HistoryMessage,
    LoadTicket,
    ModelInfo,
)
from engine.api.backend import EventSink, LoadCallback


class LocalBackend:
    """A :class:`~engine.api.ChatBackend` whose model runs in this process.

    ``loader(model, options) -> session`` replaces :func:`engine.service.default_loader` (tests use
    slowed or fake sessions). Each generation carries the system prompt it should use.
    """

    def __init__(self, loader: Callable[[str, dict], Any] | None = None) -> None:
        from app.main_thread_gc import full_collection_request
        from engine.service import EngineService  # torch-free; the engine proper loads on its thread

        # A stopped load's garbage is collected on the UI thread, as all of this app's is.
        self.service = EngineService(loader, collect_garbage=full_collection_request())
        # The service may be shared (the local HTTP server): each answer re-states this window's
        # conversation atomically with its request, and Stop cancels only this window's answers.
        self._history: list[HistoryMessage] = []
        self._handles: list = []
        self._loading: LoadTicket | None = None  # the last load's: cancel_load stops only this window's load

    @property
    def info(self) -> ModelInfo | None:
        return self.service.info

    @property
    def capabilities(self) -> Capabilities:
        return self.service.capabilities

    def load(self, model: str, options: dict, on_done: LoadCallback) -> None:
        self._loading = self.service.load(model, options, on_done)

    def cancel_load(self) -> bool:
        ticket, self._loading = self._loading, None
        return ticket is not None and ticket.cancel()

    def set_history(self, messages: Sequence[HistoryMessage]) -> None:
        self._history = list(messages)
        self.service.set_history(self._history)

    def send(self, text: str, attachments: Sequence[Attachment], params: GenerationParams, sink: EventSink,
             system_prompt: str | None = None) -> None:
        with self.service.atomic():  # a no-op check when nobody else changed the conversation
            self.service.set_history(self._history)
            self._track(self.service.send(text, attachments, params, sink, system_prompt))

    def regenerate(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        self._track(self.service.regenerate(params, sink, system_prompt))

    def edit(self, turn_index: int, text: str, attachments: Sequence[Attachment] | None, params: GenerationParams,
             sink: EventSink, system_prompt: str | None = None) -> None:
        self._track(self.service.edit(turn_index, text, attachments, params, sink, system_prompt))

    def continue_answer(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        with self.service.atomic():
            self.service.set_history(self._history)
            self._track(self.service.continue_answer(params, sink, system_prompt))

    def _track(self, handle) -> None:
        self._handles = [h for h in self._handles if not h.cancelled.is_set()][-8:] + [handle]

    def cancel(self) -> None:
        for handle in self._handles:  # finished ones are no-ops
            self.service.cancel_request(handle)
        self._handles = []

    def count_attachment_tokens(self, attachment: Attachment, detail: str,
                                params: GenerationParams | None = None) -> int:
        return self.service.count_tokens(attachment, detail, params)

    def answers_ahead(self) -> int:
        return self.service.answers_ahead(self._handles[-1], self._handles) if self._handles else 0

    def count_text_tokens(self, text: str) -> int:
        return self.service.count_text_tokens(text)

    def count_prompt_overhead(self, system_prompt: str | None) -> int:
        return self.service.count_prompt_overhead(system_prompt)

    def close(self) -> bool:
        """Stop the engine thread within about a second; False when it is still finishing a kernel."""
        return self.service.shutdown(1.0)
