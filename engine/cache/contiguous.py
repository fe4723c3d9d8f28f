"""The contiguous KV cache: the baseline that reserves its whole length up front."""

from __future__ import annotations

import torch

from engine.cache.base import CacheShape, KVCache


class ContiguousKVCache(KVCache):
    """The baseline: per layer ``k, v: [B, H_kv, max_tokens, D]`` reserved up front (gpt-fast ``KVCache``)."""

    def __init__(self, shape: CacheShape, max_tokens: int, device: torch.device, dtype: torch.dtype,
                 batch_size: int = 1):
        super().__init__(shape, max_tokens, device, dtype)
        self.batch_size = batch_size
        size = (shape.num_layers, batch_size, shape.num_kv_heads, max_tokens, shape.head_dim)
        self.k = torch.zeros(size, device=self.device, dtype=dtype)
        self.v = torch.zeros(size, device=self.device, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, n = self._seq_len, k.shape[2]
        if n != self._pending:
            raise ValueError(f"update got {n} new positions, begin_forward reserved {self._pending}")
        end = start + n
        b = k.shape[0]
        self.k[layer, :b, :, start:end] = k
        self.v[layer, :b, :, start:end] = v
        return self.k[layer, :b, :, :end], self.v[layer, :b, :, :end]

    def fork(self) -> ContiguousKVCache:
        other = ContiguousKVCache(self.shape, self.max_tokens, self.device, self.dtype, self.batch_size)
        other.k[:, :, :, : self._seq_len] = self.k[:, :, :, : self._seq_len]
        other.v[:, :, :, : self._seq_len] = self.v[:, :, :, : self._seq_len]
        other._seq_len = self._seq_len
        return other
