"""A fake engine session with ChatSession's shape, for driving the app without torch."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.api.errors import ImageError, ModelLoadError
from engine.api.events import DoneEvent, GenerationParams, GenerationStats, TokenEvent


@dataclass
class FakeTurn:
    role: str
    text: str
    images: list = field(default_factory=list)


@dataclass
class FakeProcessed:
    path: str
    num_image_tokens: int


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
        self.system_prompt: str | None = None
        self.turns: list = []
        self.preprocessed: list[tuple[str, str]] = []
        self._cancel = threading.Event()

    PER_IMAGE = {"full": 1088, "balanced": 320, "fast": 64}

    def preprocess(self, images, detail: str = "full"):
        self.preprocessed += [(str(i), detail) for i in images]
        return [FakeProcessed(str(i), self.PER_IMAGE[detail]) for i in images]

    def count_image_tokens(self, image, detail: str = "full") -> int:
        return self.PER_IMAGE[detail]

    def send(self, text: str, images: list[str | Path] = (), params: GenerationParams | None = None):
        self.calls.append(
            {"text": text, "images": [str(i) for i in images], "params": params, "thread": threading.get_ident()}
        )
        if self.image_error:
            raise ImageError(self.image_error)
        self._cancel.clear()
        self.calls[-1]["turns"] = [(t.role, t.text, len(t.images)) for t in self.turns]
        self.calls[-1]["system_prompt"] = self.system_prompt
        self.turns.append(FakeTurn("user", text, self.preprocess(images, (params or GenerationParams()).image_detail)))
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
        self.turns.append(FakeTurn("assistant", "".join(self.tokens[:produced]).strip()))
        total = time.perf_counter() - start
        stats = GenerationStats(
            prompt_tokens=42, generated_tokens=produced, ttft_s=0.125, decode_tokens_per_s=25.0, total_s=total
        )
        yield DoneEvent(reason, stats)

    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        self.resets += 1
        self.turns.clear()


class FakeFactory:
    """A ``session_factory`` that hands out one :class:`FakeSession` (or fails like the engine)."""

    def __init__(self, session: FakeSession | None = None, fail: str | None = None) -> None:
        self.session = session or FakeSession()
        self.fail = fail
        self.loads: list[tuple] = []

    def __call__(self, path: str, device: str | None, dtype: str | None, **options) -> FakeSession:
        self.loads.append((path, device, dtype, threading.get_ident()))
        self.options = options
        if self.fail:
            raise ModelLoadError(self.fail)
        self.session.load_thread = threading.get_ident()
        return self.session


def slow_factory(path: str, device: str | None, dtype: str | None, **options) -> FakeSession:
    """For ``SMOLCHAT_SESSION_FACTORY=tests.app.fakes:slow_factory``: a long, slow answer."""
    delay = float(os.environ.get("SMOLCHAT_FAKE_DELAY", "0.02"))
    return FakeSession(tokens=[f" word{i}" for i in range(5000)], delay=delay, model_name="SlowFake")


def failing_factory(path: str, device: str | None, dtype: str | None, **options) -> FakeSession:
    """For ``SMOLCHAT_SESSION_FACTORY=tests.app.fakes:failing_factory``: loading fails like a broken folder."""
    raise ModelLoadError("model.safetensors is missing tensor model.norm.weight")
