"""Unusable data folders and failing writes: the app keeps working and says what went wrong."""

from __future__ import annotations

import builtins
import errno
import io
import os
import sqlite3
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from app.backends.fake import FakeBackend
from app.store import Store
from engine.api.events import TokenEvent


def test_data_dir_under_a_file_falls_back_to_a_temporary_folder(qtbot, make_window, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    wanted = afile / "data"
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(wanted))
    session = FakeBackend(tokens=["Hi", "."])
    win = make_window(session)

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
        win = make_window(FakeBackend())
        assert str(wanted) in win.storage_banner.message()
    finally:
        wanted.chmod(0o755)


def _disk_full(*_args, **_kwargs):
    raise sqlite3.OperationalError("database or disk is full")


def _ask(qtbot, win, text="What colour is the cat?"):
    qtbot.keyClicks(win.composer, text)
    with qtbot.waitSignal(win.answer_finished, timeout=5000) as finished:
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    return finished.args[0]


def test_full_disk_on_send_keeps_the_text_and_says_so(qtbot, window, monkeypatch):
    monkeypatch.setattr(window.store, "add_message", _disk_full)
    qtbot.keyClicks(window.composer, "hello there")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)  # pytest-qt fails the test if a slot raises

    assert "Could not save the message: the disk is full (database or disk is full)" in window.banner.message()
    assert window.composer.toPlainText() == "hello there"
    assert window.transcript.messages() == []
    assert not window._busy and window.send_button.isEnabled()


def test_full_disk_when_the_answer_is_saved_keeps_it_on_screen(qtbot, window, monkeypatch):
    monkeypatch.setattr(window.store, "update_message", _disk_full)
    result = _ask(qtbot, window)

    assert result["finish_reason"] == "stop"
    assert window.transcript.messages()[-1]["text"] == "The cat is orange."
    assert "Could not save the answer: the disk is full" in window.banner.message()
    assert not window._busy


def _update_failing_after(store, monkeypatch, works: int, then_works: int = 0):
    """``store.update_message`` writes ``works`` times, then fails, then (``then_works`` > 0) works again."""
    real, calls = store.update_message, []

    def update(*args, **kwargs):
        calls.append(kwargs.get("text"))
        if len(calls) <= works or (then_works and len(calls) > works + 1):
            return real(*args, **kwargs)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store, "update_message", update)
    return calls


class _TokenPerSave(FakeBackend):
    """Gives its next token once the window has saved the one before (``saves``: the store's calls), as
    tokens that came while the window was busy would reach it joined into one
    (app.backends.qt.BackendBridge), and one save would then hold several."""

    saves: list = []

    def send(self, text, attachments, params, sink, system_prompt=None) -> None:
        def paced(event) -> None:
            before = len(self.saves)
            sink(event)
            deadline = time.monotonic() + 5
            while isinstance(event, TokenEvent) and len(self.saves) == before and time.monotonic() < deadline:
                time.sleep(0.002)
        super().send(text, attachments, params, paced, system_prompt)


def test_full_disk_mid_answer_says_the_text_saved_so_far_is_kept(qtbot, make_window, monkeypatch):
    monkeypatch.setattr("app.conversations.FLUSH_TOKENS", 1)  # each token is a save
    win = make_window(backend := _TokenPerSave(tokens=["The", " cat", " is", " orange", "."]))
    calls = backend.saves = _update_failing_after(win.store, monkeypatch, works=1)
    shown = []
    win.keeper.storage_error.connect(shown.append)
    result = _ask(qtbot, win)

    assert result["finish_reason"] == "stop"
    assert calls == ["The", "The cat", "The cat is", "The cat is orange", "The cat is orange.", "The cat is orange."]
    problem = (f"Could not save the answer: the disk is full (database or disk is full); free some space on the "
               f"disk that holds {win.store.folder}. ")
    assert shown == [  # once when the flush fails, once more when the last save fails too
        problem + "Kept: its first 3 characters, saved before that. The rest stays on screen, and Smolchat "
                  "tries again to save it until the answer ends.",
        problem + "Kept so far: its first 3 characters. The answer stays on screen, and Smolchat saves it as soon "
                  "as the disk takes it (it tries every 10 s and before your next question; a quit asks first)."]
    assert win.banner.message() == shown[-1]
    assert win.transcript.messages()[-1]["text"] == "The cat is orange."
    stored = win.store.messages(win.keeper.current_id)[-1]
    assert (stored.role, stored.text, stored.status) == ("assistant", "The", "streaming")  # "interrupted" once reopened


def test_full_disk_before_the_first_save_says_the_question_is_kept(qtbot, window, monkeypatch):
    _update_failing_after(window.store, monkeypatch, works=0)
    _ask(qtbot, window)
    assert window.banner.message().endswith(
        "Kept so far: the question. The answer stays on screen, and Smolchat saves it as soon as the disk "
        "takes it (it tries every 10 s and before your next question; a quit asks first).")
    stored = window.store.messages(window.keeper.current_id)
    assert [(m.role, m.text) for m in stored] == [("user", "What colour is the cat?"), ("assistant", "")]


def test_a_save_that_works_after_a_full_disk_says_the_answer_was_kept(qtbot, make_window, monkeypatch):
    monkeypatch.setattr("app.conversations.FLUSH_TOKENS", 1)
    win = make_window(backend := _TokenPerSave(tokens=["The", " cat", " is", " orange", "."]))
    backend.saves = _update_failing_after(win.store, monkeypatch, works=1, then_works=1)  # the second save fails, later ones work
    _ask(qtbot, win)

    assert win.banner.message() == "The answer was saved in full after all: a later save worked."
    assert win.banner.tone() == "success"
    stored = win.store.messages(win.keeper.current_id)[-1]
    assert (stored.text, stored.status) == ("The cat is orange.", "done")


def test_failed_rename_delete_and_export_show_a_banner(qtbot, window, monkeypatch, tmp_path):
    from PySide6.QtWidgets import QFileDialog

    from app.export import export_dialog

    _ask(qtbot, window)
    conv_id = window.keeper.current_id
    monkeypatch.setattr(window.store, "rename_conversation", _disk_full)
    window.rename_conversation(conv_id, "New name")
    assert "Could not rename the chat: the disk is full" in window.banner.message()

    monkeypatch.setattr(window.store, "delete_conversation", _disk_full)
    window.delete_conversation(conv_id)
    assert "Could not delete the chat" in window.banner.message()
    assert window.keeper.current_id == conv_id and len(window.transcript.messages()) == 2

    monkeypatch.setattr(window.store, "delete_message", _disk_full)
    window._on_message_action("delete", 1)
    assert "Could not delete the message" in window.banner.message()
    assert len(window.transcript.messages()) == 2

    monkeypatch.setattr(window.store, "add_message", _disk_full)
    window._on_message_action("regenerate", 1)
    assert "Could not regenerate the answer" in window.banner.message()
    assert window.transcript.messages()[-1]["text"] == "The cat is orange." and not window._busy

    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "out.md"), ""))
    monkeypatch.setattr(window.store, "messages", _disk_full)
    assert export_dialog(window, "md") is None
    assert "Could not export the chat" in window.banner.message()


def test_full_disk_while_copying_an_image_keeps_the_message_and_no_part_file(qtbot, window, png, data_dir,
                                                                                monkeypatch):
    def copy_then_disk_full(src, dst, *args, **kwargs):
        with open(dst, "wb") as out:
            out.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("app.store.shutil.copyfile", copy_then_disk_full)
    window.add_files([str(png)])
    qtbot.keyClicks(window.composer, "What is this?")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)

    assert "Could not save the message: the disk is full" in window.banner.message()
    assert window.composer.toPlainText() == "What is this?"
    assert window.attachments.paths() == [str(png.resolve())]
    assert list((data_dir / "images").glob("*.part")) == []


def test_new_chat_resets_the_status_line_after_an_error(qtbot, make_window):
    from PySide6.QtWidgets import QLabel

    win = make_window(FakeBackend(image_error="The image is unreadable."))
    stats = win.findChild(QLabel, "statusStats")
    ready = stats.text()
    _ask(qtbot, win)
    assert stats.text().endswith("error")
    win.actions["new_chat"].trigger()  # Ctrl+N
    assert stats.text() == ready and "FakeVLM-256M" in ready and "error" not in ready


def _fill_database(store) -> None:
    """A real SQLITE_FULL from SQLite itself (no root, no tmpfs): the database may not grow by a page.
    SQLite then rolls the failed write's transaction back on its own, as it does on a full disk."""
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")


def test_full_disk_in_a_transaction_reports_the_full_disk_not_the_rollback(qtbot, window, data_dir):
    _ask(qtbot, window, "first message")
    conv_id = window.keeper.current_id
    before = [(m.role, m.text) for m in window.store.messages(conv_id)]
    _fill_database(window.store)
    long = "second message on a full disk " + "x" * 6000  # more than a page: the database must grow
    qtbot.keyClicks(window.composer, long)
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)

    assert window.banner.message() == (
        "Could not save the message: the disk is full (database or disk is full); "
        f"free some space on the disk that holds {data_dir}.")
    assert "rollback" not in window.banner.message()
    assert window.composer.toPlainText() == long and not window._busy
    assert [(m.role, m.text) for m in window.store.messages(conv_id)] == before  # nothing stored is lost
    assert [m["text"] for m in window.transcript.messages()] == ["first message", "The cat is orange."]
    assert not window.store.db.in_transaction


def test_store_reports_sqlite_full_and_keeps_working_once_there_is_room(tmp_path):
    from app.store import Store

    store = Store(tmp_path / "data")
    conv = store.create_conversation("kept")
    first = store.add_message(conv.id, "user", "first message")
    _fill_database(store)
    with pytest.raises(sqlite3.OperationalError, match="^database or disk is full$"):
        store.add_message(conv.id, "assistant", "y" * 6000)
    assert not store.db.in_transaction
    assert [(m.id, m.text) for m in store.messages(conv.id)] == [(first.id, "first message")]
    store.db.execute("PRAGMA max_page_count = 1073741823")  # space freed
    store.add_message(conv.id, "assistant", "y" * 6000)
    assert [m.text[:5] for m in store.messages(conv.id)] == ["first", "yyyyy"]
    store.close()


def _shown_messages(win) -> list[str]:
    """The text of every message widget the transcript actually shows (not only the ones it lists)."""
    from app.messages import AssistantMessage, UserMessage

    content = win.transcript.widget()
    shown = [w for w in content.findChildren(QWidget) if isinstance(w, (UserMessage, AssistantMessage))
             and w.isVisibleTo(content)]
    return [w.text for w in sorted(shown, key=lambda w: w.y())]


@pytest.mark.parametrize("failing", ["create_conversation", "add_message"])
def test_new_chat_whose_first_send_failed_shows_only_its_own_messages(qtbot, window, monkeypatch, failing):
    """Trial 37, finding 6: New chat, a send that fails on a full disk, space freed, send again."""
    _ask(qtbot, window, "first message")
    first = window.keeper.current_id
    window.actions["new_chat"].trigger()
    assert _shown_messages(window) == []

    with monkeypatch.context() as patch:
        patch.setattr(window.store, failing, _disk_full)
        qtbot.keyClicks(window.composer, "in a new chat on full disk")
        qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    assert window.banner.message().startswith("Could not save the message: the disk is full")
    assert _shown_messages(window) == [] and window.transcript.messages() == []
    assert window.keeper.current_id is None  # no half-made chat stays behind the empty transcript
    assert [c.title for c in window.store.conversations()] == ["first message"]

    window.composer.clear()
    result = _ask(qtbot, window, "after freeing space")
    assert result["finish_reason"] == "stop"
    assert _shown_messages(window) == ["after freeing space", "The cat is orange."]
    assert [m["text"] for m in window.transcript.messages()] == ["after freeing space", "The cat is orange."]
    new = window.keeper.current_id
    assert new != first and window.store.conversation(new).title == "after freeing space"
    assert [m.text for m in window.store.messages(new)] == ["after freeing space", "The cat is orange."]
    assert [c.title for c in window.store.conversations()] == ["after freeing space", "first message"]


class _FillsUp:
    """A file being written on a disk with ``room`` characters left: the open (and its truncation)
    works, then a write runs out of space part-way, as on a full disk."""

    def __init__(self, file, room: int) -> None:
        self._file, self._room = file, room

    def write(self, data):
        if len(data) > self._room:
            self._file.write(data[: self._room])
            self._room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room -= len(data)
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


@pytest.fixture
def full_folder(tmp_path, monkeypatch):
    """A folder on a "full disk": any file opened in it (or below) for writing takes 100 characters, then fails."""
    folder = tmp_path / "fulldisk"
    folder.mkdir()
    real_open = io.open

    def open_on_full_disk(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and set(mode) & set("wxa") and folder in Path(file).parents:
            return _FillsUp(opened, 100)
        return opened

    monkeypatch.setattr(io, "open", open_on_full_disk)  # pathlib's write_text opens through io.open
    monkeypatch.setattr(builtins, "open", open_on_full_disk)
    return folder


@pytest.mark.parametrize("kind", ["md", "json"])
def test_export_over_a_file_on_a_full_disk_keeps_the_old_file(qtbot, window, monkeypatch, full_folder, kind):
    """Trial 37, finding 7: the failed export destroyed the file it was replacing."""
    from PySide6.QtWidgets import QFileDialog

    from app.export import export_dialog

    _ask(qtbot, window, "a long message " * 200)
    target = full_folder / f"notes.{kind}"
    old = b"MY OLD NOTES\n" if kind == "md" else b"{}"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT)  # written before the disk filled up
    os.write(fd, old)
    os.close(fd)
    assert target.read_bytes() == old
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))

    assert export_dialog(window, kind) is None
    assert target.read_bytes() == old
    assert sorted(p.name for p in full_folder.iterdir()) == [target.name]  # no temporary file left
    assert window.banner.message() == ("Could not export the chat: the disk is full ([Errno 28] No space left on "
                                       f"device); free some space on the disk that holds {full_folder}.")


@pytest.mark.parametrize("kind", ["md", "json"])
def test_failed_export_on_a_full_disk_leaves_no_file(qtbot, window, monkeypatch, full_folder, kind):
    from PySide6.QtWidgets import QFileDialog

    from app.export import export_dialog

    _ask(qtbot, window, "a long message " * 200)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(full_folder / f"export.{kind}"), ""))
    assert export_dialog(window, kind) is None
    assert list(full_folder.iterdir()) == []  # neither a truncated export nor a temporary file
    assert window.banner.message().startswith("Could not export the chat: the disk is full ([Errno 28]")


@pytest.mark.parametrize("kind", ["md", "json"])
def test_export_to_a_folder_that_does_not_exist_says_so(qtbot, window, monkeypatch, tmp_path, png, kind):
    """Found by a trial: the banner gave Python's words about the temporary file ("[Errno 2] No such file
    or directory: '/tmp/x/export/.chat.md.25631-0.part'"). With an image, the Markdown export made the
    missing folder for its images folder, unlike without one: it makes neither now."""
    from PySide6.QtWidgets import QFileDialog

    from app.export import export_dialog

    window.add_files([str(png)])
    _ask(qtbot, window, "What is this?")
    missing = tmp_path / "x" / "export"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(missing / f"chat.{kind}"), ""))
    assert export_dialog(window, kind) is None
    assert window.banner.message() == f"Could not export the chat: the folder {missing} does not exist."
    assert not (tmp_path / "x").exists()


def test_safe_files_replace_whole_keep_permissions_and_leave_nothing_on_failure(tmp_path, monkeypatch):
    from app import safe_files

    target = tmp_path / "notes.md"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    safe_files.write_text(link, "new")  # through the link: the file it points to is replaced
    assert link.is_symlink() and target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640

    def copy_then_disk_full(src, dst, *args, **kwargs):
        Path(dst).write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safe_files.shutil, "copyfile", copy_then_disk_full)
    with pytest.raises(OSError):
        safe_files.copy_file(tmp_path / "link.md", tmp_path / "copy.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "notes.md"]


def test_pasted_images_and_pdf_pages_on_a_full_disk_leave_no_partial_file(tmp_path, full_folder):
    from app import pdf_pages
    from app.images import save_png_bytes
    from tests.app.test_documents import make_pdf

    with pytest.raises(OSError) as full:
        save_png_bytes(b"\x89PNG" + bytes(4000), full_folder)
    assert full.value.errno == errno.ENOSPC
    make_pdf(tmp_path / "doc.pdf", 1)
    with pytest.raises(OSError):
        pdf_pages.render_pages(tmp_path / "doc.pdf", [0], full_folder)
    # No .tmp / .part for a later run to trip over (rendered pages sit in a folder per PDF content).
    assert [p for p in full_folder.rglob("*") if p.is_file()] == []


def test_an_answer_whose_last_save_failed_is_saved_when_the_disk_has_room_again(qtbot, make_window, monkeypatch):
    """Trial 50: the answer's end, not saved on a full disk, was lost even after space was freed (and
    reopened it read "Smolchat closed before this answer was complete"). It is written again every
    10 s, before the next question and at quit, until a write works."""
    monkeypatch.setattr("app.conversations.UNSAVED_RETRY_MS", 50)
    win = make_window(FakeBackend(tokens=["The", " cat", " is", " orange", "."]))
    real = win.store.update_message
    monkeypatch.setattr(win.store, "update_message", _disk_full)
    _ask(qtbot, win)
    assert win.banner.message().startswith("Could not save the answer: the disk is full")
    stored = win.store.messages(win.keeper.current_id)[-1]
    assert (stored.text, stored.status) == ("", "streaming")
    qtbot.wait(200)  # still full: tried again, quietly
    monkeypatch.setattr(win.store, "update_message", real)  # space freed
    qtbot.waitUntil(lambda: win.banner.message() == "The answer was saved in full after all: a later save worked.",
                    timeout=3000)
    stored = win.store.messages(win.keeper.current_id)[-1]
    assert (stored.text, stored.status) == ("The cat is orange.", "done")


def test_an_unsaved_answer_is_saved_before_the_next_question_and_at_quit(qtbot, make_window, monkeypatch):
    win = make_window(FakeBackend(tokens=["Yes", "."]))
    real = win.store.update_message
    monkeypatch.setattr(win.store, "update_message", _disk_full)
    _ask(qtbot, win, "First?")
    monkeypatch.setattr(win.store, "update_message", real)
    win.composer.clear()
    _ask(qtbot, win, "Second?")  # the first answer is written before this question
    assert [(m.text, m.status) for m in win.store.messages(win.keeper.current_id)][:2] == [("First?", "done"),
                                                                                         ("Yes.", "done")]
    monkeypatch.setattr(win.store, "update_message", _disk_full)
    win.composer.clear()
    _ask(qtbot, win, "Third?")
    monkeypatch.setattr(win.store, "update_message", real)
    chat, folder = win.keeper.current_id, win.store.folder
    win.close()  # at quit
    again = Store(folder, recover=False)
    assert [(m.text, m.status) for m in again.messages(chat)][-2:] == [("Third?", "done"), ("Yes.", "done")]
    again.close()


def test_quitting_while_the_answer_is_still_not_saved_asks_first(qtbot, make_window, monkeypatch, tmp_path):
    """Trial 51: the banner said the answer would be saved at quit; with the disk still full the quit
    went ahead without a word and the answer's end was lost. Now: save it as a file, quit without
    it, or stay."""
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    win = make_window(FakeBackend(tokens=["The", " cat", " is", " orange", "."]))
    monkeypatch.setattr(win.store, "update_message", _disk_full)
    _ask(qtbot, win)

    def box():
        qtbot.waitUntil(lambda: win.findChild(QMessageBox, "unsavedAnswerBox") is not None
                        and win.findChild(QMessageBox, "unsavedAnswerBox").isVisible(), timeout=3000)
        return win.findChild(QMessageBox, "unsavedAnswerBox")

    def press(found, text):
        button = next(b for b in found.buttons() if b.text() == text)
        button.click()

    assert not win.close()  # still full: not closed, asked
    press(box(), "Cancel")
    assert win.isVisible() and not win.controller.closed
    target = tmp_path / "kept answer.md"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    win.close()
    press(box(), "Save as a file…")
    qtbot.waitUntil(lambda: win.controller.closed, timeout=3000)
    assert target.read_text() == "The cat is orange."


def test_quitting_without_the_unsaved_answer_when_chosen(qtbot, make_window, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    win = make_window(FakeBackend(tokens=["Yes", "."]))
    monkeypatch.setattr(win.store, "update_message", _disk_full)
    _ask(qtbot, win)
    win.close()
    qtbot.waitUntil(lambda: win.findChild(QMessageBox, "unsavedAnswerBox") is not None, timeout=3000)
    found = win.findChild(QMessageBox, "unsavedAnswerBox")
    next(b for b in found.buttons() if b.text() == "Quit without it").click()
    qtbot.waitUntil(lambda: win.controller.closed, timeout=3000)
