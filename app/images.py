"""Checks on image files before they are attached to a message (Pillow only, no Qt)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from PIL import Image, UnidentifiedImageError


class InvalidImageError(ValueError):
    """A file the user attached is not an image Smolchat can read."""


def validate_image(path: str | Path) -> Path:
    """Open and fully decode ``path``; return it resolved, or raise :class:`InvalidImageError`.

    Decoding the whole image (not just the header) catches truncated files before they reach
    the engine, where the error would come back only after the user pressed Send.
    """
    path = Path(path)
    name = path.name or str(path)
    if not path.is_file():
        raise InvalidImageError(f"“{name}” is not a file.")
    if path.stat().st_size == 0:
        raise InvalidImageError(f"“{name}” is empty (0 bytes), so it is not an image.")
    try:
        with Image.open(path) as image:
            image.load()
    except UnidentifiedImageError:
        raise InvalidImageError(f"“{name}” is not an image Smolchat can read.") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidImageError(f"“{name}” looks broken and cannot be decoded ({exc}).") from None
    return path.resolve()


def save_png_bytes(data: bytes, folder: Path) -> Path:
    """Write PNG ``data`` into ``folder`` named by its content hash; return the file's path."""
    digest = hashlib.sha256(data).hexdigest()[:32]
    path = folder / f"{digest}.png"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path
