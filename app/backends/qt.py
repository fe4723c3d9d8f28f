"""The Qt side of a :class:`~engine.api.ChatBackend`: callbacks from the engine thread become queued
signals, so events reach widgets only on the UI thread (never touch a widget from the engine)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class BackendBridge(QObject):
    """Lives in the UI thread. :meth:`sink` and :meth:`on_loaded` may be called from any thread: the
    signals they emit are delivered, queued, to receivers in the UI thread."""

    event = Signal(object)  # TokenEvent | ProgressEvent | DoneEvent
    loaded = Signal(object, object)  # ModelInfo | None, error message | None

    def sink(self, event) -> None:
        """An :data:`~engine.api.backend.EventSink`."""
        self.event.emit(event)

    def on_loaded(self, info, message) -> None:
        """A :data:`~engine.api.backend.LoadCallback`."""
        self.loaded.emit(info, message)
