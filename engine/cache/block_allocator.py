"""Block bookkeeping for the paged KV cache: ids, reference counts, a free list. No torch here.

A block is ``block_size`` consecutive token slots of the KV arena. Sequences hold lists of block ids
(block tables); a block shared by several sequences (after :meth:`PagedKVCache.fork`) carries one
reference per holder and returns to the free list when the last holder lets go.

Sources: vLLM PagedAttention (Kwon et al., SOSP'23, arXiv 2309.06180; ``vllm/v1/core/block_pool.py``
``KVCacheBlock.ref_cnt``) and nano-vllm ``nanovllm/engine/block_manager.py`` (free ``deque``,
``ref_count``, asserts as invariants). Prefix hashing is left out: nothing here needs it yet.
"""

from __future__ import annotations

from collections import deque

from engine.api.errors import EngineError


class OutOfBlocksError(EngineError):
    """The shared KV arena has no free block left (too many or too long conversations/forks)."""


class BlockAllocator:
    """Hands out block ids ``0 .. num_blocks-1`` and counts references to each.

    Invariants (checked with ``assert``): a block is on the free list iff its count is 0; counts
    never go negative; ``num_free + num_used == num_blocks``.
    """

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self._ref_counts = [0] * num_blocks
        # FIFO reuse (nano-vllm): a just-freed block is handed out last, which makes use-after-free
        # bugs show up as wrong values in tests instead of silently reading the right data.
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def free_block_ids(self) -> tuple[int, ...]:
        """Ids on the free list, next-to-be-allocated first (for tests and debugging)."""
        return tuple(self._free)

    def grow(self, num_blocks: int) -> None:
        """Add blocks ``self.num_blocks .. num_blocks-1`` (free). Existing ids and counts are kept,
        so block tables stay valid; the new ids go to the back of the free list.

        Raises:
            ValueError: ``num_blocks`` is smaller than the current number of blocks.
        """
        if num_blocks < self.num_blocks:
            raise ValueError(f"cannot shrink a block allocator from {self.num_blocks} to {num_blocks} blocks")
        self._ref_counts.extend([0] * (num_blocks - self.num_blocks))
        self._free.extend(range(self.num_blocks, num_blocks))
        self.num_blocks = num_blocks

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def allocate(self) -> int:
        """Take a free block and give it one reference.

        Raises:
            OutOfBlocksError: every block is in use (the message names ``num_blocks``).
        """
        if not self._free:
            raise OutOfBlocksError(f"KV cache arena is full: all {self.num_blocks} blocks are in use")
        block_id = self._free.popleft()
        assert self._ref_counts[block_id] == 0, f"block {block_id} on the free list has references"
        self._ref_counts[block_id] = 1
        return block_id

    def incref(self, block_id: int) -> None:
        """Add a holder to an allocated block (a fork sharing it)."""
        assert self._ref_counts[block_id] > 0, f"incref of free block {block_id}"
        self._ref_counts[block_id] += 1

    def decref(self, block_id: int) -> bool:
        """Drop one holder; at zero the block goes back to the free list. Returns whether it did."""
        assert self._ref_counts[block_id] > 0, f"decref of free block {block_id}"
        self._ref_counts[block_id] -= 1
        if self._ref_counts[block_id] == 0:
            self._free.append(block_id)
            return True
        return False

    def __repr__(self) -> str:
        return f"BlockAllocator(num_blocks={self.num_blocks}, num_free={self.num_free})"
