"""Answer versions in the store (schema 4): siblings, the active branch, migration of linear chats."""

from __future__ import annotations

import sqlite3

import pytest

from app.store import MIGRATIONS, SCHEMA_VERSION, Store


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
    assert store.version == SCHEMA_VERSION
    assert texts(store, 1) == ["q", "a", "q2", "a2"]
    assert set(store.versions(1).values()) == {(1, 1)}
    store.add_message(1, "assistant", "a2 again", parent_id=store.messages(1)[2].id)
    assert texts(store, 1) == ["q", "a", "q2", "a2 again"]
    store.close()


def one_role_per_version_group(store, conv_id) -> bool:
    groups: dict = {}
    for m in store.all_messages(conv_id):
        groups.setdefault(m.parent_id, set()).add(m.role)
    return all(len(roles) == 1 for roles in groups.values())


def test_deleting_a_version_of_a_question_takes_its_branch_and_never_mixes_roles(store):
    """Trial 38: "What is 2+2?" edited into "What is 3+3?", version 1 shown and deleted: its answer
    was handed to the question's parent, beside "What is 3+3?", and the two showed as versions of
    each other. A version now goes with the branch that follows it."""
    c = store.create_conversation()
    q = store.add_message(c.id, "user", "What is 2+2?")
    store.add_message(c.id, "assistant", "4")
    store.add_message(c.id, "user", "And 5+5?")
    store.add_message(c.id, "assistant", "10")
    q2 = store.add_message(c.id, "user", "What is 3+3?", parent_id=None)
    a2 = store.add_message(c.id, "assistant", "6")
    store.select(q.id)
    before = {m.id: (m.parent_id, m.text) for m in store.all_messages(c.id)}
    deleted = store.delete_message(q.id)
    assert texts(store, c.id) == ["What is 3+3?", "6"]
    assert store.versions(c.id) == {q2.id: (1, 1), a2.id: (1, 1)}
    assert [r["text"] for r in deleted.rows] == ["What is 2+2?", "4", "And 5+5?", "10"]
    assert one_role_per_version_group(store, c.id)
    store.restore_messages(deleted)  # Undo: the same rows, ids and versions, shown as before
    assert {m.id: (m.parent_id, m.text) for m in store.all_messages(c.id)} == before
    assert texts(store, c.id) == ["What is 2+2?", "4", "And 5+5?", "10"]
    assert store.versions(c.id)[q.id] == (1, 2) and store.versions(c.id)[q2.id] == (2, 2)


def test_deleting_a_question_takes_its_answers_and_the_chat_closes_up(store):
    """Trial 38: deleting a question left its answer, two answers in a row. A question goes with every
    version of its answer; the shown answer's follow-ups then follow the message before the question."""
    c = store.create_conversation()
    store.add_message(c.id, "user", "q1")
    a1 = store.add_message(c.id, "assistant", "a1")
    q2 = store.add_message(c.id, "user", "q2")
    a2 = store.add_message(c.id, "assistant", "a2")
    q3 = store.add_message(c.id, "user", "q3")
    store.add_message(c.id, "assistant", "a3")
    a2b = store.add_message(c.id, "assistant", "a2 again", parent_id=q2.id)  # regenerated, with its own follow-up
    store.add_message(c.id, "user", "q3 on b")
    store.select(a2.id)
    assert texts(store, c.id) == ["q1", "a1", "q2", "a2", "q3", "a3"]
    deleted = store.delete_message(q2.id)
    assert texts(store, c.id) == ["q1", "a1", "q3", "a3"]  # no answer left without its question
    assert store.message(q3.id).parent_id == a1.id
    assert sorted(r["text"] for r in deleted.rows) == ["a2", "a2 again", "q2", "q3 on b"]
    assert deleted.answers == 2 and one_role_per_version_group(store, c.id)
    assert set(store.versions(c.id).values()) == {(1, 1)}
    store.restore_messages(deleted)
    assert texts(store, c.id) == ["q1", "a1", "q2", "a2", "q3", "a3"]
    assert store.message(q3.id).parent_id == a2.id
    assert store.versions(c.id)[a2.id] == (1, 2) and store.versions(c.id)[a2b.id] == (2, 2)
    # An answer with another version goes with its branch; the other version is shown.
    store.delete_message(a2.id)
    assert texts(store, c.id) == ["q1", "a1", "q2", "a2 again", "q3 on b"]
    # An answer alone: its question stays (unanswered), the follow-up comes after it.
    store.delete_message(a2b.id)
    assert texts(store, c.id) == ["q1", "a1", "q2", "q3 on b"]
    assert one_role_per_version_group(store, c.id)


def test_undo_brings_back_the_newest_message_after_messages_were_added(store, data_dir):
    """A message added after the chat's newest was deleted took the deleted one's id (SQLite gives
    the highest id + 1), so that delete's Undo failed ("UNIQUE constraint failed"). New messages are
    numbered above every id deleted in the run; the restored answer and the one written since are
    versions of one question."""
    c = store.create_conversation()
    q1 = store.add_message(c.id, "user", "q1")
    a1 = store.add_message(c.id, "assistant", "a1")
    deleted = store.delete_message(a1.id)
    assert texts(store, c.id) == ["q1"]
    again = store.add_message(c.id, "assistant", "a1 again")
    other = store.add_message(store.create_conversation().id, "user", "elsewhere")
    assert again.id == a1.id + 1 and other.id == a1.id + 2
    store.restore_messages(deleted)
    assert texts(store, c.id) == ["q1", "a1 again"]  # the answer written since stays shown...
    assert [(m.id, m.text) for m in store.all_messages(c.id) if m.parent_id == q1.id] == [
        (a1.id, "a1"), (again.id, "a1 again")]  # ... the restored one, with its id, a version beside it
    store.close()
    reopened = Store(data_dir)  # a new run: SQLite's own numbering again, nothing deleted to keep free
    assert reopened.add_message(c.id, "user", "q2").id == other.id + 1
    reopened.close()


def test_undo_of_the_newest_answer_after_a_new_question_puts_the_answer_before_it(store):
    """The newest answer deleted, a question sent after its question, then Undo: the answer comes back
    in its place and the new question (with its answer) follows it; a question and an answer were
    left versions of each other. Another answer written since (a regeneration) stays a version."""
    c = store.create_conversation()
    store.add_message(c.id, "user", "q1")
    a1 = store.add_message(c.id, "assistant", "a1")
    deleted = store.delete_message(a1.id)
    store.add_message(c.id, "user", "q2")
    store.add_message(c.id, "assistant", "a2")
    store.restore_messages(deleted)
    assert texts(store, c.id) == ["q1", "a1", "q2", "a2"]
    assert one_role_per_version_group(store, c.id)
    a3 = store.add_message(c.id, "assistant", "a3", parent_id=store.add_message(c.id, "user", "q3").id)
    deleted = store.delete_message(a3.id)  # again, this time answered anew before the Undo
    store.add_message(c.id, "assistant", "a3 again")
    store.restore_messages(deleted)
    assert texts(store, c.id) == ["q1", "a1", "q2", "a2", "q3", "a3 again"]  # (shown: the newer version)
    assert [m.text for m in store.all_messages(c.id) if m.parent_id == a3.parent_id] == ["a3", "a3 again"]
    assert one_role_per_version_group(store, c.id)


def test_undo_of_a_question_after_another_was_asked_in_its_place_keeps_the_newer_exchange_shown(store):
    """Review of trial 77's fix: an unanswered question deleted, another asked and answered, then Undo:
    the old question was shown again and the newer exchange hidden in a version."""
    c = store.create_conversation()
    store.add_message(c.id, "user", "q1")
    store.add_message(c.id, "assistant", "a1")
    q2 = store.add_message(c.id, "user", "q2", status="error")
    deleted = store.delete_message(q2.id)
    store.add_message(c.id, "user", "q3")
    store.add_message(c.id, "assistant", "a3")
    store.restore_messages(deleted)
    assert texts(store, c.id) == ["q1", "a1", "q3", "a3"]
    assert [m.text for m in store.siblings(q2.id)] == ["q2", "q3"]  # the restored question: a version
    assert one_role_per_version_group(store, c.id)


def test_undo_refuses_when_the_message_it_followed_was_deleted_since(store):
    import sqlite3

    c = store.create_conversation()
    q1 = store.add_message(c.id, "user", "q1")
    store.add_message(c.id, "assistant", "a1")
    q2 = store.add_message(c.id, "user", "q2")
    a2 = store.add_message(c.id, "assistant", "a2")
    deleted = store.delete_message(a2.id)
    store.delete_messages_from(c.id, q2.id)  # (as an edit of q2 from the start would)
    with pytest.raises(sqlite3.IntegrityError):
        store.restore_messages(deleted)
    assert texts(store, c.id) == ["q1", "a1"]  # nothing changed
    assert store.messages(c.id)[0].id == q1.id


def test_deleting_an_unanswered_question_takes_it_alone(store, data_dir):
    """A question without an answer (its answer deleted, or a stop before the first word): it goes
    alone, the messages after it close up, and nothing else of the chat moves (the chat's first
    messages had been taken for its follow-ups: a cycle, and an empty chat once reopened). As the
    last message or the only one it goes too (it raised KeyError)."""
    c = store.create_conversation()
    q0 = store.add_message(c.id, "user", "q0")
    store.add_message(c.id, "assistant", "a0")
    q1 = store.add_message(c.id, "user", "q1")
    a1 = store.add_message(c.id, "assistant", "a1")
    store.add_message(c.id, "user", "q2")
    store.add_message(c.id, "assistant", "a2")
    store.delete_message(a1.id)
    assert texts(store, c.id) == ["q0", "a0", "q1", "q2", "a2"]
    deleted = store.delete_message(q1.id)
    assert [r["text"] for r in deleted.rows] == ["q1"]
    assert texts(store, c.id) == ["q0", "a0", "q2", "a2"]
    store.close()
    again = Store(data_dir)  # as reopened: the same branch, q0 still the first message
    assert texts(again, c.id) == ["q0", "a0", "q2", "a2"]
    assert again.all_messages(c.id)[0].parent_id is None
    last = again.add_message(c.id, "user", "q3")  # unanswered, the last message
    again.delete_message(last.id)
    assert texts(again, c.id) == ["q0", "a0", "q2", "a2"]
    only = again.create_conversation()
    alone = again.add_message(only.id, "user", "just this")
    again.delete_message(alone.id)
    assert texts(again, only.id) == [] and texts(again, c.id) == ["q0", "a0", "q2", "a2"]
    again.restore_messages(deleted)
    assert texts(again, c.id) == ["q0", "a0", "q1", "q2", "a2"]
    assert q0.id == again.all_messages(c.id)[0].id
    again.close()


def test_a_message_added_or_updated_is_read_alone_and_the_chat_reads_as_stored(store, data_dir, monkeypatch):
    """Trial 75 N6: each send in a chat of 10,000 messages read all of them three times on the UI
    thread (0.95 s a send). A write that adds or changes one message keeps the chat's read with that
    message read again; what the store says is what a fresh read of the database says, versions,
    branch and contents alike."""
    conv = store.create_conversation("Chat").id
    parent = None
    for i in range(6):
        parent = store.add_message(conv, "user" if i % 2 == 0 else "assistant", f"m{i}", parent_id=parent).id
    first_answer = store.messages(conv)[1]
    parsed = []
    real = Store._message
    monkeypatch.setattr(Store, "_message", lambda self, row: parsed.append(row["id"]) or real(self, row))
    store.messages(conv)
    parsed.clear()
    again = store.add_message(conv, "assistant", "m1, again", parent_id=first_answer.parent_id)  # a new version
    store.rename_conversation(conv, "Renamed")
    store.update_message(again.id, text="m1, again and longer", status="done", token_ids=[5, 6])
    tail = store.add_message(conv, "user", "m2 after the new version")
    store.update_message(first_answer.id, text="m1 edited")  # off the branch shown
    ours = (store.messages(conv), store.versions(conv), store.all_messages(conv))
    assert parsed == [again.id, again.id, tail.id, first_answer.id] + [m.id for m in ours[2]]  # (all_messages reads all)
    fresh = Store(data_dir)
    try:
        assert (fresh.messages(conv), fresh.versions(conv), fresh.all_messages(conv)) == ours
    finally:
        fresh.close()
    assert [m.text for m in ours[0]] == ["m0", "m1, again and longer", "m2 after the new version"]
    assert ours[0][1].token_ids == [5, 6] and ours[1][again.id] == (2, 2) and ours[1][first_answer.id] == (1, 2)


def test_another_programs_commit_during_our_write_is_read(store, data_dir):
    """Found in review: the chat's read was kept past our write even where another connection committed
    while the write waited for its lock (the read held the other program's change as it was before)."""
    conv = store.create_conversation("t").id
    question = store.add_message(conv, "user", "question")
    answer = store.add_message(conv, "assistant", "", status="streaming")
    store.messages(conv)
    other = sqlite3.connect(data_dir / "smolchat.sqlite3", isolation_level=None, timeout=10)
    real = store._write

    def write(sql, args=()):
        if sql.startswith("UPDATE messages SET text"):  # the other program commits first
            other.execute("UPDATE messages SET text = 'edited elsewhere' WHERE id = ?", (question.id,))
        return real(sql, args)
    store._write = write
    try:
        store.update_message(answer.id, text="Hello")
    finally:
        store._write = real
        other.close()
    assert [m.text for m in store.messages(conv)] == ["edited elsewhere", "Hello"]
