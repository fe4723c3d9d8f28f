"""Attachments as ``data:`` URIs for a remote server, after our own preprocessing choices.

The image is sized as the detail setting would feed SmolVLM locally (the engine's torch-free sizing in
:mod:`engine.models.smolvlm.processing`), never upscaled (the server's processor upscales if it wants:
sending more pixels only costs upload time), composited over white like the engine does, and re-encoded:
JPEG for photos (a JPEG source, or a PNG that would be over :data:`PNG_LIMIT`), PNG otherwise (lossless
for screenshots and drawings). Videos go as they are: frame sampling is the server's.
"""

from __future__ import annotations

import base64
import io
import mimetypes
from pathlib import Path

from PIL import Image, ImageOps

from engine.api import ImageError, resolve_detail

#: SmolVLM-256M/500M's processor sizes (preprocessor_config.json): stage-1 longest edge and tile side.
LONGEST_EDGE = 2048
TILE = 512
PNG_LIMIT = 4 * 1024 * 1024
JPEG_QUALITY = 90


def _processor(longest_edge: int, tile: int):
    from engine.models.smolvlm.processing import ImageProcessor  # Pillow + numpy only

    return ImageProcessor(longest_edge=longest_edge, max_image_size=tile, image_seq_len=64)


def target_size(width: int, height: int, detail: str, longest_edge: int = LONGEST_EDGE,
                tile: int = TILE) -> tuple[int, int]:
    """``(width, height)`` to send: the engine's stage-1 size for ``detail`` ("fast": one tile),
    capped at the image's own size."""
    proc = _processor(longest_edge, tile)
    detail = resolve_detail(detail, "remote")  # a server's hardware is not known here: send the reference size
    edge = tile if detail == "fast" else proc._stage1_edge(width, height, detail)
    if max(width, height) <= edge:
        return width, height
    return proc.stage1_size(width, height, edge)


def image_data_uri(path: str, detail: str = "full") -> tuple[str, tuple[int, int]]:
    """``(data URI, (width, height) sent)`` for the image at ``path``.

    Raises:
        ImageError: the file is missing or not an image.
    """
    try:
        with Image.open(path) as image:
            image.load()
            source_format = image.format or ""
            upright = ImageOps.exif_transpose(image)
    except FileNotFoundError:
        raise ImageError(f"Image file not found: {path}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(f"Not a recognised image file: {path} ({exc})") from exc
    rgb = _processor(LONGEST_EDGE, TILE)._to_rgb(upright)  # alpha over white, as the engine does
    size = target_size(*rgb.size, detail)
    if size != rgb.size:
        rgb = rgb.resize(size, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    if source_format != "JPEG":
        rgb.save(buffer, "PNG", optimize=False)
    if source_format == "JPEG" or buffer.tell() > PNG_LIMIT:
        buffer = io.BytesIO()
        rgb.save(buffer, "JPEG", quality=JPEG_QUALITY)
        mime = "image/jpeg"
    else:
        mime = "image/png"
    return f"data:{mime};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}", size


def video_data_uri(path: str) -> str:
    """The video file as a ``data:`` URI (servers that take videos sample the frames themselves)."""
    p = Path(path)
    if not p.is_file():
        raise ImageError(f"Video file not found: {path}")
    mime = mimetypes.guess_type(p.name)[0] or "video/mp4"
    return f"data:{mime};base64,{base64.b64encode(p.read_bytes()).decode('ascii')}"
