"""Conversations on disk: one SQLite database (WAL) plus images stored once by content hash.

The store is used from the UI thread only. Every write commits at once, so a killed process
loses nothing that was written; an answer still marked ``streaming`` when the store is opened
again was cut off by a crash and becomes ``interrupted``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 3

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
}

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
# Videos share the store (and a message's ``images`` list): the suffix says which a file is.
MEDIA_SUFFIXES = IMAGE_SUFFIXES | {".mp4", ".webm", ".mov", ".mkv", ".m4v", ".apng"}


@dataclass
class Message:
    id: int
    conversation_id: int
    role: str
    text: str = ""
    images: list[str] = field(default_factory=list)  # absolute paths in the image store
    stats: dict = field(default_factory=dict)
    status: str = "done"  # done | streaming | interrupted | cancelled | length | error

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

    # -- messages --------------------------------------------------------------------------------
    def messages(self, conversation_id: int) -> list[Message]:
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY position, id", (conversation_id,)
        )
        return [self._message(r) for r in rows]

    def add_message(self, conversation_id: int, role: str, text: str = "", images: list[str] = (),
                    status: str = "done", stats: dict | None = None) -> Message:
        position = self.db.execute(
            "SELECT COALESCE(MAX(position), -1) + 1 FROM messages WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()[0]
        names = [Path(p).name for p in images]
        cur = self.db.execute(
            """INSERT INTO messages (conversation_id, position, role, text, images, stats, status, created)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
            (conversation_id, position, role, text, json.dumps(names), json.dumps(stats or {}), status, time.time()),
        )
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
        self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete ``message_id`` and every later message of the conversation (edit / regenerate)."""
        row = self.db.execute("SELECT position FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is not None:
            self.db.execute("DELETE FROM messages WHERE conversation_id = ? AND position >= ?",
                            (conversation_id, row[0]))

    # -- images ----------------------------------------------------------------------------------
    def store_image(self, path: str | Path) -> str:
        """Copy ``path`` (an image or a video) into the store, named by its content hash and keeping its
        suffix; return the stored path. The copy streams (a video may be gigabytes) and is renamed
        into place only when complete."""
        path = Path(path)
        digest = hashlib.sha256()
        with path.open("rb") as source:
            for block in iter(lambda: source.read(1 << 20), b""):
                digest.update(block)
        suffix = path.suffix.lower() if path.suffix.lower() in MEDIA_SUFFIXES else ".img"
        target = self.images_dir / f"{digest.hexdigest()[:32]}{suffix}"
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
                       json.loads(row["stats"] or "{}"), row["status"])
