"""The engine's torch-free, Qt-free surface: what the app and the HTTP server import.

Params, events, errors, capabilities and the :class:`ChatBackend` protocol. Importing this package
never imports torch, so a UI thread can use it.
"""

from engine.api.backend import (
    LOAD_CANCELLED,
    Attachment,
    ChatBackend,
    HistoryMessage,
    LoadTicket,
    ModelInfo,
    ProgressEvent,
)
from engine.api.capabilities import Capabilities
from engine.api.errors import (
    ConfigError,
    DownloadCancelled,
    DownloadError,
    EngineError,
    ImageError,
    InvalidLogitsError,
    InvalidPromptError,
    LoadCancelled,
    ModelLoadError,
    PromptTooLongError,
    UnsupportedModelError,
    UnsupportedOperation,
    VideoError,
    is_engine_error,
)
from engine.api.events import (
    DETAILS,
    WEIGHT_FORMATS,
    DoneEvent,
    FinishReason,
    GenerationEvent,
    GenerationParams,
    GenerationStats,
    PromptLogprobsEvent,
    TokenEvent,
    answer_room,
    resolve_detail,
)
from engine.api.hub import looks_like_repo_id


def smolchat_version() -> str:
    """The installed Smolchat's version (package metadata), or "unknown" for a tree that is not
    installed; what ``--version`` and Help ▸ About say."""
    from importlib import metadata

    try:
        return metadata.version("smolchat")
    except metadata.PackageNotFoundError:
        return "unknown"


__all__ = [
    "LOAD_CANCELLED",
    "Attachment",
    "Capabilities",
    "ChatBackend",
    "ConfigError",
    "DETAILS",
    "DoneEvent",
    "DownloadCancelled",
    "DownloadError",
    "EngineError",
    "FinishReason",
    "GenerationEvent",
    "GenerationParams",
    "GenerationStats",
    "HistoryMessage",
    "LoadTicket",
    "ImageError",
    "InvalidPromptError",
    "LoadCancelled",
    "VideoError",
    "resolve_detail",
    "InvalidLogitsError",
    "ModelInfo",
    "ModelLoadError",
    "ProgressEvent",
    "PromptTooLongError",
    "PromptLogprobsEvent",
    "TokenEvent",
    "UnsupportedModelError",
    "UnsupportedOperation",
    "WEIGHT_FORMATS",
    "answer_room",
    "is_engine_error",
    "looks_like_repo_id",
    "smolchat_version",
]
