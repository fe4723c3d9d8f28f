"""Paged KV cache: one preallocated arena of fixed-size blocks, block tables, copy-on-write forks.

Split three ways as in nano-vllm (``block_manager.py`` / ``model_runner.allocate_kv_cache`` /
``utils/context.py``): block ids and reference counts live in the pure-Python
:class:`~engine.block_allocator.BlockAllocator`; keys and values live in one tensor
``(2, num_layers, num_blocks, block_size, H_kv, D)`` whose per-layer slices the caches share; each
forward pass gets a :class:`PagedForwardMetadata` (slot mapping, block table).

Position ``p`` of a sequence lives in block ``block_table[p // block_size]`` at row
``p % block_size``, i.e. flat slot ``block_id * block_size + p % block_size`` (vLLM's
``slot_mapping``; Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP'23, arXiv 2309.06180). Memory in use grows block by block with the
conversation; forks share their common blocks and copy a block only when they write into it.

Attention gathers the sequence's blocks into a ``[1, H_kv, T, D]`` view and runs SDPA through
:func:`~engine.kv_base.causal_attention`, so results equal the contiguous cache's (the decode
gather of the "recommended pure-PyTorch design"; a FlexAttention paged ``BlockMask`` could read the
blocks without the gather later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.block_allocator import BlockAllocator, OutOfBlocksError
from engine.kv_base import CacheShape, KVCache, causal_attention


@dataclass(slots=True)
class PagedForwardMetadata:
    """Per-step tensors of one forward pass, built by ``begin_forward`` (vLLM
    ``FlashAttentionMetadata``, nano-vllm ``Context``).

    Attributes:
        past: tokens cached before this step (the new positions are ``[past, past + num_new)``).
        num_new: positions this step writes.
        slot_mapping: ``[num_new]`` int64 on the cache device, flat arena slot of each new position.
        block_table: ``[ceil((past + num_new) / block_size)]`` int64 on the cache device, the
            physical block of each logical block. It is a prefix view of a buffer preallocated at
            ``max_blocks_per_seq`` entries, so a CUDA-graph decode could later capture the full
            buffer (plus a device ``seq_len`` to mask with) instead of this variable-length slice.
    """

    past: int
    num_new: int
    slot_mapping: torch.Tensor
    block_table: torch.Tensor


class PagedKVCache(KVCache):
    """Keys and values of one sequence (batch size 1) stored in blocks of a shared arena.

    ``nbytes`` counts the blocks this sequence holds (``len(block_table) * bytes_per_block``): the
    arena is capacity shared by this cache and its forks, ``nbytes`` is what this conversation
    reserves of it. A block shared with a fork is counted by both. ``arena_nbytes`` is the whole
    arena (allocated once, up front).

    Args:
        shape: layers, KV heads and head_dim of the model.
        max_tokens: most tokens this sequence may hold (:attr:`capacity`).
        device, dtype: of the arena.
        block_size: tokens per block (vLLM's default is 16).
        num_blocks: blocks in the arena; default ``2 * ceil(max_tokens / block_size)``. Must hold at
            least one full-length sequence.
        share_with: build an empty sequence on this other cache's arena and allocator (as
            :meth:`fork` does, without sharing any tokens). ``num_blocks`` is then ignored.

    Raises:
        ValueError: the arena is smaller than ``max_tokens``; ``share_with`` has another layout.
    """

    def __init__(self, shape: CacheShape, max_tokens: int, device: torch.device, dtype: torch.dtype,
                 block_size: int = 16, num_blocks: int | None = None, *,
                 share_with: PagedKVCache | None = None):
        super().__init__(shape, max_tokens, device, dtype)
        self.block_size = block_size
        self.max_blocks_per_seq = math.ceil(max_tokens / block_size)
        if share_with is not None:
            same = (share_with.shape, share_with.device, share_with.dtype, share_with.block_size)
            if same != (shape, self.device, dtype, block_size):
                raise ValueError(f"cannot share an arena of layout {same} with {(shape, self.device, dtype, block_size)}")
            self.allocator = share_with.allocator
            self.kv = share_with.kv
        else:
            num_blocks = num_blocks or 2 * self.max_blocks_per_seq
            if num_blocks * block_size < max_tokens:
                raise ValueError(f"{num_blocks} blocks of {block_size} tokens cannot hold max_tokens={max_tokens}")
            self.allocator = BlockAllocator(num_blocks)
            # (2, L, num_blocks, block_size, H_kv, D); k is kv[0], v is kv[1]. Left uninitialised:
            # a slot is only ever read after it is written (reads are trimmed to seq_len + n).
            self.kv = torch.empty((2, shape.num_layers, num_blocks, block_size, shape.num_kv_heads, shape.head_dim),
                                  device=self.device, dtype=dtype)
        self.block_table: list[int] = []
        # Device copy of block_table, preallocated at its largest size (static for CUDA graphs).
        self._block_table_buf = torch.zeros(self.max_blocks_per_seq, dtype=torch.long, device=self.device)
        self._metadata: PagedForwardMetadata | None = None

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks this sequence holds: ``len(block_table) * bytes_per_block``."""
        return len(self.block_table) * self.bytes_per_block

    @property
    def arena_nbytes(self) -> int:
        """Bytes of the whole arena shared with forks (``num_blocks * bytes_per_block``)."""
        return self.kv.nbytes

    @property
    def metadata(self) -> PagedForwardMetadata | None:
        """The current step's metadata between ``begin_forward`` and ``end_forward``, else ``None``."""
        return self._metadata if self._pending else None

    def _reserve(self, total_tokens: int) -> None:
        """Make room for ``total_tokens``: copy a shared partial tail block, allocate new blocks,
        and build the step's slot mapping. All or nothing.

        Raises:
            OutOfBlocksError: the arena has fewer free blocks than needed (both numbers named).
        """
        bs, past = self.block_size, self._seq_len
        num_new_blocks = math.ceil(total_tokens / bs) - len(self.block_table)
        # Writes start at row past % bs of block past // bs; every later block is freshly allocated.
        # Only that first block can be shared, and only if it is partly filled (a fork mid-block).
        cow = past % bs != 0 and self.allocator.ref_count(self.block_table[past // bs]) > 1
        needed = num_new_blocks + int(cow)
        if needed > self.allocator.num_free:
            raise OutOfBlocksError(
                f"KV cache arena is full: {total_tokens} tokens need {needed} more blocks of {bs} tokens, "
                f"but only {self.allocator.num_free} of {self.allocator.num_blocks} blocks are free"
            )
        if cow:
            self._copy_on_write(past // bs)
        for _ in range(num_new_blocks):
            self.block_table.append(self.allocator.allocate())
        nb = len(self.block_table)
        self._block_table_buf[:nb].copy_(torch.tensor(self.block_table, dtype=torch.long))
        table = self._block_table_buf[:nb]
        pos = torch.arange(past, total_tokens, device=self.device)
        slots = table[pos // bs] * bs + pos % bs  # [n] int64
        self._metadata = PagedForwardMetadata(past, total_tokens - past, slots, table)

    def _copy_on_write(self, index: int) -> None:
        """Give this sequence a private copy of the shared block ``block_table[index]`` (all layers)."""
        old = self.block_table[index]
        new = self.allocator.allocate()
        rows = self._seq_len - index * self.block_size  # valid rows of the partial block
        self.kv[:, :, new, :rows] = self.kv[:, :, old, :rows]
        self.allocator.decref(old)
        self.block_table[index] = new

    def _release_after(self, n: int) -> None:
        keep = math.ceil(n / self.block_size)
        for block_id in reversed(self.block_table[keep:]):
            self.allocator.decref(block_id)
        del self.block_table[keep:]

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Write ``k``/``v`` ``[1, H_kv, n, D]`` into this step's slots of ``layer`` and return
        causal attention ``[1, H, n, D]`` of ``q [1, H, n, D]`` over positions ``[0, seq_len + n)``.

        Raises:
            ValueError: batch size is not 1, or ``n`` differs from what ``begin_forward`` reserved.
        """
        if q.shape[0] != 1 or k.shape[0] != 1:
            raise ValueError(f"PagedKVCache holds one sequence: batch size must be 1, got B={k.shape[0]}")
        md = self._metadata
        n = k.shape[2]
        if not self._pending or md is None or n != md.num_new:
            raise ValueError(f"attend got {n} new positions, begin_forward reserved {self._pending}")
        h_kv, d = self.shape.num_kv_heads, self.shape.head_dim
        total = md.past + n
        outs = []
        for cache, new in ((self.kv[0, layer], k), (self.kv[1, layer], v)):
            # cache: [num_blocks, bs, H_kv, D]; flat view [num_blocks*bs, H_kv, D] addressed by slot.
            cache.view(-1, h_kv, d).index_copy_(0, md.slot_mapping, new[0].transpose(0, 1).to(self.dtype))
            seq = cache[md.block_table].view(-1, h_kv, d)[:total]  # [T, H_kv, D]
            outs.append(seq.transpose(0, 1).unsqueeze(0))  # [1, H_kv, T, D]
        return causal_attention(q, outs[0], outs[1], past=md.past)

    def end_forward(self) -> None:
        super().end_forward()
        self._metadata = None

    def abort_forward(self) -> None:
        super().abort_forward()
        self._metadata = None

    def fork(self) -> PagedKVCache:
        """A new sequence on the same arena that starts with this one's tokens.

        Every block is shared (reference count + 1); whichever sequence first writes into a shared,
        partly filled block copies it (:meth:`_copy_on_write`). Full shared blocks are never written.

        Raises:
            RuntimeError: called between ``begin_forward`` and ``end_forward``.
        """
        if self._pending:
            raise RuntimeError("cannot fork a cache during a forward pass")
        child = PagedKVCache(self.shape, self.max_tokens, self.device, self.dtype, self.block_size, share_with=self)
        for block_id in self.block_table:
            self.allocator.incref(block_id)
        child.block_table = list(self.block_table)
        child._seq_len = self._seq_len
        return child

    def release(self) -> None:
        """Return every block to the arena and drop all tokens (the cache stays usable)."""
        super().release()
        self._metadata = None

    def __repr__(self) -> str:
        return (f"PagedKVCache(seq_len={self._seq_len}, blocks={len(self.block_table)}, "
                f"block_size={self.block_size}, arena={self.allocator})")
