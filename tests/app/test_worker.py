"""EngineWorker on its own thread, driven through its signals with a fake session."""

from __future__ import annotations

import threading

import pytest

from app.worker import describe_error, start_worker, stop_worker
from tests.app.fakes import FakeFactory, FakeSession
from tests.app.helpers import Relay
from app.qt_compat import emit


@pytest.fixture
def start():
    """Start workers on fake factories; returns (worker, relay); threads are joined afterwards."""
    started = []

    def make(factory):
        thread, worker = start_worker(factory)
        relay = Relay(worker)
        started.append((thread, worker, relay))
        return worker, relay

    yield make
    for thread, worker, _relay in started:
        assert stop_worker(thread, worker)


def load(qtbot, relay, path="/models/fake") -> dict:
    with qtbot.waitSignals([relay.model_loading, relay.model_loaded], order="strict", timeout=5000):
        emit(relay.load, path, None, None)
    assert [name for name, _ in relay.events] == ["model_loading", "model_loaded"]
    assert relay.events[0][1] == path
    info = relay.events[1][1]
    relay.events.clear()
    return info


def test_signals_in_order_token_token_finished(qtbot, start):
    session = FakeSession(tokens=["Hi", " there"])
    factory = FakeFactory(session)
    worker, relay = start(factory)
    info = load(qtbot, relay)
    assert info == {"model_name": "FakeVLM-256M", "device": "cpu", "dtype": "float32", "weights": "", "path": "/models/fake",
                    "folder": "", "vision": True}
    assert factory.loads[0][3] != threading.get_ident()  # loaded in the worker thread

    with qtbot.waitSignals(
        [relay.token, relay.token, relay.finished],
        order="strict",
        check_params_cbs=[lambda t: t == "Hi", lambda t: t == " there", lambda r: r["finish_reason"] == "stop"],
        timeout=5000,
    ):
        worker.request_generate("hello", [], {"max_new_tokens": 16})
    assert relay.events[:2] == [("token", "Hi"), ("token", " there")]
    assert [name for name, _ in relay.events] == ["token", "token", "finished"]
    result = relay.events[-1][1]
    assert result["generated_tokens"] == 2 and result["prompt_tokens"] == 42 and result["error"] is None
    assert session.calls[0]["params"].max_new_tokens == 16
    assert session.calls[0]["thread"] != threading.get_ident()


def test_max_new_tokens_reaches_the_engine(qtbot, start):
    worker, relay = start(FakeFactory(FakeSession(tokens=list("abcdef"))))
    load(qtbot, relay)
    with qtbot.waitSignal(relay.finished, timeout=5000) as blocker:
        worker.request_generate("x", [], {"max_new_tokens": 3})
    assert blocker.args[0]["finish_reason"] == "length"
    assert blocker.args[0]["generated_tokens"] == 3


def test_load_failure_is_reported(qtbot, start):
    _worker, relay = start(FakeFactory(fail="config.json not found in /nowhere"))
    with qtbot.waitSignals([relay.model_loading, relay.model_load_failed], order="strict", timeout=5000):
        emit(relay.load, "/nowhere", None, None)
    assert relay.events == [("model_loading", "/nowhere"), ("model_load_failed", "config.json not found in /nowhere")]


def test_generate_without_model_reports_error_then_finished(qtbot, start):
    worker, relay = start(FakeFactory())
    with qtbot.waitSignals([relay.error, relay.finished], order="strict", timeout=5000):
        worker.request_generate("hello", [], {})
    assert relay.events == [
        ("error", "RuntimeError: No model is loaded yet."),
        ("finished", {"finish_reason": "error", "error": "RuntimeError: No model is loaded yet."}),
    ]


def test_image_error_gives_error_then_finished(qtbot, start):
    worker, relay = start(FakeFactory(FakeSession(image_error="cannot identify image file 'x.png'")))
    load(qtbot, relay)
    with qtbot.waitSignals([relay.error, relay.finished], order="strict", timeout=5000):
        worker.request_generate("what?", ["x.png"], {})
    assert relay.events == [
        ("error", "cannot identify image file 'x.png'"),
        ("finished", {"finish_reason": "error", "error": "cannot identify image file 'x.png'"}),
    ]


def test_cancel_from_ui_thread_while_generating(qtbot, start):
    session = FakeSession(tokens=["t"] * 1000, delay=0.005)
    worker, relay = start(FakeFactory(session))
    load(qtbot, relay)
    with qtbot.waitSignal(relay.finished, timeout=10_000) as blocker:
        worker.request_generate("go", [], {})
        qtbot.waitUntil(lambda: session.yielded >= 5, timeout=5000)
        worker.cancel()
    assert blocker.args[0]["finish_reason"] == "cancelled"
    assert 5 <= blocker.args[0]["generated_tokens"] < 1000


def test_cancel_before_the_queued_generation_starts(qtbot, start):
    session = FakeSession(tokens=["t"] * 100)
    gate = threading.Event()

    class GatedFactory(FakeFactory):
        def __call__(self, path, device, dtype):
            if path == "/models/slow":
                gate.wait(5)  # keeps the worker thread busy while the UI queues and cancels
            return super().__call__(path, device, dtype)

    worker, relay = start(GatedFactory(session))
    load(qtbot, relay)
    emit(relay.load, "/models/slow", None, None)  # the worker thread blocks in this load
    worker.request_generate("go", [], {})
    worker.cancel()
    gate.set()
    qtbot.waitUntil(lambda: any(name == "finished" for name, _ in relay.events), timeout=5000)
    finished = [arg for name, arg in relay.events if name == "finished"]
    assert finished == [{"finish_reason": "cancelled", "error": None}]
    assert session.calls == []  # cancelled before the engine was asked at all


def test_cancel_when_idle_does_not_poison_next_answer(qtbot, start):
    worker, relay = start(FakeFactory(FakeSession(tokens=["a", "b"])))
    load(qtbot, relay)
    worker.cancel()
    with qtbot.waitSignal(relay.finished, timeout=5000) as blocker:
        worker.request_generate("go", [], {})
    assert blocker.args[0]["finish_reason"] == "stop"


def test_describe_error_keeps_engine_messages_and_names_others():
    from engine.api.errors import PromptTooLongError

    assert describe_error(PromptTooLongError("prompt has 9000 tokens, context is 8192")) == (
        "prompt has 9000 tokens, context is 8192"
    )
    assert describe_error(ValueError("bad")) == "ValueError: bad"


def test_history_is_synced_into_the_session_keeping_the_common_prefix(qtbot, start):
    session = FakeSession(tokens=["ok"])
    worker, relay = start(FakeFactory(session))
    load(qtbot, relay)
    history = [{"role": "user", "text": "q1", "images": ["/img/a.png"]}, {"role": "assistant", "text": "a1", "images": []}]
    with qtbot.waitSignal(relay.finished, timeout=5000):
        worker.request_generate("q2", [], {"image_detail": "fast", "system_prompt": "Be brief."}, history=history)
    assert session.calls[-1]["turns"] == [("user", "q1", 1), ("assistant", "a1", 0)]
    assert session.calls[-1]["system_prompt"] == "Be brief."
    assert session.preprocessed == [("/img/a.png", "fast")]
    turn_objects = list(session.turns)

    # Continuing the same conversation keeps every turn object (nothing preprocessed again).
    history += [{"role": "user", "text": "q2", "images": []}, {"role": "assistant", "text": "ok", "images": []}]
    with qtbot.waitSignal(relay.finished, timeout=5000):
        worker.request_generate("q3", [], {}, history=history)
    assert session.turns[:4] == turn_objects
    assert session.preprocessed == [("/img/a.png", "fast")]

    # Regenerating the first answer: the session drops everything after the first user turn.
    with qtbot.waitSignal(relay.finished, timeout=5000):
        worker.request_generate("q1", ["/img/a.png"], {}, history=[])
    assert session.calls[-1]["turns"] == []


def test_load_options_reach_the_factory(qtbot, start):
    factory = FakeFactory()
    worker, relay = start(factory)
    worker.configure({"cache_kind": "contiguous", "context_size": 4096})
    load(qtbot, relay)
    assert factory.options == {"cache_kind": "contiguous", "context_size": 4096}


def test_image_tokens_are_counted_in_the_worker(qtbot, start):
    worker, relay = start(FakeFactory())
    load(qtbot, relay)
    seen = []
    worker.image_tokens.connect(lambda p, d, n: seen.append((p, d, n)))
    worker.count_image_tokens(["/img/a.png"], "balanced")
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)  # PySide queues the lambda to the worker's thread
    assert seen == [("/img/a.png", "balanced", 320)]


def test_expected_engine_errors_log_one_line_without_traceback(qtbot, start, caplog, capsys):
    import logging

    caplog.set_level(logging.DEBUG, logger="app.worker")
    _worker, relay = start(FakeFactory(fail="model.safetensors has no tensor 'lm_head.weight'"))
    with qtbot.waitSignal(relay.model_load_failed, timeout=5000):
        emit(relay.load, "/models/broken", None, None)
    failed = [r for r in caplog.records if "/models/broken" in r.getMessage()]
    assert [r.levelname for r in failed] == ["WARNING"]
    assert "no tensor 'lm_head.weight'" in failed[0].getMessage()
    assert failed[0].exc_info is None
    assert "Traceback" not in caplog.text
    assert "Traceback" not in capsys.readouterr().err


def test_unexpected_errors_keep_their_traceback(qtbot, start, caplog):
    import logging

    def broken_factory(path, device, dtype, **options):
        raise KeyError("bug")

    caplog.set_level(logging.DEBUG, logger="app.worker")
    _worker, relay = start(broken_factory)
    with qtbot.waitSignal(relay.model_load_failed, timeout=5000):
        emit(relay.load, "/models/x", None, None)
    assert "Traceback" in caplog.text and "KeyError" in caplog.text
