"""Conversations on disk: one SQLite database (WAL) plus images stored once by content hash.

A file's stored name is its hash, so a message also keeps the name each file was attached as
(``attached_names``, schema 5; base names only, "" where unknown), for exports to name it so again.

The store is used from the UI thread only. Every write commits at once, so a killed process
loses nothing that was written; an answer still marked ``streaming`` when the store is opened
again was cut off by a crash and becomes ``interrupted``.

What cannot be read never stops the app: a database written by a newer Smolchat, or one in a folder
that cannot be written, opens read-only (:attr:`Store.read_only` says why; every write then raises
:class:`ReadOnlyStore`); a message or chat whose JSON columns do not parse is shown with what did
parse (:attr:`Store.unreadable` counts them) and is not rewritten to "repair" it (a chat's settings are
written again, whole, with its next answer). A damaged file (SQLite's "malformed") makes :class:`Store`
raise ``sqlite3.DatabaseError``; :func:`app.conversations.connect_store` then salvages it (:mod:`app.salvage`).

Versions (schema 4): a conversation is a tree of messages. Each message names the message it follows
(``parent_id``; NULL for a first message), so regenerating an answer or editing a question adds a
*sibling* (same parent) instead of replacing anything, and each sibling continues its own branch.
Among siblings exactly one is ``selected``; the conversation shown (and given to the model) is the
*active branch*: from the selected first message, always down to the selected child. Siblings are
numbered by creation (id order): "2 / 3" is the second of three. ``position`` is the depth in the
branch when the message was written (informational: the tree is ``parent_id``). Siblings are
always of one role (versions of a question, or of an answer), so deleting keeps them so
(:meth:`Store.delete_message`): a message that has other versions goes with the branch that follows
it; a question goes with its answers, the conversation after the shown answer closing up; an answer
alone hands its follow-ups to its question. :meth:`Store.restore_messages` undoes a deletion, and
:meth:`Store.delete_messages_from` removes a message with its whole subtree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import sqlite3
import time
import unicodedata
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 5
ROLES = ("user", "assistant")  # a question, an answer: a chat alternates them from its first message
#: What separates the file names in a message's stored ``images`` value (JSON, or what is left of it).
_PATH_PARTS = re.compile(r'["\\/,\[\]\s]+')

# Migration N brings a database from version N-1 to N. Never edit a released step; add one.
MIGRATIONS: dict[int, str] = {
    1: """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            updated REAL NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            settings TEXT NOT NULL DEFAULT '{}'
        );
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            role TEXT NOT NULL,
            text TEXT NOT NULL DEFAULT '',
            images TEXT NOT NULL DEFAULT '[]',
            stats TEXT NOT NULL DEFAULT '{}',
            status TEXT NOT NULL DEFAULT 'done',
            created REAL NOT NULL
        );
        CREATE INDEX messages_by_conversation ON messages(conversation_id, position);
    """,
    # Soft delete, so that deleting a conversation can be undone.
    2: "ALTER TABLE conversations ADD COLUMN deleted REAL;",
    # The token ids an answer was generated as: a reopened chat gives the model the same context as
    # the live one did (re-tokenising the text can give other ids). JSON list of ints, NULL when unknown.
    3: "ALTER TABLE messages ADD COLUMN token_ids TEXT;",
    # Answer versions (see the module docstring): each message follows its parent; one selected
    # sibling per parent. A version-3 conversation is linear: each message follows the one before.
    4: """
        ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE;
        ALTER TABLE messages ADD COLUMN selected INTEGER NOT NULL DEFAULT 1;
        UPDATE messages SET parent_id = (
            SELECT p.id FROM messages p WHERE p.conversation_id = messages.conversation_id
            AND (p.position < messages.position OR (p.position = messages.position AND p.id < messages.id))
            ORDER BY p.position DESC, p.id DESC LIMIT 1);
        CREATE INDEX messages_by_parent ON messages(conversation_id, parent_id);
    """,
    # The name each attached file had, so that an export can name it as the user did (the store names
    # files by content hash): a JSON list parallel to ``images`` of base names, "" where unknown. NULL for
    # messages written before, whose names were never kept.
    5: "ALTER TABLE messages ADD COLUMN attached_names TEXT;",
}


def apply_migration(db: sqlite3.Connection, version: int) -> None:
    """Bring ``db`` from schema ``version - 1`` to ``version`` (inside the caller's transaction).

    :class:`Store` runs every step a database lacks; :mod:`app.salvage` builds a database up to a damaged
    file's own version with it, so that rows are copied into the columns they were written for and the
    later steps (Store's own) convert them as they would have converted the original."""
    for statement in filter(str.strip, MIGRATIONS[version].split(";")):
        db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")


#: Stored copies up to this size are hashed again when the same file is stored again, to find one
#: damaged since it was stored; a larger one (a long video) is compared by size alone.
REHASH_LIMIT = 256 << 20


def _same_content(stored: Path, fresh: Path, digest: str) -> bool:
    """``stored`` (the copy named by ``digest``) still holds ``fresh``'s bytes: the same size and, up
    to :data:`REHASH_LIMIT`, the same SHA-256. False also when it cannot be read."""
    try:
        size = stored.stat().st_size
        if size != fresh.stat().st_size:
            return False
        if size > REHASH_LIMIT:
            return True
        check = hashlib.sha256()
        with stored.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                check.update(block)
        return check.hexdigest() == digest
    except OSError:
        return False


#: The numbers an answer's stats hold (engine.api.GenerationStats, the window's "context") and their
#: texts (app.controller.result_of and what the keeper adds). A value of another type (a hand-edited row,
#: an import of a file made elsewhere) is left out as unreadable: the footer formats these as numbers.
STAT_NUMBERS = frozenset({"prompt_tokens", "cached_tokens", "generated_tokens", "image_tokens", "video_frames",
                          "ttft_s", "prefill_tokens_per_s", "decode_tokens_per_s", "total_s", "dropped_turns",
                          "draft_tokens", "accepted_tokens", "context"})
STAT_TEXTS = frozenset({"model_name", "model", "engine", "error", "error_type", "notice"})


def clean_stats(stats: dict) -> tuple[dict, bool]:
    """``(stats without the values of a wrong type, whether any was left out)``: numbers
    (:data:`STAT_NUMBERS`) finite ints or floats, texts (:data:`STAT_TEXTS`) strings, either None;
    other keys kept."""
    kept = {}
    for key, value in stats.items():
        if value is None:  # (not measured, no error: as written)
            kept[key] = value
            continue
        if key in STAT_NUMBERS and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                        and math.isfinite(value)):
            continue
        if key in STAT_TEXTS and not isinstance(value, str):
            continue
        kept[key] = value
    return kept, len(kept) != len(stats)


#: Newest first; a time another program wrote as text sorts as the epoch, as it is shown (SQLite
#: sorts text after every number: such chats came first, under a "1970" heading of their own).
_TIME_ORDER = "CASE WHEN typeof(updated) IN ('integer', 'real') THEN updated ELSE 0 END DESC"


def search_key(text: str) -> str:
    """``text`` as searches compare it: composed (NFC: "e" and a combining acute accent, as macOS and
    some web pages write it, is "é" typed; trial 69 F10) and casefolded ("STRASSE" is "straße")."""
    return unicodedata.normalize("NFC", text).casefold()


def _casefolded(value) -> str | None:
    """SQL ``casefolded(CAST(x AS BLOB))``: :func:`search_key` of the text's bytes, since SQLite hands a
    function TEXT that is not valid UTF-8 as an error (the whole search failed over one damaged message)."""
    if isinstance(value, bytes):
        return search_key(value.decode("utf-8", errors="replace"))
    return search_key(value) if isinstance(value, str) else None


class DamagedText(str):
    """A TEXT value that is not valid UTF-8 (another program's bytes, a disk error inside a page that
    SQLite's checks pass), decoded with U+FFFD for each invalid byte so its row can still be shown."""


def _text(data: bytes) -> str:
    """The connections' ``text_factory``: SQLite's default raises on invalid UTF-8 when the row is
    fetched, so one damaged message made its whole chat unreadable (trial 60)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return DamagedText(data.decode("utf-8", errors="replace"))


def is_time(value) -> bool:
    """Whether ``value`` is a time to show: seconds since the epoch, a finite number from 1970 to
    5138 (not a string, a bool, NaN, or a value ``datetime`` cannot take)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0 <= value < 1e11


def _base_name(name: str) -> str:
    """``name`` without any folder, whichever system's separator it uses."""
    return re.split(r"[/\\]", name)[-1]


class NewerSchemaError(RuntimeError):
    """The database was written by a newer Smolchat (its schema version, :attr:`version`, is above ours)."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


class ReadOnlyStore(sqlite3.OperationalError):
    """A write to a store opened read-only; the message says why it is read-only."""


OPEN_TIMEOUT_S = 2.0  # how long opening waits for another program's lock
# How long a write waits for another program's lock. Writes run on the UI thread, and this process
# is the database's only writer (one Smolchat per data folder; WAL readers do not block it): a lock is
# a backup or sync tool's, held for longer than a window may stand still (10 s froze it: trial 69 F5).
WRITE_TIMEOUT_S = 1.0
_COPIES = itertools.count()  # names the copies in flight within this process

_LAST = object()  # add_message's default parent: the last message of the active branch

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
# Videos share the store (and a message's ``images`` list): the suffix says which a file is.
MEDIA_SUFFIXES = IMAGE_SUFFIXES | {".mp4", ".webm", ".mov", ".mkv", ".m4v", ".apng"}


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    text: str = ""
    images: list[str] = field(default_factory=list)  # absolute paths in the image store
    stats: dict = field(default_factory=dict)
    status: str = "done"  # done | streaming | interrupted | cancelled | length | error
    token_ids: list[int] | None = None  # an answer's ids as generated (None: unknown, re-tokenize the text)
    parent_id: int | None = None  # the message this one follows (None: the conversation's first)
    # The name each of ``images`` was attached as (a base name; "" where unknown), one per image.
    attached_names: list[str] = field(default_factory=list)
    created: float | None = None  # when it was stored, seconds since the epoch (None: not a number)

    def as_history(self) -> dict:
        history = {"role": self.role, "text": self.text, "images": list(self.images)}
        if self.token_ids is not None:
            history["token_ids"] = list(self.token_ids)
        return history


@dataclass
class DeletedMessages:
    """What :meth:`Store.delete_message` removed, for :meth:`Store.restore_messages` (Undo)."""

    conversation_id: int
    message_id: int  # the message the user deleted
    role: str
    rows: list[dict]  # every deleted row as it was stored, parents first
    moved: list[tuple[int, int | None, int]]  # (id, parent_id, selected) before, of the rows that stayed

    @property
    def answers(self) -> int:
        """How many of the deleted rows are answers of the deleted question (children of it)."""
        return sum(1 for r in self.rows if r["parent_id"] == self.message_id and r["role"] == "assistant")


@dataclass
class Conversation:
    id: int
    title: str
    created: float
    updated: float
    model: str = ""
    settings: dict = field(default_factory=dict)


class Store:
    """Conversations and messages in ``folder/smolchat.sqlite3``; images in ``folder/images``."""

    def __init__(self, folder: str | Path, recover: bool = True, read_only: str = "") -> None:
        """``recover=False`` opens without touching other writers' state (a read-only look).

        ``read_only`` (a reason, in words) opens the existing database without ever writing to it.
        Raises :class:`NewerSchemaError` for a database of a newer Smolchat (open it read-only),
        ``sqlite3.Error`` for a file that is not a database, ``OSError`` for an unusable folder.
        """
        self.folder = Path(folder)
        self.images_dir = self.folder / "images"
        self.path = self.folder / "smolchat.sqlite3"
        self.read_only = read_only
        self.unreadable: set[tuple[str, int]] = set()  # ("message" | "conversation", id) whose JSON did not parse
        self.interrupted = 0
        self.stray: dict[int, set[int]] = {}  # conversation id -> messages following one not in it (not shown)
        # Writes so far (each _write and each transaction's end): the last chat read (_children) is
        # kept until the next one. Opening a chat read it five times (0.9 of 1.2 s for 5,000 messages).
        self._writes = 0
        self._read: tuple[tuple[int, int], dict] | None = None
        # The open chat's rows as last parsed ({id: (row values, Message)}): a write changes a row or
        # two, so a read after it parses only those (a send's reads in a 5,000-message chat: 0.39 -> 0.06 s).
        self._parsed: tuple[int, dict[int, tuple[tuple, Message]]] = (-1, {})
        # The highest message id deleted by delete_message in this run. SQLite gives a new row the highest
        # id + 1 (the table has no AUTOINCREMENT), so a message added after the chat's newest was deleted
        # took its id and that delete's Undo failed; new messages are numbered above it instead. Undo
        # records live as long as the run, and so does this.
        self._freed_id = 0
        if read_only:
            self.db = self._connect_read_only()
            self.db.create_function("casefolded", 1, _casefolded, deterministic=True)
            return
        self.images_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=10)  # autocommit; explicit BEGIN for groups
        try:
            self.db.row_factory = sqlite3.Row
            self.db.text_factory = _text
            # At start a lock held by another program is waited for briefly (the window is not shown yet);
            # the caller then opens the database read-only. Later writes wait WRITE_TIMEOUT_S.
            self.db.execute(f"PRAGMA busy_timeout = {int(OPEN_TIMEOUT_S * 1000)}")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # durable across a killed process, fast enough per flush
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.create_function("casefolded", 1, _casefolded, deterministic=True)
            self._migrate()
            if recover:
                self._ensure_indexes()
                self.interrupted = self._mark_interrupted()
                self._purge_deleted()
            self.db.execute(f"PRAGMA busy_timeout = {int(WRITE_TIMEOUT_S * 1000)}")
        except BaseException:
            self.db.close()
            raise
        if recover:
            self._remove_partial_images()

    def _connect_read_only(self) -> sqlite3.Connection:
        """The database opened so that SQLite never writes (``mode=ro``; ``immutable=1`` where even the
        WAL index cannot be created, e.g. a read-only folder). A missing file is not created."""
        if not self.path.is_file():
            raise FileNotFoundError(f"no conversations database at {self.path}")
        uri = self.path.resolve().as_uri()
        for options in ("mode=ro", "mode=ro&immutable=1"):
            db = sqlite3.connect(f"{uri}?{options}", uri=True, isolation_level=None, timeout=10)
            db.row_factory = sqlite3.Row
            db.text_factory = _text
            try:
                db.execute("SELECT count(*) FROM messages").fetchone()
                db.execute("SELECT count(*) FROM conversations").fetchone()
                return db
            except sqlite3.Error:
                db.close()
                if options.endswith("immutable=1"):
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.db.close()

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        """Every write goes through here, so a read-only store refuses it with its reason."""
        if self.read_only:
            raise ReadOnlyStore(f"the conversations are read-only: {self.read_only}")
        if not sql.startswith("UPDATE conversations "):  # (a chat's title or date: its messages' read stays)
            self._writes += 1
        return self.db.execute(sql, args)

    @contextmanager
    def _transaction(self, begin: str = "BEGIN"):
        """One write transaction: committed when the block ends, rolled back if it raises.

        On SQLITE_FULL (a full disk), SQLITE_IOERR and a few others SQLite may already have rolled the
        transaction back itself; an explicit ROLLBACK would then fail ("cannot rollback - no
        transaction is active") and that error would hide the real one. So the rollback runs only
        while a transaction is still open, and an error of its own never replaces the first."""
        self._write(begin)  # a read-only store refuses here, before anything changes
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                try:
                    self.db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the error that stopped the transaction is the one to report
            raise
        finally:
            self._writes += 1  # (a chat read inside the transaction is not kept past it)

    # -- schema ----------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        """Apply missing migrations, each in its own write transaction (safe against a second opener)."""
        while True:
            with self._transaction("BEGIN IMMEDIATE"):  # takes the write lock before reading the version
                current = self.version
                if current > SCHEMA_VERSION:
                    raise NewerSchemaError(
                        f"{self.path} was written by a newer Smolchat (schema {current} > {SCHEMA_VERSION})", current)
                if current == SCHEMA_VERSION:
                    return
                apply_migration(self.db, current + 1)

    def _mark_interrupted(self) -> int:
        cur = self._write("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")
        return cur.rowcount

    def _purge_deleted(self) -> None:
        """Conversations deleted in an earlier run can no longer be undone: remove them (their messages
        unlinked first: see :meth:`_delete_messages`)."""
        with self._transaction():
            self.db.execute("""UPDATE messages SET parent_id = NULL WHERE parent_id IS NOT NULL AND conversation_id IN
                               (SELECT id FROM conversations WHERE deleted IS NOT NULL)""")
            self.db.execute("DELETE FROM conversations WHERE deleted IS NOT NULL")

    def _delete_messages(self, ids: list[int]) -> None:
        """Delete the messages ``ids`` (a whole subtree: nothing else follows them), inside the caller's
        transaction. Their links to each other are cut first: SQLite runs ON DELETE CASCADE one level of
        trigger per message of a chain and stops at 1,000 levels ("too many levels of trigger
        recursion"), so a branch or chat of over 1,000 messages could not be deleted, nor a start that
        purges one get past it."""
        for start in range(0, len(ids), 500):  # (SQLite's limit on a statement's parameters)
            chunk = ids[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            self.db.execute(f"UPDATE messages SET parent_id = NULL WHERE id IN ({marks})", chunk)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            self.db.execute(f"DELETE FROM messages WHERE id IN ({', '.join('?' * len(chunk))})", chunk)

    def _ensure_indexes(self) -> None:
        """The index a message's follow-ups are found by (every delete looks them up for its cascade: a
        full scan per deleted message without it, seconds each in a database of hundreds of MB). Not a
        schema step: an older Smolchat opens the database with it as before."""
        self._write("CREATE INDEX IF NOT EXISTS messages_by_parent_id ON messages(parent_id)")

    # -- conversations ---------------------------------------------------------------------------
    def create_conversation(self, title: str = "", model: str = "", settings: dict | None = None) -> Conversation:
        now = time.time()
        cur = self._write(
            "INSERT INTO conversations (title, created, updated, model, settings) VALUES (?, ?, ?, ?, ?)",
            (title, now, now, model, json.dumps(settings or {})),
        )
        return self.conversation(cur.lastrowid)

    def conversation(self, conversation_id: int) -> Conversation | None:
        row = self.db.execute(
            "SELECT * FROM conversations WHERE id = ? AND deleted IS NULL", (conversation_id,)
        ).fetchone()
        return self._conversation(row) if row else None

    @staticmethod
    def _text_test(words: str) -> tuple[str, str]:
        """An SQL test (``{}``: the column) and its argument ``?1`` for text holding ``words`` in any case."""
        words = unicodedata.normalize("NFC", words)
        if words.isascii():
            # "%", "_" and the escape character itself are the words searched for, not LIKE's wildcards.
            escaped = words.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            return "{} LIKE ?1 ESCAPE '\\'", f"%{escaped}%"
        # SQLite's LIKE ignores the case of A-Z only: "привет" did not find "Привет"
        return "instr(casefolded(CAST({} AS BLOB)), ?1) > 0", search_key(words)

    def other_version_hits(self, conversation_id: int, search: str) -> list[int]:
        """Ids of the messages holding ``search`` (as :meth:`conversations` matches it) that are not on
        the active branch, oldest first: the words are in a version not shown."""
        words = search.strip()
        if not words:
            return []
        test, arg = self._text_test(words)
        rows = self.db.execute(f"SELECT id FROM messages WHERE conversation_id = ?2 AND {test.format('text')} ORDER BY id",
                               (arg, conversation_id))
        shown = {m.id for m in self.messages(conversation_id)}
        return [row[0] for row in rows if row[0] not in shown]

    def select_branch(self, message_id: int) -> None:
        """Make the branch through ``message_id`` the active one: it and each message before it become
        the shown version among their siblings."""
        while message_id is not None:
            self.select(message_id)
            row = self.db.execute("SELECT parent_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            message_id = row[0] if row else None

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; ``search`` matches titles and message text (case-insensitive)."""
        if not search.strip():
            rows = self.db.execute(f"SELECT * FROM conversations WHERE deleted IS NULL ORDER BY {_TIME_ORDER}, id DESC")
        else:
            test, arg = self._text_test(search.strip())
            rows = self.db.execute(
                f"""SELECT * FROM conversations c WHERE deleted IS NULL AND ({test.format('title')} OR EXISTS
                   (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND {test.format('m.text')}))
                   ORDER BY {_TIME_ORDER}, id DESC""",
                (arg,),
            )
        return [self._conversation(r) for r in rows]

    def newest_conversation_id(self) -> int | None:
        """The id of the chat :meth:`conversations` lists first (None: there is none), read alone: the
        list of 3,000 chats took 0.08 s of each start to read for it."""
        row = self.db.execute(f"SELECT id FROM conversations WHERE deleted IS NULL ORDER BY {_TIME_ORDER}, id DESC "
                              "LIMIT 1").fetchone()
        return row[0] if row else None

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self._write("UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), conversation_id))

    def update_conversation(self, conversation_id: int, *, model: str | None = None,
                            settings: dict | None = None) -> None:
        if model is not None:
            self._write("UPDATE conversations SET model = ? WHERE id = ?", (model, conversation_id))
        if settings is not None:
            self._write("UPDATE conversations SET settings = ? WHERE id = ?",
                            (json.dumps(settings), conversation_id))
            self.unreadable.discard(("conversation", conversation_id))  # readable again

    def delete_conversation(self, conversation_id: int) -> None:
        """Hide the conversation; :meth:`undelete_conversation` brings it back until the next start."""
        self._write("UPDATE conversations SET deleted = ? WHERE id = ?", (time.time(), conversation_id))

    def undelete_conversation(self, conversation_id: int) -> None:
        self._write("UPDATE conversations SET deleted = NULL WHERE id = ?", (conversation_id,))

    def date_by_messages(self, conversation_id: int) -> None:
        """Date a chat by its messages (an imported one): created at its first, last used at its
        newest, so that the list files it where its messages fall (trial 55: a chat of last year's
        messages was listed under Today, the day it was imported). Nothing changes for a chat with no
        message."""
        # Never later than now: a chat of dates ahead (a machine whose clock was wrong) would stay at the
        # top of the list for years (trial 56).
        now = time.time()
        self._write("""UPDATE conversations SET
                         created = MIN(?2, (SELECT MIN(created) FROM messages WHERE conversation_id = ?1)),
                         updated = MIN(?2, (SELECT MAX(created) FROM messages WHERE conversation_id = ?1))
                       WHERE id = ?1 AND EXISTS (SELECT 1 FROM messages WHERE conversation_id = ?1)""",
                    (conversation_id, now))

    def _touch(self, conversation_id: int) -> None:
        self._write("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))

    # -- messages (a tree of versions: see the module docstring) ---------------------------------
    def messages(self, conversation_id: int) -> list[Message]:
        """The active branch, first message first."""
        children = self._children(conversation_id)
        branch: list[Message] = []
        parent = None
        while children.get(parent):
            kids = children[parent]
            pick = next((m for m, selected in kids if selected), kids[-1][0])
            branch.append(pick)
            parent = pick.id
        return branch

    def all_messages(self, conversation_id: int) -> list[Message]:
        """Every version of every message, in creation order (export); those no chain reaches too."""
        rows = self.db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        every = [self._message(r) for r in rows]
        if all(m.role in ROLES for m in every):
            return every
        placed = {m.id: m.role for kids in self._children(conversation_id).values() for m, _ in kids}
        return [m if m.role in ROLES or m.id not in placed else dataclasses.replace(m, role=placed[m.id])
                for m in every]

    def message_contents(self, conversation_id: int) -> list[tuple[str, str]] | None:
        """``(role, text)`` of every version of every message, sorted (by code point, as UTF-8 bytes
        sort): what tells two chats apart without building a message of each row (an import compared
        with the chats of its title took ~1 s for 10,000 messages, trial 75 N1). None where a role is
        another program's (:meth:`all_messages` reads it by its place)."""
        rows = self.db.execute("SELECT role, text FROM messages WHERE conversation_id = ? ORDER BY role, text",
                               (conversation_id,)).fetchall()
        contents = [(role, text) for role, text in rows]
        return contents if all(role in ROLES and isinstance(text, str) for role, text in contents) else None

    def message_count(self, conversation_id: int) -> int:
        """Rows of the chat's messages, every version."""
        return self.db.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (conversation_id,)).fetchone()[0]

    def siblings(self, message_id: int) -> list[Message]:
        """The versions of ``message_id`` (itself included), oldest first."""
        row = self.db.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return []
        return [m for m, _ in self._children(row[0]).get(row[1], ())]

    def follow_up(self, message_id: int) -> Message | None:
        """The message shown after ``message_id`` when its branch is (its selected follow-up, else the
        newest; a question's answer), or None."""
        row = self.db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        kids = self._children(row[0]).get(message_id, ()) if row is not None else ()
        return next((m for m, selected in reversed(kids) if selected), kids[-1][0] if kids else None)

    def versions(self, conversation_id: int) -> dict[int, tuple[int, int]]:
        """``{message id: (number, count)}`` for every message: it is version ``number`` (1-based) of ``count``."""
        out: dict[int, tuple[int, int]] = {}
        for kids in self._children(conversation_id).values():
            for number, (message, _selected) in enumerate(kids, 1):
                out[message.id] = (number, len(kids))
        return out

    def select(self, message_id: int) -> None:
        """Make ``message_id`` the shown version among its siblings (its branch becomes the active one)."""
        row = self.db.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is not None:
            self._write("UPDATE messages SET selected = (id = ?) WHERE conversation_id = ? AND parent_id IS ?",
                    (message_id, row[0], row[1]))

    def add_message(self, conversation_id: int, role: str, text: str = "", images: list[str] = (),
                    status: str = "done", stats: dict | None = None, parent_id=_LAST,
                    names: list[str] | None = None, created: float | None = None) -> Message:
        """Add a message after ``parent_id`` (default: the active branch's last message; None: a new
        first message) as the selected version among its siblings.

        ``names``: the name each of ``images`` was attached as ("" where unknown; None: all unknown).
        Only base names are kept: the folder a file came from is nobody's business but the user's.
        ``created``: when it was sent (seconds since the epoch; default now; an imported chat's own)."""
        if names is not None and len(names) != len(images):
            raise ValueError(f"{len(names)} names for {len(images)} images")
        if parent_id is _LAST:
            branch = self.messages(conversation_id)
            parent_id = branch[-1].id if branch else None
        position = 0 if parent_id is None else \
            self.db.execute("SELECT position + 1 FROM messages WHERE id = ?", (parent_id,)).fetchone()[0]
        stored = [Path(p).name for p in images]
        kept = None if names is None else json.dumps([_base_name(n) for n in names])
        before = self._read_now(conversation_id)
        with self._transaction("BEGIN IMMEDIATE" if self._freed_id else "BEGIN"):
            self.db.execute("UPDATE messages SET selected = 0 WHERE conversation_id = ? AND parent_id IS ?",
                            (conversation_id, parent_id))
            new_id = None  # (SQLite's choice)
            if self._freed_id:  # (the write lock is held: no other writer takes the id between)
                top = self.db.execute("SELECT MAX(id) FROM messages").fetchone()[0] or 0
                new_id = max(top, self._freed_id) + 1
            cur = self.db.execute(
                """INSERT INTO messages (id, conversation_id, position, role, text, images, stats, status, created,
                   parent_id, selected, attached_names) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)""",
                (new_id, conversation_id, position, role, text, json.dumps(stored), json.dumps(stats or {}), status,
                 time.time() if created is None else created, parent_id, kept),
            )
        self._touch(conversation_id)
        if before is not None:
            return self._patch_read(conversation_id, before, cur.lastrowid, parent_id, added=True)
        return self.message(cur.lastrowid)

    def message(self, message_id: int) -> Message | None:
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return self._message(row) if row else None

    def update_message(self, message_id: int, *, text: str | None = None, status: str | None = None,
                       stats: dict | None = None, token_ids: list[int] | tuple[int, ...] | None = None,
                       forget_token_ids: bool = False) -> None:
        """One small committed write; called every few hundred ms while an answer streams. A field left
        None is not changed; ``forget_token_ids``: the answer's ids are unknown now (its text is read
        again by the model's tokenizer), as while it is continued."""
        sets, args = (["token_ids = NULL"] if forget_token_ids else []), []
        for column, value in (("text", text), ("status", status)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if stats is not None:
            sets.append("stats = ?")
            args.append(json.dumps(stats))
        if token_ids is not None:
            sets.append("token_ids = ?")
            args.append(json.dumps([int(t) for t in token_ids]))
        if sets:
            read = self._read
            before = read[1] if read is not None and read[0] == self._read_key(read[0][0]) else None
            self._write(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*args, message_id))
            if before is not None:  # (newest first: the answer streaming is the chat's newest message)
                parent = next((parent for parent, kids in reversed(before.items())
                               if any(m.id == message_id for m, _ in kids)), _LAST)
                if parent is not _LAST:
                    self._patch_read(read[0][0], before, message_id, parent, added=False)

    def delete_message(self, message_id: int) -> DeletedMessages | None:
        """Delete one message so that versions stay of one role (see the module docstring); returns what
        was deleted, for :meth:`restore_messages` (None when there is no such message).

        - A message with other versions goes with the branch that follows it (its follow-ups belong to
          that version); the newest other version is shown if it was.
        - A question goes with its answers (every version of them); the follow-ups of the shown answer
          then follow the question's parent, where nothing else is (the conversation closes up).
        - An answer alone: its follow-ups follow its question.
        """
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return None
        conv, parent = row["conversation_id"], row["parent_id"]
        rows = {r["id"]: dict(r) for r in self.db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conv,))}
        children: dict[int | None, list[int]] = {}
        for r in rows.values():
            children.setdefault(r["parent_id"], []).append(r["id"])
        lifted: list[int] = []  # the follow-ups that stay, now after ``parent``
        if len(children[parent]) == 1:
            kids = children.get(message_id, [])
            if row["role"] == "user":
                answers = [k for k in kids if rows[k]["role"] == "assistant"]
                lifted = [k for k in kids if k not in answers]
                shown = next((a for a in answers if rows[a]["selected"]), answers[-1] if answers else None)
                if shown is not None:  # (children[None] are the chat's first messages, not follow-ups)
                    lifted += children.get(shown, [])
            else:
                lifted = list(kids)
        gone, stack = [], [message_id]
        while stack:  # the deleted rows: the message's subtree without the lifted follow-ups' own
            current = stack.pop()
            gone.append(current)
            stack += [k for k in children.get(current, []) if k not in lifted]
        keep = next((k for k in lifted if rows[k]["selected"] and rows[rows[k]["parent_id"]]["selected"]),
                    next((k for k in lifted if rows[k]["selected"]), None))
        affected = lifted + [k for k in children[parent] if k != message_id]
        record = DeletedMessages(conv, message_id, row["role"], [rows[i] for i in sorted(gone)],
                                 [(i, rows[i]["parent_id"], rows[i]["selected"]) for i in affected])
        with self._transaction():
            for k in lifted:
                self.db.execute("UPDATE messages SET parent_id = ?, selected = ? WHERE id = ?",
                                (parent, int(k == keep), k))
            self._delete_messages(gone)
            self._reselect(conv, parent)
        self._freed_id = max(self._freed_id, *gone)
        return record

    def restore_messages(self, deleted: DeletedMessages) -> None:
        """Undo :meth:`delete_message`: the rows come back with their ids (so versions keep their
        numbers), the follow-ups under them again, and the branch shown then is shown again. Messages
        of the other role added after the deleted one's parent since follow it (a question asked after
        the newest answer was deleted comes after that answer again, with the answer to it); a version
        added in its place since stays the one shown. Raises
        ``sqlite3.IntegrityError`` (nothing changed) when the chat changed in a way that prevents it:
        the message it followed was deleted since. (Messages added since never take a deleted one's id:
        see ``_freed_id``.)"""
        with self._transaction():
            self.db.execute("PRAGMA defer_foreign_keys = ON")  # checked at COMMIT (this transaction only)
            try:
                for r in deleted.rows:
                    self.db.execute(f"INSERT INTO messages ({', '.join(r)}) VALUES ({', '.join('?' * len(r))})",
                                    tuple(r.values()))
            except sqlite3.IntegrityError as exc:
                raise sqlite3.IntegrityError(f"the chat changed after the delete ({exc})") from exc
            for message_id, parent, selected in deleted.moved:
                self.db.execute("UPDATE messages SET parent_id = ?, selected = ? WHERE id = ?",
                                (parent, selected, message_id))
            # Messages of the other role written after the deleted one's parent since (a question sent
            # after the newest answer was deleted) follow the restored message: versions stay of one role.
            top = next(r for r in deleted.rows if r["id"] == deleted.message_id)
            self.db.execute("UPDATE messages SET parent_id = ? WHERE conversation_id = ? AND parent_id IS ? "
                            "AND role != ? AND id != ?",
                            (top["id"], deleted.conversation_id, top["parent_id"], top["role"], top["id"]))
            # A version written in its place since (a regenerated answer, a question asked again) stays the
            # one shown, with what follows it; the restored message is a version beside it.
            known = {top["id"], *(m for m, _, _ in deleted.moved)}
            newer = any(row[0] not in known for row in self.db.execute(
                "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ?",
                (deleted.conversation_id, top["parent_id"])))
            if newer:
                self.db.execute("UPDATE messages SET selected = 0 WHERE id = ?", (top["id"],))
            for r in [*deleted.rows, *({"id": m, "parent_id": p, "selected": s} for m, p, s in deleted.moved)]:
                if r is top and newer:
                    continue
                if r["selected"]:  # one shown version per parent, even beside versions added since
                    self.db.execute("UPDATE messages SET selected = (id = ?) WHERE conversation_id = ? "
                                    "AND parent_id IS ?", (r["id"], deleted.conversation_id, r["parent_id"]))
            self._reselect(deleted.conversation_id, top["id"])  # (what moved under it may all be unselected)
        self._touch(deleted.conversation_id)

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete ``message_id`` and everything that follows it, in every branch."""
        row = self.db.execute("SELECT parent_id FROM messages WHERE id = ? AND conversation_id = ?",
                              (message_id, conversation_id)).fetchone()
        if row is not None:
            children: dict[int | None, list[int]] = {}
            for child, parent in self.db.execute("SELECT id, parent_id FROM messages WHERE conversation_id = ?",
                                                 (conversation_id,)):
                children.setdefault(parent, []).append(child)
            gone, stack = [], [message_id]
            while stack:
                gone.append(stack.pop())
                stack += children.get(gone[-1], [])
            with self._transaction():
                self._delete_messages(gone)
                self._reselect(conversation_id, row[0])

    def _reselect(self, conversation_id: int, parent_id: int | None) -> None:
        """After a deletion: if no sibling under ``parent_id`` is selected, select the newest."""
        if self.db.execute("SELECT 1 FROM messages WHERE conversation_id = ? AND parent_id IS ? AND selected",
                           (conversation_id, parent_id)).fetchone() is None:
            self.db.execute("""UPDATE messages SET selected = 1 WHERE id = (SELECT MAX(id) FROM messages
                               WHERE conversation_id = ? AND parent_id IS ?)""", (conversation_id, parent_id))

    def _read_now(self, conversation_id: int) -> dict[int | None, list[tuple[Message, bool]]] | None:
        """The chat's :meth:`_children` as read and still valid (no write since), else None."""
        read = self._read
        return read[1] if read is not None and read[0] == self._read_key(conversation_id) else None

    def _read_key(self, conversation_id: int) -> tuple[int, int, int]:
        """What a chat's read (:meth:`_children`) holds for: the chat, this store's writes (each bumps
        ``_writes``) and SQLite's ``data_version``, which moves when another connection commits."""
        return conversation_id, self._writes, self.db.execute("PRAGMA data_version").fetchone()[0]

    def _patch_read(self, conversation_id: int, before: dict[int | None, list[tuple[Message, bool]]],
                    message_id: int, parent_id: int | None, added: bool) -> Message | None:
        """Keep the chat's read (:meth:`_children`) valid past a write that changed message
        ``message_id`` alone, read again here and returned (None: gone): ``added``, the new selected
        version under ``parent_id`` (its siblings unselected, as :meth:`add_message` writes them), else
        the same message with new contents. Every send in a chat of 10,000 messages read all of them
        three times (~0.3 s each on the UI thread, trial 75 N6). A message another program's data would
        place otherwise (a role not ours, a parent no chain reaches) is left to the next full read."""
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return None
        message = self._message(row)
        if self._parsed[0] == conversation_id:  # (a full read later parses only what changed since)
            self._parsed[1][message.id] = (tuple(row), message)
        if message.role not in ROLES or conversation_id in self.stray:
            return message
        if added and parent_id is not None and not any(m.id == parent_id for kids in reversed(before.values())
                                                       for m, _ in kids):
            return message
        key = self._read_key(conversation_id)
        if self._read is None or self._read[0][2] != key[2]:
            return message  # another program committed meanwhile (while our write waited for its lock)
        children = dict(before)  # (a caller's dict stays as it was read: only the changed list is new)
        if added:
            children[parent_id] = [(m, False) for m, _ in before.get(parent_id, ())] + [(message, True)]
        else:
            children[parent_id] = [(message if m.id == message.id else m, selected)
                                   for m, selected in before[parent_id]]
        self._read = (key, children)
        return message

    def _children(self, conversation_id: int) -> dict[int | None, list[tuple[Message, bool]]]:
        """``{parent id: [(message, selected)...]}`` oldest first, for one conversation; the same read
        again until the next write (callers do not change what it holds: messages are frozen)."""
        if self._read is not None and self._read[0] == self._read_key(conversation_id):
            return self._read[1]
        children: dict[int | None, list[tuple[Message, bool]]] = {}
        before = self._parsed[1] if self._parsed[0] == conversation_id else {}
        parsed: dict[int, tuple[tuple, Message]] = {}
        for row in self.db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)):
            values = tuple(row)
            last = before.get(row["id"])
            message = last[1] if last is not None and last[0] == values else self._message(row)
            parsed[message.id] = (values, message)
            children.setdefault(row["parent_id"], []).append((message, bool(row["selected"])))
        self._parsed = (conversation_id, parsed)
        # A message no chain from the chat's first message reaches (it follows a message not in this chat,
        # or messages follow one another in a loop: trial 61's chat opened empty without a word) is
        # never shown, and said.
        reached, stack = set(), [(None, 0)]
        while stack:
            parent, depth = stack.pop()
            kids = children.get(parent, ())
            for k, (message, selected) in enumerate(kids):
                if message.id in reached:
                    continue
                reached.add(message.id)
                stack.append((message.id, depth + 1))
                if message.role not in ROLES:
                    # Another program's role ('system', 'wizard'): a chat alternates question and answer
                    # from its first message, so the row's depth says which it stands for. Read as that,
                    # it is drawn as what it was and its question stays in what the model is sent.
                    kids[k] = (dataclasses.replace(message, role=ROLES[depth % 2]), selected)
        unplaced = {message.id for kids in children.values() for message, _ in kids} - reached
        if unplaced:
            self.unreadable.update(("message", i) for i in unplaced)
            self.stray.setdefault(conversation_id, set()).update(unplaced)
        self._read = (self._read_key(conversation_id), children)
        return children

    # -- images ----------------------------------------------------------------------------------
    def store_image(self, path: str | Path) -> str:
        """Copy ``path`` (an image or a video) into the store, named by its content hash and keeping its
        suffix; return the stored path.

        The file is read once, into a temporary copy that is then hashed in blocks (a video may be
        gigabytes), so a file that changes while it is copied is stored as one consistent version;
        the copy is renamed into place only when complete. A path already in the store is returned
        as is. Raises OSError (e.g. a full disk; no partial file is left) or :class:`ReadOnlyStore`."""
        if self.read_only:
            raise ReadOnlyStore(f"the conversations are read-only: {self.read_only}")
        path = Path(path)
        if path.parent == self.images_dir and path.is_file() and not path.name.endswith(".part"):
            return str(path)
        suffix = path.suffix.lower() if path.suffix.lower() in MEDIA_SUFFIXES else ".img"
        tmp = self.images_dir / f"incoming-{os.getpid()}-{next(_COPIES)}.part"
        digest = hashlib.sha256()
        try:
            shutil.copyfile(path, tmp)
            with tmp.open("rb") as copy:  # the copy is hashed, in blocks: what is stored is what is named
                for block in iter(lambda: copy.read(1 << 20), b""):
                    digest.update(block)
            target = self.images_dir / f"{digest.hexdigest()[:32]}{suffix}"
            if target.exists() and _same_content(target, tmp, digest.hexdigest()):
                tmp.unlink()
                with contextlib.suppress(OSError):  # (a file another user owns keeps its time)
                    os.utime(target)  # in use again: not a file that remove_unused_media may take
            else:  # new, or a stored copy damaged since (a disk error): the intact file replaces it
                tmp.replace(target)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk must not leave half an image behind
            raise
        return str(target)

    def remove_unused_media(self, keep: Iterable[str] = ()) -> tuple[int, int]:
        """Delete the stored images and videos that no message refers to any more: those of chats
        deleted in an earlier run (purged at the start), of messages deleted and not undone, of a
        question whose send was refused. Without this a deleted chat's 2 GB video stayed on disk for good.

        ``keep``: paths still wanted outside the database (the unsent message's attachments). A file is
        taken only when no message's ``images`` value names it (read as text, so a value that is not
        valid JSON still keeps its files) and it was not stored or reused since this call began.
        Returns (files deleted, bytes freed); a file that cannot be deleted is left. A read-only store
        deletes nothing."""
        if self.read_only:
            return 0, 0
        started = time.time()
        files = [f for f in self.images_dir.iterdir() if f.is_file() and not f.name.endswith(".part")]
        if not files:
            return 0, 0
        named: set[str] = set()  # every path part of every value: a set, as there may be 100,000 rows
        for (value,) in self.db.execute("SELECT images FROM messages WHERE images IS NOT NULL AND images NOT IN ('', '[]')"):
            named.update(_PATH_PARTS.split(str(value)))
        wanted = {Path(path).name for path in keep}
        removed = freed = 0
        for file in files:
            if file.name in wanted or file.name in named:
                continue
            try:
                stat = file.stat()
                if stat.st_mtime >= started - 1:  # (coarse file-system clocks): stored or reused just now
                    continue
                file.unlink()
            except OSError:
                continue
            removed, freed = removed + 1, freed + stat.st_size
        return removed, freed

    def _remove_partial_images(self) -> None:
        """Copies cut short by a crash or a full disk in an earlier run."""
        for part in self.images_dir.glob("*.part"):
            try:
                part.unlink()
            except OSError:
                pass

    # -- rows ------------------------------------------------------------------------------------
    def _conversation(self, row: sqlite3.Row) -> Conversation:
        settings = self._json(row["settings"], dict, ("conversation", row["id"]))
        title = row["title"]
        if isinstance(title, bytes):  # a BLOB written by another program: its text, not Python's b'...'
            title = title.decode("utf-8", errors="replace")
        # Times another program wrote as text (or not at all) sort and show as the epoch, not as a crash.
        created, updated = (value if is_time(value) else 0.0 for value in (row["created"], row["updated"]))
        return Conversation(row["id"], str(title or ""), created, updated, str(row["model"] or ""),
                            {} if settings is None else settings)

    def _message(self, row: sqlite3.Row) -> Message:
        key = ("message", row["id"])
        names = self._json(row["images"], list, key) or []
        readable = [isinstance(name, str) and bool(name) for name in names]
        images = [str(self.images_dir / Path(name).name) for name, ok in zip(names, readable) if ok]
        if len(images) != len(names):
            self.unreadable.add(key)
        attached_names = [name for name, ok in zip(self._attached_names(row, len(names), key), readable) if ok]
        stats, odd = clean_stats(self._json(row["stats"], dict, key) or {})
        if odd:
            self.unreadable.add(key)
        raw_ids = row["token_ids"] if "token_ids" in row.keys() else None  # absent before schema 3
        token_ids = self._json(raw_ids, list, key) if raw_ids is not None else None
        if token_ids is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in token_ids):
            self.unreadable.add(key)
            token_ids = None  # unusable ids: the text is re-tokenized instead
        parent_id = row["parent_id"] if "parent_id" in row.keys() else None  # absent before schema 4
        role, text = row["role"], row["text"]
        if any(isinstance(value, DamagedText) for value in tuple(row)):  # shown with U+FFFD where bytes were bad
            self.unreadable.add(key)
        if role not in ROLES:  # another program's row ('system', 'wizard'): read by its place (_children), said
            self.unreadable.add(key)
        if isinstance(text, bytes):  # a BLOB written by another program: its text, not Python's b'...'
            self.unreadable.add(key)
            text = text.decode("utf-8", errors="replace")
        created = row["created"] if is_time(row["created"]) else None  # another program's value is no time to show
        return Message(row["id"], row["conversation_id"], str(role), "" if text is None else str(text), images,
                       stats, str(row["status"]), token_ids, parent_id, attached_names, created)

    def _attached_names(self, row: sqlite3.Row, count: int, key: tuple[str, int]) -> list[str]:
        """The row's ``count`` attached names, one per entry of its stored ``images`` list ("" where unknown).
        A list of another length cannot say which name goes with which file: all are then unknown."""
        raw = row["attached_names"] if "attached_names" in row.keys() else None  # absent before schema 5
        names = self._json(raw, list, key) if raw is not None else None
        if names is None:
            return [""] * count
        if len(names) != count:
            self.unreadable.add(key)
            return [""] * count
        if not all(isinstance(name, str) for name in names):
            self.unreadable.add(key)
        return [name if isinstance(name, str) else "" for name in names]

    def _json(self, raw, kind: type, key: tuple[str, int]):
        """``raw`` parsed as a JSON ``kind``; None (and ``key`` noted in :attr:`unreadable`) when it is not one.
        The row is never rewritten: what could not be read stays on disk as it was."""
        if raw in (None, ""):
            return None
        try:
            value = json.loads(raw)
        except (TypeError, ValueError):
            value = None
        if not isinstance(value, kind):
            self.unreadable.add(key)
            return None
        return value
