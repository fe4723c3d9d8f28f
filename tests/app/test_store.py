"""The SQLite store: schema and migrations, conversations, messages, images by hash, crash recovery."""

from __future__ import annotations

import sqlite3

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
