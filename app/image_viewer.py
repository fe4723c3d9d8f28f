"""A window that shows one image at full size (scrollable), upright per its EXIF orientation."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QImageReader, QKeySequence, QPixmap, QShortcut
from PySide6.QtWidgets import QDialog, QLabel, QScrollArea, QVBoxLayout, QWidget


class ImageViewer(QDialog):
    def __init__(self, path: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("imageViewer")
        self.setWindowTitle(Path(path).name)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        reader = QImageReader(path)
        reader.setAutoTransform(True)
        self.image = reader.read()
        label = QLabel()
        label.setObjectName("fullImage")
        label.setAccessibleName(f"Image {Path(path).name}")
        label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        if self.image.isNull():
            label.setText(f"“{Path(path).name}” cannot be shown ({reader.errorString()}).")
        else:
            label.setPixmap(QPixmap.fromImage(self.image))
        scroll = QScrollArea()
        scroll.setWidget(label)
        scroll.setWidgetResizable(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        screen = self.screen().availableGeometry() if self.screen() else None
        width, height = self.image.width() + 24, self.image.height() + 24
        if screen is not None:
            width, height = min(width, int(screen.width() * 0.9)), min(height, int(screen.height() * 0.9))
        self.resize(max(width, 240), max(height, 160))
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self.close)
