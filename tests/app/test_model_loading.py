"""Loading a model through the window: loading state, failure, recovery."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from app.backends.fake import FakeBackend
from tests.app.helpers import drop, file_mime


class SlowFactory(FakeBackend):
    """Blocks in load until released, so the test can see the loading state."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.release = threading.Event()

    def _load(self, model, options, on_done):
        self.release.wait(5)
        super()._load(model, options, on_done)


def test_window_shows_loading_state_and_disables_send(qtbot, make_window):
    factory = SlowFactory()
    win = make_window(factory, wait_loaded=False)
    qtbot.waitUntil(lambda: win.model_picker.text() == "Loading model…", timeout=5000)
    qtbot.keyClicks(win.composer, "early question")
    assert not win.send_button.isEnabled()
    assert "Loading model from /models/fake" in win.stats_label.text()
    factory.release.set()
    qtbot.waitUntil(lambda: win.send_button.isEnabled(), timeout=5000)
    assert win.model_picker.text().startswith("FakeVLM-256M")
    assert win.stats_label.text() == "FakeVLM-256M · cpu · float32 · ready"
    assert win.composer.toPlainText() == "early question"


def test_load_failure_shows_error_and_window_stays_usable(qtbot, make_window, png):
    factory = FakeBackend(fail="/models/broken: config.json is missing")
    win = make_window(factory, wait_loaded=False)
    qtbot.waitUntil(lambda: not win.banner.isHidden(), timeout=5000)

    assert win.banner.message() == "Could not load the model: /models/broken: config.json is missing"
    assert win.stats_label.text() == "No model loaded"
    assert win.model_picker.isEnabled() and win.model_picker.text() == "Choose a model…"
    qtbot.keyClicks(win.composer, "still typing")
    assert drop(win.composer, file_mime(png))
    assert win.composer.toPlainText() == "still typing"
    assert win.attachments.paths() == [str(png.resolve())]
    assert not win.send_button.isEnabled()

    # Choosing another model afterwards works.
    factory.fail = None
    win.model_picker.model_chosen.emit("/models/good")
    qtbot.waitUntil(lambda: win.send_button.isEnabled(), timeout=5000)
    assert win.model_info["path"] == "/models/good"
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    assert win.transcript.messages()[-1]["text"] == "Hello, world!"


def test_window_without_model_asks_for_one(qtbot, make_window):
    win = make_window((FakeBackend()), model_path=None, wait_loaded=False)
    assert win.model_picker.text() == "Choose a model…"
    assert "No model loaded" in win.stats_label.text()
    qtbot.keyClicks(win.composer, "hello")
    assert not win.send_button.isEnabled()


def test_a_model_that_fails_to_load_leaves_the_one_in_use(qtbot, make_window):
    """Trial 50: picking a folder missing a tensor said why, but the working model was gone from the
    window ("No model loaded") although the engine still held it: the user had to pick and wait for
    it again. The window goes on with it."""
    factory = FakeBackend()
    win = make_window(factory)
    assert win.model_info["path"] == "/models/fake"
    factory.fail = "1 tensor(s) missing from the checkpoint: model.layers.1.q_proj.weight"
    win.model_picker.model_chosen.emit("/models/missing-tensor")
    qtbot.waitUntil(lambda: not win.banner.isHidden(), timeout=5000)
    assert win.banner.message() == ("Could not load the model: 1 tensor(s) missing from the checkpoint: "
                                    "model.layers.1.q_proj.weight\nStill using FakeVLM-256M.")
    assert win.model_info["path"] == "/models/fake" and win.controller.ready
    assert win.model_picker.text().startswith("FakeVLM-256M")
    assert win.stats_label.text() == "FakeVLM-256M · cpu · float32 · ready"
    win.composer.setPlainText("still there?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    assert win.transcript.messages()[-1]["text"] == "Hello, world!"


def test_a_server_model_that_fails_to_load_leaves_the_local_one_in_use():
    """The switch between the local engine and servers goes back to the backend that holds the model."""
    import queue

    from app.backends.switch import EngineSwitch

    local, remote = FakeBackend(), FakeBackend(fail="Box: 401 wrong key")
    switch = EngineSwitch(local, lambda name: remote)
    results: queue.Queue = queue.Queue()
    switch.load("/models/fake", {}, lambda info, error: results.put((info, error)))
    assert results.get(timeout=5)[0].path == "/models/fake"
    switch.load("remote:Box::big-model", {}, lambda info, error: results.put((info, error)))
    assert results.get(timeout=5) == (None, "Box: 401 wrong key")
    assert switch.current is local and switch.info.path == "/models/fake"
