"""Filmstrip previews of video attachments: a few frames side by side, decoded off the UI thread.

:func:`filmstrip_image` decodes with the engine's own reader (:func:`engine.api.videos.read_video`:
it seeks, applies the rotation flag and shrinks each frame as soon as it is decoded, so an 8K or a
3-hour clip costs a few small pictures). :class:`FilmstripLoader` runs it on Qt's thread pool and
hands back a ``QImage``; :class:`Filmstrip` is the label that shows it with its caption.
"""

from __future__ import annotations

import math
from pathlib import Path

from PIL import Image
from PySide6.QtCore import QObject, QRunnable, QSize, Qt, QThreadPool, QUrl, Signal, Slot
from PySide6.QtGui import QColor, QDesktopServices, QImage, QKeyEvent, QMouseEvent, QPainter, QPainterPath, QPixmap
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from app.attachments import add_remove_button
from app.focus import activates
from app.video_attachments import VideoPlan

MAX_CELLS = 4
"""Frames a filmstrip shows at most (fewer for a clip with fewer frames, or a narrow box)."""
GAP = 2


def strip_cells(width: int, height: int) -> int:
    """How many frames a ``width x height`` filmstrip shows: about one per square cell, 2 to 4."""
    return max(2, min(MAX_CELLS, math.ceil(width / max(height, 1))))


def cover(image: Image.Image, width: int, height: int) -> Image.Image:
    """``image`` scaled to cover ``width x height`` and centre-cropped to it (RGB)."""
    scale = max(width / image.width, height / image.height)
    w, h = max(width, round(image.width * scale)), max(height, round(image.height * scale))
    image = image.convert("RGB").resize((w, h), Image.Resampling.BILINEAR)
    x, y = (w - width) // 2, (h - height) // 2
    return image.crop((x, y, x + width, y + height))


def filmstrip_image(path: str, width: int, height: int) -> Image.Image:
    """Frames of ``path`` spread over its length (:func:`strip_cells` of them), each cropped to a
    cell of a ``width x height`` strip, side by side with 2-px gaps (RGB; narrower when the clip
    has fewer frames).

    Raises:
        VideoError: the engine's one-line message when the file or its frames cannot be read.
    """
    from engine.api.videos import probe, read_video

    cells = strip_cells(width, height)
    cell_width = max(1, (width - GAP * (cells - 1)) // cells)
    info = probe(path)
    fps = cells / max(info.duration, 1e-3)  # ~``cells`` samples over the whole clip
    video = read_video(path, fps=fps, max_frames=cells, resize=lambda image: cover(image, cell_width, height))
    pictures = video.frames
    strip = Image.new("RGB", (cell_width * len(pictures) + GAP * (len(pictures) - 1), height), (16, 16, 16))
    for i, picture in enumerate(pictures):
        strip.paste(picture, (i * (cell_width + GAP), 0))
    return strip


def to_qimage(image: Image.Image) -> QImage:
    """An RGB Pillow image as a QImage that owns its pixels."""
    data = image.convert("RGB").tobytes()
    return QImage(data, image.width, image.height, 3 * image.width, QImage.Format.Format_RGB888).copy()


class _Job(QRunnable):
    def __init__(self, loader: FilmstripLoader, key: tuple[str, int, int]) -> None:
        super().__init__()
        self.loader, self.key = loader, key

    def run(self) -> None:  # a pool thread: no widgets, no QPixmap
        path, width, height = self.key
        try:
            image, error = filmstrip_image(path, width, height), ""
        except Exception as exc:  # noqa: BLE001 - every failure becomes the chip's one-line error
            image, error = None, " ".join(str(exc).split()) or type(exc).__name__
        self.loader.finished.emit(self.key, to_qimage(image) if image is not None else QImage(), error)


class FilmstripLoader(QObject):
    """Decodes filmstrips on a thread pool, once per (path, width, height); results are cached.

    ``ready(key, QImage, error)`` arrives on the UI thread; a null image comes with the error.
    """

    ready = Signal(object, QImage, str)
    finished = Signal(object, QImage, str)  # from the pool thread; re-emitted as ``ready``

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(2)
        self._cache: dict[tuple[str, int, int], tuple[QImage, str]] = {}
        self._queued: set[tuple[str, int, int]] = set()
        self.finished.connect(self._finished, Qt.ConnectionType.QueuedConnection)

    def request(self, path: str, width: int, height: int) -> tuple[QImage, str] | None:
        """The cached ``(image, error)`` for a ``width x height`` strip (device pixels) of ``path``,
        or None after queueing its decode."""
        key = (path, width, height)
        if key in self._cache:
            return self._cache[key]
        if key not in self._queued:
            self._queued.add(key)
            self.pool.start(_Job(self, key))
        return None

    @Slot(object, QImage, str)
    def _finished(self, key, image: QImage, error: str) -> None:
        self._cache[key] = (image, error)
        self._queued.discard(key)
        self.ready.emit(key, image, error)

    def wait(self, msecs: int = 10000) -> bool:
        """Wait for every queued decode (tests, shutdown)."""
        return self.pool.waitForDone(msecs)


_loader: FilmstripLoader | None = None


def loader() -> FilmstripLoader:
    """The application's one filmstrip loader (created on first use, on the UI thread)."""
    global _loader
    if _loader is None:
        _loader = FilmstripLoader()
    return _loader


class Filmstrip(QLabel):
    """A filmstrip of ``path`` in a ``box``, with ``caption`` ("0:12 · 12 frames") drawn on it.

    Shows a dark placeholder until the frames are decoded; an unreadable video shows its error in
    :attr:`error` (and the tooltip) and a plain placeholder.
    """

    failed = Signal(str)  # the decoder's one-line error

    def __init__(self, path: str, box: QSize, caption: str = "", radius: float = 8.0,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("filmstrip")
        self.path, self.box, self.caption, self.radius = path, box, caption, radius
        self.error = ""
        self.loaded = False
        self.setFixedSize(box)
        self.setAccessibleName(f"Video {Path(path).name}")
        self._image = QImage()
        dpr = self.devicePixelRatioF()
        self._key = (path, round(box.width() * dpr), round(box.height() * dpr))
        strips = loader()
        strips.ready.connect(self._ready)
        cached = strips.request(*self._key)
        if cached is not None:
            self._apply(*cached)
        self._render()

    def set_caption(self, caption: str) -> None:
        self.caption = caption
        self._render()

    @Slot(object, QImage, str)
    def _ready(self, key, image: QImage, error: str) -> None:
        if key == self._key:
            self._apply(image, error)
            self._render()

    def _apply(self, image: QImage, error: str) -> None:
        self._image, self.error, self.loaded = image, error, True
        if error:
            self.setToolTip(error)
            self.failed.emit(error)

    def _render(self) -> None:
        dpr = self.devicePixelRatioF()
        size = QSize(round(self.box.width() * dpr), round(self.box.height() * dpr))
        pixmap = QPixmap(size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        clip = QPainterPath()
        clip.addRoundedRect(0, 0, size.width(), size.height(), self.radius * dpr, self.radius * dpr)
        painter.setClipPath(clip)
        painter.fillRect(pixmap.rect(), QColor(24, 24, 27))
        if not self._image.isNull():
            # Centred, cropped at the sides when the strip is wider than the box.
            x = (size.width() - self._image.width()) // 2
            painter.drawImage(x, (size.height() - self._image.height()) // 2, self._image)
        text = self.caption if not self.error else "Cannot read this video"
        if not self.loaded and not self.caption:
            text = "Reading the video…"
        if text:
            font = painter.font()
            font.setPixelSize(round(11 * dpr))
            font.setBold(True)
            painter.setFont(font)
            band = round(18 * dpr)
            painter.fillRect(0, size.height() - band, size.width(), band, QColor(0, 0, 0, 150))
            painter.setPen(QColor(255, 255, 255))
            painter.drawText(round(6 * dpr), size.height() - band, size.width() - round(12 * dpr), band,
                             int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), "▶ " + text)
        painter.end()
        pixmap.setDevicePixelRatio(dpr)
        self.setPixmap(pixmap)


CHIP_STRIP = QSize(168, 64)


class VideoChip(QFrame):
    """A pending video in the composer: its filmstrip and caption, a remove button, and a mark when
    the loaded model cannot take it (:meth:`set_problem`)."""

    remove_requested = Signal(str)
    kind = "video"

    def __init__(self, path: str, plan: VideoPlan | None, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("videoChip")
        self.path = path
        self.name = name or Path(path).name  # the user's file name (a stored copy's own is a hash)
        self.plan = plan
        self.problem = ""
        self.setFixedSize(CHIP_STRIP + QSize(8, 8))
        self.setProperty("problem", False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.strip = Filmstrip(path, CHIP_STRIP, plan.caption if plan else "", radius=8, parent=self)
        layout.addWidget(self.strip)
        self.badge = QLabel("✕ no video", self)
        self.badge.setObjectName("videoChipProblem")
        self.badge.setStyleSheet("background: #c62828; color: white; border-radius: 4px; padding: 1px 4px;"
                                 "font-size: 10px; font-weight: bold;")
        self.badge.move(8, 8)
        self.badge.hide()
        add_remove_button(self, path, self.name)
        self._tooltip()

    @property
    def error(self) -> str:
        """The decoder's one-line error once the filmstrip failed ("" while fine or not known yet)."""
        return self.strip.error

    def set_plan(self, plan: VideoPlan | None) -> None:
        self.plan = plan
        self.strip.set_caption(plan.caption if plan else "")
        self._tooltip()

    def set_problem(self, problem: str) -> None:
        """Mark the chip (``problem``: why it cannot be sent, "" to clear)."""
        self.problem = problem
        self.setProperty("problem", bool(problem))
        self.badge.setVisible(bool(problem))
        self.badge.adjustSize()
        self.setStyleSheet("#videoChip { border: 2px solid #c62828; border-radius: 10px; }" if problem else "")
        self._tooltip()

    def _tooltip(self) -> None:
        lines = [self.name]
        if self.plan:
            lines.append(f"{self.plan.caption} sampled for the model")
        if self.problem:
            lines.append(self.problem)
        self.setToolTip("\n".join(lines))


class VideoThumbnail(Filmstrip):
    """A video in a sent message: its filmstrip; a click, or Enter or Space on it (a Tab stop, as a
    sent photo is: trial 52), opens the file in the system's player. ``name``: the name it was
    attached as ("": the file's own, for a stored copy its content hash)."""

    def __init__(self, path: str, box: QSize, caption: str, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(path, box, caption, radius=12, parent=parent)
        self.name = name or Path(path).name
        self.setObjectName("messageVideo")
        self.setToolTip(f"{self.name} — click to play")
        self.setAccessibleName(f"Play {self.name}")
        self.setAccessibleDescription("Press Enter or Space to play the video in the system's player")
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def play(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(self.path))

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.play()
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        if activates(event):
            event.accept()
            self.play()
            return
        super().keyPressEvent(event)


def message_video(path: str, box: QSize, name: str = "") -> VideoThumbnail:
    """The filmstrip of a stored video for a message bubble (caption: its duration), named as attached."""
    from app.video_attachments import InvalidVideoError, format_duration, plan_video

    try:
        caption = format_duration(plan_video(path).duration)
    except InvalidVideoError:
        caption = ""
    return VideoThumbnail(path, box, caption, name=name)
