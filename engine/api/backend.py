"""The ``ChatBackend`` protocol (DESIGN.md §7): what a window talks to, whatever runs the model.

Implementations: the local engine (``app.backends.local``, over :class:`engine.service.EngineService`),
a remote OpenAI-compatible server, and a fake for tests. Torch-free and Qt-free: every value that
crosses it is a plain dataclass, string or number.

Calls never block the caller on model work: ``load``, ``send``, ``regenerate`` and ``edit`` queue
the work and return at once; results arrive through the ``sink`` callable, which the backend calls
from its own thread (a Qt front end re-emits them as queued signals). Each ``send``/``regenerate``/
``edit``/``continue_answer`` ends with exactly one :class:`~engine.api.events.DoneEvent`, also when it fails or is
cancelled; :class:`ProgressEvent` s may come before the first token.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from engine.api.capabilities import Capabilities
from engine.api.events import DoneEvent, GenerationParams, TokenEvent


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file attached to a user message: ``kind`` "image", or "video" (models whose capabilities
    say ``video``: SmolVLM2; its frames are sampled as transformers does).

    ``detail`` is the image detail (:data:`engine.api.DETAILS`) an image of an earlier message was
    read at, so that a conversation rebuilt from its history gives the model the tiles it saw live;
    ``None``: "full" in a history, the answer's ``GenerationParams.image_detail`` when sent.
    """

    path: str
    kind: Literal["image", "video"] = "image"
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """One stored message of a conversation, as the window keeps it.

    ``token_ids`` are the ids an answer was generated as (``None``: re-tokenize ``text``).
    ``text_parts``: the text before each attachment and after the last (``len(attachments) + 1``
    strings; the videos counted first, then the images, each kind in order), for a message whose
    text and media interleave (an OpenAI content list); ``None``: the attachments, then ``text``.
    """

    role: Literal["system", "user", "assistant"]
    text: str
    attachments: tuple[Attachment, ...] = ()
    token_ids: tuple[int, ...] | None = None
    text_parts: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Work before the first token.

    ``stage`` "image" (the vision tower): ``done``/``total`` tiles over every image this answer reads
    (images already in the KV cache are not read again); ``index`` (0-based) is the one being read of
    ``count`` such images, a ``media`` "image" or "video" (its frames are its tiles), of which ``tile``
    of ``tiles`` are done. ``count`` is 0 when the breakdown is not known (then only ``done``/``total``).

    ``stage`` "prefill" (the decoder reading the prompt): ``done``/``total`` prompt tokens of those not
    already cached.

    ``stage`` "frames" (decoding a new video's sampled frames, before the vision tower reads them):
    ``done``/``total`` frames of video ``index`` of ``count`` (``media`` "video"). On a CPU a long or
    large video's seeking and decoding can take longer than everything after it.

    ``stage`` "server_loading" (a remote backend: the server answered 503, its model still loading):
    ``done`` seconds waited so far, ``total`` 0; the request is sent again after the server's
    ``Retry-After``.

    ``stage`` "server_thinking" (a remote backend: a reasoning model's thinking streams before its
    answer): ``done`` characters of it so far, ``total`` 0.

    ``notice``: on an answer's first event, what its :class:`DoneEvent` will also say in
    ``stats.notice`` (old messages dropped to fit the context, a video read in part), so that a
    front end can say it while the prompt is read instead of after the answer; "" otherwise.
    """

    stage: Literal["image", "prefill", "frames", "server_loading", "server_thinking"]
    done: int
    total: int
    index: int = 0
    count: int = 0
    tile: int = 0
    tiles: int = 0
    media: Literal["image", "video"] = "image"
    notice: str = ""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A loaded model as a front end shows it."""

    name: str
    path: str
    capabilities: Capabilities = field(default_factory=Capabilities)
    device: str = ""
    dtype: str = ""
    weights: str = ""
    folder: str = ""
    backend: str = "local"
    #: The device kinds the engine that loaded it can run on (:func:`engine.device.present_devices`);
    #: empty where not known (a server's model).
    devices: tuple[str, ...] = ()
    #: Where a server's model's capabilities were read, by capability (``{"vision": "/props", "context":
    #: "/v1/models"}``; ``"your setting"`` where no server said, "" where nothing did); empty for a local model.
    sources: dict[str, str] = field(default_factory=dict, hash=False)


BackendEvent = TokenEvent | DoneEvent | ProgressEvent
EventSink = Callable[[BackendEvent], None]
LoadCallback = Callable[[ModelInfo | None, str | None], None]
"""Called once per ``load``: ``(info, None)`` on success, ``(None, message)`` on failure, and
``(None, LOAD_CANCELLED)`` for a load stopped by :meth:`ChatBackend.cancel_load`."""

LOAD_CANCELLED = "The load was stopped."


class LoadTicket:
    """One load's race between :meth:`cancel` (any thread) and :meth:`finish` (the loading thread):
    whichever comes first wins, so a front end that was told "cancelled" never finds the new model
    installed behind its back, and one told "too late" gets the load's result as usual."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "running"  # -> "cancelled" | "done"

    @property
    def cancelled(self) -> bool:
        return self._state == "cancelled"

    def cancel(self) -> bool:
        """Stop the load: True when it will not install its model (it ends with ``LOAD_CANCELLED``),
        False when it has already ended (its result is on its way)."""
        with self._lock:
            if self._state == "running":
                self._state = "cancelled"
            return self._state == "cancelled"

    def finish(self, install: Callable[[], None] | None = None) -> bool:
        """The load ended: run ``install`` (make its model the current one) unless it was cancelled
        first; False when cancelled (the loader then drops what it built)."""
        with self._lock:
            if self._state == "cancelled":
                return False
            if install is not None:
                install()
            self._state = "done"
            return True


@runtime_checkable
class ChatBackend(Protocol):
    """One conversation with one model, wherever it runs."""

    @property
    def info(self) -> ModelInfo | None:
        """The loaded model, or ``None`` before a load succeeded."""

    @property
    def capabilities(self) -> Capabilities:
        """What the loaded model can do (all false before a load)."""

    def load(self, model: str, options: dict, on_done: LoadCallback) -> None:
        """Load ``model`` (folder, GGUF file, Hub id or a server's model name) with ``options``
        (device, dtype, weights, cache kind, context size); ``on_done`` is called once."""

    def set_history(self, messages: Sequence[HistoryMessage]) -> None:
        """Make the conversation hold ``messages`` (a reopened or switched chat); reuses what it can."""

    def send(self, text: str, attachments: Sequence[Attachment], params: GenerationParams,
             sink: EventSink, system_prompt: str | None = None) -> None:
        """Add a user message and stream the answer into ``sink``."""

    def regenerate(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        """Replace the last answer with a new one."""

    def edit(self, turn_index: int, text: str, attachments: Sequence[Attachment] | None,
             params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        """Replace user message ``turn_index``, drop what follows, and answer it."""

    def continue_answer(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        """Continue the conversation's last message, an answer cut short (the token limit, Stop),
        where its text ends, streaming only the continuation into ``sink``; the answer becomes its
        text plus the continuation. A conversation that does not end with an answer ends in an
        error ``DoneEvent``."""

    def cancel(self) -> None:
        """Stop the running or queued answer soon (thread-safe; a no-op when idle)."""

    def cancel_load(self) -> bool:
        """Stop the running or queued load (thread-safe). True when it stopped in time: the model
        loaded before stays in use for every later call, and the load's ``on_done`` gets
        ``(None, LOAD_CANCELLED)``. False when no load was under way or it has already ended (its
        ``on_done`` result stands). The work itself stops at its next cancellation point (a decoder
        layer; a server's answer) and what it built is freed."""

    def count_attachment_tokens(self, attachment: Attachment, detail: str,
                                params: GenerationParams | None = None) -> int:
        """Prompt tokens ``attachment`` will take (-1 when unknown); cheap, may block briefly. A video's
        count is its whole prompt (intro, each frame's time stamp and image) at ``params``' frame
        sampling (``video_fps``, ``video_max_frames``; default the engine's)."""

    def count_text_tokens(self, text: str) -> int:
        """Tokens the loaded model's tokenizer makes of ``text`` (-1 when unknown: no model, or a server
        that does not say); the text alone, without the chat template's few tokens around a message.
        Cheap (milliseconds for a book chapter), may block briefly; any thread."""

    def count_prompt_overhead(self, system_prompt: str | None) -> int:
        """Tokens a one-message prompt has besides its message's text and attachments (-1 when
        unknown): ``system_prompt`` and the chat template's markup around it, the message and the
        answer's opening. What every prompt keeps however many old turns are dropped, so a message
        fits the context only with this much beside it. Cheap for a system prompt of a few pages;
        any thread."""

    def answers_ahead(self) -> int:
        """How many answers to other clients run or wait before this front end's last request (the
        local engine shared with the app's local server); 0 when none, or unknown (a remote server)."""

    def close(self) -> None:
        """Stop the backend's thread; returns within about a second."""
