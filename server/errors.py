"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` with a real HTTP status."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any, TypeVar

from engine.api.errors import MEDIA_KINDS, SYSTEM_PROMPT_TOO_LONG, media_kind

# As OpenAI's API types them: an unknown model (404, code model_not_found) and a body or image too
# large (413) are the request's fault like any 400, "invalid_request_error" (clients branch on it).
TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "invalid_request_error", 405: "invalid_request_error", 413: "invalid_request_error",
         415: "invalid_request_error",
         422: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "service_unavailable",
         507: "server_error"}
# Engine exception names (DoneEvent.error_type) that are the request's fault, not the server's.
CLIENT_ERRORS = {"PromptTooLongError": "context_length_exceeded", "ImageError": "invalid_image",
                 "VideoError": "invalid_video", "ValueError": "invalid_value", "UnsupportedOperation": "unsupported",
                 "InvalidPromptError": "invalid_value"}
# The request field an engine error is about, where only one can be (a raw completion's refusals).
CLIENT_ERROR_PARAMS = {"InvalidPromptError": "prompt"}
# A file in the server's media folder (server.app: tempfile.mkdtemp(prefix="smolchat-media-")), as an
# engine message names it (video messages give only the file name: server.media names files by the
# first 40 hex digits of their SHA-256): a client is told what was wrong with its media, not where or
# under what name the server keeps it.
_MEDIA_PATH = re.compile(r"[^\s'\"(]*smolchat-media-[^/\\\s]+[/\\][^\s'\")]+|"
                         r"\b[0-9a-f]{40}(?:\.\d+\.\d+\.part(?:\.[A-Za-z0-9]+)?|\.[A-Za-z0-9]+)")
T = TypeVar("T")
# What a client can send instead where the engine says the media take what does not fit (a video's
# frames are one tile each: 'detail' changes nothing for them, and the server samples them itself).
_FEWER_MEDIA = dict(zip(MEDIA_KINDS, [", or send fewer images", ", or send fewer or shorter videos",
                                      ", or send fewer images or videos"]))
# Said after it only where an image was sent finer than 'low': to a request whose images all are, it
# would suggest what it already did.
_LOWER_DETAIL = dict(zip(MEDIA_KINDS, [" (or 'detail': 'low')", "", " (or images with 'detail': 'low')"]))


class APIError(Exception):
    """An error answer; raised anywhere in a handler, turned into JSON by the app's handler."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers  # response headers, e.g. a 429's Retry-After

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.code, self.param)


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": TYPES.get(status, "server_error"), "param": param, "code": code}}


def client_text(text: str, media: str = "the uploaded media") -> str:
    """An engine message for a client: each path or stored name of a file in the server's media
    folder said as ``media`` (what was wrong with the client's media, not where the server keeps it)."""
    return _MEDIA_PATH.sub(media, text)


def from_engine(error_type: str, message: str | None, all_images_low: bool = False) -> APIError:
    """The APIError for an engine failure: 400 for the request's fault, 500 for anything else.
    ``all_images_low``: every image of the request was sent with ``'detail': 'low'`` (then a prompt
    too long for its images is not told to send them at low detail)."""
    code = CLIENT_ERRORS.get(error_type)
    message = client_text(message) if message else message
    if code == "context_length_exceeded" and message:
        message = _room_for_one(message)
        if message.endswith(SYSTEM_PROMPT_TOO_LONG):  # the engine words it for the app's settings
            message = message.removesuffix(SYSTEM_PROMPT_TOO_LONG) + ": shorten the system message"
        else:  # where the media are what does not fit, fewer or smaller ones help too
            kind = media_kind(message)
            message += ": shorten the prompt or the conversation" + _FEWER_MEDIA.get(kind, "") + \
                ("" if all_images_low else _LOWER_DETAIL.get(kind, ""))
    if code is not None:
        return APIError(400, message or error_type, code, CLIENT_ERROR_PARAMS.get(error_type))
    return APIError(500, message or "the engine failed", "engine_error")


#: The engine's "the prompt has N tokens (...) but the context holds M": N and where M ends.
_PROMPT_HAS = re.compile(r"^the prompt has (\d+) tokens.*? but the context holds (\d+)")


def _room_for_one(message: str) -> str:
    """A prompt refused for filling the context exactly ("has 8192 tokens but the context holds
    8192", which reads as a contradiction) says why: an answer needs room for at least one token.
    The words before stay as they are (the app's remote backend reads both numbers from them)."""
    found = _PROMPT_HAS.match(message)
    if found is None or found.group(1) != found.group(2):
        return message
    return message[:found.end()] + " for the prompt and at least one new token together" + message[found.end():]


async def engine_result(pending: Awaitable[T]) -> T:
    """What an engine call gives (its future, or ``EngineBridge.call``), its failure as the API's
    error (:func:`from_engine`); an :class:`APIError` raised on the way stays as it is."""
    try:
        return await pending
    except APIError:
        raise
    except Exception as exc:  # noqa: BLE001 - engine errors become 400/500 answers
        raise from_engine(type(exc).__name__, str(exc)) from None
