"""The SQLite store: schema and migrations, conversations, messages, images by hash, crash recovery."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from PIL import Image

from app.store import MIGRATIONS, SCHEMA_VERSION, Store


def test_new_database_is_wal_at_current_schema(store):
    assert store.version == SCHEMA_VERSION
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_version_1_database_is_migrated_keeping_its_data(data_dir):
    data_dir.mkdir(parents=True)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.executescript(MIGRATIONS[1])
    db.execute("INSERT INTO conversations (title, created, updated) VALUES ('old chat', 1, 1)")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    store = Store(data_dir)
    assert store.version == SCHEMA_VERSION
    assert [c.title for c in store.conversations()] == ["old chat"]
    store.close()


def test_newer_schema_is_refused(data_dir):
    data_dir.mkdir(parents=True)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(RuntimeError, match="newer Smolchat"):
        Store(data_dir)


def test_conversations_messages_search_rename(store):
    a = store.create_conversation("Cats", model="m", settings={"temperature": 0.2})
    b = store.create_conversation("Dogs")
    store.add_message(a.id, "user", "what breed is this cat?")
    store.add_message(a.id, "assistant", "A tabby.", stats={"generated_tokens": 3})
    assert [c.id for c in store.conversations()][0] == a.id  # touched last
    assert [c.title for c in store.conversations("tabby")] == ["Cats"]
    assert [c.title for c in store.conversations("DOG")] == ["Dogs"]
    store.rename_conversation(b.id, "  Puppies ")
    assert store.conversation(b.id).title == "Puppies"
    messages = store.messages(a.id)
    assert [(m.role, m.text) for m in messages] == [("user", "what breed is this cat?"), ("assistant", "A tabby.")]
    assert messages[1].stats == {"generated_tokens": 3}
    assert store.conversation(a.id).settings == {"temperature": 0.2}


def test_delete_can_be_undone_until_restart(store, data_dir):
    c = store.create_conversation("temp")
    store.delete_conversation(c.id)
    assert store.conversations() == [] and store.conversation(c.id) is None
    store.undelete_conversation(c.id)
    assert [x.id for x in store.conversations()] == [c.id]
    store.delete_conversation(c.id)
    store.close()
    again = Store(data_dir)
    assert again.db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0] == 0
    again.close()


def test_delete_messages_from_truncates_the_tail(store):
    c = store.create_conversation()
    ids = [store.add_message(c.id, r, t).id for r, t in [("user", "1"), ("assistant", "2"), ("user", "3"),
                                                          ("assistant", "4")]]
    store.delete_messages_from(c.id, ids[2])
    assert [m.text for m in store.messages(c.id)] == ["1", "2"]
    store.delete_message(ids[0])  # a question goes with its answer (no answer without its question)
    assert store.all_messages(c.id) == []


def test_images_are_stored_once_by_content_hash(store, tmp_path):
    a = tmp_path / "a.png"
    Image.new("RGB", (8, 8), "red").save(a)
    b = tmp_path / "copy-of-a.PNG"
    b.write_bytes(a.read_bytes())
    first, second = store.store_image(a), store.store_image(b)
    assert first == second and first.endswith(".png")
    assert len(list(store.images_dir.iterdir())) == 1
    c = store.create_conversation()
    m = store.add_message(c.id, "user", "look", images=[first])
    assert store.message(m.id).images == [first]


def test_streaming_answer_becomes_interrupted_on_reopen(store, data_dir):
    c = store.create_conversation()
    m = store.add_message(c.id, "assistant", "", status="streaming")
    store.update_message(m.id, text="partial ans")
    # No close(): as after a crash. A second connection sees every committed flush.
    again = Store(data_dir)
    assert again.interrupted == 1
    msg = again.message(m.id)
    assert (msg.text, msg.status) == ("partial ans", "interrupted")
    again.close()


def _copy_then_disk_full(src, dst, *args, **kwargs):
    with open(dst, "wb") as out:
        out.write(b"\x89PNG half of it")
    raise OSError(28, "No space left on device")


def test_failed_image_copy_leaves_no_part_file(store, png, monkeypatch):
    monkeypatch.setattr("app.store.shutil.copyfile", _copy_then_disk_full)
    with pytest.raises(OSError):
        store.store_image(png)
    assert list(store.images_dir.iterdir()) == []


def test_stale_part_files_are_removed_when_the_store_opens(data_dir, png):
    Store(data_dir).close()
    stale = data_dir / "images" / "0123abcd.part"
    stale.write_bytes(b"half")
    kept = Store(data_dir)
    kept.store_image(png)
    kept.close()
    Store(data_dir).close()
    assert not stale.exists()
    assert [p.suffix for p in (data_dir / "images").iterdir()] == [".png"]


def test_a_chats_settings_written_again_are_readable_again(store, data_dir):
    """Unreadable settings are noted (the window says so when the chat opens); once the chat's next
    answer writes its settings, reopening it in the same run no longer says so."""
    conv = store.create_conversation("c", settings={"seed": 1})
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE conversations SET settings = 'nope' WHERE id = ?", (conv.id,))
    db.commit()
    db.close()
    assert store.conversation(conv.id).settings == {}
    assert ("conversation", conv.id) in store.unreadable
    store.update_conversation(conv.id, settings={"seed": 2})
    assert store.conversation(conv.id).settings == {"seed": 2}
    assert ("conversation", conv.id) not in store.unreadable


# -- the names files were attached as (schema 5) ---------------------------------------------------------
def test_version_4_database_is_migrated_and_its_messages_names_are_unknown(data_dir):
    data_dir.mkdir(parents=True)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    for n in (1, 2, 3, 4):
        db.executescript(MIGRATIONS[n])
    db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 'old', 1, 1)")
    db.execute("INSERT INTO messages (conversation_id, position, role, text, images, created) "
               """VALUES (1, 0, 'user', 'what is this?', '["0a1b.png", "2c3d.mp4"]', 1)""")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    store = Store(data_dir)
    assert store.version == SCHEMA_VERSION == 5
    [old] = store.messages(1)
    assert old.text == "what is this?"
    assert old.images == [str(data_dir / "images" / "0a1b.png"), str(data_dir / "images" / "2c3d.mp4")]
    assert old.attached_names == ["", ""]  # written before names were kept
    assert store.unreadable == set()
    new = store.add_message(1, "user", "and this?", [old.images[0]], names=["cat.png"])
    assert store.message(new.id).attached_names == ["cat.png"]
    store.close()


def test_attached_names_are_kept_as_base_names_and_survive_undo_and_reopening(store, data_dir, tmp_path):
    first, second = tmp_path / "a.png", tmp_path / "b.mp4"
    first.write_bytes(b"a picture")
    second.write_bytes(b"a video")
    images = [store.store_image(first), store.store_image(second), store.store_image(first)]
    conv = store.create_conversation().id
    message = store.add_message(conv, "user", "look", images,
                                names=["holiday.png", "/home/me/private/clip.mp4", "C:\\Users\\me\\cat.png"])
    assert message.attached_names == ["holiday.png", "clip.mp4", "cat.png"]
    raw = store.db.execute("SELECT attached_names FROM messages WHERE id = ?", (message.id,)).fetchone()[0]
    assert "private" not in raw and "Users" not in raw  # never the folders a file came from
    assert store.add_message(conv, "assistant", "nice").attached_names == []
    assert store.add_message(conv, "user", "again", images[:1]).attached_names == [""]  # no names given
    with pytest.raises(ValueError):
        store.add_message(conv, "user", "x", images[:2], names=["one.png"])

    store.restore_messages(store.delete_message(message.id))  # Undo puts the row back as it was
    assert store.message(message.id).attached_names == ["holiday.png", "clip.mp4", "cat.png"]
    store.close()
    again = Store(data_dir)
    assert again.message(message.id).attached_names == ["holiday.png", "clip.mp4", "cat.png"]
    again.close()


@pytest.mark.parametrize("damaged,names", [
    ("{not json", ["", ""]),
    ('"a.png"', ["", ""]),  # not a list
    ('["only one.png"]', ["", ""]),  # which file would it name?
    ('["a.png", 7]', ["a.png", ""]),
])
def test_damaged_attached_names_leave_the_message_readable_and_unchanged(store, data_dir, tmp_path, damaged, names):
    (tmp_path / "a.png").write_bytes(b"a")
    (tmp_path / "b.png").write_bytes(b"b")
    images = [store.store_image(tmp_path / "a.png"), store.store_image(tmp_path / "b.png")]
    conv = store.create_conversation().id
    message = store.add_message(conv, "user", "two", images, names=["a.png", "b.png"])
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET attached_names = ? WHERE id = ?", (damaged, message.id))
    db.commit()
    db.close()
    [read] = store.messages(conv)
    assert (read.text, read.images, read.attached_names) == ("two", images, names)
    assert ("message", message.id) in store.unreadable
    assert store.db.execute("SELECT attached_names FROM messages WHERE id = ?", (message.id,)).fetchone()[0] == damaged


def test_names_stay_with_their_files_when_a_damaged_images_entry_is_left_out(store, data_dir, tmp_path):
    (tmp_path / "b.png").write_bytes(b"b")
    image = store.store_image(tmp_path / "b.png")
    conv = store.create_conversation().id
    message = store.add_message(conv, "user", "q", [image, image], names=["a.png", "b.png"])
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    db.execute("UPDATE messages SET images = json_set(images, '$[0]', 5) WHERE id = ?", (message.id,))
    db.commit()
    db.close()
    read = store.message(message.id)
    assert (read.images, read.attached_names) == ([image], ["b.png"])


def test_a_stored_copy_damaged_since_is_replaced_when_the_file_is_stored_again(store, tmp_path):
    """Found by a trial: a copy in the image store damaged on disk was reused for good (the intact
    original could never be sent again, and the error named the original)."""
    photo = tmp_path / "red.png"
    photo.write_bytes(b"\x89PNG" + bytes(range(256)) * 4)
    stored = Path(store.store_image(photo))
    stored.write_bytes(stored.read_bytes()[:100])  # cut short
    assert store.store_image(photo) == str(stored) and stored.read_bytes() == photo.read_bytes()
    damaged = bytearray(photo.read_bytes())
    damaged[500] ^= 0xFF  # the same size, one byte flipped
    stored.write_bytes(bytes(damaged))
    assert store.store_image(photo) == str(stored) and stored.read_bytes() == photo.read_bytes()


def linear_chat(store: Store, messages: int, title: str = "long") -> list[int]:
    """A chat of ``messages`` messages, each following the one before; returns their ids."""
    conv = store.create_conversation(title).id
    ids = []
    with store._transaction():  # (one transaction: thousands of commits would take seconds)
        parent = None
        for i in range(messages):
            cur = store.db.execute(
                "INSERT INTO messages (conversation_id, position, role, text, created, parent_id) VALUES (?, ?, ?, ?, 0, ?)",
                (conv, i, "user" if i % 2 == 0 else "assistant", f"m{i}", parent))
            parent = cur.lastrowid
            ids.append(parent)
    return ids


def test_a_chat_of_thousands_of_messages_is_purged_at_the_next_start(data_dir):
    """SQLite's ON DELETE CASCADE runs a trigger level per message of a chain and gives up at 1,000
    ("too many levels of trigger recursion"): a deleted 1,500-message chat made every later start fail."""
    store = Store(data_dir)
    long = store.conversation(store.db.execute("SELECT conversation_id FROM messages WHERE id = ?",
                                               (linear_chat(store, 1500)[0],)).fetchone()[0])
    kept_ids = linear_chat(store, 3, "kept")
    store.delete_conversation(long.id)
    store.close()
    again = Store(data_dir)  # the purge
    assert [c.title for c in again.conversations()] == ["kept"]
    assert again.db.execute("SELECT count(*) FROM messages").fetchone()[0] == 3
    assert [m.id for m in again.messages(again.conversations()[0].id)] == kept_ids
    assert again.db.execute("PRAGMA foreign_key_check").fetchall() == []
    again.close()


def test_a_branch_of_thousands_of_messages_is_deleted_and_comes_back_with_undo(store):
    ids = linear_chat(store, 1500)
    conv = store.message(ids[0]).conversation_id
    other = store.add_message(conv, "assistant", "another first answer", parent_id=ids[0])  # a version of ids[1]
    store.select(ids[1])
    deleted = store.delete_message(ids[1])  # the version with its 1,498 follow-ups
    assert [m.id for m in store.messages(conv)] == [ids[0], other.id]
    assert store.db.execute("SELECT count(*) FROM messages").fetchone()[0] == 2
    store.restore_messages(deleted)
    assert [m.id for m in store.messages(conv)] == ids
    store.delete_messages_from(conv, ids[2])
    assert [m.id for m in store.messages(conv)] == ids[:2]
    assert store.db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_follow_ups_are_found_by_an_index(store):
    """Every deleted message's cascade looks its follow-ups up by parent_id: without an index of its own
    a full scan each (55 s to purge three chats of a 430 MB database)."""
    plan = " ".join(str(row[-1]) for row in store.db.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM messages WHERE parent_id = ?", (1,)))
    assert "USING COVERING INDEX messages_by_parent_id" in plan or "USING INDEX messages_by_parent_id" in plan, plan


def test_search_takes_percent_and_underscore_as_written(store):
    for title, text in (("Discount", "It is 100% off"), ("Names", "use snake_case here"), ("Other", "1000 of them")):
        store.add_message(store.create_conversation(title).id, "user", text)
    assert [c.title for c in store.conversations("100%")] == ["Discount"]
    assert [c.title for c in store.conversations("%")] == ["Discount"]
    assert [c.title for c in store.conversations("e_c")] == ["Names"]
    assert [c.title for c in store.conversations("_")] == ["Names"]
    assert [c.title for c in store.conversations("\\")] == []


def test_stats_of_the_wrong_type_are_left_out_as_unreadable(store):
    """Valid JSON with a string where the footer formats a number (a hand-edited row, an import of a
    file made elsewhere) stopped the chat from being shown, and Smolchat from starting."""
    conv = store.create_conversation("odd").id
    good = store.add_message(conv, "assistant", "fine", stats={"ttft_s": 0.4, "model_name": "M", "custom": [1]})
    odd = store.add_message(conv, "assistant", "odd", stats={"ttft_s": "0.42", "model_name": 5, "prompt_tokens": True,
                                                           "generated_tokens": 3, "decode_tokens_per_s": float("nan")})
    assert store.message(good.id).stats == {"ttft_s": 0.4, "model_name": "M", "custom": [1]}
    assert store.message(odd.id).stats == {"generated_tokens": 3}
    assert ("message", odd.id) in store.unreadable and ("message", good.id) not in store.unreadable


def test_a_title_or_times_written_by_another_program_are_read_as_far_as_they_can_be(store):
    conv = store.create_conversation("x").id
    store.db.execute("UPDATE conversations SET title = ?, updated = 'soon', created = x'00' WHERE id = ?",
                     (b"\xe2\x9c\x93 blob", conv))
    [read] = store.conversations()
    assert (read.title, read.created, read.updated) == ("✓ blob", 0.0, 0.0)


def test_a_message_following_one_not_in_its_chat_is_said_as_unreadable(store, data_dir):
    """Another program's row (or a damaged one) whose parent is gone cannot be placed in the chat: it is
    not shown, and the chat says a message could not be read instead of losing it without a word."""
    conv = store.create_conversation("x").id
    question = store.add_message(conv, "user", "Hi?")
    stray = store.add_message(conv, "assistant", "lost", parent_id=question.id)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")  # (another program: foreign keys are its own choice)
    db.execute("UPDATE messages SET parent_id = 999 WHERE id = ?", (stray.id,))
    db.commit()
    db.close()
    assert [m.text for m in store.messages(conv)] == ["Hi?"]
    assert ("message", stray.id) in store.unreadable and ("message", question.id) not in store.unreadable


def test_search_ignores_case_beyond_a_to_z_and_odd_times_sort_as_the_epoch(store):
    """SQLite's LIKE folds A-Z only: "привет" found no "Привет" (nor "école" "École")."""
    for title, text in (("Russian", "Привет, мир"), ("French", "École du soir"), ("German", "STRASSE")):
        store.add_message(store.create_conversation(title).id, "user", text)
    assert [c.title for c in store.conversations("привет")] == ["Russian"]
    assert [c.title for c in store.conversations("école")] == ["French"]
    assert [c.title for c in store.conversations("straße")] == ["German"]  # casefolded, as the open chat's count
    assert [c.title for c in store.conversations("Strasse")] == ["German"]
    odd = store.create_conversation("odd").id
    store.db.execute("UPDATE conversations SET updated = 'soon' WHERE id = ?", (odd,))
    assert [c.title for c in store.conversations()][-1] == "odd"  # (text sorted before every number)


def test_a_read_after_a_write_parses_only_the_rows_that_changed(store, monkeypatch):
    conv = store.create_conversation("long", "m")
    for i in range(20):
        store.add_message(conv.id, "user" if i % 2 == 0 else "assistant", f"message {i}")
    first = store.messages(conv.id)
    parsed = []
    real = Store._message
    monkeypatch.setattr(Store, "_message", lambda self, row: parsed.append(row["id"]) or real(self, row))
    answer = store.add_message(conv.id, "assistant", "", status="streaming", parent_id=first[-1].id)
    store.update_message(first[3].id, text="edited")
    store.update_message(answer.id, text="done now", status="done")
    again = store.messages(conv.id)
    assert [m.text for m in again] == [f"message {i}" if i != 3 else "edited" for i in range(20)] + ["done now"]
    assert again[-1].status == "done"
    assert again[0] is first[0]  # an unchanged row is not parsed again
    assert parsed == [answer.id, first[3].id, answer.id]  # each as it was written (trial 75 N6)
    store._read = None  # a full read (another program wrote) reuses every row parsed before
    parsed.clear()
    assert store.messages(conv.id) == again and parsed == []
    other = store.create_conversation("other", "m")
    store.add_message(other.id, "user", "hello")
    assert [m.text for m in store.messages(other.id)] == ["hello"]
    assert store.messages(conv.id)[3].text == "edited"  # back in the first chat: read from the database


def test_files_no_message_uses_are_removed_and_used_ones_kept(store, data_dir, tmp_path):
    """Trial 50: a deleted chat's files (a video can be gigabytes) and a refused attachment's copy
    stayed in the data folder for good."""
    import os
    import time

    def stored(name: str, size: int) -> Path:
        source = tmp_path / name
        source.write_bytes(os.urandom(size))
        path = Path(store.store_image(source))
        os.utime(path, (time.time() - 60, time.time() - 60))  # stored in an earlier run
        return path

    kept_chat, gone_chat = store.create_conversation("kept"), store.create_conversation("gone")
    photo, video, refused, draft = stored("a.png", 100), stored("b.mp4", 5000), stored("c.img", 7), stored("d.png", 9)
    store.add_message(kept_chat.id, "user", "look", [str(photo)])
    store.add_message(gone_chat.id, "user", "watch", [str(video)])
    store.db.execute("UPDATE messages SET images = ? WHERE conversation_id = ?",  # not JSON: still names its file
                     (f'["{photo.name}"', kept_chat.id))
    store.delete_conversation(gone_chat.id)
    assert store.remove_unused_media(keep=[str(draft)]) == (1, 7)  # the refused copy; the draft's is wanted
    assert video.exists() and photo.exists() and draft.exists() and not refused.exists()  # (a deleted chat
    # can be undone until the next start: its video is kept...)
    store.close()
    again = Store(data_dir)  # ...the start purges the chat
    reused = stored("e.png", 11)
    assert Path(again.store_image(tmp_path / "e.png")) == reused  # attached again just now, not yet sent
    assert again.remove_unused_media(keep=[str(video), str(draft)]) == (0, 0)  # named by the unsent message
    assert again.remove_unused_media() == (2, 5009) and not video.exists() and photo.exists() and reused.exists()
