"""Smolchat's inference engine: SmolVLM (Idefics3) on CUDA, MPS or CPU, in pure PyTorch.

No Qt and no transformers below this package. The public API is re-exported here. Names that need
torch (``load_model``, ``ChatSession``, ``CacheConfig`` ...) are imported on first use, so that
``engine.events`` and ``engine.errors`` stay importable by the app's UI thread without torch.
"""

from engine.errors import (
    ConfigError,
    DownloadCancelled,
    DownloadError,
    EngineError,
    ImageError,
    ModelLoadError,
    PromptTooLongError,
    UnsupportedModelError,
    UnsupportedOperation,
)
from engine.events import DoneEvent, GenerationEvent, GenerationParams, GenerationStats, TokenEvent

_LAZY = {
    "load_model": "engine.loader",
    "ChatSession": "engine.chat",
    "CacheConfig": "engine.kv_cache",
    "KVCache": "engine.kv_cache",
    "ContiguousKVCache": "engine.kv_cache",
    "PagedKVCache": "engine.kv_cache",
    "GenerativeModel": "engine.models.base",
    "ModelMetadata": "engine.metadata",
    "LocalDirSource": "engine.sources",
    "HubSource": "engine.sources",
    "Tokenizer": "engine.tokenizer",
    "ImageProcessor": "engine.processing",
    "Embedder": "engine.embeddings",
    "embed": "engine.embeddings",
    "PerplexityResult": "engine.perplexity",
    "SpeculativeDecoder": "engine.speculative",
    "PromptLookupDrafter": "engine.speculative",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "DoneEvent",
    "DownloadCancelled",
    "DownloadError",
    "EngineError",
    "GenerationEvent",
    "GenerationParams",
    "GenerationStats",
    "ImageError",
    "ModelLoadError",
    "PromptTooLongError",
    "TokenEvent",
    "UnsupportedModelError",
    "UnsupportedOperation",
    *_LAZY,
]
