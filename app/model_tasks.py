"""Downloads and checks of models, run in their own QThread so the window never waits on them."""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.api import DownloadCancelled

log = logging.getLogger(__name__)


class ModelTasks(QObject):
    """Slots run in the tasks thread; :meth:`cancel_download` is called from the UI thread."""

    progress = Signal(str, float, float)  # repo_id, bytes done, bytes total (floats: > 2 GiB)
    downloaded = Signal(str, str)  # repo_id, snapshot folder
    download_failed = Signal(str, str, bool)  # repo_id, message, cancelled
    validated = Signal(dict)  # app.model_check report

    def __init__(self) -> None:
        super().__init__()
        self._cancels: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def prepare_download(self, repo_id: str) -> None:
        """Called from the UI thread before queueing :meth:`download` so cancel works at once."""
        with self._lock:
            self._cancels[repo_id] = threading.Event()

    def cancel_download(self, repo_id: str) -> None:
        with self._lock:
            event = self._cancels.get(repo_id)
        if event is not None:
            event.set()

    @Slot(str)
    def download(self, repo_id: str) -> None:
        with self._lock:
            cancel = self._cancels.setdefault(repo_id, threading.Event())
        try:
            from engine.sources import download_snapshot

            folder = download_snapshot(repo_id, progress=lambda d, t: self.progress.emit(repo_id, float(d), float(t)),
                                       cancel=cancel)
        except Exception as exc:  # noqa: BLE001 - reported to the user
            cancelled = isinstance(exc, DownloadCancelled) or cancel.is_set()
            log.info("download of %s ended: %s", repo_id, exc)
            self.download_failed.emit(repo_id, str(exc), cancelled)
            return
        finally:
            with self._lock:
                self._cancels.pop(repo_id, None)
        self.downloaded.emit(repo_id, str(folder))

    @Slot(str)
    def validate(self, path: str) -> None:
        from app.model_check import validate_model

        self.validated.emit(validate_model(path))


def start_tasks(start: bool = True) -> tuple[QThread, ModelTasks]:
    """The tasks object living in its own thread. ``start=False``: the caller starts the thread once it
    is fully built (a QThread destroyed while running aborts the process; calls queued before it
    starts are delivered when it does)."""
    thread = QThread()
    thread.setObjectName("ModelTasksThread")
    tasks = ModelTasks()
    tasks.moveToThread(thread)
    thread.finished.connect(tasks.deleteLater)
    if start:
        thread.start()
    return thread, tasks
