"""Dynamic int8 linears for compute-bound CPU matmuls (the vision tower): ``SMOLCHAT_VISION_DTYPE=int8``.

A photo's tiles go through SigLIP's linears as ``[1024 * tiles, 768]`` activations: there the CPU
is bound by arithmetic, not by weight bytes, and float32 sgemm (MKL, AVX2) is the ceiling. AVX2's
byte multiply does 32 multiply-adds an instruction where FMA does 8, so quantizing both operands
to integers runs SigLIP's linears 2.07-2.15x faster than MKL on this project's AVX2 EPYC, activation
quantization included (``engine/native/gemm_avx2.h``, which also says why the weights keep 7 bits
and the activations 8):

    y[m, n] = d_m * s_n * sum_k xq[m, k] * wq[n, k] + bias[n]
    xq = round(x / d_m),  d_m = max_k |x[m, k]| / 127       (per token, at every call)
    wq = round(w / s_n),  s_n = max_k |w[n, k]| / 63        (per output channel, once at load)

This is LLM.int8()'s vector-wise quantization (Dettmers et al. 2022, eq. 4: row-wise activation and
column-wise weight scales) without its outlier decomposition, the W8A8 scheme of SmoothQuant's
"per-token dynamic" baseline. Its error is measured, not assumed (``tests/engine/test_int8_gemm.py``
and docs/BENCHMARKS.md).

The native library is found or built on a background thread at load (``engine/native/build.py``);
until it is there, or on a CPU without AVX2, :meth:`Int8GemmLinear.forward` multiplies by the
dequantized weights in float32 (the same weights, unquantized activations).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.native import build as native_build

#: Output channels per packed panel and input channels per group (the kernel's register tile).
PANEL, GROUP = 16, 4
#: Output activations the kernel applies itself (``smol_gemm_q8``'s ``act`` codes).
ACTIVATIONS = {None: 0, "gelu_tanh": 1}
#: Weight levels: |wq| <= 63, so a pair of u8 x s8 products fits vpmaddubsw's int16 (gemm_avx2.h).
WEIGHT_MAX = 63


def supported(linear: nn.Linear) -> bool:
    """Whether ``linear`` fits the kernel's tiles (``in % 4 == 0``, ``out % 16 == 0``)."""
    return linear.in_features % GROUP == 0 and linear.out_features % PANEL == 0


class Int8GemmLinear(nn.Module):
    """A float32 ``nn.Linear`` run as the dynamic int8 GEMM above on the CPU.

    ``activation`` ``"gelu_tanh"`` applies GELU's tanh form to the output inside the kernel (torch's
    ``gelu(approximate="tanh")``; the kernel's ``e^x`` is Cephes' polynomial, within ~1e-6 of it).

    Buffers: ``packed`` int8 ``[out / 16, in / 4, 16, 4]`` (the kernel's panel layout), ``scale``
    float32 ``[out]`` (``s_n``), ``wsum`` int32 ``[out]`` (``sum_k wq[n, k]``, for the activation
    offset), ``bias`` float32 ``[out]`` or ``None``. ``x [..., in]`` float32 on the CPU ->
    ``[..., out]`` float32.

    Raises:
        ValueError: the shape does not fit the tiles (:func:`supported`), or the weight is not on the CPU.
    """

    def __init__(self, linear: nn.Linear, activation: str | None = None):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r} (use {', '.join(map(str, ACTIVATIONS))})")
        self.activation = activation
        if not supported(linear):
            raise ValueError(f"int8 GEMM needs in % {GROUP} == 0 and out % {PANEL} == 0, got "
                             f"{linear.in_features} -> {linear.out_features}")
        if linear.weight.device.type != "cpu":
            raise ValueError("the int8 GEMM is a CPU kernel")
        w = linear.weight.detach().float()
        n, k = w.shape
        self.in_features, self.out_features = k, n
        scale = (w.abs().amax(dim=1) / WEIGHT_MAX).clamp(min=1e-12)
        q = torch.round(w / scale[:, None]).clamp_(-WEIGHT_MAX, WEIGHT_MAX).to(torch.int8)
        self.register_buffer("packed", q.view(n // PANEL, PANEL, k // GROUP, GROUP).permute(0, 2, 1, 3).contiguous())
        self.register_buffer("scale", scale.contiguous())
        self.register_buffer("wsum", q.sum(dim=1, dtype=torch.int32).contiguous())
        self.register_buffer("bias", linear.bias.detach().float().contiguous() if linear.bias is not None else None)
        self._dequantized: torch.Tensor | None = None

    def weight_int8(self) -> torch.Tensor:
        """``wq`` as int8 ``[out, in]`` (unpacked; for the fallback and tests)."""
        return self.packed.permute(0, 2, 1, 3).reshape(self.out_features, self.in_features)

    def dequantized(self) -> torch.Tensor:
        """``wq * s_n``: the float32 ``[out, in]`` weights this layer multiplies by."""
        return self.weight_int8().float().mul_(self.scale[:, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lib = native_build.library() if x.device.type == "cpu" and x.dtype == torch.float32 else None
        if lib is None:
            return self._eager(x)
        self._dequantized = None  # the fallback's float32 copy is not needed once the kernel runs
        shape = x.shape
        x2 = x.reshape(-1, self.in_features).contiguous()
        m = x2.shape[0]
        y = torch.empty(m, self.out_features, dtype=torch.float32)
        u = torch.empty(m, self.in_features, dtype=torch.uint8)
        d = torch.empty(m, dtype=torch.float32)
        rc = lib.smol_gemm_q8(x2.data_ptr(), m, self.in_features, self.packed.data_ptr(), self.scale.data_ptr(),
                              self.wsum.data_ptr(), None if self.bias is None else self.bias.data_ptr(),
                              self.out_features, y.data_ptr(), u.data_ptr(), d.data_ptr(),
                              ACTIVATIONS[self.activation], max(1, torch.get_num_threads()))
        if rc != 0:  # a CPU without AVX2: the library says so, the float32 path answers
            return self._eager(x)
        return y.view(*shape[:-1], self.out_features)

    def _eager(self, x: torch.Tensor) -> torch.Tensor:
        # Dequantized once and kept while the fallback runs (the native library not built yet, or
        # off): rebuilding it per call made the fallback ~4x slower than float32 (a 3072 x 768
        # weight per call, 48 calls a tile).
        if self._dequantized is None or self._dequantized.dtype != x.dtype:
            self._dequantized = self.dequantized().to(x.dtype)
        y = torch.nn.functional.linear(x, self._dequantized, None if self.bias is None else self.bias.to(x.dtype))
        return torch.nn.functional.gelu(y, approximate="tanh") if self.activation == "gelu_tanh" else y
