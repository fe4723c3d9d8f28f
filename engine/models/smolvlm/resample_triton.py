"""One resampling pass of :mod:`engine.models.smolvlm.resample` as a single Triton kernel.

The torch pass runs, per row chunk and per filter tap, a gather, a cast, a multiply and an add over the
whole image in int32: a 600 x 400 photo tiled into 13 tiles was ~400 kernels, 9.2 ms of H200 kernel time
and most of a new photo's 13-15 ms of resizing and tiling. Here each output byte is computed once, in
registers, with the same integer arithmetic (``Resample.c``'s ``ImagingResampleHorizontal_8bpc``):
``2**(PRECISION_BITS-1) + sum_t in[xmin + t] * weight[t]`` in int32, shifted right arithmetically by
``PRECISION_BITS`` and clipped to 0..255 (Pillow's ``clip8``). So the bytes are Pillow's, as the torch
pass's are (``tests/engine/test_resample_triton.py`` checks them in Triton's interpreter).

The tap count and the sizes are runtime values, not compile-time constants: one compiled kernel serves
every photo size and scale (a new constant would compile anew, ~0.5 s, inside some user's first answer).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Output bytes per program.
BLOCK = 1024


@triton.jit(do_not_specialize=["n_out", "length_in", "length_out", "inner", "ksize"])
def resample_pass_kernel(src_ptr, dst_ptr, idx_ptr, weight_ptr, n_out, length_in, length_out, inner, ksize,
                         PRECISION_BITS: tl.constexpr, BLOCK: tl.constexpr):
    """``dst [outer, length_out, inner] = resample(src [outer, length_in, inner])`` along the middle axis.

    ``idx [length_out, ksize]`` (int64) holds the input index of each tap, clamped into the image;
    ``weight [length_out, ksize]`` (int32) its fixed-point weight (0 past the filter's support)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    col = offs % inner
    rest = offs // inner
    j = rest % length_out
    base = (rest // length_out) * (length_in * inner) + col
    acc = tl.full([BLOCK], 1 << (PRECISION_BITS - 1), tl.int32)
    for t in range(ksize):
        i = tl.load(idx_ptr + j * ksize + t, mask=mask, other=0).to(tl.int32)
        w = tl.load(weight_ptr + j * ksize + t, mask=mask, other=0)
        v = tl.load(src_ptr + base + i * inner, mask=mask, other=0).to(tl.int32)
        acc += v * w
    out = tl.minimum(tl.maximum(acc >> PRECISION_BITS, 0), 255)
    tl.store(dst_ptr + offs, out.to(tl.uint8), mask=mask)


def resample_pass(x: torch.Tensor, dim: int, out_size: int, idx: torch.Tensor, weights: torch.Tensor,
                  precision_bits: int) -> torch.Tensor:
    """``x`` (uint8 ``[H, W, C]``, contiguous) resampled along ``dim`` (1: width, 0: height) to
    ``out_size`` with taps ``idx [out_size, ksize]`` (int64, on ``x``'s device) and fixed-point
    ``weights [out_size, ksize]`` (int32): uint8 ``[H, out_size, C]`` or ``[out_size, W, C]``.

    Raises:
        ValueError: ``x`` is not a contiguous uint8 ``[H, W, C]`` tensor, or too large for int32 offsets.
    """
    if x.dtype != torch.uint8 or x.dim() != 3 or not x.is_contiguous():
        raise ValueError(f"resample_pass takes a contiguous uint8 [H, W, C], got {x.dtype} {tuple(x.shape)}")
    h, w, c = x.shape
    shape = [h, w, c]
    shape[dim] = out_size
    if max(x.numel(), h * w * c // x.shape[dim] * out_size) >= 2**31:
        raise ValueError(f"an image of {tuple(x.shape)} -> {tuple(shape)} is too large for int32 offsets")
    out = torch.empty(shape, dtype=torch.uint8, device=x.device)
    # The pass's axis in the middle: [outer, length, inner] with outer = H (width pass) or 1 (height).
    inner = c if dim == 1 else w * c
    n_out = out.numel()
    resample_pass_kernel[(triton.cdiv(n_out, BLOCK),)](
        x, out, idx, weights, n_out, x.shape[dim], out_size, inner, weights.shape[1],
        PRECISION_BITS=precision_bits, BLOCK=BLOCK)
    return out
