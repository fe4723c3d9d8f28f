"""Unusable data folders and failing writes: the app keeps working and says what went wrong."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.app.fakes import FakeFactory, FakeSession


def test_data_dir_under_a_file_falls_back_to_a_temporary_folder(qtbot, make_window, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    wanted = afile / "data"
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(wanted))
    session = FakeSession(tokens=["Hi", "."])
    win = make_window(FakeFactory(session))

    text = win.storage_banner.message()
    assert str(wanted) in text and "temporary" in text
    assert not str(win.store.folder).startswith(str(wanted))
    qtbot.keyClicks(win.composer, "hello")
    with qtbot.waitSignal(win.answer_finished, timeout=5000) as finished:
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    assert finished.args[0]["finish_reason"] == "stop"
    assert win.transcript.messages()[-1]["text"] == "Hi."
    assert str(wanted) in win.storage_banner.message()  # still there after sending


def test_read_only_data_dir_falls_back(qtbot, make_window, tmp_path, monkeypatch):
    import os

    wanted = tmp_path / "ro"
    wanted.mkdir()
    wanted.chmod(0o555)
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(wanted))
    try:
        if os.access(wanted, os.W_OK):  # root ignores permissions
            import pytest

            pytest.skip("running as root: a read-only folder is still writable")
        win = make_window(FakeFactory(FakeSession()))
        assert str(wanted) in win.storage_banner.message()
    finally:
        wanted.chmod(0o755)
