"""The Qt side of a :class:`~engine.api.ChatBackend`: callbacks from the engine thread become queued
signals, so events reach widgets only on the UI thread (never touch a widget from the engine)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class BackendBridge(QObject):
    """Lives in the UI thread. :meth:`sink` and the callbacks of :meth:`load_callback` may be called
    from any thread: the signals they emit are delivered, queued, to receivers in the UI thread."""

    event = Signal(object)  # TokenEvent | ProgressEvent | DoneEvent
    loaded_as = Signal(int, object, object)  # the load's number, ModelInfo | None, error message | None

    def sink(self, event) -> None:
        """An :data:`~engine.api.backend.EventSink`."""
        self.event.emit(event)

    def load_callback(self, number: int):
        """A :data:`~engine.api.backend.LoadCallback` whose result comes as :attr:`loaded_as` with
        ``number``: a receiver can tell the answer to its last request from an earlier one's."""
        return lambda info, message: self.loaded_as.emit(number, info, message)
