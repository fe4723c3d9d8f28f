"""A damaged conversations database is salvaged: one bad page must not hide the whole history.

Found by a tester: one damaged page made the app set the whole file aside (a temporary folder, an
empty history) although SQLite could still read every chat and most messages. Each test damages a
real database at a page found by what it holds, so the rows lost are known exactly.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from app.backends.fake import FakeBackend
from app.store import Store

PAGE = 4096
FILLER = "x" * 600  # about six messages a page, so a chat spans several pages
CHATS = {"Cats": 24, "Dogs": 6, "Birds": 6}


def _text(title: str, i: int) -> str:
    return f"{title} {i:02d} {FILLER}"


def _history(data_dir) -> None:
    store = Store(data_dir)
    assert store.db.execute("PRAGMA page_size").fetchone()[0] == PAGE
    for title, count in CHATS.items():
        conv = store.create_conversation(title)
        for i in range(count):
            store.add_message(conv.id, "user" if i % 2 == 0 else "assistant", _text(title, i))
    store.close()


def _damage_page_holding(path, marker: str) -> set[str]:
    """Overwrite, with the same garbage every run, the page that holds ``marker``; returns the messages
    (their "Title NN" starts) that were on it."""
    data = bytearray(path.read_bytes())
    where = data.index(marker.encode())
    start = where - where % PAGE
    page = bytes(data[start:start + PAGE])
    lost = {f"{t} {i:02d}" for t, n in CHATS.items() for i in range(n) if f"{t} {i:02d} x".encode() in page}
    data[start:start + PAGE] = random.Random(7).randbytes(PAGE)
    path.write_bytes(bytes(data))
    return lost


def _today(data_dir, stand_in, error: str) -> str:
    return (f"The data folder {data_dir} cannot be used ({data_dir / 'smolchat.sqlite3'}: {error}; it is left as it "
            f"is). Conversations will not be kept after Smolchat closes: this session uses a temporary folder, "
            f"{stand_in}. To keep conversations again, close Smolchat and move smolchat.sqlite3 aside (or put a backup "
            "in its place): the next start makes a new one.")


def test_a_damaged_page_loses_only_its_messages_and_the_damaged_file_is_kept(qtbot, make_window, data_dir,
                                                                              monkeypatch):
    monkeypatch.setattr("app.paths._fallbacks", {})
    _history(data_dir)
    path = data_dir / "smolchat.sqlite3"
    lost = _damage_page_holding(path, "Cats 10 x")
    assert lost and len(lost) < CHATS["Cats"] - 4 and all(m.startswith("Cats") for m in lost)
    damaged = path.read_bytes()

    win = make_window(FakeBackend())

    [kept] = data_dir.glob("smolchat.sqlite3.damaged-*[0-9]")
    assert kept.read_bytes() == damaged  # the damaged file as it was, byte for byte
    assert win.storage_banner.message() == (
        f"The conversation database was damaged. Recovered 3 of 3 chats and {36 - len(lost)} of 36 messages; "
        f"the damaged file is kept as {kept}.")
    assert sorted(win.sidebar.titles()) == ["Birds", "Cats", "Dogs"]
    for conv in win.store.conversations():
        expected = [_text(conv.title, i) for i in range(CHATS[conv.title]) if f"{conv.title} {i:02d}" not in lost]
        # The messages after the lost ones follow the last message before them: the chat reads on.
        assert [m.text for m in win.store.messages(conv.id)] == expected
        assert [m.text for m in win.store.all_messages(conv.id)] == expected
    shown = win.store.conversation(win.keeper.current_id).title
    assert [m["text"] for m in win.transcript.messages()] == [m.text for m in win.store.messages(win.keeper.current_id)]
    assert shown in CHATS
    assert win.store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert not list(data_dir.glob(".salvage-*"))
    win.close()


def test_a_lost_chat_row_keeps_its_messages_as_a_recovered_chat(data_dir, monkeypatch):
    from app.conversations import connect_store

    monkeypatch.setattr("app.paths._fallbacks", {})
    _history(data_dir)
    path = data_dir / "smolchat.sqlite3"
    db = sqlite3.connect(path)
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'conversations'").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * PAGE:root * PAGE] = random.Random(7).randbytes(PAGE)  # every chat's own row
    path.write_bytes(bytes(data))

    store, message = connect_store()
    try:
        [kept] = data_dir.glob("smolchat.sqlite3.damaged-*[0-9]")
        assert message == (
            "The conversation database was damaged. Recovered 3 chats (the titles of 3 were lost: they are named "
            f"\"Recovered messages: …\") and 36 messages (what could be read); the damaged file is kept as {kept}.")
        chats = {c.title: [m.text for m in store.messages(c.id)] for c in store.conversations()}
        assert chats == {f"Recovered messages: {_text(t, 0)[:40]}…": [_text(t, i) for i in range(n)]
                         for t, n in CHATS.items()}
    finally:
        store.close()


def _root_page(path, table: str) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    finally:
        db.close()


def test_messages_behind_a_damaged_inner_page_are_read_from_their_leaves(
        data_dir, monkeypatch):
    """Trial 69 F3: with the root page of the messages table damaged, SQLite reached none of its leaf
    pages, though they were whole: "Recovered 5 of 5 chats and 0 of 40 messages"."""
    from app.conversations import connect_store

    monkeypatch.setattr("app.paths._fallbacks", {})
    _history(data_dir)
    path = data_dir / "smolchat.sqlite3"
    # Only the rows an index (or another table) says exist are taken from the pages: a freed page may
    # still hold rows deleted long ago.
    from app.salvage import _columns, _defaults, _rows_from_pages

    db = sqlite3.connect(path)
    shape = _columns(db, "messages")
    rows = _rows_from_pages(path, "messages", [c[0] for c in shape], shape, {2, 35}, _defaults(db, "messages"))
    db.close()
    assert sorted(rows) == [2, 35] and (rows[2][4], rows[35][4]) == ("assistant", "user")
    assert (rows[2][5], rows[35][5]) == (_text("Cats", 1), _text("Birds", 4))
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DELETE FROM messages WHERE conversation_id = (SELECT id FROM conversations WHERE title = 'Birds')")
    db.execute("DELETE FROM conversations WHERE title = 'Birds'")
    db.close()
    root = _root_page(path, "messages")
    data = bytearray(path.read_bytes())
    assert data[(root - 1) * PAGE] == 5  # an inner page of the table's b-tree, pointing to its leaves
    data[(root - 1) * PAGE:root * PAGE] = random.Random(7).randbytes(PAGE)
    path.write_bytes(bytes(data))

    store, message = connect_store()
    try:
        [kept] = data_dir.glob("smolchat.sqlite3.damaged-*[0-9]")
        assert message == ("The conversation database was damaged. Recovered 2 of 2 chats and 30 of 30 messages; the "
                           f"damaged file is kept as {kept}.")
        chats = {c.title: [m.text for m in store.all_messages(c.id)] for c in store.conversations()}
        assert chats == {t: [_text(t, i) for i in range(n)] for t, n in CHATS.items() if t != "Birds"}
        assert [m.role for m in store.messages(store.conversations()[0].id)][:2] == ["user", "assistant"]
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()


def test_rows_read_from_the_pages_include_the_logs_committed_ones(data_dir, tmp_path):
    """A row written since the last checkpoint lives in the -wal only: the pages read directly take the
    log's committed frames over the main file's."""
    import shutil

    from app.salvage import _columns, _defaults, _rows_from_pages

    _history(data_dir)
    path = data_dir / "smolchat.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("INSERT INTO messages (conversation_id, position, role, text, created) VALUES (2, 99, 'user', ?, 1.0)",
               ("written after the checkpoint",))
    [(rowid,)] = db.execute("SELECT max(rowid) FROM messages").fetchall()
    for suffix in ("", "-wal"):  # a copy while it runs, as a crash leaves it
        shutil.copyfile(f"{path}{suffix}", tmp_path / f"copy.sqlite3{suffix}")
    shape = _columns(db, "messages")
    defaults = _defaults(db, "messages")
    db.close()
    copy = tmp_path / "copy.sqlite3"
    assert b"written after the checkpoint" not in copy.read_bytes()
    rows = _rows_from_pages(copy, "messages", [c[0] for c in shape], shape, {rowid, 1}, defaults)
    assert rows[rowid][1:6] == (rowid, 2, 99, "user", "written after the checkpoint") and rows[rowid][12] == 1
    assert rows[1][5] == _text("Cats", 0)


def test_zeros_a_damaged_page_left_in_a_text_are_marked_and_said(data_dir):
    """Trial 70 N3: a zero-filled overflow page left thousands of NUL characters in the middle of an
    answer, kept as it was and counted as recovered."""
    from app.salvage import LOST_PART, salvage_database

    _history(data_dir)
    store = Store(data_dir)
    chat = store.conversations()[0].id
    long = "Once upon a time. " + "The story goes on and on. " * 300 + "The end."  # ~7.8 KB: overflow pages
    store.add_message(chat, "assistant", long)
    store.add_message(chat, "user", "A \x00 the user typed stays.")
    store.close()
    path = data_dir / "smolchat.sqlite3"
    data = bytearray(path.read_bytes())
    # The text's overflow pages: pages of its words that are no b-tree page (those start with a type
    # byte, 2, 5, 10 or 13; an overflow page with the number of the next one).
    overflow = [n for n in range(len(data) // PAGE) if b"on and on. The story" in data[n * PAGE:(n + 1) * PAGE]
                and data[n * PAGE] not in (2, 5, 10, 13)]
    assert len(overflow) == 1
    start = overflow[0] * PAGE
    data[start + 4:start + PAGE] = bytes(PAGE - 4)  # its text zeroed (the link to the next page kept)
    path.write_bytes(bytes(data))

    report = salvage_database(data_dir)
    assert report.cut == 1 and "(1 with a part lost in the damage, marked “[…]”)" in report.words()
    store = Store(data_dir)
    try:
        texts = [m.text for m in store.all_messages(chat)]
        [kept] = [t for t in texts if t.startswith("Once upon a time.")]
        # Its last ~4 KB were on the page zeroed: one mark in their place.
        assert "\x00" not in kept and kept.count(LOST_PART) == 1 and kept.endswith(LOST_PART)
        assert long.startswith(kept[:-len(LOST_PART)]) and len(kept) < len(long) - 3000
        assert "A \x00 the user typed stays." in texts
    finally:
        store.close()


def test_a_file_cut_short_keeps_what_lies_before_the_cut(data_dir, monkeypatch):
    """Trial 69 F2: a database cut short (a copy that did not finish) was not salvaged: its schema names
    root pages past the end, and SQLite refused every query, so a temporary folder served instead."""
    from app.conversations import connect_store

    monkeypatch.setattr("app.paths._fallbacks", {})
    _history(data_dir)
    path = data_dir / "smolchat.sqlite3"
    data = path.read_bytes()
    cut = data.index(b"Cats 12 x")
    cut -= cut % PAGE  # the page holding "Cats 12" and every page after it are gone
    before = {f"{t} {i:02d}" for t, n in CHATS.items() for i in range(n) if f"{t} {i:02d} x".encode() in data[:cut]}
    assert 6 <= len(before) < 24
    path.write_bytes(data[:cut + 1000])  # (and a part of a page)

    store, message = connect_store()
    try:
        [kept] = data_dir.glob("smolchat.sqlite3.damaged-*[0-9]")
        assert kept.stat().st_size == cut + 1000
        chats = {c.title: [m.text for m in store.all_messages(c.id)] for c in store.conversations()}
        assert sorted(chats) == ["Birds", "Cats", "Dogs"] and chats["Dogs"] == chats["Birds"] == []
        # Every whole page before the cut, and what SQLite can still read of the page cut through.
        assert {text[:7] for text in chats["Cats"]} >= before
        assert all(text == _text("Cats", int(text[5:7])) for text in chats["Cats"])
        assert message.startswith(f"The conversation database was damaged. Recovered 3 of 3 chats and "
                                  f"{len(chats['Cats'])} ")
    finally:
        store.close()


def test_a_database_file_of_no_bytes_is_said_not_passed_over(data_dir, monkeypatch):
    """Trial 69 F2: a database emptied to 0 bytes opened as a new, empty one without a word."""
    from app.conversations import connect_store

    monkeypatch.setattr("app.paths._fallbacks", {})
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "smolchat.sqlite3").write_bytes(b"")
    store, message = connect_store()
    store.close()
    assert message == (f"{data_dir / 'smolchat.sqlite3'} was an empty file (0 bytes), holding no chats: Smolchat made "
                       "a new database in it. If you had chats, they were lost before this start (a copy or a sync "
                       "that did not finish?); to get them back, close Smolchat and put a backup in its place.")
    store, message = connect_store()  # the next start: a database like any other
    store.close()
    assert message == ""


def test_a_file_of_garbage_after_the_header_is_left_as_it_is(qtbot, make_window, data_dir, monkeypatch):
    import app.paths
    import app.salvage

    monkeypatch.setattr("app.paths._fallbacks", {})
    tried = []
    salvage = app.salvage.salvage_database

    def spy(*args):
        try:
            return salvage(*args)
        except Exception as exc:
            tried.append(exc)
            raise

    monkeypatch.setattr(app.salvage, "salvage_database", spy)
    monkeypatch.setattr("app.conversations.salvage_database", spy)
    data_dir.mkdir(parents=True, exist_ok=True)
    junk = b"SQLite format 3\x00" + random.Random(7).randbytes(8 * PAGE - 16)
    (data_dir / "smolchat.sqlite3").write_bytes(junk)

    win = make_window(FakeBackend())

    [(stand_in, _)] = app.paths._fallbacks.values()
    assert [type(e).__name__ for e in tried] == ["SalvageError"]  # it was tried, and found nothing to keep
    assert win.storage_banner.message() == _today(data_dir, stand_in, "file is not a database")
    assert (data_dir / "smolchat.sqlite3").read_bytes() == junk
    assert sorted(p.name for p in data_dir.iterdir() if p.name.startswith(("smolchat", "."))) == ["smolchat.sqlite3"]
    win.close()


@pytest.mark.parametrize("where", ["copy", "rows", "store"])
def test_a_salvage_whose_writes_fail_leaves_the_damaged_file_as_it_was(data_dir, monkeypatch, where):
    import app.paths
    import app.salvage
    from app.conversations import connect_store

    monkeypatch.setattr("app.paths._fallbacks", {})
    _history(data_dir)
    path = data_dir / "smolchat.sqlite3"
    _damage_page_holding(path, "Cats 10 x")
    damaged = path.read_bytes()
    reached = []

    def full(*args, **kwargs):
        reached.append(where)
        raise OSError(28, "No space left on device")

    def full_db(*args, **kwargs):
        reached.append(where)
        raise sqlite3.OperationalError("database or disk is full")

    def half_copy(source, target):  # the disk fills up part-way through the copy aside
        with open(source, "rb") as f, open(target, "wb") as out:
            out.write(f.read(1000))
        full()

    if where == "copy":
        monkeypatch.setattr(app.salvage.shutil, "copyfile", half_copy)
    elif where == "rows":  # writing the new database
        monkeypatch.setattr(app.salvage, "_copy_rows", full_db)
    else:  # opening it as a store, when it is complete
        monkeypatch.setattr(app.salvage, "Store", full)

    store, message = connect_store()
    store.close()

    [(stand_in, _)] = app.paths._fallbacks.values()
    assert reached == [where]
    assert message == _today(data_dir, stand_in, "database disk image is malformed")
    assert path.read_bytes() == damaged
    assert sorted(p.name for p in data_dir.iterdir() if p.name.startswith(("smolchat.", "."))) == [
        "smolchat.sqlite3"]
