"""Export a conversation to Markdown (images and videos copied into a folder beside it) or JSON."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from app.store import Store
from app.video_attachments import is_video_file


def export_markdown(store: Store, conversation_id: int, path: str | Path) -> Path:
    """Write ``path`` (.md) and ``<stem>_images/`` with the conversation's images."""
    path = Path(path)
    conv = store.conversation(conversation_id)
    images_dir = path.with_name(f"{path.stem}_images")
    lines = [f"# {conv.title or 'Smolchat conversation'}", ""]
    if conv.settings.get("system_prompt"):
        lines += [f"> System prompt: {conv.settings['system_prompt']}", ""]
    for message in store.messages(conversation_id):
        who = "You" if message.role == "user" else message.stats.get("model_name") or "Assistant"
        lines += [f"## {who}", ""]
        for image in message.images:
            images_dir.mkdir(parents=True, exist_ok=True)
            target = images_dir / Path(image).name
            if not target.exists():
                shutil.copyfile(image, target)
            if is_video_file(target):  # Markdown has no video syntax: a link to the copied file
                lines += [f"[video: {target.name}]({images_dir.name}/{target.name})", ""]
            else:
                lines += [f"![image]({images_dir.name}/{target.name})", ""]
        if message.text:
            lines += [message.text, ""]
        if message.status not in ("done", "streaming"):
            lines += [f"*({message.status})*", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def export_json(store: Store, conversation_id: int, path: str | Path) -> Path:
    """Everything about the conversation as one JSON document (image paths are absolute)."""
    conv = store.conversation(conversation_id)
    data = {
        "format": "smolchat-conversation",
        "version": 1,
        "title": conv.title,
        "created": conv.created,
        "model": conv.model,
        "settings": conv.settings,
        "messages": [
            {"role": m.role, "text": m.text, "images": m.images, "status": m.status, "stats": m.stats}
            for m in store.messages(conversation_id)
        ],
    }
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    return Path(path)


def export_dialog(window, kind: str) -> Path | None:
    """Ask where to save the open conversation, then export it."""
    conv_id = window.keeper.current_id
    if conv_id is None:
        window.banner.show_info("Nothing to export yet: this chat is empty.")
        return None
    title = window.store.conversation(conv_id).title or "conversation"
    safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip() or "conversation"
    filters = {"md": "Markdown (*.md)", "json": "JSON (*.json)"}
    path, _ = QFileDialog.getSaveFileName(window, "Export chat", f"{safe}.{kind}", filters[kind])
    if not path:
        return None
    try:
        out = (export_markdown if kind == "md" else export_json)(window.store, conv_id, path)
    except (OSError, sqlite3.Error) as exc:
        window.banner.show_error(f"Could not export the chat: {exc}")
        return None
    window.banner.show_success(f"Exported to {out}")
    return out
