"""File ▸ Import chat: a conversation exported as JSON (:func:`app.export.export_json`, any version
1-4) becomes a new chat, every version of every message with the branch that was shown, its images
and videos put into the store: from the export itself (version 4 holds them, a backup that outlives
the chat), else copied from the paths it names (versions 1-3 only name them).

A file that is not such an export, or is damaged, is refused with what is wrong and changes nothing;
a file the export names that is gone (deleted with its chat since, or an export from another
computer) is left out of its message and named, the message kept; so is one that is no image or
video Smolchat can read (an export is a file anyone can write: it must not copy other files of this
computer into the data folder), and one held in the export that is damaged or too large.
The chat's settings are kept as written; :func:`app.settings.chat_values` checks them when the
chat is opened, as any stored chat's."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from app.conversations import STORAGE_ERRORS, display_title
from app.store import MEDIA_SUFFIXES, ROLES, Store, clean_stats, is_time

FORMAT = "smolchat-conversation"
NEWEST = 4  # the export version this Smolchat writes (app/export.py)
#: The photos and videos an export holds, together (what is left over is only named). The whole file is
#: read into memory, and decoded: a bound keeps an Import of a chat with long videos to a few GB at most.
MAX_EMBEDDED_BYTES = 256 * 2**20
#: The largest export read: the files' base64 (4 bytes for 3) and as much text again as an export held
#: before it held files (256 MB); a larger file is not an export.
MAX_BYTES = 640 * 2**20
#: From this size on, the import dialog shows while the file is read (~0.1 s per 10 MB on 2 cores).
SHOWN_READING_BYTES = 16 * 2**20
#: From this many messages on, the import dialog shows at once (1,000: ~1 s on 2 cores); a shorter
#: import shows it after half a second, if it is still going.
SHOWN_AT_ONCE_MESSAGES = 1000
STATUSES = ("done", "interrupted", "cancelled", "length", "error")  # app.store.Message.status, at rest


class ImportProblem(ValueError):
    """The file cannot be imported; the message says why, naming the file."""


@dataclass
class Imported:
    conversation_id: int
    title: str
    messages: int
    missing: list[str] = field(default_factory=list)  # names of images/videos not found
    refused: list[str] = field(default_factory=list)  # names of files that are no readable image or video
    damaged: list[str] = field(default_factory=list)  # names of files held in the export whose data is not base64
    too_large: list[str] = field(default_factory=list)  # names of held files past MAX_EMBEDDED_BYTES together
    replaced: int = 0  # lone surrogates (half a UTF-16 pair, no character) replaced by U+FFFD
    same_as: list[str] = field(default_factory=list)  # titles of the chats already holding the same messages
    differ: int = 0  # messages of the branch shown ("messages") whose text is not that of "all_messages"


def read_export(path: str | Path) -> dict:
    """The export in ``path``, checked; :class:`ImportProblem` when it is not one Smolchat can read."""
    path = Path(path)
    name = path.name
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ImportProblem(f"{name} is {path.stat().st_size / 2**20:,.0f} MB: too large for a chat export")
        content = path.read_bytes()
        if not content or content.isspace():  # (strip() would copy a file of hundreds of MB)
            raise ImportProblem(f"{name} is empty")
        encoding = _encoding(content)
        raw = content.decode(encoding)
        if path.suffix.lower() in (".md", ".markdown") or raw.lstrip().startswith("#"):
            raise ImportProblem(f"{name} is a Markdown export: Import reads the JSON one (File ▸ Export chat as JSON)")
        data = json.loads(raw)
    except UnicodeDecodeError as exc:
        if encoding != "utf-8-sig":
            raise ImportProblem(f"{name} is damaged UTF-16 text (byte {exc.start} cannot be read)") from None
        raise ImportProblem(f"{name} is not a text file (byte {exc.start} is not UTF-8)") from None
    except json.JSONDecodeError as exc:
        raise ImportProblem(f"{name} is not valid JSON ({_json_problem(exc)})") from None
    except RecursionError:
        raise ImportProblem(f"{name} is nested too deeply to be a chat export") from None
    except OSError as exc:
        raise ImportProblem(f"{name} cannot be read: {exc.strerror or exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ImportProblem(f"{name} is not a chat exported by Smolchat (File ▸ Export chat as JSON)")
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ImportProblem(f"{name} is damaged: its format version is {str(version)[:20]!r}, not a whole number")
    if version > NEWEST:
        raise ImportProblem(f"{name} was exported by a newer Smolchat (format version {version}); "
                            "update Smolchat to import it")
    messages = data.get("all_messages") if version >= 2 else data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ImportProblem(f"{name} holds no messages")
    for number, entry in enumerate(messages, 1):
        problem = _entry_problem(entry, version)
        if problem:
            raise ImportProblem(f"{name} is damaged: message {number} {problem}")
    if not isinstance(data.get("files") or {}, dict):  # (absent or null: an export that holds none)
        raise ImportProblem(f"{name} is damaged: its photos and videos (\"files\") are not a JSON object of "
                            "names and contents")
    return data


def _encoding(content: bytes) -> str:
    """The encoding of an export's bytes: UTF-8 (a byte order mark read past: Notepad's), or UTF-16, which
    Windows' Notepad writes as "Unicode" (trial 62: such a file was "not a text file"), told by its byte
    order mark, else by the zero byte beside the first character of a file that starts with ``{``."""
    if content.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if content[:2] == b"{\x00":
        return "utf-16-le"
    if content[:2] == b"\x00{":
        return "utf-16-be"
    return "utf-8-sig"


def _json_problem(exc: json.JSONDecodeError) -> str:
    """Where and what is wrong in an export that is not JSON, as a whole phrase: Python's message for a
    text left open ends in a dangling "starting at" (trial 62), and a file that stops early is most
    likely cut short (a copy or a download that did not finish)."""
    where = f"line {exc.lineno}, column {exc.colno}"
    if exc.msg.startswith("Unterminated string"):
        return f"it ends in the middle of a text begun at {where}: cut short?"
    if not exc.doc[exc.pos:].strip():
        return f"it ends at {where} before the chat does: cut short?"
    if exc.msg.startswith("Invalid control character"):
        return f"{where}: a line break or other control character inside a text"
    return f"{where}: {exc.msg}"


def _entry_problem(entry, version: int) -> str:
    if not isinstance(entry, dict):
        return "is not an object"
    if entry.get("role") not in ROLES:
        return f"has the role {entry.get('role')!r} (user or assistant expected)"
    if not isinstance(entry.get("text", ""), str):
        return "has a text that is not a string"
    images = entry.get("images", [])
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        return "has images that are not a list of paths"
    if version >= 2 and (not isinstance(entry.get("id"), int) or isinstance(entry.get("id"), bool)):
        return "has no id"
    parent = entry.get("parent_id")
    if version >= 2 and parent is not None and (not isinstance(parent, int) or isinstance(parent, bool)):
        return "follows something that is not a message id"
    return ""


class ImportCancelled(Exception):
    """The user cancelled an import part-way (nothing of it is kept)."""


def import_chat(store: Store, path: str | Path, progress=None) -> Imported:
    """Add the chat exported in ``path`` to ``store`` as a new conversation. Raises
    :class:`ImportProblem` (the file), or the store's errors (``STORAGE_ERRORS``: a full disk, a
    read-only store); either way nothing is left behind. ``progress(done, total)``, when given, is
    called every 100 messages and may return False to cancel (:class:`ImportCancelled`)."""
    data = read_export(path)
    replaced = _replace_lone_surrogates(data)
    version = data.get("version", 1)
    entries = data["all_messages"] if version >= 2 else data["messages"]
    title = clean_title(data.get("title")) if isinstance(data.get("title"), str) else ""
    settings = data.get("settings") if isinstance(data.get("settings"), dict) else {}
    model = data.get("model") if isinstance(data.get("model"), str) else ""
    try:
        ordered = _parents_first(entries, version)
    except ImportProblem as exc:
        raise ImportProblem(f"{Path(path).name} is damaged: {exc}") from None
    conv = store.create_conversation(title or clean_title(Path(path).stem), model, settings)
    media = _Media(store, data.get("files") or {})
    try:
        # Hidden until it is whole, as a deleted chat is: one that a kill or a power cut stopped half way
        # is then purged at the next start, never listed as the chat (trial 74 F2: 7,676 of 10,002
        # messages, listed first, its shown branch 4 messages long).
        store.delete_conversation(conv.id)
        ids: dict[int, int] = {}
        previous = None
        # A time after now (a day's slack for clocks and time zones) is no time the message was written:
        # dated at the import, as an unreadable one, or the chat stays above every new one (trial 79 P4:
        # "10 Mar 5107", first under "Today").
        latest = time.time() + 86_400
        for done, entry in enumerate(ordered):
            if progress is not None and done % 100 == 0 and progress(done, len(ordered)) is False:
                raise ImportCancelled
            if version >= 2:
                parent = entry.get("parent_id")
                parent_id = ids.get(parent) if parent is not None else None
            else:
                parent_id = previous  # version 1: the branch shown, in order
            images, names = media.stored(entry)
            stats = clean_stats(entry.get("stats"))[0] if isinstance(entry.get("stats"), dict) else {}
            status = _status(entry.get("status"))
            created = entry.get("created")
            created = created if is_time(created) and created <= latest else None  # else: now
            message = store.add_message(conv.id, entry["role"], entry.get("text", ""), images, status=status,
                                        stats=stats, parent_id=parent_id, names=names, created=created)
            token_ids = _token_ids(entry.get("token_ids")) if entry["role"] == "assistant" else None
            if token_ids is not None:
                store.update_message(message.id, token_ids=token_ids)
            previous = message.id
            if version >= 2:
                ids[entry["id"]] = message.id
        shown = data.get("messages") if version >= 2 and isinstance(data.get("messages"), list) else []
        texts = {entry["id"]: entry.get("text", "") for entry in entries} if version >= 2 else {}
        differ = 0
        for entry in shown:  # the branch that was shown; anything else in that list is passed over
            message_id = entry.get("id") if isinstance(entry, dict) else None
            if isinstance(message_id, int) and message_id in ids:
                store.select(ids[message_id])
                # An export holds the branch shown twice; a hand edit of this copy is not read (said).
                differ += isinstance(entry.get("text"), str) and entry["text"] != texts.get(message_id)
        store.date_by_messages(conv.id)
        store.undelete_conversation(conv.id)
        same_as = _same_messages(store, conv.id)
    except BaseException:
        with contextlib.suppress(*STORAGE_ERRORS):
            store.delete_conversation(conv.id)  # half a chat is not kept, whatever stopped it
        raise
    finally:
        media.close()
    return Imported(conv.id, store.conversation(conv.id).title, len(entries), missing=media.missing,
                    refused=media.refused, damaged=media.damaged, too_large=media.too_large, replaced=replaced,
                    same_as=same_as, differ=differ)


#: Invisible marks that set the direction of the text beside them (LRM, RLM, ALM); :func:`display_title`
#: takes out the embeddings, overrides and isolates.
_DIRECTION_MARKS = dict.fromkeys([0x200E, 0x200F, 0x061C])


def clean_title(title: str) -> str:
    """An imported chat's title as a title made from a message is (:func:`app.conversations.title_from`):
    one line without bidi controls or direction marks, and without control characters (each a space).
    A right-to-left override in a hand-made title turned the import banner's own words around and
    disguised a name in the chat list ("… gnp.exe" for "exe.png": trial 62). Its length is kept: a
    title renamed to a long one comes back as it was (the banner and the list shorten it)."""
    title = display_title(title).translate(_DIRECTION_MARKS)
    return " ".join("".join(" " if unicodedata.category(c) == "Cc" else c for c in title).split())


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_lone_surrogates(data) -> int:
    """Replace, in every text of ``data`` (keys too), each lone surrogate with U+FFFD and return how
    many there were. JSON's ``\\ud800`` escape, which JavaScript's ``JSON.stringify`` writes for half
    of a cut emoji, reads as one; it is no character, and SQLite's UTF-8 refuses it: one in one
    message refused the whole chat with a UnicodeEncodeError (trial 62). (A whole pair reads as the
    one character it stands for.) A loop, not a recursion: the file's nesting is as deep as it is."""
    count = 0

    def clean(text: str) -> str:
        nonlocal count
        if text.isascii():
            return text
        fixed, n = _LONE_SURROGATE.subn("\ufffd", text)
        count += n
        return fixed

    pending = [data]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for key, value in list(node.items()):
                if isinstance(value, str):
                    value = clean(value)
                elif isinstance(value, (dict, list)):
                    pending.append(value)
                fixed = clean(key)
                if fixed != key:
                    del node[key]
                node[fixed] = value
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if isinstance(value, str):
                    node[index] = clean(value)
                elif isinstance(value, (dict, list)):
                    pending.append(value)
    return count


_NUMBERED = re.compile(r" \((\d+)\)$")


def _same_messages(store: Store, conversation_id: int) -> list[str]:
    """The titles of the other chats of the same title (a number such as " (2)" after it aside) that hold
    the same messages as the one just imported, oldest first; when there are some, that one is renamed
    "<title> (2)", "(3)"...: importing a file twice made rows no one could tell apart (trial 62).

    Compared by title first: reading every chat's messages would take seconds in a large store (a chat
    renamed since its export is not found)."""
    title = store.conversation(conversation_id).title
    base = _NUMBERED.sub("", title)
    others = [c for c in reversed(store.conversations()) if c.id != conversation_id and
              _NUMBERED.sub("", display_title(c.title)) == base]
    if not others:
        return []
    def messages(chat: int) -> list[tuple[str, str]]:  # every version, in any order
        return store.message_contents(chat) or sorted((m.role, m.text) for m in store.all_messages(chat))

    count = store.message_count(conversation_id)
    mine = messages(conversation_id)
    same = [c for c in others if store.message_count(c.id) == count and messages(c.id) == mine]
    if same:
        taken = {c.title for c in others}
        number = 2
        while f"{base} ({number})" in taken:
            number += 1
        store.rename_conversation(conversation_id, f"{base} ({number})")
    return [display_title(c.title) for c in same]


def _token_ids(value) -> list[int] | None:
    """An exported answer's ``token_ids`` ("7454 2402 253"), None where absent or not ids (its text is
    then read again, as an answer of another model's is: nothing is refused for it)."""
    if not isinstance(value, str):
        return None
    parts = value.split()
    if not parts or not all(part.isascii() and part.isdigit() and len(part) <= 9 for part in parts):
        return None  # (none: an answer of no ids has no text; taken as its ids, Continue wrote it twice)
    return [int(part) for part in parts]


def _status(value) -> str:
    """A stored answer's status: an answer exported while it streamed is one a quit interrupted (it
    can be continued); a word Smolchat does not know, "done"."""
    if value == "streaming":
        return "interrupted"
    return value if value in STATUSES else "done"


def _parents_first(entries: list[dict], version: int) -> list[dict]:
    """``entries`` with every message after the one it follows (an export lists them by id, which
    is already so; a hand-edited file need not be): the first messages, then the messages that follow
    them, and so on, each generation in the file's order. A message whose parent is not in the file,
    or that is its own ancestor, makes the file damaged (the first such in the file is named).

    A walk from the first messages down through each one's followers: linear in the messages, where
    a pass over those still waiting for each one is quadratic (4.8 s for a 10,000-message chat)."""
    if version < 2:
        return entries
    known = {e["id"] for e in entries}
    if len(known) < len(entries):
        raise ImportProblem("two messages have the same id")
    children: dict[int, list[dict]] = {}
    for entry in entries:
        if entry.get("parent_id") is not None:
            children.setdefault(entry["parent_id"], []).append(entry)
    generation: dict[int, int] = {}  # id -> how many messages it follows
    current, depth = [e for e in entries if e.get("parent_id") is None], 0
    while current:  # ids are unique: each message is reached once, from its one parent
        for entry in current:
            generation[entry["id"]] = depth
        current, depth = [child for entry in current for child in children.get(entry["id"], [])], depth + 1
    stuck = next((e for e in entries if e["id"] not in generation), None)
    if stuck is not None:
        raise ImportProblem(_unreached(stuck, {e["id"]: e for e in entries}))
    generations: list[list[dict]] = [[] for _ in range(depth)]
    for entry in entries:
        generations[generation[entry["id"]]].append(entry)
    return [entry for same in generations for entry in same]


def _unreached(stuck: dict, by_id: dict[int, dict]) -> str:
    """Why ``stuck`` cannot be reached from a first message: up the messages it follows, one follows a
    message not in the file, or some follow one another in a loop (named as such, not as the first
    message's parent following itself, as a loop of two was: trial 62)."""
    chain, seen = [stuck["id"]], {stuck["id"]}
    while True:
        entry = by_id[chain[-1]]
        parent = entry["parent_id"]
        if parent not in by_id:
            return f"the message that message {entry['id']} follows ({parent}) is not in the file"
        if parent in seen:
            loop = sorted(chain[chain.index(parent):])
            if len(loop) == 1:
                return f"message {parent} follows itself"
            listed = (", ".join(map(str, loop[:-1])) + f" and {loop[-1]}" if len(loop) <= 5 else
                      ", ".join(map(str, loop[:4])) + f" and {len(loop) - 4} more")
            return f"messages {listed} follow one another in a loop"
        chain.append(parent)
        seen.add(parent)


class _Media:
    """An import's photos and videos, each put into the store once however many messages show it:
    from the export's ``files`` (base64 by stored name) where it holds them, else from the path
    named; what cannot be is listed by the name it was attached as, and left out."""

    def __init__(self, store: Store, files: dict) -> None:
        self.store = store
        self.files = files
        self.missing: list[str] = []
        self.refused: list[str] = []
        self.damaged: list[str] = []
        self.too_large: list[str] = []
        self._decoded = 0  # bytes of held files decoded so far: together at most MAX_EMBEDDED_BYTES, as exported
        self._done: dict[str, str | None] = {}  # stored name in the export -> stored path here (None: left out)
        self._folder: tempfile.TemporaryDirectory | None = None  # where held files are decoded to be checked

    def stored(self, entry: dict) -> tuple[list[str], list[str]]:
        """The entry's images and videos in the store, with the names they were attached as."""
        names = entry.get("attached_names") if isinstance(entry.get("attached_names"), list) else []
        images, kept_names = [], []
        for index, path in enumerate(entry.get("images", [])):
            name = (names[index] if index < len(names) and isinstance(names[index], str) and names[index]
                    else Path(path).name)
            held = Path(path).name
            if held in self.files:
                if held not in self._done:
                    self._done[held] = self._from_export(held, name)
                stored = self._done[held]
            else:
                stored = self._from_path(path, name)
            if stored is not None:
                images.append(stored)
                kept_names.append(name)
        return images, kept_names

    def _from_path(self, path: str, name: str) -> str | None:
        """The file an export names by its place in Smolchat's data folder (exports before version 3 held
        none), stored. Only that folder is read: a chat file from someone else naming
        ``/home/me/photos/...`` pulled the reader's own photos into the chat, and said which paths exist
        (trial 69 F9); a path elsewhere is not looked at, so the banner says nothing of what exists there
        (it is "not found", as an export's files from another computer are). A name of this store's
        (content-addressed) is its file wherever the export's data folder was."""
        images_dir = self.store.images_dir.resolve()
        try:
            if images_dir not in Path(path).resolve().parents:
                path = str(images_dir / Path(path).name)
            found = Path(path).is_file()
        except (OSError, ValueError):  # a NUL in it, a name past the system's length: no such file
            found = False
        if not found:
            self.missing.append(name)
            return None
        if not _readable_media(path):
            self.refused.append(name)
            return None
        return self.store.store_image(path)

    def _from_export(self, held: str, name: str) -> str | None:
        """The file held in the export under ``held``, decoded, checked as an attachment is, and stored."""
        data = self.files[held]
        suffix = Path(held).suffix.lower()
        if not isinstance(data, str):
            self.damaged.append(name)
            return None
        # (checked before its bytes are decoded into memory; base64 holds 3 bytes in 4 characters)
        if self._decoded + len(data) // 4 * 3 > MAX_EMBEDDED_BYTES:
            self.too_large.append(name)
            return None
        try:
            # Line breaks and spaces are not data (a tool that wraps base64 at 76 characters adds them).
            content = base64.b64decode("".join(data.split()), validate=True)
        except (binascii.Error, ValueError):  # not base64, or not ASCII
            self.damaged.append(name)
            return None
        self._decoded += len(content)
        if suffix not in MEDIA_SUFFIXES:  # it would be stored as ".img", which nothing shows
            self.refused.append(name)
            return None
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="smolchat-import-")
        decoded = Path(self._folder.name) / f"held{len(self._done)}{suffix}"
        decoded.write_bytes(content)
        try:
            if not _readable_media(str(decoded)):
                self.refused.append(name)
                return None
            return self.store.store_image(decoded)
        finally:
            decoded.unlink(missing_ok=True)

    def close(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()


def _readable_media(path: str) -> bool:
    """``path`` is an image Smolchat decodes, or a video whose header PyAV reads."""
    from app.images import InvalidImageError, validate_image
    from app.video_attachments import InvalidVideoError, is_video_file, plan_video

    try:
        plan_video(path) if is_video_file(path) else validate_image(path)
    except (InvalidImageError, InvalidVideoError):
        return False
    return True


def import_dialog(window) -> Imported | None:
    """Ask for an exported chat (JSON), import it and open it; problems show in the banner."""
    from PySide6.QtCore import QEventLoop, Qt
    from PySide6.QtWidgets import QApplication, QFileDialog, QProgressDialog

    from app.conversations import storage_problem

    folder = str(window.qsettings.value("export/folder", "") or "")
    path, _ = QFileDialog.getOpenFileName(window, "Import chat", folder if Path(folder).is_dir() else str(Path.home()),
                                          "Smolchat chat export (*.json);;All files (*)")
    if not path:
        return None
    # A long chat takes seconds (10,000 messages: ~4 s): shown as it goes, and it can be cancelled.
    busy = QProgressDialog("Importing the chat…", "Cancel", 0, 100, window)
    busy.setWindowTitle("Import chat")
    busy.setWindowModality(Qt.WindowModality.WindowModal)
    busy.setMinimumDuration(500)
    with contextlib.suppress(OSError):  # (read_export says what is wrong with a file it cannot read)
        size = Path(path).stat().st_size
        if size >= SHOWN_READING_BYTES:
            # Reading and parsing hold the UI thread at once (a 330 MB export: ~3 s), before the first
            # progress call: the dialog is painted first, saying what it waits for.
            busy.setLabelText(f"Reading {Path(path).name} ({size / 2**20:,.0f} MB)…")
            busy.setRange(0, 0)
            busy.show()
            QApplication.processEvents()

    def progress(done: int, total: int) -> bool:
        if not done:
            busy.setLabelText("Importing the chat…")
            if total >= SHOWN_AT_ONCE_MESSAGES:
                busy.setMinimumDuration(0)
        busy.setMaximum(total)
        busy.setValue(done)  # (processes events while the dialog is up: Cancel can be clicked)
        if not busy.isVisible():
            # Until the dialog shows, the window is still painted and its clock still runs; what the
            # user clicks or types waits (the import is not made to share the window with them).
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
        return not busy.wasCanceled()
    try:
        imported = import_chat(window.store, path, progress)
    except ImportCancelled:
        window.banner.show_info("Import cancelled: nothing of it was kept.")
        return None
    except ImportProblem as exc:
        window.banner.show_error(f"Could not import the chat: {exc}.")
        return None
    except STORAGE_ERRORS as exc:
        window.banner.show_error(f"Could not import the chat: {storage_problem(exc, window.store.folder)}.")
        return None
    except Exception as exc:  # noqa: BLE001 - a shape read_export does not know: said, never a silent failure
        window.banner.show_error(f"Could not import the chat: {Path(path).name} is damaged ({type(exc).__name__}: "
                                 f"{exc}).")
        return None
    finally:
        busy.close()
    window.refresh_sidebar()
    own_notice = False  # the opened chat's notice (settings it cannot use), not what was up before
    if not window._busy:
        shown = window.banner.message()
        window.open_conversation(imported.conversation_id)  # says what of its settings it cannot use
        own_notice = bool(window.banner.message()) and window.banner.message() != shown
    lines = [f"Imported “{_short(imported.title or 'New chat')}” ({imported.messages:,} "
             f"message{'s' if imported.messages != 1 else ''})." + ("" if not window._busy else " It is in the list "
                                                                                           "of chats.")]
    if imported.same_as:
        others = len(imported.same_as) - 1
        lines.append(f"“{_short(imported.same_as[0])}”{f' and {others} more' if others else ''} already "
                     f"{'hold' if others else 'holds'} the same messages: this copy is named “{_short(imported.title)}” "
                     "to tell them apart.")
    if imported.differ:
        lines.append(f"{imported.differ:,} message{'s' if imported.differ != 1 else ''} of the file's “messages” "
                     f"{'differ' if imported.differ != 1 else 'differs'} from “all_messages”: the chat is read from "
                     "“all_messages” (every version of it), so an edit made only in “messages” is not in it.")
    if imported.missing:
        # Not "another computer" alone: a chat deleted since had its files removed from this one's data folder.
        lines.append(f"Not found, so left out: {_names(imported.missing)} (the export only names "
                     f"{'them' if len(set(imported.missing)) > 1 else 'it'}, and "
                     f"{'they are' if len(set(imported.missing)) > 1 else 'it is'} not where it says: removed from "
                     "Smolchat's data folder since the export was made, or the export came from another computer).")
    if imported.refused:
        lines.append(f"Not an image or video Smolchat can read, so left out: {_names(imported.refused)}.")
    if imported.replaced:
        lines.append(f"{imported.replaced:,} broken character{'s' if imported.replaced != 1 else ''} (half of an "
                     f"emoji or the like, as some programs cut them) {'were' if imported.replaced != 1 else 'was'} "
                     "replaced by “\ufffd”.")
    if imported.damaged:
        lines.append(f"Damaged in the export (not base64 data), so left out: {_names(imported.damaged)}.")
    if imported.too_large:
        lines.append(f"Past the {MAX_EMBEDDED_BYTES // 2**20} MB of photos and videos that an export of Smolchat "
                     f"holds, so left out: {_names(imported.too_large)}.")
    if own_notice:  # kept, these under it (not under an unrelated message: trial 79 P6a)
        for line in lines:
            window.banner.add_info(line)
    elif len(lines) > 1:
        window.banner.show_info(" ".join(lines))
    else:
        window.banner.show_success(lines[0])
    return imported


def _short(title: str) -> str:
    """A title as a banner line gives it, not the whole of a hand-made 100,000-character one."""
    return title if len(title) <= 80 else title[:79] + "…"


def _names(names: list[str]) -> str:
    names = list(dict.fromkeys(names))  # a file of several versions of a message is one file
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
