"""Cached branches of one conversation: switching between answer versions without prefilling again.

:class:`~engine.chat.ChatSession` holds one KV cache and reuses the longest prefix it shares with the
next prompt. A regenerated answer or an edited question starts another *branch*: the prompt leaves
the cached one part-way, and the cache is truncated there. Going back to the first branch would
prefill its tail again. :class:`Branches` keeps a few such tails instead: before the cache is cut,
it is forked (:meth:`PagedKVCache.fork`: every block shared copy-on-write, so a fork costs only
the blocks the two branches write after they part), and a later prompt continues from whichever
kept cache shares the most of it. Only paged caches are kept (a contiguous fork copies everything).

Kept branches never take room the current conversation needs: :meth:`Branches.make_room` drops the
oldest until the arena could still hold a full-length sequence for the current cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.cache import KVCache, PagedKVCache

#: Branches kept besides the current one (least recently used dropped first).
SPARE_BRANCHES = 2
#: Tokens a branch must hold beyond the new prompt's shared prefix to be worth keeping (one block).
MIN_KEPT_TOKENS = 16


def common_prefix(cached: Sequence, keys: Sequence, limit: int) -> int:
    """How many leading entries of ``cached`` and ``keys`` are equal, at most ``limit``."""
    n, limit = 0, min(limit, len(cached), len(keys))
    while n < limit and cached[n] == keys[n]:
        n += 1
    return n


class Branches:
    """Spare ``(cache, keys)`` pairs of the conversation's other branches, most recently used first."""

    def __init__(self) -> None:
        self.spares: list[tuple[KVCache, list]] = []

    def choose(self, cache: KVCache, cached_keys: list, keys: Sequence, limit: int) -> tuple[KVCache, list, int]:
        """The cache (and its keys) to continue a prompt with ``keys`` from, and how many leading
        positions of it can be reused (at most ``limit``). The current cache's tail beyond that is
        kept as a spare (forked) before the caller truncates it, if it is long enough to matter."""
        common = common_prefix(cached_keys, keys, limit)
        best, best_n = None, common
        for i, (_spare, spare_keys) in enumerate(self.spares):
            n = common_prefix(spare_keys, keys, limit)
            if n > best_n:
                best, best_n = i, n
        if best is None:
            if len(cached_keys) - common >= MIN_KEPT_TOKENS and isinstance(cache, PagedKVCache):
                self._keep(cache.fork(), list(cached_keys))
            return cache, cached_keys, common
        spare, spare_keys = self.spares.pop(best)
        if len(cached_keys) - common >= MIN_KEPT_TOKENS:
            self._keep(cache, cached_keys)  # no fork needed: the current cache itself steps aside
        else:
            cache.release()
        return spare, spare_keys, best_n

    def make_room(self, cache: KVCache) -> None:
        """Drop the oldest spares until the arena could still give ``cache`` a full-length sequence."""
        if not isinstance(cache, PagedKVCache):
            return
        arena = cache.arena
        need = cache.max_blocks_per_seq - len(cache.block_table) + 1  # +1: a copied shared tail block
        while self.spares and arena.max_num_blocks - arena.allocator.num_used < need:
            self.spares.pop()[0].release()

    def blocks_beside(self, cache: KVCache) -> int:
        """Arena blocks only the kept branches hold (not shared with ``cache``): their memory cost."""
        current = set(getattr(cache, "block_table", ()))
        kept = {b for spare, _keys in self.spares for b in getattr(spare, "block_table", ())}
        return len(kept - current)

    def clear(self) -> None:
        while self.spares:
            self.spares.pop()[0].release()

    def _keep(self, cache: KVCache, keys: list) -> None:
        self.spares.insert(0, (cache, keys))
        while len(self.spares) > SPARE_BRANCHES:
            self.spares.pop()[0].release()
