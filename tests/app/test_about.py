"""Help ▸ About Smolchat: the version, where the chats, settings and models are kept, the model in
use and the versions of what runs it; Copy details puts the same lines on the clipboard."""

from __future__ import annotations

from importlib import metadata

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPushButton

from app.backends.fake import FakeBackend


def test_about_names_the_version_folders_and_model_and_copies_them(qtbot, make_window, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # read once, at its import
    win = make_window(FakeBackend())
    win.actions["about"].trigger()
    dialog = win.findChild(QDialog, "aboutDialog")
    assert dialog.isVisible() and dialog.windowTitle() == "About Smolchat"
    text = dialog.findChild(QLabel, "aboutText").text()
    assert f"Smolchat {metadata.version('smolchat')}" in text
    assert "FakeVLM-256M · cpu · float32" in text and str(win.store.folder) in text
    assert win.qsettings.fileName() in text and f"PyTorch {metadata.version('torch')}" in text
    assert dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Close).isDefault()
    [copy] = [b for b in dialog.findChildren(QPushButton) if b.text() == "Copy details"]
    copy.click()
    lines = QGuiApplication.clipboard().text().splitlines()
    assert lines[0] == f"Version: Smolchat {metadata.version('smolchat')}"
    assert "Model: FakeVLM-256M · cpu · float32" in lines and f"Chats: {win.store.folder}" in lines
    assert f"Downloaded models: {tmp_path / 'hub'}" in lines and copy.text() == "Copied"


def test_about_says_when_no_model_is_loaded_and_is_in_the_help_menu(qtbot, make_window):
    win = make_window(FakeBackend())
    win.controller.model_info = {}  # as before any model has loaded
    help_menu = [a.menu() for a in win.menuBar().actions() if a.text() == "&Help"][0]
    assert "&About Smolchat" in [a.text() for a in help_menu.actions()]
    win.actions["about"].trigger()
    assert "<td>none loaded</td>" in win.findChild(QDialog, "aboutDialog").findChild(QLabel, "aboutText").text()


def test_the_open_about_box_follows_a_model_loaded_meanwhile(qtbot, make_window):
    """Found by a trial: the box kept the old model while Copy details copied the new one."""
    backend = FakeBackend()
    win = make_window(backend)
    win.actions["about"].trigger()
    label = win.findChild(QDialog, "aboutDialog").findChild(QLabel, "aboutText")
    backend.model_name = "OtherVLM"
    win.load_model("/models/other")
    qtbot.waitUntil(lambda: "OtherVLM · cpu · float32" in label.text(), timeout=5000)
