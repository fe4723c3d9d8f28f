"""Opening image files the one way the engine does (torch-free, so the app checks attachments with it).

The app calls :func:`load_image` when an image is attached, so a file the engine could not read is
refused with the engine's own message before Send, not after.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from engine.api.errors import ImageError


def load_image(source: str | os.PathLike | bytes | Image.Image) -> Image.Image:
    """Open and fully decode an image, upright.

    Paths and bytes are decoded (``.load()`` forces the whole file to be read), rotated by their EXIF
    orientation and converted to RGB, exactly like transformers' ``image_utils.load_image``
    (``exif_transpose`` then ``.convert("RGB")``; alpha is dropped without compositing, as there).
    A PIL image keeps its mode (so RGBA is composited over white later by ``preprocess``) but is
    still EXIF-transposed. Animated images (GIF, APNG, WebP) give their first frame.

    Raises:
        ImageError: missing file, empty file, not an image, truncated or corrupt data.
    """
    if isinstance(source, Image.Image):
        try:
            if getattr(source, "n_frames", 1) > 1:
                source.seek(0)
            return ImageOps.exif_transpose(source)
        except (OSError, ValueError) as exc:
            raise ImageError(f"Cannot read image: {exc}") from exc
    if isinstance(source, (bytes, bytearray, memoryview)):
        name, data = "<bytes>", bytes(source)
        if not data:
            raise ImageError("Image data is empty (0 bytes)")
        stream = io.BytesIO(data)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        name = str(path)
        if not path.is_file():
            raise ImageError(f"Image file not found: {name}")
        if path.stat().st_size == 0:
            raise ImageError(f"Image file is empty (0 bytes): {name}")
        stream = path
    else:
        raise ImageError(f"Unsupported image source of type {type(source).__name__}")
    try:
        with Image.open(stream) as image:
            image.load()
            upright = ImageOps.exif_transpose(image)
            return upright.convert("RGB")
    except UnidentifiedImageError as exc:
        raise ImageError(f"Not a recognised image file: {name}") from exc
    except Image.DecompressionBombError as exc:
        raise ImageError(f"Image is too large to open safely: {name}{_megapixels(exc)}") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(f"Image is truncated or corrupt: {name} ({exc})") from exc


def _megapixels(exc: BaseException) -> str:
    """" (N megapixels)" from Pillow's DecompressionBombError message, or "" if it has no size."""
    found = re.search(r"\((\d+) pixels\)", str(exc))
    if not found:
        return ""
    mp = int(found.group(1)) / 1e6
    return f" ({mp:.0f} megapixels)" if mp >= 10 else f" ({mp:.1f} megapixels)"
