"""Layers shared by decoder models: RMSNorm, rotary position embedding, gated MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """``x * rsqrt(mean(x**2) + eps) * weight``, computed in float32 and cast back before the weight.

    Zhang & Sennrich 2019; transformers ``LlamaRMSNorm`` (modeling_llama.py).
    """

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        if dtype == torch.float32 or x.is_cuda:
            # One fused kernel instead of seven small ones (pow, mean, add, rsqrt, mul, cast, mul):
            # bit-identical in float32, and the decode step runs 61 norms per token. On CUDA it is
            # one kernel instead of eight per norm (bf16 output may differ from the reference's
            # cast-then-scale by one unit in the last place).
            return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding in the rotate-half (NeoX) layout (Su et al. 2021, RoFormer).

    ``inv_freq = 1 / theta**(arange(0, D, 2) / D)`` in float32; ``cos``/``sin`` of
    ``cat(freqs, freqs)`` are computed in float32 and cast to the activation dtype (transformers
    ``LlamaRotaryEmbedding`` / ``apply_rotary_pos_emb``). The table is built once for
    ``max_positions`` and indexed per step.
    """

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta
        self.max_positions = max_positions
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None
        self._cast: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def _table(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos is None or self._cos.device != device:
            inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64,
                                                            device=device).float() / self.head_dim))
            pos = torch.arange(self.max_positions, device=device, dtype=torch.float32)
            freqs = pos[:, None] * inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
            self._cos, self._sin = emb.cos(), emb.sin()
            # rotate_half(x) * sin == roll(x, D/2) * signed_sin, with the first half of sin negated
            # (a sign flip is exact), so RoPE costs a roll and a multiply-add instead of a cat.
            half = self.head_dim // 2
            self._sin = torch.cat((-self._sin[:, :half], self._sin[:, half:]), dim=-1)
            self._cast = {}
        return self._cos, self._sin

    def cos_sin(self, start: int, length: int, device: torch.device, dtype: torch.dtype
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, signed_sin`` of positions ``[start, start+length)``, each ``[length, D]`` in ``dtype``.

        ``signed_sin`` has its first half negated; pass both to :func:`apply_rotary`.
        """
        if start + length > self.max_positions:
            raise ValueError(f"position {start + length - 1} is beyond max_position_embeddings {self.max_positions}")
        cos, sin = self.table(device, dtype)
        return cos[start:start + length], sin[start:start + length]

    def table(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole ``cos, signed_sin`` table ``[max_positions, D]`` in ``dtype`` (cast once, cached)."""
        cos, sin = self._table(device)
        if dtype == torch.float32:
            return cos, sin
        cast = self._cast.get(dtype)
        if cast is None:
            cast = self._cast[dtype] = (cos.to(dtype), sin.to(dtype))
        return cast


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``x [B, heads, S, D]`` rotated by ``cos``/``signed_sin [S, D]`` (from :meth:`RotaryEmbedding.cos_sin`):
    ``x*cos + rotate_half(x)*sin``, computed as ``x*cos + roll(x, D/2)*signed_sin``."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), signed_sin)


def fuse_linears(*linears: nn.Linear, dtype: torch.dtype | None = None) -> nn.Linear:
    """One ``nn.Linear`` whose output is the concatenation of ``linears``' outputs (same input).

    Decode runs at batch 1, where a projection costs its weight's trip through memory plus a fixed
    per-call overhead; one wider matmul replaces several calls (vLLM ``QKVParallelLinear`` /
    ``MergedColumnParallelLinear``, gpt-fast ``wqkv``). The fused weight is written once, already in
    ``dtype`` (default: the first weight's): at load time the parts are the checkpoint's memory-mapped
    bf16 tensors, and converting while copying avoids a second pass over ~85% of the text weights.
    """
    dtype = dtype or linears[0].weight.dtype
    rows = sum(lin.weight.shape[0] for lin in linears)
    w = torch.empty(rows, linears[0].weight.shape[1], dtype=dtype, device=linears[0].weight.device)
    b = torch.empty(rows, dtype=dtype, device=w.device) if linears[0].bias is not None else None
    start = 0
    for lin in linears:
        end = start + lin.weight.shape[0]
        w[start:end].copy_(lin.weight)
        if b is not None:
            b[start:end].copy_(lin.bias)
        start = end
    with torch.device("meta"):
        fused = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
    fused.weight = nn.Parameter(w, requires_grad=False)
    if b is not None:
        fused.bias = nn.Parameter(b, requires_grad=False)
    return fused


class GatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (Shazeer 2020, SwiGLU; transformers ``LlamaMLP``).

    After :meth:`fuse` the two input projections run as one ``gate_up`` matmul (the checkpoint keeps
    ``gate_proj``/``up_proj``; fusing happens after loading).
    """

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up: nn.Linear | None = None

    def fuse(self, dtype: torch.dtype | None = None) -> None:
        self.gate_up = fuse_linears(self.gate_proj, self.up_proj, dtype=dtype)
        del self.gate_proj, self.up_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up is not None:
            gate, up = self.gate_up(x).split(self.intermediate_size, dim=-1)
            return self.down_proj(F.silu(gate).mul_(up))
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
