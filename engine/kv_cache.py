"""KV caches: the contiguous baseline and the paged block arena share one interface.

This is the public module: it re-exports the interface (``engine.kv_base``), the paged cache
(``engine.paged_kv_cache``) and its pure-Python allocator (``engine.block_allocator``).

The model drives a cache in three steps per forward pass (MLC-LLM / TVM ``kv_state.h``'s
``BeginForward``/``EndForward``): ``begin_forward(n)`` reserves ``n`` new positions at the tail,
``attend(layer, q, k, v)`` writes the new keys/values of one layer and returns causal attention of
the new queries over everything cached, and ``end_forward()`` commits the ``n`` positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from engine.block_allocator import BlockAllocator, OutOfBlocksError
from engine.kv_base import CacheShape, KVCache, causal_attention
from engine.paged_kv_cache import DEFAULT_INITIAL_TOKENS, KVArena, PagedForwardMetadata, PagedKVCache

__all__ = [
    "BlockAllocator",
    "CacheConfig",
    "CacheShape",
    "ContiguousKVCache",
    "DEFAULT_INITIAL_TOKENS",
    "KVArena",
    "KVCache",
    "OutOfBlocksError",
    "PagedForwardMetadata",
    "PagedKVCache",
    "causal_attention",
    "create_kv_cache",
]


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """How to build a KV cache.

    ``kind`` is ``"paged"`` by default (memory follows the tokens in use); ``"contiguous"`` is the
    baseline that reserves ``max_tokens`` up front. ``max_tokens`` bounds one sequence (prompt +
    answer); ``None`` means the model's context (``max_position_embeddings``). ``block_size`` is
    tokens per block of the paged arena. ``dtype`` ``None`` means the model's dtype.

    The paged arena, shared by a cache and its forks, starts at ``num_blocks`` blocks (``None``:
    enough for :data:`~engine.paged_kv_cache.DEFAULT_INITIAL_TOKENS` tokens) and doubles when it runs
    out, up to ``max_num_blocks`` (``None``: ``2 * ceil(max_tokens / block_size)``, one full-length
    conversation plus as much again for forks, which share their common prefix and only add the
    blocks they diverge in). Set both equal for a fixed arena. The paged cache holds one sequence, so
    it needs ``max_batch_size == 1``.
    """

    kind: Literal["paged", "contiguous"] = "paged"
    max_tokens: int | None = None
    block_size: int = 16
    dtype: torch.dtype | None = None
    max_batch_size: int = 1
    num_blocks: int | None = None
    max_num_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("paged", "contiguous"):
            raise ValueError(f"cache kind must be 'paged' or 'contiguous', got {self.kind!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        if self.max_num_blocks is not None and self.max_num_blocks < (self.num_blocks or 1):
            raise ValueError(f"max_num_blocks must be >= num_blocks (and >= 1), got {self.max_num_blocks}")


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

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        start, n = self._seq_len, k.shape[2]
        if n != self._pending:
            raise ValueError(f"attend got {n} new positions, begin_forward reserved {self._pending}")
        end = start + n
        b = k.shape[0]
        self.k[layer, :b, :, start:end] = k
        self.v[layer, :b, :, start:end] = v
        return causal_attention(q, self.k[layer, :b, :, :end], self.v[layer, :b, :, :end], past=start)

    def fork(self) -> ContiguousKVCache:
        other = ContiguousKVCache(self.shape, self.max_tokens, self.device, self.dtype, self.batch_size)
        other.k[:, :, :, : self._seq_len] = self.k[:, :, :, : self._seq_len]
        other.v[:, :, :, : self._seq_len] = self.v[:, :, :, : self._seq_len]
        other._seq_len = self._seq_len
        return other


def create_kv_cache(config: CacheConfig, shape: CacheShape, context: int, device: torch.device,
                    dtype: torch.dtype) -> KVCache:
    """Build the cache ``config`` asks for. ``context`` is the model's ``max_position_embeddings``."""
    max_tokens = min(config.max_tokens or context, context)
    dtype = config.dtype or dtype
    if config.kind == "contiguous":
        return ContiguousKVCache(shape, max_tokens, device, dtype, config.max_batch_size)
    if config.max_batch_size != 1:
        raise ValueError(f"the paged KV cache holds one sequence; got max_batch_size={config.max_batch_size}")
    return PagedKVCache(shape, max_tokens, device, dtype, block_size=config.block_size,
                        num_blocks=config.num_blocks, max_num_blocks=config.max_num_blocks)
