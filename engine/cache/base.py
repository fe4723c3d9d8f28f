"""The KV cache interface the model drives, and the attention helper both caches share.

The model drives a cache in three steps per forward pass (MLC-LLM / TVM ``kv_state.h``'s
``BeginForward``/``EndForward``): ``begin_forward(n)`` reserves ``n`` new positions at the tail,
``update(layer, k, v)`` writes the new keys/values of one layer and hands back every key and value
of the sequence so far (views where the storage allows), and ``end_forward()`` commits the ``n``
positions. Attention itself lives in :mod:`engine.layers.attention`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Literal

import torch

from engine.api.errors import PromptTooLongError


@dataclass(frozen=True, slots=True)
class CacheShape:
    """Per-model sizes a cache needs: layers, KV heads, head_dim (tokens are the cache's business)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """How to build a KV cache.

    ``kind`` is ``"paged"`` by default (memory follows the tokens in use); ``"contiguous"`` is the
    baseline that reserves ``max_tokens`` up front. ``max_tokens`` bounds one sequence (prompt +
    answer); ``None`` means the model's context (``max_position_embeddings``). ``block_size`` is
    tokens per block of the paged arena. ``dtype`` ``None`` means the model's dtype.

    The paged arena, shared by a cache and its forks, starts at ``num_blocks`` blocks (``None``:
    enough for :data:`~engine.cache.paged.DEFAULT_INITIAL_TOKENS` tokens) and doubles when it runs
    out, up to ``max_num_blocks`` (``None``: ``2 * ceil(max_tokens / block_size)``, one full-length
    conversation plus as much again for forks, which share their common prefix and only add the
    blocks they diverge in). Set both equal for a fixed arena. The paged cache holds one sequence, so
    it needs ``max_batch_size == 1``.

    ``prefix_cache_tokens`` bounds the paged arena's automatic prefix cache
    (:mod:`engine.cache.prefix`): full blocks of earlier sequences kept for a later prompt that
    starts the same way (another chat switched back to, an API client re-sending a conversation).
    ``None``: as many tokens as one sequence (``max_tokens``); 0 turns it off. Blocks it holds alone
    are given back first when the arena, grown to ``max_num_blocks``, runs out.
    """

    kind: Literal["paged", "contiguous"] = "paged"
    max_tokens: int | None = None
    block_size: int = 16
    dtype: torch.dtype | None = None
    max_batch_size: int = 1
    num_blocks: int | None = None
    max_num_blocks: int | None = None
    prefix_cache_tokens: int | None = None

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
        if self.prefix_cache_tokens is not None and self.prefix_cache_tokens < 0:
            raise ValueError(f"prefix_cache_tokens must be >= 0, got {self.prefix_cache_tokens}")


class KVCache(abc.ABC):
    """Keys and values of one conversation (batch of ``B`` rows sharing one length).

    Tensors passed to :meth:`update`: ``k``/``v [B, H_kv, n, D]`` in the cache's dtype or castable to it.
    """

    def __init__(self, shape: CacheShape, max_tokens: int, device: torch.device, dtype: torch.dtype):
        self.shape = shape
        self.max_tokens = max_tokens
        self.device = torch.device(device)
        self.dtype = dtype
        self._seq_len = 0
        self._pending = 0

    @property
    def seq_len(self) -> int:
        """Tokens committed to the cache."""
        return self._seq_len

    @property
    def capacity(self) -> int:
        """Largest ``seq_len`` this cache can reach."""
        return self.max_tokens

    @property
    @abc.abstractmethod
    def nbytes(self) -> int:
        """Bytes of device memory reserved for keys and values."""

    @property
    def bytes_per_token(self) -> int:
        s = self.shape
        return 2 * s.num_layers * s.num_kv_heads * s.head_dim * torch.empty((), dtype=self.dtype).element_size()

    def begin_forward(self, num_new: int) -> None:
        """Reserve ``num_new`` positions after ``seq_len``.

        Raises:
            PromptTooLongError: ``seq_len + num_new`` exceeds :attr:`capacity` (both numbers named).
        """
        if self._pending:
            raise RuntimeError("begin_forward called twice without end_forward")
        if num_new < 1:
            raise ValueError(f"num_new must be >= 1, got {num_new}")
        if self._seq_len + num_new > self.capacity:
            raise PromptTooLongError(
                f"{self._seq_len} cached + {num_new} new tokens exceed the cache capacity of {self.capacity} tokens"
            )
        self._reserve(self._seq_len + num_new)
        self._pending = num_new

    def end_forward(self) -> None:
        self._seq_len += self._pending
        self._pending = 0

    def abort_forward(self) -> None:
        """Drop a reservation after a failed forward pass (nothing is committed)."""
        self._pending = 0
        self._release_after(self._seq_len)

    @abc.abstractmethod
    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k``/``v [B, H_kv, n, D]`` at positions ``[seq_len, seq_len + n)`` of ``layer`` and
        return keys and values of positions ``[0, seq_len + n)``, each ``[B, H_kv, seq_len + n, D]``.

        Raises:
            ValueError: ``n`` differs from what :meth:`begin_forward` reserved.
        """

    def truncate(self, n: int) -> None:
        """Roll back to the first ``n`` tokens (rejected speculation, regenerate, edit)."""
        if not 0 <= n <= self._seq_len:
            raise ValueError(f"cannot truncate a cache of {self._seq_len} tokens to {n}")
        self._seq_len = n
        self._release_after(n)

    def reset(self) -> None:
        self.truncate(0)

    def release(self) -> None:
        """Give back all storage this cache can give back and drop every token.

        The paged cache returns its blocks to the shared arena (there is no ``__del__``: a paged cache
        dropped without ``release()`` keeps its blocks until the arena itself is garbage). The
        contiguous cache cannot shrink its buffers; for it this is :meth:`reset`.
        """
        self._pending = 0
        self.reset()

    @abc.abstractmethod
    def fork(self) -> KVCache:
        """A new cache that starts with this one's tokens (shared copy-on-write where possible)."""

    def _reserve(self, total_tokens: int) -> None:
        """Make room for ``total_tokens`` positions (the paged cache allocates blocks here)."""

    def _release_after(self, n: int) -> None:
        """Return storage beyond ``n`` tokens (the paged cache frees blocks here)."""


def create_kv_cache(config: CacheConfig, shape: CacheShape, context: int, device: torch.device,
                    dtype: torch.dtype) -> KVCache:
    """Build the cache ``config`` asks for. ``context`` is the model's ``max_position_embeddings``."""
    from engine.cache.contiguous import ContiguousKVCache
    from engine.cache.paged import PagedKVCache

    max_tokens = min(config.max_tokens or context, context)
    dtype = config.dtype or dtype
    if config.kind == "contiguous":
        return ContiguousKVCache(shape, max_tokens, device, dtype, config.max_batch_size)
    if config.max_batch_size != 1:
        raise ValueError(f"the paged KV cache holds one sequence; got max_batch_size={config.max_batch_size}")
    return PagedKVCache(shape, max_tokens, device, dtype, block_size=config.block_size,
                        num_blocks=config.num_blocks, max_num_blocks=config.max_num_blocks,
                        prefix_cache_tokens=config.prefix_cache_tokens)
