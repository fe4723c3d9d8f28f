"""Issue 18: nothing a user has on disk or types stops Smolchat from starting or makes every message fail.

Each test builds the bad data by hand (settings file, database rows, folders), starts the window on the
fake backend and checks that it starts, says in one line what it ignored, keeps everything else, and
leaves what it could not read unchanged on disk.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QPushButton

from app.backends.fake import FakeBackend
from app.store import SCHEMA_VERSION, Store
from tests.engine.conftest import tiny_checkpoint  # noqa: F401  (fixture)


def _ask(qtbot, win, text: str = "What colour is the cat?") -> dict:
    win.composer.setPlainText(text)
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as finished:
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    return finished.args[0]


def _chat(data_dir, title: str = "old chat", settings: dict | None = None) -> tuple[int, list[int]]:
    """A stored conversation: question, answer, question, answer. Returns (conversation id, message ids)."""
    store = Store(data_dir)
    conv = store.create_conversation(title, model="/models/fake", settings=settings)
    ids = [store.add_message(conv.id, role, text).id for role, text in
           (("user", "Hello?"), ("assistant", "Hi there."), ("user", "What is 2+2?"), ("assistant", "4."))]
    store.close()
    return conv.id, ids


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the settings file --------------------------------------------------------------------------------
def test_settings_file_with_wrong_types_starts_says_what_it_ignored_and_keeps_the_file(qtbot, make_window,
                                                                                          data_dir):
    data_dir.mkdir(parents=True)
    ini = data_dir / "settings.ini"
    ini.write_text("[sampling]\nseed=abc\ntemperature=nan\ntop_p=5\nmax_new_tokens=99999999999\ntop_k=40\n"
                   "[engine]\ncontext_size=lots\ndevice=gpu9\n[models]\nknown=[{\"path\": 5}, 7]\n",
                   encoding="utf-8")
    fake = FakeBackend(tokens=["Fine", "."])
    win = make_window(fake)

    assert win.storage_banner.message() == (
        f"Settings file {ini}: values not used (their defaults apply instead): temperature must be a finite "
        "number, got nan; top_p must be in (0, 1], "
        "got 5.0; max_new_tokens must be from 1 to 32768, got 99999999999; the seed must be a whole number from 0 "
        "to 2^64 − 1 (18,446,744,073,709,551,615), or empty for a random seed, got 'abc'; device 'gpu9' (one of auto, cuda, mps, "
        "cpu); context_size 'lots' (a whole number of tokens from 256 to 131072, or 0 for the model's own).\n"
        f"Settings file {ini}: the list of Your models could not be read: it shows only the models added from now "
        "on; its saved text is kept in the file under models/known_unreadable.")  # (unquoted: read as a list)
    assert win.settings.seed is None and win.settings.overrides == {"top_k": 40}
    assert _ask(qtbot, win)["finish_reason"] == "stop"  # the defaults apply: messages work
    params = fake.calls[-1]["params"]
    assert (params.temperature, params.top_p, params.top_k, params.seed) == (0.0, 1.0, 40, None)
    win.model_manager or win.open_model_manager()  # a bad "known models" list must not abort the dialog
    win.model_manager.close()
    text = ini.read_text(encoding="utf-8")
    assert "seed=abc" in text and "temperature=nan" in text and "context_size=lots" in text  # not overwritten


def test_a_settings_file_that_is_not_text_is_set_aside_not_overwritten(qtbot, make_window, data_dir):
    data_dir.mkdir(parents=True)
    garbage = bytes(range(256)) * 8  # NUL bytes, invalid UTF-8
    (data_dir / "settings.ini").write_bytes(garbage)
    win = make_window(FakeBackend(tokens=["ok"]))
    assert win.storage_banner.message() == (f"Settings file {data_dir / 'settings.ini'} is not text: it was kept "
                                            "as settings.ini.unreadable and the defaults apply.")
    assert (data_dir / "settings.ini.unreadable").read_bytes() == garbage
    assert _ask(qtbot, win)["finish_reason"] == "stop"


def test_a_folder_in_the_settings_files_place_is_said_in_the_users_words(qtbot, make_window, data_dir):
    """Trial 79: "could not be read (AccessError)", Qt's status name, and no word that changes may not be kept."""
    (data_dir / "settings.ini").mkdir(parents=True)
    win = make_window(FakeBackend(tokens=["ok"]))
    assert win.storage_banner.message() == (
        f"Settings file {data_dir / 'settings.ini'} could not be read: it cannot be opened (a folder in its place, "
        "or no permission to read it): the defaults apply, and changes made now may not be kept.")
    assert _ask(qtbot, win)["finish_reason"] == "stop"


def test_a_stored_python_object_in_the_settings_is_taken_out_never_unpickled(qtbot, make_window, data_dir,
                                                                           tmp_path):
    """Found by a trial: QSettings deserializes ``@Variant(...)`` values, and PySide unpickles a
    Python object in one: a truncated one stopped the start (EOFError), a crafted one ran a command.
    Such values are taken out before QSettings reads the file, whatever escapes hide the ``@``; the
    other settings apply and the file as it was is kept."""
    import os
    import sys

    from PySide6.QtCore import QSettings

    from app.settings import serialized_values

    marker = tmp_path / "ran"

    class Payload:  # what an attacker would store: unpickling it runs a command
        def __reduce__(self):
            return (os.system, (f"{sys.executable} -c \"open({str(marker)!r}, 'w')\"",))

    data_dir.mkdir(parents=True)
    ini = data_dir / "settings.ini"
    writer = QSettings(str(tmp_path / "crafted.ini"), QSettings.Format.IniFormat)
    writer.setValue("ui/theme", Payload())
    writer.sync()
    crafted = (tmp_path / "crafted.ini").read_text()
    payload = crafted.split("theme=", 1)[1].strip()
    assert payload.startswith('"@Variant(') and "PyObjectWrapper" in payload  # quoted: it holds spaces
    hidden = payload.replace("@", "\\x40", 1)  # the same value, its @ escaped
    bare = payload.strip('"')  # unquoted: the spaces in it end nothing
    text = ("[chat]\nsystem_prompt=be brief\n"
            f"[engine]\ndevice={hidden}\ndtype={bare}\n"
            f"weights=same, {payload}\ncache_kind=@Date\\\nTime(\\0\\0\\0\\x7f)\n"
            "[ui]\ntheme=@Variant(\\0\\0\\0\\x7f\\0\\0\\0\\x18PySide::PyObjectWrapper\\0\\0\\0\\0\\x88\\x80\\x04\\x95)\n")
    ini.write_text(text)
    keys, kept = serialized_values(text)
    assert keys == ["engine/device", "engine/dtype", "engine/weights", "engine/cache_kind", "ui/theme"]
    assert kept == "[chat]\nsystem_prompt=be brief\n[engine]\n[ui]\n"

    win = make_window(FakeBackend(tokens=["ok"]))
    assert not marker.exists()
    assert win.storage_banner.message() == (
        f"Settings file {ini}: ignored engine/device, engine/dtype, engine/weights, engine/cache_kind, ui/theme "
        "(stored objects, which Smolchat never writes); the file as it was is kept as settings.ini.unreadable.")
    assert win.settings.system_prompt == "be brief" and win.settings.theme == "system"
    assert (data_dir / "settings.ini.unreadable").read_text() == text
    assert _ask(qtbot, win)["finish_reason"] == "stop"
    assert not marker.exists()


def test_a_stored_object_inside_a_value_over_several_lines_sets_the_whole_file_aside(qtbot, make_window, data_dir,
                                                                                    tmp_path):
    """Found by a second trial: a quoted value goes on over a line break, so the object's line held no
    '=' and was kept, and QSettings unpickled it as the value's second list item. The file then
    cannot be cleaned line by line: it is set aside whole and the defaults apply."""
    import os
    import sys

    from PySide6.QtCore import QSettings

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"{sys.executable} -c \"open({str(marker)!r}, 'w')\"",))

    writer = QSettings(str(tmp_path / "crafted.ini"), QSettings.Format.IniFormat)
    writer.setValue("ui/theme", Payload())
    writer.sync()
    payload = (tmp_path / "crafted.ini").read_text().split("theme=", 1)[1].strip()  # quoted: it holds a comma
    text = f'[chat]\nsystem_prompt=be brief\n[ui]\ntheme="a\n",{payload}\n'
    (tmp_path / "probe.ini").write_text(text)  # the bypass is real: QSettings alone runs the payload
    QSettings(str(tmp_path / "probe.ini"), QSettings.Format.IniFormat).value("ui/theme")
    assert marker.exists()
    marker.unlink()

    data_dir.mkdir(parents=True)
    ini = data_dir / "settings.ini"
    ini.write_text(text)
    win = make_window(FakeBackend(tokens=["ok"]))
    assert not marker.exists()
    assert win.storage_banner.message() == (
        f"Settings file {ini} holds stored objects (a value over several lines), which Smolchat never writes: "
        "it was kept as settings.ini.unreadable and the defaults apply.")
    assert (data_dir / "settings.ini.unreadable").read_text() == text and win.settings.system_prompt == ""
    assert _ask(qtbot, win)["finish_reason"] == "stop"
    assert not marker.exists()


def test_a_stored_object_in_a_settings_file_that_cannot_be_cleaned_is_never_read(qtbot, make_window, data_dir,
                                                                                 monkeypatch):
    """A read-only settings file with such a value: the run uses an empty settings file of its own
    (defaults, nothing saved) rather than let QSettings read the object."""
    import app.settings as settings_module

    data_dir.mkdir(parents=True)
    ini = data_dir / "settings.ini"
    text = "[chat]\nsystem_prompt=be brief\n[ui]\ntheme=@Variant(\\0\\0\\0\\x7f\\0\\0\\0\\x18PySide::PyObjectWrapper)\n"
    ini.write_text(text)

    def refuse(*_args):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(settings_module.os, "replace", refuse)
    win = make_window(FakeBackend(tokens=["ok"]))
    assert win.storage_banner.message() == (
        f"Settings file {ini} holds stored objects (ui/theme), which Smolchat never writes, and could not be "
        "cleaned (Permission denied): the defaults apply, and changes are not saved.")
    assert win.settings.system_prompt == "" and ini.read_text() == text
    assert _ask(qtbot, win)["finish_reason"] == "stop"


def test_settings_dialog_refuses_a_seed_outside_the_valid_range(qtbot, window):
    dialog = window.open_settings_dialog()
    qtbot.addWidget(dialog)
    error = dialog.findChild(QLabel, "settingsError")
    for typed in ("-1", "18446744073709551616", "1.5", "abc", "²"):
        dialog.seed.setText(typed)
        dialog.accept()
        assert dialog.isVisible(), typed  # refused: the dialog stays open
        assert error.isVisible() and error.text() == (
            "Not applied: The seed must be a whole number from 0 to 2^64 − 1 (18,446,744,073,709,551,615), or "
            f"empty for a random seed, got {typed!r}.")
        assert window.settings.seed is None
    dialog.seed.setText("18446744073709551615")
    dialog.accept()
    assert not dialog.isVisible() and window.settings.seed == 2**64 - 1
    assert _ask(qtbot, window)["finish_reason"] == "stop"


def test_settings_dialog_refuses_a_context_too_small_for_any_question(qtbot, window):
    """A Context size of 1 token was taken: every message then failed ("the prompt is longer than the
    context"). 1-255 are refused with the rule; 0 (the model's own) and 256 are taken."""
    dialog = window.open_settings_dialog()
    qtbot.addWidget(dialog)
    error = dialog.findChild(QLabel, "settingsError")
    for typed in (1, 255):
        dialog.context_size.setValue(typed)
        dialog.apply()
        assert error.isVisible() and error.text() == (
            "Not applied: The context size must be a whole number of tokens from 256 to 131072, or 0 for the "
            f"model's own, got '{typed}'.")
        assert window.settings.context_size == 0
    dialog.context_size.setValue(256)
    assert not error.isVisible()  # cleared by the edit
    assert dialog.apply() and window.settings.context_size == 256


def test_settings_dialogs_error_line_moves_neither_the_buttons_nor_leaves_a_blank_band(qtbot, window):
    """Trial 60: the dialog grew by a refused value's line and shrank back at the first key in the
    field, and a click meant for Apply missed; an earlier trial: after a refused seed was corrected
    the dialog kept the error's height, a blank band above the buttons."""
    dialog = window.open_settings_dialog()
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    from PySide6.QtWidgets import QDialogButtonBox

    size = dialog.size()
    buttons = dialog.findChild(QDialogButtonBox)
    place = buttons.mapTo(dialog, buttons.rect().topLeft())
    error = dialog.findChild(QLabel, "settingsError")
    dialog.seed.setFocus()
    dialog.seed.setText("-1")
    dialog.apply()
    qtbot.waitUntil(lambda: error.isVisible() and error.geometry().bottom() < buttons.geometry().top())
    assert error.text().startswith("Not applied: The seed must be a whole number")
    assert dialog.size() == size and buttons.mapTo(dialog, buttons.rect().topLeft()) == place
    assert error.geometry().top() > dialog.scroll.geometry().bottom()  # taken from the sections, in sight
    seed = dialog.seed.mapTo(dialog.scroll.viewport(), dialog.seed.rect().bottomLeft()).y()
    assert 0 <= seed <= dialog.scroll.viewport().height()
    dialog.seed.setText("7")
    QApplication.processEvents()
    assert not error.isVisible()
    assert dialog.size() == size and buttons.mapTo(dialog, buttons.rect().topLeft()) == place
    # No blank band: the sections' scroll area reaches down to the buttons again.
    assert buttons.geometry().top() - dialog.scroll.geometry().bottom() <= dialog.layout().spacing() + 1


def test_a_chats_system_prompt_too_long_for_the_context_is_said_when_it_opens(qtbot, make_window, data_dir):
    """Trial 79 P5: an imported chat's 200,000-character system prompt was said only at the first Send."""
    long_chat, _ = _chat(data_dir, title="long prompt", settings={"system_prompt": "word " * 5000})
    full_chat, _ = _chat(data_dir, title="full prompt", settings={"system_prompt": "word " * 9000})
    short_chat, _ = _chat(data_dir, title="short prompt", settings={"system_prompt": "Be brief."})
    win = make_window(FakeBackend(tokens=["ok"]))
    win.open_conversation(full_chat)
    assert win.banner.message() == ("The system prompt and the chat's markup take 9,000 of the 8,192 tokens the "
                                    "model's context holds: no message fits beside them: shorten it in Settings.")
    win.open_conversation(long_chat)  # a short message still fits: a warning (trial 80 P2: "too many" was false)
    assert win.banner.message() == ("The system prompt and the chat's markup take 5,000 of the 8,192 tokens the "
                                    "model's context holds: little room is left for the chat (older messages are "
                                    "left out sooner); shorten it in Settings.")
    assert _ask(qtbot, win)["finish_reason"] == "stop"
    win.open_conversation(short_chat)
    assert win.banner.isHidden()


def test_a_chats_stored_settings_of_the_wrong_type_fall_back_to_the_defaults(qtbot, make_window, data_dir):
    _chat(data_dir, settings={"seed": -1, "overrides": {"temperature": "hot", "top_k": 7},
                              "image_detail": 3, "system_prompt": ["not", "text"]})
    fake = FakeBackend(tokens=["Yes", "."])
    win = make_window(fake)

    message = win.banner.message()
    assert message.startswith("Chat “old chat”: ignored system_prompt (not text) · not used: "
                              "temperature must be a number, got 'hot'")
    assert message.count("old chat") == 1
    assert ("the seed must be a whole number from 0 to 2^64 − 1 (18,446,744,073,709,551,615), or empty for a random "
            "seed, got '-1'") \
        in message and message.endswith("; the defaults apply instead.")
    assert (win.settings.seed, win.settings.overrides, win.settings.image_detail) == (None, {"top_k": 7}, "full")
    assert _ask(qtbot, win)["finish_reason"] == "stop"  # before: "Invalid settings: seed must be in [0, 2**64)"
    assert fake.calls[-1]["params"].top_k == 7


# -- the database -------------------------------------------------------------------------------------
def test_a_database_of_a_newer_smolchat_opens_read_only_and_is_never_written(qtbot, make_window, data_dir):
    conv_id, _ = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("ALTER TABLE messages ADD COLUMN reactions TEXT")  # what a newer version might add
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    before = _digest(data_dir / "smolchat.sqlite3")
    win = make_window(FakeBackend())

    assert win.storage_banner.message() == (
        f"Your conversations in {data_dir} are shown read-only: they were saved by a newer version of Smolchat "
        f"(database schema {SCHEMA_VERSION + 1}; this one reads up to {SCHEMA_VERSION}). Nothing is changed on "
        "disk; update Smolchat to continue them.")
    assert win.sidebar.titles() == ["old chat"] and win.keeper.current_id == conv_id
    assert [m["text"] for m in win.transcript.messages()] == ["Hello?", "Hi there.", "What is 2+2?", "4."]
    win.composer.setPlainText("And 3+3?")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    # Send is off (the banner above says why), so Enter sends nothing and the text stays.
    assert not win.send_button.isEnabled()
    assert win.send_button.toolTip().startswith("Sending is off: they were saved by a newer version of Smolchat")
    assert win.composer.toPlainText() == "And 3+3?"  # nothing lost
    win.delete_conversation(conv_id)
    assert win.sidebar.titles() == ["old chat"]
    win.close()
    assert _digest(data_dir / "smolchat.sqlite3") == before
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    db.close()


def test_a_row_of_an_unknown_role_or_blob_text_is_shown_as_text_and_said(qtbot, make_window, data_dir):
    """Found by a trial: a row of role 'wizard' showed as an answer without a word, and a text stored as
    a BLOB showed as Python's b'\\xff\\xfe...'."""
    conv_id, ids = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET role = 'wizard' WHERE id = ?", (ids[1],))
    db.execute("UPDATE messages SET text = ? WHERE id = ?", ("4 é.".encode() + b"\xff", ids[3]))
    db.commit()
    db.close()
    win = make_window(FakeBackend())
    assert [m["text"] for m in win.transcript.messages()] == ["Hello?", "Hi there.", "What is 2+2?", "4 é.\ufffd"]
    assert win.banner.message().startswith("2 messages of this chat have stored data that could not be read (its role, "
                                           "text,")


def test_a_message_whose_text_is_not_utf8_is_shown_and_said_and_search_still_works(qtbot, make_window, data_dir):
    """Trial 60: TEXT bytes that are not UTF-8 (a damaged page that SQLite's checks pass) raised when the
    row was read, so the whole chat showed as empty, and a search for any non-ASCII word failed."""
    conv_id, ids = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET text = CAST(X'52656420f09f8c' AS TEXT) || ' orange' WHERE id = ?", (ids[1],))
    db.commit()
    db.close()
    fake = FakeBackend(tokens=["6", "."])
    win = make_window(fake)
    assert [m["text"] for m in win.transcript.messages()] == ["Hello?", "Red \ufffd orange", "What is 2+2?", "4."]
    assert win.banner.message().startswith("1 message of this chat has stored data that could not be read")
    assert [c.title for c in win.store.conversations("Ünïcode")] == []
    assert [c.title for c in win.store.conversations("\ufffd orange")] == ["old chat"]  # matched as shown
    assert _ask(qtbot, win, "And 3+3?")["finish_reason"] == "stop"
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    assert db.execute("SELECT CAST(text AS BLOB) FROM messages WHERE id = ?", (ids[1],)).fetchone()[0] == (
        b"Red \xf0\x9f\x8c orange")  # left as it was on disk
    db.close()


def test_a_chat_that_cannot_be_shown_from_the_list_leaves_the_open_chat_and_its_draft(qtbot, make_window, data_dir,
                                                                                     monkeypatch):
    """Trial 60: such a chat cleared the window, and the question typed next went into the chat open
    before, which the user no longer saw."""
    from app.conversations import ConversationKeeper

    broken_id, _ = _chat(data_dir, "Unshowable")
    kept_id, _ = _chat(data_dir, "Fine chat")
    real = ConversationKeeper._render

    def render(self, messages):
        if messages and messages[0].conversation_id == broken_id:
            raise sqlite3.OperationalError("Could not decode to UTF-8 column 'text'")
        return real(self, messages)
    monkeypatch.setattr(ConversationKeeper, "_render", render)
    fake = FakeBackend(tokens=["6", "."])
    win = make_window(fake)
    assert win.keeper.current_id == kept_id
    win.composer.setPlainText("half-written question")
    win.open_conversation(broken_id)
    assert win.keeper.current_id == kept_id and win.keeper.last_opened() == kept_id
    assert [m["text"] for m in win.transcript.messages()] == ["Hello?", "Hi there.", "What is 2+2?", "4."]
    assert win.composer.toPlainText() == "half-written question"
    assert win.storage_banner.message() == (
        "The chat “Unshowable” could not be shown (OperationalError: Could not decode to UTF-8 column 'text'); the "
        "chat open before stays open, and that chat is still in the list.")
    assert win.sidebar.titles() == ["Fine chat", "Unshowable"]
    _ask(qtbot, win, "And 3+3?")
    assert [m.text for m in win.store.messages(kept_id)][-2:] == ["And 3+3?", "6."]
    assert len(win.store.messages(broken_id)) == 4


def test_a_message_row_whose_json_does_not_parse_is_shown_and_left_as_it_is(qtbot, make_window, data_dir):
    conv_id, ids = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET images = '{not json', stats = '[1,' , token_ids = '\"x\"' WHERE id = ?",
               (ids[1],))
    db.execute("UPDATE conversations SET settings = 'nope' WHERE id = ?", (conv_id,))
    db.commit()
    db.close()
    fake = FakeBackend(tokens=["6", "."])
    win = make_window(fake)

    assert [m["text"] for m in win.transcript.messages()] == ["Hello?", "Hi there.", "What is 2+2?", "4."]
    assert win.banner.message().split("\n") == [
        "1 message of this chat has stored data that could not be read (its role, text, images, their names, "
        "statistics or token ids): shown with what could be read, and left unchanged on disk.",
        # Its settings column ('nope') was passed over without a word.
        "This chat's stored settings could not be read: the current settings apply (and are stored with its next "
        "answer)."]
    assert _ask(qtbot, win, "And 3+3?")["finish_reason"] == "stop"
    assert [m.text for m in fake.calls[-1]["history"]] == ["Hello?", "Hi there.", "What is 2+2?", "4."]
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    assert db.execute("SELECT images, stats, token_ids FROM messages WHERE id = ?", (ids[1],)).fetchone() == (
        "{not json", "[1,", '"x"')
    db.close()


def test_a_read_only_data_folder_shows_the_existing_chats_read_only(qtbot, make_window, data_dir, monkeypatch):
    _chat(data_dir)
    before = _digest(data_dir / "smolchat.sqlite3")

    def read_only(path):  # as chmod 555 would for a user who is not root
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("app.paths._check_writable", read_only)
    monkeypatch.setattr("app.paths._fallbacks", {})
    monkeypatch.setattr("app.paths._read_only", {})
    win = make_window(FakeBackend())

    assert win.storage_banner.message() == (
        f"Your conversations in {data_dir} are shown read-only: the folder cannot be written (Permission denied). "
        "Sending is off; make the folder writable, or start Smolchat with SMOLCHAT_DATA_DIR set to another folder.")
    assert win.sidebar.titles() == ["old chat"]
    assert [m["text"] for m in win.transcript.messages()][-1] == "4."
    win.composer.setPlainText("Still there?")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert not win.send_button.isEnabled()
    assert win.send_button.toolTip() == "Sending is off: the data folder cannot be written (Permission denied)"
    assert win.composer.toPlainText() == "Still there?"
    win.close()
    assert _digest(data_dir / "smolchat.sqlite3") == before


# -- a question whose answer never started ---------------------------------------------------------------
def test_a_question_killed_during_its_prefill_is_marked_unanswered_with_resend(qtbot, make_window, data_dir):
    conv_id, _ = _chat(data_dir)
    store = Store(data_dir)
    store.add_message(conv_id, "user", "And 3+3?")
    store.add_message(conv_id, "assistant", "", status="streaming")  # the process died before any token
    store.close()
    fake = FakeBackend(tokens=["6", "."])
    win = make_window(fake)

    footer = win.transcript.widgets()[-1].findChild(QLabel, "messageFooter")
    assert footer.text() == "unanswered — Smolchat closed before this answer started"
    assert win.banner.message() == ("Your last question was never answered: Smolchat closed before the answer "
                                    "started. It is not part of the model's context until it is answered.")
    resend = win.banner.findChild(QPushButton, "bannerAction")
    assert resend.isVisible() and resend.text() == "Resend"
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as finished:
        qtbot.mouseClick(resend, Qt.MouseButton.LeftButton)
    assert finished.args[0]["finish_reason"] == "stop"
    assert [m.text for m in fake.calls[-1]["history"]] == ["Hello?", "Hi there.", "What is 2+2?", "4."]
    assert fake.calls[-1]["text"] == "And 3+3?"
    assert [(m["role"], m["text"]) for m in win.transcript.messages()][-2:] == [("user", "And 3+3?"),
                                                                                ("assistant", "6.")]
    assert [m.text for m in Store(data_dir, recover=False).messages(conv_id)][-2:] == ["And 3+3?", "6."]


def test_a_question_without_any_answer_row_is_resent_once(qtbot, make_window, data_dir):
    conv_id, _ = _chat(data_dir)
    store = Store(data_dir)
    store.add_message(conv_id, "user", "And 3+3?")  # killed between saving the question and its answer
    store.close()
    fake = FakeBackend(tokens=["6", "."])
    win = make_window(fake)
    assert win.banner.message() == ("Your last question has no answer. It is not part of the model's context until "
                                    "it is answered.")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.resend_unanswered()
    assert fake.calls[-1]["text"] == "And 3+3?"
    texts = [m.text for m in Store(data_dir, recover=False).messages(conv_id)]
    assert texts == ["Hello?", "Hi there.", "What is 2+2?", "4.", "And 3+3?", "6."]  # not twice


# -- attachments -------------------------------------------------------------------------------------
def test_an_attachment_changed_or_deleted_before_send_is_sent_as_attached(qtbot, window, fake_session, png):
    from PIL import Image

    window.add_files([str(png)])
    attached = png.read_bytes()
    Image.new("RGB", (10, 10), (0, 0, 255)).save(png)  # the user edits the file before pressing Send
    _ask(qtbot, window, "What is this?")
    [sent] = fake_session.calls[-1]["images"]
    assert open(sent, "rb").read() == attached

    window.add_files([str(png)])
    png.unlink()  # ... or deletes it
    assert _ask(qtbot, window, "And now?")["finish_reason"] == "stop"
    assert len(fake_session.calls) == 2


def test_an_error_about_an_attachment_names_the_users_file(qtbot, window, fake_session, png):
    window.add_files([str(png)])
    stored = window.kept_paths()[0]
    assert stored != str(png.resolve())
    fake_session.image_error = f"ImageError: cannot identify image file '{stored}'"
    result = _ask(qtbot, window, "What is this?")
    assert result["error"] == f"ImageError: cannot identify image file '{png.resolve()}'"
    assert window.banner.message() == f"ImageError: cannot identify image file '{png.resolve()}'"


def test_a_model_manager_that_fails_to_build_leaves_no_running_thread_behind(tmp_path):
    """The SIGABRT seen at startup: a QThread started in ModelManager.__init__ and destroyed while running
    when the rest of __init__ raised. Run in a child process (an abort would end pytest too)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import gc, app.model_manager as mm\n"
        "from PySide6.QtWidgets import QApplication\n"
        "qt = QApplication([])\n"
        "def broken(*a, **k): raise ValueError('unreadable list of models')\n"
        "mm.known_models = broken\n"
        "try:\n    mm.ModelManager()\nexcept ValueError as exc:\n    print('raised:', exc)\n"
        "gc.collect()\nqt.processEvents()\nprint('alive')\n")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SMOLCHAT_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=Path(__file__).resolve().parents[2])
    assert (done.returncode, done.stdout) == (0, "raised: unreadable list of models\nalive\n"), done.stderr


def test_a_stored_image_missing_from_disk_is_named_and_left_out_of_the_context(qtbot, make_window, data_dir, png):
    """Trial 69 F8: the banner named the files by their stored (hash) names and called a video an image;
    the photo showed as a 6-px sliver opening an empty viewer, the video as its cached filmstrip."""
    from app.messages import ClickableImage, MissingMedia

    store = Store(data_dir)
    conv = store.create_conversation("photo chat", model="/models/fake")
    kept = store.store_image(png)
    video = data_dir / "images" / "0123456789abcdef.mp4"  # (a stored video's name; its bytes never read here)
    video.write_bytes(b"\0" * 64)
    store.add_message(conv.id, "user", "What is this?", [kept, str(video)], names=["rocket.jpg", "clip.mp4"])
    store.add_message(conv.id, "assistant", "An orange square.")
    store.close()
    (data_dir / "images" / kept.rsplit("/", 1)[1]).unlink()  # deleted by hand, or by a disk cleaner
    video.unlink()
    fake = FakeBackend(tokens=["Yes", "."])
    win = make_window(fake)

    assert win.banner.message() == (f"2 photos and videos of this chat are missing from {data_dir / 'images'} "
                                    "(rocket.jpg, clip.mp4): the model sees those messages without them.")
    question = win.transcript.widgets()[0]
    tiles = question.findChildren(MissingMedia)
    assert [t.text() for t in tiles] == ["rocket.jpg\n(photo missing)", "clip.mp4\n(video missing)"]
    assert question.findChildren(ClickableImage) == [] and all(t.width() > 100 for t in tiles)
    assert _ask(qtbot, win, "Sure?")["finish_reason"] == "stop"
    assert [(m.text, m.attachments) for m in fake.calls[-1]["history"]] == [("What is this?", ()),
                                                                          ("An orange square.", ())]


def test_token_ids_go_to_the_engine_only_for_the_model_that_generated_them(data_dir):
    from app.controller import history_messages
    from app.conversations import engine_history

    store = Store(data_dir)
    conv = store.create_conversation("two models")
    store.add_message(conv.id, "user", "Hi")
    answer = store.add_message(conv.id, "assistant", "Hello.", stats={"model": "/models/a"})
    store.update_message(answer.id, token_ids=[9, 8, 7])
    messages = store.messages(conv.id)
    assert history_messages(engine_history(messages, "/models/a"))[1].token_ids == (9, 8, 7)
    assert history_messages(engine_history(messages, "/models/b"))[1].token_ids is None  # re-tokenized by b
    store.close()


def test_a_database_locked_by_another_program_opens_read_only(qtbot, make_window, data_dir):
    _chat(data_dir)
    other = sqlite3.connect(data_dir / "smolchat.sqlite3", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # e.g. a backup tool, or a stuck second copy of Smolchat
    try:
        win = make_window(FakeBackend())
        assert win.storage_banner.message() == (
            f"Your conversations in {data_dir} are shown read-only: another program holds the database locked "
            "(database is locked). Sending is off; close the other program and restart Smolchat.")
        assert win.sidebar.titles() == ["old chat"]  # before: a temporary folder, the chats hidden
        assert [m["text"] for m in win.transcript.messages()][-1] == "4."
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_lock_taken_by_another_program_later_holds_a_send_briefly_and_is_said(qtbot, make_window, data_dir):
    """Trial 69 F5: with another program holding the database locked, Send, Rename and Delete each froze
    the window for 10 s, then said only "database is locked"."""
    from app.store import WRITE_TIMEOUT_S

    _chat(data_dir)
    win = make_window(FakeBackend())
    assert win.store.db.execute("PRAGMA busy_timeout").fetchone()[0] == WRITE_TIMEOUT_S * 1000 == 1000
    other = sqlite3.connect(data_dir / "smolchat.sqlite3", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        win.composer.setPlainText("Still there?")
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
        assert win.banner.message() == (
            "Could not save the message: another program holds Smolchat's database locked (a backup or sync tool, "
            "or a database viewer?): let it finish or close it, then try again.")
        assert win.composer.toPlainText() == "Still there?"  # kept, to send again
    finally:
        other.execute("ROLLBACK")
        other.close()
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.store.messages(win.keeper.current_id)[-2].text == "Still there?"


def test_a_theme_variable_with_junk_is_ignored_and_said(qtbot, make_window, monkeypatch):
    monkeypatch.setenv("SMOLCHAT_THEME", "purple")
    win = make_window(FakeBackend())
    assert win.storage_banner.message() == ("$SMOLCHAT_THEME: ignored 'purple' (one of system, light, dark); the "
                                            "theme from Settings applies.")


def test_a_file_where_the_images_folder_belongs_is_named(qtbot, make_window, data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "images").write_text("not a folder")
    win = make_window(FakeBackend())
    assert win.storage_banner.message().startswith(
        f"The data folder {data_dir} cannot be used ({data_dir / 'images'}: File exists). Conversations will not "
        "be kept after Smolchat closes")
    assert (data_dir / "images").read_text() == "not a folder"


def test_a_backend_variable_naming_nothing_is_ignored_and_said(qtbot, monkeypatch, tiny_checkpoint):  # noqa: F811
    from app.main_window import MainWindow

    monkeypatch.setenv("SMOLCHAT_BACKEND", "nonsense:Backend")
    win = MainWindow(str(tiny_checkpoint))  # before: ModuleNotFoundError, no window
    qtbot.addWidget(win)
    assert win.storage_banner.message() == ("$SMOLCHAT_BACKEND: ignored 'nonsense:Backend' (ModuleNotFoundError: No "
                                            "module named 'nonsense'); using the local engine.")
    qtbot.waitUntil(lambda: bool(win.model_info), timeout=60_000)
    assert win.model_info["backend"] == "local"
    win.close()


def test_saved_servers_of_the_wrong_type_are_ignored_and_said(qtbot, make_window, data_dir):
    data_dir.mkdir(parents=True)
    ini = data_dir / "settings.ini"
    ini.write_text('[remote]\nservers="[{\\"name\\": \\"gpu\\", \\"url\\": \\"http://gpu:8000/v1\\", \\"vision\\": '
                   '\\"yes\\"}, {\\"name\\": 5, \\"url\\": [1]}, 7]"\n', encoding="utf-8")
    win = make_window(FakeBackend())  # before: TypeError / ValueError from the servers list
    assert win.storage_banner.message() == (f"Settings file {ini}: ignored 2 saved servers that could not be read "
                                            "(remote/servers); the rest apply; the value as it was is kept as "
                                            "remote/servers_unreadable.")
    from app.remote_settings import load_servers

    assert load_servers(win.qsettings) == [{"name": "gpu", "url": "http://gpu:8000/v1", "vision": {}}]
    ini.write_text("[remote]\nservers=5\n", encoding="utf-8")
    assert load_servers(win.qsettings.__class__(str(ini), win.qsettings.Format.IniFormat)) == []


def test_a_saved_servers_list_cut_short_keeps_the_servers_written_whole(qtbot, make_window, data_dir):
    """Found by a trial: a settings file cut inside the servers list lost all three servers, said
    "ignored 1 saved server", and the next save of a server overwrote the list with no copy kept."""
    from app import remote_settings

    data_dir.mkdir(parents=True)
    ini = data_dir / "settings.ini"
    full = json.dumps([{"name": "gpu", "url": "http://gpu:8000/v1", "vision": {"m": True}},
                       {"name": "laptop", "url": "http://laptop:8080/v1", "vision": {}},
                       {"name": "third", "url": "http://third:1/v1", "vision": {}}])
    cut = full[:full.index('"third"') + 3]
    ini.write_text("[remote]\nservers=" + json.dumps(cut) + "\n", encoding="utf-8")
    win = make_window(FakeBackend())
    assert win.storage_banner.message() == (
        f"Settings file {ini}: the saved servers (remote/servers) are cut short or damaged: 2 were read; the value "
        "as it was is kept as remote/servers_unreadable.")
    assert [s["name"] for s in remote_settings.load_servers(win.qsettings)] == ["gpu", "laptop"]
    assert remote_settings.load_servers(win.qsettings)[0]["vision"] == {"m": True}
    remote_settings.save_servers([*remote_settings.load_servers(win.qsettings),
                                  {"name": "new", "url": "http://new:1/v1"}], win.qsettings)
    assert win.qsettings.value(remote_settings.UNREADABLE_KEY) == cut  # the list as it was, for the user to mend


def test_a_damaged_database_is_left_as_it_is_says_what_to_do_and_its_stand_in_goes_at_exit(
        qtbot, make_window, data_dir, monkeypatch):
    """Found by a trial: the banner said what happened but not what to do, and the temporary folder
    that stood in (with this run's chats and photos, said not to be kept) stayed in /tmp."""
    import app.paths

    monkeypatch.setattr("app.paths._fallbacks", {})
    data_dir.mkdir(parents=True, exist_ok=True)  # (a thread left by an earlier test may have made it)
    junk = b"this is not SQLite" * 100
    (data_dir / "smolchat.sqlite3").write_bytes(junk)
    win = make_window(FakeBackend())
    [(stand_in, _)] = app.paths._fallbacks.values()
    assert win.storage_banner.message() == (
        f"The data folder {data_dir} cannot be used ({data_dir / 'smolchat.sqlite3'}: file is not a database; it "
        f"is left as it is). Conversations will not be kept after Smolchat closes: this session uses a temporary "
        f"folder, {stand_in}. To keep conversations again, close Smolchat and move smolchat.sqlite3 aside (or put "
        "a backup in its place): the next start makes a new one.")
    assert stand_in.is_dir() and (stand_in / "smolchat.sqlite3").is_file()
    # The stand-in's chat ids are not remembered in the real folder's settings: once the user puts a
    # backup in place, its id 1 would open the wrong chat (found by a re-check trial).
    qtbot.keyClicks(win.composer, "hello")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.keeper.current_id is not None and win.qsettings.value("conversations/last") is None
    app.paths.remove_temporary_dirs()  # what atexit runs
    assert not stand_in.exists()
    assert (data_dir / "smolchat.sqlite3").read_bytes() == junk


def test_an_answer_whose_stats_have_the_wrong_types_is_shown_and_smolchat_starts(qtbot, make_window, data_dir):
    """Trial 48: `{"ttft_s": "0.42"}` or `{"model_name": 5}` (valid JSON, e.g. from an imported file) made
    the chat blank and, when it was the last one open, every start end in a traceback."""
    conv, ids = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET stats = ? WHERE id = ?",
               (json.dumps({"ttft_s": "0.42", "model_name": 5, "generated_tokens": 3}), ids[3]))
    db.commit()
    db.close()
    win = make_window(FakeBackend())
    assert win.keeper.current_id == conv
    assert [m.text for m in win.transcript.widgets()] == ["Hello?", "Hi there.", "What is 2+2?", "4."]
    answer = win.transcript.widgets()[3]
    assert answer.footer() == "3 generated tokens" and answer._name.text() == "Smolchat"
    assert "could not be read" in win.banner.message()


def test_a_chat_that_cannot_be_shown_does_not_stop_smolchat_from_starting(qtbot, make_window, data_dir, monkeypatch):
    """Whatever a stored chat holds that no check foresaw: the window starts on a new chat and says so."""
    from app.conversations import ConversationKeeper

    conv, _ = _chat(data_dir, "Unshowable")
    real = ConversationKeeper._render

    def broken(self, messages):
        if messages:
            raise ValueError("Unknown format code 'f' for object of type 'str'")
        return real(self, messages)
    monkeypatch.setattr(ConversationKeeper, "_render", broken)
    win = make_window(FakeBackend())
    assert win.keeper.current_id is None and win.transcript.widgets() == []
    assert win.sidebar.titles() == ["Unshowable"]
    said = win.storage_banner.message()
    assert "“Unshowable” could not be shown (ValueError: Unknown format code" in said
    assert "a new chat is open instead" in said
    _ask(qtbot, win)  # and it answers


def test_an_answer_following_a_message_not_in_its_chat_is_said(qtbot, make_window, data_dir):
    """Trial 49: the store noted it, but the window counted only the messages it shows: the answer
    vanished without a word."""
    conv, ids = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET parent_id = 999 WHERE id = ?", (ids[3],))
    db.commit()
    db.close()
    win = make_window(FakeBackend())
    assert [m.text for m in win.transcript.widgets()] == ["Hello?", "Hi there.", "What is 2+2?"]
    assert "1 stored message cannot be placed in this chat (a message before it is missing" in win.banner.message()


def test_messages_that_follow_one_another_in_a_loop_are_said_not_an_empty_chat(qtbot, make_window, data_dir):
    """Trial 61: a chat whose first message was made to follow its second (parent ids in a loop) opened
    empty without a word, and the next question started the chat anew."""
    conv, ids = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET parent_id = ? WHERE id = ?", (ids[1], ids[0]))
    db.commit()
    db.close()
    win = make_window(FakeBackend())
    assert win.transcript.widgets() == []
    assert win.banner.message().split("\n")[-1] == (
        "4 stored messages cannot be placed in this chat (a message before it is missing, or messages follow one "
        "another in a loop): not shown, and left unchanged on disk.")


def test_a_question_of_unreadable_role_is_read_as_the_question_its_place_makes_it(qtbot, make_window, data_dir):
    """Trials 61 and 63: with a question's stored role unreadable, it was drawn as an answer, Regenerate
    under the answer after it could not ask it again, and a follow-up went to the model without the chat
    before it. A chat alternates question and answer from its first message: its place says which."""
    conv_id, ids = _chat(data_dir)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET role = CAST(X'FF' AS TEXT) WHERE id = ?", (ids[2],))
    db.execute("UPDATE messages SET role = 'wizard' WHERE id = ?", (ids[3],))
    db.commit()
    db.close()
    fake = FakeBackend(tokens=["6", "."])
    win = make_window(fake)
    qtbot.waitUntil(lambda: win.controller.ready, timeout=5000)
    assert [(m["role"], m["text"]) for m in win.transcript.messages()] == [
        ("user", "Hello?"), ("assistant", "Hi there."), ("user", "What is 2+2?"), ("assistant", "4.")]
    assert win.banner.message().startswith("2 messages of this chat have stored data that could not be read")
    assert [m.role for m in win.store.all_messages(conv_id)] == ["user", "assistant"] * 2  # as exported
    assert _ask(qtbot, win, "And 3+3?")["finish_reason"] == "stop"
    assert fake.calls[-1]["turns"] == [
        ("user", "Hello?", 0), ("assistant", "Hi there.", 0), ("user", "What is 2+2?", 0), ("assistant", "4.", 0)]
    win.regenerate_answer(3)  # the damaged question is asked again after the chat before it
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=10_000)
    assert fake.calls[-1]["text"] == "What is 2+2?"
    assert fake.calls[-1]["turns"] == [("user", "Hello?", 0), ("assistant", "Hi there.", 0)]
    assert [m["text"] for m in win.transcript.messages()] == ["Hello?", "Hi there.", "What is 2+2?", "6."]
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    assert db.execute("SELECT CAST(role AS BLOB) FROM messages WHERE id = ?", (ids[2],)).fetchone()[0] == b"\xff"
    db.close()  # left as it was on disk
