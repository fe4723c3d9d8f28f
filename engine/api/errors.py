"""Errors raised by the engine.

Every failure a user can cause (a bad model folder, a broken image, a prompt that is too long)
raises a subclass of :class:`EngineError` with a message that names the file, key or numbers
involved, so the CLI and the app can show it as it is.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class ModelLoadError(EngineError):
    """A model folder or repository cannot be loaded (missing file, missing or mis-shaped tensor)."""


class ConfigError(ModelLoadError):
    """config.json / generation_config.json is missing, unreadable or lacks a required key."""


class UnsupportedModelError(ModelLoadError):
    """config.json names a model_type this engine does not implement."""


class ImageError(EngineError):
    """An image cannot be read or decoded (not an image, empty file, truncated data)."""


class VideoError(EngineError):
    """A video cannot be read or decoded (not a video, no video stream, empty, truncated, too large)."""


class PromptTooLongError(EngineError):
    """The prompt does not fit into the model's context window."""


class InvalidPromptError(EngineError, ValueError):
    """A raw completion's prompt that the model cannot take: empty, a token id outside the
    vocabulary, or the image token without an image (a ValueError too: a bad argument)."""


#: How a :class:`PromptTooLongError`'s message ends when the system prompt alone fills half the
#: context (worded for the app, where it is a setting; the HTTP server words it for its clients).
SYSTEM_PROMPT_TOO_LONG = ": shorten it in Settings"
#: In a :class:`PromptTooLongError`'s token count, before what the image tokens are for, where the
#: rest of the prompt fits: "the prompt has 9012 tokens (8640 of them for images) but the context holds 8192".
MEDIA_SHARE = " of them for "
#: What they are for: images only, video frames only, or both.
MEDIA_KINDS = ("images", "video frames", "images and video frames")


def media_kind(message: str) -> str | None:
    """Which of :data:`MEDIA_KINDS` a :class:`PromptTooLongError`'s message says fewer of would make
    the prompt fit; ``None`` where it names none (the text alone is too long, or no media)."""
    for kind in sorted(MEDIA_KINDS, key=len, reverse=True):  # "images and video frames" before "video frames"
        if f"{MEDIA_SHARE}{kind})" in message:
            return kind
    return None


class InvalidLogitsError(EngineError):
    """The model produced NaN or infinite logits (broken weights, an overflow in float16)."""


class UnsupportedOperation(EngineError):
    """The model does not implement an optional method of the contract."""


class DownloadError(ModelLoadError):
    """Downloading a checkpoint from the Hub failed (offline, not found, cancelled)."""


class DownloadCancelled(DownloadError):
    """The user cancelled a download."""


class LoadCancelled(ModelLoadError):
    """The front end stopped a model load (:meth:`engine.api.LoadTicket.cancel`); raised at the next
    cancellation point of the load (:func:`engine.cancellation.load_cancel_point`)."""


def is_engine_error(exc: BaseException) -> bool:
    """An expected problem (bad model, prompt too long, no network) rather than a bug."""
    return isinstance(exc, EngineError)


def describe_error(exc: BaseException) -> str:
    """One line for the user: engine errors already name the file or numbers involved; anything
    else is prefixed with its type (a bug, or a library's error)."""
    message = str(exc) or type(exc).__name__
    return message if is_engine_error(exc) else f"{type(exc).__name__}: {message}"
