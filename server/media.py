"""Image and video inputs: ``data:`` URIs, raw base64 and (opt-in) http(s) URLs, checked and stored.

Each accepted file is written once into the server's media folder under its content hash, so the
same photo sent again (an OpenAI client re-sends the whole conversation every turn) has the same
path, which is what lets the engine keep that conversation's image prefill in its KV cache.
``file://`` and every other scheme are refused: a request must never read the server's disk.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import hashlib
import io
import ipaddress
import itertools
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pybase64
from PIL import Image

from engine.api.errors import ImageError
from engine.api.images import bytes_digest, hand_over, load_image, note_digest, withdraw
from server.config import ServerConfig
from server.errors import APIError

log = logging.getLogger(__name__)

#: Media folders are ``smolchat-media-PID-XXXXXXXX`` in the system's temporary folder: the server's
#: process id in the name tells a folder whose server ended without removing it (killed) from one in use.
MEDIA_PREFIX = "smolchat-media-"
_OWNED = re.compile(rf"{MEDIA_PREFIX}(\d+)-")
#: A folder of an earlier naming (no process id) is left over once this old.
UNNAMED_STALE_S = 24 * 3600


def media_folder() -> Path:
    """A new media folder for this process, after removing those that servers which are gone left
    behind (:func:`sweep_media_folders`): a server killed (``kill -9``, a crash, the power) could not
    remove its folder, and the photos in it stayed (trial 66)."""
    sweep_media_folders(Path(tempfile.gettempdir()))
    return Path(tempfile.mkdtemp(prefix=f"{MEDIA_PREFIX}{os.getpid()}-"))


def sweep_media_folders(parent: Path) -> int:
    """Remove the media folders in ``parent`` whose server process has ended (or, named without a
    process id, untouched for :data:`UNNAMED_STALE_S`); only this user's own folders, never through a
    link. Returns how many were removed. On Windows only the old-named ones (each user has a temporary
    folder of their own there, and a process is not asked after without a handle to it)."""
    removed = 0
    try:
        entries = list(parent.glob(MEDIA_PREFIX + "*"))
    except OSError:
        return 0
    for folder in entries:
        try:
            info = folder.lstat()
            if not folder.is_dir() or folder.is_symlink() or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
                continue
            owner = _OWNED.match(folder.name)
            if owner is None:
                stale = time.time() - info.st_mtime > UNNAMED_STALE_S
            else:
                stale = sys.platform != "win32" and int(owner.group(1)) != os.getpid() and \
                    not _running(int(owner.group(1)))
        except OSError:
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            removed += not folder.exists()
    if removed:
        log.info("removed %d media folder(s) left by servers that did not stop", removed)
    return removed


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists (POSIX: signal 0 asks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's, or not to be asked: kept
    return True


IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG", "image/webp": "WEBP",
               "image/gif": "GIF", "image/bmp": "BMP", "image/x-ms-bmp": "BMP", "image/tiff": "TIFF"}
IMAGE_FORMATS = set(IMAGE_TYPES.values())
VIDEO_TYPES = {"video/mp4": ".mp4", "video/webm": ".webm", "video/quicktime": ".mov", "video/x-matroska": ".mkv"}
#: Animated images taken as videos, as the app's local engine reads them for SmolVLM2 video models
#: (app.video_attachments.attachment_kind) and its remote backend sends them (a video_url with the
#: file's own type): stored with their own suffix, which tells the engine's reader what they are
#: (engine.api.videos: a GIF through PyAV, an animated WebP through Pillow). A still one is no video.
ANIMATION_TYPES = {"image/gif": ".gif", "image/webp": ".webp", "image/png": ".png", "image/apng": ".apng"}
#: A data URI's type that says nothing of the bytes (a browser's or an uploader's label for any file):
#: read as no type, the image's own header decides, as for ``data:;base64,``.
UNTYPED = ("application/octet-stream", "binary/octet-stream")
#: Other labels clients put on the same files ("video/x-m4v" for an iPhone's .m4v, "video/gif" for a GIF
#: some uploaders call a video): read as the type they mean.
VIDEO_ALIASES = {"video/x-m4v": ".mp4", "video/gif": ".gif", "video/x-mkv": ".mkv", "video/mkv": ".mkv",
                 "video/webp": ".webp"}


def _shown(mime: str) -> str:
    """A client's media type as an error quotes it: cut at 100 characters (a 200,000-character type was
    sent back whole, trial 80)."""
    return repr(mime if len(mime) <= 100 else mime[:99] + "…")


def sniff_video(data: bytes) -> str | None:
    """The stored suffix of an untyped video (no type, or :data:`UNTYPED`) by its first bytes, else None:
    an ISO base media file (MP4, MOV, M4V: ``ftyp`` at byte 4), a Matroska/WebM file (EBML magic
    1A 45 DF A3), a GIF, a WebP (RIFF....WEBP) or a PNG. Which formats these are: the signatures in
    ISO/IEC 14496-12 §4.3, the Matroska spec (EBML header), GIF89a, RFC 9649 (WebP) and the PNG spec.
    Whether the bytes really are a video is then probed, as for a typed one."""
    if data[4:8] == b"ftyp":
        return ".mov" if data[8:12] == b"qt  " else ".mp4"
    if data[:4] == b"\x1a\x45\xdf\xa3":
        return ".webm" if b"webm" in data[:64] else ".mkv"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return ".gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ".webp"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    return None


# The suffixes of stored images: "." + an image format (the file's real one); videos keep VIDEO_TYPES' own.
IMAGE_SUFFIXES = tuple(sorted("." + fmt.lower() for fmt in IMAGE_FORMATS))
DETAILS = {"low": "fast", "auto": "balanced", "high": "full"}  # OpenAI's detail -> engine.api.events.DETAILS
_DATA_URI = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,",
                       re.IGNORECASE)


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
#: Refused whatever the interpreter's ``ipaddress`` tables say: before Python 3.11.10 / 3.12.4
#: (CVE-2024-4032) they counted some of these as global (192.0.0.192, an SSRF payload for a cloud
#: metadata service, among them).
_NOT_PUBLIC = tuple(ipaddress.ip_network(n) for n in (
    "192.0.0.0/24", "198.18.0.0/15", "100.64.0.0/10", "fec0::/10", "64:ff9b:1::/48", "2001::/23", "fc00::/7"))
#: Redirects a remote media URL may take (each hop's host is checked as the first one's).
MAX_MEDIA_REDIRECTS = 3


def public_address(address: str) -> bool:
    """True for an IP address (text, as getaddrinfo gives it) on the public internet: not loopback,
    private, link-local (169.254.169.254, cloud metadata services), multicast, reserved, unspecified
    or shared (100.64/10), and no such IPv4 address inside an IPv6 one (``::ffff:127.0.0.1``, NAT64,
    6to4, Teredo). The rules are Python's ``ipaddress`` (IANA's special-purpose address registries)."""
    ip = ipaddress.ip_address(address.split("%")[0])  # an IPv6 scope ("fe80::1%eth0") is not part of it
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # the IPv4 address itself
            return public_address(str(ip.ipv4_mapped))
        if ip in _NAT64:  # a NAT64 gateway reaches the IPv4 address in the low 32 bits
            return public_address(str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
        tunnelled = ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if tunnelled is not None and not public_address(str(tunnelled)):
            return False
    if any(ip in network for network in _NOT_PUBLIC if network.version == ip.version):
        return False
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_link_local or ip.is_loopback
                                 or ip.is_unspecified or ip.is_private)


async def resolve(host: str, port: int) -> list[str]:
    """The IP addresses ``host`` resolves to (the system's resolver); raises OSError when it does not."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0] for info in infos]


def _drop_part(future: asyncio.Future) -> None:
    """Delete the temporary file a write (``MediaStore._store``) left behind for a request that went away."""
    if not future.cancelled() and future.exception() is None and future.result().part is not None:
        future.result().part.unlink(missing_ok=True)


# New images' pixel decodes, on threads of their own: a decode (a 13-tile PNG ~15 ms, a 12 MP JPEG
# ~0.1 s) runs while its request goes on to the engine, which waits for the pixels where it needs
# them (engine.api.images.hand_over), so the request's own hops (the loop's wake-up after the decode,
# storing the file, queueing for the engine) are not added to its time to the first token.
_DECODERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="smolchat-decode")


class Accepted(NamedTuple):
    """A new image's checked bytes, hashed and stored (``MediaStore._store``)."""

    digest: str  # engine.api.images.bytes_digest, hex: the stored file's name
    known: str | None  # the stored path of the same bytes accepted before, else None
    part: Path | None  # the temporary file now holding the bytes (None when known)
    memo: str | None  # the URL for the seen-URL memo, copied on the worker thread (_memo_copy), or None


@dataclass
class PendingImage:
    """A new image stored and handed to the engine while its decode still runs: confirmed or
    refused by :meth:`MediaStore.confirm` before its request's response starts."""

    path: str
    url: str
    param: str
    decode: Future


def _b64(text: str, param: str) -> bytes:
    try:  # SIMD base64 (pybase64, as vLLM decodes its image data): a 0.6 MB photo in ~0.03 ms, not ~2 ms
        return pybase64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    # What pybase64 refuses goes to the standard library, so every input decodes or fails as it does
    # there: it also takes padding after a whole group ("bHfu="), and line-wrapped base64 (MIME
    # style) once the whitespace is stripped (a 0.6 MB regex pass, ~5-9 ms: hence only here).
    compact = re.sub(r"\s+", "", text)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise APIError(400, "the media data is not valid base64" + _base64_hint(compact), "invalid_base64",
                       param) from None


def _base64_hint(text: str) -> str:
    """Why ``text`` is not base64, where the cause is a common encoder's habit (JavaScript's URL-safe
    alphabet, padding left off); else ``""``."""
    if re.fullmatch(r"[A-Za-z0-9_\-]+=*", text) and re.search(r"[_\-]", text):
        return ": it uses the URL-safe alphabet ('-' and '_'); encode with the standard one ('+' and '/')"
    if re.fullmatch(r"[A-Za-z0-9+/]+", text) and len(text) % 4:
        return ": its length is not a multiple of 4 (the '=' padding at its end is missing)"
    return ""


def split_data(url: str, param: str) -> tuple[str | None, bytes | None]:
    """``(mime, bytes)`` of a data URI or raw base64; ``(None, None)`` for an http(s) URL.

    Raises APIError 400 for other schemes (``file://`` included) and broken base64."""
    match = _DATA_URI.match(url)
    if match:
        if not match.group("b64"):
            raise APIError(400, "data URIs must be base64-encoded (';base64,')", "invalid_data_uri", param)
        return (match.group("mime") or "").lower(), _b64(url[match.end():], param)
    scheme = url.split(":", 1)[0].lower() if ":" in url[:12] else ""
    if scheme in ("http", "https"):
        return None, None
    if scheme == "data":  # a data: URI whose header the pattern above does not take
        header = url[:url.find(",")] if "," in url[:200] else url[:40] + "..."
        raise APIError(400, f"unsupported data URI header {header!r}: send base64 data as "
                            "'data:<type>/<subtype>;base64,<data>', e.g. data:image/png;base64,...",
                       "invalid_data_uri", param)
    if len(scheme) == 1 and url[2:3] in ("/", "\\"):  # C:\Users\... : a Windows path, not a URL
        raise APIError(400, _FILE_PATH, "invalid_url", param)
    if scheme == "file":
        raise APIError(400, _FILE_PATH, "invalid_url", param)
    if scheme:
        raise APIError(400, f"unsupported URL scheme {scheme!r}: use a data: URI or base64", "invalid_url", param)
    try:
        return "", _b64(url, param)
    except APIError:
        # Raw base64 may start with "/" (a JPEG's "/9j/"): a path is recognised only once the
        # string has failed as base64, and only at a path's length (a damaged photo is longer).
        if len(url) <= 4096 and (_PATH_START.match(url) or _MEDIA_NAME.search(url)):
            raise APIError(400, _FILE_PATH, "invalid_url", param) from None
        raise APIError(400, "the media data is not valid base64, and not a data: URI or an http(s) URL either "
                            "(send e.g. data:image/png;base64,<the file's bytes in base64>)",
                       "invalid_base64", param) from None


def is_part(path: Path) -> bool:
    """Whether ``path`` is a file still being written and checked (:meth:`MediaStore._write_part`:
    ``.part``, or ``.part.webp`` for an animation probed under its suffix), not a stored one."""
    return path.suffix == ".part" or path.with_suffix("").suffix == ".part"


_PATH_START = re.compile(r"(?:/|~|\.{1,2}[/\\]|\\\\)")
_MEDIA_NAME = re.compile(r"\.(?:png|jpe?g|webp|gif|bmp|tiff?|heic|mp4|mov|webm|mkv|avi)$", re.IGNORECASE)
_FILE_PATH = ("the media URL is a file path, and the server never reads files: send the file's bytes as a data: "
              "URI (data:image/png;base64,...)")


# Characters of recently accepted image URLs remembered (64 M: ~100 re-sent photos of ~0.5 MB).
SEEN_URL_CHARS = 64 * 2**20
# Every URL_KEY_STRIDE-th character of a URL goes into its memo key (_url_key).
URL_KEY_STRIDE = 1024


def _memo_copy(url: str, fetched: bool) -> str | None:
    """Worker thread: a copy of a base64 image URL for :class:`MediaStore`'s seen-URL memo, or None
    for a URL the memo does not keep (a remote one: its bytes may change; one over its size cap).

    Why a copy: the request's own string was parsed on the event loop's thread, so it lives in
    glibc's main heap, where every request's body and parsed strings come and go. Kept there, each
    new photo raises the heap's top by ~0.6 MB, and the next request to outgrow the freed space (a
    follow-up's slightly larger body) gets fresh pages: ~150 page faults, 0.65 ms of a follow-up's
    time to the first token measured on the H200's host (session 28). A copy made here lives in this
    thread's own malloc arena, and the request's string is freed with its request. (One allocation
    and a memcpy, ~0.02 ms for 0.6 MB; its pages fault on this thread while the pixels decode.)"""
    if fetched or len(url) > SEEN_URL_CHARS // 4:
        return None
    return "".join((url, ""))  # a new string (str.join copies unless given a single item)


def _url_key(url: str) -> tuple[int, str]:
    """A cheap dictionary key for an image URL: its length, every :data:`URL_KEY_STRIDE`-th character
    and its last 64. Hashing the string itself reads all of it (0.15-0.5 ms for a 0.6 MB data URI,
    each request's string being a new object); this reads ~700 characters. Different URLs can share
    a key: a hit is confirmed by comparing the whole strings (a memcmp, ~0.01 ms)."""
    return len(url), url[::URL_KEY_STRIDE] + url[-64:]


class MediaStore:
    """Checks media against the config's limits and stores it by content hash in ``folder``."""

    def __init__(self, config: ServerConfig, folder: Path):
        self.config, self.folder = config, folder
        # Pillow warns (on stderr, once per image) about images over its own limit, 89 MP, before it
        # refuses them at twice that; this store refuses anything over max_image_pixels with a 413
        # itself, so the warning is only noise on the server's output. (Once per store, not at import:
        # a filter is process-wide, and a test runner resets filters between tests.)
        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
        folder.mkdir(parents=True, exist_ok=True)
        # Accepted image URL (the data URI string as sent) -> stored path, least recently used first,
        # as _url_key(url) -> (url, path). An OpenAI client re-sends each photo of a conversation on
        # every turn: the same string finds its file without stripping, decoding and hashing it
        # again (~4 ms for a 0.5 MB photo, a tenth of a follow-up's time to the first token).
        self._seen: OrderedDict[tuple[int, str], tuple[str, str]] = OrderedDict()
        self._seen_chars = 0
        # Files in the folder as far as this store knows (those it wrote since it last listed it).
        self._stored = sum(1 for p in folder.iterdir() if not is_part(p))
        self._parts = itertools.count()  # temporary file names
        # Stored path -> the decode of a new image not yet confirmed (another request sending the
        # same bytes meanwhile confirms the same decode), and the background settle tasks.
        self._decoding: dict[str, Future] = {}
        self._settling: set[asyncio.Future] = set()

    async def image(self, url: str, param: str) -> str:
        """The stored path of a checked image (PNG, JPEG, WebP, GIF, BMP, TIFF), decoded in full.

        Raises APIError 400 (bad base64, URL scheme, type or data) and 413 (over the size or pixel
        limits)."""
        path, pending = await self.begin_image(url, param)
        if pending is not None:
            await self.confirm([pending])
        return path

    async def begin_image(self, url: str, param: str) -> tuple[str, PendingImage | None]:
        """The stored path of an image checked up to its pixels, and for a new one its decode, still
        running (:meth:`confirm` waits for it; the engine's ``load_image`` of the path too).

        Raises APIError 400 (bad base64, URL scheme, type, header) and 413 (over the size or pixel
        limits) before returning; data that breaks only inside the pixels is refused by
        :meth:`confirm` (400 ``invalid_image``)."""
        url = url.strip()  # spaces or a line end around a pasted URL (str.strip: the same string if none)
        key = _url_key(url)
        seen = self._seen.get(key)
        if seen is not None and seen[0] == url:
            try:
                os.utime(seen[1])  # its use time, for _trim
            except OSError:  # trimmed since: decode and store it again
                self._forget(key)
            else:
                self._seen.move_to_end(key)
                return seen[1], self._still_decoding(seen[1], url, param)
        return await self._image(url, param)

    async def confirm(self, pending: list[PendingImage]) -> None:
        """Wait for new images' decodes. One that failed is refused: its file deleted, its URL
        forgotten, its pixels withdrawn from the engine, and its error (APIError 400) raised; the
        images after it are settled in the background (:meth:`settle`)."""
        for i, image in enumerate(pending):
            try:
                await asyncio.shield(asyncio.wrap_future(image.decode))  # (the engine may wait for it too)
            except asyncio.CancelledError:
                self.settle(pending[i:])
                raise
            except Exception:
                self._refused(image)
                self.settle(pending[i + 1:])
                raise
            self._decoding.pop(image.path, None)

    def settle(self, pending: list[PendingImage]) -> None:
        """Decide on new images whose request failed before :meth:`confirm` (another part refused, a
        429): each is kept once its decode succeeds, or deleted and forgotten if it fails, in a
        background task. Idempotent: images confirmed before are left as they are."""
        if pending:
            task = asyncio.ensure_future(self._settle(list(pending)))
            self._settling.add(task)  # a reference until it ends (the loop keeps only weak ones)
            task.add_done_callback(self._settling.discard)

    async def _settle(self, pending: list[PendingImage]) -> None:
        for image in pending:
            try:
                await asyncio.wrap_future(image.decode)
            except Exception:  # noqa: BLE001 - refused: nobody waits for the error
                self._refused(image)
            else:
                self._decoding.pop(image.path, None)

    def _refused(self, image: PendingImage) -> None:
        """Undo a new image whose decode failed (once, whichever request sees it first)."""
        if self._decoding.pop(image.path, None) is None:
            return
        withdraw(image.path)
        key = _url_key(image.url)
        if self._seen.get(key, ("", ""))[1] == image.path:
            self._forget(key)
        if Path(image.path).exists():
            Path(image.path).unlink(missing_ok=True)
            self._stored -= 1

    def _still_decoding(self, path: str, url: str, param: str) -> PendingImage | None:
        """For a request that finds a stored image another request is still decoding: the same decode
        to confirm (its refusal, if it fails, is this request's too)."""
        decode = self._decoding.get(path)
        return None if decode is None else PendingImage(path, url, param, decode)

    def _remember(self, url: str | None, path: str) -> None:
        """Map ``url`` (an :func:`_memo_copy`; None: nothing to remember) to ``path``; an entry of
        another URL with the same key is replaced, as is the URL's own (two requests with the same
        new photo, decoded side by side)."""
        if url is None:
            return
        key = _url_key(url)
        self._forget(key)
        self._seen[key] = (url, path)
        self._seen_chars += len(url)
        while self._seen_chars > SEEN_URL_CHARS:
            self._forget(next(iter(self._seen)))

    def _forget(self, key: tuple[int, str]) -> None:
        seen = self._seen.pop(key, None)
        if seen is not None:
            self._seen_chars -= len(seen[0])

    async def _image(self, url: str, param: str) -> tuple[str, PendingImage | None]:
        fetched = None
        if url[:8].lower().startswith(("http://", "https://")):
            fetched = await self._fetch(url, param)
        # A decoder thread takes the bytes from base64, checks their header and goes straight on to
        # decode the pixels; once the header is checked, a worker thread hashes and writes the bytes
        # beside the decode (Pillow's decoder, hashlib and the write all let the GIL go). The event
        # loop waits for the checks and the write only, and the decode starts without a second
        # thread's wake-up before it (0.3-1.3 ms measured between two threads passing the GIL).
        checked: Future = Future()
        decode = _DECODERS.submit(self._check_and_decode, url, param, fetched, checked)
        fmt, pixels, data = await asyncio.shield(asyncio.wrap_future(checked))
        storing = asyncio.ensure_future(asyncio.to_thread(self._store, url, param, data, decode, fetched is not None))
        try:
            accepted = await asyncio.shield(storing)
        except BaseException:  # the write failed, or the request was cancelled (the client left)
            storing.add_done_callback(_drop_part)  # once written, if it was
            raise
        if accepted.known is not None:  # checked when it first came: a client re-sends its photos every turn
            self._remember(accepted.memo, accepted.known)
            return accepted.known, self._still_decoding(accepted.known, url, param)
        if decode.done() and decode.exception() is not None:  # refused already: nothing is stored
            accepted.part.unlink(missing_ok=True)
            raise decode.exception()
        path = self.folder / (accepted.digest + "." + fmt.lower())
        self._commit(accepted.part, path)
        self._decoding[str(path)] = decode  # until confirmed or refused
        hand_over(path, decode, pixels)  # the engine takes these pixels, not the file's
        note_digest(path, bytes.fromhex(accepted.digest))  # and this digest instead of reading and hashing it
        self._remember(accepted.memo, str(path))
        return str(path), PendingImage(str(path), url, param, decode)

    def _check_and_decode(self, url: str, param: str, fetched: tuple[str, bytes] | None,
                          checked: Future) -> Image.Image:
        """Decoder thread: the image's bytes (from base64, or ``fetched`` from a URL) checked for
        type, size and header, set on ``checked`` as (format, pixels, bytes), then decoded.

        Raises APIError as :meth:`begin_image` (set on ``checked`` too), and as :meth:`_decode`."""
        try:
            mime, data = fetched if fetched is not None else split_data(url, param)
            if mime and mime not in IMAGE_TYPES and mime not in UNTYPED:
                raise APIError(400, f"unsupported image type {_shown(mime)}: send PNG, JPEG, WebP, GIF, BMP or TIFF",
                               "unsupported_image_format", param)
            self._check_size(data, param)
            fmt, pixels = self._check_header(data, param)
        except BaseException as exc:
            checked.set_exception(exc)
            raise
        checked.set_result((fmt, pixels, data))
        return self._decode(data, param)

    def _store(self, url: str, param: str, data: bytes, decode: Future, fetched: bool) -> Accepted:
        """Worker thread: checked bytes hashed and (unless accepted before) written, beside ``decode``.

        Raises APIError 507 or 500 when the write fails (:meth:`_write_part`; unless the decode
        refuses the image meanwhile: its 400 comes first)."""
        digest = bytes_digest(data).hex()  # the engine's: it keys the tiles by it, and it names the file
        memo = _memo_copy(url, fetched)
        known = self._known(digest)
        if known is not None:
            return Accepted(digest, known, None, memo)
        try:
            part = self._write_part(data, digest, param)
        except APIError:
            decode.result()  # a broken image still gets its 400 (raised here), as when nothing is written
            raise
        return Accepted(digest, None, part, memo)

    def _write_part(self, data: bytes, digest: str, param: str, suffix: str = "") -> Path:
        """Worker thread: a new temporary file in the folder holding ``data`` (renamed once checked),
        named ``....part`` and then ``suffix`` (for a reader that goes by it: :func:`is_part`).

        Raises APIError 507 ``insufficient_storage`` when the server's disk is full (or its quota
        spent), 500 ``storage_error`` when the write fails otherwise; nothing is left behind."""
        # A name of its own: two requests with the same new photo write side by side.
        part = self.folder / f"{digest}.{threading.get_ident()}.{next(self._parts)}.part{suffix}"
        try:
            part.write_bytes(data)
        except OSError as exc:
            part.unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise APIError(507, "the server's disk is full: it could not store this file (free some space "
                               "on the server and send it again)", "insufficient_storage", param) from None
            raise APIError(500, f"the server could not store this file: {exc.strerror or type(exc).__name__}",
                           "storage_error", param) from None
        return part

    async def video(self, url: str, param: str) -> str:
        """The stored path of a video (MP4, WebM, MOV, MKV, or an animated GIF, WebP or PNG), checked for
        type and size, and its headers read (a video stream with a frame rate; an image with more
        than one frame) when it is new: APIError 400 ``invalid_video`` otherwise, as a broken image
        gets ``invalid_image``; 400 ``unsupported_video_format`` for another type, naming those taken.
        Data without a type, or typed application/octet-stream, is read by its first bytes
        (:func:`sniff_video`)."""
        url = url.strip()
        mime, data = split_data(url, param)
        if data is None:
            mime, data = await self._fetch(url, param)
        self._check_size(data, param, "invalid_video")
        if not mime or mime in UNTYPED:  # the bytes say what they are, as for an untyped image
            suffix = sniff_video(data)
        else:
            suffix = VIDEO_TYPES.get(mime) or ANIMATION_TYPES.get(mime) or VIDEO_ALIASES.get(mime)
        if suffix is None:
            what = f"unsupported video type {_shown(mime)}" if mime and mime not in UNTYPED else \
                "the data is not a video this server reads"
            raise APIError(400, f"{what}: send {', '.join(VIDEO_TYPES)}, or an "
                           f"animated {', '.join(ANIMATION_TYPES)} (e.g. data:video/mp4;base64,...)",
                           "unsupported_video_format", param)
        return await asyncio.to_thread(self._store_video, data, suffix, param)

    def _store_video(self, data: bytes, suffix: str, param: str) -> str:
        """Worker thread: store ``data`` unless stored before, probing a new file's headers first
        (an animated image's frames counted first: :meth:`_check_animation`)."""
        from engine.api.errors import VideoError
        from engine.api.videos import NOT_A_VIDEO, probe

        digest = hashlib.sha256(data).hexdigest()[:40]
        path = self.folder / (digest + suffix)
        if path.exists():
            os.utime(path)  # its use time, for _trim
            return str(path)
        animated = suffix in ANIMATION_TYPES.values()
        if animated:
            self._check_animation(data, suffix, param)
        # The engine reads an animated WebP or APNG by its suffix (Pillow, not PyAV): it is probed under it.
        part = self._write_part(data, digest, param, suffix if animated else "")
        try:
            probe(part)
        except VideoError as exc:
            part.unlink(missing_ok=True)
            # The engine's message names the file: say what is wrong, not where the server keeps it.
            reason = "the data is not a video this server reads (MP4, WebM, MOV, MKV, or an animated GIF, " \
                "WebP or PNG), or it is cut short or damaged" \
                if str(exc).endswith(NOT_A_VIDEO) else str(exc).replace(part.name, "the data")
            raise APIError(400, f"the video cannot be read: {reason}", "invalid_video", param) from None
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        self._commit(part, path)
        return str(path)

    @staticmethod
    def _check_animation(data: bytes, suffix: str, param: str) -> None:
        """An animated image sent as a video: APIError 400 ``invalid_video`` unless its header says
        it is that format (``suffix``: ``.gif``, ``.webp``, ``.png``/``.apng``) with more than one frame, as the app takes
        such a file as a video (``engine.api.images.frame_count`` > 1); a still one is an image."""
        kind = {".webp": "WebP", ".apng": "PNG"}.get(suffix, suffix[1:].upper())
        try:
            with Image.open(io.BytesIO(data)) as image:
                fmt, frames = image.format, int(getattr(image, "n_frames", 1))
        except Exception:  # noqa: BLE001 - Pillow's errors on cut data vary (IndexError, struct.error: a trial)
            fmt, frames = None, 0
        if fmt != kind.upper():  # (Pillow names an APNG's format "PNG")
            raise APIError(400, f"the video cannot be read: the data is not an animated {kind} this server reads, "
                           "or it is cut short or damaged", "invalid_video", param)
        if frames < 2:
            raise APIError(400, f"the video cannot be read: the {kind} has one frame, a still image: send it as an "
                           "image_url part", "invalid_video", param)

    def _check_size(self, data: bytes, param: str, empty_code: str = "invalid_image") -> None:
        if not data:
            raise APIError(400, "the media data is empty", empty_code, param)
        if len(data) > self.config.max_media_bytes:
            raise APIError(413, f"media of {len(data)} bytes exceeds the limit of {self.config.max_media_bytes}",
                           "media_too_large", param)

    def _check_header(self, data: bytes, param: str) -> tuple[str, int]:
        """Read the header: ``(format, width x height)``; 400 for what is no image this server reads,
        413 beyond the pixel limit."""
        from PIL import UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as img:
                fmt, (w, h) = img.format or "", img.size
                if fmt not in IMAGE_FORMATS:
                    raise APIError(400, f"unsupported image format {fmt or 'unknown'}", "unsupported_image_format",
                                   param)
                if w * h > self.config.max_image_pixels:
                    raise self._too_large(f"{w * h} pixels ({w}x{h})", param)
        except APIError:
            raise
        except UnidentifiedImageError:
            raise APIError(400, "the data is not an image this server reads (PNG, JPEG, WebP, GIF, BMP, TIFF)",
                           "unsupported_image_format", param) from None
        except Image.DecompressionBombError as exc:  # Pillow refuses to open it at all: far over the limit
            # Its message quotes Pillow's own limit beside ours; the client needs the size and ours.
            found = re.search(r"\((\d+) pixels\)", str(exc))
            raise self._too_large(f"{int(found.group(1))} pixels" if found else "more pixels than Pillow opens",
                                  param) from None
        except (OSError, ValueError, SyntaxError) as exc:
            raise APIError(400, f"the image cannot be decoded: {exc}", "invalid_image", param) from None
        return fmt, w * h

    def _decode(self, data: bytes, param: str) -> Image.Image:
        """Decoder thread: the pixels, decoded the engine's way (:func:`load_image`: RGB, upright),
        which the engine then uses as they are; 400 ``invalid_image`` if they are broken."""
        try:
            return load_image(data)
        except ImageError as exc:
            # The engine's message names a file ("<bytes>" here) and quotes Pillow; say what is wrong.
            reason = "its data is truncated or corrupt" if "truncated or corrupt" in str(exc) \
                else str(exc).replace("<bytes>", "the image")
            raise APIError(400, f"the image cannot be decoded: {reason}", "invalid_image", param) from None

    def _too_large(self, size: str, param: str) -> APIError:
        """The 413 for an image of ``size`` over ``max_image_pixels``, one wording whichever check found it."""
        return APIError(413, f"the image has {size}, more than the limit of {self.config.max_image_pixels}: "
                             "downscale it before sending",
                        "image_too_large", param)

    async def _fetch(self, url: str, param: str) -> tuple[str, bytes]:
        """GET an http(s) URL within the size and time limits (only with ``allow_remote_media``).

        ``remote_timeout_s`` bounds the whole fetch (name resolution, redirects, every byte), not
        each read: a host sending a byte now and then cannot hold the request open. Unless
        ``allow_private_media_hosts``, a host that resolves to an address other than a public one
        (loopback, private, link-local such as 169.254.169.254, multicast, reserved, unspecified,
        or one of these inside an IPv6 form) is refused, at every redirect, and the connection
        goes to the address that was checked (so a DNS answer that changes between the check and
        the connection cannot lead elsewhere).

        Raises:
            APIError: 400 ``remote_media_disabled``, ``media_fetch_refused`` (such an address, or
                not http(s)), ``media_fetch_failed`` (HTTP error status, network error, too many
                redirects, past the time limit); 413 ``media_too_large`` (over ``max_media_bytes``).
        """
        if not self.config.allow_remote_media:
            raise APIError(400, "remote media URLs are off: send a data: URI, or start the server with "
                           "--allow-remote-media", "remote_media_disabled", param)
        timeout = self.config.remote_timeout_s
        try:
            async with asyncio.timeout(timeout):
                return await self._fetch_within(url, param)
        except TimeoutError:
            raise APIError(400, f"fetching the media URL took longer than {timeout:g} s", "media_fetch_failed",
                           param) from None

    async def _fetch_within(self, url: str, param: str) -> tuple[str, bytes]:
        import httpx

        limit = self.config.max_media_bytes
        try:
            target = httpx.URL(url)
        except httpx.InvalidURL:
            raise APIError(400, "the media URL is not a valid URL", "invalid_url", param) from None
        try:
            # trust_env=False: no proxy from the environment. Through a proxy the checked address would be
            # the proxy's to reach (an HTTPS tunnel to an IP fails its certificate check; a plain proxy
            # ignores the Host header), and NO_PROXY lists names, not the addresses sent.
            async with httpx.AsyncClient(timeout=self.config.remote_timeout_s, follow_redirects=False,
                                         trust_env=False) as client:
                for _ in range(MAX_MEDIA_REDIRECTS + 1):
                    async with self._connected(client, target, param) as response:
                        if response.is_redirect:
                            target = target.join(response.headers["location"])
                            continue
                        if response.status_code != 200:
                            raise APIError(400, f"fetching the media URL gave HTTP {response.status_code}",
                                           "media_fetch_failed", param)
                        chunks, size = [], 0
                        async for chunk in response.aiter_bytes():
                            size += len(chunk)
                            if size > limit:
                                raise APIError(413, f"the media URL's content exceeds {limit} bytes",
                                               "media_too_large", param)
                            chunks.append(chunk)
                        mime = response.headers.get("content-type", "").split(";")[0].strip().lower()
                        return (mime if mime.startswith(("image/", "video/")) else ""), b"".join(chunks)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            # A connection's own words say what a client can act on ("Connection refused", a
            # certificate that does not verify); the others' are httpx internals.
            why = f" ({str(exc)[:200]})" if isinstance(exc, httpx.ConnectError) and str(exc) else ""
            raise APIError(400, f"cannot fetch the media URL: {type(exc).__name__}{why}", "media_fetch_failed",
                           param) from None
        raise APIError(400, f"the media URL redirects more than {MAX_MEDIA_REDIRECTS} times", "media_fetch_failed",
                       param)

    @contextlib.asynccontextmanager
    async def _connected(self, client, target, param: str):
        """The streamed response to the GET of ``target`` from the first of its host's checked
        addresses that accepts a connection (in the resolver's order, as a connection to the name
        would try them: an unreachable IPv6 address first must not fail the fetch)."""
        import httpx

        requests = await self._checked_requests(client, target, param)
        for k, request in enumerate(requests):
            try:
                response = await client.send(request, stream=True)
            except httpx.ConnectError:
                if k == len(requests) - 1:
                    raise
                continue
            try:
                yield response
            finally:
                await response.aclose()
            return

    async def _checked_requests(self, client, target, param: str) -> list:
        """The GETs of ``target`` (an httpx.URL), one for each IP address its host resolved to, once
        every address is checked; the Host header and TLS (SNI, certificate) keep the name."""
        if target.scheme not in ("http", "https") or not target.host:
            raise APIError(400, "the media URL (or a redirect) is not an http(s) URL", "media_fetch_refused", param)
        port = target.port or (443 if target.scheme == "https" else 80)
        name = target.raw_host.decode("ascii")  # IDNA 2008 as httpx encodes it (str hosts go through IDNA 2003)
        try:
            addresses = await resolve(name, port)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a label too long or empty ("x..y.com")
            raise APIError(400, f"cannot fetch the media URL: its host does not resolve "
                           f"({getattr(exc, 'strerror', None) or exc})", "media_fetch_failed", param) from None
        if not addresses:
            raise APIError(400, "cannot fetch the media URL: its host does not resolve", "media_fetch_failed", param)
        if not self.config.allow_private_media_hosts and not all(map(public_address, addresses)):
            raise APIError(400, f"the media URL's host {target.host} is not a public address; the server fetches "
                           "media from the internet only (start it with --allow-private-media-hosts to allow "
                           "hosts on this machine or network)", "media_fetch_refused", param)
        host = target.netloc.decode("ascii")
        return [client.build_request("GET", target.copy_with(host=address.split("%")[0]), headers={"Host": host},
                                     extensions={"sni_hostname": name} if target.scheme == "https" else {})
                for address in dict.fromkeys(addresses)]

    def _known(self, digest: str, suffixes: tuple[str, ...] = IMAGE_SUFFIXES) -> str | None:
        """The stored path of the bytes with this digest if they were accepted before as what
        ``suffixes`` name (default: an image; the same bytes sent as a video were only checked for
        size, and are no image), its use time refreshed; else None. A stat per suffix, not a listing
        of the folder (a glob read all ~500 names of a full one)."""
        for suffix in suffixes:
            path = self.folder / (digest + suffix)
            try:
                os.utime(path)
            except FileNotFoundError:
                continue
            return str(path)
        return None

    def _commit(self, part: Path, path: Path) -> None:
        """A checked temporary file becomes ``path``, then the folder is trimmed."""
        part.replace(path)  # atomic: a concurrent request never sees half a file
        self._stored += 1
        self._trim(keep=path)

    def _trim(self, keep: Path) -> None:
        """Delete the least recently used files beyond ``config.max_stored_media``. Every request
        re-sends (and so touches) the media of its conversation, so what is deleted belongs to
        conversations not seen for the longest time. Files being written (``.part``) stay.

        The folder is listed only when the files counted since the last listing may exceed the
        limit, and then trimmed an eighth below it (a listing of 512 files and their stats took
        ~3 ms, which every new photo paid once the folder was full)."""
        limit = self.config.max_stored_media
        if self._stored <= limit:
            return
        files = []
        for p in self.folder.iterdir():
            if p != keep and not is_part(p):
                try:
                    files.append((p.stat().st_mtime, p))
                except OSError:  # deleted meanwhile
                    pass
        files.sort(key=lambda entry: entry[0])
        excess = max(0, len(files) + 1 - (limit - limit // 8))
        for _, old in files[:excess]:
            old.unlink(missing_ok=True)
        self._stored = len(files) + 1 - excess
