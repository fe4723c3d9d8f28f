"""Export a conversation to Markdown (images and videos copied into folders beside it) or JSON (a
backup: the images and videos are in it, and File ▸ Import chat restores the chat from it).

Both give the branch shown in the window (the active versions). Markdown marks a message that has
other versions ("Version 2 of 3") and lists those versions' text (a question's with its answer) in a
folded ``<details>`` block;
JSON also carries every version of every message with its ``parent_id`` (the whole tree).
"""

from __future__ import annotations

import base64
import errno
import filecmp
import json
import os
import re
import sqlite3
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

from PySide6.QtCore import QStandardPaths, Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressDialog

from app import safe_files
from app.conversations import display_title, storage_problem
from app.import_chat import MAX_EMBEDDED_BYTES
from app.markdown import hard_breaks
from app.store import MEDIA_SUFFIXES, Store
from app.video_attachments import is_video_file

#: Characters Windows refuses in a file name, the path separators of every system among them.
_RESERVED_CHARACTERS = frozenset('<>:"/\\|?*')
#: Names Windows keeps for devices, whatever follows the first dot ("CON.mp4" is the console too).
_DEVICE_NAME = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9¹²³]|LPT[0-9¹²³])", re.IGNORECASE)
#: The longest exported file name in UTF-8 bytes: file systems take 255, and room is left for " (2)" and
#: the temporary name a file is first copied under.
MAX_NAME_BYTES = 120
#: Characters at the end of a long name's stem kept when it is cut: what tells its files apart is often
#: there (a PDF's pages are "<pdf> page 12.png"). At most 96 bytes: with a 16-byte suffix it always fits.
_KEPT_END = 24
#: The most characters, and UTF-8 bytes, that the file name the export proposes takes from the chat's
#: title: enough to tell it by, and a name every file system takes (a 339-character title proposed a name
#: over 255 bytes, and the save dialog greyed out Save with no word why: trial 62).
SUGGESTED_CHARACTERS = 60
SUGGESTED_BYTES = 100
#: What ends a sentence or a clause: dropped from the end of a suggested name ("France?" is "France",
#: not "France_"). Not "#", "+", ")": "C#", "C++" and "(draft)" end as written.
_TRAILING = re.compile(r"[\s.,;:!?…‽¿¡。、，．？！：；\-–—]+$")
#: Characters that Markdown may read as markup in a link's text.
_MARKUP = re.compile(r"([\\`*_\[\]<>&~])")


class ExportCancelled(Exception):
    """The export's ``progress`` callback asked to stop: nothing of it is left behind."""


#: ``progress(done, total)``: how much is done so far, of ``total`` (Markdown: files copied; JSON: bytes
#: of files written into it); False stops the export.
Progress = Callable[[int, int], bool]
#: The bytes of a file read, base64-encoded and written at a time into a JSON export (a multiple of 3,
#: so the pieces' base64 joins into the whole's): between pieces the progress dialog takes clicks, where
#: encoding a 256 MB video at once held the window still for seconds.
JSON_PIECE = 3 << 20


class _Files:
    """Counts the files an export copies or reads for its ``progress`` callback (None: not said)."""

    def __init__(self, messages, progress: Progress | None) -> None:
        self.progress, self.done = progress, 0
        self.total = len({stored for m in messages for stored in m.images})

    def step(self) -> None:
        self.done += 1
        if self.progress is not None and self.progress(self.done, self.total) is False:
            raise ExportCancelled


def export_markdown(store: Store, conversation_id: int, path: str | Path, missing: list[str] | None = None,
                    progress: Progress | None = None) -> Path:
    """Write ``path`` (.md), ``<stem>_images/`` with the conversation's images and ``<stem>_videos/``
    with its videos.

    Each file is exported under the name it was attached as (made safe: :func:`safe_file_name`), a
    second file of a name already given in its folder as ``cat (2).mp4``; a file shown twice is
    exported once. Where that name is unknown (messages stored before names were kept) a video is
    ``video-N`` (the Nth video of the export: a content hash names nothing a reader recognises) and
    an image keeps its stored name. A stored file gone from Smolchat's data folder is named in its
    place as missing, and its name appended to ``missing``. ``progress`` is told of each file copied.

    Raises OSError (and sqlite3.Error from the store), :class:`ExportCancelled`; a failed or cancelled
    export removes the files and folders it had made so far, and leaves the file it would have
    replaced as it was."""
    path = Path(path)
    if path.is_dir():  # found before any image is copied beside it
        raise IsADirectoryError(errno.EISDIR, "a folder of that name is there", str(path))
    images = _ExportFolder(path.with_name(f"{path.stem}_images"), "photos", path.name)
    videos = _ExportFolder(path.with_name(f"{path.stem}_videos"), "videos", path.name)
    try:
        return _write_markdown(store, conversation_id, path, images, videos, missing if missing is not None else [],
                               progress)
    except BaseException:
        images.undo()
        videos.undo()
        raise


def _write_markdown(store: Store, conversation_id: int, path: Path, images: _ExportFolder, videos: _ExportFolder,
                    missing: list[str], progress: Progress | None) -> Path:
    conv = store.conversation(conversation_id)
    shown = store.messages(conversation_id)
    files = _Files(shown, progress)
    lines = [f"# {_heading(display_title(conv.title)) or 'Smolchat conversation'}", ""]
    if conv.settings.get("system_prompt"):  # a quote of as many lines as the prompt has, shown as typed
        quoted = plain_markdown(f"System prompt: {conv.settings['system_prompt']}").split("\n")
        lines += ["\n".join(f"> {line}" if line else ">" for line in quoted), ""]
    versions = store.versions(conversation_id)
    for message in shown:
        who = "You" if message.role == "user" else message.stats.get("model_name") or "Assistant"
        lines += [f"## {_heading(who)}", ""]  # a model's name may hold * _ < #
        number, count = versions.get(message.id, (1, 1))
        if count > 1:
            lines += [f"*Version {number} of {count}*", ""]
        for stored, attached in zip(message.images, message.attached_names):
            if not Path(stored).is_file():
                kind = "video" if is_video_file(stored) else "image"
                missing.append(attached or Path(stored).name)
                lines += [f"*({kind} missing: {_name_text(attached or Path(stored).name)}, gone from Smolchat's "
                          "data folder)*", ""]
            elif is_video_file(stored):  # Markdown has no video syntax: a link to the copied file
                known = stored in videos.names
                name = videos.add(stored, attached, f"video-{len(videos.names) + 1}{Path(stored).suffix}")
                if not known:
                    files.step()
                text = _name_text(attached or name)
                lines += [f"[video: {text}]({_destination(f'{videos.folder.name}/{name}')})", ""]
            else:
                known = stored in images.names
                name = images.add(stored, attached, Path(stored).name)
                if not known:
                    files.step()
                # The alt text a screen reader or a viewer without the file shows: its name, where known.
                alt = _name_text(attached) if attached else "image"
                lines += [f"![{alt}]({_destination(f'{images.folder.name}/{name}')})", ""]
        if message.text:
            lines += [_text_markdown(message), ""]
        if message.status not in ("done", "streaming"):
            lines += [f"*({message.status})*", ""]
        if count > 1:
            lines += _other_versions(store, message)
    # CommonMark (section 2.3) has U+0000 replaced by U+FFFD: a raw NUL made grep and git take the file
    # for a binary one (trial 69 F11).
    text = "\n".join(lines).replace("\x00", "\ufffd")
    return safe_files.write_text(path, text)  # a failure keeps the file being replaced


class _ExportFolder:
    """A folder beside the exported Markdown and the files copied into it, each under one name."""

    def __init__(self, folder: Path, what: str, beside: str) -> None:
        self.folder = folder
        self.what = what  # "photos" or "videos", as the user is told of the folder
        self.beside = beside  # the name of the Markdown file it goes beside
        self.names: dict[str, str] = {}  # stored path -> its name here
        self._taken: set[str] = set()  # the names given, casefolded: Windows and macOS tell no case apart
        self._made_folder = False
        self._copied: list[Path] = []  # files this export put there (not those an older export left)

    def add(self, stored: str, attached: str, fallback: str) -> str:
        """The name ``stored`` (attached as ``attached``, "" if unknown) has in the folder, copied there
        the first time: its attached name made safe, else ``fallback``; numbered when already given."""
        if stored in self.names:
            return self.names[stored]
        if self.folder.is_symlink():  # its files would go wherever the link leads (trial 63)
            raise FileExistsError(errno.EEXIST, f"Smolchat puts the {self.what} in a folder named "
                                  f"“{self.folder.name}” beside {self.beside}, and a link of that name is in the "
                                  "way (move or rename it, or export under another name)")
        if not self.folder.is_dir():
            if self.folder.exists():
                # Not mkdir's "File exists": the user asked for the .md, and is not told of this folder else (trial 62).
                raise FileExistsError(errno.EEXIST, f"Smolchat puts the {self.what} in a folder named "
                                      f"“{self.folder.name}” beside {self.beside}, and a file of that name is in "
                                      "the way (move or rename it, or export under another name)")
            self.folder.mkdir()  # beside the export: its folder is not made, as the export's own file is not
            self._made_folder = True
        # A file already there is never replaced (trial 63: the user's own chelsea.png in a folder of that
        # name became the chat's photo): one of the same bytes (this chat exported before) is used as it is,
        # another takes the next number.
        wanted = _export_name(attached, stored) or fallback
        name = _unique(wanted, self._taken)
        target = self.folder / name
        while target.exists() and not _same_bytes(stored, target):
            name = _unique(wanted, self._taken)
            target = self.folder / name
        if not target.exists():
            safe_files.copy_file(stored, target)  # a failed copy leaves no half file to be kept later
            self._copied.append(target)
        self.names[stored] = name
        return name

    def undo(self) -> None:
        """After a failed export: remove the files it added, and the folder if it made it."""
        for target in self._copied:
            target.unlink(missing_ok=True)
        if self._made_folder:
            try:
                self.folder.rmdir()
            except OSError:  # something else was put there meanwhile: not ours to remove
                pass


def safe_file_name(name: str) -> str:
    """``name`` as a file name that every system takes and that stays in its folder ("" when nothing is
    left): Windows' reserved characters (path separators among them) and control or format characters
    (a right-to-left override would disguise the suffix) become ``_``; no dot or space leads (a hidden
    file) or ends it (Windows drops those); a Windows device name gets a ``_`` before it; and the part
    before the suffix is cut to fit :data:`MAX_NAME_BYTES`, in front of its last characters (they tell
    ``… page 1.png`` from ``… page 2.png``)."""
    if len(name) > 2 * MAX_NAME_BYTES:  # it is cut below anyway; its end holds the suffix
        name = name[:MAX_NAME_BYTES] + name[-MAX_NAME_BYTES:]
    name = "".join("_" if c in _RESERVED_CHARACTERS or unicodedata.category(c) in ("Cc", "Cf", "Cs") else c
                   for c in name)
    name = re.sub(r"^[\s.]+|[\s.]+$", "", name)
    if _DEVICE_NAME.fullmatch(name.split(".")[0].rstrip()):
        name = f"_{name}"
    stem, suffix = os.path.splitext(name)
    if len(suffix) > 16:  # no file type's suffix: a name with a dot in it
        stem, suffix = name, ""
    if len(f"{stem}{suffix}".encode()) > MAX_NAME_BYTES:
        front, end = stem[:-_KEPT_END], stem[-_KEPT_END:]
        while front and len(f"{front}{end}{suffix}".encode()) > MAX_NAME_BYTES:
            front = front[:-1]
        stem = front + end
    return f"{stem.rstrip(' .')}{suffix}" if stem.strip(" .") else ""


def suggested_name(title: str, kind: str) -> str:
    """The file name the export proposes for a chat titled ``title`` (``kind``: md or json): the title
    on one line, cut at a word to :data:`SUGGESTED_CHARACTERS` and :data:`SUGGESTED_BYTES` (a single
    long word at the limit), without what ends a sentence (:data:`_TRAILING`; a title cut to fit the
    sidebar ends in "…", which no file name needs), made safe by :func:`safe_file_name`;
    "conversation" when nothing is left."""
    line = _TRAILING.sub("", " ".join(display_title(title).split()))

    def fits(text: str) -> bool:
        return len(text) <= SUGGESTED_CHARACTERS and len(text.encode()) <= SUGGESTED_BYTES

    if not fits(line):
        words = line.split(" ")
        kept = words[0][:SUGGESTED_CHARACTERS]
        while not fits(kept):  # a long word of letters of several bytes each
            kept = kept[:-1]
        for word in words[1:] if kept == words[0] else []:
            if not fits(f"{kept} {word}"):
                break
            kept = f"{kept} {word}"
        line = _TRAILING.sub("", kept)
    return safe_file_name(f"{line or 'conversation'}.{kind}")


def _export_name(attached: str, stored: str) -> str:
    """The name a file stored as ``stored`` and attached as ``attached`` is exported under ("" when
    unknown): made safe, and ending in the stored file's suffix, which says what it is to the reader."""
    name = safe_file_name(attached)
    suffix = Path(stored).suffix.lower()
    if name and suffix in MEDIA_SUFFIXES and Path(name).suffix.lower() != suffix:
        name = safe_file_name(name + suffix)
    return name


def _same_bytes(stored: str, target: Path) -> bool:
    """``target`` holds the bytes of ``stored`` (what an export of this chat put there before)."""
    try:
        return target.is_file() and filecmp.cmp(stored, target, shallow=False)
    except OSError:
        return False


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``stem (2).suffix``, ``(3)``... when it is ``taken`` (casefolded); the result is taken then."""
    stem, suffix = os.path.splitext(name)
    candidate, number = name, 1
    while candidate.casefold() in taken:
        number += 1
        candidate = f"{stem} ({number}){suffix}"
    taken.add(candidate.casefold())
    return candidate


def _link_text(text: str) -> str:
    """``text`` with a backslash before each character that Markdown may read as markup in a link's text."""
    return _MARKUP.sub(r"\\\1", text)


def _name_text(name: str) -> str:
    """A file's name as the text of a link or an image's alt text: as attached, but for control and
    format characters (a line break would end the line; a right-to-left override would disguise the
    suffix), which become ``_`` as in :func:`safe_file_name`, and markup escaped (:func:`_link_text`)."""
    return _link_text("".join("_" if unicodedata.category(c) in ("Cc", "Cf", "Cs") else c for c in name))


def _heading(text: str) -> str:
    """A one-line title as an ATX heading's text that reads as typed: markup characters escaped as in
    a link's text, and a last ``#`` (which would be read as the heading's closing sequence)."""
    text = _link_text(text)
    return text[:-1] + "\\#" if text.endswith("#") else text


def _destination(link: str) -> str:
    """``link`` (a relative path) as a Markdown link's destination: ``%``, ``#``, ``?`` and ``&``
    percent-encoded (a reader resolves the destination as a URL, where the first three start an
    escape, the fragment and the query, and decodes ``&amp;``-like entity references first), then
    as it is, or within ``<...>`` when it holds a space or a parenthesis (a bare one would end there;
    CommonMark 0.31, "Links"), ``<``, ``>`` and ``\\`` escaped."""
    link = link.replace("%", "%25").replace("#", "%23").replace("?", "%3F").replace("&", "%26")
    if not re.search(r"[\s()<>\\]", link):
        return link
    return "<" + re.sub(r"([<>\\])", r"\\\1", link) + ">"


def plain_markdown(text: str) -> str:
    """A user's plain text as Markdown that shows it as the app does (the app shows it as written).

    Single line breaks are kept (two trailing spaces, which every Markdown reader takes as a hard
    break; a bare newline joins the lines into one), except before a blank line or a fence. A line
    that Markdown would take as a heading (``# ``), a quote (``> ``), a heading's underline (``===``,
    ``---`` under text) or a rule (``***``) gets a backslash before that first character, and so
    does a ``<`` that would start HTML (CommonMark 0.31, "Backslash escapes"), so it reads as typed. Lines in a fenced code
    block (``` or ~~~) are left as they are: a fence is what a user types to show code."""
    lines = text.split("\n")
    out = []
    for i, (line, fence) in enumerate(_fenced(lines)):
        if i == len(lines):  # a fence left open: closed, as close_fences() does
            out.append(fence)
            continue
        if fence:
            out.append(line)
            continue
        line = _literal_start(line)
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and following.strip() and not _fence(following) and not line.endswith("  "):
            line += "  "
        out.append(line)
    return "\n".join(out)


def close_fences(text: str) -> str:
    """Markdown ``text`` with a fenced code block it leaves open closed at its end (an answer stopped
    in the middle of its code, a question with only an opening fence): in an export, an open fence
    would make everything after it, the later messages too, one code block (CommonMark 0.31,
    "Fenced code blocks": it runs to the end of the document)."""
    lines = text.split("\n")
    tail = [fence for i, (_, fence) in enumerate(_fenced(lines)) if i == len(lines)]
    return f"{text}\n{tail[0]}" if tail else text


# A line's start that Markdown reads as structure, after at most 3 spaces: an ATX heading, a block
# quote, a setext underline or thematic break (a line of = or of - * _ with spaces).
_BLOCK_START = re.compile(r"^( {0,3})(#{1,6}(?:[ \t]|$)|>|=+[ \t]*$|([-*_])[ \t]*(?:\3[ \t]*){2,}$|-+[ \t]*$)")
# "<" that starts a tag, a comment or a declaration, which Markdown passes through as HTML.
_HTML_START = re.compile(r"<(?=[A-Za-z/!?])")
_CODE_SPAN = re.compile(r"(`+)(.*?[^`])\1(?!`)")


def _literal_start(line: str) -> str:
    """``line`` with a backslash before the character that would make it a Markdown block, and
    before each ``<`` that would start HTML outside its code spans (`` `<b>` `` shows as typed)."""
    parts, pos = [], 0
    for span in _CODE_SPAN.finditer(line):
        parts += [_HTML_START.sub(r"\\<", line[pos:span.start()]), span.group(0)]
        pos = span.end()
    line = "".join(parts) + _HTML_START.sub(r"\\<", line[pos:])
    match = _BLOCK_START.match(line)
    if not match:
        return line
    indent = match.group(1)
    return indent + "\\" + line[len(indent):]


def _fence(line: str) -> str:
    """The fence a line opens or closes (```` ``` ```` or ``~~~``, 3 or more, indented at most 3 spaces), else ""."""
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return ""
    for char in "`~":
        n = len(stripped) - len(stripped.lstrip(char))
        # A backtick fence's info string holds no backtick ("```a`b" is text with a code span).
        if n >= 3 and not (char == "`" and "`" in stripped[n:]):
            return char * n
    return ""


def _closes(line: str, marker: str, fence: str) -> bool:
    """``line`` (whose :func:`_fence` is ``marker``) closes the open ``fence``: the same character, at
    least as many, nothing after them."""
    return marker.startswith(fence[0]) and len(marker) >= len(fence) and not line.strip()[len(marker):].strip()


def _fenced(lines: list[str]) -> Iterator[tuple[str, str]]:
    """Each of ``lines`` with the fence it belongs to ("" outside fenced code; a fence's own opening and
    closing lines belong to it), then, when the text leaves a fence open, ("", that fence)."""
    fence = ""
    for line in lines:
        marker = _fence(line)
        if fence:
            yield line, fence
            fence = "" if _closes(line, marker, fence) else fence
        elif marker:
            fence = marker
            yield line, fence
        else:
            yield line, ""
    if fence:
        yield "", fence


def _text_markdown(message) -> str:
    """A message's text in the export: a user's plain text shown as typed, an answer's Markdown with
    its line breaks kept as the app shows them (:func:`answer_markdown`), each with the code fence it
    leaves open closed (else every later message would be code)."""
    return plain_markdown(message.text) if message.role == "user" else close_fences(answer_markdown(message.text))


def answer_markdown(text: str) -> str:
    """An answer's Markdown with each line break inside a paragraph written as Markdown's hard break
    (:func:`app.markdown.hard_breaks`), outside fenced code: the app shows a poem line by line, and a
    Markdown viewer ran the exported lines into one paragraph (trial 51)."""
    lines = text.split("\n")
    out, prose = [], []
    for i, (line, fence) in enumerate(_fenced(lines)):
        if i == len(lines):  # (a fence left open: close_fences closes it)
            break
        if not fence:
            prose.append(line)
            continue
        if prose:
            out.append(hard_breaks("\n".join(prose), "  \n"))
            prose = []
        out.append(line)
    if prose:
        out.append(hard_breaks("\n".join(prose), "  \n"))
    return "\n".join(out)


def _other_versions(store: Store, message) -> list[str]:
    """A folded Markdown block with the text of ``message``'s other versions and, for a question, the
    answer each got (not the rest of their branches: the JSON export has the whole tree)."""
    lines = ["<details><summary>Other versions</summary>", ""]
    for number, other in enumerate(store.siblings(message.id), 1):
        if other.id != message.id:
            lines += [f"**Version {number}**" + (f" *({other.status})*" if other.status != "done" else ""), "",
                      _text_markdown(other) or "*(no text)*", ""]
            answer = store.follow_up(other.id) if other.role == "user" else None
            if answer is not None:
                who = _name_text(answer.stats.get("model_name") or "Assistant")
                status = f" *({answer.status})*" if answer.status not in ("done", "streaming") else ""
                lines += [f"*{who} answered:*{status}", "", _text_markdown(answer) or "*(no text)*", ""]
    return lines + ["</details>", ""]


def export_json(store: Store, conversation_id: int, path: str | Path, missing: list[str] | None = None,
                named_only: list[str] | None = None, progress: Progress | None = None) -> Path:
    """Everything about the conversation as one JSON document, a backup that File ▸ Import chat restores
    on this computer or another: ``messages`` is the branch shown, ``all_messages`` every version
    (``parent_id`` links them), and ``files`` holds the photos and videos themselves (base64, under each
    one's stored name), as a chat deleted since has its files removed from the data folder (trial 62).
    Image paths stay absolute, each with the name it was attached as, for scripts on this computer.

    Files are held until together they pass :data:`app.import_chat.MAX_EMBEDDED_BYTES` (the export stays
    one that Import reads); those left are only named, by attached name in ``named_only``. A stored
    file gone from the data folder is named too, and in ``missing``. ``progress`` is told of the bytes
    of files written, piece by piece (:data:`JSON_PIECE`). Raises OSError, sqlite3.Error,
    :class:`ExportCancelled` (nothing written: an export already there stays as it was)."""
    conv = store.conversation(conversation_id)
    versions = store.versions(conversation_id)
    every = store.all_messages(conversation_id)

    def entry(m) -> dict:
        number, count = versions.get(m.id, (1, 1))
        data = {"id": m.id, "parent_id": m.parent_id, "version": number, "versions": count, "role": m.role,
                "text": m.text, "images": m.images, "attached_names": m.attached_names, "status": m.status,
                "stats": m.stats, "created": m.created}
        if m.token_ids is not None:
            data["token_ids"] = " ".join(map(str, m.token_ids))
        return data

    missing = missing if missing is not None else []
    held = _held_files(every, missing, named_only if named_only is not None else [])
    data = {
        "format": "smolchat-conversation",
        # 2: ids, versions and "all_messages" (every version, a tree by parent_id). 3: "attached_names", the
        # name each of "images" was attached as ("" where unknown); a message's "created" (seconds since
        # the epoch, null where unknown) came later in 3: readers take it where it is a time. 4: "files";
        # an answer's "token_ids" (its ids as generated, numbers apart by spaces: one a line, the indent
        # tripled a long chat's file) came later in 4: Continue and the next turns replay them, as before
        # the export, where they are the ids of the model in its stats.
        "version": 4,
        "title": conv.title,
        "created": conv.created,
        "model": conv.model,
        "settings": conv.settings,
        "messages": [entry(m) for m in store.messages(conversation_id)],  # the branch shown
        "all_messages": [entry(m) for m in every],
        "files": {},  # last: written piece by piece below
    }
    head, tail = json.dumps(data, indent=2, ensure_ascii=False).rsplit('"files": {}', 1)
    total, done = sum(size for _, _, size, _ in held), 0
    with safe_files.replacing(path) as tmp, open(tmp, "xb") as out:
        out.write(head.encode() + b'"files": {')
        first = True
        for key, stored, size, name in held:
            try:
                source = open(stored, "rb")
            except FileNotFoundError:  # removed meanwhile (another Smolchat's clean-up)
                missing.append(name)
                continue
            with source:
                out.write(f'{"" if first else ","}\n    {json.dumps(key, ensure_ascii=False)}: "'.encode())
                first = False
                left = size  # no more than was counted: the bound holds if the file grew meanwhile
                while left and (piece := source.read(min(JSON_PIECE, left))):
                    out.write(base64.b64encode(piece))
                    left -= len(piece)
                    done += len(piece)
                    if progress is not None and progress(done, total) is False:
                        raise ExportCancelled
                out.write(b'"')
        out.write(b"}" if first else b"\n  }")
        out.write(tail.encode())
        out.flush()
        os.fsync(out.fileno())  # on disk before the rename, so a crash cannot leave an empty file
    return Path(path)


def _held_files(messages, missing: list[str], named_only: list[str]) -> list[tuple[str, str, int, str]]:
    """``[(stored name, stored path, bytes, attached name)]`` for each file of ``messages`` that a JSON export holds, once
    however often it is shown, while they fit :data:`MAX_EMBEDDED_BYTES` together; the attached names
    of the files gone from the data folder go to ``missing``, of those that did not fit to ``named_only``."""
    held: list[tuple[str, str, int, str]] = []
    seen: set[str] = set()
    total = 0
    for message in messages:
        for stored, attached in zip(message.images, message.attached_names):
            if stored in seen:
                continue
            seen.add(stored)
            name = attached or Path(stored).name
            try:
                size = Path(stored).stat().st_size
            except OSError:  # gone (or unreadable): named in the export, as Markdown names it
                missing.append(name)
                continue
            if total + size > MAX_EMBEDDED_BYTES:
                named_only.append(name)
                continue
            total += size
            held.append((Path(stored).name, stored, size, name))
    return held


def data_folder_holding(path: str | Path, folder: str | Path) -> Path | None:
    """``folder`` (resolved) when ``path`` is in it or is it, else None. A file written there could
    replace Smolchat's own (trial 69: an export saved over ``smolchat.sqlite3`` reported success, and
    every chat was gone at the next start; one over ``settings.ini`` was overwritten at quit)."""
    folder = Path(folder).resolve()
    target = Path(path).resolve()  # (through links: a link to the database is the database)
    if target == folder or folder in target.parents:
        return folder
    # The same folder by another path that links do not explain: a bind mount, a network share of it
    # (trial 70 N1), told by its device and inode.
    try:
        own = os.stat(folder)
    except OSError:
        return None
    for place in (target, *target.parents):
        try:
            if os.path.samestat(os.stat(place), own):
                return folder
        except OSError:
            continue  # (not there yet: the file to be written)
    return None


def export_dialog(window, kind: str) -> Path | None:
    """Ask where to save the open conversation, then export it."""
    conv_id = window.keeper.current_id
    if conv_id is None:
        window.banner.show_info("Nothing to export yet: this chat is empty.")
        return None
    name = suggested_name(window.store.conversation(conv_id).title or "", kind)
    filters = {"md": "Markdown (*.md)", "json": "JSON (*.json)"}
    # In the folder of the last export, else Documents (not the folder Smolchat was started from).
    folder = str(window.qsettings.value("export/folder", "") or "") if hasattr(window, "qsettings") else ""
    if not folder or not Path(folder).is_dir():
        documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
        # A home without a Documents folder (minimal Linux installs): the home folder, as the dialog
        # would otherwise open where Smolchat was started from.
        folder = documents if documents and Path(documents).is_dir() else str(Path.home())
    path, _ = QFileDialog.getSaveFileName(window, "Export chat", str(Path(folder) / name), filters[kind])
    if not path:
        return None
    if not Path(path).suffix:  # "notes" typed in the JSON dialog: Qt's own dialog adds no extension
        path = f"{path}.{kind}"
        if Path(path).is_dir():  # not "folder.md already exists. Replace it?" about a folder
            window.banner.show_error(f"Could not export the chat: {path} is a folder.")
            return None
        # The dialog asked about overwriting "notes", not "notes.json".
        if Path(path).exists() and QMessageBox.question(
                window, "Export chat", f"{Path(path).name} already exists. Replace it?") != QMessageBox.StandardButton.Yes:
            return None
    own = data_folder_holding(path, window.store.folder)
    if own is not None:
        window.banner.show_error(f"Could not export the chat: {path} is inside Smolchat's data folder ({own}), which "
                                 "holds its database and settings: choose another folder.")
        return None
    if hasattr(window, "qsettings"):
        window.qsettings.setValue("export/folder", str(Path(path).parent))
    missing: list[str] = []
    named_only: list[str] = []
    # Photos and videos are copied (Markdown) or read into the file (JSON): a chat of many takes seconds,
    # shown as it goes, and it can be cancelled.
    busy = QProgressDialog("Exporting the chat…", "Cancel", 0, 100, window)
    busy.setWindowTitle("Export chat")
    busy.setWindowModality(Qt.WindowModality.WindowModal)
    busy.setMinimumDuration(500)

    def progress(done: int, total: int) -> bool:
        busy.setMaximum(max(total, 1))
        busy.setValue(done)  # (processes events while the dialog is up: Cancel can be clicked)
        return not busy.wasCanceled()
    try:
        if kind == "md":
            out = export_markdown(window.store, conv_id, path, missing, progress)
        else:
            out = export_json(window.store, conv_id, path, missing, named_only, progress)
    except ExportCancelled:
        window.banner.show_info("Export cancelled: nothing of it was written.")
        return None
    except (OSError, sqlite3.Error) as exc:
        window.banner.show_error(f"Could not export the chat: {storage_problem(exc, Path(path).parent)}.")
        return None
    finally:
        busy.reset()
        busy.deleteLater()
    said = f"Exported to {out}"
    if missing:
        gone = f"{len(missing)} files" if len(missing) > 1 else "1 file"
        said += (f", without {gone} gone from Smolchat's data folder ({', '.join(missing)}): the export names "
                 f"{'them in their places' if len(missing) > 1 else 'it in its place'}.")
    if named_only:
        # Said now: an Import after the chat is deleted could not bring these back.
        said += (f"{'' if missing else '.'} Too large to go in it with the rest (over {MAX_EMBEDDED_BYTES // 2**20} MB "
                 f"together), so only named, not kept in it: {', '.join(named_only)}. Export as Markdown to copy "
                 f"{'them' if len(named_only) > 1 else 'it'} beside it.")
    if missing or named_only:
        window.banner.show_info(said)
    else:
        window.banner.show_success(said)
    return out
