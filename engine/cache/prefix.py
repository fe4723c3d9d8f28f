"""Automatic prefix caching: full blocks of earlier sequences kept in the paged arena, found by content.

An OpenAI client re-sends the whole conversation every turn, and a user switches between chats; each
time, the prompt's start is often already computed, but for another conversation than the one the
session holds now. Every full block a sequence has written is registered here under a digest of its
tokens *and of every token before it* (a hash chain), and this table holds one reference to the block
(:class:`~engine.cache.block_allocator.BlockAllocator`), so it outlives the sequence that wrote it.
A new prompt walks its own chain of digests and adopts the longest run of blocks found: those
positions need no prefill, and image tiles among them need no vision tower.

A position's key is its token id, or for an image-token position ``(token id, tile content hash)``
(:func:`engine.chat.slot_keys`), so two prompts that differ only in a photo never share blocks.

Eviction is least-recently-used, tail blocks first (a chain's last block is touched before its first,
so a shorter prefix survives a longer one), under a budget of ``max_blocks`` blocks; blocks still
held by a sequence are never evicted by a lookup. :meth:`evict` also frees blocks when the arena,
grown to its cap, runs out.

Source: vLLM's automatic prefix caching (``vllm/v1/core/kv_cache_utils.py`` ``hash_block_tokens``:
a block's hash covers its parent's hash and its token ids plus extra keys such as multimodal hashes;
``vllm/v1/core/block_pool.py``: cached blocks are evictable only at reference count 0, freed in
reverse order so that tails go first). A 128-bit BLAKE2b digest stands in for vLLM's SHA-256.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence

from engine.cache.block_allocator import BlockAllocator

Digest = bytes


def chain_digests(keys: Sequence, block_size: int, parent: Digest = b"") -> list[Digest]:
    """Digests of the full blocks of ``keys`` (one key per position: an int token id, or a tuple
    ``(token id, bytes)`` for an image-token position). Digest ``i`` covers ``keys[: (i + 1) *
    block_size]`` and ``parent``, the digest of the blocks before ``keys`` (``b""``: none); a
    trailing partial block gets none."""
    out: list[Digest] = []
    for start in range(0, len(keys) - block_size + 1, block_size):
        h = hashlib.blake2b(parent, digest_size=16)
        for key in keys[start:start + block_size]:
            if isinstance(key, tuple):
                h.update(b"\x01" + struct.pack("<q", key[0]) + struct.pack("<I", len(key[1])) + key[1])
            else:
                h.update(b"\x00" + struct.pack("<q", key))
        parent = h.digest()
        out.append(parent)
    return out


class PrefixBlockCache:
    """Digest -> block id for full blocks of earlier sequences; one allocator reference per entry.

    Args:
        allocator: the arena's allocator (references are taken and dropped on it).
        max_blocks: most blocks kept; 0 keeps none (prefix caching off).
    """

    def __init__(self, allocator: BlockAllocator, max_blocks: int):
        if max_blocks < 0:
            raise ValueError(f"max_blocks must be >= 0, got {max_blocks}")
        self.allocator = allocator
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[Digest, int] = OrderedDict()  # least recently used first
        self._digest_of: dict[int, Digest] = {}
        self.hits = 0  # blocks found by lookups (for tests and debugging)

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def num_evictable(self) -> int:
        """Entries whose block only this table holds: what :meth:`evict` can give back now."""
        return sum(1 for b in self._blocks.values() if self.allocator.ref_count(b) == 1)

    def insert(self, digests: Sequence[Digest], block_ids: Sequence[int]) -> None:
        """Register a sequence's full blocks (``digests[i]`` is block ``block_ids[i]``'s content) and
        make them the most recently used, first block last. A digest already present keeps its block
        (the same content computed twice: the sequence keeps its own copy)."""
        if not self.max_blocks:
            return
        for digest, block_id in reversed(list(zip(digests, block_ids, strict=False))):
            if digest in self._blocks:
                self._blocks.move_to_end(digest)
                continue
            if block_id in self._digest_of:  # the block now holds other content under another digest
                continue
            self.allocator.incref(block_id)
            self._blocks[digest] = block_id
            self._digest_of[block_id] = digest
        self._shrink(self.max_blocks)

    def match(self, digests: Sequence[Digest]) -> list[int]:
        """Block ids of the longest run ``digests[:n]`` found, marked recently used (first block last)."""
        found: list[int] = []
        for digest in digests:
            block_id = self._blocks.get(digest)
            if block_id is None:
                break
            found.append(block_id)
        for digest in reversed(digests[:len(found)]):
            self._blocks.move_to_end(digest)
        self.hits += len(found)
        return found

    def evict(self, needed_free: int) -> int:
        """Drop least recently used entries that only this table holds until the allocator has
        ``needed_free`` free blocks (or none is left to drop). Returns how many blocks were freed."""
        freed = 0
        for digest, block_id in list(self._blocks.items()):
            if self.allocator.num_free >= needed_free:
                break
            if self.allocator.ref_count(block_id) == 1:
                self._drop(digest)
                freed += 1
        return freed

    def clear(self) -> None:
        """Drop every entry (blocks no sequence holds go back to the free list)."""
        for digest in list(self._blocks):
            self._drop(digest)

    def _shrink(self, limit: int) -> None:
        while len(self._blocks) > limit:
            victim = next((d for d, b in self._blocks.items() if self.allocator.ref_count(b) == 1), None)
            self._drop(victim if victim is not None else next(iter(self._blocks)))

    def _drop(self, digest: Digest) -> None:
        block_id = self._blocks.pop(digest)
        del self._digest_of[block_id]
        self.allocator.decref(block_id)
