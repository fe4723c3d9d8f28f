"""Paged KV cache: a growing arena of fixed-size blocks, block tables, copy-on-write forks.

Split three ways as in nano-vllm (``block_manager.py`` / ``model_runner.allocate_kv_cache`` /
``utils/context.py``): block ids and reference counts live in the pure-Python
:class:`~engine.cache.block_allocator.BlockAllocator`; keys and values live in one tensor
``(2, num_layers, num_blocks, block_size, H_kv, D)`` owned by a :class:`KVArena` that a cache and its
forks share; each forward pass gets a :class:`PagedForwardMetadata` (slot mapping, block table).

Position ``p`` of a sequence lives in block ``block_table[p // block_size]`` at row
``p % block_size``, i.e. flat slot ``block_id * block_size + p % block_size`` (vLLM's
``slot_mapping``; Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP'23, arXiv 2309.06180). Memory in use grows block by block with the
conversation; forks share their common blocks and copy a block only when they write into it.

The arena starts small (:data:`DEFAULT_INITIAL_TOKENS` worth of blocks) and doubles when the
allocator runs out, up to ``max_num_blocks`` (default: two full-length sequences, i.e. one
conversation plus as much again for forks). Growing allocates a bigger tensor and copies the old
blocks into it, so block ids and block tables stay valid; :attr:`KVArena.version` counts the
reallocations (anything holding the tensor's address, such as a captured CUDA graph, must be
rebuilt when it changes).

Attention gathers the sequence's blocks into a ``[1, H_kv, T, D]`` view and runs SDPA through
:func:`~engine.layers.attention.causal_attention`, so results equal the contiguous cache's (the decode
gather of the "recommended pure-PyTorch design"; a FlexAttention paged ``BlockMask`` could read the
blocks without the gather later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.cache.base import CacheShape, KVCache
from engine.cache.block_allocator import BlockAllocator, OutOfBlocksError
from engine.cache.prefix import PrefixBlockCache
from engine.device import host_staged

# The arena a new paged cache starts with holds this many tokens (rounded up to whole blocks).
DEFAULT_INITIAL_TOKENS = 1024


@dataclass(slots=True)
class PagedForwardMetadata:
    """Per-step tensors of one forward pass, built by ``begin_forward`` (vLLM
    ``FlashAttentionMetadata``, nano-vllm ``Context``).

    Attributes:
        past: tokens cached before this step (the new positions are ``[past, past + num_new)``).
        num_new: positions this step writes.
        block_table: ``[ceil((past + num_new) / block_size)]`` int64 on the cache device, the
            physical block of each logical block. It is a prefix view of a buffer preallocated at
            ``max_blocks_per_seq`` entries, so a CUDA-graph decode could later capture the full
            buffer (plus a device ``seq_len`` to mask with) instead of this variable-length slice.
        block_size: positions per block.
        arena_version: :attr:`KVArena.version` when the step was built; a graph captured against
            the arena tensor is stale once the arena's version moves on (it grew and moved).
        first_block: when the block table is a run of consecutive block ids (the usual case for
            one conversation: blocks are handed out in order), its first id, so the sequence is
            one slice of the flat arena and attention reads it in place; else ``None`` (gather).
        host_table: the block table as a host list (equal to ``block_table``; not to be modified).
        slot_mapping: ``[num_new]`` int64 on the cache device, flat arena slot of each new position
            (``block_table[p // block_size] * block_size + p % block_size``, one ``arange`` when
            the blocks are consecutive). Computed on first use: a decode step whose CUDA graph finds
            its slot on the device itself never launches these kernels (each launch is host time the
            GPU waits for, every token).
    """

    past: int
    num_new: int
    block_table: torch.Tensor
    block_size: int
    arena_version: int = 0
    first_block: int | None = None
    host_table: list[int] | None = None
    _slots: torch.Tensor | None = None

    @property
    def slot_mapping(self) -> torch.Tensor:
        if self._slots is None:
            bs, past, table = self.block_size, self.past, self.block_table
            if self.first_block is not None:  # consecutive blocks: position p is slot first_block*bs + p
                start = self.first_block * bs + past
                self._slots = torch.arange(start, start + self.num_new, device=table.device)
            elif self.num_new == 1:  # a decode step: two small kernels instead of six
                self._slots = table[past // bs:past // bs + 1] * bs + past % bs  # [1] int64
            else:  # on the host, from the table the cache keeps there: no gather kernels' first launch
                pos = torch.arange(past, past + self.num_new)
                host = torch.tensor(self.host_table, dtype=torch.long)
                self._slots = (host[pos // bs] * bs + pos % bs).to(table.device)  # [n] int64
        return self._slots


class KVArena:
    """Block storage shared by a paged cache and its forks: the key/value tensor and its allocator.

    ``kv`` is ``(2, num_layers, num_blocks, block_size, H_kv, D)`` (``kv[0]`` keys, ``kv[1]``
    values), left uninitialised: a slot is only read after it is written. :meth:`ensure_free` grows
    it geometrically (x2) up to ``max_num_blocks``; growth reallocates the tensor (briefly holding
    old + new) and bumps :attr:`version`. Block ids never change. :attr:`prefix` is the automatic
    prefix cache of the sequences on this arena (:mod:`engine.cache.prefix`, ``prefix_blocks`` at most).
    """

    def __init__(self, shape: CacheShape, block_size: int, num_blocks: int, max_num_blocks: int,
                 device: torch.device, dtype: torch.dtype, prefix_blocks: int = 0):
        if not 1 <= num_blocks <= max_num_blocks:
            raise ValueError(f"the arena needs 1 <= num_blocks <= max_num_blocks, got {num_blocks} and {max_num_blocks}")
        self.shape = shape
        self.block_size = block_size
        self.max_num_blocks = max_num_blocks
        self.allocator = BlockAllocator(num_blocks)
        self.version = 0
        self.kv = self._empty(num_blocks, device, dtype)
        self.prefix = PrefixBlockCache(self.allocator, prefix_blocks)

    def _empty(self, num_blocks: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        # Zeros, not torch.empty: a fixed-shape (CUDA-graph) decode step reads whole blocks and masks
        # the rows past the sequence, and a mask cannot hide NaN bit patterns (NaN * 0 is NaN).
        # Written rows are always finite, so every row read is finite. Zeroing touches the whole
        # arena, which is fine because the arena itself only grows (doubling) with use.
        s = self.shape
        return torch.zeros((2, s.num_layers, num_blocks, self.block_size, s.num_kv_heads, s.head_dim),
                           device=device, dtype=dtype)

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    def ensure_free(self, needed: int) -> bool:
        """Make ``needed`` blocks free: reallocate once, doubling the block count as many times as
        that takes (capped at ``max_num_blocks``); past the cap, give back blocks only the prefix cache
        holds, least recently used first.
        Returns ``False`` when even the largest arena would not have them (the arena does not grow
        then, though prefix-cache blocks may have been given back)."""
        deficit = needed - self.allocator.num_free
        if deficit <= 0:
            return True
        n = self.num_blocks
        if n + deficit > self.max_num_blocks:
            self.prefix.evict(needed - (self.max_num_blocks - n))
            deficit = needed - self.allocator.num_free
            if deficit <= 0:
                return True
            if n + deficit > self.max_num_blocks:
                return False
        target = n
        while target < n + deficit:  # one reallocation, to the next doubling that is enough
            target *= 2
        target = min(target, self.max_num_blocks)
        grown = self._empty(target, self.kv.device, self.kv.dtype)
        grown[:, :, :n].copy_(self.kv)
        self.kv = grown
        self.allocator.grow(target)
        self.version += 1
        return True


class PagedKVCache(KVCache):
    """Keys and values of one sequence (batch size 1) stored in blocks of a shared, growing arena.

    Memory accounting: ``nbytes`` is what this conversation holds, ``len(block_table) *
    bytes_per_block`` (a block shared with a fork is counted by both); ``arena_nbytes`` is the arena
    tensor actually allocated for this cache and its forks (``num_blocks * bytes_per_block``), which
    grows by doubling as blocks run out, up to ``max_num_blocks``.

    Args:
        shape: layers, KV heads and head_dim of the model.
        max_tokens: most tokens this sequence may hold (:attr:`capacity`).
        device, dtype: of the arena.
        block_size: tokens per block (vLLM's default is 16).
        num_blocks: blocks the arena starts with; default enough for :data:`DEFAULT_INITIAL_TOKENS`
            (at most ``max_num_blocks``).
        max_num_blocks: most blocks the arena may grow to; default ``2 * ceil(max_tokens /
            block_size)`` (one full-length sequence plus as much again for forks), and never less
            than ``num_blocks``. Must hold at least one full-length sequence.
        share_with: build an empty sequence on this other cache's arena (as :meth:`fork` does,
            without sharing any tokens). ``num_blocks``, ``max_num_blocks`` and
            ``prefix_cache_tokens`` are then ignored.
        prefix_cache_tokens: most tokens the arena's prefix cache keeps (:class:`~engine.cache.base.
            CacheConfig`); ``None``: ``max_tokens``; 0: off.

    Raises:
        ValueError: the largest arena is smaller than ``max_tokens``; ``share_with`` has another layout.
    """

    def __init__(self, shape: CacheShape, max_tokens: int, device: torch.device, dtype: torch.dtype,
                 block_size: int = 16, num_blocks: int | None = None, *, max_num_blocks: int | None = None,
                 share_with: PagedKVCache | None = None, prefix_cache_tokens: int | None = None):
        super().__init__(shape, max_tokens, device, dtype)
        self.block_size = block_size
        self.max_blocks_per_seq = math.ceil(max_tokens / block_size)
        if share_with is not None:
            same = (share_with.shape, share_with.device, share_with.dtype, share_with.block_size)
            if same != (shape, self.device, dtype, block_size):
                raise ValueError(f"cannot share an arena of layout {same} with {(shape, self.device, dtype, block_size)}")
            self.arena = share_with.arena
        else:
            if max_num_blocks is None:
                max_num_blocks = max(2 * self.max_blocks_per_seq, num_blocks or 0)
            if max_num_blocks * block_size < max_tokens:
                raise ValueError(f"{max_num_blocks} blocks of {block_size} tokens cannot hold max_tokens={max_tokens}")
            if num_blocks is None:
                num_blocks = min(math.ceil(DEFAULT_INITIAL_TOKENS / block_size), max_num_blocks)
            prefix_tokens = max_tokens if prefix_cache_tokens is None else prefix_cache_tokens
            self.arena = KVArena(shape, block_size, num_blocks, max_num_blocks, self.device, dtype,
                                 prefix_blocks=prefix_tokens // block_size)
        self.block_table: list[int] = []
        # Device copy of block_table, preallocated at its largest size (static for CUDA graphs).
        self._block_table_buf = torch.zeros(self.max_blocks_per_seq, dtype=torch.long, device=self.device)
        self._synced_table: list[int] = []  # what _block_table_buf holds
        self._first_block: int | None = None  # see PagedForwardMetadata.first_block
        self._metadata: PagedForwardMetadata | None = None

    @property
    def allocator(self) -> BlockAllocator:
        return self.arena.allocator

    @property
    def kv(self) -> torch.Tensor:
        """The arena tensor (re-read it after a step that may have grown the arena)."""
        return self.arena.kv

    @property
    def arena_version(self) -> int:
        """Times the shared arena has been reallocated to grow (see :class:`KVArena`)."""
        return self.arena.version

    @property
    def max_num_blocks(self) -> int:
        return self.arena.max_num_blocks

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def prefix(self) -> PrefixBlockCache:
        """The arena's automatic prefix cache (shared with forks)."""
        return self.arena.prefix

    def adopt_prefix(self, block_ids: list[int]) -> None:
        """Drop this sequence's tokens and start it with ``block_ids``, full blocks found in the prefix
        cache: ``seq_len`` becomes ``len(block_ids) * block_size``. The blocks are shared (reference
        count + 1), so a write into one of them after a :meth:`truncate` copies it first.

        Raises:
            RuntimeError: called between ``begin_forward`` and ``end_forward``.
            ValueError: more blocks than one sequence may hold.
        """
        if self._pending:
            raise RuntimeError("cannot adopt blocks during a forward pass")
        if len(block_ids) > self.max_blocks_per_seq:
            raise ValueError(f"{len(block_ids)} blocks exceed the {self.max_blocks_per_seq} one sequence may hold")
        for block_id in block_ids:  # first, so that none of them is freed by the release below
            self.allocator.incref(block_id)
        self.truncate(0)
        self.block_table = list(block_ids)
        self._seq_len = len(block_ids) * self.block_size

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks this sequence holds: ``len(block_table) * bytes_per_block``."""
        return len(self.block_table) * self.bytes_per_block

    @property
    def arena_nbytes(self) -> int:
        """Bytes of the arena allocated now, shared with forks (``num_blocks * bytes_per_block``)."""
        return self.kv.nbytes

    @property
    def metadata(self) -> PagedForwardMetadata | None:
        """The current step's metadata between ``begin_forward`` and ``end_forward``, else ``None``."""
        return self._metadata if self._pending else None

    def _reserve(self, total_tokens: int) -> None:
        """Make room for ``total_tokens``: grow the arena if needed, copy a shared partial tail
        block, allocate new blocks, and build the step's slot mapping. All or nothing (a growth that
        happened stays: it is only spare capacity).

        Raises:
            OutOfBlocksError: the arena, grown to its cap, has fewer free blocks than needed.
        """
        bs, past = self.block_size, self._seq_len
        num_new_blocks = math.ceil(total_tokens / bs) - len(self.block_table)
        # Writes start at row past % bs of block past // bs; every later block is freshly allocated.
        # Only that first block can be shared, and only if it is partly filled (a fork mid-block).
        cow = past % bs != 0 and self.allocator.ref_count(self.block_table[past // bs]) > 1
        needed = num_new_blocks + int(cow)
        if not self.arena.ensure_free(needed):
            raise OutOfBlocksError(
                f"KV cache arena is full: {total_tokens} tokens need {needed} more blocks of {bs} tokens, "
                f"but only {self.allocator.num_free} of {self.allocator.num_blocks} blocks are free "
                f"and the arena may not grow past {self.arena.max_num_blocks} blocks"
            )
        if cow:
            self._copy_on_write(past // bs)
        for _ in range(num_new_blocks):
            self.block_table.append(self.allocator.allocate())
        nb = len(self.block_table)
        if self._synced_table != self.block_table:
            # Only when the table changed (a new block every block_size tokens, copy-on-write, fork).
            # From pinned memory and without waiting: a copy from pageable memory synchronizes the
            # stream, and a decode loop one step ahead of the GPU then stalled every block_size tokens.
            self._block_table_buf[:nb].copy_(host_staged(self.block_table, self.device), non_blocking=True)
            self._synced_table = list(self.block_table)
            first = self.block_table[0] if nb else 0
            self._first_block = first if self.block_table == list(range(first, first + nb)) else None
        table = self._block_table_buf[:nb]
        self._metadata = PagedForwardMetadata(past, total_tokens - past, table, bs, self.arena.version,
                                              self._first_block, self._synced_table)

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

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k``/``v`` ``[1, H_kv, n, D]`` into this step's slots of ``layer`` and return keys and
        values ``[1, H_kv, seq_len + n, D]`` (views of the arena when the blocks are consecutive).

        Raises:
            ValueError: batch size is not 1, or ``n`` differs from what ``begin_forward`` reserved.
        """
        if k.shape[0] != 1:
            raise ValueError(f"PagedKVCache holds one sequence: batch size must be 1, got B={k.shape[0]}")
        md = self._metadata
        n = k.shape[2]
        if not self._pending or md is None or n != md.num_new:
            raise ValueError(f"update got {n} new positions, begin_forward reserved {self._pending}")
        h_kv, d = self.shape.num_kv_heads, self.shape.head_dim
        total = md.past + n
        outs = []
        for cache, new in ((self.kv[0, layer], k), (self.kv[1, layer], v)):
            # cache: [num_blocks, bs, H_kv, D]; flat view [num_blocks*bs, H_kv, D] addressed by slot.
            flat = cache.view(-1, h_kv, d)
            flat.index_copy_(0, md.slot_mapping, new[0].transpose(0, 1).to(self.dtype))
            if md.first_block is not None:  # consecutive blocks: a view, no copy of the whole history
                start = md.first_block * self.block_size
                seq = flat[start:start + total]  # [T, H_kv, D]
            else:
                seq = cache[md.block_table].view(-1, h_kv, d)[:total]
            outs.append(seq.transpose(0, 1).unsqueeze(0))  # [1, H_kv, T, D]
        return outs[0], outs[1]

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
                f"block_size={self.block_size}, arena={self.allocator}, max_num_blocks={self.max_num_blocks})")
