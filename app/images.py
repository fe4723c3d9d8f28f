"""Image files attached to a message: the engine's check before attaching, pasted images saved (no Qt)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from app import safe_files
from engine.api.errors import ImageError
from engine.api.images import load_image


class InvalidImageError(ValueError):
    """A file the user attached is not an image Smolchat can read."""


def validate_image(path: str | Path) -> Path:
    """Decode ``path`` the way the engine will (:func:`engine.api.images.load_image`); return it
    resolved, or raise :class:`InvalidImageError` with the engine's message (naming the file by its name).

    Decoding the whole image (not just the header) catches truncated files before they reach
    the engine, where the error would come back only after the user pressed Send.
    """
    from PIL import UnidentifiedImageError

    try:
        load_image(path)
    except ImageError as exc:
        if isinstance(exc.__cause__, UnidentifiedImageError):
            raise InvalidImageError(not_media(path)) from None
        raise InvalidImageError(_named(str(exc), path)) from None
    return Path(path).resolve()


def not_media(path: str | Path) -> str:
    """What to say of an attached file that is no image at all (nor a video or a PDF, which are
    taken before images are tried): the kinds Smolchat attaches, and for a text file what to do
    instead (trial 62: "Not a recognised image file" for notes.txt said neither)."""
    line = f"{Path(path).name} is not an image, a video or a PDF, the files Smolchat attaches"
    return line + (": paste its text into the message to ask about it." if _looks_like_text(path) else ".")


def _looks_like_text(path: str | Path) -> bool:
    """The file's first 4 KiB read as text without control characters: UTF-8, UTF-16 with its byte-order
    mark, or a one-byte code page (Windows-1252, Latin-1: any byte a letter; binary data has control
    bytes within its first kilobytes)."""
    try:
        with open(path, "rb") as file:
            head = file.read(4096)
    except OSError:
        return False
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    text = head.decode("utf-8", errors="replace")
    if len(head) == 4096:  # a character cut at the read's end is no damage
        text = text[:-3] + text[-3:].rstrip("\ufffd")
    if "\ufffd" in text:  # (the five bytes Windows-1252 leaves undefined read as U+FFFD: still text)
        text = head.decode("cp1252", errors="replace").replace("\ufffd", "")
    return bool(text) and all(c.isprintable() or c in "\t\n\r\f" for c in text)


def _named(message: str, path: str | Path) -> str:
    """The engine's ``message`` about ``path`` with the file's name for its path: the attach banner
    names files as the chips and the video lines do (trial 61: one banner gave a full path beside a name)."""
    return message.replace(str(Path(path)), Path(path).name)


def check_image_header(path: str | Path) -> None:
    """Raise :class:`InvalidImageError` (the engine's words) when ``path`` is not an image file at all,
    from its header alone: for files the loaded model will not read anyway, where decoding a
    100-megapixel photo on the UI thread would only delay the refusal."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path):
            pass
    except UnidentifiedImageError:
        raise InvalidImageError(not_media(path)) from None
    except OSError as exc:
        raise InvalidImageError(f"Cannot read image: {Path(path).name} ({exc.strerror or exc})") from None


def save_png_bytes(data: bytes, folder: Path) -> Path:
    """Write PNG ``data`` into ``folder`` named by its content hash; return the file's path."""
    digest = hashlib.sha256(data).hexdigest()[:32]
    path = folder / f"{digest}.png"
    if not path.exists():
        safe_files.write_bytes(path, data)  # a full disk leaves neither half a PNG nor a temporary file
    return path
