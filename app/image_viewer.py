"""A window that shows one image, fitted to it or zoomed (scrollable; a huge one reduced), upright per
its EXIF orientation; an animation (GIF, WebP) plays."""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QKeySequence, QMovie, QPixmap, QShortcut
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QScrollArea, QToolButton, QVBoxLayout, QWidget

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


#: Zoom steps (Ctrl+plus / Ctrl+minus, Ctrl+wheel), as fractions of the image's shown pixels.
ZOOM_STEPS = (0.05, 0.1, 0.25, 1 / 3, 0.5, 2 / 3, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)


def fit_scale(image: QSize, room: QSize) -> float:
    """The scale that shows all of ``image`` in ``room``, never above 1 (a small image is not blown up
    into blurred blocks; a 1 × 1 pixel stays one pixel)."""
    if image.isEmpty() or room.isEmpty():
        return 1.0
    return min(1.0, room.width() / image.width(), room.height() / image.height())


class ImageViewer(QDialog):
    """The image at ``path``, titled ``name``: the name it was attached as ("": the file's own, which
    for a copy in the image store is a hash that names nothing the user chose).

    It opens fitted to the window (trial 62: a 9,000 × 9,000 photo showed a corner with no way to see
    the whole of it), centred on the screen of ``parent`` and inside it; Ctrl+plus / Ctrl+minus,
    Ctrl+wheel and the bar's buttons zoom, Ctrl+0 fits it again, Ctrl+1 (or a double-click) shows it at
    its own size, where the scroll bars reach all of it."""

    def __init__(self, path: str, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(parent)
        name = name or Path(path).name
        self.setObjectName("imageViewer")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        sizes: list[QSize] = []  # the image's own, upright, once it is known to be an image
        self.image, problem = read_image(path, lambda upright: sizes.append(upright) or shown_size(upright))
        full = sizes[0] if sizes else self.image.size()
        self.full = full
        if self.image.isNull() or self.image.size() == full:
            self.setWindowTitle(name)
        else:  # reduced to MAX_SHOWN_PIXELS
            percent = round(100 * self.image.width() / full.width())
            self.setWindowTitle(f"{name} (shown at {percent}% of {full.width():,} × {full.height():,} pixels)")
        self.movie: QMovie | None = None
        self._pixmap: QPixmap | None = None
        self.fitted, self.scale = True, 1.0
        self.label = label = QLabel()
        label.setObjectName("fullImage")
        label.setAccessibleName(f"Image {name}")
        label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        if self.image.isNull():
            label.setText(f"“{name}” cannot be shown ({problem}).")
            label.setWordWrap(True)  # the window is small then: the sentence would be cut off
            label.setMargin(12)
        elif is_animation(path):  # played at the size the still would be shown at
            self.movie = QMovie(path, parent=label)
            label.setMovie(self.movie)
            self.movie.start()
        else:
            self._pixmap = QPixmap.fromImage(self.image)
            label.setPixmap(self._pixmap)
        self.scroll = scroll = QScrollArea()
        scroll.setObjectName("imageScroll")
        scroll.setAlignment(Qt.AlignmentFlag.AlignCenter)
        scroll.setWidget(label)
        scroll.setWidgetResizable(self.image.isNull())
        scroll.viewport().installEventFilter(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(scroll, 1)
        if not self.image.isNull():
            layout.addWidget(self._zoom_bar())
        self._refit = QTimer(self)  # a resize re-fits once it pauses: scaling 64 MP takes ~50 ms
        self._refit.setSingleShot(True)
        self._refit.setInterval(40)
        self._refit.timeout.connect(lambda: self.fitted and self._show_at(self._fit_scale()))
        self._place(parent)
        self._show_at(self._fit_scale())
        for keys, act in ((QKeySequence.StandardKey.ZoomIn, lambda: self.zoom(+1)), ("Ctrl+=", lambda: self.zoom(+1)),
                          (QKeySequence.StandardKey.ZoomOut, lambda: self.zoom(-1)), ("Ctrl+0", self.fit),
                          ("Ctrl+1", self.actual_size), (QKeySequence(Qt.Key.Key_Escape), self.close)):
            QShortcut(QKeySequence(keys), self, act)

    # -- zoom --------------------------------------------------------------------------------------
    def fit(self) -> None:
        """All of the image in the window (never enlarged), kept so as the window is resized."""
        self.fitted = True
        self._show_at(self._fit_scale())

    def actual_size(self) -> None:
        """The image at its own size (each pixel one screen pixel), to scroll through; one reduced to
        :data:`MAX_SHOWN_PIXELS` at the largest it is shown (the percentage and the title say which)."""
        self.fitted = False
        self._show_at(min(1.0 / self._reduced(), self._largest_scale()))

    def zoom(self, step: int) -> None:
        """One :data:`ZOOM_STEPS` step larger (``step`` +1) or smaller (-1) than now, the steps being of
        the file's own size (so a reduced image's steps read as everyone else's: 50%, 67%, ...)."""
        now = self.scale * self._reduced()
        # A step within a tenth of the size now is skipped: from a fit of 9.7%, "+" showed 10% (trial 65).
        if step > 0:
            zoom = next((z for z in ZOOM_STEPS if z > now * 1.1), ZOOM_STEPS[-1])
        else:
            zoom = next((z for z in reversed(ZOOM_STEPS) if z < now / 1.1), ZOOM_STEPS[0])
        self.fitted = False
        self._show_at(min(zoom / self._reduced(), self._largest_scale()))

    def _reduced(self) -> float:
        """The shown copy's width over the file's (1.0 unless reduced to :data:`MAX_SHOWN_PIXELS`)."""
        return self.image.width() / max(1, self.full.width())

    def _largest_scale(self) -> float:
        """The most the shown copy is enlarged: to :data:`MAX_SHOWN_PIXELS` (a 64-megapixel photo at 8x
        would be a 16 GB pixmap), and never below its own size."""
        pixels = max(1, self.image.width() * self.image.height())
        return max(1.0, math.sqrt(MAX_SHOWN_PIXELS / pixels))

    def _fit_scale(self) -> float:
        return fit_scale(self.image.size(), self.scroll.viewport().size() - QSize(2, 2))

    def _show_at(self, scale: float) -> None:
        if self.image.isNull():
            return
        self.scale = scale
        size = QSize(max(1, round(self.image.width() * scale)), max(1, round(self.image.height() * scale)))
        if self.movie is not None:
            self.movie.setScaledSize(size)
        elif self._pixmap is not None:
            self.label.setPixmap(self._pixmap if size == self._pixmap.size() else self._pixmap.scaled(
                size, Qt.AspectRatioMode.IgnoreAspectRatio, Qt.TransformationMode.SmoothTransformation))
        self.label.resize(size)
        percent = scale * self._reduced() * 100
        self.percent.setText(f"{percent:.0f}%" if percent >= 1 else f"{percent:.1f}%")
        self.percent.setToolTip(f"The largest this image is shown at: {percent:.0f}% of its "
                                f"{self.full.width():,} × {self.full.height():,} pixels"
                                if scale >= self._largest_scale() - 1e-6 and percent < 99.5 else "")
        self.fit_button.setChecked(self.fitted)

    def _zoom_bar(self) -> QWidget:
        bar = QWidget()
        bar.setObjectName("zoomBar")
        row = QHBoxLayout(bar)
        row.setContentsMargins(8, 4, 8, 4)
        size = QLabel(f"{self.full.width():,} × {self.full.height():,} pixels")
        size.setObjectName("imageSize")
        row.addWidget(size)
        row.addStretch(1)
        self.fit_button = self._button(row, "Fit", "Fit to the window (Ctrl+0)", self.fit)
        self.fit_button.setCheckable(True)
        self._button(row, "100%", "Actual size (Ctrl+1, or double-click the image)", self.actual_size)
        self._button(row, "−", "Zoom out (Ctrl+minus, Ctrl+wheel)", lambda: self.zoom(-1))
        self.percent = QLabel()
        self.percent.setObjectName("zoomPercent")
        self.percent.setAccessibleName("Zoom")
        self.percent.setMinimumWidth(self.percent.fontMetrics().horizontalAdvance("100.0%"))
        self.percent.setAlignment(Qt.AlignmentFlag.AlignCenter)
        row.addWidget(self.percent)
        self._button(row, "+", "Zoom in (Ctrl+plus, Ctrl+wheel)", lambda: self.zoom(+1))
        return bar

    @staticmethod
    def _button(row: QHBoxLayout, text: str, tip: str, act) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.setAccessibleName(tip.split(" (")[0])
        button.clicked.connect(act)
        row.addWidget(button)
        return button

    # -- the window ----------------------------------------------------------------------------------
    def _place(self, parent: QWidget | None) -> None:
        """Sized to the image and its bar, up to 90% of the screen, centred on the screen ``parent`` is
        on and wholly inside it (trial 62: a 10,000 × 20 image's window ran off the screen's edge)."""
        screen = (parent.screen() if parent is not None else None) or self.screen()
        room = screen.availableGeometry() if screen is not None else None
        bar = 0 if self.image.isNull() else self.layout().itemAt(1).widget().sizeHint().height()
        width, height = self.image.width() + 24, self.image.height() + 24 + bar
        if room is not None:
            width, height = min(width, int(room.width() * 0.9)), min(height, int(room.height() * 0.9))
        width, height = max(width, 320), max(height, 200)
        self.resize(width, height)
        if room is not None:
            self.move(room.center().x() - width // 2, room.center().y() - height // 2)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if self.fitted:  # the viewport has its size only now: fitted before the first paint
            self.layout().activate()
            self._show_at(self._fit_scale())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self.fitted:
            self._refit.start()

    def eventFilter(self, watched, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.scroll.viewport() and not self.image.isNull():
            if event.type() == QEvent.Type.Wheel and event.modifiers() & Qt.KeyboardModifier.ControlModifier:
                self.zoom(1 if event.angleDelta().y() > 0 else -1)
                return True
            if event.type() == QEvent.Type.MouseButtonDblClick:
                self.actual_size() if self.fitted else self.fit()
                return True
        return super().eventFilter(watched, event)
