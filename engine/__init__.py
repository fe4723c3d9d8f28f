"""Smolchat's inference engine: SmolVLM and Llama-family models on CUDA, MPS or CPU, in pure PyTorch.

No Qt and no transformers below this package. The public API is re-exported here. Names that need
torch (``load_model``, ``ChatSession``, ``CacheConfig`` ...) are imported on first use, so that
``engine.api.events`` and ``engine.api.errors`` stay importable by the app's UI thread without torch.
"""

from engine.api.capabilities import Capabilities
from engine.api.errors import (
    ConfigError,
    DownloadCancelled,
    DownloadError,
    EngineError,
    ImageError,
    InvalidPromptError,
    ModelLoadError,
    PromptTooLongError,
    UnsupportedModelError,
    UnsupportedOperation,
    VideoError,
)
from engine.api.events import (
    DoneEvent,
    GenerationEvent,
    GenerationParams,
    GenerationStats,
    PromptLogprobsEvent,
    TokenEvent,
)

_LAZY = {
    "load_model": "engine.registry",
    "ChatSession": "engine.chat",
    "load_components": "engine.registry",
    "CacheConfig": "engine.cache",
    "KVCache": "engine.cache",
    "ContiguousKVCache": "engine.cache",
    "PagedKVCache": "engine.cache",
    "GenerativeModel": "engine.models.base",
    "ModelMetadata": "engine.models.config",
    "LocalDirSource": "engine.sources",
    "HubSource": "engine.sources",
    "Tokenizer": "engine.tokenizer",
    "ImageProcessor": "engine.models.smolvlm.processing",
    "token_stream": "engine.generate",
    "Embedder": "engine.embeddings",
    "embed": "engine.embeddings",
    "PerplexityResult": "engine.perplexity",
    "SpeculativeDecoder": "engine.speculative",
    "PromptLookupDrafter": "engine.speculative",
    "EngineService": "engine.service",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = [
    "Capabilities",
    "ConfigError",
    "DoneEvent",
    "DownloadCancelled",
    "DownloadError",
    "EngineError",
    "GenerationEvent",
    "GenerationParams",
    "GenerationStats",
    "ImageError",
    "InvalidPromptError",
    "VideoError",
    "ModelLoadError",
    "PromptTooLongError",
    "PromptLogprobsEvent",
    "TokenEvent",
    "UnsupportedModelError",
    "UnsupportedOperation",
    *_LAZY,
]
