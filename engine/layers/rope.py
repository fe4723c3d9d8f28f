"""Rotary position embedding (Su et al. 2021) in the rotate-half layout."""

from __future__ import annotations

import torch
from torch import nn


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
            # Computed on the CPU (a few ms) and copied: on a GPU, the first launch of each of these
            # elementwise kernels loads its module, ~10-40 ms apiece on the H200, all inside a load.
            inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float()
                                             / self.head_dim))
            pos = torch.arange(self.max_positions, dtype=torch.float32)
            freqs = pos[:, None] * inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
            self._cos, self._sin = emb.cos(), emb.sin()
            # rotate_half(x) * sin == roll(x, D/2) * signed_sin, with the first half of sin negated
            # (a sign flip is exact), so RoPE costs a roll and a multiply-add instead of a cat.
            half = self.head_dim // 2
            self._sin = torch.cat((-self._sin[:, :half], self._sin[:, half:]), dim=-1)
            self._cos, self._sin = self._cos.to(device), self._sin.to(device)
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


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``x [B, heads, S, D]`` rotated by ``cos``/``signed_sin [S, D]`` (from :meth:`RotaryEmbedding.cos_sin`):
    ``x*cos + rotate_half(x)*sin``, computed as ``x*cos + roll(x, D/2)*signed_sin``."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), signed_sin)
