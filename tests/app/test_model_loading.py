"""Loading a model through the window: loading state, failure, recovery."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import Qt

from app.backends.fake import FakeBackend
from tests.app.helpers import drop, file_mime


class SlowFactory(FakeBackend):
    """Blocks in load until released, so the test can see the loading state."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.release = threading.Event()

    def _load(self, model, options, on_done, ticket):
        self.release.wait(5)
        super()._load(model, options, on_done, ticket)


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
    # Not "Ask about an image…": no model says what it reads (trial 57, after a text-only model).
    assert win.composer.placeholderText() == "Load a model to ask a question…"
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


# -- stopping a load (trial 57: a 2B model picked by mistake on a small machine could only be waited out) --
def test_esc_stops_a_load_and_the_model_before_stays(qtbot, make_window):
    factory = FakeBackend()
    win = make_window(factory)
    factory.load_delay = 30  # a model that would take half a minute
    win.model_picker.model_chosen.emit("/models/SmolVLM2-2.2B-Instruct")
    qtbot.waitUntil(lambda: win.controller.loading and win.stop_button.isVisible(), timeout=5000)
    assert not win.send_button.isVisible()
    assert win.stop_button.isEnabled() and win.stop_button.toolTip() == "Stop loading the model (Esc)"
    assert win.stop_button.accessibleName() == "Stop loading the model (Esc)"
    assert win.actions["stop"].isEnabled() and win.actions["stop"].text() == "&Stop loading the model\tEsc"
    assert win.stats_label.text() == "Loading model from /models/SmolVLM2-2.2B-Instruct… · Esc stops"
    assert win.model_picker.isEnabled()  # another model can be picked meanwhile
    qtbot.waitUntil(lambda: len(factory.loads) == 2, timeout=5000)

    qtbot.keyClick(win.composer, Qt.Key.Key_Escape)
    assert not win.controller.loading and win.controller.ready
    assert win.model_info["path"] == "/models/fake"
    assert win.banner.message() == "Stopped loading SmolVLM2-2.2B-Instruct. Still using FakeVLM-256M."
    assert win.stats_label.text() == "FakeVLM-256M · cpu · float32 · ready"
    assert win.model_picker.text().startswith("FakeVLM-256M")
    assert win.send_button.isVisible() and not win.stop_button.isVisible()
    assert win.actions["stop"].text() == "&Stop answer\tEsc" and not win.actions["stop"].isEnabled()
    # The backend stopped too (not in 30 s): the next question is answered by the model before.
    win.composer.setPlainText("still there?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    assert win.transcript.messages()[-1]["text"] == "Hello, world!"
    assert factory.info.path == "/models/fake"


def test_stopping_the_first_load_leaves_no_model_and_a_message_waiting(qtbot, make_window, png, tmp_path):
    factory = FakeBackend(load_delay=30)
    model = tmp_path / "SmolVLM2-2.2B-Instruct"
    model.mkdir()
    win = make_window(factory, model_path=str(model), wait_loaded=False)
    qtbot.waitUntil(lambda: win.stop_button.isVisible(), timeout=5000)
    qtbot.keyClicks(win.composer, "early question")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.banner.message().startswith("The model is still loading")
    assert drop(win.composer, file_mime(png))
    qtbot.mouseClick(win.stop_button, Qt.MouseButton.LeftButton)
    assert not win.controller.loading and not win.controller.ready
    assert win.banner.message() == "Stopped loading SmolVLM2-2.2B-Instruct: no model is loaded."
    assert win.stats_label.text() == "No model loaded" and win.model_picker.text() == "Choose a model…"
    assert win.composer.placeholderText() == "Load a model to ask a question…"
    assert win.composer.toPlainText() == "early question"  # kept
    # Trial 58: "counting image tokens…" for good, with no model to count them.
    assert win.pending_label.text().startswith("1 image") and "counting" not in win.pending_label.text()
    # It can be picked again from the menu (trial 58: a --model path whose load was stopped was not listed).
    assert str(model) in [m["path"] for m in win.model_picker.local_models()]
    assert not win.stop_button.isVisible() and win.send_button.isVisible() and not win.send_button.isEnabled()
    # Another model loads, at once (the stopped load does not hold the backend's thread for 30 s).
    factory.load_delay = 0
    win.model_picker.model_chosen.emit("/models/small")
    assert win.banner.message() == ""  # the stopped load is not news once another begins (trial 58)
    qtbot.waitUntil(lambda: win.send_button.isEnabled(), timeout=5000)
    assert win.model_info["path"] == "/models/small"


def test_new_engine_settings_during_a_stopped_load_are_said_to_wait(qtbot, make_window):
    """Trial 58: weights changed in Settings while a model loaded restart that load; stopped, the model
    before stayed on its old settings while Settings showed the new ones, without a word."""
    factory = FakeBackend()
    win = make_window(factory)
    factory.load_delay = 30
    win.model_picker.model_chosen.emit("/models/huge")
    qtbot.waitUntil(lambda: len(factory.loads) == 2, timeout=5000)
    win.controller.reload_when_idle(None, None, {"weights": "int8"})  # (what Settings ▸ OK does)
    qtbot.waitUntil(lambda: len(factory.loads) == 3, timeout=5000)
    assert factory.loads[-1][:2] == ("/models/huge", {"device": None, "dtype": None, "weights": "int8"})
    win.stop()
    assert win.banner.message() == ("Stopped loading huge. Still using FakeVLM-256M. It runs on the engine "
                                    "settings it was loaded with: pick it again to use the new ones.")
    factory.load_delay = 0
    win.model_picker.model_chosen.emit("/models/fake")
    qtbot.waitUntil(lambda: win.controller.ready, timeout=5000)
    factory.load_delay = 30
    win.model_picker.model_chosen.emit("/models/huge")
    qtbot.waitUntil(lambda: win.controller.loading and len(factory.loads) == 5, timeout=5000)
    win.stop()  # the model in use now has the settings: nothing more to say
    assert win.banner.message() == "Stopped loading huge. Still using FakeVLM-256M."


def test_a_stopped_reload_for_new_settings_says_they_wait(qtbot, make_window):
    """Trial 59: Settings ▸ Weights changed, OK, then Esc: "Stopped loading X. Still using X.", and the
    model ran on the old weights while Settings showed the new ones."""
    factory = FakeBackend()
    win = make_window(factory)
    factory.load_delay = 30
    win.controller.reload_when_idle(None, None, {"weights": "int4"})
    qtbot.waitUntil(lambda: win.controller.loading and len(factory.loads) == 2, timeout=5000)
    win.stop()
    assert win.banner.message() == ("Stopped loading fake again: it still runs on the engine settings it was "
                                    "loaded with. Pick it again to use the new ones.")
    assert win.controller.ready and win.model_info["path"] == "/models/fake"


def test_connecting_to_a_server_says_esc_stops_it(qtbot, make_window):
    factory = FakeBackend()
    win = make_window(factory)
    factory.load_delay = 30
    win.model_picker.model_chosen.emit("remote:Box::big-model")
    assert win.stats_label.text() == "Connecting to big-model on Box… · Esc stops"
    assert win.stop_button.isVisible()


def test_a_model_picked_while_another_loads_replaces_that_load(qtbot, make_window):
    factory = FakeBackend()
    win = make_window(factory)
    factory.load_delay = 30
    win.model_picker.model_chosen.emit("/models/huge")
    qtbot.waitUntil(lambda: len(factory.loads) == 2, timeout=5000)
    factory.load_delay = 0
    win.model_picker.model_chosen.emit("/models/small")
    qtbot.waitUntil(lambda: win.controller.ready, timeout=5000)  # not after the first one's 30 s
    assert win.model_info["path"] == "/models/small" and factory.info.path == "/models/small"
    assert [load[0] for load in factory.loads] == ["/models/fake", "/models/huge", "/models/small"]
    assert "huge" not in win.banner.message()  # replaced, not "stopped": nothing to say about it


def test_a_stopped_load_on_a_server_goes_back_to_the_local_model():
    """The switch routes every call after ``cancel_load`` to the backend in use before, and a stopped
    load's late "stopped" answer does not move it back once another load began."""
    import queue

    from app.backends.switch import EngineSwitch
    from engine.api import LOAD_CANCELLED

    local, remote = FakeBackend(), FakeBackend(load_delay=30)
    switch = EngineSwitch(local, lambda name: remote)
    results: queue.Queue = queue.Queue()
    switch.load("/models/fake", {}, lambda info, error: results.put((info, error)))
    assert results.get(timeout=5)[0].path == "/models/fake"
    assert not switch.cancel_load()  # it has loaded: nothing to stop
    switch.load("remote:Box::big-model", {}, lambda info, error: results.put((info, error)))
    assert switch.current is remote
    assert switch.cancel_load()
    assert switch.current is local and switch.info.path == "/models/fake"
    assert results.get(timeout=5) == (None, LOAD_CANCELLED)
    remote.load_delay = 0
    switch.load("remote:Box::small-model", {}, lambda info, error: results.put((info, error)))
    assert results.get(timeout=5)[0].path == "remote:Box::small-model"
    assert switch.current is remote


def test_a_stopped_server_load_keeps_the_server_model_before():
    """A server slow to list its models: the load stopped meanwhile leaves the model in use on it, and
    the next load does not wait for the stopped one's request (trial 58: it waited out its timeout)."""
    from app.backends.remote import RemoteBackend, remote_spec
    from app.backends.remote_http import Server
    from engine.api import LOAD_CANCELLED
    from tests.app.remote_fakes import FakeOpenAI

    with FakeOpenAI() as fake:
        backend = RemoteBackend(Server("fake", fake.url))
        done = threading.Semaphore(0)
        results = []

        def on_done(info, error):
            results.append((info, error))
            done.release()
        backend.load(remote_spec("fake", "ok"), {}, on_done)
        assert done.acquire(timeout=10) and results[-1][1] is None
        held = fake.hold_models = threading.Event()
        backend.load(remote_spec("fake", "text-only"), {}, on_done)
        deadline = time.monotonic() + 10
        while not fake.models_held:  # the request for /v1/models has arrived, and waits
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert backend.cancel_load()
        assert done.acquire(timeout=10) and results[-1] == (None, LOAD_CANCELLED)
        assert fake.models_held == 1  # answered while its request still waits on the server
        assert backend.info.name == "ok" and backend.model == "ok" and backend.server.url == fake.url
        assert not backend.cancel_load()
        fake.hold_models = None
        backend.load(remote_spec("fake", "text-only"), {}, on_done)
        assert done.acquire(timeout=10) and results[-1][0].name == "text-only"
        assert fake.models_held == 1 and not held.is_set()  # not after the stopped request's end
        held.set()
        backend.close()


def test_the_model_managers_use_during_an_answer_says_why_nothing_loads(qtbot, make_window):
    """Trial 79 P1: Model ▸ Manage models ▸ Use selected while an answer streamed closed the manager, said
    nothing and loaded nothing (the picker is disabled then; the manager's button was not)."""
    backend = FakeBackend(tokens=["word "] * 400, delay=0.01)
    win = make_window(backend)
    manager = win.open_model_manager()
    win.composer.setPlainText("A long story, please.")
    win.send_message()
    qtbot.waitUntil(lambda: win.controller.busy, timeout=5000)
    manager.use_requested.emit("/models/other")
    assert not win.controller.loading and win.controller.asked != "/models/other"
    assert win.banner.message() == ("An answer is being written: other was not loaded. Stop the answer (Esc), "
                                    "then pick the model again.")
    win.stop()
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=5000)
    assert win.banner.isHidden()  # not said once the answer has ended (trial 80 P4)
    manager.use_requested.emit("/models/other")  # after it: loaded
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/other", timeout=5000)
