"""The unsent message outlives the window (app/drafts.py): text and attachments come back at the next
start, after a quit or a crash; a sent message leaves nothing behind; an edit keeps the draft it set
aside; a file gone since is left out and said; an unreadable kept draft is ignored."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image
from PySide6.QtCore import QSettings, Qt

from app.backends.fake import FakeBackend
from app.drafts import KEY, SAVE_DELAY_MS
from tests.app.helpers import drop, file_mime


def write_png(path, colour=(200, 40, 40)):
    Image.new("RGB", (40, 30), colour).save(path)
    return path


def test_text_and_photo_come_back_at_the_next_start(qtbot, make_window, tmp_path):
    win = make_window(FakeBackend())
    photo = write_png(tmp_path / "holiday.png")
    assert drop(win.composer, file_mime(photo))
    win.composer.setPlainText("What is in this photo, and where was it taken?")
    win.close()  # a quit saves at once

    again = make_window(FakeBackend())
    assert again.composer.toPlainText() == "What is in this photo, and where was it taken?"
    [chip] = again.attachments.chips()
    assert chip.name == "holiday.png" and open(chip.path, "rb").read() == photo.read_bytes()
    assert again.attached_names() == ["holiday.png"]
    assert again.composer.textCursor().position() == len(again.composer.toPlainText())  # to go on typing
    with qtbot.waitSignal(again.answer_finished, timeout=5000):
        qtbot.keyClick(again.composer, Qt.Key.Key_Return)
    [question] = [m for m in again.store.messages(again.keeper.current_id) if m.role == "user"]
    assert question.text == "What is in this photo, and where was it taken?"
    assert question.attached_names == ["holiday.png"]


def test_the_draft_is_written_soon_after_typing_not_only_at_quit(qtbot, make_window):
    """A crash (no close event) loses at most the last moment's keystrokes."""
    win = make_window(FakeBackend())
    qtbot.keyClicks(win.composer, "Half a question")
    settings = QSettings(win.qsettings.fileName(), QSettings.Format.IniFormat)
    assert settings.value(KEY) is None  # not on every keystroke
    qtbot.wait(SAVE_DELAY_MS + 200)
    settings.sync()
    assert json.loads(settings.value(KEY)) == {"text": "Half a question", "files": [], "names": [], "chat": None}


def test_a_sent_message_leaves_no_draft(qtbot, make_window):
    win = make_window(FakeBackend(tokens=["Yes", "."]))
    qtbot.keyClicks(win.composer, "Sent now")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    win.close()
    assert win.qsettings.value(KEY) is None
    again = make_window(FakeBackend())
    assert again.composer.toPlainText() == "" and again.attachments.paths() == []


def quit_while_editing(qtbot, make_window, question: str, draft: str, edited: str):
    """A window that answered ``question``, then had ``draft`` typed and the question edited to
    ``edited``, closed mid-edit."""
    win = make_window(FakeBackend(tokens=["Yes", "."]))
    win.composer.setPlainText(question)
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    win.composer.setPlainText(draft)
    win._on_message_action("edit", 0)
    win.composer.setPlainText(edited)
    win.close()
    return win


def test_quitting_mid_edit_keeps_the_edit_and_the_draft_set_aside(qtbot, make_window):
    quit_while_editing(qtbot, make_window, "First question", "The next question, half written", "First question, edited")
    again = make_window(FakeBackend())
    assert again.composer.toPlainText() == "First question, edited"  # the edit goes on
    assert again.banner.message().startswith("Still editing a message, as when Smolchat closed: sending adds")
    again.stop()  # Esc: the draft set aside comes back
    assert again.composer.toPlainText() == "The next question, half written" and again.banner.message() == ""


def test_an_edit_kept_through_a_quit_is_sent_as_a_new_version(qtbot, make_window, tmp_path):
    """Found by a trial: an edit in progress was lost at quit (only the draft it set aside was kept)."""
    win = make_window(FakeBackend(tokens=["Yes", "."]))
    photo = write_png(tmp_path / "dog.png")
    for text in ("First question", "Second question"):
        win.composer.setPlainText(text)
        with qtbot.waitSignal(win.answer_finished, timeout=5000):
            qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    win._on_message_action("edit", 2)
    win.composer.setPlainText("Second question, with a photo")
    assert drop(win.composer, file_mime(photo))
    win.close()
    again = make_window(FakeBackend(tokens=["Sure", "."]))
    assert again._editing == 2 and again.composer.toPlainText() == "Second question, with a photo"
    assert again.attached_names() == ["dog.png"]
    with qtbot.waitSignal(again.answer_finished, timeout=5000):
        qtbot.keyClick(again.composer, Qt.Key.Key_Return)
    texts = [w.text for w in again.transcript.widgets()]
    assert texts == ["First question", "Yes.", "Second question, with a photo", "Sure."]
    assert again.transcript.widgets()[2].actions_row.versions.label.text() == "2 / 2"
    again.close()
    assert again.qsettings.value(KEY) is None  # sent: nothing left to keep


def test_a_kept_edit_of_a_message_no_longer_shown_goes_into_the_message_box(qtbot, make_window):
    """Trial 70 N4: the edit's text was dropped without a word (a database restored from a backup)."""
    win = quit_while_editing(qtbot, make_window, "Only question", "Half written", "Only question, edited")
    draft = json.loads(win.qsettings.value(KEY))
    draft["edit"]["message"] = 10_000  # deleted meanwhile (another copy of the data folder, a salvage)
    win.qsettings.setValue(KEY, json.dumps(draft))
    win.qsettings.sync()
    again = make_window(FakeBackend())
    assert again._editing is None and again.composer.toPlainText() == "Half written\n\nOnly question, edited"
    assert again.banner.message().endswith("The message you were editing is not in this chat any more: your edit is "
                                           "in the message box, to send as a new message.")


def test_an_attachment_gone_since_is_left_out_and_said(qtbot, make_window, tmp_path):
    win = make_window(FakeBackend(video=True))
    clip = tmp_path / "clip.mp4"  # a video is kept by its own path (copied into the store only when sent)
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    win.shutdown()
    draft = {"text": "What happens here?", "files": [str(clip)], "names": ["clip.mp4"]}
    win.qsettings.setValue(KEY, json.dumps(draft))
    win.qsettings.sync()
    clip.unlink()
    again = make_window(FakeBackend(video=True))
    assert again.composer.toPlainText() == "What happens here?" and again.attachments.paths() == []
    assert again.storage_banner.message() == ("Your unsent message is back without clip.mp4: that file is gone or "
                                              "unreadable.")


def test_an_unreadable_kept_draft_is_ignored(qtbot, make_window):
    win = make_window(FakeBackend())
    win.shutdown()
    for value in ("{not json", json.dumps([1, 2]), json.dumps({"text": 5, "files": "x", "names": None}),
                  json.dumps({"text": "", "files": "abc"})):
        win.qsettings.setValue(KEY, value)
        win.qsettings.sync()
        again = make_window(FakeBackend())
        assert again.composer.toPlainText() == "" and again.attachments.paths() == []
        assert "unsent" not in again.storage_banner.message()  # no "back without a, b, c" from a string
        again.shutdown()


def test_a_settings_file_that_cannot_be_written_is_said_once(qtbot, make_window, monkeypatch):
    """Found by a trial: with settings.ini read-only the draft was silently not kept, and an older one
    came back at the next start."""
    win = make_window(FakeBackend())
    monkeypatch.setattr(type(win.qsettings), "status", lambda self: QSettings.Status.AccessError)
    win.composer.setPlainText("Typed while the file is read-only")
    win.drafts.save()
    said = (f"Your unsent message cannot be kept for the next start: the settings file {win.qsettings.fileName()} "
            "cannot be written.")
    assert win.banner.message() == said
    win.banner.dismiss()
    win.drafts.save()
    assert win.banner.message() == ""  # once


def test_a_deleted_chats_photos_go_at_the_next_start_but_not_the_unsent_messages(qtbot, make_window, tmp_path):
    """Trial 50: stored files stayed in the data folder for good once no message used them."""
    import os
    import time

    win = make_window(FakeBackend(tokens=["Yes", "."]))
    stored = []
    for name, colour in (("cat.png", (200, 40, 40)), ("dog.png", (40, 200, 40))):
        win.new_chat()
        assert drop(win.composer, file_mime(write_png(tmp_path / name, colour)))
        win.composer.setPlainText(f"What is in {name}?")
        with qtbot.waitSignal(win.answer_finished, timeout=5000):
            qtbot.keyClick(win.composer, Qt.Key.Key_Return)
        stored.append(win.keeper.messages()[0].images[0])
        win.delete_conversation(win.keeper.current_id)
    win.reattach([stored[0]], ["cat.png"])  # the first chat's photo, attached again to a message not sent
    win.close()
    for path in stored:
        os.utime(path, (time.time() - 60, time.time() - 60))  # stored in an earlier run
    again = make_window(FakeBackend())  # the start purges the deleted chats, then their files
    assert again.attachments.paths() == [stored[0]] and Path(stored[0]).exists()
    assert not Path(stored[1]).exists()


def test_a_kept_draft_naming_a_file_that_is_no_image_leaves_it_out(qtbot, make_window, tmp_path):
    """Trial 50: a settings file edited by hand named /etc/passwd in the draft: it came back as a blank
    image chip counted as an image (and a copy of it went into the data folder)."""
    photo, text_file = write_png(tmp_path / "cat.png"), tmp_path / "notes.txt"
    text_file.write_text("root:x:0:0")
    win = make_window(FakeBackend())
    win.shutdown()
    win.qsettings.setValue(KEY, json.dumps({"text": "Look", "files": [str(photo), str(text_file)],
                                            "names": ["cat.png", "notes.txt"]}))
    win.qsettings.sync()
    again = make_window(FakeBackend())
    assert again.attachments.paths() == [str(photo)]
    assert again.storage_banner.message() == ("Your unsent message is back without notes.txt: that file is gone or "
                                              "unreadable.")


def _ask(qtbot, win, text):
    win.composer.setPlainText(text)
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    return win.keeper.current_id


def test_each_chat_keeps_its_own_unsent_message(qtbot, make_window, tmp_path):
    """Trial 55: one message box for every chat; what was typed in one chat was still there in the next,
    and sent to it."""
    win = make_window(FakeBackend(tokens=["Fine", "."]))
    chat_a = _ask(qtbot, win, "First chat.")
    win.new_chat()
    chat_b = _ask(qtbot, win, "Second chat.")
    photo = write_png(tmp_path / "receipt.png")
    win.add_files([str(photo)])
    win.composer.setPlainText("Draft for B")
    win.open_conversation(chat_a)
    assert win.composer.toPlainText() == "" and win.attachments.paths() == []
    win.composer.setPlainText("Draft for A")
    win.new_chat()
    assert win.composer.toPlainText() == ""
    win.composer.setPlainText("Draft for a new chat")
    win.open_conversation(chat_b)
    assert win.composer.toPlainText() == "Draft for B" and win.attached_names() == ["receipt.png"]
    assert win.composer.textCursor().position() == len("Draft for B")  # to go on typing
    win.open_conversation(chat_a)
    assert win.composer.toPlainText() == "Draft for A" and win.attachments.paths() == []
    win.new_chat()
    assert win.composer.toPlainText() == "Draft for a new chat"
    win.close()  # all three through a quit: the one shown, and the two set aside

    again = make_window(FakeBackend(tokens=["Fine", "."]))
    drafts = {chat_a: "Draft for A", chat_b: "Draft for B", None: "Draft for a new chat"}
    assert again.composer.toPlainText() == drafts[again.keeper.current_id]  # the last chat saved reopens
    again.new_chat()
    assert again.composer.toPlainText() == "Draft for a new chat"
    again.open_conversation(chat_b)
    assert again.composer.toPlainText() == "Draft for B" and again.attached_names() == ["receipt.png"]
    [chip] = again.attachments.chips()
    assert open(chip.path, "rb").read() == photo.read_bytes()  # the stored copy, kept through the start's cleanup
    again.open_conversation(chat_a)
    assert again.composer.toPlainText() == "Draft for A"
    _ask(qtbot, again, again.composer.toPlainText())
    assert [m.text for m in again.store.messages(chat_a) if m.role == "user"] == ["First chat.", "Draft for A"]
    assert [m.text for m in again.store.messages(chat_b) if m.role == "user"] == ["Second chat."]


def test_unsent_messages_of_chats_lost_with_the_database_come_back_in_a_new_chat(qtbot, make_window, tmp_path,
                                                                                   data_dir):
    """Trial 69 F4: after the database was damaged or emptied, the kept unsent messages named chats it no
    longer held: they were dropped, and erased from the settings file at quit, without a word. A
    deleted chat's message is not brought back (its Undo was the way back)."""
    win = make_window(FakeBackend(tokens=["Fine", "."]))
    chat_a = _ask(qtbot, win, "First chat.")
    win.new_chat()
    _ask(qtbot, win, "Second chat.")
    photo = write_png(tmp_path / "receipt.png")
    win.add_files([str(photo)])
    win.composer.setPlainText("Draft for B")
    win.new_chat()
    _ask(qtbot, win, "Third chat.")
    win.composer.setPlainText("Draft for C, deleted")
    win.delete_conversation(win.keeper.current_id)
    win.composer.setPlainText("Draft for a new chat")
    win.open_conversation(chat_a)
    win.composer.setPlainText("Draft for A")
    win.close()
    for name in ("smolchat.sqlite3", "smolchat.sqlite3-wal", "smolchat.sqlite3-shm"):
        (data_dir / name).unlink(missing_ok=True)  # a database emptied (or another put in its place)

    again = make_window(FakeBackend())
    assert again.keeper.current_id is None and again.store.conversations() == []
    assert again.composer.toPlainText() == "Draft for a new chat\n\nDraft for B\n\nDraft for A"
    assert again.attached_names() == ["receipt.png"]
    assert again.storage_banner.message() == ("Unsent messages of chats this database no longer holds are back in a "
                                              "new chat, so that nothing typed is lost.")
    again.close()
    third = make_window(FakeBackend())  # kept as the new chat's now: once, with no notice
    assert third.composer.toPlainText() == "Draft for a new chat\n\nDraft for B\n\nDraft for A"
    assert not third.storage_banner.message()


def test_a_question_taken_back_after_a_failure_stays_with_its_chat(qtbot, make_window):
    """Trial 55 F1: "And of Germany?" came back to the message box after a 401, then went, joined to
    the next text typed, to the chat opened next."""
    backend = FakeBackend(tokens=["Paris", "."])
    win = make_window(backend)
    chat_a = _ask(qtbot, win, "What is the capital of France?")
    win.new_chat()
    chat_b = _ask(qtbot, win, "Another topic.")
    win.open_conversation(chat_a)
    backend.image_error, backend.error_type = "fake: 401 Unauthorized", "Remote:unauthorized"
    _ask(qtbot, win, "And of Germany?")
    assert win.composer.toPlainText() == "And of Germany?"  # taken back, to send again
    backend.image_error = None
    win.open_conversation(chat_b)
    assert win.composer.toPlainText() == ""
    _ask(qtbot, win, "Summarize our chat in one sentence.")
    assert [m.text for m in win.store.messages(chat_b) if m.role == "user"] == [
        "Another topic.", "Summarize our chat in one sentence."]
    win.open_conversation(chat_a)
    assert win.composer.toPlainText() == "And of Germany?"


def test_a_new_chats_unsent_message_opens_a_new_chat_at_the_next_start(qtbot, make_window):
    """Trial 56: quit with a new, unsent chat open, and the next start opened the last saved chat, the
    message being written hidden behind New chat."""
    win = make_window(FakeBackend(tokens=["Fine", "."]))
    chat = _ask(qtbot, win, "A saved chat.")
    win.new_chat()
    win.composer.setPlainText("unsaved new-chat draft")
    win.close()

    again = make_window(FakeBackend())
    assert again.keeper.current_id is None and again.composer.toPlainText() == "unsaved new-chat draft"
    again.open_conversation(chat)
    assert again.composer.toPlainText() == ""
    again.new_chat()
    assert again.composer.toPlainText() == "unsaved new-chat draft"


def _editing_first_chat(qtbot, make_window):
    """A window with two chats, the first open with "draft A" set aside by an edit of its question
    (now "EDITED: And of Italy?"): ``(window, first chat, second chat)``."""
    win = make_window(FakeBackend(tokens=["Fine", "."]))
    chat_a = _ask(qtbot, win, "And of Germany?")
    win.new_chat()
    chat_b = _ask(qtbot, win, "Another chat.")
    win.open_conversation(chat_a)
    win.composer.setPlainText("draft A")
    win._on_message_action("edit", 0)
    win.composer.setPlainText("EDITED: And of Italy?")
    return win, chat_a, chat_b


def test_an_edit_left_for_another_chat_is_resumed_when_its_chat_opens(qtbot, make_window):
    """Trial 56: switching chats in the middle of an edit dropped the edit without a word (its draft set
    aside came back, the edited text did not)."""
    win, chat_a, chat_b = _editing_first_chat(qtbot, make_window)
    win.open_conversation(chat_b)
    assert win._editing is None and win.composer.toPlainText() == ""
    win.open_conversation(chat_a)
    assert win._editing == 0 and win.composer.toPlainText() == "EDITED: And of Italy?"
    assert win.banner.message().startswith("Editing a message")
    qtbot.keyClick(win.composer, Qt.Key.Key_Escape)  # cancelled: the draft set aside comes back
    assert win._editing is None and win.composer.toPlainText() == "draft A"


def test_an_edit_left_for_another_chat_whose_message_went_is_in_the_message_box(qtbot, make_window):
    """Trial 70 N4: the edit of a message deleted meanwhile was dropped when its chat opened."""
    win, chat_a, chat_b = _editing_first_chat(qtbot, make_window)
    win.open_conversation(chat_b)
    edited = win._chat_drafts[chat_a].edit[0]
    win.store.delete_message(edited)  # (another way than this window's: a backup put back, a second copy)
    win.open_conversation(chat_a)
    assert win._editing is None and win.composer.toPlainText() == "draft A\n\nEDITED: And of Italy?"
    assert win.banner.message() == ("The message you were editing is not in this chat any more: your edit is in "
                                    "the message box, to send as a new message.")


def test_an_edit_left_for_another_chat_is_kept_through_a_quit(qtbot, make_window, tmp_path):
    """Session 47's leftover: a chat left in the middle of an edit kept the edit while the window
    stayed open; at a quit only the draft it set aside was kept, and the edit was gone."""
    win, chat_a, chat_b = _editing_first_chat(qtbot, make_window)
    photo = write_png(tmp_path / "map.png")
    assert drop(win.composer, file_mime(photo))
    win.open_conversation(chat_b)
    win.close()

    again = make_window(FakeBackend(tokens=["Rome", "."]))
    assert again.keeper.current_id == chat_b and again._editing is None and again.composer.toPlainText() == ""
    again.open_conversation(chat_a)
    assert again._editing == 0 and again.composer.toPlainText() == "EDITED: And of Italy?"
    assert again.attached_names() == ["map.png"]
    with qtbot.waitSignal(again.answer_finished, timeout=5000):
        qtbot.keyClick(again.composer, Qt.Key.Key_Return)
    assert [w.text for w in again.transcript.widgets()] == ["EDITED: And of Italy?", "Rome."]
    assert again.transcript.widgets()[0].actions_row.versions.label.text() == "2 / 2"
    assert again.composer.toPlainText() == "draft A"  # the draft the edit set aside, back after it
