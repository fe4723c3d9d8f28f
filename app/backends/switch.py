"""``EngineSwitch``: one :class:`~engine.api.ChatBackend` that routes to the local engine or a server.

The window's controller keeps talking to one backend; loading ``remote:SERVER::MODEL``
(:func:`app.backends.remote.remote_spec`) makes the switch use that server's
:class:`~app.backends.remote.RemoteBackend`, loading anything else goes back to the local engine. The
controller re-states the conversation (``set_history``) before every answer, so switching engines in
the middle of a conversation re-sends the history to the new one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.backends.remote import parse_spec
from engine.api import LOAD_CANCELLED, Attachment, Capabilities, ChatBackend, GenerationParams, HistoryMessage, ModelInfo
from engine.api.backend import EventSink, LoadCallback


class EngineSwitch:
    """Routes each call to the backend of the last ``load``: ``local``, or ``remote(server name)``
    (made on first use, then reused)."""

    def __init__(self, local: ChatBackend, remote: Callable[[str], ChatBackend]) -> None:
        self.local = local
        self._make_remote = remote
        self.remotes: dict[str, ChatBackend] = {}
        self.current: ChatBackend = local
        self._loading: tuple[ChatBackend, ChatBackend] | None = None  # (loading, in use before) for cancel_load

    @property
    def info(self) -> ModelInfo | None:
        return self.current.info

    @property
    def capabilities(self) -> Capabilities:
        return self.current.capabilities

    def load(self, model: str, options: dict, on_done: LoadCallback) -> None:
        parsed = parse_spec(model)
        if parsed is None:
            target = self.local
        else:
            if parsed[0] not in self.remotes:
                self.remotes[parsed[0]] = self._make_remote(parsed[0])
            target = self.remotes[parsed[0]]
        previous = self.current
        if target is not previous:
            previous.cancel()
        self.current = target
        self._loading = (target, previous)

        def done(info, error) -> None:
            # (A stopped load went back in cancel_load already: another load may have begun since.)
            if info is None and error != LOAD_CANCELLED and self.current is target and target is not previous:
                self._go_back(previous)
            on_done(info, error)
        target.load(model, options, done)

    def cancel_load(self) -> bool:
        loading, self._loading = self._loading, None
        if loading is None or not loading[0].cancel_load():
            return False
        if self.current is loading[0]:
            self._go_back(loading[1])
        return True

    def _go_back(self, previous: ChatBackend) -> None:
        """A load failed or stopped: every later call goes to ``previous``, which still holds its model,
        unless its server was edited or removed since (:meth:`forget_server`): it would go on sending an
        address, key or password the user took away (trial 65), so it is closed and no model is in use."""
        if previous is self.local or any(previous is b for b in self.remotes.values()):
            self.current = previous
        else:
            previous.close()

    def forget_server(self, name: str) -> None:
        """A server was edited or removed: its next use builds a backend with the new settings; the one
        in use (if on it) answers until another load ends, and is not gone back to if that load fails."""
        backend = self.remotes.pop(name, None)
        if backend is not None and backend is not self.current:
            backend.close()

    def set_history(self, messages: Sequence[HistoryMessage]) -> None:
        self.current.set_history(messages)

    def send(self, text: str, attachments: Sequence[Attachment], params: GenerationParams, sink: EventSink,
             system_prompt: str | None = None) -> None:
        self.current.send(text, attachments, params, sink, system_prompt)

    def regenerate(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        self.current.regenerate(params, sink, system_prompt)

    def edit(self, turn_index: int, text: str, attachments: Sequence[Attachment] | None, params: GenerationParams,
             sink: EventSink, system_prompt: str | None = None) -> None:
        self.current.edit(turn_index, text, attachments, params, sink, system_prompt)

    def continue_answer(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        self.current.continue_answer(params, sink, system_prompt)

    def cancel(self) -> None:
        self.current.cancel()

    def count_attachment_tokens(self, attachment: Attachment, detail: str,
                                params: GenerationParams | None = None) -> int:
        return self.current.count_attachment_tokens(attachment, detail, params)

    def count_text_tokens(self, text: str) -> int:
        return self.current.count_text_tokens(text)

    def count_prompt_overhead(self, system_prompt: str | None) -> int:
        return self.current.count_prompt_overhead(system_prompt)

    def answers_ahead(self) -> int:
        return self.current.answers_ahead()

    def close(self) -> bool:
        """Close every backend (each within about a second); False when one is still busy."""
        backends = {id(b): b for b in (*self.remotes.values(), self.current, self.local)}
        results = [bool(b.close()) for b in backends.values()]
        return all(results)


def make_remote_backend(name: str) -> ChatBackend:
    """A :class:`~app.backends.remote.RemoteBackend` for the server ``name`` of Settings ▸ Engines
    (its URL and key are read on the backend's thread, when a model loads)."""
    from app import remote_settings
    from app.backends.remote import RemoteBackend

    return RemoteBackend(lambda: remote_settings.server(name))
