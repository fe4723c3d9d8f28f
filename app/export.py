"""Export a conversation to Markdown (images and videos copied into folders beside it) or JSON.

Both give the branch shown in the window (the active versions). Markdown marks a message that has
other versions ("Version 2 of 3") and lists those versions' text in a folded ``<details>`` block;
JSON also carries every version of every message with its ``parent_id`` (the whole tree).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from PySide6.QtCore import QStandardPaths
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app import safe_files
from app.conversations import display_title, storage_problem
from app.store import Store
from app.video_attachments import is_video_file


def export_markdown(store: Store, conversation_id: int, path: str | Path) -> Path:
    """Write ``path`` (.md), ``<stem>_images/`` with the conversation's images and ``<stem>_videos/``
    with its videos.

    The store keeps a file by its content hash, not by the name it was attached as, so a video is
    exported as ``video-1.mp4``, ``video-2.webm``, ... in the order the chat first shows each (a
    hash names nothing a reader recognises); images keep their stored names."""
    path = Path(path)
    conv = store.conversation(conversation_id)
    images_dir = path.with_name(f"{path.stem}_images")
    videos_dir = path.with_name(f"{path.stem}_videos")
    video_numbers: dict[str, int] = {}  # stored path -> its number in the export
    lines = [f"# {display_title(conv.title) or 'Smolchat conversation'}", ""]
    if conv.settings.get("system_prompt"):
        lines += [f"> System prompt: {conv.settings['system_prompt']}", ""]
    versions = store.versions(conversation_id)
    for message in store.messages(conversation_id):
        who = "You" if message.role == "user" else message.stats.get("model_name") or "Assistant"
        lines += [f"## {who}", ""]
        number, count = versions.get(message.id, (1, 1))
        if count > 1:
            lines += [f"*Version {number} of {count}*", ""]
        for image in message.images:
            if is_video_file(image):  # Markdown has no video syntax: a link to the copied file
                first = image not in video_numbers
                name = f"video-{video_numbers.setdefault(image, len(video_numbers) + 1)}{Path(image).suffix}"
                if first:
                    videos_dir.mkdir(parents=True, exist_ok=True)
                    # Always copied: that name may hold an older export's other video.
                    safe_files.copy_file(image, videos_dir / name)  # a failed copy leaves no half video
                lines += [f"[video: {name}]({videos_dir.name}/{name})", ""]
                continue
            images_dir.mkdir(parents=True, exist_ok=True)
            target = images_dir / Path(image).name
            if not target.exists():  # named by its content: a file there of that name holds the same picture
                safe_files.copy_file(image, target)  # a failed copy leaves no half image to be kept later
            lines += [f"![image]({images_dir.name}/{target.name})", ""]
        if message.text:
            lines += [plain_markdown(message.text) if message.role == "user" else message.text, ""]
        if message.status not in ("done", "streaming"):
            lines += [f"*({message.status})*", ""]
        if count > 1:
            lines += _other_versions(store, message)
    return safe_files.write_text(path, "\n".join(lines))  # a failure keeps the file being replaced


def plain_markdown(text: str) -> str:
    """A user's plain text as Markdown that shows it as the app does (the app shows it as written).

    Single line breaks are kept (two trailing spaces, which every Markdown reader takes as a hard
    break; a bare newline joins the lines into one), except before a blank line or a fence. A line
    that Markdown would take as a heading (``# ``), a quote (``> ``), a heading's underline (``===``,
    ``---`` under text) or a rule (``***``) gets a backslash before that first character, and so
    does a ``<`` that would start HTML (CommonMark 0.31, "Backslash escapes"), so it reads as typed. Lines in a fenced code
    block (``` or ~~~) are left as they are: a fence is what a user types to show code."""
    lines = text.split("\n")
    fence = ""  # the open fence's marker, "" outside one
    out = []
    for i, line in enumerate(lines):
        marker = _fence(line)
        if fence:
            if marker.startswith(fence[0]) and len(marker) >= len(fence) and not line.strip()[len(marker):].strip():
                fence = ""
            out.append(line)
            continue
        if marker:
            fence = marker
            out.append(line)
            continue
        line = _literal_start(line)
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and following.strip() and not _fence(following) and not line.endswith("  "):
            line += "  "
        out.append(line)
    return "\n".join(out)


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
        if n >= 3:
            return char * n
    return ""


def _other_versions(store: Store, message) -> list[str]:
    """A folded Markdown block with the text of ``message``'s other versions (not their branches)."""
    lines = ["<details><summary>Other versions</summary>", ""]
    for number, other in enumerate(store.siblings(message.id), 1):
        if other.id != message.id:
            lines += [f"**Version {number}**" + (f" *({other.status})*" if other.status != "done" else ""), "",
                      (plain_markdown(other.text) if other.role == "user" else other.text) or "*(no text)*", ""]
    return lines + ["</details>", ""]


def export_json(store: Store, conversation_id: int, path: str | Path) -> Path:
    """Everything about the conversation as one JSON document (image paths are absolute): ``messages`` is
    the branch shown, ``all_messages`` every version (``parent_id`` links them)."""
    conv = store.conversation(conversation_id)
    versions = store.versions(conversation_id)

    def entry(m) -> dict:
        number, count = versions.get(m.id, (1, 1))
        return {"id": m.id, "parent_id": m.parent_id, "version": number, "versions": count, "role": m.role,
                "text": m.text, "images": m.images, "status": m.status, "stats": m.stats}

    data = {
        "format": "smolchat-conversation",
        "version": 2,  # 2: ids, versions and "all_messages" (every version, a tree by parent_id)
        "title": conv.title,
        "created": conv.created,
        "model": conv.model,
        "settings": conv.settings,
        "messages": [entry(m) for m in store.messages(conversation_id)],  # the branch shown
        "all_messages": [entry(m) for m in store.all_messages(conversation_id)],
    }
    return safe_files.write_text(path, json.dumps(data, indent=2, ensure_ascii=False))


def export_dialog(window, kind: str) -> Path | None:
    """Ask where to save the open conversation, then export it."""
    conv_id = window.keeper.current_id
    if conv_id is None:
        window.banner.show_info("Nothing to export yet: this chat is empty.")
        return None
    title = window.store.conversation(conv_id).title or "conversation"
    safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip() or "conversation"
    filters = {"md": "Markdown (*.md)", "json": "JSON (*.json)"}
    # In the folder of the last export, else Documents (not the folder Smolchat was started from).
    folder = str(window.qsettings.value("export/folder", "") or "") if hasattr(window, "qsettings") else ""
    if not folder or not Path(folder).is_dir():
        folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation) or str(Path.home())
    path, _ = QFileDialog.getSaveFileName(window, "Export chat", str(Path(folder) / f"{safe}.{kind}"), filters[kind])
    if not path:
        return None
    if not Path(path).suffix:  # "notes" typed in the JSON dialog: Qt's own dialog adds no extension
        path = f"{path}.{kind}"
        # The dialog asked about overwriting "notes", not "notes.json".
        if Path(path).exists() and QMessageBox.question(
                window, "Export chat", f"{Path(path).name} already exists. Replace it?") != QMessageBox.StandardButton.Yes:
            return None
    if hasattr(window, "qsettings"):
        window.qsettings.setValue("export/folder", str(Path(path).parent))
    try:
        out = (export_markdown if kind == "md" else export_json)(window.store, conv_id, path)
    except (OSError, sqlite3.Error) as exc:
        window.banner.show_error(f"Could not export the chat: {storage_problem(exc, Path(path).parent)}.")
        return None
    window.banner.show_success(f"Exported to {out}")
    return out
