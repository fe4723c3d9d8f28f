"""Model manager (download with a fake Hub, local folders, checks), model switching, and settings."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import replace

import huggingface_hub
import pytest
from huggingface_hub import errors as hf_errors
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QPushButton

from app.backends.fake import FakeBackend
from app.main_window import NO_MODEL_NOTE
from app.settings import (
    AppSettings,
    generation_defaults,
    known_models,
    load_settings,
    open_settings,
    save_settings,
    unreadable_models,
)
from app.settings_dialog import SettingsDialog
from tests.engine.conftest import tiny_checkpoint  # noqa: F401  (fixture)

REPO = "HuggingFaceTB/SmolVLM-256M-Instruct"


@pytest.fixture
def fake_hub(tiny_checkpoint, tmp_path, monkeypatch):  # noqa: F811
    """Copies the tiny checkpoint file by file through ``tqdm_class``, like huggingface_hub."""
    state = {"offline": False, "gate": None, "calls": 0}

    def snapshot_download(repo_id, *, tqdm_class=None, **_):
        state["calls"] += 1
        if state["offline"]:
            raise hf_errors.LocalEntryNotFoundError("offline")
        dst = tmp_path / "hub" / repo_id.replace("/", "--") / "snapshots" / "abc"
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(tiny_checkpoint.iterdir()):
            if (dst / f.name).exists():
                continue  # resumed: already complete
            bar = tqdm_class(total=f.stat().st_size, unit="B", desc=f.name)
            data = f.read_bytes()
            part = dst / (f.name + ".incomplete")
            with open(part, "wb") as out:
                for i in range(0, len(data), 1 << 16):
                    if state["gate"] is not None:  # a threading.Semaphore: one chunk a release
                        state["gate"].acquire(timeout=5)
                    out.write(data[i:i + (1 << 16)])
                    bar.update(len(data[i:i + (1 << 16)]))
            part.rename(dst / f.name)
            bar.close()
        return str(dst)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return state


@pytest.fixture
def manager(make_window):
    win = make_window(FakeBackend())
    return win.open_model_manager()


def test_catalog_lists_the_smolvlm_family_with_sizes(manager):
    assert len(manager.rows) == 7
    assert "HuggingFaceTB/SmolVLM2-2.2B-Instruct" in manager.rows
    assert manager.rows["HuggingFaceTB/SmolLM2-135M-Instruct"].entry.abilities == "text only"
    assert all(row.entry.size_gb > 0 for row in manager.rows.values())


@pytest.mark.parametrize("size", [(840, 760), (760, 640), (600, 520)])
def test_catalog_rows_keep_their_lines_whole_in_a_small_dialog(qtbot, manager, size):
    """Found by a trial: at 760 x 640 the rows were squeezed below their text's height (descenders
    and second lines clipped). They keep their height and the list scrolls; a long title wraps."""
    from PySide6.QtWidgets import QApplication, QLabel

    manager.resize(*size)
    manager.show()
    qtbot.waitExposed(manager)
    QApplication.processEvents()
    for row in manager.rows.values():
        for label in row.findChildren(QLabel):
            if label.isVisible():
                need = label.heightForWidth(label.width()) if label.wordWrap() else label.sizeHint().height()
                assert label.height() >= need, (row.entry.label, label.text(), label.height(), need)
        assert row.download_button.geometry().right() <= row.width()
    assert manager.width() <= max(size[0], manager.minimumSizeHint().width())


def test_download_shows_progress_checks_and_installs(qtbot, manager, fake_hub):
    row = manager.rows[REPO]
    manager.start_download(REPO)
    qtbot.waitUntil(lambda: row.use_button.isVisibleTo(manager), timeout=60_000)
    done, total = row.last_progress
    assert done == total > 0
    [model] = known_models()
    assert model["repo_id"] == REPO and model["path"].endswith("snapshots/abc")
    assert manager.last_report["ok"], manager.last_report
    with qtbot.waitSignal(manager.use_requested, timeout=5000) as used:
        row.use_button.click()
    assert used.args == [model["path"]]


def test_cancel_then_resume(qtbot, manager, fake_hub):
    # One chunk goes through before the cancel, the rest after it: the download cannot finish first
    # (it did on a busy machine with the gate open until the first progress was seen).
    gate = threading.Semaphore(1)
    fake_hub["gate"] = gate
    row = manager.rows[REPO]
    manager.start_download(REPO)
    qtbot.waitUntil(lambda: row.last_progress[0] > 0, timeout=10_000)
    manager.cancel_download(REPO)
    gate.release(10_000)
    qtbot.waitUntil(lambda: row.download_button.text() == "Resume download", timeout=10_000)
    assert "Cancelled" in row.status.text() and known_models() == []
    fake_hub["gate"] = None
    row.download_button.click()
    qtbot.waitUntil(lambda: len(known_models()) == 1, timeout=60_000)


def test_offline_download_is_clear_and_installs_nothing(qtbot, manager, fake_hub):
    fake_hub["offline"] = True
    row = manager.rows[REPO]
    manager.start_download(REPO)
    qtbot.waitUntil(lambda: "failed" in row.status.text(), timeout=10_000)
    assert "offline" in row.status.text() and known_models() == []


def test_enter_in_the_model_manager_starts_no_download(qtbot, manager, fake_hub):
    """Found by a trial: Ctrl+M then Enter started downloading SmolVLM 256M, the first Download
    button being the dialog's auto-default. Enter in the repo-id field still adds the model typed."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication, QPushButton

    manager.show()
    manager.activateWindow()
    qtbot.waitUntil(manager.isActiveWindow, timeout=5000)
    assert QApplication.focusWidget() is manager.add_input  # the dialog opens with the cursor in the field
    first = manager.rows[REPO].download_button
    for target in (QApplication.focusWidget() or manager, manager, first):
        target.setFocus()
        qtbot.keyClick(QApplication.focusWidget() or manager, Qt.Key.Key_Return)
        qtbot.keyClick(QApplication.focusWidget() or manager, Qt.Key.Key_Enter)
    assert {repo: row.state for repo, row in manager.rows.items() if row.state != "idle"} == {}
    assert fake_hub["calls"] == 0
    assert [b.objectName() for b in manager.findChildren(QPushButton) if b.autoDefault() or b.isDefault()] == []

    manager.add_input.setFocus()
    qtbot.keyClicks(manager.add_input, "someone/tiny-vlm")
    qtbot.keyClick(manager.add_input, Qt.Key.Key_Return)
    assert manager.rows["someone/tiny-vlm"].state == "downloading"
    assert [b.objectName() for b in manager.findChildren(QPushButton) if b.autoDefault() or b.isDefault()] == []
    qtbot.waitUntil(lambda: fake_hub["calls"] == 1, timeout=10_000)
    qtbot.waitUntil(lambda: manager.rows["someone/tiny-vlm"].state != "downloading", timeout=60_000)


def test_local_folder_is_checked_before_it_is_added(qtbot, manager, tiny_checkpoint, tmp_path):  # noqa: F811
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    config = json.loads((broken / "config.json").read_text())
    config["text_config"]["intermediate_size"] = config["text_config"].get("intermediate_size", 64) + 8
    (broken / "config.json").write_text(json.dumps(config))
    with qtbot.waitSignal(manager.tasks.validated, timeout=60_000):
        manager.check_folder(str(broken), register=True)
    qtbot.waitUntil(lambda: manager.last_report.get("path") == str(broken), timeout=5000)
    assert not manager.last_report["ok"] and "shape" in manager.report.toPlainText()
    assert known_models() == []

    with qtbot.waitSignal(manager.tasks.validated, timeout=60_000):
        manager.check_folder(str(tiny_checkpoint), register=True)
    qtbot.waitUntil(lambda: len(known_models()) == 1, timeout=5000)
    assert "✔" in manager.report.toPlainText() and manager.local_list.count() == 1
    # Trial 52: the model added is selected, and Enter on it uses it (only a double click did).
    assert manager.local_list.selectedItems() == [manager.local_list.item(0)]
    used = []
    manager.use_requested.connect(used.append)
    manager.local_list.setFocus()
    qtbot.keyClick(manager.local_list, Qt.Key.Key_Return)
    assert used == [str(tiny_checkpoint)]


def test_the_first_model_added_is_loaded_at_once(qtbot, make_window, tiny_checkpoint):  # noqa: F811
    """Trial 53: with no model loaded, a model added in the manager was only listed; the window kept
    saying "Choose a model…" until "Use selected" was found."""
    win = make_window(FakeBackend(), model_path=None, wait_loaded=False)
    qtbot.waitUntil(lambda: win.model_manager is not None and win.model_manager.isVisible(), timeout=5000)
    manager = win.model_manager
    with qtbot.waitSignal(manager.tasks.validated, timeout=60_000):
        manager.check_folder(str(tiny_checkpoint), register=True)
    qtbot.waitUntil(lambda: win.model_info.get("path") == str(tiny_checkpoint), timeout=10_000)
    assert not manager.isVisible() and len(known_models()) == 1


def test_no_model_opens_the_manager_and_picker_switches_models(qtbot, make_window):
    from app.settings import add_known_model

    factory = (FakeBackend())
    win = make_window(factory, model_path=None, wait_loaded=False)
    qtbot.waitUntil(lambda: win.model_manager is not None and win.model_manager.isVisible(), timeout=5000)
    # The empty chat does not invite a photo nothing could read (found by a GUI trial).
    assert win.transcript._empty.text().startswith("No model loaded.\nChoose or download a model")
    assert win.composer.placeholderText() == "Load a model to ask a question…"
    add_known_model("/models/a", "Model A")
    add_known_model("/models/b", "Model B")
    actions = [a for a in win.model_picker.model_actions() if a.text() in ("Model A", "Model B")]
    actions[0].trigger()
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/a", timeout=5000)
    win.composer.setPlainText("hi")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    actions[1].trigger()  # switch mid-conversation
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/b", timeout=5000)
    win.composer.setPlainText("again")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.send_message()
    # The new session was given the conversation so far.
    assert factory.calls[-1]["turns"][:2] == [("user", "hi", 0), ("assistant", "Hello, world!", 0)]
    assert load_settings() is not None and open_settings().value("models/last") == "/models/b"


def test_settings_round_trip_and_model_defaults(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.9, "max_new_tokens": 300}))
    defaults = generation_defaults(tmp_path)
    assert defaults == {"temperature": 0.6, "top_p": 0.9, "max_new_tokens": 300}
    s = AppSettings(system_prompt="Be brief.", overrides={"top_k": 40}, seed=7, image_detail="fast",
                    device="cpu", dtype="float32", cache_kind="contiguous", context_size=4096, theme="dark",
                    weights="int8")
    save_settings(s)
    back = load_settings()
    assert back == s
    assert back.sampling(defaults) == {"temperature": 0.6, "top_p": 0.9, "top_k": 40, "repetition_penalty": 1.0,
                                       "max_new_tokens": 300}
    assert back.load_options() == {"cache_kind": "contiguous", "context_size": 4096, "weights": "int8"}
    assert AppSettings().load_options() == {}  # defaults: the engine's own choices
    assert (tmp_path.parent / "appdata" / "settings.ini").exists() or open_settings().fileName().endswith("settings.ini")


def test_restore_defaults_puts_every_field_back_and_ok_saves_it(qtbot, window, factory):
    """Found by a trial: no way back to the defaults but deleting settings.ini, whose place the app
    did not show."""
    from PySide6.QtWidgets import QDialogButtonBox

    custom = AppSettings(system_prompt="Be terse.", overrides={"temperature": 1.5}, seed=9, image_detail="fast",
                         device="cpu", dtype="bfloat16", cache_kind="contiguous", context_size=4096, theme="dark",
                         weights="int8", video_max_frames=8, video_fps=2.0)
    save_settings(custom)
    loads = len(factory.loads)
    window._apply_settings(custom)
    qtbot.waitUntil(lambda: len(factory.loads) == loads + 1 and window.controller.ready, timeout=5000)
    dialog = window.open_settings_dialog()
    assert dialog.result_settings() == custom
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.RestoreDefaults).click()
    assert load_settings() == custom  # not saved before OK
    dialog.accept()
    defaults = AppSettings()
    assert load_settings() == defaults and window.settings == defaults
    qtbot.waitUntil(lambda: len(factory.loads) == loads + 2, timeout=5000)  # device, dtype...: reloaded


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_choosing_quantized_weights_reloads_the_model_with_them(qtbot, window, factory, weights):
    """int8 and 4-bit (which the command line had and the window did not offer) reach the load."""
    assert len(factory.loads) == 1 and factory.options == {}
    dialog = window.open_settings_dialog()
    assert dialog.weights.currentData() == "auto"
    assert [dialog.weights.itemData(i) for i in range(dialog.weights.count())] == ["auto", "int8", "int4"]
    dialog.weights.setCurrentIndex(dialog.weights.findData(weights))
    dialog.accept()
    qtbot.waitUntil(lambda: len(factory.loads) == 2, timeout=5000)
    assert factory.options == {"weights": weights}
    assert load_settings().weights == weights
    dialog = window.open_settings_dialog()  # nothing changed: no reload
    dialog.accept()
    qtbot.wait(100)
    assert len(factory.loads) == 2


def test_a_model_that_failed_to_load_loads_again_when_the_engine_settings_change(qtbot, make_window):
    """Found by a trial: Device = CUDA on a computer without one failed the load; setting Device back
    to Automatic then did nothing (no model was loaded, so nothing was reloaded), the old error
    stayed, and Enter said nothing."""
    backend = FakeBackend(fail="device 'cuda' was requested but this PyTorch build sees no CUDA GPU")
    window = make_window(backend, wait_loaded=False)
    qtbot.waitUntil(lambda: window.banner.message().startswith("Could not load the model: device 'cuda'"), timeout=5000)
    window.composer.setPlainText("hello?")
    window.send_message()
    assert window.banner.message().endswith("\n" + NO_MODEL_NOTE) and window.composer.toPlainText() == "hello?"
    backend.fail = None
    dialog = window.open_settings_dialog()
    dialog.device.setCurrentIndex(dialog.device.findData("cpu"))
    dialog.accept()
    qtbot.waitUntil(lambda: window.controller.ready, timeout=5000)
    assert [path for path, *_ in backend.loads] == ["/models/fake", "/models/fake"]
    assert backend.loads[-1][1]["device"] == "cpu" and window.banner.message() == ""


def test_engine_settings_a_reload_fails_with_are_set_back_to_the_ones_the_model_runs_on(qtbot, window, factory):
    """Trial 60: Device = CUDA on a computer without one failed the reload, but stayed saved: the
    banner was behind the Settings dialog, and every later start had no model."""
    dialog = window.open_settings_dialog()
    factory.fail = "device 'cuda' was requested but this PyTorch build sees no CUDA GPU"
    dialog.device.setCurrentIndex(dialog.device.findData("cuda"))
    dialog.dtype.setCurrentIndex(dialog.dtype.findData("bfloat16"))
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Apply).click()
    qtbot.waitUntil(lambda: len(factory.loads) == 2 and not window.controller.loading, timeout=5000)
    assert window.controller.ready and window.model_info["path"] == "/models/fake"
    assert window.banner.message() == (
        "Could not load the model: device 'cuda' was requested but this PyTorch build sees no CUDA GPU\n"
        "Still using FakeVLM-256M with the engine settings it was loaded with; Settings are back to those "
        "(Device: Automatic, Data type: Automatic).")
    assert (window.settings.device, window.settings.dtype) == ("auto", "auto")
    assert (load_settings().device, load_settings().dtype) == ("auto", "auto")  # the next start loads
    assert dialog.isVisible() and dialog.device.currentData() == "auto" and dialog.dtype.currentData() == "auto"
    assert dialog.error.text() == (
        "The model could not load with Device: CUDA (NVIDIA), Data type: bfloat16: device 'cuda' was requested "
        "but this PyTorch build sees no CUDA GPU\nThe engine settings are back to the ones the model runs on.")
    factory.fail = None
    dialog.accept()  # nothing changed since: no reload
    qtbot.wait(100)
    assert len(factory.loads) == 2


def test_a_first_load_that_fails_names_the_engine_settings_chosen(qtbot, make_window, data_dir):
    """A device saved before (or set by hand) that this computer lacks: the banner says where to change it."""
    save_settings(replace(AppSettings(), device="cuda", weights="int8"))
    backend = FakeBackend(fail="device 'cuda' was requested but this PyTorch build sees no CUDA GPU")
    window = make_window(backend, wait_loaded=False)
    qtbot.waitUntil(lambda: window.banner.message().startswith("Could not load the model"), timeout=5000)
    assert window.banner.message() == (
        "Could not load the model: device 'cuda' was requested but this PyTorch build sees no CUDA GPU\n"
        "Settings ▸ Engine has Device: CUDA (NVIDIA), Weights: int8: Restore Defaults there (or Automatic) uses "
        "what this computer has.")


def test_engine_settings_changed_during_an_answer_apply_when_it_ends(qtbot, make_window):
    slow = (FakeBackend(tokens=[f" w{i}" for i in range(40)], delay=0.02))
    window = make_window(slow)
    window.composer.setPlainText("a long answer please")
    window.send_message()
    qtbot.waitUntil(lambda: window._busy, timeout=5000)
    dialog = window.open_settings_dialog()
    dialog.weights.setCurrentIndex(dialog.weights.findData("int8"))
    dialog.accept()
    assert len(slow.loads) == 1  # the model is not swapped under the running answer
    assert window.banner.message() == "The new engine settings apply when this answer finishes."
    with qtbot.waitSignal(window.answer_finished, timeout=10000):
        pass
    qtbot.waitUntil(lambda: len(slow.loads) == 2, timeout=5000)
    assert slow.options == {"weights": "int8"}
    qtbot.waitUntil(lambda: window.controller.ready, timeout=5000)
    assert window.banner.isHidden()  # done: not said as still to come (trial 79 P6a)


def test_settings_dialog_applies_to_the_engine(qtbot, window, fake_session):
    window.model_info["defaults"] = {"temperature": 0.6}
    dialog = window.open_settings_dialog()
    assert dialog.temperature.value() == pytest.approx(0.6)  # shows the model's default
    dialog.system_prompt.setPlainText("Answer like a pirate.")
    dialog.top_k.setValue(30)
    dialog.seed.setText("123")
    dialog.image_detail.setCurrentIndex(dialog.image_detail.findData("balanced"))
    dialog.accept()
    assert load_settings().overrides == {"top_k": 30}  # temperature still follows the model
    window.composer.setPlainText("hello")
    with qtbot.waitSignal(window.answer_finished, timeout=5000):
        window.send_message()
    call = fake_session.calls[-1]
    params = call["params"]
    assert (params.temperature, params.top_k, params.seed, params.image_detail) == (0.6, 30, 123, "balanced")
    assert call["system_prompt"] == "Answer like a pirate."


def test_the_model_in_use_is_one_of_your_models_and_the_list_buttons_need_a_selection(qtbot, make_window, tmp_path):
    """Found by a GUI trial: with a model opened by --model, "Your models" was empty, and Use /
    Check / Remove looked enabled with nothing to select."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    win = make_window(FakeBackend(), model_path=str(folder))
    assert [m["path"] for m in known_models()] == [str(folder)]
    manager = win.open_model_manager()
    [item] = [manager.local_list.item(i) for i in range(manager.local_list.count())]
    assert item.text() == f"{win.model_info['model_name']}  (in use)  —  {folder}" and item.font().bold()
    buttons = [manager.findChild(QPushButton, name) for name in
               ("useSelectedButton", "checkSelectedButton", "removeModelButton")]
    assert not any(b.isEnabled() for b in buttons)
    manager.local_list.setCurrentItem(item)
    assert all(b.isEnabled() for b in buttons)
    make_window(FakeBackend())  # a path that is no file or folder (a repo id, a fake): not added
    assert [m["path"] for m in known_models()] == [str(folder)]


@pytest.mark.parametrize("value, loaded, shown, notice", [
    ("INT8", "int8", "From $SMOLCHAT_WEIGHTS (int8)", ""),
    ("int3", "auto", "Same as the data type",
     "$SMOLCHAT_WEIGHTS: ignored 'int3' (one of auto, int8, int4); the weights from Settings apply.")])
def test_the_weights_variable_is_shown_in_settings_and_a_bad_one_is_ignored(qtbot, make_window, monkeypatch,
                                                                            value, loaded, shown, notice):
    """Trial 59: with $SMOLCHAT_WEIGHTS=int8 the status bar said int8 and Settings "Same as the data
    type"; with int3 every load failed ("unknown value"), where a bad theme variable is ignored."""
    monkeypatch.setenv("SMOLCHAT_WEIGHTS", value)
    factory = FakeBackend()
    win = make_window(factory)
    assert factory.options == {"weights": loaded}  # said by the window: the engine never reads a bad one
    assert win.storage_banner.message() == notice
    dialog = win.open_settings_dialog()
    assert dialog.weights.currentData() == "auto" and dialog.weights.currentText() == shown
    dialog.weights.setCurrentIndex(dialog.weights.findData("int4"))  # Settings' own choice wins
    dialog.accept()
    qtbot.waitUntil(lambda: len(factory.loads) == 2, timeout=5000)
    assert factory.options == {"weights": "int4"}


def test_settings_opened_twice_is_one_dialog_and_a_closed_one_is_freed(qtbot, window):
    """Each Ctrl+, made another dialog (two could be open, each applying its own copy of the settings),
    and a closed one was kept until the window went."""
    first = window.open_settings_dialog()
    qtbot.waitExposed(first)
    assert window.open_settings_dialog() is first
    assert [d for d in window.findChildren(SettingsDialog) if d.isVisible()] == [first]
    first.reject()
    qtbot.waitUntil(lambda: window.settings_dialog is None, timeout=2000)  # its destroyed signal came
    second = window.open_settings_dialog()
    assert second is not first and window.settings_dialog is second
    second.reject()


def test_settings_offers_only_the_devices_this_computer_has(qtbot, window):
    """Trial 62: Device = CUDA could be picked on a computer without one; the reload failed after OK
    and the data type, weights, KV cache and context size chosen with it went back too."""
    window.controller.model_info["devices"] = ["cpu"]  # as the engine says on a machine without a GPU
    dialog = window.open_settings_dialog()
    combo = dialog.device
    offered = {combo.itemData(row): (combo.itemText(row), combo.model().item(row).isEnabled())
               for row in range(combo.count())}
    assert offered == {"auto": ("Automatic", True), "cuda": ("CUDA (NVIDIA) (not on this computer)", False),
                       "mps": ("MPS (Apple) (not on this computer)", False), "cpu": ("CPU", True)}
    dialog.reject()
    qtbot.waitUntil(lambda: window.settings_dialog is None, timeout=2000)
    window.controller.model_info["devices"] = []  # not known (a server's model): all offered
    dialog = window.open_settings_dialog()
    assert all(dialog.device.model().item(row).isEnabled() for row in range(dialog.device.count()))
    dialog.reject()


def test_an_unreadable_models_list_is_said_and_kept_aside_not_written_over():
    """Trial 62: a damaged "Your models" emptied the list without a word, and the next model added
    wrote over it."""
    qs = open_settings()
    qs.setValue("models/known", json.dumps([{"name": "Mine", "path": "/models/mine"}, {"path": 5}, "x"]))
    assert load_settings(qs).problems == []  # said once, at start-up: this runs at each chat opened
    assert unreadable_models(qs) == (f"Settings file {qs.fileName()}: 2 entries of Your models could not be read and "
                                     "are left out of the list; its saved text is kept in the file under "
                                     "models/known_unreadable.")
    assert [m["path"] for m in known_models(qs)] == ["/models/mine"]
    saved = qs.value("models/known_unreadable")
    qs.setValue("models/known", "{not json")
    assert unreadable_models(qs).endswith(": the list of Your models could not be read: it shows only the models "
                                          "added from now on; its saved text is kept in the file under "
                                          "models/known_unreadable.")
    assert qs.value("models/known_unreadable") == saved  # the first copy kept
    qs.remove("models/known_unreadable")
    unreadable_models(qs)
    assert qs.value("models/known_unreadable") == "{not json"
    qs.setValue("models/known", json.dumps([{"path": "/models/mine"}]))
    assert unreadable_models(qs) == ""


def test_the_model_manager_opens_over_the_window_or_mid_screen_before_it_is_placed(qtbot, make_window):
    """Trial 62: at a start with no model, the manager opened at the screen's top-left corner (the window
    was not placed yet)."""
    win = make_window(FakeBackend())
    win.move(0, 0)  # as a window not yet placed by the window manager
    manager = win.open_model_manager()
    screen = win.screen().availableGeometry().center()
    assert (manager.frameGeometry().center() - screen).manhattanLength() <= 2
    manager.close()
    other = make_window(FakeBackend())
    other.setGeometry(300, 200, 500, 400)
    manager = other.open_model_manager()
    assert (manager.frameGeometry().center() - other.frameGeometry().center()).manhattanLength() <= 2
    manager.close()
