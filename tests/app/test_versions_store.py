"""Answer versions in the store (schema 4): siblings, the active branch, migration of linear chats."""

from __future__ import annotations

import sqlite3

import pytest

from app.store import MIGRATIONS, Store


@pytest.fixture
def store(data_dir):
    s = Store(data_dir)
    yield s
    s.close()


def texts(store, conv_id):
    return [m.text for m in store.messages(conv_id)]


def test_regenerate_and_edit_add_versions_each_with_its_own_branch(store, data_dir):
    c = store.create_conversation()
    q1 = store.add_message(c.id, "user", "q1")
    a1 = store.add_message(c.id, "assistant", "a1")
    store.add_message(c.id, "user", "q2")
    store.add_message(c.id, "assistant", "a2")
    # Regenerate the first answer: a sibling of a1 that starts its own branch.
    a1b = store.add_message(c.id, "assistant", "a1 again", parent_id=q1.id)
    assert texts(store, c.id) == ["q1", "a1 again"]
    store.add_message(c.id, "user", "q2 on b")
    assert texts(store, c.id) == ["q1", "a1 again", "q2 on b"]
    versions = store.versions(c.id)
    assert versions[a1.id] == (1, 2) and versions[a1b.id] == (2, 2) and versions[q1.id] == (1, 1)
    # Switching back restores the old branch with its later messages.
    store.select(a1.id)
    assert texts(store, c.id) == ["q1", "a1", "q2", "a2"]
    # Edit the first question: a new first message (parent None).
    q1b = store.add_message(c.id, "user", "q1 edited", parent_id=None)
    assert texts(store, c.id) == ["q1 edited"]
    assert [m.id for m in store.siblings(q1.id)] == [q1.id, q1b.id]
    # The choice survives a restart; every version stays in the database.
    store.close()
    again = Store(data_dir)
    assert texts(again, c.id) == ["q1 edited"]
    again.select(q1.id)
    assert texts(again, c.id) == ["q1", "a1", "q2", "a2"]
    assert len(again.all_messages(c.id)) == 7
    again.close()


def test_delete_closes_the_branch_up_and_delete_from_removes_the_subtree(store):
    c = store.create_conversation()
    q1 = store.add_message(c.id, "user", "q1")
    a1 = store.add_message(c.id, "assistant", "a1")
    store.add_message(c.id, "user", "q2")
    a1b = store.add_message(c.id, "assistant", "a1b", parent_id=q1.id)
    store.delete_message(a1b.id)  # the shown version goes: the other one is shown again
    assert texts(store, c.id) == ["q1", "a1", "q2"]
    store.delete_message(a1.id)  # a middle message: q2 now follows q1
    assert texts(store, c.id) == ["q1", "q2"]
    store.delete_messages_from(c.id, q1.id)
    assert store.all_messages(c.id) == []


def test_version_3_conversation_becomes_one_linear_branch(data_dir):
    data_dir.mkdir(parents=True)
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")
    for n in (1, 2, 3):
        db.executescript(MIGRATIONS[n])
    db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 'old', 1, 1)")
    for position, (role, text) in enumerate([("user", "q"), ("assistant", "a"), ("user", "q2"), ("assistant", "a2")]):
        db.execute("INSERT INTO messages (conversation_id, position, role, text, created) VALUES (1, ?, ?, ?, 1)",
                   (position, role, text))
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    store = Store(data_dir)
    assert store.version == 4
    assert texts(store, 1) == ["q", "a", "q2", "a2"]
    assert set(store.versions(1).values()) == {(1, 1)}
    store.add_message(1, "assistant", "a2 again", parent_id=store.messages(1)[2].id)
    assert texts(store, 1) == ["q", "a", "q2", "a2 again"]
    store.close()
