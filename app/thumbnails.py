"""Small rounded image previews for attachments and message bubbles."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QImage, QImageReader, QPainter, QPainterPath, QPen, QPixmap

# A faint outline, so a white page (a scanned document) still has an edge on a white or dark background.
OUTLINE = QColor(128, 128, 128, 110)


def _read_scaled(path: str, box: QSize, crop_square: bool) -> QImage:
    reader = QImageReader(path)
    reader.setAutoTransform(True)  # honour EXIF orientation, as phones expect
    image = reader.read()
    if image.isNull():
        return image
    mode = Qt.AspectRatioMode.KeepAspectRatioByExpanding if crop_square else Qt.AspectRatioMode.KeepAspectRatio
    image = image.scaled(box, mode, Qt.TransformationMode.SmoothTransformation)
    if crop_square:
        x = (image.width() - box.width()) // 2
        y = (image.height() - box.height()) // 2
        image = image.copy(x, y, box.width(), box.height())
    return image


def _rounded(image: QImage, radius: float, dpr: float) -> QPixmap:
    pixmap = QPixmap(image.size())
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    clip = QPainterPath()
    clip.addRoundedRect(QRectF(pixmap.rect()), radius * dpr, radius * dpr)
    painter.setClipPath(clip)
    painter.drawImage(0, 0, image)
    painter.setClipping(False)
    painter.setPen(QPen(OUTLINE, dpr))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.drawRoundedRect(QRectF(pixmap.rect()).adjusted(dpr / 2, dpr / 2, -dpr / 2, -dpr / 2), radius * dpr, radius * dpr)
    painter.end()
    pixmap.setDevicePixelRatio(dpr)
    return pixmap


def thumbnail(path: str, max_size: QSize, *, square: bool = False, radius: float = 10.0, dpr: float = 1.0) -> QPixmap:
    """A rounded preview of ``path`` that fits ``max_size`` (or fills it, cropped, when ``square``)."""
    box = QSize(round(max_size.width() * dpr), round(max_size.height() * dpr))
    image = _read_scaled(path, box, square)
    if image.isNull():
        return QPixmap()
    return _rounded(image, radius, dpr)
