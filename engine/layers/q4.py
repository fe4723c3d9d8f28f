"""4-bit weights for the CPU (``weights="int4"`` there): blocks of 32 with a float16 scale and min.

Like llama.cpp's Q4_1: each row of ``W [out, in]`` is cut into blocks of 32 input channels, and a
block stores ``q`` in 0..15 with ``w = q * scale + min`` (``scale = (max - min) / 15``). Bytes per
weight: 0.5 + 4/32 = 0.625 (5 bits), against 4 for float32. The layout is made for the native decode
step's unpacking (``engine/native/gemv.h``): block ``b`` of a row is 16 bytes where byte ``j`` holds
``q[j]`` in its low nibble and ``q[j + 16]`` in its high one, so one 16-byte load, an AND and a
shift give the block's 32 values in input order.

It replaces ATen's ``_weight_int4pack_mm_for_cpu`` on the CPU, which was slower than int8 on this
project's machines. The eager ``forward`` (prefill, speculative verification, and decode until the
native step is ready) dequantizes one layer at a time to float32 and runs ``F.linear``: prefill is
compute-bound there, and the transient copy is one layer's weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BLOCK = 32


class Q4Linear(nn.Module):
    """``y = x @ dequant(W)^T (+ bias)`` with 4-bit weights in blocks of 32 (see the module doc).

    Buffers: ``qweight uint8 [out, in / 2]``, ``scales`` and ``mins float16 [out, in / 32]``,
    ``bias float32 [out]`` or ``None``.

    Raises:
        ValueError: ``in_features`` is not a multiple of 32.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        n, k = w.shape
        if k % BLOCK:
            raise ValueError(f"4-bit weights need in_features ({k}) divisible by {BLOCK}")
        self.in_features, self.out_features = k, n
        blocks = w.reshape(n, k // BLOCK, BLOCK)
        lo, hi = blocks.amin(-1), blocks.amax(-1)
        # Rounded to float16 first, so q is chosen against the scale and min actually stored.
        scale = ((hi - lo) / 15).clamp(min=1e-8).half()
        mins = lo.half()
        q = ((blocks - mins.float()[..., None]) / scale.float()[..., None]).round_().clamp_(0, 15).to(torch.uint8)
        self.register_buffer("qweight", (q[..., :16] | (q[..., 16:] << 4)).reshape(n, k // 2).contiguous())
        self.register_buffer("scales", scale.contiguous())
        self.register_buffer("mins", mins.contiguous())
        self.register_buffer("bias", linear.bias.detach().float() if linear.bias is not None else None)

    def dequantized(self) -> torch.Tensor:
        """The float32 ``[out, in]`` weights this layer multiplies by (tests, quality checks, eager).

        On the CPU with the native library loaded, one C pass (``smol_dequant_q4``, the same
        float32 arithmetic); else these tensor ops."""
        if self.qweight.device.type == "cpu":
            from engine.native import build

            lib = build.library()
            if lib is not None:
                out = torch.empty(self.out_features, self.in_features, dtype=torch.float32)
                lib.smol_dequant_q4(self.qweight.data_ptr(), self.scales.data_ptr(), self.mins.data_ptr(),
                                    self.out_features, self.in_features, out.data_ptr(),
                                    max(1, torch.get_num_threads()))
                return out
        return self.dequantized_eager()

    def dequantized_eager(self) -> torch.Tensor:
        """:meth:`dequantized` in tensor ops (any device; the reference for the native pass)."""
        n, k = self.out_features, self.in_features
        packed = self.qweight.view(n, k // BLOCK, 16)
        q = torch.cat([packed & 15, packed >> 4], dim=-1).float()  # [n, blocks, 32] in input order
        w = q * self.scales.float()[..., None] + self.mins.float()[..., None]
        return w.reshape(n, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.dequantized()
        y = F.linear(x.to(torch.float32), w, self.bias)
        return y.to(x.dtype)
