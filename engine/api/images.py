"""Opening image files the one way the engine does (torch-free, so the app checks attachments with it).

The app calls :func:`load_image` when an image is attached, so a file the engine could not read is
refused with the engine's own message before Send, not after.

Where we deviate from transformers on purpose (:func:`to_rgb`): transformers' ``load_image`` opens a
file with ``.convert("RGB")``, which drops alpha (a transparent logo becomes whatever RGB sits under
its transparent pixels, often black) and clips 16- and 32-bit pixels to 0..255 (a 16-bit gradient
turns almost all white). We composite alpha over white for every source (path, bytes, clipboard,
PIL), as ``convert_to_rgb`` does for PIL inputs, and scale high-bit-depth images to 8 bits.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import CancelledError, Future
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from engine.api.errors import ImageError

#: 16- and 32-bit integer and float modes Pillow opens (16-bit PNG/TIFF greyscale, 32-bit TIFF).
HIGH_BIT_DEPTH_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


def to_8bit(image: Image.Image) -> Image.Image:
    """A high-bit-depth image (:data:`HIGH_BIT_DEPTH_MODES`) scaled to 8-bit ``L``; others unchanged.

    16-bit data (``I;16*``, and ``I`` within 0..65535) maps 0..65535 to 0..255; ``F`` within 0..1 maps
    to 0..255; anything else is min-max scaled. ``convert("L")`` would clip instead.
    """
    if image.mode not in HIGH_BIT_DEPTH_MODES:
        return image
    values = np.asarray(image, dtype=np.float64)
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if image.mode.startswith("I;16") or (image.mode == "I" and lo >= 0 and hi <= 65535):
        scaled = values / 257.0
    elif image.mode == "F" and lo >= 0 and hi <= 1:
        scaled = values * 255.0
    else:
        scaled = (values - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(values)
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), mode="L")


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB with alpha composited over opaque white (transformers ``convert_to_rgb``), after scaling
    high-bit-depth images to 8 bits (:func:`to_8bit`). RGBA, LA, PA and palette or L images with a
    ``transparency`` entry are composited; RGB comes back as it is."""
    image = to_8bit(image)
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image if image.mode == "RGB" else image.convert("RGB")


# Images decoded before the engine reads them: the local server decodes each new photo to refuse a
# broken one with a 400, and stores the bytes in a file for the engine. The engine's next load_image
# of that file takes these pixels instead of decoding the file again (a 600x400 JPEG: ~3 ms; a 12 MP
# one: ~0.1 s, all of it on the way to the first token). The server hands over its decode while it
# is still running (a concurrent Future), so the request reaches the engine during the decode and
# the engine waits for the pixels where it needs them, not the server before queueing.
# Keyed by (path, inode, size): the server's files are named by their content and written by an
# atomic rename (a new inode), and re-sending a photo only touches its time. Taken once; at most
# HANDED_MAX images and HANDED_MAX_PIXELS pixels, and none older than HANDED_TTL_S (a request that
# fails after its photo was checked never takes it), oldest dropped first.
_HANDED: OrderedDict[tuple[str, int, int], tuple[Image.Image | Future, int, float]] = OrderedDict()
HANDED_MAX = 4
HANDED_MAX_PIXELS = 48_000_000
HANDED_TTL_S = 60.0
_handed_lock = threading.Lock()


def _handed_key(path: str | os.PathLike) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), st.st_ino, st.st_size


def _drop_stale_handed(now: float) -> None:
    """Oldest first: past their time, then beyond the count or the pixel budget (lock held)."""
    while _HANDED and (now - next(iter(_HANDED.values()))[2] > HANDED_TTL_S or len(_HANDED) > HANDED_MAX
                       or sum(pixels for _, pixels, _ in _HANDED.values()) > HANDED_MAX_PIXELS):
        _HANDED.popitem(last=False)


def hand_over(path: str | os.PathLike, image: Image.Image | Future, pixels: int | None = None) -> None:
    """Give :func:`load_image`'s result for the bytes now in ``path`` to the next ``load_image(path)``.

    ``image`` is what ``load_image`` returned for those bytes (RGB, upright), or a
    ``concurrent.futures.Future`` of it, still running: the reader then waits for it (and raises
    ImageError with its error's message if it failed). ``pixels``: the image's width x height, required with a Future.
    The caller stops using the image. A file replaced since (another inode or size) does not get it.
    """
    if isinstance(image, Future):
        if pixels is None:
            raise ValueError("hand_over of a Future needs its image's pixel count")
    else:
        pixels = image.width * image.height
    key = _handed_key(path)
    if key is None or pixels > HANDED_MAX_PIXELS:
        return
    now = time.monotonic()
    with _handed_lock:
        _HANDED[key] = (image, pixels, now)
        _HANDED.move_to_end(key)
        _drop_stale_handed(now)


def withdraw(path: str | os.PathLike) -> None:
    """Drop what :func:`hand_over` gave for ``path`` (the server refused the photo after all)."""
    key = _handed_key(path)
    if key is not None:
        with _handed_lock:
            _HANDED.pop(key, None)


# Digests of files whose bytes the local server hashed as they came (it names each file by it): the
# engine keys its tiled images and their prefix-cache entries by a file's digest, and reading a 0.5 MB
# photo back and hashing it again was ~1 ms of every new photo's time to the first token through HTTP.
# Keyed as the handed pixels are (a file replaced since has another inode or size); kept, not taken
# (a photo's file is re-read by every later turn that sends it), the newest DIGESTS_MAX.
_DIGESTS: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
DIGESTS_MAX = 256


def bytes_digest(data: bytes | bytearray | memoryview) -> bytes:
    """The digest the engine keys an encoded image's tiles by: SHA-256's first 16 bytes (x86's SHA
    instructions hash ~2x faster than BLAKE2b: 0.32 against 0.68 ms for a 0.47 MB photo here)."""
    return hashlib.sha256(data).digest()[:16]


def note_digest(path: str | os.PathLike, digest: bytes) -> None:
    """Record that the file now at ``path`` holds bytes whose :func:`bytes_digest` is ``digest``
    (the caller hashed them as it wrote them), so :func:`file_digest` need not read it."""
    key = _handed_key(path)
    if key is None:
        return
    with _handed_lock:
        _DIGESTS[key] = digest
        _DIGESTS.move_to_end(key)
        while len(_DIGESTS) > DIGESTS_MAX:
            _DIGESTS.popitem(last=False)


def file_digest(path: str | os.PathLike) -> bytes:
    """:func:`bytes_digest` of the file's bytes: the one :func:`note_digest` recorded for it, else read.

    Raises:
        OSError: the file cannot be read.
    """
    key = _handed_key(path) if _DIGESTS else None
    if key is not None:
        with _handed_lock:
            digest = _DIGESTS.get(key)
        if digest is not None:
            return digest
    return bytes_digest(Path(path).read_bytes())


def _take_handed(path: Path) -> Image.Image | None:
    """The pixels handed over for ``path`` (waiting for a decode still running), or None (none were,
    or their decode was cancelled: the caller decodes the file).

    Raises:
        ImageError: the handed decode failed; with its error's message (the server's words, which
            name no file), so the file is not read again.
    """
    if not _HANDED:
        return None
    key = _handed_key(path)
    with _handed_lock:
        _drop_stale_handed(time.monotonic())
        entry = _HANDED.pop(key, None) if key is not None else None
    if entry is None:
        return None
    if isinstance(entry[0], Future):
        try:
            return entry[0].result()
        except CancelledError:
            return None
        except Exception as exc:  # noqa: BLE001 - the server's refusal, in its own error type
            raise ImageError(str(exc) or f"the image cannot be decoded ({type(exc).__name__})") from exc
    return entry[0]


def load_image(source: str | os.PathLike | bytes | Image.Image) -> Image.Image:
    """Open and fully decode an image, upright.

    Paths and bytes are decoded (``.load()`` forces the whole file to be read), rotated by their EXIF
    orientation (as transformers' ``image_utils.load_image``) and turned into RGB by :func:`to_rgb`
    (alpha over white, 16/32-bit scaled: see the module docstring for how this differs from
    transformers). A PIL image keeps its mode (``preprocess`` applies the same :func:`to_rgb`) but is
    still EXIF-transposed. Animated images (GIF, APNG, WebP) give their first frame
    (:func:`frame_count` tells how many there are). A path whose pixels were handed over
    (:func:`hand_over`) returns them without decoding the file.

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
            if path.is_dir():
                raise ImageError(f"{name} is a folder, not an image file")
            if path.exists():  # a pipe, socket or device: reading it could block forever
                raise ImageError(f"{name} is not a regular file (a pipe or a device), not an image file")
            raise ImageError(f"Image file not found: {name}")
        if path.stat().st_size == 0:
            raise ImageError(f"Image file is empty (0 bytes): {name}")
        handed = _take_handed(path)
        if handed is not None:
            return handed
        stream = path
    else:
        raise ImageError(f"Unsupported image source of type {type(source).__name__}")
    try:
        with Image.open(stream) as image:
            image.load()
            upright = ImageOps.exif_transpose(image)
            return to_rgb(upright)
    except UnidentifiedImageError as exc:
        raise ImageError(f"Not a recognised image file: {name}") from exc
    except Image.DecompressionBombError as exc:
        raise ImageError(f"Image is too large to open safely: {name}{_megapixels(exc)}") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(f"Image is truncated or corrupt: {name} ({exc})") from exc


def frame_count(source: str | os.PathLike) -> int:
    """Frames in an image file (animated GIF, APNG, WebP: more than 1), from its headers; 1 if unknown,
    and for what is no regular file (a pipe: opening it would wait for a writer)."""
    if not os.path.isfile(source):
        return 1
    try:
        with Image.open(source) as image:
            return int(getattr(image, "n_frames", 1))
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return 1  # not an animation as far as the headers tell; load_image says what is wrong


def _megapixels(exc: BaseException) -> str:
    """" (N megapixels)" from Pillow's DecompressionBombError message, or "" if it has no size."""
    found = re.search(r"\((\d+) pixels\)", str(exc))
    if not found:
        return ""
    mp = int(found.group(1)) / 1e6
    return f" ({mp:.0f} megapixels)" if mp >= 10 else f" ({mp:.1f} megapixels)"
