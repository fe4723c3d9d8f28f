"""KV caches: the contiguous baseline and the paged block arena share one interface.

The model drives a cache in three steps per forward pass (MLC-LLM / TVM ``kv_state.h``'s
``BeginForward``/``EndForward``): ``begin_forward(n)`` reserves ``n`` new positions at the tail,
``attend(layer, q, k, v)`` writes the new keys/values of one layer and returns causal attention of
the new queries over everything cached, and ``end_forward()`` commits the ``n`` positions.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from engine.errors import PromptTooLongError


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """How to build a KV cache.

    ``max_tokens`` bounds one sequence (prompt + answer); ``None`` means the model's context
    (``max_position_embeddings``). ``block_size`` is tokens per block of the paged arena. ``dtype``
    ``None`` means the model's dtype.
    """

    kind: Literal["paged", "contiguous"] = "contiguous"
    max_tokens: int | None = None
    block_size: int = 16
    dtype: torch.dtype | None = None
    max_batch_size: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ("paged", "contiguous"):
            raise ValueError(f"cache kind must be 'paged' or 'contiguous', got {self.kind!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")


@dataclass(frozen=True, slots=True)
class CacheShape:
    """Per-model sizes a cache needs: layers, KV heads, head_dim (tokens are the cache's business)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int


class KVCache(abc.ABC):
    """Keys and values of one conversation (batch of ``B`` rows sharing one length).

    Tensors passed to :meth:`attend`: ``q [B, H, n, D]``, ``k``/``v [B, H_kv, n, D]``; ``H`` must be a
    multiple of ``H_kv`` (grouped-query attention). Attention is causal with scale ``D**-0.5``
    (Vaswani et al. 2017), computed with ``F.scaled_dot_product_attention``.
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
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Write ``k``/``v`` at positions ``[seq_len, seq_len + n)`` of ``layer`` and return
        causal attention ``[B, H, n, D]`` of ``q`` over positions ``[0, seq_len + n)``."""

    def truncate(self, n: int) -> None:
        """Roll back to the first ``n`` tokens (rejected speculation, regenerate, edit)."""
        if not 0 <= n <= self._seq_len:
            raise ValueError(f"cannot truncate a cache of {self._seq_len} tokens to {n}")
        self._seq_len = n
        self._release_after(n)

    def reset(self) -> None:
        self.truncate(0)

    @abc.abstractmethod
    def fork(self) -> KVCache:
        """A new cache that starts with this one's tokens (shared copy-on-write where possible)."""

    def _reserve(self, total_tokens: int) -> None:
        """Make room for ``total_tokens`` positions (the paged cache allocates blocks here)."""

    def _release_after(self, n: int) -> None:
        """Return storage beyond ``n`` tokens (the paged cache frees blocks here)."""


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
    """Causal attention of ``n`` new queries at positions ``[past, past+n)`` over ``past+n`` keys.

    ``q [B, H, n, D]``, ``k``/``v [B, H_kv, past+n, D]`` -> ``[B, H, n, D]``. Grouped-query heads are
    expanded with ``repeat_interleave`` (transformers ``repeat_kv``).
    """
    n = q.shape[2]
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    if n == 1:
        return F.scaled_dot_product_attention(q, k, v)
    if past == 0:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # Query i sits at absolute position past+i and sees keys 0..past+i (bottom-right aligned mask).
    key_pos = torch.arange(past + n, device=q.device)
    query_pos = torch.arange(past, past + n, device=q.device)
    mask = key_pos[None, :] <= query_pos[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


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
    from engine.paged_kv_cache import PagedKVCache  # noqa: PLC0415  (paged arena lives beside)

    num_blocks = math.ceil(max_tokens / config.block_size) * config.max_batch_size
    return PagedKVCache(shape, max_tokens, device, dtype, block_size=config.block_size, num_blocks=num_blocks)
