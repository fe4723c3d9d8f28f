"""A window that shows one image at full size (scrollable; a huge one reduced), upright per its EXIF
orientation; an animation (GIF, WebP) plays."""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QKeySequence, QMovie, QPixmap, QShortcut
from PySide6.QtWidgets import QDialog, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.thumbnails import is_animation, read_image

#: The most pixels shown: what Qt decodes by default (256 MB at 4 bytes a pixel, 8192 × 8192). A larger
#: image (up to the 179 megapixels the engine accepts) is shown reduced to it, its aspect ratio kept:
#: at full size its pixels and their on-screen copy would take 1.4 GB. A cap on the long side
#: instead would shrink a tall full-page screenshot to a thin strip.
MAX_SHOWN_PIXELS = 8192 * 8192


def shown_size(full: QSize) -> QSize:
    """The size in pixels an image of ``full`` pixels is shown at: its own, or reduced to
    :data:`MAX_SHOWN_PIXELS` if it has more."""
    pixels = full.width() * full.height()
    if pixels <= MAX_SHOWN_PIXELS:
        return full
    scale = math.sqrt(MAX_SHOWN_PIXELS / pixels)
    return QSize(max(1, int(full.width() * scale)), max(1, int(full.height() * scale)))


class ImageViewer(QDialog):
    """The image at ``path``, titled ``name``: the name it was attached as ("": the file's own, which
    for a copy in the image store is a hash that names nothing the user chose)."""

    def __init__(self, path: str, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(parent)
        name = name or Path(path).name
        self.setObjectName("imageViewer")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        sizes: list[QSize] = []  # the image's own, upright, once it is known to be an image
        self.image, problem = read_image(path, lambda upright: sizes.append(upright) or shown_size(upright))
        full = sizes[0] if sizes else self.image.size()
        if self.image.isNull() or self.image.size() == full:
            self.setWindowTitle(name)
        else:  # reduced to MAX_SHOWN_PIXELS
            percent = round(100 * self.image.width() / full.width())
            self.setWindowTitle(f"{name} (shown at {percent}% of {full.width():,} × {full.height():,} pixels)")
        self.movie: QMovie | None = None
        label = QLabel()
        label.setObjectName("fullImage")
        label.setAccessibleName(f"Image {name}")
        label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        if self.image.isNull():
            label.setText(f"“{name}” cannot be shown ({problem}).")
            label.setWordWrap(True)  # the window is small then: the sentence would be cut off
            label.setMargin(12)
        elif is_animation(path):  # played at the size the still would be shown at
            self.movie = QMovie(path, parent=label)
            if self.image.size() != full:
                self.movie.setScaledSize(self.image.size())
            label.setMovie(self.movie)
            self.movie.start()
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
