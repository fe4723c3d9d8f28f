"""Reading dropped or pasted data: local file URLs and raw image data."""

from __future__ import annotations

from PySide6.QtCore import QMimeData
from PySide6.QtGui import QImage, QPixmap


def local_files(mime: QMimeData) -> list[str]:
    """Paths of the local files named by ``mime``'s URLs (remote URLs are ignored)."""
    if not mime.hasUrls():
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile() and url.toLocalFile()]


def carries_images(mime: QMimeData) -> bool:
    """True when ``mime`` holds files or image data that Smolchat should treat as attachments."""
    return bool(local_files(mime)) or mime.hasImage()


def image_from_mime(mime: QMimeData) -> QImage:
    """The image data ``mime`` carries (a null QImage when there is none)."""
    data = mime.imageData() if mime.hasImage() else None
    if isinstance(data, QImage):
        return data
    if isinstance(data, QPixmap):
        return data.toImage()
    return QImage()
