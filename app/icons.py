"""SVG icons from ``resources/icons`` (sharp at any device pixel ratio)."""

from __future__ import annotations

from functools import cache

from PySide6.QtCore import QRect, QRectF, QSize, Qt
from PySide6.QtGui import QIcon, QIconEngine, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app.paths import resource

# Qt's generated disabled icon lightens the pixels, which hardly changes the grey icons on the dark
# theme's background; a faded icon reads as "off" on either background.
DISABLED_OPACITY = 0.35


class SvgIconEngine(QIconEngine):
    """Paints one SVG at whatever size is asked, faded to ``DISABLED_OPACITY`` when disabled."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.renderer = QSvgRenderer(path)

    def paint(self, painter: QPainter, rect: QRect, mode: QIcon.Mode, _state: QIcon.State) -> None:
        painter.save()
        if mode == QIcon.Mode.Disabled:
            painter.setOpacity(painter.opacity() * DISABLED_OPACITY)
        self.renderer.render(painter, QRectF(rect))
        painter.restore()

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        if size.isEmpty():  # a button squeezed for a moment by a layout pass (QPainter cannot paint it)
            return QPixmap()
        pixmap = QPixmap(size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        self.paint(painter, QRect(0, 0, size.width(), size.height()), mode, state)
        painter.end()
        return pixmap

    def scaledPixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State, scale: float) -> QPixmap:
        pixmap = self.pixmap(size * scale, mode, state)
        pixmap.setDevicePixelRatio(scale)
        return pixmap

    def actualSize(self, size: QSize, _mode: QIcon.Mode, _state: QIcon.State) -> QSize:
        return size

    def clone(self) -> SvgIconEngine:
        return SvgIconEngine(self.path)


@cache
def icon(name: str) -> QIcon:
    return QIcon(SvgIconEngine(str(resource(f"icons/{name}.svg"))))
