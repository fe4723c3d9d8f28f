"""File ▸ Import chat: a JSON export comes back as a new chat with every version, the branch that
was shown and its files; what is not an export, or is damaged, is refused with the reason and
leaves nothing behind; files gone are named and left out."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtWidgets import QFileDialog

from app.backends.fake import FakeBackend
from app.export import export_json
from app.import_chat import ImportProblem, import_chat
from app.store import Store


def png(path, colour=(200, 120, 40)):
    Image.new("RGB", (40, 30), colour).save(path)
    return path


def branching_chat(store: Store, tmp_path) -> int:
    photo = png(tmp_path / "cat.png")
    conv = store.create_conversation("Cats", model="SmolVLM-256M", settings={"temperature": 0.2}).id
    q1 = store.add_message(conv, "user", "What is this?", [store.store_image(photo)], names=["cat.png"])
    store.add_message(conv, "assistant", "A cat.", stats={"ttft_s": 0.2})
    second = store.add_message(conv, "assistant", "A small cat.", status="length", parent_id=q1.id)
    store.add_message(conv, "user", "Its colour?", parent_id=second.id)
    store.add_message(conv, "assistant", "Orange.")
    store.select(second.id - 1)  # the first answer's branch is the one shown
    return conv


def rows(store: Store, conv: int) -> list[tuple]:
    return [(m.role, m.text, m.status, m.attached_names) for m in store.messages(conv)]


def test_an_export_comes_back_with_every_version_and_the_branch_shown(store, tmp_path):
    conv = branching_chat(store, tmp_path)
    path = export_json(store, conv, tmp_path / "cats.json")
    imported = import_chat(store, path)
    new = imported.conversation_id
    assert new != conv and imported.messages == 5 and imported.missing == []
    assert (imported.title, imported.same_as) == ("Cats (2)", ["Cats"])  # told from the chat exported
    assert rows(store, new) == rows(store, conv) == [("user", "What is this?", "done", ["cat.png"]),
                                                     ("assistant", "A cat.", "done", [])]
    assert [(m.role, m.text, m.status) for m in store.all_messages(new)] == \
        [(m.role, m.text, m.status) for m in store.all_messages(conv)]
    assert sorted(store.versions(new).values()) == sorted(store.versions(conv).values())
    assert store.messages(new)[0].images == store.messages(conv)[0].images  # the same stored copy
    assert store.messages(new)[1].stats == {"ttft_s": 0.2}
    assert store.conversation(new).settings == {"temperature": 0.2} and store.conversation(new).model == "SmolVLM-256M"
    other = [m for m in store.all_messages(new) if m.text == "A small cat."][0]
    store.select(other.id)
    assert [m.text for m in store.messages(new)] == ["What is this?", "A small cat.", "Its colour?", "Orange."]


def test_an_answers_generated_ids_come_back_and_ids_that_are_not_are_passed_over(store, tmp_path):
    """Trial 74 F9: Export JSON → Import lost the ids an answer was generated as: Continue after
    restoring a backup read the text again instead of replaying them (not token for token)."""
    conv = branching_chat(store, tmp_path)
    cut = [m for m in store.all_messages(conv) if m.text == "A small cat."][0]
    store.update_message(cut.id, token_ids=[7454, 2402, 253, 655])
    path = export_json(store, conv, tmp_path / "cats.json")
    assert '"token_ids": "7454 2402 253 655"' in path.read_text()  # one line, not one id a line
    new = import_chat(store, path).conversation_id
    ids = {m.text: m.token_ids for m in store.all_messages(new)}
    assert ids == {"What is this?": None, "A cat.": None, "A small cat.": [7454, 2402, 253, 655],
                   "Its colour?": None, "Orange.": None}
    data = json.loads(path.read_text())
    for bad in ("74 x 2", "-1 3", [1, 2], "٣ 4", "1" * 12, "", "  "):
        for entry in data["all_messages"]:
            if entry["text"] == "A small cat.":
                entry["token_ids"] = bad
        path.write_text(json.dumps(data))
        again = import_chat(store, path).conversation_id
        assert [m.token_ids for m in store.all_messages(again) if m.text == "A small cat."] == [None], bad


def test_a_file_gone_is_named_and_left_out_of_its_message(store, tmp_path):
    photo = png(tmp_path / "dog.png", (10, 20, 30))
    stored = store.store_image(photo)  # named by its place in the data folder, as exports before version 3 do
    data = {"format": "smolchat-conversation", "version": 3, "title": "From elsewhere",
            "all_messages": [{"id": 7, "parent_id": None, "role": "user", "text": "Look",
                              "images": [stored, "/nowhere/on/this/computer/3f2a.png"],
                              "attached_names": ["dog.png", "beach.png"]},
                             {"id": 9, "parent_id": 7, "role": "assistant", "text": "A dog."}],
            "messages": []}
    path = tmp_path / "elsewhere.json"
    path.write_text(json.dumps(data))
    imported = import_chat(store, path)
    assert imported.missing == ["beach.png"]
    [question, answer] = store.messages(imported.conversation_id)
    assert question.attached_names == ["dog.png"] and open(question.images[0], "rb").read() == photo.read_bytes()
    assert answer.text == "A dog."


def test_an_export_reads_no_file_outside_the_data_folder(store, tmp_path, data_dir):
    """Trial 69 F9: a chat file from someone else naming the reader's own photos by path pulled them into
    the chat (and the banner told which of the paths named exist). Only the data folder is read; a file
    of this store named by another computer's data folder is found by its (content-addressed) name."""
    private = png(tmp_path / "private.png", (200, 10, 10))
    mine = store.store_image(png(tmp_path / "cat.png", (1, 2, 3)))
    path = tmp_path / "sent-to-me.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 3, "all_messages": [
        {"id": 1, "parent_id": None, "role": "user", "text": "Look",
         "images": [str(private), str(tmp_path / "gone.png"), f"/other/computer/images/{Path(mine).name}",
                    str(data_dir / "images" / ".." / ".." / "private.png"), "/tmp/x\x00y.png",
                    str(data_dir / "images" / ("a" * 5000 + ".png"))],
         "attached_names": ["private.png", "gone.png", "cat.png", "sneaky.png", "nul.png", "long.png"]}]}))
    imported = import_chat(store, path)  # (trial 70 N5: a NUL or an overlong name failed the whole chat)
    assert imported.missing == ["private.png", "gone.png", "sneaky.png", "nul.png", "long.png"]
    assert imported.refused == []
    [question] = store.messages(imported.conversation_id)
    assert question.attached_names == ["cat.png"] and question.images == [mine]
    assert private.read_bytes() not in [p.read_bytes() for p in (data_dir / "images").iterdir()]


def test_a_version_1_export_is_read_as_the_branch_in_order(store, tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "title": "Old", "messages": [
        {"role": "user", "text": "Hi", "images": []}, {"role": "assistant", "text": "Hello."}]}))
    new = import_chat(store, path).conversation_id
    assert [(m.role, m.text) for m in store.messages(new)] == [("user", "Hi"), ("assistant", "Hello.")]


@pytest.mark.parametrize("content, message", [
    (b"\x89PNG\r\n\x1a\n\x00\x00", "bad.json is not a text file (byte 0 is not UTF-8)"),
    (b'{"format": "smolchat-conversation", "version": 3, "x": 1 2}', "bad.json is not valid JSON (line 1, column "
                                                                   "58: Expecting ',' delimiter)"),
    # Trial 62 F6: Python's words left "(… Unterminated string starting at)" and "Expecting value" for these.
    (b'{"format": "smolchat-conversation", "version": 3,', "bad.json is not valid JSON (it ends at line 1, column 50 "
                                                          "before the chat does: cut short?)"),
    (b'{"format": "smolchat-conversation",\n "title": "What is the cap', "bad.json is not valid JSON (it ends in the "
                                                                       "middle of a text begun at line 2, column 11: "
                                                                       "cut short?)"),
    (b'{"title": "two\nlines"}', "bad.json is not valid JSON (line 1, column 15: a line break or other control "
                                "character inside a text)"),
    (b"", "bad.json is empty"),
    (b" \r\n", "bad.json is empty"),
    ('{"format": "x"'.encode("utf-16-le")[:-1], "bad.json is damaged UTF-16 text (byte 26 cannot be read)"),
    (b'{"title": "x", "messages": []}', "bad.json is not a chat exported by Smolchat (File ▸ Export chat as JSON)"),
    (b'[1, 2]', "bad.json is not a chat exported by Smolchat (File ▸ Export chat as JSON)"),
    (b'{"format": "smolchat-conversation", "version": 9}', "bad.json was exported by a newer Smolchat (format "
                                                            "version 9); update Smolchat to import it"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": []}', "bad.json holds no messages"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "role": "system", "text": ""}]}',
     "bad.json is damaged: message 1 has the role 'system' (user or assistant expected)"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "role": "user", "text": 5}]}',
     "bad.json is damaged: message 1 has a text that is not a string"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "role": "user", "images": "x"}]}',
     "bad.json is damaged: message 1 has images that are not a list of paths"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "parent_id": 4, "role": "user"}]}',
     "bad.json is damaged: the message that message 1 follows (4) is not in the file"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "parent_id": 2, "role": "user"},'
     b' {"id": 2, "parent_id": 1, "role": "assistant"}]}',
     "bad.json is damaged: messages 1 and 2 follow one another in a loop"),  # not "(2) follows itself" (trial 62)
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 5, "parent_id": 7, "role": "user"},'
     b' {"id": 7, "parent_id": 9, "role": "user"}, {"id": 9, "parent_id": 7, "role": "user"}]}',
     "bad.json is damaged: messages 7 and 9 follow one another in a loop"),  # 5 follows the loop, is not in it
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 3, "parent_id": 3, "role": "user"}]}',
     "bad.json is damaged: message 3 follows itself"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "parent_id": 2, "role": "user"},'
     b' {"id": 2, "parent_id": 3, "role": "user"}, {"id": 3, "parent_id": 4, "role": "user"}, {"id": 4, '
     b'"parent_id": 5, "role": "user"}, {"id": 5, "parent_id": 6, "role": "user"}, {"id": 6, "parent_id": 1, '
     b'"role": "user"}]}',
     "bad.json is damaged: messages 1, 2, 3, 4 and 2 more follow one another in a loop"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "parent_id": 2, "role": "user"},'
     b' {"id": 2, "parent_id": 8, "role": "user"}]}',
     "bad.json is damaged: the message that message 2 follows (8) is not in the file"),  # the one astray, not 1
    (b"[" * 100_000, "bad.json is nested too deeply to be a chat export"),
    (b"# Cats\n\n**You:** hi", "bad.json is a Markdown export: Import reads the JSON one (File \u25b8 Export chat as JSON)"),
    (b'{"format": "smolchat-conversation", "version": "3"}', "bad.json is damaged: its format version is '3', not a "
                                                            "whole number"),
    # Found by a trial: these raised TypeError (unhashable) with no word to the user.
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": 1, "parent_id": [20], "role": "user"}]}',
     "bad.json is damaged: message 1 follows something that is not a message id"),
    (b'{"format": "smolchat-conversation", "version": 3, "all_messages": [{"id": [1], "role": "user"}]}',
     "bad.json is damaged: message 1 has no id"),
])
def test_what_is_not_an_export_is_refused_with_the_reason_and_adds_nothing(store, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    before = store.conversations()
    with pytest.raises(ImportProblem) as caught:
        import_chat(store, path)
    assert str(caught.value) == message and store.conversations() == before


def test_a_full_disk_mid_import_leaves_no_half_chat(store, tmp_path, monkeypatch):
    conv = branching_chat(store, tmp_path)
    path = export_json(store, conv, tmp_path / "cats.json")
    real = store.add_message
    calls = []

    def add_message(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "add_message", add_message)
    with pytest.raises(OSError):
        import_chat(store, path)
    assert [c.id for c in store.conversations()] == [conv]


def test_an_import_killed_half_way_is_not_listed_and_is_gone_after_a_restart(store, tmp_path, monkeypatch, data_dir):
    """Trial 74 F2: a kill during an import (no cleanup runs) left the messages written so far as a chat
    listed first, under the export's title, showing a branch of 4 of its messages."""
    conv = branching_chat(store, tmp_path)
    path = export_json(store, conv, tmp_path / "cats.json")
    real, calls = store.add_message, []

    def add_message(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            listed = [c.id for c in store.conversations()]
            assert listed == [conv]  # (the part written is not listed meanwhile either)
            raise SystemExit  # the kill (its cleanup is kept from running below)
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "add_message", add_message)
    deletes, delete = [], store.delete_conversation

    def delete_conversation(conversation_id):
        deletes.append(conversation_id)
        if len(deletes) == 1:  # (the import's own: the chat hidden while it is written)
            delete(conversation_id)
    monkeypatch.setattr(store, "delete_conversation", delete_conversation)  # the cleanup a kill never reaches
    with pytest.raises(SystemExit):
        import_chat(store, path)
    store.db.commit()
    half = store.db.execute("SELECT id FROM conversations WHERE id != ?", (conv,)).fetchone()[0]
    assert store.db.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (half,)).fetchone()[0] == 2
    assert [c.id for c in store.conversations()] == [conv]
    store.close()
    again = Store(data_dir)  # the next start
    try:
        assert [c.id for c in again.conversations()] == [conv]
        assert again.db.execute("SELECT COUNT(*) FROM conversations WHERE id = ?", (half,)).fetchone()[0] == 0
    finally:
        again.close()


def test_a_long_import_shows_its_dialog_at_once_and_the_window_is_painted_meanwhile(qtbot, make_window, tmp_path,
                                                                                   monkeypatch):
    """Trial 74 F5: 1,002 messages held the window 1.5 s with no repaint: the dialog waited half a
    second to show, and until it did nothing processed the window's events."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QProgressDialog

    from app.import_chat import SHOWN_AT_ONCE_MESSAGES

    win = make_window(FakeBackend())
    entries = [{"id": i + 1, "parent_id": i or None, "role": ("user", "assistant")[i % 2], "text": f"Message {i}"}
               for i in range(SHOWN_AT_ONCE_MESSAGES)]
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 3, "title": "Long",
                                "all_messages": entries, "messages": []}))
    ticks, seen = [], []
    clock = QTimer(win)
    clock.timeout.connect(lambda: ticks.append(1))
    clock.start(0)
    real = win.store.add_message

    def add_message(*args, **kwargs):
        if len(seen) in (150, 450):  # (after the first progress call: every 100 messages)
            seen.append((any(d.isVisible() for d in win.findChildren(QProgressDialog)), len(ticks)))
        else:
            seen.append(None)
        return real(*args, **kwargs)
    monkeypatch.setattr(win.store, "add_message", add_message)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    clock.stop()
    (shown, early), (shown_later, later) = [x for x in seen if x is not None]
    assert shown and shown_later and later > early  # up at once, and events went on being processed
    assert win.banner.message() == f"Imported “Long” ({SHOWN_AT_ONCE_MESSAGES:,} messages)."


def test_file_import_opens_the_chat_and_says_what_it_did(qtbot, make_window, tmp_path, monkeypatch):
    win = make_window(FakeBackend())
    conv = branching_chat(win.store, tmp_path)
    path = export_json(win.store, conv, tmp_path / "cats.json")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    assert win.keeper.current_id not in (None, conv) and len(win.sidebar.ids()) == 2
    assert [w.text for w in win.transcript.widgets()] == ["What is this?", "A cat."]
    assert win.banner.message() == ("Imported “Cats (2)” (5 messages). “Cats” already holds the same messages: this "
                                    "copy is named “Cats (2)” to tell them apart.")
    (tmp_path / "notes.json").write_text("not json")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(tmp_path / "notes.json"), ""))
    win.actions["import_json"].trigger()
    assert win.banner.message() == ("Could not import the chat: notes.json is not valid JSON (line 1, column 1: "
                                    "Expecting value).")
    assert len(win.sidebar.ids()) == 2


def test_an_edit_made_only_in_the_branch_copy_of_an_export_is_said_not_used(qtbot, make_window, tmp_path, monkeypatch):
    """Trial 79 P3: an export holds the branch shown twice ("messages", then "all_messages", which import
    reads); a hand edit of the first copy was dropped without a word."""
    win = make_window(FakeBackend())
    conv = branching_chat(win.store, tmp_path)
    data = json.loads(export_json(win.store, conv, tmp_path / "cats.json").read_text())
    data["messages"][1]["text"] = "A dog."
    (tmp_path / "edited.json").write_text(json.dumps(data))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(tmp_path / "edited.json"), ""))
    win.actions["import_json"].trigger()
    assert [w.text for w in win.transcript.widgets()] == ["What is this?", "A cat."]
    assert win.banner.message() == (
        "Imported “Cats (2)” (5 messages). “Cats” already holds the same messages: this copy is named “Cats (2)” to "
        "tell them apart. 1 message of the file's “messages” differs from “all_messages”: the chat is read from "
        "“all_messages” (every version of it), so an edit made only in “messages” is not in it.")


def test_an_import_during_an_answer_has_a_banner_of_its_own(qtbot, make_window, tmp_path, monkeypatch):
    """Trial 79 P6a: imported while an answer ran (the chat not opened), its lines were added under the
    message that was up, an unrelated refusal to delete the answering chat."""
    win = make_window(FakeBackend(tokens=["word "] * 300, delay=0.01))
    conv = branching_chat(win.store, tmp_path)
    path = export_json(win.store, conv, tmp_path / "cats.json")
    win.composer.setPlainText("A long story, please.")
    win.send_message()
    qtbot.waitUntil(lambda: win._busy, timeout=5000)
    win.banner.show_info("An unrelated note.")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    assert win.banner.message() == ("Imported “Cats (2)” (5 messages). It is in the list of chats. “Cats” already "
                                    "holds the same messages: this copy is named “Cats (2)” to tell them apart.")
    win.stop()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)


def test_a_chat_deleted_before_an_import_is_still_undone_by_ctrl_z(qtbot, make_window, tmp_path, monkeypatch):
    """Trial 75 N7: the import's banner took the place of "Deleted … Undo", and the deleted chat could
    not be brought back. Ctrl+Z (outside the message box) restores the newest chat deleted."""
    from PySide6.QtCore import Qt

    win = make_window(FakeBackend())
    conv = branching_chat(win.store, tmp_path)
    path = export_json(win.store, conv, tmp_path / "cats.json")
    other = win.store.create_conversation("Dogs").id
    win.refresh_sidebar()
    win.delete_conversation(other)
    assert win.banner.offers_undo()
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    assert win.banner.message().startswith("Imported “Cats (2)”") and not win.banner.offers_undo()
    assert other not in win.sidebar.ids()
    win.sidebar.list.setFocus()
    qtbot.keyClick(win.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert other in win.sidebar.ids() and win.keeper.current_id == other
    qtbot.keyClick(win.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # nothing more to undo
    assert len(win.sidebar.ids()) == 3


def test_ctrl_z_undoes_the_newest_delete_a_message_or_a_chat(qtbot, make_window, tmp_path, monkeypatch):
    """Trial 76 P2: after deleting a chat, then a question of another chat, and an import, Ctrl+Z brought
    back the chat and the question was out of reach. The newest delete comes back first, then the
    older one."""
    from PySide6.QtCore import Qt

    win = make_window(FakeBackend(tokens=["Yes", "."]))
    conv = branching_chat(win.store, tmp_path)
    path = export_json(win.store, conv, tmp_path / "cats.json")
    win.new_chat()
    win.composer.setPlainText("Keep this question")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    chat = win.keeper.current_id
    old = win.store.create_conversation("Dogs").id
    win.store.add_message(old, "user", "Woof?")  # (newer ids than the question's: the import takes none of them)
    win.refresh_sidebar()
    win.delete_conversation(old)
    win.open_conversation(chat)
    win.delete_message(0)
    assert [w.text for w in win.transcript.widgets()] == []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    assert not win.banner.offers_undo()
    win.sidebar.list.setFocus()
    qtbot.keyClick(win.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert (win.keeper.current_id, old in win.sidebar.ids(), win.banner.message()) == (
        chat, False, "Restored the message. Deleted before it: “Dogs”.")
    assert [w.text for w in win.transcript.widgets()] == ["Keep this question", "Yes."]
    win.banner.dismiss()
    qtbot.keyClick(win.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert old in win.sidebar.ids()


def test_a_large_export_shows_the_dialog_while_it_is_read(qtbot, make_window, tmp_path, monkeypatch):
    """Reading and parsing a large export hold the window (~3 s for 330 MB) before the first message
    is imported: the dialog is up by then, saying so, not a window that looks frozen."""
    from PySide6.QtWidgets import QApplication, QProgressDialog

    import app.import_chat as import_module

    win = make_window(FakeBackend())
    path = export_json(win.store, branching_chat(win.store, tmp_path), tmp_path / "cats.json")
    monkeypatch.setattr(import_module, "SHOWN_READING_BYTES", path.stat().st_size)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    seen = []
    read = import_module.read_export

    def watched(p):
        seen.extend((d.labelText(), d.isVisible()) for d in QApplication.topLevelWidgets()
                    if isinstance(d, QProgressDialog))
        return read(p)
    monkeypatch.setattr(import_module, "read_export", watched)
    win.actions["import_json"].trigger()
    assert seen == [("Reading cats.json (0 MB)…", True)]
    assert win.banner.message().startswith("Imported “Cats (2)” (5 messages).")
    monkeypatch.setattr(import_module, "SHOWN_READING_BYTES", path.stat().st_size + 1)  # smaller: not shown
    seen.clear()
    win.actions["import_json"].trigger()
    assert all(not visible for _, visible in seen)


def test_a_chat_imported_again_is_named_apart_and_the_banner_says_which_holds_the_same(qtbot, make_window, tmp_path,
                                                                                      monkeypatch):
    """Trial 62 F4: importing a file twice silently made rows no one could tell apart."""
    win = make_window(FakeBackend())
    path = tmp_path / "france.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 4, "title": "Capital?", "all_messages": [
        {"id": 1, "parent_id": None, "role": "user", "text": "What is the capital of France?"},
        {"id": 2, "parent_id": 1, "role": "assistant", "text": "Paris."}]}))
    other = win.store.create_conversation("Capital?").id  # the same title, other messages: no copy of it
    win.store.add_message(other, "user", "What is the capital of Spain?")
    win.store.add_message(other, "assistant", "Paris.")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    banners = []
    for _ in range(3):
        win.actions["import_json"].trigger()
        banners.append(win.banner.message())
    assert banners == [
        "Imported “Capital?” (2 messages).",
        "Imported “Capital? (2)” (2 messages). “Capital?” already holds the same messages: this copy is named "
        "“Capital? (2)” to tell them apart.",
        "Imported “Capital? (3)” (2 messages). “Capital?” and 1 more already hold the same messages: this copy is "
        "named “Capital? (3)” to tell them apart."]
    assert sorted(win.sidebar.titles()) == ["Capital?", "Capital?", "Capital? (2)", "Capital? (3)"]
    assert win.store.conversation(win.keeper.current_id).title == "Capital? (3)"


def test_a_file_that_is_no_image_or_video_is_not_copied_into_the_data_folder(store, tmp_path, data_dir):
    """Found by a trial: an export naming /etc/passwd (or an SSH key) as an image had it copied into the
    data folder, and a Markdown export then shipped it as "passwd.png"."""
    secret = data_dir / "images" / "id_rsa.png"  # (only the data folder is read: test_an_export_reads_no_file_...)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot really\n")
    photo = Path(store.store_image(png(tmp_path / "ok.png")))
    path = tmp_path / "sent-to-me.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 3, "all_messages": [
        {"id": 1, "parent_id": None, "role": "user", "text": "Look", "images": [str(secret), str(data_dir / "images"), str(photo)],
         "attached_names": ["passwd.png", "dir", "ok.png"]}]}))
    imported = import_chat(store, path)
    assert imported.refused == ["passwd.png"] and imported.missing == ["dir"]
    [question] = store.messages(imported.conversation_id)
    assert question.attached_names == ["ok.png"]
    assert question.images == [str(photo)]


def test_junk_in_the_shown_branch_is_passed_over_and_a_failure_mid_way_leaves_nothing(store, tmp_path, monkeypatch):
    conv = branching_chat(store, tmp_path)
    data = json.loads(export_json(store, conv, tmp_path / "cats.json").read_text())
    data["messages"] = [{"id": 999_999}, "junk", {"id": [1]}]  # found by a trial: a TypeError after the chat was stored
    (tmp_path / "junk.json").write_text(json.dumps(data))
    imported = import_chat(store, tmp_path / "junk.json")
    assert [m.text for m in store.messages(imported.conversation_id)][:1] == ["What is this?"]
    before = store.conversations()
    monkeypatch.setattr(store, "select", lambda _id: 1 / 0)  # any failure once messages are stored
    data["messages"] = [{"id": data["all_messages"][0]["id"]}]
    (tmp_path / "other.json").write_text(json.dumps(data))
    with pytest.raises(ZeroDivisionError):
        import_chat(store, tmp_path / "other.json")
    assert store.conversations() == before


def test_an_imported_chat_with_settings_of_the_wrong_type_opens_and_smolchat_starts_again(qtbot, make_window, tmp_path,
                                                                                          monkeypatch):
    """Found by a trial: image_detail ["fast"] in an imported chat's settings raised TypeError when the chat
    opened, and every later start failed the same way (the chat is reopened at start)."""
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 3, "title": "x",
                                "settings": {"image_detail": ["fast"], "seed": 7},
                                "all_messages": [{"id": 1, "parent_id": None, "role": "user", "text": "hi"}],
                                "messages": [{"id": 1}]}))
    win = make_window(FakeBackend())
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    lines = win.banner.message().split("\n")
    assert lines[0].startswith("Chat “x”: ignored image_detail \"['fast']\"") and lines[-1] == "Imported “x” (1 message)."
    assert win.settings.seed == 7
    win.close()
    again = make_window(FakeBackend())
    assert again.keeper.current_id == win.keeper.current_id and again.transcript.widgets()[0].text == "hi"


@pytest.mark.parametrize("status, kept", [("streaming", "interrupted"), ("bogus", "done"), (["x"], "done"),
                                          ("length", "length")])
def test_an_answer_exported_while_it_streamed_is_imported_as_interrupted(store, tmp_path, status, kept):
    """Found by a trial: an export made during an answer held "streaming", shown as a dead answer
    (no Continue) after the import; a made-up status was shown as the footer's word."""
    path = tmp_path / "mid.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 3, "all_messages": [
        {"id": 1, "parent_id": None, "role": "user", "text": "Story?"},
        {"id": 2, "parent_id": 1, "role": "assistant", "text": "Once upon", "status": status}]}))
    [_q, answer] = store.messages(import_chat(store, path).conversation_id)
    assert answer.status == kept


def test_a_byte_order_mark_is_read_past(store, tmp_path):
    """Found by a trial: a JSON saved by Notepad (a UTF-8 BOM first) was refused with Python's words."""
    conv = branching_chat(store, tmp_path)
    data = export_json(store, conv, tmp_path / "cats.json").read_bytes()
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + data)
    assert import_chat(store, tmp_path / "bom.json").messages == 5


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
                                           ("utf-16-le", b""), ("utf-16-be", b"")])
def test_an_export_saved_as_utf_16_is_read(store, tmp_path, encoding, bom):
    """Trial 62 F6: a JSON saved by Notepad as "Unicode" (UTF-16) was "not a text file"."""
    conv = branching_chat(store, tmp_path)
    text = export_json(store, conv, tmp_path / "cats.json").read_text(encoding="utf-8")
    (tmp_path / "wide.json").write_bytes(bom + text.encode(encoding))
    imported = import_chat(store, tmp_path / "wide.json")
    assert (imported.title, imported.messages) == ("Cats (2)", 5)
    assert rows(store, imported.conversation_id) == rows(store, conv)


def test_a_lone_surrogate_is_replaced_and_the_chat_imported_and_said(qtbot, make_window, tmp_path, monkeypatch):
    """Trial 62 F6: one "\\ud800" (half of an emoji, as JavaScript's JSON.stringify writes a cut one) in one
    message refused the whole chat with a raw UnicodeEncodeError."""
    path = tmp_path / "cut.json"
    path.write_text('{"format": "smolchat-conversation", "version": 3, "title": "Emoji \\ud83d", "all_messages": ['
                    '{"id": 1, "parent_id": null, "role": "user", "text": "nice \\ud800 and \\ud83d\\ude00",'
                    ' "stats": {"\\udc00": 1}}, {"id": 2, "parent_id": 1, "role": "assistant", "text": "ok"}],'
                    ' "messages": [{"id": 2}]}')
    win = make_window(FakeBackend())
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    assert win.banner.message() == ("Imported “Emoji \ufffd” (2 messages). 3 broken characters (half of an emoji or "
                                    "the like, as some programs cut them) were replaced by “\ufffd”.")
    question, answer = win.store.messages(win.keeper.current_id)
    assert (question.text, question.stats, answer.text) == ("nice \ufffd and \U0001f600", {"\ufffd": 1}, "ok")


def test_an_imported_title_is_cleaned_of_bidi_and_control_characters(qtbot, make_window, tmp_path, monkeypatch):
    """Trial 62 F7: a title with a right-to-left override turned the banner's own words around ("Imported
    “Text with nul  and rtl .(segassem 2) ”exe.png") and the chat list showed "… gnp…". It is cleaned as a
    title made from a message is."""
    path = tmp_path / "nul2.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 3,
                                "title": "Text with nul \x00 and rtl \u202e gnp.exe\u200f\u2066 \u200e\n\tnext\x7f",
                                "all_messages": [{"id": 1, "parent_id": None, "role": "user", "text": "hi"}]}))
    win = make_window(FakeBackend())
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    assert win.banner.message() == "Imported “Text with nul and rtl gnp.exe next” (1 message)."
    assert win.store.conversation(win.keeper.current_id).title == "Text with nul and rtl gnp.exe next"
    (tmp_path / "only \u202econtrols.json").write_text(json.dumps({  # no title: the file's name, cleaned too
        "format": "smolchat-conversation", "version": 3, "title": "\u202e\x00",
        "all_messages": [{"id": 1, "parent_id": None, "role": "user", "text": "hi"}]}))
    imported = import_chat(win.store, tmp_path / "only \u202econtrols.json")
    assert imported.title == "only controls"


def test_messages_keep_when_they_were_sent_through_an_export(store, tmp_path):
    """Each message's time goes into the export and comes back with the import; an export without it (an
    older Smolchat) or with something that is not a time gets the time of the import."""
    import time

    conv = branching_chat(store, tmp_path)
    sent = [1700000000.5, 1700000060.25, 1700000120.0, 1700000180.0, 1700000240.0]
    for message, when in zip(store.all_messages(conv), sent):
        store.db.execute("UPDATE messages SET created = ? WHERE id = ?", (when, message.id))
    store.db.commit()
    path = export_json(store, conv, tmp_path / "cats.json")
    data = json.loads(path.read_text())
    assert [m["created"] for m in data["all_messages"]] == sent
    new = import_chat(store, path).conversation_id
    assert [m.created for m in store.all_messages(new)] == sent
    # The chat is dated by its messages, so the list files it in November 2023, not under Today (trial 55).
    chat = store.conversation(new)
    assert (chat.created, chat.updated) == (sent[0], sent[-1])
    assert [c.id for c in store.conversations()][-1] == new  # older than the chat it was exported from

    for entry in data["all_messages"]:  # dated ahead (a wrong clock): filed as of now, not atop the list for years
        entry["created"] = 4070908800.0  # 2099
    (tmp_path / "ahead.json").write_text(json.dumps(data))
    before = time.time()
    ahead = store.conversation(import_chat(store, tmp_path / "ahead.json").conversation_id)
    assert before <= ahead.created <= ahead.updated <= time.time()
    # and so are its messages (trial 79 P4: each stamped "10 Mar 5107" under a chat filed today)
    assert all(before <= m.created <= time.time() for m in store.all_messages(ahead.id))
    for entry, value in zip(data["all_messages"], (None, "yesterday", True, float("inf"), -5)):
        entry["created"] = value
    del data["messages"][0]["created"]
    (tmp_path / "odd.json").write_text(json.dumps(data))
    before = time.time()
    times = [m.created for m in store.all_messages(import_chat(store, tmp_path / "odd.json").conversation_id)]
    assert all(before <= t <= time.time() for t in times)


class _Counted(dict):
    """A message entry that counts how often it is read."""

    reads = 0

    def get(self, key, default=None):
        _Counted.reads += 1
        return super().get(key, default)

    def __getitem__(self, key):
        _Counted.reads += 1
        return super().__getitem__(key)


def test_a_long_chat_is_put_parents_first_reading_each_message_a_few_times(store, tmp_path):
    """Found by a trial: importing a 10,008-message chat took 10.6 s, 4.8 s of it putting the messages
    in order, one pass over the messages still waiting for every message. Each is read a few times
    now, and the order is the same: the first messages, then those that follow them, and so on, each
    generation in the file's order."""
    from app.import_chat import _parents_first

    n = 3000
    chain = [_Counted(id=i, parent_id=i - 1 if i else None, role="user") for i in range(n)]
    other = _Counted(id=n, parent_id=5, role="assistant")  # another version of message 6
    entries = chain[::-1] + [other]  # every message before the one it follows
    _Counted.reads = 0
    ordered = _parents_first(entries, 3)
    reads = _Counted.reads
    assert [e["id"] for e in ordered] == [0, 1, 2, 3, 4, 5, 6, n] + list(range(7, n))
    assert reads <= 10 * len(entries)  # one pass a message read them 13.5 million times


def test_a_long_import_reports_progress_and_can_be_cancelled(store, tmp_path):
    from app.import_chat import ImportCancelled

    conv = store.create_conversation("Long").id
    for i in range(250):
        store.add_message(conv, "user" if i % 2 == 0 else "assistant", f"m{i}")
    path = export_json(store, conv, tmp_path / "long.json")
    calls = []
    imported = import_chat(store, path, lambda done, total: calls.append((done, total)))
    assert calls == [(0, 250), (100, 250), (200, 250)] and imported.messages == 250
    before = [c.id for c in store.conversations()]
    with pytest.raises(ImportCancelled):
        import_chat(store, path, lambda done, total: done < 100)  # Cancel clicked after the first 100
    assert [c.id for c in store.conversations()] == before  # nothing of it kept


def _video(path):
    from tests.engine.videos import solid, write_video

    return write_video(path, (solid(48, 64, 8 * i) for i in range(8)), rate=2)


def test_a_json_export_is_a_backup_its_photos_and_videos_come_back_after_the_chat_is_deleted(store, tmp_path):
    """Trial 62 F2: export, delete the chat, restart (its photos leave the data folder), import: the photos
    were lost. The export holds them now (base64, once each under its stored name) and Import restores them."""
    pytest.importorskip("av")
    photo, clip = png(tmp_path / "cat.png"), _video(tmp_path / "walk.mp4")
    conv = store.create_conversation("Cat?").id
    stored = [store.store_image(photo), store.store_image(clip)]
    store.add_message(conv, "user", "Cat?", stored, names=["cat.png", "walk.mp4"])
    store.add_message(conv, "assistant", "A cat.")
    store.add_message(conv, "user", "Again", [stored[0]], names=["cat.png"])  # shown twice, held once
    path = export_json(store, conv, tmp_path / "cat.json")
    data = json.loads(path.read_text())
    assert data["version"] == 4
    assert {name: base64.b64decode(held) for name, held in data["files"].items()} == {
        Path(stored[0]).name: photo.read_bytes(), Path(stored[1]).name: clip.read_bytes()}
    store.delete_conversation(conv)
    for file in stored:  # what the next start does with a deleted chat's files
        Path(file).unlink()

    imported = import_chat(store, path)

    assert (imported.missing, imported.refused, imported.damaged, imported.too_large) == ([], [], [], [])
    first, _answer, again = store.messages(imported.conversation_id)
    assert first.attached_names == ["cat.png", "walk.mp4"] and again.attached_names == ["cat.png"]
    assert [Path(p).read_bytes() for p in first.images] == [photo.read_bytes(), clip.read_bytes()]
    assert again.images == first.images[:1]
    assert sorted(p.name for p in store.images_dir.iterdir()) == sorted(Path(p).name for p in stored)


def test_files_held_in_an_export_that_are_damaged_too_large_or_no_image_are_named_and_left_out(store, tmp_path,
                                                                                             monkeypatch):
    from app import import_chat as module

    photo = png(tmp_path / "ok.png")
    wrapped = base64.b64encode(photo.read_bytes()).decode()
    wrapped = "\n".join(wrapped[i:i + 76] for i in range(0, len(wrapped), 76))  # as MIME tools wrap it: data still
    held = {"a1.png": wrapped, "b2.png": "not base64 at all!",
            "c3.png": base64.b64encode(b"-----BEGIN OPENSSH PRIVATE KEY-----").decode(),
            "d4.png": base64.b64encode(b"x" * 3000).decode(), "e5.sh": base64.b64encode(b"rm -rf ~").decode(),
            "f6.png": 12}
    data = {"format": "smolchat-conversation", "version": 4, "files": held, "all_messages": [
        {"id": 1, "parent_id": None, "role": "user", "text": "Look",
         "images": [f"/elsewhere/images/{name}" for name in held],
         "attached_names": ["ok.png", "bad.png", "key.png", "big.png", "script.png", "number.png"]}]}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(module, "MAX_EMBEDDED_BYTES", 2000)  # the 3,000-byte one is too large, the photo not
    imported = import_chat(store, path)
    assert (imported.missing, imported.refused, imported.damaged, imported.too_large) == (
        [], ["key.png", "script.png"], ["bad.png", "number.png"], ["big.png"])
    [question] = store.messages(imported.conversation_id)
    assert question.attached_names == ["ok.png"] and Path(question.images[0]).read_bytes() == photo.read_bytes()
    assert [p.read_bytes() for p in store.images_dir.iterdir()] == [photo.read_bytes()]


def test_files_held_in_an_export_are_read_up_to_the_bound_together_not_each(store, tmp_path, monkeypatch):
    """Trial 63: the README says an export holds up to 256 MB of files together, but each file was
    checked alone: two of 187 MB were both decoded (1.67 GB at the peak) before being refused."""
    from app import import_chat as module

    first, second = png(tmp_path / "one.png"), png(tmp_path / "two.png", (10, 200, 90))
    held = {name: base64.b64encode(p.read_bytes()).decode() for name, p in (("a1.png", first), ("b2.png", second))}
    data = {"format": "smolchat-conversation", "version": 4, "files": held, "all_messages": [
        {"id": 1, "parent_id": None, "role": "user", "text": "Two", "images": ["/x/images/a1.png", "/x/images/b2.png"],
         "attached_names": ["one.png", "two.png"]}]}
    path = tmp_path / "two.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(module, "MAX_EMBEDDED_BYTES", first.stat().st_size + second.stat().st_size // 2)
    imported = import_chat(store, path)
    assert (imported.missing, imported.refused, imported.damaged, imported.too_large) == ([], [], [], ["two.png"])
    [question] = store.messages(imported.conversation_id)
    assert question.attached_names == ["one.png"] and Path(question.images[0]).read_bytes() == first.read_bytes()


def test_an_export_whose_files_are_not_names_and_contents_is_refused(store, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 4, "files": ["x"],
                                "all_messages": [{"id": 1, "role": "user", "text": "hi"}]}))
    with pytest.raises(ImportProblem) as caught:
        import_chat(store, path)
    assert str(caught.value) == ('bad.json is damaged: its photos and videos ("files") are not a JSON object of '
                                 "names and contents")
    assert store.conversations() == []
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 4, "files": None,
                                "all_messages": [{"id": 1, "role": "user", "text": "hi"}]}))
    assert [m.text for m in store.messages(import_chat(store, path).conversation_id)] == ["hi"]  # null: none held


def test_an_older_export_naming_files_gone_says_where_they_may_have_gone(qtbot, make_window, tmp_path, monkeypatch):
    """Trial 62 F2: "the export names files on the computer it was made on" blamed another computer for
    files Smolchat itself had removed with their deleted chat."""
    path = tmp_path / "d4cat.json"
    path.write_text(json.dumps({"format": "smolchat-conversation", "version": 3, "title": "Cat?", "all_messages": [
        {"id": 1, "parent_id": None, "role": "user", "text": "Cat?", "images": ["/gone/images/3f2a.png"],
         "attached_names": ["chelsea.png"]},
        {"id": 2, "parent_id": 1, "role": "assistant", "text": "A cat."}], "messages": [{"id": 2}]}))
    win = make_window(FakeBackend())
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.actions["import_json"].trigger()
    assert win.banner.message() == (
        "Imported “Cat?” (2 messages). Not found, so left out: chelsea.png (the export only names it, and it is "
        "not where it says: removed from Smolchat's data folder since the export was made, or the export came "
        "from another computer).")


def test_files_past_what_an_export_holds_are_named_when_exporting(qtbot, make_window, tmp_path, monkeypatch):
    """What an Import could not bring back once the chat is deleted is said at export time."""
    from app import export

    win = make_window(FakeBackend())
    small, large = png(tmp_path / "small.png"), tmp_path / "large.png"
    Image.frombytes("RGB", (700, 700), os.urandom(700 * 700 * 3)).save(large)  # noise: 1.4 MB as a PNG
    conv = win.store.create_conversation("Two").id
    win.store.add_message(conv, "user", "Look", [win.store.store_image(small), win.store.store_image(large)],
                          names=["small.png", "large.png"])
    win.open_conversation(conv)
    monkeypatch.setattr(export, "MAX_EMBEDDED_BYTES", 2**20)
    out = tmp_path / "two.json"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    win.actions["export_json"].trigger()
    assert win.banner.message() == (
        f"Exported to {out}. Too large to go in it with the rest (over 1 MB together), so only named, not kept "
        "in it: large.png. Export as Markdown to copy it beside it.")
    assert [base64.b64decode(v) for v in json.loads(out.read_text())["files"].values()] == [small.read_bytes()]
