"""A fake engine session with ChatSession's shape, for driving the app without torch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from engine.errors import ImageError, ModelLoadError
from engine.events import DoneEvent, GenerationParams, GenerationStats, TokenEvent


class FakeSession:
    """Streams ``tokens`` with ``delay`` seconds between them, honouring :meth:`cancel`.

    Records every call (prompt, images, params, thread id) so tests can assert what the app sent.
    ``image_error`` makes ``send`` raise :class:`ImageError` before yielding, as the engine does.
    """

    def __init__(
        self,
        tokens: list[str] | None = None,
        delay: float = 0.0,
        model_name: str = "FakeVLM-256M",
        image_error: str | None = None,
    ) -> None:
        self.tokens = list(tokens if tokens is not None else ["Hello", ",", " world", "!"])
        self.delay = delay
        self.model_name = model_name
        self.device = "cpu"
        self.dtype = "float32"
        self.image_error = image_error
        self.calls: list[dict] = []
        self.yielded = 0
        self.resets = 0
        self.load_thread: int | None = None
        self._cancel = threading.Event()

    def send(self, text: str, images: list[str | Path] = (), params: GenerationParams | None = None):
        self.calls.append(
            {"text": text, "images": [str(i) for i in images], "params": params, "thread": threading.get_ident()}
        )
        if self.image_error:
            raise ImageError(self.image_error)
        self._cancel.clear()
        return self._stream(params or GenerationParams())

    def _stream(self, params: GenerationParams):
        start = time.perf_counter()
        produced = 0
        reason = "stop"
        for i, piece in enumerate(self.tokens):
            if self._cancel.is_set():
                reason = "cancelled"
                break
            if produced >= params.max_new_tokens:
                reason = "length"
                break
            if self.delay:
                time.sleep(self.delay)
            produced += 1
            self.yielded = produced
            yield TokenEvent(piece, 1000 + i)
        else:
            if self._cancel.is_set():
                reason = "cancelled"
        total = time.perf_counter() - start
        stats = GenerationStats(
            prompt_tokens=42, generated_tokens=produced, ttft_s=0.125, decode_tokens_per_s=25.0, total_s=total
        )
        yield DoneEvent(reason, stats)

    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        self.resets += 1


class FakeFactory:
    """A ``session_factory`` that hands out one :class:`FakeSession` (or fails like the engine)."""

    def __init__(self, session: FakeSession | None = None, fail: str | None = None) -> None:
        self.session = session or FakeSession()
        self.fail = fail
        self.loads: list[tuple] = []

    def __call__(self, path: str, device: str | None, dtype: str | None) -> FakeSession:
        self.loads.append((path, device, dtype, threading.get_ident()))
        if self.fail:
            raise ModelLoadError(self.fail)
        self.session.load_thread = threading.get_ident()
        return self.session
