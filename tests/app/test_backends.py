"""The backends the window talks to: events cross from the engine thread to the UI thread as queued
signals, in order; the fake backend behaves like the engine (cancel, errors, history); and
``SMOLCHAT_BACKEND`` picks the backend."""

from __future__ import annotations

import threading
import time

import pytest

from app.backends import backend_from_env
from app.backends.fake import FakeBackend
from app.backends.local import LocalBackend
from app.backends.qt import BackendBridge
from engine.api import (
    Attachment,
    ChatBackend,
    DoneEvent,
    GenerationParams,
    GenerationStats,
    HistoryMessage,
    ProgressEvent,
    TokenEvent,
)


class Session:
    """ChatSession's shape, answering with fixed words."""

    model_name, device, dtype, weights = "Words", "cpu", "float32", "float32"

    def __init__(self, words):
        self.words, self.turns, self.system_prompt = words, [], None

    def send(self, text, images=(), params=None):
        return iter([TokenEvent(w, i) for i, w in enumerate(self.words)] + [DoneEvent("stop")])

    def cancel(self):
        pass

    def reset(self):
        self.turns.clear()

    def count_image_tokens(self, image, detail="full"):
        return {"full": 1088, "fast": 64}[detail]


@pytest.fixture
def bridge(qtbot):
    bridge = BackendBridge()
    received = []
    bridge.event.connect(lambda e: received.append((e, threading.get_ident())))
    bridge.loaded_as.connect(lambda _n, info, message: received.append(((info, message), threading.get_ident())))
    bridge.received = received
    return bridge


def done_events(bridge) -> list[DoneEvent]:
    return [e for e, _ in bridge.received if isinstance(e, DoneEvent)]


def test_local_backend_events_reach_the_ui_thread_in_order(qtbot, bridge):
    backend = LocalBackend(lambda model, options: Session(["Hi", " there"]))
    assert isinstance(backend, ChatBackend)
    backend.load("/models/words", {"device": None}, bridge.load_callback(1))
    backend.send("hello", [], GenerationParams(max_new_tokens=4), bridge.sink)
    qtbot.waitUntil(lambda: bool(done_events(bridge)), timeout=5000)
    events = [e for e, _ in bridge.received]
    info, message = events[0]
    assert message is None and info.name == "Words" and info.path == "/models/words" and info.device == "cpu"
    # Tokens that came while the UI thread was busy arrive joined into one (BackendBridge).
    assert events[1:-1] in ([TokenEvent("Hi", 0), TokenEvent(" there", 1)], [TokenEvent("Hi there", -1)])
    assert isinstance(events[-1], DoneEvent) and events[-1].finish_reason == "stop"
    assert {thread for _, thread in bridge.received} == {threading.get_ident()}  # delivered in the UI thread
    assert backend.count_attachment_tokens(Attachment("/img/a.png"), "fast") == 64
    assert backend.close()


def test_a_flood_of_tokens_reaches_the_ui_thread_joined_in_order_not_one_signal_each(qtbot, bridge):
    """Trial 64: a server streaming 200,000 chunks in 3 s queued one signal per chunk; the window worked
    through them for 100 s, deaf to Stop and its menus. Tokens waiting are delivered joined, each
    event in its place, so the window draws what came since it last looked."""
    count = 100_000
    progress = ProgressEvent("prefill", 1, 1)

    def flood() -> None:
        for i in range(count):
            bridge.sink(TokenEvent("ab ", i))
            if i == count // 2:
                bridge.sink(progress)
        bridge.sink(DoneEvent("stop", GenerationStats()))
    threading.Thread(target=flood).start()
    qtbot.waitUntil(lambda: bool(done_events(bridge)), timeout=10_000)
    events = [e for e, _ in bridge.received]
    assert len(events) < count // 10  # one signal per token would be 100,002
    assert isinstance(events[-1], DoneEvent) and events.count(progress) == 1
    middle = events.index(progress)
    assert "".join(e.text for e in events[:middle]) == "ab " * (count // 2 + 1)
    assert "".join(e.text for e in events[middle + 1:-1]) == "ab " * (count - count // 2 - 1)
    assert {thread for _, thread in bridge.received} == {threading.get_ident()}


def test_fake_backend_cancel_before_the_queued_answer_starts(qtbot, bridge):
    backend = FakeBackend(tokens=["t"] * 100)
    gate = threading.Event()
    backend.jobs.put(lambda: gate.wait(5))  # keeps the fake's thread busy while we queue and cancel
    backend.load("/models/fake", {}, bridge.load_callback(1))
    backend.send("go", [], GenerationParams(), bridge.sink)
    backend.cancel()
    gate.set()
    qtbot.waitUntil(lambda: bool(done_events(bridge)), timeout=5000)
    assert [e.finish_reason for e in done_events(bridge)] == ["cancelled"]
    assert backend.calls == []  # cancelled before the engine was asked at all
    # ... and the cancel does not poison the next answer.
    backend.send("again", [], GenerationParams(), bridge.sink)
    qtbot.waitUntil(lambda: len(done_events(bridge)) == 2, timeout=5000)
    assert done_events(bridge)[-1].finish_reason == "stop"
    assert backend.close()


def test_fake_backend_follows_history_and_limits(qtbot, bridge):
    backend = FakeBackend(tokens=list("abcdef"))
    backend.load("/models/fake", {"weights": "int8", "device": None}, bridge.load_callback(1))
    backend.set_history([HistoryMessage("user", "q1", (Attachment("/img/a.png"),)), HistoryMessage("assistant", "a1")])
    backend.send("q2", [], GenerationParams(max_new_tokens=3), bridge.sink, system_prompt="Be brief.")
    qtbot.waitUntil(lambda: bool(done_events(bridge)), timeout=5000)
    done = done_events(bridge)[-1]
    assert done.finish_reason == "length" and done.stats.generated_tokens == 3
    assert backend.calls[-1]["turns"] == [("user", "q1", 1), ("assistant", "a1", 0)]
    assert backend.calls[-1]["system_prompt"] == "Be brief."
    assert backend.options == {"weights": "int8"}
    assert backend.calls[-1]["thread"] != threading.get_ident()
    assert backend.close()


def test_smolchat_backend_names_the_backend(monkeypatch):
    monkeypatch.setenv("SMOLCHAT_BACKEND", "app.backends.fake:failing_backend")
    backend = backend_from_env()
    assert isinstance(backend, FakeBackend) and backend.fail
    backend.close()
    monkeypatch.delenv("SMOLCHAT_BACKEND")
    local = backend_from_env()
    assert isinstance(local, LocalBackend)
    assert local.close()


def test_an_answer_that_raises_ends_in_an_error_and_the_thread_goes_on(qtbot, bridge, caplog):
    """The fake and the remote backend have one worker thread each: a bug in one answer once ended it,
    so that answer never finished (the window "generating…" for good, Stop doing nothing) and every later
    load and answer waited on a dead thread. Now the answer ends with the local engine's error shape."""
    backend = FakeBackend(tokens=["ok"])
    backend.load("/models/fake", {}, bridge.load_callback(1))
    real = backend._answer

    def broken(*args):
        args[4](TokenEvent("so far", 1))  # (the sink) a token, then the bug
        raise TypeError("sequence item 1: expected str instance, int found")
    backend._answer = broken
    with caplog.at_level("ERROR", logger="app.backends.jobs"):
        backend.send("go", [], GenerationParams(), bridge.sink)
        qtbot.waitUntil(lambda: bool(done_events(bridge)), timeout=5000)
    done = done_events(bridge)[-1]
    assert done.finish_reason == "error" and done.error_type == "TypeError"
    assert done.error == "TypeError: sequence item 1: expected str instance, int found"  # as engine.service says it
    assert "Traceback" in caplog.text and "expected str instance" in caplog.text
    backend._answer = real  # the next answer runs on the same, living thread
    backend.send("again", [], GenerationParams(), bridge.sink)
    qtbot.waitUntil(lambda: len(done_events(bridge)) == 2, timeout=5000)
    assert done_events(bridge)[-1].finish_reason == "stop" and backend.jobs.thread.is_alive()
    assert backend.close()


def test_a_job_that_raises_is_logged_and_the_next_one_runs(caplog):
    from app.backends.jobs import JobThread

    jobs, ran, events = JobThread("Test"), threading.Event(), []

    def bad():
        raise RuntimeError("set_history blew up")

    def done_then_raise(sink):
        sink(DoneEvent("stop"))
        raise RuntimeError("after the end")
    with caplog.at_level("ERROR", logger="app.backends.jobs"):
        jobs.put(bad)
        jobs.put_answer(done_then_raise, events.append)
        jobs.put(ran.set)
        assert ran.wait(5)
    assert [e.finish_reason for e in events] == ["stop"]  # an answer that had ended is not ended twice
    assert "set_history blew up" in caplog.text and "after the end" in caplog.text
    assert jobs.close()


def test_a_remote_load_that_raises_reports_its_error(monkeypatch):
    """A load reports every failure through its callback (the window waits for it), even a bug."""
    import app.backends.remote as remote
    from app.backends.remote_http import Server
    from tests.app.remote_fakes import FakeOpenAI

    def odd(*args, **kwargs):
        raise AttributeError("'str' object has no attribute 'get'")
    with FakeOpenAI() as fake:
        backend = remote.RemoteBackend(Server("fake", fake.url))
        results = []

        def load_and_wait() -> None:
            backend.load(remote.remote_spec("fake", "ok"), {}, lambda info, error: results.append((info, error)))
            deadline = time.monotonic() + 10
            count = len(results)
            while len(results) == count:
                assert time.monotonic() < deadline, "the load never reported"
                time.sleep(0.01)
        monkeypatch.setattr(remote, "probe_capabilities", odd)
        load_and_wait()
        monkeypatch.undo()
        load_and_wait()  # and the backend's thread still runs
    assert results[0] == (None, "fake: AttributeError: 'str' object has no attribute 'get'")
    assert results[1][1] is None and results[1][0].name == "ok"
    assert backend.close()
