"""Helpers that build real Qt input events for the app tests."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication, QWidget


def file_mime(*paths: Path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def drop(target: QWidget, mime: QMimeData) -> bool:
    """Deliver a drop of ``mime`` onto the centre of ``target``; True when the widget accepted it."""
    pos = QPointF(target.rect().center())
    event = QDropEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, event)
    return event.isAccepted()
