"""Helpers that build real Qt input events for the app tests."""

from __future__ import annotations

import warnings
from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget


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
