"""Images -> SmolVLM (Idefics3) pixel tiles, and the expanded image prompt string.

Pillow and numpy only (no torch). The ``"full"`` detail mode reproduces transformers 5's PIL-backend
image processor (``transformers/models/idefics3/image_processing_pil_idefics3.py``,
``Idefics3ImageProcessorPil``, on top of ``PilBackend`` in ``transformers/image_processing_backends.py``)
pixel for pixel. Function names in the docstrings below refer to those files.

Pipeline for one image (``ImageProcessor.preprocess``):

1. ``PilBackend.process_image`` -> ``convert_to_rgb`` (``image_transforms.py``): images with an alpha
   band or a ``transparency`` entry are converted to RGBA and alpha-composited over opaque white;
   all others go through ``Image.convert("RGB")``. transformers 5 does this FIRST, before any resize
   (transformers 4's slow processor converted after resizing and splitting, and resized L/P images
   with NEAREST: smolvlm-reference.md section 0.3; transformers 5 is the oracle we match).
2. ``resize`` / ``get_resize_output_image_size``: longest edge -> ``size.longest_edge`` (the short
   edge is ``int(long / aspect)`` rounded up to even), then capped at ``MAX_IMAGE_SIZE`` = 4096.
3. ``resize_for_vision_encoder``: both edges rounded up to multiples of ``M = max_image_size``.
4. ``split_images``: ``M x M`` crops in row-major order, then the whole stage-3 image resized to
   ``M x M`` (the global tile) LAST; an image that already fits is one tile with rows = cols = 0.
5. ``rescale`` (uint8 -> float64 * factor -> float32) and ``normalize`` ((x - mean) / std in float32).

Every resize is ``PIL.Image.resize`` with the checkpoint's filter (LANCZOS for SmolVLM) on RGB uint8.

Files are opened by :func:`engine.api.images.load_image`, which deviates from transformers on purpose
(alpha over white from every source, 16/32-bit images scaled to 8 bits: see that module).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from PIL import Image

from engine.api.errors import ConfigError, ImageError
from engine.api.images import frame_count, load_image, to_rgb  # noqa: F401  (one decoder; the app checks attachments with it)
from engine.models.smolvlm.prompt import (  # noqa: F401  (re-exported: the prompt side of processing)
    FAKE_IMAGE_TOKEN,
    GLOBAL_IMAGE_TOKEN,
    IMAGE_PLACEHOLDER,
    IMAGE_TOKEN,
    VIDEO_TOKEN,
    expand_prompt,
    image_prompt,
    video_prompt,
)

if TYPE_CHECKING:  # torch is imported where tensors are made: header reads stay light
    import torch

MAX_IMAGE_SIZE = 4096
"""Hard cap on the stage-1 longest edge (``image_processing_pil_idefics3.MAX_IMAGE_SIZE``)."""

Detail = Literal["full", "balanced", "fast"]


@dataclass(frozen=True, eq=False)
class ProcessedImage:
    """The pixel tiles of one image and its grid.

    The tiles are kept as uint8 ``pixels`` plus a per-channel lookup table ``lut``; normalizing is
    a table lookup, done where the tiles are used: :meth:`tiles_tensor` on the model's device (a
    17-tile photo is 13 MB of uint8 against 53 MB of float32 to hash and copy to a GPU, and the
    lookup takes ~60 ms on the host), :attr:`tiles` on the host. Both give the same float32 values.

    Attributes:
        pixels: ``uint8 [N, 3, M, M]``, channels first. For a split image ``N = rows * cols + 1``:
            the crops in row-major order, then the global tile LAST. For a single-tile image ``N = 1``.
        lut: ``float32 [3, 256]``, the normalized value of each channel's byte values (rescale and
            normalize of the reference, applied to 0..255).
        rows, cols: the crop grid; both 0 for a single (global-only) tile.
        image_seq_len: ``<image>`` tokens per tile (64 for SmolVLM-256M).
    """

    pixels: np.ndarray
    lut: np.ndarray
    rows: int
    cols: int
    image_seq_len: int
    #: The token the chat template writes per image part, and the feature slot of :attr:`prompt`
    #: (the tokenizer and ChatSession read it here, not from a model's metadata).
    image_token: ClassVar[str] = IMAGE_TOKEN

    @functools.cached_property
    def tiles(self) -> np.ndarray:
        """``float32 [N, 3, M, M]``, normalized pixels (pixel-exact with transformers' PIL backend)."""
        out = np.empty(self.pixels.shape, dtype=np.float32)
        for c in range(self.pixels.shape[1]):
            np.take(self.lut[c], self.pixels[:, c], out=out[:, c])
        return out

    def tiles_tensor(self, device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
        """:attr:`tiles` as a ``[N, 3, M, M]`` tensor of ``dtype`` on ``device``, normalized there: the
        uint8 pixels are copied and looked up in the table (cast to ``dtype`` first, which gives the
        same values as casting the normalized floats). ``dtype`` defaults to float32."""
        import torch

        pixels = torch.from_numpy(self.pixels).to(device)
        lut = torch.from_numpy(self.lut).to(device=device, dtype=dtype or torch.float32)  # [C, 256]
        offsets = torch.arange(lut.shape[0], device=device).view(-1, 1, 1) * lut.shape[1]
        flat = lut.flatten()
        out = torch.empty(pixels.shape, dtype=lut.dtype, device=device)
        for i in range(pixels.shape[0]):
            # One tile at a time: int64 indices for a whole 17-tile photo would take 107 MB of
            # device memory (8x its bytes), and peak GPU memory is a target.
            out[i] = flat[pixels[i].long() + offsets]  # each channel's bytes index its own row
        return out

    @property
    def num_tiles(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def num_image_tokens(self) -> int:
        """Number of ``<image>`` tokens this image occupies in the prompt (``N * image_seq_len``)."""
        return self.num_tiles * self.image_seq_len

    @property
    def prompt(self) -> str:
        """The expanded prompt string of this image (see :func:`image_prompt`)."""
        return image_prompt(self.rows, self.cols, self.image_seq_len)

    @functools.cached_property
    def tile_digests(self) -> tuple[bytes, ...]:
        """A 16-byte hash (SHA-256's first bytes) of each tile's pixels and the table, once per image: the
        KV cache key of its ``<image>`` tokens (reference §0.8: the token ids alone are the same for
        every image). :meth:`ImageProcessor.preprocess` computes them up front, tiles in parallel,
        or derives them from a digest of the encoded file when it is given one (``source_digest``)."""
        return tuple(_pool().map(self._digest, range(self.num_tiles)))

    def _digest(self, index: int) -> bytes:
        # Hashed in place through the buffer protocol (hashlib releases the GIL for large inputs);
        # SHA-256 runs on x86's SHA instructions, ~2x BLAKE2b's speed (a 64-frame video: 50 MB).
        h = hashlib.sha256(np.ascontiguousarray(self.pixels[index]))
        h.update(self.lut)
        return h.digest()[:16]

    def hash_tiles(self, source: bytes | None = None) -> None:
        """Compute :attr:`tile_digests` now: hashing the pixels, or, with ``source`` (bytes that fix
        every tile: the encoded file's digest and the preprocessing that was applied to it), one short
        hash per tile of ``source`` and the tile's index. A 13-tile photo's 10 MB of pixels took ~7 ms
        to hash on the H200 machine's host, a tenth of a new photo's time to the first token; the
        file's digest (``ChatSession`` computes one anyway, for its cache of tiled images) is free."""
        if source is None:
            self.tile_digests  # noqa: B018  (a cached property)
            return
        digests = tuple(hashlib.blake2b(source + i.to_bytes(4, "little"), digest_size=16, person=b"smolchat-tile")
                        .digest() for i in range(self.num_tiles))
        self.__dict__["tile_digests"] = digests  # the cached property's slot (the dataclass is frozen)


_POOL: ThreadPoolExecutor | None = None


@dataclass(frozen=True)
class ImageGrid:
    """An image as a prompt sees it, without pixels: its crop grid (``rows``, ``cols``: both 0 for
    one global tile) and ``<image>`` tokens per tile. What :class:`ProcessedImage` gives the
    tokenizer (``image_token``, ``prompt``, ``num_image_tokens``), from the image's size alone
    (:meth:`ImageProcessor.image_grid`): a prompt's ids counted without tiling (``/tokenize``)."""

    rows: int
    cols: int
    image_seq_len: int
    image_token: ClassVar[str] = IMAGE_TOKEN

    @property
    def num_image_tokens(self) -> int:
        return (self.rows * self.cols + 1) * self.image_seq_len

    @property
    def prompt(self) -> str:
        return image_prompt(self.rows, self.cols, self.image_seq_len)


def _pool() -> ThreadPoolExecutor:
    """Threads for preprocessing work that releases the GIL (Pillow resampling, hashing)."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="smolchat-image")
    return _POOL




# EXIF orientations that turn the image by 90 or 270 degrees (``ImageOps.exif_transpose``).
_TRANSPOSING_ORIENTATIONS = {5, 6, 7, 8}


def image_size(source: str | os.PathLike) -> tuple[int, int]:
    """``(width, height)`` of an image file once EXIF-rotated, read from its header (no decoding).

    Raises:
        ImageError: the file is missing or not a recognised image.
    """
    try:
        with Image.open(source) as image:
            width, height = image.size
            if image.getexif().get(0x0112) in _TRANSPOSING_ORIENTATIONS:
                width, height = height, width
    except FileNotFoundError:
        raise ImageError(f"Image file not found: {source}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(f"Not a recognised image file: {source} ({exc})") from exc
    return width, height


def _read_json(folder: Path, name: str, required: bool = True) -> dict | None:
    path = folder / name
    if not path.is_file():
        if required:
            raise ConfigError(f"Missing {name} in {folder}")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}") from exc


class ImageProcessor:
    """SmolVLM image preprocessing configured from a checkpoint folder.

    Sizes are pixels. ``longest_edge`` is ``size.longest_edge`` (stage-1 target, 2048 for 256M),
    ``max_image_size`` is the tile side M (512), ``image_seq_len`` the ``<image>`` tokens per tile (64).
    """

    #: The feature-slot token of the prompts it makes (see :attr:`ProcessedImage.image_token`).
    image_token: ClassVar[str] = IMAGE_TOKEN

    def __init__(
        self,
        *,
        longest_edge: int,
        max_image_size: int,
        image_seq_len: int,
        resample: int = Image.Resampling.LANCZOS,
        rescale_factor: float = 1 / 255,
        image_mean: tuple[float, ...] = (0.5, 0.5, 0.5),
        image_std: tuple[float, ...] = (0.5, 0.5, 0.5),
        do_resize: bool = True,
        do_image_splitting: bool = True,
        do_convert_rgb: bool = True,
        do_rescale: bool = True,
        do_normalize: bool = True,
        video_sampling: dict | None = None,
    ) -> None:
        self.longest_edge = int(longest_edge)
        self.max_image_size = int(max_image_size)
        self.image_seq_len = int(image_seq_len)
        self.resample = int(resample)
        self.rescale_factor = float(rescale_factor)
        self.image_mean = tuple(float(v) for v in image_mean)
        self.image_std = tuple(float(v) for v in image_std)
        self.do_resize = bool(do_resize)
        self.do_image_splitting = bool(do_image_splitting)
        self.do_convert_rgb = bool(do_convert_rgb)
        self.do_rescale = bool(do_rescale)
        self.do_normalize = bool(do_normalize)
        #: ``video_sampling`` of preprocessor_config.json (SmolVLM2: ``fps``, ``max_frames``,
        #: ``video_size.longest_edge``); ``None``: the checkpoint takes no videos.
        self.video_sampling = dict(video_sampling) if video_sampling else None
        #: A torch device to resize images on (:mod:`engine.models.smolvlm.resample`, byte-identical
        #: to Pillow); ``None``: Pillow on the host. ``load_components`` sets it for a CUDA model.
        self.resize_device = None

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike) -> ImageProcessor:
        """Read ``preprocessor_config.json`` (+ ``processor_config.json`` for ``image_seq_len``).

        Without ``processor_config.json`` the token count comes from ``config.json``:
        ``int((image_size // patch_size) ** 2 / scale_factor ** 2)`` (``Idefics3Processor`` docstring).

        Raises:
            ConfigError: a needed file or key is missing or unreadable (the file is named).
        """
        folder = Path(folder)
        pre = _read_json(folder, "preprocessor_config.json")
        proc = _read_json(folder, "processor_config.json", required=False) or {}
        try:
            if "image_seq_len" in proc:
                seq_len = int(proc["image_seq_len"])
            else:
                cfg = _read_json(folder, "config.json")
                vision = cfg["vision_config"]
                side = vision["image_size"] // vision["patch_size"]
                seq_len = int(side**2 / cfg["scale_factor"] ** 2)
            return cls(
                longest_edge=pre["size"]["longest_edge"],
                max_image_size=pre["max_image_size"]["longest_edge"],
                image_seq_len=seq_len,
                resample=pre.get("resample", Image.Resampling.LANCZOS),
                rescale_factor=pre.get("rescale_factor", 1 / 255),
                image_mean=pre.get("image_mean", (0.5, 0.5, 0.5)),
                image_std=pre.get("image_std", (0.5, 0.5, 0.5)),
                do_resize=pre.get("do_resize", True),
                do_image_splitting=pre.get("do_image_splitting", True),
                do_convert_rgb=pre.get("do_convert_rgb", True),
                do_rescale=pre.get("do_rescale", True),
                do_normalize=pre.get("do_normalize", True),
                video_sampling=pre.get("video_sampling"),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{folder}: preprocessor/processor config lacks key {exc}") from exc

    # -- prompt ---------------------------------------------------------------------------------

    def image_prompt(self, rows: int, cols: int) -> str:
        """:func:`image_prompt` with this checkpoint's ``image_seq_len``."""
        return image_prompt(rows, cols, self.image_seq_len)

    def expand_prompt(self, prompt: str, images: list[ProcessedImage]) -> str:
        """:func:`expand_prompt` (kept here so callers need only the processor)."""
        return expand_prompt(prompt, images)

    # -- pixels ---------------------------------------------------------------------------------

    def stage1_size(self, width: int, height: int, longest_edge: int) -> tuple[int, int]:
        """(width, height) after the stage-1 resize.

        Source: ``_resize_output_size_rescale_to_max_len`` (always rescales the longest edge to
        ``longest_edge``, upscaling small images; the other edge is ``int()``-truncated and rounded up
        to even; both at least 1), then ``_resize_output_size_scale_below_upper_bound`` with 4096.
        """
        aspect = width / height
        if width >= height:
            w = longest_edge
            h = int(w / aspect)
            h += h % 2
        else:
            h = longest_edge
            w = int(h * aspect)
            w += w % 2
        h, w = max(h, 1), max(w, 1)
        aspect = w / h
        if w >= h and w > MAX_IMAGE_SIZE:
            w = MAX_IMAGE_SIZE
            h = int(w / aspect)
        elif h > w and h > MAX_IMAGE_SIZE:
            h = MAX_IMAGE_SIZE
            w = int(h * aspect)
        return max(w, 1), max(h, 1)

    def stage2_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) rounded up to multiples of M (``resize_for_vision_encoder``).

        The long edge is rounded up first; the short edge is ``int(long / aspect)`` rounded up.
        """
        m = self.max_image_size
        aspect = width / height
        if width >= height:
            w = math.ceil(width / m) * m
            h = math.ceil(int(w / aspect) / m) * m
        else:
            h = math.ceil(height / m) * m
            w = math.ceil(int(h * aspect) / m) * m
        return w, h

    def _stage1_edge(self, width: int, height: int, detail: Detail) -> int:
        if detail != "balanced":
            return self.longest_edge
        # Balanced: never upscale past the image's own longest edge rounded up to a whole tile.
        m = self.max_image_size
        return min(self.longest_edge, max(m, math.ceil(max(width, height) / m) * m))

    def grid(self, width: int, height: int, detail: Detail = "full") -> tuple[int, int]:
        """``(rows, cols)`` of the crop grid :meth:`preprocess` gives an upright image of this size,
        computed from sizes alone (no pixels); ``(0, 0)`` means one global tile."""
        if self.do_resize:
            width, height = self.stage1_size(width, height, self._stage1_edge(width, height, detail))
        if not self.do_image_splitting or detail == "fast":
            return 0, 0
        width, height = self.stage2_size(width, height)
        m = self.max_image_size
        if height > m or width > m:
            return (height - m) // m + 1, (width - m) // m + 1
        return 0, 0

    def image_grid(self, width: int, height: int, detail: Detail = "full") -> ImageGrid:
        """The :class:`ImageGrid` of an upright image of this size: its prompt without its pixels."""
        return ImageGrid(*self.grid(width, height, detail), self.image_seq_len)

    def count_image_tokens(self, width: int, height: int, detail: Detail = "full") -> int:
        """``<image>`` tokens an upright image of this size takes: ``(rows * cols + 1) * image_seq_len``."""
        rows, cols = self.grid(width, height, detail)
        return (rows * cols + 1) * self.image_seq_len

    def _resize(self, image: Image.Image, width: int, height: int) -> Image.Image:
        if image.size == (width, height):
            return image  # Pillow would return a copy: same pixels (a 2048 x 2048 copy is ~11 ms)
        return image.resize((width, height), resample=self.resample)

    def _to_rgb(self, image: Image.Image) -> Image.Image:
        """``convert_to_rgb`` (``image_transforms.py``): alpha composited over opaque white."""
        if not self.do_convert_rgb:
            if image.mode != "RGB":
                raise ImageError(f"Image mode {image.mode} is not RGB and do_convert_rgb is off")
            return image
        return to_rgb(image)

    def preprocess(self, image: Image.Image, detail: Detail = "full", source_digest: bytes | None = None
                   ) -> ProcessedImage:
        """Turn one PIL image into normalized tiles.

        Args:
            image: any PIL image (use :func:`load_image` for files; this does not EXIF-rotate).
            detail: ``"full"``: the checkpoint's reference preprocessing (pixel-exact with
                transformers' PIL backend; a 2048-edge image gives up to 4 x 4 + 1 tiles).
                ``"balanced"``: the stage-1 longest edge is
                ``min(size.longest_edge, max(M, ceil(own_longest / M) * M))``, so an image is never
                enlarged beyond its own size rounded up to a whole tile (a 451 x 300 photo gives one
                tile instead of 13); large images are processed as in ``"full"``.
                ``"fast"``: one global M x M tile, identical to transformers with
                ``do_image_splitting=False`` (stage-1 resize, then resize to M x M).
            source_digest: a digest of the encoded file ``image`` was decoded from (e.g. SHA-256 of
                its bytes): the tiles' cache keys are then derived from it, this detail and this
                processor's settings instead of hashing the pixels (:meth:`ProcessedImage.hash_tiles`).

        Returns:
            ProcessedImage with ``tiles`` float32 ``[N, 3, M, M]``.

        Raises:
            ValueError: unknown ``detail``.
            ImageError: the image cannot be converted or resized (e.g. corrupt data on first access).
        """
        if detail not in ("full", "balanced", "fast"):
            raise ValueError(f"detail must be full, balanced or fast, got {detail!r}")
        if image.width < 1 or image.height < 1:
            raise ImageError(f"Image has no pixels ({image.width}x{image.height})")
        m = self.max_image_size
        try:
            rgb = self._to_rgb(image)
            if self.resize_device is not None:
                tiles = self._tiles_on_device(rgb, detail)
                if tiles is not None:
                    pixels, rows, cols = tiles
                    return self._processed(pixels, rows, cols, detail, source_digest)
            if self.do_resize:
                edge = self._stage1_edge(rgb.width, rgb.height, detail)
                rgb = self._resize(rgb, *self.stage1_size(rgb.width, rgb.height, edge))
            rows = cols = 0
            global_tile = None
            if self.do_image_splitting and detail != "fast":
                rgb = self._resize(rgb, *self.stage2_size(rgb.width, rgb.height))
                if rgb.height > m or rgb.width > m:
                    # The global tile's resize runs on a worker thread (Pillow releases the GIL
                    # while resampling) while this thread copies the crops.
                    global_tile = _pool().submit(self._resize, rgb, m, m)
                    arr = np.asarray(rgb)
                    rows = (rgb.height - m) // m + 1
                    cols = (rgb.width - m) // m + 1
                    crops = [arr[r * m : (r + 1) * m, c * m : (c + 1) * m] for r in range(rows) for c in range(cols)]
                else:
                    crops = [np.asarray(rgb)]
            else:
                crops = [np.asarray(self._resize(rgb, m, m))]
            h, w, c = crops[0].shape
            pixels = np.empty((len(crops) + (global_tile is not None), c, h, w), dtype=np.uint8)  # [N, 3, H, W]
            for i, crop in enumerate(crops):
                pixels[i] = crop.transpose(2, 0, 1)
            if global_tile is not None:
                pixels[-1] = np.asarray(global_tile.result()).transpose(2, 0, 1)
        except OSError as exc:
            raise ImageError(f"Cannot decode image: {exc}") from exc
        return self._processed(pixels, rows, cols, detail, source_digest)

    def _processed(self, pixels: np.ndarray, rows: int, cols: int, detail: Detail = "full",
                   source_digest: bytes | None = None) -> ProcessedImage:
        image = ProcessedImage(pixels=pixels, lut=self.lut(pixels.shape[1]), rows=rows, cols=cols,
                               image_seq_len=self.image_seq_len)
        image.hash_tiles(None if source_digest is None else
                         source_digest + detail.encode() + self.settings_digest + pixels.shape[1].to_bytes(4, "little"))
        return image

    @functools.cached_property
    def settings_digest(self) -> bytes:
        """A digest of every setting that shapes the tiles (sizes, filter, splitting, normalization):
        with an encoded file's digest and the detail, it fixes the tiles (the resizes are exact)."""
        settings = (self.longest_edge, self.max_image_size, self.image_seq_len, self.resample, self.rescale_factor,
                    self.image_mean, self.image_std, self.do_resize, self.do_image_splitting, self.do_convert_rgb,
                    self.do_rescale, self.do_normalize)
        return hashlib.blake2b(repr(settings).encode(), digest_size=16).digest()

    def _tiles_on_device(self, rgb: Image.Image, detail: Detail) -> tuple[np.ndarray, int, int] | None:
        """:meth:`preprocess`'s resizes and crops on :attr:`resize_device`: ``(pixels uint8 [N, 3, M, M]
        on the host, rows, cols)``, the same bytes as the Pillow path. ``None`` (use Pillow) for a
        filter :mod:`~engine.models.smolvlm.resample` does not reproduce or when the device is out of
        memory. Raises OSError for an image whose data cannot be decoded."""
        import torch

        from engine.models.smolvlm import resample

        if not resample.supports(self.resample):
            return None
        m = self.max_image_size
        try:
            with warnings.catch_warnings():
                # Pillow's array is read-only, and nothing here writes to it: no copy needed.
                warnings.simplefilter("ignore", UserWarning)
                x = torch.from_numpy(np.asarray(rgb))
            x = x.to(self.resize_device)  # [H, W, 3] uint8
            if self.do_resize:
                edge = self._stage1_edge(rgb.width, rgb.height, detail)
                x = resample.resize(x, *self.stage1_size(rgb.width, rgb.height, edge), self.resample)
            rows = cols = 0
            if self.do_image_splitting and detail != "fast":
                x = resample.resize(x, *self.stage2_size(x.shape[1], x.shape[0]), self.resample)
                if x.shape[0] > m or x.shape[1] > m:
                    rows, cols = x.shape[0] // m, x.shape[1] // m
                    crops = x.view(rows, m, cols, m, 3).permute(0, 2, 4, 1, 3).reshape(rows * cols, 3, m, m)
                    tiles = torch.cat([crops, resample.resize(x, m, m, self.resample).permute(2, 0, 1)[None]])
                else:
                    tiles = x.permute(2, 0, 1)[None]
            else:
                tiles = resample.resize(x, m, m, self.resample).permute(2, 0, 1)[None]
            return tiles.contiguous().cpu().numpy(), rows, cols
        except torch.OutOfMemoryError:
            return None

    def lut(self, channels: int = 3) -> np.ndarray:
        """``float32 [channels, 256]``: ``rescale`` (float64 multiply, then float32) and ``normalize``
        (float32) of every byte value, per channel. Looking uint8 pixels up in it is bit-identical to
        running those operations on the pixels, at a fraction of the cost (17 tiles: ~13M pixels,
        ~0.4 s -> ~0.05 s with numpy on the host, less on a GPU)."""
        return self._reference_normalize(np.arange(256, dtype=np.uint8).reshape(1, 1, 1, 256)
                                         .repeat(channels, axis=1))[0, :, 0]

    def _reference_normalize(self, tiles: np.ndarray) -> np.ndarray:
        x = tiles.astype(np.float64) * self.rescale_factor if self.do_rescale else tiles
        x = x.astype(np.float32)
        if self.do_normalize:
            mean = np.asarray(self.image_mean, dtype=np.float32)[:, None, None]
            std = np.asarray(self.image_std, dtype=np.float32)[:, None, None]
            x = (x - mean) / std
        return np.ascontiguousarray(x, dtype=np.float32)

    # -- video ----------------------------------------------------------------------------------

    @property
    def takes_video(self) -> bool:
        return self.video_sampling is not None

    def preprocess_video(self, source: str | os.PathLike, fps: float | None = None,
                         max_frames: int | None = None, check=None):
        """Sample, decode and resize a video's frames (:func:`engine.models.smolvlm.video.read_video`)
        into a :class:`~engine.models.smolvlm.video.ProcessedVideo`: one ``M x M`` tile per frame.

        ``fps`` and ``max_frames`` default to the checkpoint's ``video_sampling``. ``check(done, total)``
        is called before each decoded frame with the sampled frames read so far and their number (a
        cancellation point: it raises to stop; and the progress of the sampling).

        Raises:
            VideoError: the file cannot be read, or the checkpoint takes no videos.
            ValueError: ``fps`` or ``max_frames`` out of range.
        """
        from engine.models.smolvlm.video import preprocess_video

        return preprocess_video(self, source, fps, max_frames, check=check)

    def __call__(self, image: str | os.PathLike | bytes | Image.Image, detail: Detail = "full",
                 source_digest: bytes | None = None) -> ProcessedImage:
        """``preprocess(load_image(image), detail, source_digest)``."""
        return self.preprocess(load_image(image), detail, source_digest)
