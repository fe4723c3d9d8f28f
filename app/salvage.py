"""Salvage a damaged conversations database: keep the damaged file, rebuild one from what can be read.

One damaged page of the SQLite file (a disk error, a copy cut short) makes SQLite refuse every query
that touches it, and the store's opening queries scan whole tables, so the whole history would be hidden.
:func:`salvage_database` instead

1. copies the damaged file aside, as ``smolchat.sqlite3.damaged-YYYYMMDD-HHMMSS`` (with copies of its
   ``-wal`` and ``-shm`` files under the same name, so SQLite reads the copy as the app would have);
2. reads that copy, read-only, table by table in windows of rowids, halving a window that fails down to
   single rows, so that a damaged page loses only the rows on it. Rows behind a damaged inner page of a
   table (its leaf pages whole, but out of SQLite's reach) are read from the leaf pages directly, for
   the rowids the table's indexes still name;
3. writes what was read into a new database, in a temporary folder inside the data folder, built with
   the store's own migrations at the damaged file's schema version and then opened by :class:`Store`
   (which migrates it to the current schema);
4. mends what the lost rows leave behind: a message whose parent was lost follows the nearest ancestor
   that survives (the indexes, which often survive a lost table page, still say who followed whom), or
   starts its chat; the one-selected-sibling rule holds again. Messages whose chat's own row was lost are
   kept, as a chat of their own named "Recovered messages: ..." (its title and settings are what was lost;
   the user wants the messages back more than a perfect list);
5. only then replaces the damaged database with the new one (``os.replace``, one step).

The damaged file itself is never written, moved or deleted before step 5, and never written at all: it is
only opened through its copy, read-only. When anything fails (nothing readable, a full disk, a folder that
refuses a write) every file the salvage made is removed and :class:`SalvageError` (or the ``OSError`` /
``sqlite3.Error`` that stopped it) is raised, so that the caller goes on as it would have without one.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sqlite3
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.store import SCHEMA_VERSION, Store, apply_migration

SQLITE_HEADER = b"SQLite format 3\x00"
WINDOW = 256  # rowids read per query; a failing window is halved down to single rows
# Without any upper bound on a table's rowids (its last page and every index damaged), reading goes on
# this far past the last row it found before it concludes there is nothing more.
SEARCH_PAST_LAST = 64 * WINDOW
RECOVERED_TITLE = "Recovered messages"
#: In place of the zeros a damaged page (a zero-filled one, a file cut short through a text's overflow
#: pages) leaves in a text: SQLite hands them out as NUL characters, thousands of them mid-sentence.
LOST_PART = "[…]"
_ZEROS = re.compile("\x00{8,}")  # (a NUL or a few may be the user's own)
_NAMES = itertools.count()


class SalvageError(RuntimeError):
    """The salvage could not produce a database worth having (the reason is the message)."""


@dataclass
class SalvageReport:
    """What a salvage recovered. ``claimed_*`` is what the damaged file says it held (None: it could not say)."""

    kept_as: Path  # the damaged file's copy
    chats: int = 0  # chats in the new database, ``rebuilt`` included
    messages: int = 0
    claimed_chats: int | None = None
    claimed_messages: int | None = None
    rebuilt: int = 0  # chats whose own row was lost, made again for their messages
    cut: int = 0  # messages kept with a part of their text lost (LOST_PART in its place)
    other_rows: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # table -> (copied, claimed)

    def words(self) -> str:
        """The banner's line."""
        def count(done: int, claimed: int | None, one: str, many: str) -> str:
            noun = many if (claimed if claimed is not None else done) != 1 else one
            return f"{done} of {claimed} {noun}" if claimed is not None else f"{done} {noun}"

        chats = count(self.chats, self.claimed_chats, "chat", "chats")
        if self.rebuilt:
            lost = "title of 1 was lost: it is" if self.rebuilt == 1 else f"titles of {self.rebuilt} were lost: they are"
            chats += f' (the {lost} named "{RECOVERED_TITLE}: …")'
        messages = count(self.messages, self.claimed_messages, "message", "messages")
        if self.cut:
            messages += (f" ({self.cut} of them with a part lost in the damage, marked “{LOST_PART}”)" if self.cut > 1
                         else f" (1 with a part lost in the damage, marked “{LOST_PART}”)")
        unknown = " (what could be read)" if None in (self.claimed_chats, self.claimed_messages) else ""
        return (f"The conversation database was damaged. Recovered {chats} and {messages}{unknown}; the damaged "
                f"file is kept as {self.kept_as}.")


def looks_damaged(exc: sqlite3.Error, path: Path) -> bool:
    """Whether ``exc``, raised opening ``path``, says the file is a damaged SQLite database (not another
    kind of file, which is left alone: it may be something the user put there)."""
    text = str(exc)
    if "malformed" in text:
        return True
    if "file is not a database" not in text:
        return False
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def salvage_database(folder: str | Path, name: str = "smolchat.sqlite3") -> SalvageReport:
    """Replace the damaged database ``folder/name`` with one holding every row that can be read from it,
    keeping the damaged file (and its -wal/-shm files) as copies (see the module docstring).

    Raises :class:`SalvageError` when nothing could be read or the file is of a newer Smolchat (its schema
    is not ours to rebuild), ``OSError`` or ``sqlite3.Error`` when a write fails. In every such case the
    files this made are removed and the damaged database is as it was."""
    folder = Path(folder)
    path = folder / name
    made: list[Path] = []  # removed again if the salvage fails
    work = folder / f".salvage-{os.getpid()}-{next(_NAMES)}"
    try:
        kept = _copy_aside(path, made)
        # Reading the copy read-only can still make its -wal and -shm (SQLite's own, empty): where the damaged
        # file had none, they are not part of what is kept.
        extra = [Path(f"{kept}{s}") for s in ("-wal", "-shm") if Path(f"{kept}{s}") not in made]
        made += extra
        made.append(work)
        work.mkdir()
        report = _rebuild(kept, work, name)
        report.kept_as = kept
        new = work / name
        _fsync(new)
        # The old -wal would be replayed onto the new file (SQLite does not check that it belongs to it),
        # so it goes first: copies of both were kept. The -shm is only an index of the -wal.
        for suffix in ("-shm", "-wal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.replace(new, path)
        _fsync(folder)
    except BaseException:
        for leftover in reversed(made):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        raise
    shutil.rmtree(work, ignore_errors=True)  # held only the new database's images folder
    for leftover in extra:
        leftover.unlink(missing_ok=True)
    return report


def _copy_aside(path: Path, made: list[Path]) -> Path:
    """Copy ``path`` (and its -wal/-shm) to a new ``path.damaged-YYYYMMDD-HHMMSS`` name; returns it."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    number = 1
    while any(Path(f"{kept}{s}").exists() for s in ("", "-wal", "-shm")):  # never over an earlier copy
        number += 1
        kept = path.with_name(f"{path.name}.damaged-{stamp}-{number}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if suffix and not source.exists():
            continue
        target = Path(f"{kept}{suffix}")
        made.append(target)
        shutil.copyfile(source, target)
        _fsync(target)
    return kept


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file, or a folder's entries where the system allows) to the disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if path.is_dir():
            return  # (Windows cannot open a folder; its renames are durable enough)
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not path.is_dir():
            raise
    finally:
        os.close(fd)


def _open_read_only(path: Path) -> sqlite3.Connection:
    """``path`` opened so that SQLite never writes it (the copy stays identical to the damaged file)."""
    uri = path.resolve().as_uri()
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
    try:
        db.execute("SELECT name FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError:
        db.close()
        # mode=ro still needs its -wal to be readable; immutable=1 reads the main file alone.
        db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
    # Errors in the schema are passed over (SQLite's own rule while this is on): a file cut short has
    # tables and indexes whose root pages lie past its end, and SQLite then refused every query, even of
    # the tables that are all there (trial 69 F2). Nothing is written: the connection is read-only.
    db.execute("PRAGMA writable_schema = ON")
    return db


def _page_size(header: bytes) -> int:
    """The page size a database header (its first 100 bytes) gives (file format 1.3.2: 1 means
    65,536), or 0 when it gives none that can be."""
    size = int.from_bytes(header[16:18], "big") if len(header) >= 100 else 0
    size = 65536 if size == 1 else size
    return size if size >= 512 and not size & (size - 1) else 0


def _whole_pages(kept: Path, work: Path) -> Path:
    """``kept``, or where it ends within a page (a copy cut short), a copy of its whole pages in
    ``work`` (its -wal beside it): SQLite reads the missing end of that page as zeros, and rows cut
    through came back with their texts cut off and filled with NUL characters."""
    with open(kept, "rb") as f:
        size = _page_size(f.read(100))
    length = kept.stat().st_size
    if not size or not length % size:
        return kept
    copy = work / "whole-pages.sqlite3"
    with open(kept, "rb") as source, open(copy, "wb") as target:
        shutil.copyfileobj(source, target)
        target.truncate(length - length % size)
    if Path(f"{kept}-wal").is_file():
        shutil.copyfile(f"{kept}-wal", f"{copy}-wal")
    return copy


def _rebuild(kept: Path, work: Path, name: str) -> SalvageReport:
    """Read ``kept`` and write what it holds to ``work/name`` (a complete, checked database)."""
    old = _open_read_only(_whole_pages(kept, work))
    try:
        try:
            version = old.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in old.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise SalvageError(f"its list of tables cannot be read ({exc})") from exc
        if version > SCHEMA_VERSION:
            raise SalvageError(f"it was written by a newer Smolchat (schema {version})")
        if version < 1 or not {"conversations", "messages"} <= tables:
            raise SalvageError("it holds no conversations table that can be read")
        new_path = work / name
        new = sqlite3.connect(new_path, isolation_level=None)
        try:
            new.execute("BEGIN")
            for step in range(1, version + 1):
                apply_migration(new, step)
            report = _copy_rows(old, new, version)
            new.execute("COMMIT")
        finally:
            new.close()
    finally:
        old.close()
    if not report.chats and not report.messages and not sum(n for n, _ in report.other_rows.values()):
        raise SalvageError("no conversation or message could be read")
    store = Store(work, recover=False)  # the store's own path: migrations to the current schema, WAL
    try:
        problems = [r[0] for r in store.db.execute("PRAGMA integrity_check")] + [
            str(tuple(r)) for r in store.db.execute("PRAGMA foreign_key_check")]
        if problems != ["ok"]:
            raise SalvageError(f"the rebuilt database does not check out: {'; '.join(problems)}")
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the main file, which is moved
    finally:
        store.close()
    if Path(f"{new_path}-wal").exists() and Path(f"{new_path}-wal").stat().st_size:
        raise SalvageError("the rebuilt database could not be written back from its journal")
    return report


# -- reading ------------------------------------------------------------------------------------------
def _columns(db: sqlite3.Connection, table: str) -> list[tuple[str, str, bool]]:
    """``(name, declared type, NOT NULL)`` of each column of ``table``."""
    return [(r[1], r[2].upper(), bool(r[3])) for r in db.execute(f'PRAGMA table_info("{table}")')]


def _try(db: sqlite3.Connection, sql: str, args: tuple = ()):
    """The first value of ``sql``'s first row, or None when it cannot be read."""
    try:
        row = db.execute(sql, args).fetchone()
    except sqlite3.DatabaseError:
        return None
    return row[0] if row else None


def _indexes(db: sqlite3.Connection, table: str) -> list[str]:
    try:
        return [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", (table,))]
    except sqlite3.DatabaseError:
        return []


def _claimed_rowids(db: sqlite3.Connection, table: str, referenced_by: list[tuple[str, str]]) -> tuple[set[int], bool]:
    """The rowids ``table`` says it has, from whatever still reads: each of its indexes holds every row's
    rowid (their pages are not the table's, so they often survive it), and other tables' columns that refer
    to it (``referenced_by``: (table, column)) name rows it must have had. Returns (rowids, complete): complete
    when one index could be read whole, so no other row can exist."""
    found: set[int] = set()
    complete = False
    for index in _indexes(db, table):
        try:
            for (rowid,) in db.execute(f'SELECT rowid FROM "{table}" INDEXED BY "{index}"'):
                found.add(rowid)
            complete = True
        except sqlite3.DatabaseError:
            pass  # keeps what was read before the damaged page
    for other, column in referenced_by:
        try:
            for (value,) in db.execute(f'SELECT DISTINCT "{column}" FROM "{other}"'):
                if isinstance(value, int):
                    found.add(value)
        except sqlite3.DatabaseError:
            pass
    return found, complete


def _read_rows(db: sqlite3.Connection, table: str, columns: list[str], claimed: set[int], complete: bool) -> list[tuple]:
    """Every readable row of ``table`` as ``(rowid, *columns)``, in rowid order.

    Rows are read in windows of rowids. A window that fails is halved until the rows that cannot be read
    are single rowids, each lost alone. A damaged page can also end a scan *without* an error (a cell of
    random bytes whose rowid is past the window), so a window read is continued by a fresh seek after the
    last row it gave; each ``claimed`` rowid still missing is then looked up by itself. Where no index
    could be read whole (not ``complete``), a window that comes back empty is halved too, and windows go
    on :data:`SEARCH_PAST_LAST` rowids past the last row found."""
    select = ", ".join(f'"{c}"' for c in columns)
    sql = f'SELECT rowid, {select} FROM "{table}" WHERE rowid BETWEEN ? AND ? ORDER BY rowid'
    # One rowid is read by equality: a range scan steps on to the next cell to see that it is past the
    # end, and that cell can be on the damaged page (the last row before it would be lost with it).
    one = f'SELECT rowid, {select} FROM "{table}" WHERE rowid = ?'
    rows: dict[int, tuple] = {}

    def window(lo: int, hi: int) -> None:
        try:
            got = db.execute(sql, (lo, hi)) if lo < hi else db.execute(one, (lo,))
            got = [r for r in got.fetchall() if lo <= r[0] <= hi]
        except sqlite3.DatabaseError:  # "malformed", or text that is not UTF-8: narrow it down
            got = None
        for r in got or ():
            rows.setdefault(r[0], r)  # (a garbage cell may repeat a rowid: the first read is the seek's)
        if got:
            if max(r[0] for r in got) < hi:
                window(max(r[0] for r in got) + 1, hi)
        elif lo < hi and (got is None or not complete):
            middle = (lo + hi) // 2
            window(lo, middle)
            window(middle + 1, hi)

    top = max(claimed) if claimed else None
    if not complete:  # the table's own last page may say more (or be the damaged one)
        top = max(filter(None, (top, _try(db, f'SELECT max(rowid) FROM "{table}"'))), default=None)
    lo = min(1, _try(db, f'SELECT min(rowid) FROM "{table}"') or 1)  # our ids start at 1
    last = lo
    while lo <= (top if complete else max(top or 0, last + SEARCH_PAST_LAST)):
        window(lo, lo + WINDOW - 1 if top is None or not complete else min(lo + WINDOW - 1, top))
        last = max(rows, default=last)
        lo += WINDOW
    for rowid in sorted(claimed - rows.keys()):
        window(rowid, rowid)
    return [rows[k] for k in sorted(rows)]


# -- reading the pages themselves ------------------------------------------------------------------
# Where a table's root or inner pages are damaged, SQLite cannot reach its leaf pages, though they hold
# the rows and may be intact (trial 69 F3: "0 of 40 messages" with 5 intact leaves). Those rows are
# read from the file's pages directly, as SQLite's own recovery does, following the file format
# (https://www.sqlite.org/fileformat2.html: sections 1.3 the header, 1.6 b-tree pages, 2.1 records,
# 4 the WAL), and only for rowids an index or another table says exist: a freed page may still hold
# rows deleted long ago.


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``data[at:]`` (1-9 bytes, big-endian, 7 bits a byte, all 8 of the ninth) and where
    it ends. IndexError past the end of ``data``."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def _record(payload: bytes) -> list | None:
    """The values of a record (file format 2.1), or None when ``payload`` is not one."""
    try:
        size, at = _varint(payload, 0)
        if not 0 < size <= len(payload):
            return None
        kinds = []
        while at < size:
            kind, at = _varint(payload, at)
            kinds.append(kind)
        values, at = [], size
        for kind in kinds:
            if kind == 0:
                values.append(None)
            elif 1 <= kind <= 6:
                width = (1, 2, 3, 4, 6, 8)[kind - 1]
                if at + width > len(payload):
                    return None
                values.append(int.from_bytes(payload[at:at + width], "big", signed=True))
                at += width
            elif kind == 7:
                if at + 8 > len(payload):
                    return None
                values.append(struct.unpack(">d", payload[at:at + 8])[0])
                at += 8
            elif kind in (8, 9):
                values.append(kind - 8)
            elif kind >= 12:
                width = (kind - 12) // 2 if kind % 2 == 0 else (kind - 13) // 2
                if at + width > len(payload):
                    return None
                chunk = payload[at:at + width]
                values.append(bytes(chunk) if kind % 2 == 0 else str(chunk, "utf-8"))
                at += width
            else:
                return None
        return values
    except (IndexError, UnicodeDecodeError, struct.error):
        return None


def _pages(path: Path) -> tuple[dict[int, memoryview], int]:
    """The database's pages by number (its -wal's latest frames over the main file's, as SQLite reads
    them; views of the files read once, not copies: a database may be hundreds of MB) and the usable
    size of a page."""
    data = memoryview(path.read_bytes())
    size = _page_size(data)
    if not size:
        return {}, 0
    usable = size - data[20]
    pages = {n + 1: data[n * size:(n + 1) * size] for n in range(len(data) // size)}
    wal = Path(f"{path}-wal")
    if wal.is_file():
        frames = memoryview(wal.read_bytes())
        # After its 32-byte header (salts at 16-23), each frame: its page number, the database's size
        # in pages (not 0: it ends a transaction), the header's salts (other salts: a frame left from
        # before the log was restarted, older than the main file), a checksum, then the page. Frames
        # count once their transaction's last frame is there, as SQLite reads them.
        salts, at, pending = frames[16:24], 32, {}
        while at + 24 + size <= len(frames) and frames[at + 8:at + 16] == salts:
            number = int.from_bytes(frames[at:at + 4], "big")
            pending[number] = frames[at + 24:at + 24 + size]
            if int.from_bytes(frames[at + 4:at + 8], "big"):
                pages.update(pending)
                pending = {}
            at += 24 + size
    return pages, usable


def _leaf_cells(pages: dict[int, memoryview], usable: int):
    """``(rowid, values)`` of every cell of every table-leaf page (type 13) that reads as a record,
    overflow pages followed (file format 1.6: what a cell keeps on its page, and the chain of the rest)."""
    most_local = usable - 35
    least_local = (usable - 12) * 32 // 255 - 23
    for number, page in pages.items():
        head = 100 if number == 1 else 0
        if len(page) < head + 8 or page[head] != 13:
            continue
        cells = int.from_bytes(page[head + 3:head + 5], "big")
        for i in range(min(cells, (len(page) - head - 8) // 2)):
            try:
                at = int.from_bytes(page[head + 8 + 2 * i:head + 10 + 2 * i], "big")
                length, at = _varint(page, at)
                rowid, at = _varint(page, at)
                if rowid >= 1 << 63:
                    rowid -= 1 << 64
                if length <= most_local:
                    payload = page[at:at + length]
                else:
                    local = least_local + (length - least_local) % (usable - 4)
                    local = local if local <= most_local else least_local
                    payload = bytearray(page[at:at + local])
                    following = int.from_bytes(page[at + local:at + local + 4], "big")
                    seen = set()
                    while len(payload) < length and following in pages and following not in seen:
                        seen.add(following)
                        overflow = pages[following]
                        payload += overflow[4:min(usable, 4 + length - len(payload))]
                        following = int.from_bytes(overflow[:4], "big")
                    payload = bytes(payload)
                if len(payload) != length:
                    continue
            except IndexError:
                continue
            values = _record(payload)
            if values is not None:
                yield rowid, values


def _defaults(db: sqlite3.Connection, table: str) -> dict:
    """The default value of each of ``table``'s columns that declares one (SQL literals: read by SQLite)."""
    defaults = {}
    try:
        for _cid, name, _kind, _not_null, literal, _key in db.execute(f'PRAGMA table_info("{table}")'):
            if literal is not None:
                defaults[name] = db.execute(f"SELECT {literal}").fetchone()[0]
    except sqlite3.Error:
        pass
    return defaults


def _rows_from_pages(path: Path, table: str, names: list[str], shape: list[tuple[str, str, bool]],
                     wanted: set[int], defaults: dict) -> dict[int, tuple]:
    """Rows of ``table`` read from its leaf pages directly: ``{rowid: (rowid, *columns)}`` for each of
    the ``wanted`` rowids found in a cell whose values fit the table's columns (``shape``: those of
    ``names``, in table order; a record written before a column was added lacks it, and gets its
    ``defaults`` value). The table's INTEGER PRIMARY KEY column is stored as NULL: the rowid."""
    if not wanted:
        return {}
    try:
        pages, usable = _pages(path)
    except OSError:
        return {}
    found: dict[int, tuple] = {}
    for rowid, values in _leaf_cells(pages, usable):
        if rowid not in wanted or rowid in found or len(values) > len(names) or not values or values[0] is not None:
            continue
        row = {**{n: defaults.get(n) for n in names[len(values):]}, **dict(zip(names, values)), names[0]: rowid}
        if not _fits(row, shape):
            continue
        found[rowid] = (rowid, *(row.get(n) for n in names))
    return found


def _fits(row: dict, columns: list[tuple[str, str, bool]]) -> bool:
    """Whether ``row`` holds values of its columns' declared kinds: a damaged page can hand out cells of
    random bytes that SQLite does not notice, and those are not the user's messages."""
    for name, kind, not_null in columns:
        value = row.get(name)
        if value is None:
            if not_null:
                return False
        elif "INT" in kind and (not isinstance(value, int) or isinstance(value, bool)):
            return False
        elif kind == "REAL" and not isinstance(value, int | float):
            return False
        elif kind == "TEXT" and not isinstance(value, str):
            return False
    return True


def _claimed(db: sqlite3.Connection, sql: str) -> int | None:
    value = _try(db, sql)
    return value if isinstance(value, int) else None


def _copy_rows(old: sqlite3.Connection, new: sqlite3.Connection, version: int) -> SalvageReport:
    """Copy every readable row of every table of the schema from ``old`` to ``new`` (mending the tree of
    messages as the module docstring says); returns the counts."""
    report = SalvageReport(Path())
    # What the damaged file claims: soft-deleted chats (and their messages) are gone at the next start anyway.
    report.claimed_chats = _claimed(old, "SELECT count(*) FROM conversations WHERE deleted IS NULL"
                                    if version >= 2 else "SELECT count(*) FROM conversations")
    report.claimed_messages = _claimed(
        old, "SELECT count(*) FROM messages WHERE conversation_id NOT IN "
             "(SELECT id FROM conversations WHERE deleted IS NOT NULL)" if version >= 2 else
             "SELECT count(*) FROM messages")

    tables = [r[0] for r in new.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                        "AND name NOT LIKE 'sqlite_%' ORDER BY rootpage")]
    old_tables = {r[0] for r in old.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    read: dict[str, list[dict]] = {}
    shapes: dict[str, list[tuple[str, str, bool]]] = {}
    cut: set[tuple[str, int]] = set()  # (table, id of the row read) of texts with zeros replaced
    for table in tables:
        if table not in old_tables:
            continue
        shape = _columns(new, table)
        have = {c[0] for c in _columns(old, table)}
        shape = [c for c in shape if c[0] in have]
        names = [c[0] for c in shape]
        referenced_by = []
        for other in old_tables:
            try:
                referenced_by += [(other, fk[3]) for fk in old.execute(f'PRAGMA foreign_key_list("{other}")')
                                  if fk[2] == table and fk[3] != fk[4]]
            except sqlite3.DatabaseError:
                pass
        claimed, complete = _claimed_rowids(old, table, referenced_by)
        got = _read_rows(old, table, names, claimed, complete)
        unread = claimed - {r[0] for r in got}
        if unread:  # behind a damaged inner page, perhaps on leaves that are whole
            path = Path(old.execute("PRAGMA database_list").fetchone()[2])
            got += _rows_from_pages(path, table, names, shape, unread, _defaults(old, table)).values()
            got.sort(key=lambda r: r[0])
        rows = [dict(zip(names, r[1:])) for r in got]
        read[table] = [r for r in rows if _fits(r, shape)]
        for row in read[table]:
            for name, value in row.items():
                if isinstance(value, str) and "\x00" * 8 in value:
                    row[name] = _ZEROS.sub(LOST_PART, value)
                    cut.add((table, id(row)))
        shapes[table] = shape

    chats = [c for c in read["conversations"] if c.get("deleted") is None]
    deleted = {c["id"] for c in read["conversations"] if c.get("deleted") is not None}
    messages = [m for m in read["messages"] if m["conversation_id"] not in deleted]
    if any(c[0] == "parent_id" for c in shapes["messages"]):  # (schema 4 on: before, the order is the tree)
        _mend_tree(old, messages)
    rebuilt = _rebuild_chats(chats, messages)

    for table in tables:
        if table not in read:
            continue
        rows = {"conversations": chats + rebuilt, "messages": messages}.get(table, read[table])
        names = [c[0] for c in shapes[table]]
        sql = f'INSERT INTO "{table}" ({", ".join(names)}) VALUES ({", ".join("?" * len(names))})'
        copied = 0
        for row in rows:
            try:
                new.execute(sql, tuple(row.get(n) for n in names))
                copied += 1
            except sqlite3.IntegrityError:
                pass  # e.g. a garbage cell whose rowid repeats a real one: the real one was first
        if table == "conversations":
            report.chats = copied
        elif table == "messages":
            report.messages = copied
        else:
            report.other_rows[table] = (copied, _claimed(old, f'SELECT count(*) FROM "{table}"'))
    report.rebuilt = len(rebuilt)
    report.cut = sum(1 for m in messages if ("messages", id(m)) in cut)
    return report


def _mend_tree(old: sqlite3.Connection, messages: list[dict]) -> None:
    """Give each message whose parent was lost the nearest surviving ancestor as parent (None: it starts its
    chat), then make exactly one message selected among each set of siblings (the store's invariant):
    the selected one whose parent did not change (it is the version that was shown there), else the
    newest selected one, else the newest."""
    alive = {m["id"]: m for m in messages}
    # Who followed whom, also for rows that were lost: messages_by_parent holds (chat, parent, rowid).
    parent_of: dict[int, int | None] = {}
    try:
        for rowid, parent in old.execute("SELECT rowid, parent_id FROM messages INDEXED BY messages_by_parent"):
            parent_of[rowid] = parent
    except sqlite3.DatabaseError:
        for chat in {m["conversation_id"] for m in messages}:  # what can be read of it, chat by chat
            try:
                for rowid, parent in old.execute("SELECT rowid, parent_id FROM messages INDEXED BY messages_by_parent "
                                                 "WHERE conversation_id = ?", (chat,)):
                    parent_of[rowid] = parent
            except sqlite3.DatabaseError:
                pass
    parent_of.update({m["id"]: m["parent_id"] for m in messages})
    moved = set()
    for m in messages:
        parent, seen = m["parent_id"], set()
        while parent is not None and parent not in alive and parent not in seen:
            seen.add(parent)
            parent = parent_of.get(parent)  # unknown: None, the message starts its chat
        if parent in seen or (parent is not None and alive[parent]["conversation_id"] != m["conversation_id"]):
            parent = None
        if parent != m["parent_id"]:
            m["parent_id"] = parent
            moved.add(m["id"])
    siblings: dict[tuple[int, int | None], list[dict]] = {}
    for m in messages:
        siblings.setdefault((m["conversation_id"], m["parent_id"]), []).append(m)
    for group in siblings.values():
        chosen = [m for m in group if m["selected"]]
        keep = max(chosen, key=lambda m: (m["id"] not in moved, m["id"])) if chosen else max(group, key=lambda m: m["id"])
        for m in group:
            m["selected"] = int(m is keep)


def _rebuild_chats(chats: list[dict], messages: list[dict]) -> list[dict]:
    """A chat row, with its old id, for each chat whose messages survive but whose own row was lost."""
    known = {c["id"] for c in chats}
    orphans: dict[int, list[dict]] = {}
    for m in messages:
        if m["conversation_id"] not in known:
            orphans.setdefault(m["conversation_id"], []).append(m)
    rebuilt = []
    for chat, rows in sorted(orphans.items()):
        first = next((m["text"] for m in rows if m.get("role") == "user" and str(m.get("text") or "").strip()), "")
        words = " ".join(str(first).split())
        title = f"{RECOVERED_TITLE}: {words[:40]}…" if len(words) > 40 else f"{RECOVERED_TITLE}: {words}" if words \
            else RECOVERED_TITLE
        created = [m["created"] for m in rows if isinstance(m.get("created"), int | float)] or [time.time()]
        rebuilt.append({"id": chat, "title": title, "created": min(created), "updated": max(created), "model": "",
                        "settings": "{}", "deleted": None})
    return rebuilt
