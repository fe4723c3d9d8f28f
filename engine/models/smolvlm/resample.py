"""Pillow's resize of 8-bit images, in torch: the same integer arithmetic, so the same bytes, on a GPU.

A photo question's tiles come from two or three large LANCZOS resizes (``processing.py``). Pillow
runs each on one host thread: ~0.13-0.2 s for a small photo enlarged to 2048 pixels, most of a GPU's
time to the first token. This module reproduces ``libImaging/Resample.c`` (Pillow 7+) exactly:

* ``precompute_coeffs``: for output pixel ``xx`` of a pass from ``in_size`` to ``out_size``,
  ``scale = in_size / out_size``, ``filterscale = max(scale, 1)``, ``support = filter_support *
  filterscale``, ``center = (xx + 0.5) * scale``, taps ``xmin = int(center - support + 0.5)``
  (clamped to 0) to ``int(center + support + 0.5)`` (clamped to ``in_size``), weights
  ``filter((x + xmin - center + 0.5) * (1 / filterscale))`` divided by their sum;
* ``normalize_coeffs_8bpc``: weights to fixed point, ``PRECISION_BITS = 22`` bits, rounded half away
  from zero;
* ``ImagingResampleHorizontal_8bpc`` / ``Vertical``: per output byte, ``2**21 + sum(byte * weight)``
  in int32, shifted right by 22 and clipped to 0..255; one pass per changed axis, each on the
  previous pass's bytes, horizontal first, except that Pillow 13+ goes vertical first when the
  height shrinks by more than twice what the width does (``ImagingResampleInner``).

The weights are computed on the host in float64 as Pillow does (numpy's ``sin`` may differ from the C
library's in the last bit, which moves a fixed-point weight only if its scaled value lies within
~1e-10 of a rounding boundary); the passes run where the image tensor is. ``tests/engine/
test_resample.py`` checks byte equality with Pillow on real photos and edge-case sizes.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import PIL
import torch
from PIL import Image

from engine.device import host_staged

PRECISION_BITS = 32 - 8 - 2
"""Fixed-point bits of the 8-bit resampling weights (``Resample.c``)."""

VERTICAL_FIRST_RULE = int(PIL.__version__.split(".")[0]) >= 13
"""Whether the installed Pillow runs a strongly height-shrinking resize's vertical pass first (13+)."""

# Elements per int32 working chunk of a pass (16 MB). The accumulator, one tap's term and its uint8
# gather are live together, ~9 bytes an element: at 1 << 24 a pass over a photo enlarged to 2048
# pixels held ~75 MB of device memory at once (up to ~150 MB for larger ones), part of the engine's
# peak (a target); at 1 << 22 the H200 peak of a first photo answer fell by 20 MiB, and 4x the
# chunks cost about a millisecond of kernel launches.
CHUNK_ELEMENTS = 1 << 22


def _sinc(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        px = x * math.pi
        return np.where(x == 0.0, 1.0, np.sin(px) / np.where(x == 0.0, 1.0, px))


def _lanczos(x: np.ndarray) -> np.ndarray:
    return np.where((x >= -3.0) & (x < 3.0), _sinc(x) * _sinc(x / 3.0), 0.0)


def _bicubic(x: np.ndarray) -> np.ndarray:
    a = -0.5
    x = np.abs(x)
    return np.where(x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
                    np.where(x < 2.0, (((x - 5.0) * x + 8.0) * x - 4.0) * a, 0.0))


def _bilinear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


# Pillow's filters by resample code: (support, filter).
FILTERS = {
    int(Image.Resampling.LANCZOS): (3.0, _lanczos),
    int(Image.Resampling.BICUBIC): (2.0, _bicubic),
    int(Image.Resampling.BILINEAR): (1.0, _bilinear),
}


def supports(resample: int) -> bool:
    """Whether :func:`resize` reproduces Pillow's ``resample`` filter (LANCZOS, BICUBIC, BILINEAR)."""
    return int(resample) in FILTERS


@functools.lru_cache(maxsize=64)
def coefficients(in_size: int, out_size: int, resample: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's taps for one pass: ``(xmin int64 [out_size], weights int32 [out_size, ksize])``.

    Output pixel ``j`` is ``sum_t in[xmin[j] + t] * weights[j, t]`` in fixed point; taps past the
    image have weight 0 (their index is clamped by :func:`resize`). ``ksize = 2 * ceil(support) + 1``.

    Raises:
        ValueError: a filter :func:`supports` does not cover, or a size below 1.
    """
    if int(resample) not in FILTERS:
        raise ValueError(f"no exact torch resampling for Pillow filter {resample}")
    if in_size < 1 or out_size < 1:
        raise ValueError(f"sizes must be >= 1, got {in_size} -> {out_size}")
    support, fn = FILTERS[int(resample)]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support *= filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    # C's (int) truncates toward zero; the values are > -1 here so that is floor for >= 0 and 0 above -1.
    xmin = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    xmax = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.int64) - xmin
    taps = np.arange(ksize)[None, :]
    w = fn((taps + xmin[:, None] - center[:, None] + 0.5) * (1.0 / filterscale))
    w = np.where(taps < xmax[:, None], w, 0.0)
    # Pillow sums in order; cumsum keeps that order (np.sum would sum pairwise).
    ww = np.cumsum(w, axis=1)[:, -1:]
    w = np.where(ww != 0.0, w / np.where(ww != 0.0, ww, 1.0), w)
    fixed = np.where(w < 0, -0.5 + w * (1 << PRECISION_BITS), 0.5 + w * (1 << PRECISION_BITS))
    return xmin, np.trunc(fixed).astype(np.int32)


#: Run each pass as one Triton kernel (:mod:`.resample_triton`): ``None`` = on CUDA when Triton imports
#: (``SMOLCHAT_TRITON=0`` turns it off, as for the decode step); the same bytes either way.
USE_TRITON: bool | None = None


_triton_failed = False  # set once the kernel failed to build or run here: torch passes from then on


def _use_triton(x: torch.Tensor) -> bool:
    if _triton_failed:
        return False
    if USE_TRITON is not None:
        return USE_TRITON
    from engine.models.llama.static_decode import triton_wanted

    return triton_wanted(x.device)


def _pass(x: torch.Tensor, dim: int, out_size: int, resample: int) -> torch.Tensor:
    """Resample ``x`` (uint8 ``[H, W, C]``) along ``dim`` (1: width, 0: height) to ``out_size``."""
    in_size = x.shape[dim]
    xmin, weights = coefficients(in_size, out_size, resample)
    ksize = weights.shape[1]
    taps = np.minimum(xmin[:, None] + np.arange(ksize)[None, :], in_size - 1)
    # Pinned on CUDA, so the taps' upload does not wait for the queued kernels (a pageable copy does).
    idx = torch.empty(taps.shape, dtype=torch.long, device=x.device)
    idx.copy_(host_staged(torch.from_numpy(taps), x.device), non_blocking=True)
    k = torch.empty(weights.shape, dtype=torch.int32, device=x.device)
    k.copy_(host_staged(torch.from_numpy(weights), x.device), non_blocking=True)
    if _use_triton(x):
        from engine.models.smolvlm.resample_triton import resample_pass

        try:
            return resample_pass(x.contiguous(), dim, out_size, idx, k, PRECISION_BITS)
        except ValueError:  # beyond int32 offsets: the chunked passes below
            pass
        except Exception as exc:  # noqa: BLE001 - a Triton that cannot build or run it on this GPU
            global _triton_failed
            _triton_failed = True
            warnings.warn(f"Triton resampling failed ({exc!r:.200}); resizing with torch ops instead",
                          RuntimeWarning, stacklevel=2)
    shape = list(x.shape)
    shape[dim] = out_size
    out = torch.empty(shape, dtype=torch.uint8, device=x.device)
    other = 1 - dim
    step = max(1, CHUNK_ELEMENTS // max(1, out_size * x.shape[2]))
    view = [1, 1, 1]
    view[dim] = out_size
    for start in range(0, x.shape[other], step):
        part = x.narrow(other, start, min(step, x.shape[other] - start))
        acc = None
        for t in range(ksize):
            term = part.index_select(dim, idx[:, t]).to(torch.int32).mul_(k[:, t].view(view))
            acc = term.add_(1 << (PRECISION_BITS - 1)) if acc is None else acc.add_(term)
        out.narrow(other, start, part.shape[other]).copy_(acc.bitwise_right_shift_(PRECISION_BITS).clamp_(0, 255))
    return out


def resize(image: torch.Tensor, width: int, height: int, resample: int = Image.Resampling.LANCZOS) -> torch.Tensor:
    """``PIL.Image.resize((width, height), resample)`` of an 8-bit image, byte for byte.

    Args:
        image: ``uint8 [H, W, C]`` on any device (channels resampled independently, as Pillow does
            for RGB).
        width, height: output size in pixels (>= 1).
        resample: a Pillow filter code that :func:`supports`.

    Returns:
        ``uint8 [height, width, C]`` on ``image``'s device (``image`` itself when the size is unchanged).

    Raises:
        ValueError: wrong dtype or rank, a size below 1, or an unsupported filter.
    """
    if image.dtype != torch.uint8 or image.dim() != 3:
        raise ValueError(f"resize takes uint8 [H, W, C], got {image.dtype} {tuple(image.shape)}")
    if (image.shape[1], image.shape[0]) == (width, height):
        return image
    in_h, in_w = image.shape[0], image.shape[1]
    # Pillow's order: horizontal first; from Pillow 13 on, vertical first when the height shrinks by
    # more than twice what the width does. The order changes the bytes (each pass rounds to 8 bits).
    passes = [(1, width), (0, height)]
    if VERTICAL_FIRST_RULE and in_h - height > 0 and in_h - height > (in_w - width) * 2:
        passes.reverse()
    for dim, size in passes:
        if image.shape[dim] != size:
            image = _pass(image, dim, size, resample)
    return image
