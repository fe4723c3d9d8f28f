"""A scripted engine session for in-process servers: answers on cue (slowly, failing half-way, or
reading its prompt and then answering only when told to go on)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from engine.api import Capabilities, DoneEvent, GenerationStats, ProgressEvent, TokenEvent


class FakeSession:
    """ChatSession's shape. The answer echoes the user's words, ``delay`` s apart; a message
    starting with "fail" fails after two tokens; "slow" waits 0.1 s per token. "read" reads its
    prompt as ChatSession does (ProgressEvents to ``progress``: the vision tower's first, the
    prefill's first), sets ``in_prompt`` and waits for ``reading`` to be set (10 s at most), then
    reports the prompt read (the prefill's last ProgressEvent) and waits for ``answering`` before
    its first token. "read and fail" fails while reading, "read then fail" once it has read."""

    model_name, device, dtype, weights = "fake", "cpu", "float32", "float32"

    def __init__(self, delay: float = 0.0, caps: Capabilities | None = None):
        self.delay = delay
        self.turns: list = []
        self.system_prompt = None
        self.sent: list[tuple[str, list]] = []
        self.running = 0
        self._cancel = threading.Event()
        caps = caps or Capabilities(vision=True, embeddings=False, max_context=4096, image_tokens_per_tile=64)
        self.model = SimpleNamespace(capabilities=lambda: caps)
        self.cache = SimpleNamespace(capacity=4096, seq_len=0)
        self.progress = None  # set by EngineService around an answer
        self.in_prompt, self.reading, self.answering = threading.Event(), threading.Event(), threading.Event()
        self.yielded = 0  # tokens yielded by the current answer

    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        self.turns.clear()

    def preprocess(self, images, detail="full"):
        return list(images)

    def send(self, text, images=(), params=None, text_parts=None):
        self._cancel.clear()
        self.sent.append((text, list(images)))
        self.text_parts = text_parts
        return self._answer(text, params)

    def _answer(self, text, params):
        from engine.chat import Turn

        self.running += 1
        self.turns.append(Turn("user", text))
        words = text.split() or ["ok"]
        delay = 0.1 if text.startswith("slow") else self.delay
        reason, produced = "stop", []
        self.yielded = 0
        try:
            if text.startswith("read"):
                if self.progress is not None:
                    self.progress(ProgressEvent("image", 0, 2))
                    self.progress(ProgressEvent("prefill", 0, 3))
                self.in_prompt.set()
                self.reading.wait(10)
                if text.startswith("read and fail"):
                    yield DoneEvent("error", GenerationStats(prompt_tokens=3), "RuntimeError: out of memory")
                    return
                if self.progress is not None:
                    self.progress(ProgressEvent("prefill", 3, 3))
                self.answering.wait(10)
                if text.startswith("read then fail"):
                    yield DoneEvent("error", GenerationStats(prompt_tokens=3), "RuntimeError: out of memory")
                    return
            for i, word in enumerate(words * 50):
                if self._cancel.is_set():
                    reason = "cancelled"
                    break
                if params is not None and i >= params.max_new_tokens:
                    reason = "length"
                    break
                if text.startswith("fail") and i == 2:
                    yield DoneEvent("error", GenerationStats(prompt_tokens=3), "RuntimeError: boom")
                    return
                time.sleep(delay)
                produced.append(word)
                self.yielded += 1
                yield TokenEvent(word + " ", i)
                if i + 1 == len(words):
                    break
            self.turns.append(Turn("assistant", " ".join(produced)))
            yield DoneEvent(reason, GenerationStats(prompt_tokens=3, generated_tokens=len(produced)))
        finally:
            self.running -= 1


def fake_loader(session: FakeSession):
    return lambda model, options: session
