"""Checks on image files before they are attached to a message (Pillow only, no Qt)."""

from __future__ import annotations

import hashlib
import re
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
    except Image.DecompressionBombError as exc:
        raise InvalidImageError(f"“{name}” is too large to open safely{_megapixels(exc)}.") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidImageError(f"“{name}” looks broken and cannot be decoded ({exc}).") from None
    return path.resolve()


def _megapixels(exc: BaseException) -> str:
    """" (N megapixels)" from Pillow's DecompressionBombError message, or "" if it has no size."""
    found = re.search(r"\((\d+) pixels\)", str(exc))
    if not found:
        return ""
    mp = int(found.group(1)) / 1e6
    return f" ({mp:.0f} megapixels)" if mp >= 10 else f" ({mp:.1f} megapixels)"


def save_png_bytes(data: bytes, folder: Path) -> Path:
    """Write PNG ``data`` into ``folder`` named by its content hash; return the file's path."""
    digest = hashlib.sha256(data).hexdigest()[:32]
    path = folder / f"{digest}.png"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path
