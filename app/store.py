"""Conversations on disk: one SQLite database (WAL) plus images stored once by content hash.

The store is used from the UI thread only. Every write commits at once, so a killed process
loses nothing that was written; an answer still marked ``streaming`` when the store is opened
again was cut off by a crash and becomes ``interrupted``.

Versions (schema 4): a conversation is a tree of messages. Each message names the message it follows
(``parent_id``; NULL for a first message), so regenerating an answer or editing a question adds a
*sibling* (same parent) instead of replacing anything, and each sibling continues its own branch.
Among siblings exactly one is ``selected``; the conversation shown (and given to the model) is the
*active branch*: from the selected first message, always down to the selected child. Siblings are
numbered by creation (id order): "2 / 3" is the second of three. ``position`` is the depth in the
branch when the message was written (informational: the tree is ``parent_id``). Deleting one
message hands its children to its parent; :meth:`Store.delete_messages_from` removes a message with
its whole subtree.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 4

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
}

_LAST = object()  # add_message's default parent: the last message of the active branch

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"}


@dataclass
class Message:
    id: int
    conversation_id: int
    role: str
    text: str = ""
    images: list[str] = field(default_factory=list)  # absolute paths in the image store
    stats: dict = field(default_factory=dict)
    status: str = "done"  # done | streaming | interrupted | cancelled | length | error
    parent_id: int | None = None  # the message this one follows (None: the conversation's first)

    def as_history(self) -> dict:
        return {"role": self.role, "text": self.text, "images": list(self.images)}


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

    def __init__(self, folder: str | Path, recover: bool = True) -> None:
        """``recover=False`` opens without touching other writers' state (a read-only look)."""
        self.folder = Path(folder)
        self.images_dir = self.folder / "images"
        self.images_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "smolchat.sqlite3"
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=10)  # autocommit; explicit BEGIN for groups
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # durable across a killed process, fast enough per flush
        self.db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        self.interrupted = 0
        if recover:
            self.interrupted = self._mark_interrupted()
            self._purge_deleted()
            self._remove_partial_images()

    def close(self) -> None:
        self.db.close()

    # -- schema ----------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        """Apply missing migrations, each in its own write transaction (safe against a second opener)."""
        while True:
            self.db.execute("BEGIN IMMEDIATE")  # takes the write lock before reading the version
            try:
                current = self.version
                if current > SCHEMA_VERSION:
                    raise RuntimeError(
                        f"{self.path} was written by a newer Smolchat (schema {current} > {SCHEMA_VERSION})")
                if current == SCHEMA_VERSION:
                    self.db.execute("COMMIT")
                    return
                for statement in filter(str.strip, MIGRATIONS[current + 1].split(";")):
                    self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {current + 1}")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def _mark_interrupted(self) -> int:
        cur = self.db.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")
        return cur.rowcount

    def _purge_deleted(self) -> None:
        """Conversations deleted in an earlier run can no longer be undone: remove them."""
        self.db.execute("DELETE FROM conversations WHERE deleted IS NOT NULL")

    # -- conversations ---------------------------------------------------------------------------
    def create_conversation(self, title: str = "", model: str = "", settings: dict | None = None) -> Conversation:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO conversations (title, created, updated, model, settings) VALUES (?, ?, ?, ?, ?)",
            (title, now, now, model, json.dumps(settings or {})),
        )
        return self.conversation(cur.lastrowid)

    def conversation(self, conversation_id: int) -> Conversation | None:
        row = self.db.execute(
            "SELECT * FROM conversations WHERE id = ? AND deleted IS NULL", (conversation_id,)
        ).fetchone()
        return self._conversation(row) if row else None

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; ``search`` matches titles and message text (case-insensitive)."""
        if not search.strip():
            rows = self.db.execute("SELECT * FROM conversations WHERE deleted IS NULL ORDER BY updated DESC, id DESC")
        else:
            like = f"%{search.strip()}%"
            rows = self.db.execute(
                """SELECT * FROM conversations c WHERE deleted IS NULL AND (title LIKE ?1 OR EXISTS
                   (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.text LIKE ?1))
                   ORDER BY updated DESC, id DESC""",
                (like,),
            )
        return [self._conversation(r) for r in rows]

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), conversation_id))

    def update_conversation(self, conversation_id: int, *, model: str | None = None,
                            settings: dict | None = None) -> None:
        if model is not None:
            self.db.execute("UPDATE conversations SET model = ? WHERE id = ?", (model, conversation_id))
        if settings is not None:
            self.db.execute("UPDATE conversations SET settings = ? WHERE id = ?",
                            (json.dumps(settings), conversation_id))

    def delete_conversation(self, conversation_id: int) -> None:
        """Hide the conversation; :meth:`undelete_conversation` brings it back until the next start."""
        self.db.execute("UPDATE conversations SET deleted = ? WHERE id = ?", (time.time(), conversation_id))

    def undelete_conversation(self, conversation_id: int) -> None:
        self.db.execute("UPDATE conversations SET deleted = NULL WHERE id = ?", (conversation_id,))

    def _touch(self, conversation_id: int) -> None:
        self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))

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
        """Every version of every message, in creation order (export)."""
        rows = self.db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        return [self._message(r) for r in rows]

    def siblings(self, message_id: int) -> list[Message]:
        """The versions of ``message_id`` (itself included), oldest first."""
        row = self.db.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return []
        rows = self.db.execute("SELECT * FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id",
                               (row[0], row[1]))
        return [self._message(r) for r in rows]

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
            self.db.execute("UPDATE messages SET selected = (id = ?) WHERE conversation_id = ? AND parent_id IS ?",
                            (message_id, row[0], row[1]))

    def add_message(self, conversation_id: int, role: str, text: str = "", images: list[str] = (),
                    status: str = "done", stats: dict | None = None, parent_id=_LAST) -> Message:
        """Add a message after ``parent_id`` (default: the active branch's last message; None: a new
        first message) as the selected version among its siblings."""
        if parent_id is _LAST:
            branch = self.messages(conversation_id)
            parent_id = branch[-1].id if branch else None
        position = 0 if parent_id is None else \
            self.db.execute("SELECT position + 1 FROM messages WHERE id = ?", (parent_id,)).fetchone()[0]
        names = [Path(p).name for p in images]
        self.db.execute("BEGIN")
        try:
            self.db.execute("UPDATE messages SET selected = 0 WHERE conversation_id = ? AND parent_id IS ?",
                            (conversation_id, parent_id))
            cur = self.db.execute(
                """INSERT INTO messages (conversation_id, position, role, text, images, stats, status, created,
                   parent_id, selected) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)""",
                (conversation_id, position, role, text, json.dumps(names), json.dumps(stats or {}), status,
                 time.time(), parent_id),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self._touch(conversation_id)
        return self.message(cur.lastrowid)

    def message(self, message_id: int) -> Message | None:
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return self._message(row) if row else None

    def update_message(self, message_id: int, *, text: str | None = None, status: str | None = None,
                       stats: dict | None = None) -> None:
        """One small committed write; called every few hundred ms while an answer streams."""
        sets, args = [], []
        for column, value in (("text", text), ("status", status)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if stats is not None:
            sets.append("stats = ?")
            args.append(json.dumps(stats))
        if sets:
            self.db.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*args, message_id))

    def delete_message(self, message_id: int) -> None:
        """Delete one message; its children follow its parent instead (the branch closes up)."""
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return
        self.db.execute("BEGIN")
        try:
            if row["selected"]:  # the shown branch goes on through this message's selected child
                self.db.execute("UPDATE messages SET selected = 0 WHERE conversation_id = ? AND parent_id IS ?",
                                (row["conversation_id"], row["parent_id"]))
            else:
                self.db.execute("UPDATE messages SET selected = 0 WHERE parent_id = ?", (message_id,))
            self.db.execute("UPDATE messages SET parent_id = ? WHERE parent_id = ?",
                            (row["parent_id"], message_id))
            self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            self._reselect(row["conversation_id"], row["parent_id"])
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete ``message_id`` and everything that follows it, in every branch."""
        row = self.db.execute("SELECT parent_id FROM messages WHERE id = ? AND conversation_id = ?",
                              (message_id, conversation_id)).fetchone()
        if row is not None:
            self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))  # ON DELETE CASCADE: the subtree
            self._reselect(conversation_id, row[0])

    def _reselect(self, conversation_id: int, parent_id: int | None) -> None:
        """After a deletion: if no sibling under ``parent_id`` is selected, select the newest."""
        if self.db.execute("SELECT 1 FROM messages WHERE conversation_id = ? AND parent_id IS ? AND selected",
                           (conversation_id, parent_id)).fetchone() is None:
            self.db.execute("""UPDATE messages SET selected = 1 WHERE id = (SELECT MAX(id) FROM messages
                               WHERE conversation_id = ? AND parent_id IS ?)""", (conversation_id, parent_id))

    def _children(self, conversation_id: int) -> dict[int | None, list[tuple[Message, bool]]]:
        """``{parent id: [(message, selected)...]}`` oldest first, for one conversation."""
        children: dict[int | None, list[tuple[Message, bool]]] = {}
        for row in self.db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)):
            children.setdefault(row["parent_id"], []).append((self._message(row), bool(row["selected"])))
        return children

    # -- images ----------------------------------------------------------------------------------
    def store_image(self, path: str | Path) -> str:
        """Copy ``path`` into the image store, named by its content hash; return the stored path."""
        path = Path(path)
        data = path.read_bytes()
        suffix = path.suffix.lower() if path.suffix.lower() in IMAGE_SUFFIXES else ".img"
        target = self.images_dir / f"{hashlib.sha256(data).hexdigest()[:32]}{suffix}"
        if not target.exists():
            tmp = target.with_suffix(".part")
            try:
                shutil.copyfile(path, tmp)
                tmp.replace(target)
            except BaseException:
                tmp.unlink(missing_ok=True)  # a full disk must not leave half an image behind
                raise
        return str(target)

    def _remove_partial_images(self) -> None:
        """Copies cut short by a crash or a full disk in an earlier run."""
        for part in self.images_dir.glob("*.part"):
            try:
                part.unlink()
            except OSError:
                pass

    # -- rows ------------------------------------------------------------------------------------
    def _conversation(self, row: sqlite3.Row) -> Conversation:
        return Conversation(row["id"], row["title"], row["created"], row["updated"], row["model"],
                            json.loads(row["settings"] or "{}"))

    def _message(self, row: sqlite3.Row) -> Message:
        images = [str(self.images_dir / name) for name in json.loads(row["images"] or "[]")]
        return Message(row["id"], row["conversation_id"], row["role"], row["text"], images,
                       json.loads(row["stats"] or "{}"), row["status"], row["parent_id"])
