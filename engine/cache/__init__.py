"""KV caches: the contiguous baseline and the paged block arena share one interface.

``base`` holds the interface (:class:`KVCache`, :class:`CacheConfig`), ``contiguous`` and ``paged``
the two caches, ``block_allocator`` the paged cache's pure-Python allocator.

The model drives a cache in three steps per forward pass (MLC-LLM / TVM ``kv_state.h``'s
``BeginForward``/``EndForward``): ``begin_forward(n)`` reserves ``n`` new positions at the tail,
``update(layer, k, v)`` writes the new keys/values of one layer and hands back all keys and values
so far, and ``end_forward()`` commits the ``n`` positions.
"""

from __future__ import annotations

import importlib

# Names are imported on first use, so that the pure-Python block allocator never imports torch.
_LAZY = {
    "CacheConfig": "engine.cache.base",
    "CacheShape": "engine.cache.base",
    "KVCache": "engine.cache.base",
    "create_kv_cache": "engine.cache.base",
    "BlockAllocator": "engine.cache.block_allocator",
    "OutOfBlocksError": "engine.cache.block_allocator",
    "ContiguousKVCache": "engine.cache.contiguous",
    "DEFAULT_INITIAL_TOKENS": "engine.cache.paged",
    "KVArena": "engine.cache.paged",
    "PagedForwardMetadata": "engine.cache.paged",
    "PagedKVCache": "engine.cache.paged",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
