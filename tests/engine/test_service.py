"""EngineService: queue order, cancel (queued, running, mid vision tower, mid prefill), shutdown, errors.

The queue tests use a small scripted session; the cancellation tests run the real ChatSession on the
tiny checkpoint, slowed down (a sleep per vision layer, per prefill chunk) so that a cancel lands in
the middle of the vision tower or the prefill, as it does with real weights on a slow CPU.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from PIL import Image

from engine.api import Attachment, DoneEvent, GenerationParams, HistoryMessage, ProgressEvent, TokenEvent
from engine.api.errors import ImageError, ModelLoadError
from engine.api.events import GenerationStats
from engine.service import EngineService
from tests.slow_engine import slow_loader

STOP_LATENCY_S = 0.2


class Recorder:
    """An EventSink that keeps events with their arrival times, and signals the DoneEvent."""

    def __init__(self) -> None:
        self.events: list = []
        self.times: list[float] = []
        self.done = threading.Event()

    def __call__(self, event) -> None:
        self.events.append(event)
        self.times.append(time.perf_counter())
        if isinstance(event, DoneEvent):
            self.done.set()

    @property
    def final(self) -> DoneEvent:
        assert self.done.wait(30), f"no DoneEvent; events so far: {self.events[-5:]}"
        return self.events[-1]

    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TokenEvent))


class ScriptedSession:
    """ChatSession's shape: answers ``text`` back token by token, ``delay`` s apart, honouring cancel."""

    model_name, device, dtype, weights = "Scripted", "cpu", "float32", "float32"

    def __init__(self, delay: float = 0.0, fail_on: str = "") -> None:
        self.delay, self.fail_on = delay, fail_on
        self.turns: list = []
        self.system_prompt = None
        self.asked: list[str] = []
        self.preprocessed: list = []
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        self.turns.clear()

    def preprocess(self, images, detail="full"):
        self.preprocessed += list(images)
        return [f"tiles of {i}" for i in images]

    def send(self, text, images=(), params=None):
        if text == self.fail_on:
            raise ImageError(f"cannot read {text}")
        self._cancel.clear()
        self.asked.append(text)
        return self._stream(text)

    def _stream(self, text):
        from engine.chat import Turn

        reason, answer = "stop", ""
        self.turns.append(Turn("user", text))
        for i, word in enumerate(text.split()):
            if self._cancel.is_set():
                reason = "cancelled"
                break
            time.sleep(self.delay)
            answer += word + " "
            yield TokenEvent(word + " ", i)
        self.turns.append(Turn("assistant", answer))
        yield DoneEvent(reason, GenerationStats())


def scripted(session: ScriptedSession) -> EngineService:
    service = EngineService(lambda model, options: session)
    loaded = threading.Event()
    service.load("scripted", {}, lambda info, message: loaded.set())
    assert loaded.wait(5)
    return service


def test_requests_run_in_queue_order_on_the_engine_thread():
    session = ScriptedSession()
    service = scripted(session)
    sinks = [Recorder() for _ in range(3)]
    threads = []
    for i, sink in enumerate(sinks):
        service.send(f"answer {i}", [], GenerationParams(), lambda e, s=sink: (threads.append(threading.get_ident()),
                                                                               s(e)))
    assert [s.final.finish_reason for s in sinks] == ["stop"] * 3
    assert session.asked == ["answer 0", "answer 1", "answer 2"]
    assert [s.text() for s in sinks] == ["answer 0 ", "answer 1 ", "answer 2 "]
    assert threading.get_ident() not in threads and len(set(threads)) == 1
    assert service.shutdown()


def test_cancel_ends_the_running_answer_and_every_queued_one_without_running_them():
    session = ScriptedSession(delay=0.02)
    service = scripted(session)
    running, queued = Recorder(), Recorder()
    service.send("a " * 500, [], GenerationParams(), running)
    service.send("never asked", [], GenerationParams(), queued)
    while not running.events:
        time.sleep(0.005)
    service.cancel()
    assert running.final.finish_reason == "cancelled"
    assert queued.final.finish_reason == "cancelled" and queued.events == [queued.final]
    assert session.asked == ["a " * 500]
    after = Recorder()  # a cancel never poisons the next request
    service.send("next one", [], GenerationParams(), after)
    assert after.final.finish_reason == "stop" and after.text() == "next one "
    assert service.shutdown()


def test_answers_ahead_counts_other_clients_answers_until_this_one_runs():
    """A window's answer behind the local server's (trial 53: it said only "Waiting for the first word")."""
    session = ScriptedSession(delay=0.02)
    service = scripted(session)
    server_running, server_queued, window = Recorder(), Recorder(), Recorder()
    first = service.send("a " * 30, [], GenerationParams(), server_running)
    second = service.send("b " * 5, [], GenerationParams(), server_queued)
    mine = service.send("mine", [], GenerationParams(), window)
    while not server_running.events:
        time.sleep(0.005)
    assert service.answers_ahead(mine) == 2 and service.answers_ahead(second) == 1
    assert service.answers_ahead(mine, own=[second]) == 1  # the asking client's own are not others'
    service.cancel_request(second)  # a cancelled one no longer comes first
    assert service.answers_ahead(mine) == 1
    assert service.answers_ahead(first) == 0  # running
    assert window.final.finish_reason == "stop" and service.answers_ahead(mine) == 0
    assert service.shutdown()


def test_an_answer_cancelled_while_queued_is_told_so_at_once_and_never_runs():
    """A window's Stop behind the local server's answer to another program waited for that answer
    to end (3.9 s of a 4 s answer) before the window heard "cancelled"."""
    session = ScriptedSession(delay=0.02)
    service = scripted(session)
    other, mine = Recorder(), Recorder()
    service.send("a " * 200, [], GenerationParams(), other)
    handle = service.send("mine", [], GenerationParams(), mine)
    while not other.events:
        time.sleep(0.005)
    service.cancel_request(handle)
    assert mine.done.is_set() and mine.events == [mine.final] and mine.final.finish_reason == "cancelled"
    assert other.final.finish_reason == "stop" and session.asked == ["a " * 200]  # it ran on; "mine" never ran
    assert mine.events == [mine.final] and service.shutdown()


def test_errors_become_done_error_and_the_service_keeps_serving():
    session = ScriptedSession(fail_on="broken.png")
    service = scripted(session)
    failed, ok = Recorder(), Recorder()
    service.send("broken.png", [], GenerationParams(), failed)
    service.send("fine", [], GenerationParams(), ok)
    assert failed.final.finish_reason == "error" and failed.final.error == "cannot read broken.png"
    assert ok.final.finish_reason == "stop"

    outcome = []
    def bad_loader(model, options):
        raise ModelLoadError(f"{model}: config.json is missing") if model == "/broken" else KeyError("bug")
    service2 = EngineService(bad_loader)
    done = threading.Semaphore(0)
    for model in ("/broken", "/bug"):
        service2.load(model, {}, lambda info, message: (outcome.append((info, message)), done.release()))
    assert done.acquire(timeout=5) and done.acquire(timeout=5)
    assert outcome == [(None, "/broken: config.json is missing"), (None, "KeyError: 'bug'")]
    nothing = Recorder()
    service2.send("hi", [], GenerationParams(), nothing)
    assert nothing.final.error == "RuntimeError: No model is loaded yet."
    assert service.shutdown() and service2.shutdown()


def test_shutdown_while_idle_and_while_busy_returns_within_a_second():
    idle = EngineService(lambda model, options: ScriptedSession())
    t = time.perf_counter()
    assert idle.shutdown(1.0)
    assert time.perf_counter() - t < 0.5 and not idle.alive

    # Busy in something that never checks for a cancel (like a model load): shutdown still returns.
    release = threading.Event()
    stuck = EngineService(lambda model, options: release.wait(10))
    stuck.load("slow", {}, lambda info, message: None)
    time.sleep(0.05)
    t = time.perf_counter()
    assert not stuck.shutdown(1.0)
    assert time.perf_counter() - t < 1.3
    late = Recorder()
    stuck.send("after shutdown", [], GenerationParams(), late)
    assert late.final.finish_reason == "cancelled"  # answered at once, never queued
    release.set()

    # Busy in an answer: the cancel ends it, the thread stops.
    service = scripted(ScriptedSession(delay=0.02))
    busy = Recorder()
    service.send("w " * 1000, [], GenerationParams(), busy)
    while not busy.events:
        time.sleep(0.005)
    t = time.perf_counter()
    assert service.shutdown(1.0)
    assert time.perf_counter() - t < 0.5 and busy.final.finish_reason == "cancelled"


def test_set_history_keeps_the_common_prefix_and_follows_answers():
    session = ScriptedSession()
    service = scripted(session)
    q1, a1 = HistoryMessage("user", "q1", (Attachment("/img/a.png"),)), HistoryMessage("assistant", "a1")
    service.set_history([q1, a1], system_prompt="Be brief.")
    first = Recorder()
    service.send("q2", [], GenerationParams(), first)
    assert first.final.finish_reason == "stop"
    assert session.system_prompt == "Be brief." and session.preprocessed == ["/img/a.png"]
    assert [(t.role, t.text) for t in session.turns] == [("user", "q1"), ("assistant", "a1"), ("user", "q2"),
                                                         ("assistant", "q2 ")]
    kept = list(session.turns)

    # Continuing the same conversation keeps every turn object (no image is preprocessed again): the
    # answer stored stripped, with the ids it was generated as (as the app keeps it).
    service.set_history([q1, a1, HistoryMessage("user", "q2"), HistoryMessage("assistant", "q2", token_ids=(0,))])
    second = Recorder()
    service.send("q3", [], GenerationParams(), second)
    assert second.final.finish_reason == "stop"
    assert all(a is b for a, b in zip(session.turns[:4], kept)) and len(session.turns) == 6
    assert session.preprocessed == ["/img/a.png"]

    # Another conversation that shares only the first question: the rest is dropped.
    service.set_history([q1])
    third = Recorder()
    service.send("other", [], GenerationParams(), third)
    assert third.final.finish_reason == "stop"
    assert session.turns[0] is kept[0] and [t.text for t in session.turns[1:]] == ["other", "other "]
    service.reset()
    service.send("fresh", [], GenerationParams(), last := Recorder())
    assert last.final.finish_reason == "stop" and [t.text for t in session.turns] == ["fresh", "fresh "]
    assert service.shutdown()


def test_an_answer_sent_back_changed_without_its_ids_is_read_as_its_text():
    """Trial 66 F3: a server's client sent an earlier answer back with a space added (its ids not
    found for that text); the cached turn, with the ids as generated, answered in its place."""
    session = ScriptedSession()
    service = scripted(session)
    service.send("q1", [], GenerationParams(), first := Recorder())
    assert first.final.finish_reason == "stop"
    generated = session.turns[1]  # "q1 ", as generated (the ids it was generated as)
    for answer, ids, kept in (("q1 ", None, True), ("q1", None, False), ("q1  ", None, False),
                              # Back with its ids (trial 67: the edited turn was kept for it).
                              ("q1", (0,), False)):
        service.set_history([HistoryMessage("user", "q1"), HistoryMessage("assistant", answer, token_ids=ids)])
        service.send("q2", [], GenerationParams(), done := Recorder())
        assert done.final.finish_reason == "stop"
        assert (session.turns[1] is generated) == kept and session.turns[1].text == ("q1 " if kept else answer)
        assert session.turns[1].token_ids == (None if ids is None else list(ids))
        generated = session.turns[1]  # (the rebuilt turn is the text sent, next time as well)
    assert service.shutdown()


def test_expected_errors_log_one_line_and_bugs_their_traceback(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="engine.service")
    outcome = threading.Semaphore(0)
    def loader(model, options):
        raise ModelLoadError("model.safetensors has no tensor 'lm_head.weight'") if model == "/broken" else KeyError(7)
    service = EngineService(loader)
    for model in ("/broken", "/bug"):
        service.load(model, {}, lambda info, message: outcome.release())
    assert outcome.acquire(timeout=5) and outcome.acquire(timeout=5)
    broken = [r for r in caplog.records if "/broken" in r.getMessage()]
    assert [r.levelname for r in broken] == ["WARNING"] and broken[0].exc_info is None
    bug = [r for r in caplog.records if "/bug" in r.getMessage()]
    assert [r.levelname for r in bug] == ["ERROR"] and bug[0].exc_info is not None
    assert service.shutdown()


# -- the real ChatSession, slowed down ------------------------------------------------------------
@pytest.fixture
def slow_service(tiny_checkpoint):
    """An EngineService on the tiny checkpoint with 20 ms per vision layer and per 16-token prefill chunk."""
    service = EngineService(slow_loader)
    loaded = threading.Event()
    service.load(str(tiny_checkpoint), {}, lambda info, message: loaded.set())
    assert loaded.wait(60)
    yield service
    service.shutdown()


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.new("RGB", (1024, 768), (200, 90, 40)).save(path)
    return path


def cancel_at(service, photo, stage: str) -> tuple[Recorder, float]:
    """Send ``photo``, cancel at the first ProgressEvent of ``stage``; returns the sink and cancel time."""
    sink = Recorder()
    service.send("What is in this photo?", [Attachment(str(photo))], GenerationParams(max_new_tokens=8), sink)
    deadline = time.monotonic() + 30
    while not any(isinstance(e, ProgressEvent) and e.stage == stage and 0 < e.done < e.total
                  for e in list(sink.events)):
        assert time.monotonic() < deadline and not sink.done.is_set(), sink.events[-3:]
        time.sleep(0.002)
    t_cancel = time.perf_counter()
    service.cancel()
    return sink, t_cancel


@pytest.mark.parametrize("stage", ["image", "prefill"])
def test_cancel_mid_vision_tower_or_prefill_ends_within_200_ms_keeping_the_question(slow_service, photo, stage):
    sink, t_cancel = cancel_at(slow_service, photo, stage)
    done = sink.final
    latency = sink.times[-1] - t_cancel
    assert done.finish_reason == "cancelled" and done.error is None
    assert latency < STOP_LATENCY_S, f"stopped {latency * 1000:.0f} ms after cancel"
    assert not any(isinstance(e, TokenEvent) for e in sink.events)
    session = slow_service._session
    assert [t.role for t in session.turns] == ["user", "assistant"]
    assert session.turns[0].text == "What is in this photo?" and len(session.turns[0].images) == 1
    # The conversation goes on: the next answer reuses what was prefilled before the cancel.
    after = Recorder()
    slow_service.set_history([HistoryMessage("user", "What is in this photo?", (Attachment(str(photo)),))])
    slow_service.send("And now?", [], GenerationParams(max_new_tokens=2), after)
    assert after.final.finish_reason in ("stop", "length")


def test_progress_counts_tiles_then_prompt_tokens(slow_service, photo):
    for i in range(2):  # the second answer (same photo, after a reset) reports its tiles again
        if i:  # (the engine is idle: the first answer is done) else its blocks come from the prefix cache
            slow_service._session.cache.prefix.clear()
        slow_service.reset()
        sink = Recorder()
        slow_service.send("Describe.", [Attachment(str(photo))], GenerationParams(max_new_tokens=1), sink)
        assert sink.final.finish_reason in ("stop", "length")
        progress = [e for e in sink.events if isinstance(e, ProgressEvent)]
        stages = [e.stage for e in progress]
        assert stages == sorted(stages, key=lambda s: s != "image")  # tiles first, then the prompt
        tiles = [e for e in progress if e.stage == "image"]
        prefill = [e for e in progress if e.stage == "prefill"]
        assert tiles[0].done == 0 and tiles[-1].done == tiles[-1].total > 1
        assert prefill[-1].done == prefill[-1].total == sink.final.stats.prompt_tokens


def test_regenerate_and_edit_run_on_the_real_session(tiny_checkpoint):
    service = EngineService()
    loaded = threading.Event()
    service.load(str(tiny_checkpoint), {"device": "cpu"}, lambda info, message: loaded.set())
    assert loaded.wait(60)
    params = GenerationParams(max_new_tokens=3, ignore_eos=True)
    sinks = [Recorder() for _ in range(3)]
    service.send("First question", [], params, sinks[0])
    service.regenerate(params, sinks[1])
    service.edit(0, "Edited question", None, params, sinks[2])
    assert [s.final.finish_reason for s in sinks] == ["length"] * 3
    assert sinks[1].final.stats.cached_tokens == sinks[1].final.stats.prompt_tokens - 1  # the prompt was reused
    turns = service._session.turns
    assert [(t.role, t.text if t.role == "user" else "") for t in turns] == [("user", "Edited question"),
                                                                           ("assistant", "")]
    assert service.shutdown()


def test_the_model_managers_check_lists_a_weights_file_cut_short(tiny_checkpoint, tmp_path):
    """The app's check of a model folder (app.model_check, EngineService.check_checkpoint) says what
    ``python -m engine info`` says of a model.safetensors cut short: one problem, naming the file."""
    from app.model_check import validate_model
    from tests.engine.test_cli import cut_short

    folder, weights, size, _ = cut_short(tiny_checkpoint, tmp_path / "cut", lambda n: n // 2)
    problem = f"{weights}: the safetensors file is cut short ({size // 2} of the {size} bytes its header describes): " \
              "download or copy it again"
    service, reports = EngineService(), []
    done = threading.Event()
    service.check_checkpoint(str(folder), lambda report: (reports.append(report), done.set()))
    assert done.wait(60)
    assert service.shutdown()
    for report in (reports[0], validate_model(str(folder))):
        assert (report["ok"], report["name"], report["problems"]) == (False, "cut", [problem])
        assert report["summary"] == "cut: its weights cannot be read — 1 problem(s)."


def test_video_attachments_reach_the_session_as_videos(family_checkpoint, shared_dir):
    """Attachment(kind="video") on a SmolVLM2 model: frames in the answer's stats, the token count
    from the headers, and a reopened conversation that holds the video again."""
    video = str(shared_dir / "videos" / "moving_square.mp4")
    service = EngineService()
    loaded = threading.Event()
    service.load(str(family_checkpoint("SmolVLM2-256M-Video-Instruct")), {"device": "cpu", "dtype": "float32"},
                 lambda info, message: loaded.set())
    assert loaded.wait(60) and service.capabilities.video
    attachment = Attachment(video, kind="video")
    counted = service.count_tokens(attachment, "full")
    params = GenerationParams(max_new_tokens=2, ignore_eos=True)
    sink = Recorder()
    service.send("Where does the square go?", [attachment], params, sink)
    done = sink.final
    assert done.finish_reason == "length" and done.stats.video_frames == 6  # a 6 s clip at 1 fps
    turn = service._session.turns[0]
    assert len(turn.videos) == 1 and not turn.images
    assert counted > turn.videos[0].num_image_tokens
    # At the answer's own sampling: 3 frames instead of 6, fewer tokens (the front end's settings).
    fewer = service.count_tokens(attachment, "full", GenerationParams(video_max_frames=3))
    assert turn.videos[0].num_image_tokens // 2 < fewer < counted
    service.set_history([HistoryMessage("user", "Again?", (attachment,))])
    again = Recorder()
    service.send("And?", [], params, again)
    assert again.final.stats.video_frames == 6
    assert service._session.turns[0].videos[0].tile_digests == turn.videos[0].tile_digests
    assert service.shutdown()


def test_earlier_images_a_text_only_model_cannot_read_are_counted_with_one_reason():
    """Trial 60: "3 earlier files of this chat are not in the model's context: … it takes no images (got
    1); remove the image or load a vision model": one file per refusal, and nothing there to remove."""
    from engine.api.errors import UnsupportedOperation

    class TextOnly(ScriptedSession):
        def preprocess(self, images, detail="full"):
            raise UnsupportedOperation(f"SmolLM2 is a text-only model: it takes no images (got {len(images)}); "
                                       "remove the image or load a vision model")

    service = scripted(TextOnly())
    history = [HistoryMessage("user", "q1", (Attachment("/img/a.png"), Attachment("/img/b.png"))),
               HistoryMessage("assistant", "a1"), HistoryMessage("user", "q2", (Attachment("/img/c.png"),)),
               HistoryMessage("assistant", "a2")]
    service.set_history(history)
    service.send("q3", [], GenerationParams(), done := Recorder())
    assert done.final.stats.notice == ("3 earlier files of this chat are not in the model's context: the model "
                                       "reads text only.")
    assert service.shutdown()


def test_an_unreadable_image_of_an_earlier_message_is_left_out_not_the_whole_history(caplog):
    """Issue 18: a stored image deleted since must not fail set_history half-way (the next answer then ran on
    a conversation cut short, silently): that image is left out, with a warning, and the rest is kept."""

    class MissingImage(ScriptedSession):
        def preprocess(self, images, detail="full"):
            if any("gone" in i for i in images):
                raise ImageError(f"Image file not found: {images[0]}")
            return super().preprocess(images, detail)

    session = MissingImage()
    service = scripted(session)
    history = [HistoryMessage("user", "q1", (Attachment("/img/gone.png"), Attachment("/img/b.png"))),
               HistoryMessage("assistant", "a1"), HistoryMessage("user", "q2"), HistoryMessage("assistant", "a2")]
    with caplog.at_level(logging.WARNING, logger="engine.service"):
        service.set_history(history)
        service.send("q3", [], GenerationParams(), done := Recorder())
        assert done.final.finish_reason == "stop"
    assert [(t.role, t.text, t.images) for t in session.turns[:4]] == [
        ("user", "q1", ["tiles of /img/b.png"]), ("assistant", "a1", []), ("user", "q2", []), ("assistant", "a2", [])]
    # The front end hears it with the answer, once (an image chat reopened on a text-only model said nothing);
    # the log has the same line.
    assert done.final.stats.notice == ("1 earlier file of this chat is not in the model's context: Image file not "
                                       "found: /img/gone.png.")
    assert done.final.stats.notice in caplog.messages
    service.send("q4", [], GenerationParams(), again := Recorder())
    assert again.final.stats.notice == ""
    # Found by a trial: the window re-states the same history with each request (after the model
    # switch that rebuilt it); that second set_history cleared the reasons and the answer said nothing.
    assert service.shutdown()
    service = scripted(session := MissingImage())
    service.set_history(history)
    service.set_history(history)
    service.send("q3", [], GenerationParams(), third := Recorder())
    assert third.final.stats.notice == done.final.stats.notice
    assert service.shutdown()


def test_model_info_says_the_context_the_conversation_holds(tiny_checkpoint):
    """A context size set below the model's (Settings ▸ Context size) is the context the front ends'
    budgets count against: the loaded model's capabilities say the cache's capacity, not the
    checkpoint's maximum."""
    infos = []
    for options in ({"device": "cpu"}, {"device": "cpu", "context_size": 512}):
        service = EngineService()
        loaded = threading.Event()
        service.load(str(tiny_checkpoint), options, lambda info, message: (infos.append(info), loaded.set()))
        assert loaded.wait(60)
        capacity = service._session.cache.capacity
        assert service.shutdown()
        assert infos[-1].capabilities.max_context == capacity
    assert infos[1].capabilities.max_context == 512 < infos[0].capabilities.max_context
    # The devices the engine can run on here, for Settings to offer only those (trial 62).
    import torch

    assert infos[0].devices == (("cuda",) if torch.cuda.is_available() else ()) + \
        (("mps",) if torch.backends.mps.is_available() else ()) + ("cpu",)


def test_count_text_tokens_is_what_the_text_adds_to_the_prompt(tiny_checkpoint):
    """The window's check of a long message before Send: the count is the prompt tokens the text
    takes (two sends differ in prompt length by their texts' counts), -1 before a model is loaded."""
    service = EngineService()
    assert service.count_text_tokens("Hello") == -1
    loaded = threading.Event()
    service.load(str(tiny_checkpoint), {"device": "cpu"}, lambda info, message: loaded.set())
    assert loaded.wait(60)
    short, long = "Hi", "The quick brown fox jumps over the lazy dog. " * 40 + "Ünïcödé and 日本語 too."
    prompts = []
    for text in (short, long):
        service.set_history([])
        sink = Recorder()
        service.send(text, [], GenerationParams(max_new_tokens=1, ignore_eos=True), sink)
        prompts.append(sink.final.stats.prompt_tokens)
    assert service.count_text_tokens(short) == 1
    assert prompts[1] - prompts[0] == service.count_text_tokens(long) - 1
    assert service.count_text_tokens(long) > 400
    assert service.shutdown()


def test_the_prompt_overhead_is_what_a_prompt_has_besides_its_message(tiny_checkpoint):
    """Trial 75 N5: the window checks a message against the context with the system prompt and the
    template's markup beside it. A one-message prompt is the message's tokens plus the overhead, or
    one fewer where the markup's last token merges with the message's first ("User: " before a word
    or before "123"), with a system prompt or without: never more; -1 before a model is loaded."""
    service = EngineService()
    assert service.count_prompt_overhead(None) == -1
    loaded = threading.Event()
    service.load(str(tiny_checkpoint), {"device": "cpu"}, lambda info, message: loaded.set())
    assert loaded.wait(60)
    sentences = ("The quick brown fox jumps over the lazy dog. " * 12).strip()  # (stripped, as the window sends)
    exact = []
    for system in (None, "You are a careful assistant. Answer in one short line."):
        for text in (sentences, "123 numbers first", "日本語 first", "\nA newline first"):
            service.set_history([])
            sink = Recorder()
            service.send(text, [], GenerationParams(max_new_tokens=1, ignore_eos=True), sink, system_prompt=system)
            overhead = service.count_prompt_overhead(system)
            assert overhead > (10 if system else 3)
            counted, prompt = service.count_text_tokens(text) + overhead, sink.final.stats.prompt_tokens
            assert counted - 1 <= prompt <= counted, (system, text)
            exact.append(prompt == counted)
    assert True in exact and False in exact  # (both kinds of meeting are in the texts)
    assert service.count_prompt_overhead("You are a careful assistant. Answer in one short line.") \
        - service.count_prompt_overhead(None) >= service.count_text_tokens("You are a careful assistant.")
    assert service.shutdown()
