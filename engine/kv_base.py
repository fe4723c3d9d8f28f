"""The KV cache interface the model drives, and the attention helper both caches share.

The model drives a cache in three steps per forward pass (MLC-LLM / TVM ``kv_state.h``'s
``BeginForward``/``EndForward``): ``begin_forward(n)`` reserves ``n`` new positions at the tail,
``attend(layer, q, k, v)`` writes the new keys/values of one layer and returns causal attention of
the new queries over everything cached, and ``end_forward()`` commits the ``n`` positions.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.errors import PromptTooLongError


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


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
    """Causal attention of ``n`` new queries at positions ``[past, past+n)`` over ``past+n`` keys.

    ``q [B, H, n, D]``, ``k``/``v [B, H_kv, past+n, D]`` -> ``[B, H, n, D]``. Grouped-query heads are
    expanded with ``repeat_interleave`` (transformers ``repeat_kv``).
    """
    n = q.shape[2]
    if n == 1:
        return single_query_attention(q, k, v)
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    if past == 0:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # Query i sits at absolute position past+i and sees keys 0..past+i (bottom-right aligned mask).
    key_pos = torch.arange(past + n, device=q.device)
    query_pos = torch.arange(past, past + n, device=q.device)
    mask = key_pos[None, :] <= query_pos[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def single_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode-step attention: ``q [B, H, 1, D]`` over ``k``/``v [B, H_kv, T, D]`` -> ``[B, H, 1, D]``.

    The ``H/H_kv`` query heads sharing a KV head become the rows of one small matmul, so the cache is
    read in place (strided views are fine) and never expanded by ``repeat_interleave``; a plain
    matmul + float32 softmax + matmul (transformers' eager order) beats SDPA's per-call setup for
    one query on the CPU.
    """
    b, h, _, d = q.shape
    hkv = k.shape[1]
    scores = torch.matmul(q.reshape(b, hkv, h // hkv, d), k.transpose(-1, -2)) * d**-0.5  # [B, Hkv, G, T]
    probs = scores.softmax(-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v).view(b, h, 1, d)
