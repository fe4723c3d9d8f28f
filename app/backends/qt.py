"""The Qt side of a :class:`~engine.api.ChatBackend`: callbacks from the engine thread become queued
signals, so events reach widgets only on the UI thread (never touch a widget from the engine)."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Qt, Signal, Slot

from engine.api import TokenEvent


class BackendBridge(QObject):
    """Lives in the UI thread. :meth:`sink` and the callbacks of :meth:`load_callback` may be called
    from any thread: the signals they emit are delivered, queued, to receivers in the UI thread.

    Events wait in one list, and at most one wake-up is queued for the UI thread at a time: it takes
    every event waiting, the tokens in a row joined into one :class:`TokenEvent` (``token_id`` -1
    where several were joined). A server that streamed 200,000 chunks in 3 s queued one signal per
    chunk, and the window worked through them for 100 s, deaf to Stop and to its menus (trial 64);
    now it draws what came since it last looked, however much that is, and stays responsive."""

    event = Signal(object)  # TokenEvent | ProgressEvent | DoneEvent
    loaded_as = Signal(int, object, object)  # the load's number, ModelInfo | None, error message | None
    _wake = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._waiting: list = []
        # Queued even from the UI thread: a receiver that sinks an event meanwhile would otherwise
        # have it delivered inside this delivery, ahead of the events still to go.
        self._wake.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def sink(self, event) -> None:
        """An :data:`~engine.api.backend.EventSink`."""
        with self._lock:
            self._waiting.append(event)
            first = len(self._waiting) == 1
        if first:
            self._wake.emit()

    @Slot()
    def _deliver(self) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, []
        joined: list[TokenEvent] = []
        for event in waiting:
            if isinstance(event, TokenEvent):
                joined.append(event)
                continue
            if joined:
                self.event.emit(_joined(joined))
                joined = []
            self.event.emit(event)
        if joined:
            self.event.emit(_joined(joined))

    def load_callback(self, number: int):
        """A :data:`~engine.api.backend.LoadCallback` whose result comes as :attr:`loaded_as` with
        ``number``: a receiver can tell the answer to its last request from an earlier one's."""
        return lambda info, message: self.loaded_as.emit(number, info, message)


def _joined(tokens: list[TokenEvent]) -> TokenEvent:
    return tokens[0] if len(tokens) == 1 else TokenEvent("".join(t.text for t in tokens), -1)
