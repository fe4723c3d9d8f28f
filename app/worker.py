"""The engine worker: owns the ChatSession and runs it in its own QThread.

The UI thread never imports torch. :class:`EngineWorker` imports the engine lazily, inside its
thread, and talks to the UI only through signals that carry plain Python data.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot
from app.qt_compat import emit

log = logging.getLogger(__name__)

SessionFactory = Callable[[str, str | None, str | None], Any]


def default_session_factory(path: str, device: str | None, dtype: str | None) -> Any:
    """Load a real engine session. Imports torch, so only call it from the worker thread."""
    from engine.chat import ChatSession

    return ChatSession.load(path, device=device, dtype=dtype)


def describe_error(exc: BaseException) -> str:
    """A one-line message for the user; engine errors already name the file or numbers involved."""
    message = str(exc) or type(exc).__name__
    is_engine_error = any(cls.__name__ == "EngineError" for cls in type(exc).__mro__)
    return message if is_engine_error else f"{type(exc).__name__}: {message}"


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
    model_loaded = Signal(dict)  # {"model_name", "device", "dtype", "path"}
    model_load_failed = Signal(str)
    token = Signal(str)
    finished = Signal(dict)  # {"finish_reason", "error", **GenerationStats.to_dict()}
    error = Signal(str)

    _generate_queued = Signal(str, list, dict)

    def __init__(self, session_factory: SessionFactory | None = None) -> None:
        super().__init__()
        self._session_factory = session_factory or default_session_factory
        self._session: Any = None
        self._lock = threading.Lock()  # guards _session/_busy against cancel() from the UI thread
        self._busy = False  # a generation is queued or running
        self._cancel_requested = threading.Event()
        self._generate_queued.connect(self.generate)

    # -- called from the UI thread -------------------------------------------------------------
    def request_generate(self, text: str, images: list[str], params: dict | None = None) -> None:
        """Queue a generation into the worker thread; a later :meth:`cancel` stops it."""
        with self._lock:
            self._busy = True
            self._cancel_requested.clear()
        emit(self._generate_queued, text, list(images), dict(params or {}))

    def cancel(self) -> None:
        """Stop the queued or running generation soon (thread-safe; a no-op when idle)."""
        with self._lock:
            if not self._busy:
                return
            self._cancel_requested.set()
            if self._session is not None:
                self._session.cancel()

    # -- slots, run in the worker thread -------------------------------------------------------
    @Slot(str, object, object)
    def load_model(self, path: str, device: str | None = None, dtype: str | None = None) -> None:
        emit(self.model_loading, path)
        try:
            session = self._session_factory(path, device, dtype)
        except Exception as exc:  # noqa: BLE001 - every failure goes to the UI, none crash it
            log.exception("loading %s failed", path)
            emit(self.model_load_failed, describe_error(exc))
            return
        with self._lock:
            self._session = session
        emit(
            self.model_loaded,
            {
                "model_name": str(getattr(session, "model_name", path)),
                "device": str(getattr(session, "device", "")),
                "dtype": str(getattr(session, "dtype", "")),
                "path": path,
            },
        )

    @Slot(str, list, dict)
    def generate(self, text: str, images: list[str], params: dict) -> None:
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
            result = self._run(session, text, images, params)
        except Exception as exc:  # noqa: BLE001
            log.exception("generation failed")
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

    def _run(self, session: Any, text: str, images: list[str], params: dict) -> dict:
        from engine.events import GenerationParams  # worker thread only

        done = None
        for event in session.send(text, images=list(images), params=GenerationParams(**params)):
            if hasattr(event, "finish_reason"):
                done = event
                break
            if self._cancel_requested.is_set():
                session.cancel()  # in case send() cleared the flag when it started
            emit(self.token, event.text)
        if done is None:
            return {"finish_reason": "error", "error": "The engine stopped without a final event."}
        result = {"finish_reason": done.finish_reason, "error": done.error}
        result.update(done.stats.to_dict())
        if done.error:
            emit(self.error, done.error)
        return result


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
