"""Small rounded image previews for attachments and message bubbles."""

from __future__ import annotations

import math
from collections.abc import Callable

from PIL import Image
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QImage, QImageIOHandler, QImageReader, QPainter, QPainterPath, QPen, QPixmap

# A faint outline, so a white page (a scanned document) still has an edge on a white or dark background.
OUTLINE = QColor(128, 128, 128, 110)


def read_image(path: str, size_for: Callable[[QSize], QSize] | None = None) -> tuple[QImage, str]:
    """``path`` decoded upright (its EXIF orientation applied, as phones expect) at the size that
    ``size_for`` gives for its upright size in pixels (default: its own), aspect ratio as given; and
    "" or, with a null image, why it cannot be read (Qt's words: not an image, truncated, …).

    A JPEG is decoded at the size asked for directly (quick, and little memory); other formats whole,
    then scaled. Qt refuses to decode more than 256 MB at once (a 67-megapixel photo): that limit is
    raised for this read as far as an image the app accepts needs (up to the engine's own limit,
    Pillow's, about 179 megapixels: :func:`engine.api.images.load_image`), so whatever was attached
    can be shown; a larger one gets no more than Qt's own limit."""
    reader = QImageReader(path)
    reader.setAutoTransform(True)
    stored = reader.size()  # as stored in the file: before the EXIF orientation turns it
    if stored.isValid():
        turned = bool(reader.transformation() & QImageIOHandler.Transformation.TransformationRotate90)
        upright = stored.transposed() if turned else stored
        wanted = size_for(upright) if size_for is not None else upright
        if wanted != upright:
            reader.setScaledSize(wanted.transposed() if turned else wanted)
    limit = QImageReader.allocationLimit()
    pixels = stored.width() * stored.height() if stored.isValid() else 0
    bomb = Image.MAX_IMAGE_PIXELS  # Pillow refuses (and the engine with it) more than twice this; None: no limit
    if bomb is None or pixels <= 2 * bomb:
        # 8 bytes a pixel: a 16-bit PNG decodes to 64-bit pixels.
        QImageReader.setAllocationLimit(max(limit, math.ceil(pixels * 8 / 2**20) + 1))
    try:
        image = reader.read()
    finally:
        QImageReader.setAllocationLimit(limit)
    return image, "" if not image.isNull() else reader.errorString()


def _read_scaled(path: str, box: QSize, crop_square: bool) -> QImage:
    mode = Qt.AspectRatioMode.KeepAspectRatioByExpanding if crop_square else Qt.AspectRatioMode.KeepAspectRatio

    def decoded_size(full: QSize) -> QSize:  # the box's size, or the image's own if that is smaller
        shown = full.scaled(box, mode).expandedTo(QSize(1, 1))
        return full if shown.width() >= full.width() or shown.height() >= full.height() else shown

    image, _ = read_image(path, decoded_size)
    return image if image.isNull() else fit_image(image, box, crop_square)


def fit_image(image: QImage, box: QSize, crop_square: bool) -> QImage:
    """``image`` scaled to fit ``box`` (pixels), or to fill it and cropped to its middle when
    ``crop_square``, aspect ratio kept."""
    mode = Qt.AspectRatioMode.KeepAspectRatioByExpanding if crop_square else Qt.AspectRatioMode.KeepAspectRatio
    image = image.scaled(box, mode, Qt.TransformationMode.SmoothTransformation)
    if crop_square:
        x = (image.width() - box.width()) // 2
        y = (image.height() - box.height()) // 2
        image = image.copy(x, y, box.width(), box.height())
    return image


def is_animation(path: str) -> bool:
    """True for an image file that Qt can play (:class:`QMovie`: GIF, WebP) with more than one frame.
    Qt reads only an APNG's first frame, so one is shown still (the engine still takes its frames)."""
    reader = QImageReader(path)
    return reader.supportsAnimation() and reader.imageCount() > 1


def rounded(image: QImage, radius: float, dpr: float) -> QPixmap:
    """``image`` (device pixels) with rounded corners and a faint outline, as a pixmap for ``dpr``."""
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
    return rounded(image, radius, dpr)
