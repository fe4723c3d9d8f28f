"""Helpers that build real Qt input events for the app tests."""

from __future__ import annotations

import warnings
from pathlib import Path

from PySide6.QtCore import QMimeData, QObject, QPointF, Qt, QUrl, Signal, Slot
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget
from app.qt_compat import emit


def file_mime(*paths: Path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def drop(target: QWidget, mime: QMimeData) -> bool:
    """Drag ``mime`` onto the centre of ``target`` and drop it; True when the drop was accepted.

    Qt only delivers a drop to a widget that accepted the drag-enter before it, as in a real drag.
    """
    pos = target.rect().center()
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PySide marks the QPoint overload
        enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, mime, buttons, mods)
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False
    event = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, mime, buttons, mods)
    QApplication.sendEvent(target, event)
    return event.isAccepted()


class Relay(QObject):
    """Re-emits a worker's signals in the UI thread.

    pytest-qt's multi-signal blockers connect plain callables, which Qt calls in the emitting
    (worker) thread; connecting signal to signal on a UI-thread object queues them instead.
    """

    model_loading = Signal(str)
    model_loaded = Signal(dict)
    model_load_failed = Signal(str)
    token = Signal(str)
    finished = Signal(dict)
    error = Signal(str)
    load = Signal(str, object, object)

    def __init__(self, worker) -> None:
        super().__init__()
        self.events: list[tuple[str, object]] = []  # (signal name, its argument), in arrival order
        worker.model_loading.connect(self._on_model_loading)
        worker.model_loaded.connect(self._on_model_loaded)
        worker.model_load_failed.connect(self._on_model_load_failed)
        worker.token.connect(self._on_token)
        worker.finished.connect(self._on_finished)
        worker.error.connect(self._on_error)
        self.load.connect(worker.load_model)

    def _record(self, name: str, arg) -> None:
        self.events.append((name, arg))
        emit(getattr(self, name), arg)

    @Slot(str)
    def _on_model_loading(self, path: str) -> None:
        self._record("model_loading", path)

    @Slot(dict)
    def _on_model_loaded(self, info: dict) -> None:
        self._record("model_loaded", info)

    @Slot(str)
    def _on_model_load_failed(self, message: str) -> None:
        self._record("model_load_failed", message)

    @Slot(str)
    def _on_token(self, text: str) -> None:
        self._record("token", text)

    @Slot(dict)
    def _on_finished(self, result: dict) -> None:
        self._record("finished", result)

    @Slot(str)
    def _on_error(self, message: str) -> None:
        self._record("error", message)
