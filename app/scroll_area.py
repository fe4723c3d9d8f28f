"""One way to put a row or a column of widgets in a scroll area (the attachment strip, the model
manager's catalog): frameless, the content stretched to the area across the way it scrolls."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


def one_way_scroll(name: str, content: QWidget, sideways: bool) -> QScrollArea:
    """A frameless :class:`QScrollArea` named ``name`` holding ``content``; it scrolls ``sideways``
    (a row: no vertical scroll bar) or else down (a column: no horizontal one), the bar shown only
    when the content is longer than the area."""
    area = QScrollArea()
    area.setObjectName(name)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    needed, off = Qt.ScrollBarPolicy.ScrollBarAsNeeded, Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    area.setHorizontalScrollBarPolicy(needed if sideways else off)
    area.setVerticalScrollBarPolicy(off if sideways else needed)
    area.setWidget(content)
    return area
