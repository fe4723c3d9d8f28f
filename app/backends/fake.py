"""``FakeBackend``: a canned :class:`~engine.api.ChatBackend` for tests and screenshots (no torch).

It streams fixed tokens from its own daemon thread, like the local engine would, honours
:meth:`~FakeBackend.cancel`, and records every call (text, attachments, params, history, system
prompt, thread) so tests can assert what the window asked for.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

from app.backends.jobs import JobThread
from engine.api import (
    LOAD_CANCELLED,
    Attachment,
    Capabilities,
    DoneEvent,
    GenerationParams,
    GenerationStats,
    HistoryMessage,
    LoadTicket,
    ModelInfo,
    ProgressEvent,
    TokenEvent,
    resolve_detail,
)
from engine.api.backend import EventSink, LoadCallback

PER_IMAGE = {"full": 1088, "balanced": 320, "fast": 64}
TOKENS_PER_TILE = 64  # SmolVLM-256M: a 1088-token image is 17 tiles
TEXT_PROMPT_TOKENS = 42  # the prompt's tokens besides its images
PREFILL_CHUNK = 512  # prompt tokens per reported prefill step (the engine's CPU chunk)


class FakeBackend:
    """Streams ``tokens`` with ``delay`` seconds between them.

    ``fail`` makes every load fail with that message; ``image_error`` makes every send
    end in ``DoneEvent("error", error=image_error)`` before any token, as the engine does.
    Before the first token it reports progress as the engine does (:meth:`_read_prompt`): each
    attached image's tiles, then the prompt in chunks, ``progress_delay`` seconds per step.
    """

    def __init__(self, tokens: list[str] | None = None, delay: float = 0.0, model_name: str = "FakeVLM-256M",
                 image_error: str | None = None, fail: str | None = None, vision: bool = True,
                 video: bool = False, progress_delay: float = 0.0, error_type: str = "",
                 load_delay: float = 0.0) -> None:
        self.progress_delay = progress_delay
        self.load_delay = load_delay  # seconds each load takes
        # The answer's notice (engine.api.GenerationStats.notice), "{0}" naming the first attachment as
        # the engine got it (a stored copy): e.g. "Only 4 of the 12 frames of {0} could be read".
        self.notice = ""
        self.ahead = 0  # answers_ahead(): other clients' answers before the next one
        self.overhead = 0  # count_prompt_overhead(): the template's share, besides the system prompt's words
        self.error_type = error_type  # the engine exception's name that image_error stands for
        self.tokens = list(tokens if tokens is not None else ["Hello", ",", " world", "!"])
        self.delay = delay
        self.model_name = model_name
        self.image_error = image_error
        self.fail = fail
        self.vision = vision  # False: a text-only model (capabilities.vision false)
        self.video = video  # True: takes videos, as a SmolVLM2 model (capabilities.video)
        self.calls: list[dict] = []
        self.loads: list[tuple[str, dict, int]] = []
        self.history: list[HistoryMessage] = []
        self.yielded = 0
        self.resets = 0  # set_history([]) calls: the window started an empty conversation
        self.options: dict = {}  # the last load's options besides device and dtype
        self.closed = False
        self._info: ModelInfo | None = None
        self._loading: LoadTicket | None = None  # the last load's (cancel_load)
        self.jobs = JobThread("FakeBackend")
        self._cancel = self.jobs.cancelled  # the running answer's flag

    # -- ChatBackend -------------------------------------------------------------------------------
    @property
    def info(self) -> ModelInfo | None:
        return self._info

    @property
    def capabilities(self) -> Capabilities:
        return self._info.capabilities if self._info else Capabilities()

    def load(self, model: str, options: dict, on_done: LoadCallback) -> None:
        ticket = self._loading = LoadTicket()
        self.jobs.put(lambda: self._load(model, dict(options), on_done, ticket))

    def cancel_load(self) -> bool:
        ticket, self._loading = self._loading, None
        return ticket is not None and ticket.cancel()

    def set_history(self, messages: Sequence[HistoryMessage]) -> None:
        messages = list(messages)
        if not messages:
            self.resets += 1
        self.jobs.put(lambda: setattr(self, "history", messages))

    def send(self, text: str, attachments: Sequence[Attachment], params: GenerationParams, sink: EventSink,
             system_prompt: str | None = None) -> None:
        self.jobs.put_answer(lambda events: self._answer("send", text, list(attachments), params, events, system_prompt),
                             sink)

    def regenerate(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        def run(events: EventSink) -> None:
            while self.history and self.history[-1].role == "assistant":
                self.history.pop()
            last = self.history.pop() if self.history else HistoryMessage("user", "")
            self._answer("regenerate", last.text, list(last.attachments), params, events, system_prompt)
        self.jobs.put_answer(run, sink)

    def edit(self, turn_index: int, text: str, attachments: Sequence[Attachment] | None, params: GenerationParams,
             sink: EventSink, system_prompt: str | None = None) -> None:
        def run(events: EventSink) -> None:
            kept = self.history[turn_index].attachments if attachments is None else tuple(attachments)
            del self.history[turn_index:]
            self._answer("edit", text, list(kept), params, events, system_prompt)
        self.jobs.put_answer(run, sink)

    def continue_answer(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        def run(events: EventSink) -> None:
            if len(self.history) < 2 or self.history[-1].role != "assistant":
                events(DoneEvent("error", GenerationStats(), "there is no answer to continue: the conversation "
                                 "does not end with one", "ValueError"))
                return
            answer, question = self.history.pop(), self.history.pop()
            self._answer("continue", question.text, list(question.attachments), params, events, system_prompt,
                         answer.text)
        self.jobs.put_answer(run, sink)

    def cancel(self) -> None:
        self.jobs.cancel()

    def count_attachment_tokens(self, attachment: Attachment, detail: str,
                                params: GenerationParams | None = None) -> int:
        if attachment.kind == "video":
            return -1  # no tokenizer: the window counts frames x tokens per frame
        return PER_IMAGE.get(resolve_detail(detail, "cpu"), -1)

    def count_text_tokens(self, text: str) -> int:
        return len(text.split())  # a token a word: what tests can count by eye

    def count_prompt_overhead(self, system_prompt: str | None) -> int:
        return self.overhead + len((system_prompt or "").split())  # tests set the markup's share

    def answers_ahead(self) -> int:
        return self.ahead  # tests set it: another client's answers before this one

    def close(self) -> bool:
        self.closed = True
        return self.jobs.close()

    # -- the fake engine thread --------------------------------------------------------------------

    def _load(self, model: str, options: dict, on_done: LoadCallback, ticket: LoadTicket) -> None:
        self.loads.append((model, options, threading.get_ident()))
        self.options = {k: v for k, v in options.items() if k not in ("device", "dtype")}
        deadline = time.monotonic() + self.load_delay  # a large model's load, which cancel_load stops
        while time.monotonic() < deadline and not ticket.cancelled:
            time.sleep(0.01)
        info = ModelInfo(name=self.model_name, path=model, device="cpu", dtype="float32",
                         capabilities=Capabilities(vision=self.vision, video=self.video, max_context=8192,
                                                   image_tokens_per_tile=64 if self.vision else 0))

        def install() -> None:
            self._info, self.history = info, []
        if not ticket.finish(None if self.fail else install):
            on_done(None, LOAD_CANCELLED)
        else:
            on_done(*((None, self.fail) if self.fail else (info, None)))

    def _answer(self, kind: str, text: str, attachments: list[Attachment], params: GenerationParams, sink: EventSink,
                system_prompt: str | None, answered: str = "") -> None:
        self.calls.append({"kind": kind, "text": text, "images": [a.path for a in attachments], "params": params,
                           "kinds": [a.kind for a in attachments],
                           "history": list(self.history), "system_prompt": system_prompt,
                           "turns": [(m.role, m.text, len(m.attachments)) for m in self.history],
                           "thread": threading.get_ident()})
        if self._info is None:
            sink(DoneEvent("error", GenerationStats(), "RuntimeError: No model is loaded yet."))
            return
        if self.image_error:
            sink(DoneEvent("error", GenerationStats(), self.image_error, self.error_type))
            return
        start, produced, reason = time.perf_counter(), 0, "stop"
        prompt_tokens = self._read_prompt(attachments, params, sink)
        if prompt_tokens is None:  # cancelled before the first token
            self.history += [HistoryMessage("user", text, tuple(attachments)), HistoryMessage("assistant", answered)]
            sink(DoneEvent("cancelled", GenerationStats(total_s=time.perf_counter() - start)))
            return
        # A continued answer goes on from the canned tokens it ends with (all of them: from the start).
        start = next((k for k in range(1, len(self.tokens) + 1)
                      if answered and "".join(self.tokens[:k]).strip() == answered.strip()), 0)
        for i, piece in enumerate(self.tokens[start:], start):
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
            sink(TokenEvent(piece, 1000 + i))
        else:
            reason = "cancelled" if self._cancel.is_set() else reason
        answer = (answered + "".join(self.tokens[start:start + produced])).strip()
        self.history += [HistoryMessage("user", text, tuple(attachments)), HistoryMessage("assistant", answer)]
        notice = self.notice.format(*[a.path for a in attachments]) if self.notice else ""
        sink(DoneEvent(reason, GenerationStats(prompt_tokens=prompt_tokens, generated_tokens=produced, ttft_s=0.125,
                                               decode_tokens_per_s=25.0, total_s=time.perf_counter() - start,
                                               notice=notice)))

    def _read_prompt(self, attachments: list[Attachment], params: GenerationParams, sink: EventSink) -> int | None:
        """Report the vision tower's tiles and the prefill's chunks as the engine would; the prompt's
        token count, or None when cancelled meanwhile."""
        per_image = PER_IMAGE.get(resolve_detail(params.image_detail, "cpu"), 64)
        tiles = [per_image // TOKENS_PER_TILE for _ in attachments]
        steps = []
        done = 0
        for index, count in enumerate(tiles):
            steps += [ProgressEvent("image", done + t, sum(tiles), index, len(tiles), t, count) for t in range(count)]
            done += count
        if tiles:
            steps.append(ProgressEvent("image", done, done, len(tiles) - 1, len(tiles), tiles[-1], tiles[-1]))
        total = TEXT_PROMPT_TOKENS + per_image * len(attachments)
        steps += [ProgressEvent("prefill", s, total) for s in range(0, total, PREFILL_CHUNK)]
        steps.append(ProgressEvent("prefill", total, total))
        for event in steps:
            if self._cancel.is_set():
                return None
            sink(event)
            if self.progress_delay:
                time.sleep(self.progress_delay)
        return total


def slow_backend() -> FakeBackend:
    """For ``SMOLCHAT_BACKEND=app.backends.fake:slow_backend``: a long, slow answer
    (``SMOLCHAT_FAKE_DELAY`` seconds per token, default 0.02)."""
    delay = float(os.environ.get("SMOLCHAT_FAKE_DELAY", "0.02"))
    return FakeBackend(tokens=[f" word{i}" for i in range(5000)], delay=delay, model_name="SlowFake")


def failing_backend() -> FakeBackend:
    """For ``SMOLCHAT_BACKEND=app.backends.fake:failing_backend``: loading fails like a broken folder."""
    return FakeBackend(fail="model.safetensors is missing tensor model.norm.weight")
