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

    def _table(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos is None or self._cos.device != device:
            inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64,
                                                            device=device).float() / self.head_dim))
            pos = torch.arange(self.max_positions, device=device, dtype=torch.float32)
            freqs = pos[:, None] * inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
            self._cos, self._sin = emb.cos(), emb.sin()
        return self._cos, self._sin

    def cos_sin(self, start: int, length: int, device: torch.device, dtype: torch.dtype
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` of positions ``[start, start+length)``, each ``[length, D]`` in ``dtype``."""
        if start + length > self.max_positions:
            raise ValueError(f"position {start + length - 1} is beyond max_position_embeddings {self.max_positions}")
        cos, sin = self._table(device)
        return cos[start:start + length].to(dtype), sin[start:start + length].to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x [B, heads, S, D]`` rotated by ``cos``/``sin [S, D]``: ``x*cos + rotate_half(x)*sin``."""
    return x * cos + rotate_half(x) * sin


class GatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (Shazeer 2020, SwiGLU; transformers ``LlamaMLP``)."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
