"""Smolchat's inference engine: SmolVLM (Idefics3) on CUDA, MPS or CPU, in pure PyTorch.

No Qt and no transformers below this package. The public API is re-exported here.
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
]
