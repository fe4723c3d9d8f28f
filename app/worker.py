"""The engine worker: owns the ChatSession and runs it in its own QThread.

The UI thread never imports torch. :class:`EngineWorker` imports the engine lazily, inside its
thread, and talks to the UI only through signals that carry plain Python data.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot
from app.qt_compat import emit

log = logging.getLogger(__name__)

SessionFactory = Callable[..., Any]
# "module:callable" of a session factory to use instead of the engine (tests start the app with a
# slow fake this way, e.g. to kill it mid-answer).
FACTORY_ENV = "SMOLCHAT_SESSION_FACTORY"


def default_session_factory(path: str, device: str | None, dtype: str | None, cache_kind: str | None = None,
                            context_size: int | None = None, weights: str | None = None) -> Any:
    """Load a real engine session. Imports torch, so only call it from the worker thread."""
    from engine.chat import ChatSession
    from engine.cache import CacheConfig

    cache = None  # the engine's default cache unless the user chose otherwise
    if cache_kind or context_size:
        kwargs = {"kind": cache_kind} if cache_kind else {}
        cache = CacheConfig(max_tokens=context_size or None, **kwargs)
    return ChatSession.load(path, device=device, dtype=dtype, cache_config=cache, weights=weights)


def factory_from_env() -> SessionFactory | None:
    spec = os.environ.get(FACTORY_ENV, "")
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def model_folder(path: str) -> str:
    """The local folder of ``path`` (a folder, or a Hub id already in the HF cache); "" if unknown."""
    if os.path.isdir(path):
        return path
    if path.count("/") == 1 and not path.startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(path, local_files_only=True)
        except Exception:  # noqa: BLE001 - only a hint for defaults
            return ""
    return ""


def is_engine_error(exc: BaseException) -> bool:
    """An ``engine.api.errors.EngineError``: an expected problem (bad model, prompt too long, no network).

    Matched by name so the UI thread never imports the engine package.
    """
    return any(cls.__name__ == "EngineError" for cls in type(exc).__mro__)


def describe_error(exc: BaseException) -> str:
    """A one-line message for the user; engine errors already name the file or numbers involved."""
    message = str(exc) or type(exc).__name__
    return message if is_engine_error(exc) else f"{type(exc).__name__}: {message}"


def log_failure(what: str, exc: BaseException) -> None:
    """One line for expected engine errors; the full traceback only for unexpected ones (bugs)."""
    if is_engine_error(exc):
        log.warning("%s: %s", what, describe_error(exc))
    else:
        log.error("%s", what, exc_info=exc)


def takes_images(session) -> bool:
    """Whether the session's model reads images: its capabilities (``vision``), read from the model
    itself; True when the session does not say (e.g. a test's fake), so nothing is refused by guess."""
    capabilities = getattr(getattr(session, "model", None), "capabilities", None)
    try:
        return bool(capabilities().vision) if callable(capabilities) else True
    except Exception:  # noqa: BLE001 - a model that cannot say is not refused images
        return True


class EngineWorker(QObject):
    """Owns one chat session; lives in a QThread (see :func:`start_worker`).

    Slots run in the worker thread when invoked through queued signals:
    ``load_model(path, device, dtype)``, ``generate(text, images, params)``, ``reset()``.
    :meth:`request_generate` and :meth:`cancel` are plain methods meant to be called from the UI
    thread: the worker thread is busy inside the generation loop, so a queued cancel would only
    run after the answer is complete.

    Every ``generate`` ends with exactly one ``finished`` (after ``error`` if something failed),
    so the UI always leaves its busy state.
    """

    model_loading = Signal(str)
    model_loaded = Signal(dict)  # {"model_name", "device", "dtype", "path", "folder", "vision"}
    model_load_failed = Signal(str)
    token = Signal(str)
    finished = Signal(dict)  # {"finish_reason", "error", **GenerationStats.to_dict()}
    error = Signal(str)
    image_tokens = Signal(str, str, int)  # path, detail, <image> tokens it will take (-1: unknown)

    _generate_queued = Signal(str, list, dict, object)

    def __init__(self, session_factory: SessionFactory | None = None) -> None:
        super().__init__()
        self._session_factory = session_factory or factory_from_env() or default_session_factory
        self._session: Any = None
        self._options: dict = {}
        # What we put into session.turns, as (role, text, image paths): lets a generation with a
        # different history (another conversation, an edit, a regenerate) rebuild only the tail.
        self._synced: list[tuple] = []
        self._lock = threading.Lock()  # guards _session/_busy against cancel() from the UI thread
        self._busy = False  # a generation is queued or running
        self._cancel_requested = threading.Event()
        self._generate_queued.connect(self.generate)

    # -- called from the UI thread -------------------------------------------------------------
    def request_generate(self, text: str, images: list[str], params: dict | None = None,
                         history: list[dict] | None = None) -> None:
        """Queue a generation into the worker thread; a later :meth:`cancel` stops it.

        ``history`` (``[{"role", "text", "images"}]``, the messages before this one) makes the
        session's conversation match it first; ``None`` continues whatever the session holds.
        """
        with self._lock:
            self._busy = True
            self._cancel_requested.clear()
        emit(self._generate_queued, text, list(images), dict(params or {}),
             None if history is None else [dict(m) for m in history])

    def cancel(self) -> None:
        """Stop the queued or running generation soon (thread-safe; a no-op when idle)."""
        with self._lock:
            if not self._busy:
                return
            self._cancel_requested.set()
            if self._session is not None:
                self._session.cancel()

    # -- slots, run in the worker thread -------------------------------------------------------
    @Slot(dict)
    def configure(self, options: dict) -> None:
        """Options for the next :meth:`load_model` (``cache_kind``, ``context_size``)."""
        self._options = {k: v for k, v in options.items() if v is not None}

    @Slot(str, object, object)
    def load_model(self, path: str, device: str | None = None, dtype: str | None = None) -> None:
        emit(self.model_loading, path)
        try:
            if self._options:
                session = self._session_factory(path, device, dtype, **self._options)
            else:
                session = self._session_factory(path, device, dtype)
        except Exception as exc:  # noqa: BLE001 - every failure goes to the UI, none crash it
            log_failure(f"loading {path} failed", exc)
            emit(self.model_load_failed, describe_error(exc))
            return
        with self._lock:
            self._session = session
            self._synced = []
        emit(
            self.model_loaded,
            {
                "model_name": str(getattr(session, "model_name", path)),
                "device": str(getattr(session, "device", "")),
                "dtype": str(getattr(session, "dtype", "")),
                "weights": str(getattr(session, "weights", "")),
                "path": path,
                "folder": model_folder(path),
                "vision": takes_images(session),
            },
        )

    @Slot(list, str)
    def count_image_tokens(self, paths: list, detail: str) -> None:
        """Emit ``image_tokens`` for each path: what the pending attachments will cost."""
        with self._lock:
            session = self._session
        for path in paths:
            count = -1
            try:
                if session is not None and hasattr(session, "count_image_tokens"):
                    count = int(session.count_image_tokens(path, detail))
            except Exception:  # noqa: BLE001 - the send itself reports unreadable images
                log.debug("cannot count image tokens of %s", path, exc_info=True)
            emit(self.image_tokens, path, detail, count)

    @Slot(str, list, dict, object)
    def generate(self, text: str, images: list[str], params: dict, history: list | None = None) -> None:
        with self._lock:
            self._busy = True
            session = self._session
        result: dict = {"finish_reason": "error", "error": None}
        try:
            if session is None:
                raise RuntimeError("No model is loaded yet.")
            if self._cancel_requested.is_set():
                result = {"finish_reason": "cancelled", "error": None}
                return
            params = dict(params)
            system_prompt = params.pop("system_prompt", None)
            if system_prompt is not None and hasattr(session, "system_prompt"):
                session.system_prompt = system_prompt or None  # the cache keeps what still matches
            if history is not None:
                self._sync_history(session, history, params.get("image_detail", "full"))
            result = self._run(session, text, images, params)
        except Exception as exc:  # noqa: BLE001
            log_failure("generation failed", exc)
            message = describe_error(exc)
            result = {"finish_reason": "error", "error": message}
            emit(self.error, message)
        finally:
            with self._lock:
                self._busy = False
                self._cancel_requested.clear()
            emit(self.finished, result)

    @Slot()
    def reset(self) -> None:
        with self._lock:
            session = self._session
        if session is not None:
            session.reset()
        self._synced = []

    def _sync_history(self, session: Any, history: list[dict], detail: str) -> None:
        """Make ``session.turns`` hold ``history``, keeping the longest prefix it already holds.

        The engine then reuses its KV cache for that prefix (it matches cached tokens by value).
        """
        if not hasattr(session, "turns"):
            if not history and self._synced:
                session.reset()
            self._synced = [_key(m) for m in history]
            return
        wanted = [_key(m) for m in history]
        if len(session.turns) != len(self._synced):
            self._synced = []  # the session changed behind our back: rebuild everything
        keep = 0
        while keep < min(len(wanted), len(self._synced)) and wanted[keep] == self._synced[keep]:
            keep += 1
        del session.turns[keep:]
        if keep < len(wanted):
            from engine.chat import Turn  # worker thread only (imports torch)
        for role, text, images in wanted[keep:]:
            processed = session.preprocess(list(images), detail) if images and role == "user" else []
            session.turns.append(Turn(role, text, processed))
        self._synced = wanted

    def _run(self, session: Any, text: str, images: list[str], params: dict) -> dict:
        from engine.api.events import GenerationParams  # worker thread only

        before = len(getattr(session, "turns", ()))
        pieces: list[str] = []
        done = None
        for event in session.send(text, images=list(images), params=GenerationParams(**params)):
            if hasattr(event, "finish_reason"):
                done = event
                break
            if self._cancel_requested.is_set():
                session.cancel()  # in case send() cleared the flag when it started
            pieces.append(event.text)
            emit(self.token, event.text)
        self._record_turns(session, before, text, images, "".join(pieces))
        if done is None:
            return {"finish_reason": "error", "error": "The engine stopped without a final event."}
        result = {"finish_reason": done.finish_reason, "error": done.error}
        result.update(done.stats.to_dict())
        if done.error:
            emit(self.error, done.error)
        return result

    def _record_turns(self, session: Any, before: int, text: str, images: list[str], answer: str) -> None:
        turns = getattr(session, "turns", None)
        if turns is None:
            self._synced += [("user", text, tuple(images)), ("assistant", answer.strip(), ())]
        elif len(turns) == before + 2:
            self._synced += [("user", text, tuple(images)), ("assistant", answer.strip(), ())]
        elif len(turns) != before:
            self._synced = []  # something unexpected: rebuild on the next generation


def _key(message: dict) -> tuple:
    role = message.get("role", "user")
    images = tuple(message.get("images") or ()) if role == "user" else ()
    return (role, str(message.get("text", "")).strip() if role == "assistant" else message.get("text", ""), images)


# Running threads and their workers, so that neither is destroyed while the thread runs even if
# the window that started them is garbage-collected without being closed.
_running: dict[QThread, EngineWorker] = {}


def start_worker(session_factory: SessionFactory | None = None) -> tuple[QThread, EngineWorker]:
    """Create an :class:`EngineWorker` in a new, started QThread (the Qt "worker object" wiring)."""
    thread = QThread()
    thread.setObjectName("EngineThread")
    worker = EngineWorker(session_factory)
    worker.moveToThread(thread)
    thread.finished.connect(worker.deleteLater)
    _running[thread] = worker
    thread.start()
    return thread, worker


def stop_worker(thread: QThread, worker: EngineWorker, timeout_ms: int = 10_000) -> bool:
    """Cancel any generation, stop the thread's event loop and wait for it; True when it ended."""
    worker.cancel()
    thread.quit()
    ended = thread.wait(timeout_ms)
    if ended:
        _running.pop(thread, None)
    else:
        log.warning("engine thread did not stop within %d ms", timeout_ms)
    return ended


def stop_all_workers(timeout_ms: int = 10_000) -> int:
    """Stop every engine thread still running (at application exit); returns how many were left."""
    for thread, worker in list(_running.items()):
        stop_worker(thread, worker, timeout_ms)
    return len(_running)
