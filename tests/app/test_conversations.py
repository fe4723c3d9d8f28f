"""Conversations in the window: sidebar, restore after restart, streaming saves, message actions, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QFileDialog, QListWidget, QMessageBox

from app.backends.fake import FakeBackend
from app.conversations import attached_name
from app.store import Store
from tests.app.helpers import drop, file_mime


def ask(qtbot, win, text: str) -> dict:
    win.composer.setPlainText(text)
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as finished:
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    return finished.args[0]


def test_sidebar_lists_new_rename_delete_undo_and_search(qtbot, window):
    sidebar = window.findChild(QListWidget, "conversationList")
    assert sidebar is not None and sidebar.count() == 0
    ask(qtbot, window, "What colour is the cat?")
    ask(qtbot, window, "And the sofa?")
    window.new_chat()
    ask(qtbot, window, "Read this receipt")
    assert window.sidebar.titles() == ["Read this receipt", "What colour is the cat?"]

    first = window.sidebar.ids()[1]
    window.sidebar.chat_items()[1].setText("Cat chat")  # what an inline rename does
    assert window.store.conversation(first).title == "Cat chat"
    window.sidebar.chat_items()[1].setText("\u202eCat\x00  chat\n2 ")  # (trial 69 F11: a NUL was kept)
    assert window.store.conversation(first).title == "Cat chat 2"
    window.sidebar.chat_items()[1].setText("\x00 \t")  # nothing left: not renamed
    assert window.store.conversation(first).title == "Cat chat 2" and window.sidebar.titles()[1] == "Cat chat 2"
    window.sidebar.chat_items()[1].setText("Cat chat")

    window.sidebar.search.setText("sofa")
    assert window.sidebar.titles() == ["Cat chat"]
    window.sidebar.search.clear()

    window.sidebar.list.setCurrentItem(window.sidebar.chat_items()[1])  # opens it
    assert window.keeper.current_id == first
    assert [m["text"] for m in window.transcript.messages()][:2] == ["What colour is the cat?", "The cat is orange."]
    window.delete_conversation(first)
    assert window.sidebar.titles() == ["Read this receipt"]
    assert window.transcript.messages() == [] and "Deleted" in window.banner.message()
    qtbot.mouseClick(window.banner.findChild(type(window.new_chat_button), "bannerAction"), Qt.MouseButton.LeftButton)
    assert "Cat chat" in window.sidebar.titles() and window.keeper.current_id == first


def test_undo_brings_back_chats_deleted_one_after_another(qtbot, window):
    """Trial 69 F11: after three chats were deleted in a row, Undo (Ctrl+Z) brought back only the last."""
    for words in ("First", "Second", "Third", "Kept"):
        window.new_chat()
        ask(qtbot, window, words)
    ids = dict(zip(window.sidebar.titles(), window.sidebar.ids()))
    for title in ("First", "Third", "Second"):
        window.delete_conversation(ids[title])
    assert window.sidebar.titles() == ["Kept"] and window.banner.message() == "Deleted “Second”."
    window.sidebar.list.setFocus()
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert sorted(window.sidebar.titles()) == ["Kept", "Second"]
    assert window.banner.message() == "Restored “Second”. Deleted before it: “Third”."
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert window.banner.message() == "Restored “Third”. Deleted before it: “First”."
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert sorted(window.sidebar.titles()) == ["First", "Kept", "Second", "Third"]
    assert window.keeper.current_id == ids["First"] and not window.banner.offers_undo()
    # A message's delete undone between (trial 70 N6: the chats deleted before were out of reach).
    window.delete_conversation(ids["Third"])
    window.open_conversation(ids["Kept"])
    window.delete_message(1)
    assert window.banner.offers_undo() and [m["text"] for m in window.transcript.messages()] == ["Kept"]
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert len(window.transcript.messages()) == 2
    assert window.banner.message() == "Restored the message. Deleted before it: “Third”."
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert "Third" in window.sidebar.titles()


def test_open_conversation_restores_after_restart(qtbot, make_window, factory, png, data_dir):
    win = make_window(factory)
    win.settings.system_prompt = "Answer in French."
    win.settings.overrides = {"temperature": 0.7}
    drop(win.composer, file_mime(png))
    ask(qtbot, win, "Quelle couleur?")
    conv_id = win.keeper.current_id
    win.close()

    again = make_window(FakeBackend())
    assert again.keeper.current_id == conv_id
    messages = again.transcript.messages()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["text"] == "Quelle couleur?" and messages[1]["text"] == "The cat is orange."
    assert len(messages[0]["images"]) == 1 and messages[0]["images"][0].startswith(str(data_dir / "images"))
    answer = again.transcript.last_assistant()
    assert "5 generated tokens" in answer.footer() and "TTFT 0.12 s" in answer.footer()
    assert again.settings.system_prompt == "Answer in French." and again.settings.overrides == {"temperature": 0.7}
    image = again.transcript.widgets()[0].findChildren(object, "messageImage")[0]
    full = image.open_viewer()
    assert full.image.size().width() == 64 and full.isVisible()
    full.close()


def test_answer_is_saved_while_it_streams(qtbot, make_window, data_dir):
    session = FakeBackend(tokens=[f" t{i}" for i in range(2000)], delay=0.002)
    win = make_window(session)
    win.composer.setPlainText("long please")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: session.yielded > 300, timeout=10_000)
    reader = Store(data_dir, recover=False)  # a second connection sees every flush
    saved = reader.messages(win.keeper.current_id)[-1]
    reader.close()
    assert saved.status == "streaming" and saved.text.startswith("t0 t1 t2")
    shown = len(win.transcript.last_assistant().text)
    assert 0 < len(saved.text) <= shown
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.stop()
    final = win.store.messages(win.keeper.current_id)[-1]
    assert final.status == "cancelled" and final.text == win.transcript.last_assistant().text


def test_regenerate_edit_delete_and_copy(qtbot, window, fake_session):
    ask(qtbot, window, "first question")
    ask(qtbot, window, "second question")
    assert len(window.transcript.widgets()) == 4

    answer = window.transcript.widgets()[1]
    answer.actions_row.button("copy").click()
    assert QApplication.clipboard().text() == "The cat is orange."

    # Regenerate the first answer: later messages go, the engine sees only what came before.
    with qtbot.waitSignal(window.answer_finished, timeout=10_000):
        window.transcript.widgets()[1].actions_row.button("regenerate").click()
    assert [m["text"] for m in window.transcript.messages()] == ["first question", "The cat is orange."]
    assert fake_session.calls[-1]["text"] == "first question" and fake_session.calls[-1]["turns"] == []
    assert [m.text for m in window.store.messages(window.keeper.current_id)] == ["first question", "The cat is orange."]

    # Edit and resend the question.
    window.transcript.widgets()[0].actions_row.button("edit").click()
    assert window.composer.toPlainText() == "first question"
    window.composer.setPlainText("edited question")
    with qtbot.waitSignal(window.answer_finished, timeout=10_000):
        qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    assert [m["text"] for m in window.transcript.messages()] == ["edited question", "The cat is orange."]
    assert [m.text for m in window.store.messages(window.keeper.current_id)] == ["edited question", "The cat is orange."]

    window.transcript.widgets()[1].actions_row.button("delete").click()
    assert [m["text"] for m in window.transcript.messages()] == ["edited question"]
    assert [m.text for m in window.store.messages(window.keeper.current_id)] == ["edited question"]


def test_the_name_a_file_was_attached_as_is_kept_and_an_edit_after_a_restart_keeps_it(qtbot, make_window, tmp_path,
                                                                                       data_dir):
    holiday = tmp_path / "holidays" / "holiday.png"
    holiday.parent.mkdir()
    Image.new("RGB", (32, 24), (20, 90, 200)).save(holiday)
    win = make_window(FakeBackend())
    drop(win.composer, file_mime(holiday))
    image = QImage(40, 30, QImage.Format.Format_RGB32)
    image.fill(Qt.GlobalColor.darkCyan)
    QApplication.clipboard().setImage(image)
    win.composer.setFocus()
    qtbot.keyClick(win.composer, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)  # named by its hash
    ask(qtbot, win, "Where is this?")
    [question, _answer] = win.store.messages(win.keeper.current_id)
    assert question.attached_names == ["holiday.png", "pasted image.png"]
    win.close()

    again = make_window(FakeBackend())  # the window's map back to the user's files is gone
    again.transcript.widgets()[0].actions_row.button("edit").click()
    ask(qtbot, again, "Where, really?")
    [edited, _answer] = again.store.messages(again.keeper.current_id)
    assert edited.text == "Where, really?" and edited.images == question.images
    assert edited.attached_names == ["holiday.png", "pasted image.png"]


def test_attached_name_is_the_users_file_name_never_a_hash(store, tmp_path, data_dir):
    from app.paths import pasted_images_dir

    assert attached_name(tmp_path / "trip" / "walk.mp4", store) == "walk.mp4"
    assert attached_name(pasted_images_dir() / "0a1b2c.png", store) == "pasted image.png"
    assert attached_name(store.images_dir / "0a1b2c.jpg", store) == ""  # a stored copy: its name is unknown


def export_chat(window, monkeypatch, out, kind: str = "md"):
    """Chat ▸ Export as ``kind``, the save dialog answered with ``out``; returns ``out``."""
    out.parent.mkdir(exist_ok=True)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    window.actions[f"export_{kind}"].trigger()
    return out


def test_export_markdown_with_images_and_json(qtbot, window, png, tmp_path, monkeypatch):
    drop(window.composer, file_mime(png))
    ask(qtbot, window, "What is it?")
    out = export_chat(window, monkeypatch, tmp_path / "export" / "chat.md")
    text = out.read_text()
    assert "## You" in text and "What is it?" in text and "The cat is orange." in text
    [image] = (out.parent / "chat_images").iterdir()
    assert f"(chat_images/{image.name})" in text and image.read_bytes() == png.read_bytes()

    data = json.loads(export_chat(window, monkeypatch, tmp_path / "export" / "chat.json", "json").read_text())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert data["messages"][1]["stats"]["generated_tokens"] == 5


def test_an_export_without_a_stored_image_gone_since_says_so(qtbot, window, png, tmp_path, monkeypatch):
    drop(window.composer, file_mime(png))
    ask(qtbot, window, "What is it?")
    [question] = [m for m in window.store.messages(window.keeper.current_id) if m.role == "user"]
    Path(question.images[0]).unlink()
    out = export_chat(window, monkeypatch, tmp_path / "export" / "chat.md")
    assert "*(image missing: photo.png, gone from Smolchat's data folder)*" in out.read_text()
    assert window.banner.message() == (f"Exported to {out}, without 1 file gone from Smolchat's data folder "
                                       "(photo.png): the export names it in its place.")


def test_an_export_names_an_image_as_it_was_attached(qtbot, window, tmp_path, monkeypatch):
    holiday = tmp_path / "holiday.png"
    Image.new("RGB", (32, 24), (20, 90, 200)).save(holiday)
    drop(window.composer, file_mime(holiday))
    ask(qtbot, window, "Where is this?")
    out = export_chat(window, monkeypatch, tmp_path / "export" / "chat.md")
    assert "![holiday.png](chat_images/holiday.png)" in out.read_text()
    assert [p.name for p in (out.parent / "chat_images").iterdir()] == ["holiday.png"]
    assert (out.parent / "chat_images" / "holiday.png").read_bytes() == holiday.read_bytes()


def test_long_titles_are_elided_not_scrolled(qtbot, window):
    title = "What animal is this, and what is it doing on that very long sofa by the window?"
    ask(qtbot, window, title)
    sidebar = window.sidebar.list
    assert sidebar.textElideMode() == Qt.TextElideMode.ElideRight
    assert not sidebar.horizontalScrollBar().isVisible()
    assert window.sidebar.chat_items()[0].toolTip() == window.store.conversation(window.sidebar.ids()[0]).title


def test_closing_the_window_mid_answer_keeps_it_as_interrupted(qtbot, make_window, data_dir):
    """What arrived is kept, footed "interrupted — Smolchat closed (or could not save) before this answer was complete"
    when reopened, not "stopped by you" (which is Stop's)."""
    from PySide6.QtWidgets import QLabel

    win = make_window(FakeBackend(tokens=[f"t{i} " for i in range(400)], delay=0.01))
    win.composer.setPlainText("long please")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(win.transcript.last_assistant().text) > 20, timeout=10_000)
    conv = win.keeper.current_id
    win.close()
    [question, answer] = Store(data_dir, recover=False).messages(conv)
    assert answer.status == "interrupted" and answer.text.startswith("t0 t1 t2")
    again = make_window(FakeBackend())
    footer = again.transcript.widgets()[-1].findChild(QLabel, "messageFooter")
    assert footer.text() == "interrupted — Smolchat closed (or could not save) before this answer was complete"


def test_export_adds_the_extension_and_starts_in_the_last_export_folder(qtbot, window, tmp_path, monkeypatch):
    """Found by a trial: "chat" typed in the JSON dialog saved a file without .json, and the dialog
    opened in the folder Smolchat was started from."""
    ask(qtbot, window, "What is it?")
    asked = []
    out = tmp_path / "exports" / "chat"
    out.parent.mkdir()

    def save_as(parent, caption, start, filters):
        asked.append(start)
        return str(out), filters
    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_as)
    window.actions["export_json"].trigger()
    assert json.loads((tmp_path / "exports" / "chat.json").read_text())["messages"][0]["text"] == "What is it?"
    assert not out.exists()
    assert Path(asked[0]).parent != Path.cwd() and Path(asked[0]).name == "What is it.json"
    window.actions["export_md"].trigger()
    assert Path(asked[1]) == tmp_path / "exports" / "What is it.md"
    assert (tmp_path / "exports" / "chat.md").is_file()
    # "chat" again: the dialog asked about "chat", so replacing chat.json is asked here.
    (tmp_path / "exports" / "chat.json").write_text("keep me")
    questions = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a: questions.append(a[2]) or QMessageBox.StandardButton.No)
    window.actions["export_json"].trigger()
    assert questions == ["chat.json already exists. Replace it?"]
    assert (tmp_path / "exports" / "chat.json").read_text() == "keep me"


def test_bidi_controls_never_turn_a_title_around(qtbot, window):
    """Trial 38: a chat titled with U+202E (right-to-left override) showed reversed in the sidebar
    ("9991# edirrevo live"). Titles lose bidi embeddings, overrides and isolates; real right-to-left
    letters stay as they are."""
    from app.conversations import display_title, title_from

    assert title_from("\u202eevil override #1999", []) == "evil override #1999"
    assert title_from("a \u202ab\u202c \u2067c\u2069 \u2066d\u2069 \u2068e\u2069 \u202df\u202c", []) == "a b c d e f"
    assert title_from("שלום \u202eworld", []) == "שלום world"
    assert display_title("\u202e\u2066") == ""
    ask(qtbot, window, "\u202eevil override #1999")
    assert window.store.conversation(window.keeper.current_id).title == "evil override #1999"

    older = window.store.create_conversation("\u202eevil override #1998")  # stored by an older Smolchat, or renamed
    window.store.create_conversation("\u202e\u2069")
    window.refresh_sidebar()
    assert window.sidebar.titles() == ["New chat", "evil override #1998", "evil override #1999"]
    assert [item.toolTip() for item in window.sidebar.chat_items()] == window.sidebar.titles()
    window.delete_conversation(older.id)
    assert window.banner.message() == "Deleted “evil override #1998”."
    # A chat renamed to such a title keeps it without them (trial 38b), and so does its export's heading.
    window.rename_conversation(window.keeper.current_id, "\u202eRENAMED\u2066x\u2069")
    assert window.store.conversation(window.keeper.current_id).title == "RENAMEDx"
    from app.export import export_markdown

    raw = window.store.create_conversation("\u202estored raw")
    window.store.add_message(raw.id, "user", "hi")
    path = export_markdown(window.store, raw.id, window.store.folder / "raw.md")
    assert path.read_text().startswith("# stored raw\n")


def test_the_first_export_opens_in_the_home_folder_where_there_is_no_documents_folder(qtbot, window, tmp_path,
                                                                                    monkeypatch):
    """Found by a GUI trial: without ~/Documents the dialog opened where Smolchat was started from."""
    from PySide6.QtCore import QStandardPaths

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(QStandardPaths, "writableLocation", lambda kind: str(home / "Documents"))  # absent
    ask(qtbot, window, "Where?")
    asked = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda parent, caption, start, filters: asked.append(start)
                        or ("", filters))
    window.actions["export_md"].trigger()
    assert asked == [str(home / "Where.md")]


def test_the_export_name_of_a_cut_title_drops_its_ellipsis(qtbot, window, tmp_path, monkeypatch):
    """Found by a trial: the "…" that ends a title cut to fit the sidebar became "_" in the file name."""
    window.qsettings.setValue("export/folder", str(tmp_path))
    ask(qtbot, window, "Show me a Python code block that prints hello world, with a comment")
    assert window.store.conversation(window.keeper.current_id).title == "Show me a Python code block that prints hello w…"
    asked = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda parent, caption, start, filters: asked.append(start)
                        or ("", filters))
    window.actions["export_md"].trigger()
    assert asked == [str(tmp_path / "Show me a Python code block that prints hello w.md")]


def test_the_export_name_of_a_long_title_is_cut_at_a_word_and_saveable(qtbot, window, tmp_path, monkeypatch):
    """Trial 62 F8: a 339-character title proposed a file name over 255 bytes, and the save dialog's Save
    was greyed out with no word why; "France?" was proposed as "France_"."""
    window.qsettings.setValue("export/folder", str(tmp_path))
    ask(qtbot, window, "What is the capital of France?")
    asked = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda parent, caption, start, filters: asked.append(start)
                        or ("", filters))
    window.actions["export_json"].trigger()
    window.rename_conversation(window.keeper.current_id, "Une très longue question sur l'histoire de France, " * 7)
    window.actions["export_md"].trigger()
    assert asked == [str(tmp_path / "What is the capital of France.json"),
                     str(tmp_path / "Une très longue question sur l'histoire de France, Une très.md")]


def test_identical_files_attached_under_different_names_keep_each_name(qtbot, make_window, tmp_path, monkeypatch,
                                                                       data_dir):
    """The image store keeps one copy of identical bytes: each file's name comes from the chip it was
    attached as, in order, not from a map of copies (found by a trial: both were named "my cat.png"),
    through Send, the export, Edit and an edit after a restart."""
    holiday, cat = tmp_path / "holiday photo.png", tmp_path / "my cat.png"
    Image.new("RGB", (32, 24), (20, 90, 200)).save(holiday)
    cat.write_bytes(holiday.read_bytes())
    win = make_window(FakeBackend())
    drop(win.composer, file_mime(holiday))
    drop(win.composer, file_mime(cat))
    ask(qtbot, win, "Same?")
    [question, _answer] = win.store.messages(win.keeper.current_id)
    assert question.images[0] == question.images[1]
    assert question.attached_names == ["holiday photo.png", "my cat.png"]
    out = export_chat(win, monkeypatch, tmp_path / "export" / "chat.md")  # one file, under its first name
    assert "![holiday photo.png](<chat_images/holiday photo.png>)\n\n![my cat.png](<chat_images/holiday photo.png>)" \
        in out.read_text()
    assert [p.name for p in (out.parent / "chat_images").iterdir()] == ["holiday photo.png"]

    win.transcript.widgets()[0].actions_row.button("edit").click()
    assert [c.name for c in win.attachments.chips()] == ["holiday photo.png"]  # one copy: one chip
    ask(qtbot, win, "Same, really?")
    assert win.store.messages(win.keeper.current_id)[0].attached_names == ["holiday photo.png"]
    win.close()

    again = make_window(FakeBackend())
    assert again.controller.switch_version(0, -1)  # back to the version with both files
    again.transcript.widgets()[0].actions_row.button("edit").click()
    assert [c.name for c in again.attachments.chips()] == ["holiday photo.png"]
    ask(qtbot, again, "Once more")
    assert again.store.messages(again.keeper.current_id)[0].attached_names == ["holiday photo.png"]


def test_an_export_onto_a_folder_says_so_in_words(qtbot, window, tmp_path, monkeypatch):
    """Found by a trial: "[Errno 21] ..." in the banner; and "folder" typed without an extension asked
    "folder.md already exists. Replace it?" about a folder."""
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    from app.export import export_dialog

    ask(qtbot, window, "Hello")
    (tmp_path / "folder.md").mkdir()
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a) or QMessageBox.StandardButton.Yes)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "folder.md"), ""))
    assert export_dialog(window, "md") is None
    assert window.banner.message() == (f"Could not export the chat: {tmp_path / 'folder.md'}: a folder of that name "
                                       "is there.")
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "folder"), ""))
    assert export_dialog(window, "md") is None and asked == []
    assert window.banner.message() == f"Could not export the chat: {tmp_path / 'folder.md'} is a folder."


def test_an_export_into_the_data_folder_is_refused_and_the_chats_are_kept(qtbot, window, data_dir, monkeypatch):
    """Trial 69 F1: an export saved over smolchat.sqlite3 said "Exported to ..." and every chat was gone at
    the next start; one over settings.ini was overwritten at quit."""
    from app.export import export_dialog

    ask(qtbot, window, "Hello")
    database = Path(window.store.folder) / "smolchat.sqlite3"
    before = database.read_bytes()
    for target in (database, Path(window.store.folder) / "settings.ini", Path(window.store.folder) / "images" / "a.md"):
        monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, target=target, **k: (str(target), ""))
        assert export_dialog(window, "json") is None
        assert window.banner.message() == (f"Could not export the chat: {target} is inside Smolchat's data folder "
                                           f"({Path(window.store.folder).resolve()}), which holds its database and "
                                           "settings: choose another folder.")
    assert database.read_bytes() == before and not (Path(window.store.folder) / "images" / "a.md").exists()
    window.shutdown()
    store = Store(data_dir)
    assert [m.text for m in store.messages(store.conversations()[0].id)][0] == "Hello"
    store.close()


def test_chats_are_listed_under_when_they_last_changed(qtbot, window):
    """Headings (Today, Yesterday, Previous 7 / 30 days, the month, the year) that keys and clicks pass
    over: Down from the last chat of one period opens the first of the next."""
    import datetime as dt
    import time

    from PySide6.QtCore import QLocale

    from app.conversation_list import period

    today = dt.date(2026, 12, 5)
    noon = dt.datetime(2026, 12, 5, 12).timestamp()
    day = 86400
    QLocale.setDefault(QLocale(QLocale.Language.German))  # the window's words are English, months too
    try:
        assert [period(noon - d * day, today) for d in (0, 1, 2, 7, 8, 30, 31, 70, 400)] == [
            "Today", "Yesterday", "Previous 7 days", "Previous 7 days", "Previous 30 days", "Previous 30 days",
            "November", "September", "2025"]
    finally:
        QLocale.setDefault(QLocale.system())
    assert period(noon + 3 * day, today) == "Today"  # a clock set back

    now = time.time()
    for title, days in (("Old", 400), ("Week", 3), ("Today 1", 0), ("Today 2", 0)):
        conv = window.store.create_conversation(title)
        window.store.add_message(conv.id, "user", title)
        window.store.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now - days * day, conv.id))
    window.store.db.commit()
    window.refresh_sidebar()
    sidebar = window.sidebar
    year = str(dt.date.fromtimestamp(now - 400 * day).year)
    assert sidebar.headings() == ["Today", "Previous 7 days", year]
    assert sidebar.titles() == ["Today 2", "Today 1", "Week", "Old"]
    rows = [sidebar.list.item(i).text() for i in range(sidebar.list.count())]
    assert rows == ["Today", "Today 2", "Today 1", "Previous 7 days", "Week", year, "Old"]

    sidebar.list.setCurrentItem(sidebar.chat_items()[1])  # "Today 1"
    sidebar.list.setFocus()
    qtbot.keyClick(sidebar.list, Qt.Key.Key_Down)  # over the heading
    assert window.store.conversation(window.keeper.current_id).title == "Week"
    heading = sidebar.list.item(rows.index(year))
    qtbot.mouseClick(sidebar.list.viewport(), Qt.MouseButton.LeftButton, pos=sidebar.list.visualItemRect(heading).center())
    assert window.store.conversation(window.keeper.current_id).title == "Week"  # a heading opens nothing
    window.step_conversation(1)
    assert window.store.conversation(window.keeper.current_id).title == "Old"


def test_each_message_shows_when_it_was_sent(qtbot, make_window, data_dir):
    """The stored time under a message reopened (the day said when not today), now under a new one;
    a stored time that is not a number (another program's row) shows nothing."""
    import time

    from app.formatting import message_time
    from app.store import Store

    store = Store(data_dir)
    chat = store.create_conversation("Birds")
    old = store.add_message(chat.id, "user", "What is this bird?")
    answer = store.add_message(chat.id, "assistant", "A robin.")
    odd = store.add_message(chat.id, "user", "And this?")
    last_week = time.time() - 6 * 86400
    store.db.execute("UPDATE messages SET created = ? WHERE id IN (?, ?)", (last_week, old.id, answer.id))
    store.db.execute("UPDATE messages SET created = 'yesterday' WHERE id = ?", (odd.id,))
    store.db.commit()
    store.close()
    fake = FakeBackend(tokens=["A", " blackbird", "."])
    win = make_window(fake)
    shown = [m.actions_row.time for m in win.transcript.widgets()]
    assert [t.text() for t in shown] == [message_time(last_week, time.time())[0]] * 2 + [""]
    assert shown[0].toolTip() == message_time(last_week, time.time())[1] and shown[0].text() != ""
    assert win.keeper.messages()[2].created is None
    before = time.time()
    win.composer.setPlainText("And the other one?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    for message in win.transcript.widgets()[-2:]:
        assert message.actions_row.time.text() == message_time(before, before)[0] or \
            message.actions_row.time.text() == message_time(time.time(), time.time())[0]  # (a minute may turn)
        assert message.actions_row.time.isVisible()


def test_delete_in_the_list_goes_on_to_the_next_chat_and_switching_does_not_refill_the_list(qtbot, window, monkeypatch):
    """Trial 48: after Delete in the list the open chat was a new one with no chat current, so the next
    Delete did nothing; and every switch refilled the whole list (0.1 s with 5,000 chats)."""
    store = window.store
    for title in ("Oldest", "Middle", "Newest"):
        store.add_message(store.create_conversation(title).id, "user", title)
    window.refresh_sidebar()
    assert window.sidebar.titles() == ["Newest", "Middle", "Oldest"]
    fills = []
    real = window.sidebar.set_conversations
    monkeypatch.setattr(window.sidebar, "set_conversations", lambda *a, **k: fills.append(1) or real(*a, **k))
    window.sidebar.list.setFocus()
    window.sidebar.list.setCurrentItem(window.sidebar.chat_items()[0])  # opens "Newest"
    window.step_conversation(1)
    assert store.conversation(window.keeper.current_id).title == "Middle" and fills == []
    assert window.sidebar.list.currentItem().text() == "Middle"

    window.sidebar.list.setFocus()
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Delete)
    assert window.sidebar.titles() == ["Newest", "Oldest"]
    assert store.conversation(window.keeper.current_id).title == "Oldest"  # the chat that took its row
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Delete)
    assert window.sidebar.titles() == ["Newest"] and store.conversation(window.keeper.current_id).title == "Newest"

    window.composer.setFocus()  # deleted from elsewhere (the menu, a click): a new chat, as before
    window.delete_conversation(window.keeper.current_id)
    assert window.keeper.current_id is None and window.sidebar.titles() == []


def test_a_slow_search_waits_for_a_pause_in_typing(qtbot, window, monkeypatch):
    """A search of ~0.7 s (a database of hundreds of MB, a word beyond A-Z) ran at every key: typing
    "привет" held the window ~4 s. After one slow search the next ones wait for a pause."""
    import time

    for title in ("Привет", "Hello"):
        window.store.add_message(window.store.create_conversation(title).id, "user", title)
    runs = []
    real = window.refresh_sidebar

    def slow() -> None:
        runs.append(window.sidebar.search.text())
        time.sleep(0.15)
        real()
    monkeypatch.setattr(window, "refresh_sidebar", slow)
    window.sidebar.search.setText("п")  # slow: the next ones wait
    for text in ("пр", "при", "прив"):
        window.sidebar.search.setText(text)
    assert runs == ["п"]
    qtbot.waitUntil(lambda: runs[-1] == "прив", timeout=3000)
    assert runs == ["п", "прив"] and window.sidebar.titles() == ["Привет"]


@pytest.mark.parametrize("key", [Qt.Key.Key_Return, Qt.Key.Key_Down])
def test_enter_or_down_straight_after_typing_acts_on_the_words_typed(qtbot, window, monkeypatch, key):
    """Trial 74 F3: after a slow search, the next waits for a pause in typing; Enter pressed within it
    opened the newest chat of the previous words' list, one that did not hold the words typed."""
    import time

    for title in ("Quantum physics", "Xylophone lessons"):
        window.store.add_message(window.store.create_conversation(title).id, "user", title)
    window.open_conversation(None)
    real = window.refresh_sidebar

    def slow() -> None:
        time.sleep(0.15)
        real()
    monkeypatch.setattr(window, "refresh_sidebar", slow)
    window.sidebar.search.setFocus()
    window.sidebar.search.setText("quantum")  # slow: the next search waits for a pause
    assert window.sidebar.titles() == ["Quantum physics"]
    window.sidebar.search.setText("xylophone")
    assert window.sidebar.titles() == ["Quantum physics"]  # (not searched yet)
    qtbot.keyClick(window.sidebar.search, key)
    assert window.sidebar.titles() == ["Xylophone lessons"]
    assert window.store.conversation(window.keeper.current_id).title == "Xylophone lessons"


def test_home_end_and_page_keys_in_the_list_reach_the_first_and_last_chat(qtbot, window):
    """Trial 49: the list's first row is a heading, which cannot be selected: Home and PageUp near the
    top did nothing."""
    import time

    for i, days in enumerate((40, 20, 3, 0)):
        conv = window.store.create_conversation(f"Chat {i}")
        window.store.add_message(conv.id, "user", "hi")
        window.store.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time() - days * 86400, conv.id))
    window.store.db.commit()
    window.refresh_sidebar()
    first, last = window.sidebar.ids()[0], window.sidebar.ids()[-1]
    window.sidebar.list.setFocus()
    for key, target in ((Qt.Key.Key_End, last), (Qt.Key.Key_Home, first), (Qt.Key.Key_PageDown, last),
                        (Qt.Key.Key_PageUp, first)):
        qtbot.keyClick(window.sidebar.list, key)
        assert window.keeper.current_id == target, key
        assert window.sidebar.list.currentItem().data(Qt.ItemDataRole.UserRole) == target


def test_at_midnight_the_headings_and_times_say_yesterday(qtbot, make_window, data_dir, monkeypatch):
    import time

    from app.store import Store

    store = Store(data_dir)
    conv = store.create_conversation("Tonight")
    store.add_message(conv.id, "user", "Still up?")
    store.close()
    win = make_window(FakeBackend())
    [message] = win.transcript.widgets()
    shown = message.actions_row.time.text()
    assert win.sidebar.headings() == ["Today"] and ":" in shown and not shown.startswith("Yesterday")
    later = time.time() + 86400
    monkeypatch.setattr(time, "time", lambda: later)
    win._new_day()  # what the timer set for midnight calls
    assert win.sidebar.headings() == ["Yesterday"]
    assert message.actions_row.time.text() == f"Yesterday {shown}"
    assert win._day_timer.isActive()  # set again for the next midnight


def test_a_shut_window_does_not_read_its_closed_store_at_midnight(qtbot, make_window):
    # A CI run crossed midnight: a window shut by an earlier test refreshed its list from a closed store.
    win = make_window(FakeBackend())
    assert win._day_timer.isActive() and win._day_timer.remainingTime() > 0
    win.shutdown()
    assert not win._day_timer.isActive()
    win._new_day()  # a timeout already queued when it shut
    assert not win._day_timer.isActive()


def _answering_in_the_second_of_two_chats(qtbot, make_window):
    """A window with chats "first chat" and "second chat", a slow answer running in the second (shown);
    returns (window, first chat's id, second chat's id)."""
    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    ask(qtbot, win, "first chat")
    first = win.keeper.current_id
    win.new_chat()
    ask(qtbot, win, "second chat")
    second = win.keeper.current_id
    fake.tokens, fake.delay = ["slow"] * 400, 0.02
    win.composer.setPlainText("more")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: win._busy)
    return win, first, second


def test_opening_or_deleting_the_chat_mid_answer_is_refused_with_a_reason(qtbot, make_window):
    """Trial 55 F5: while an answer ran, a click on another chat, Delete and Ctrl+PgDown did nothing, with
    no word why (with a server gone quiet the window looked frozen)."""
    win, first, second = _answering_in_the_second_of_two_chats(qtbot, make_window)
    win.open_conversation(first)
    assert win.keeper.current_id == second
    assert win.banner.message() == "An answer is being written in this chat: stop it (Esc) to open another chat."
    win.banner.dismiss()
    win.step_conversation(1)
    assert win.keeper.current_id == second and win.banner.message().endswith("to open another chat.")
    win.delete_conversation(second)
    assert win.store.conversation(second) is not None
    assert win.banner.message() == "An answer is being written in this chat: stop it (Esc) to delete this chat."
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.stop()
    win.open_conversation(first)
    assert win.keeper.current_id == first


def test_renaming_a_long_title_shows_its_start_all_selected(qtbot, make_window):
    """Trial 55 F8: the rename field opened scrolled to the title's end ("hat number 22 about …")."""
    from PySide6.QtWidgets import QLineEdit

    win = make_window(FakeBackend(tokens=["A", "."]))
    win.resize(900, 600)
    title = "Chat number 22 about topic 22, with a title far longer than the sidebar is wide"
    ask(qtbot, win, title)
    win.sidebar.start_rename(win.keeper.current_id)
    editor = win.sidebar.list.findChild(QLineEdit)
    qtbot.waitUntil(lambda: editor.cursorPosition() == 0)
    assert editor.selectedText() == editor.text() and editor.text().startswith("Chat number 22")
    assert editor.cursorRect().left() < 10  # the first letter is in view


def test_undo_of_a_chat_deleted_while_another_answers_puts_it_back_in_the_list(qtbot, make_window):
    """Trial 56: Undo said "stop it (Esc) to open another chat" and the chat, restored, stayed out of
    the list until it was next redrawn."""
    win, first, second = _answering_in_the_second_of_two_chats(qtbot, make_window)
    win.delete_conversation(first)
    assert first not in win.sidebar.ids() and win.banner.message() == "Deleted “first chat”."
    assert win.banner.undo()
    assert first in win.sidebar.ids() and win.keeper.current_id == second
    assert win.banner.message() == "Restored “first chat”."  # not opened (an answer is written): said (trial 76 P3)
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.stop()


def test_chat_menu_deletes_the_open_chat_with_undo(qtbot, window):
    """Trial 62: deleting a chat was only in the list's right-click menu (and its Delete key)."""
    chat_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Chat")
    delete = next(a for a in chat_menu.actions() if a.text() == "&Delete chat")
    delete.trigger()  # a new chat, nothing sent: nothing to delete
    assert window.banner.message() == "This chat has no message yet: there is nothing to delete."
    ask(qtbot, window, "What colour is the cat?")
    window.new_chat()
    ask(qtbot, window, "Read this receipt")
    receipt, cat = window.sidebar.ids()
    delete.trigger()
    assert window.sidebar.ids() == [cat] and window.store.conversation(receipt) is None
    assert window.banner.message() == "Deleted “Read this receipt”."
    delete.trigger()  # again, on the new chat it left open: its Undo stays (trial 63: it was lost)
    assert window.banner.message() == "Deleted “Read this receipt”." and window.banner.offers_undo()
    window.banner.undo()
    assert window.sidebar.ids() == [receipt, cat]


def test_the_chat_reopened_at_start_is_the_last_one_open_else_the_newest(window):
    """The chat reopened is read alone (not the whole list of chats, 0.08 s of a start with 3,000): the
    last one open while it is there, else the newest; a setting that is no chat's id is passed over."""
    older = window.store.create_conversation("Older")
    window.store.add_message(older.id, "user", "hi")
    newer = window.store.create_conversation("Newer")
    window.store.add_message(newer.id, "user", "hello")
    gone = window.store.create_conversation("Gone")
    window.store.delete_conversation(gone.id)
    for value, expected in ((older.id, older.id), (str(older.id), older.id), (gone.id, newer.id), ("abc", newer.id),
                            ("9" * 30, newer.id), ("", newer.id)):
        window.qsettings.setValue("conversations/last", value)
        assert window.keeper.last_opened() == expected, value


def test_a_deleted_chat_leaves_the_list_row_by_row_its_heading_with_its_last_chat(qtbot, window, monkeypatch):
    """Trial 74 F12: each delete filled the list again (3,000 chats: 140-320 ms a Delete); now its row goes,
    and a heading goes with the last chat under it."""
    import time

    for title, days in (("Old", 20), ("Week", 3), ("Today 1", 0), ("Today 2", 0)):
        conv = window.store.create_conversation(title)
        window.store.add_message(conv.id, "user", "hi")
        window.store.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time() - days * 86400, conv.id))
    window.store.db.commit()
    window.refresh_sidebar()
    ids = dict(zip(window.sidebar.titles(), window.sidebar.ids()))
    assert window.sidebar.headings() == ["Today", "Previous 7 days", "Previous 30 days"]
    fills = []
    real = window.sidebar.set_conversations
    monkeypatch.setattr(window.sidebar, "set_conversations", lambda *a, **k: fills.append(1) or real(*a, **k))
    window.open_conversation(ids["Week"])
    window.delete_conversation(ids["Week"])
    assert window.sidebar.headings() == ["Today", "Previous 30 days"] and window.sidebar.titles() == [
        "Today 2", "Today 1", "Old"]
    window.delete_conversation(ids["Today 1"])
    assert window.sidebar.headings() == ["Today", "Previous 30 days"] and window.sidebar.titles() == ["Today 2", "Old"]
    window.delete_conversation(ids["Old"])
    window.delete_conversation(ids["Today 2"])
    assert window.sidebar.headings() == [] and window.sidebar.titles() == []
    assert window.sidebar._nothing.isVisibleTo(window.sidebar)
    assert window.sidebar._nothing.text() == "No chats yet: a message you send starts one"
    assert len(fills) <= 1  # (the new chat opened in place of the one deleted that was open)
    window.banner.undo()
    assert window.sidebar.titles() == ["Today 2"] and window.sidebar.headings() == ["Today"]
