"""Filmstrip previews of video attachments: a few frames side by side, decoded off the UI thread.

:func:`filmstrip_image` decodes with the engine's own reader (:func:`engine.api.videos.read_video`:
it seeks, applies the rotation flag and shrinks each frame as soon as it is decoded, so an 8K or a
3-hour clip costs a few small pictures). :class:`FilmstripLoader` runs it on Qt's thread pool and
hands back a ``QImage``; :class:`Filmstrip` is the label that shows it with its caption.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtCore import QObject, QRunnable, QSize, Qt, QThreadPool, QUrl, Signal, Slot
from PySide6.QtGui import QColor, QDesktopServices, QImage, QMouseEvent, QPainter, QPainterPath, QPixmap
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout, QWidget

from app.video_attachments import VideoPlan

STRIP_FRAMES = 4
"""Frames a filmstrip shows (fewer for a clip with fewer frames)."""


def filmstrip_image(path: str, frame_height: int, frames: int = STRIP_FRAMES) -> Image.Image:
    """Up to ``frames`` frames of ``path`` spread over its length, each scaled to ``frame_height``
    pixels high, side by side with 2-px gaps (RGB).

    Raises:
        VideoError: the engine's one-line message when no frame can be decoded.
    """
    from engine.api.videos import probe, read_video

    info = probe(path)
    fps = frames / max(info.duration, 1e-3)  # ~``frames`` samples over the whole clip

    def shrink(image: Image.Image) -> Image.Image:
        width = max(1, round(image.width * frame_height / max(image.height, 1)))
        image.draft("RGB", (width, frame_height))  # a no-op for video frames, cheap for JPEG-like sources
        return image.resize((width, frame_height), Image.Resampling.BILINEAR)

    video = read_video(path, fps=fps, max_frames=frames, resize=shrink)
    pictures = video.frames
    gap = 2
    strip = Image.new("RGB", (sum(p.width for p in pictures) + gap * (len(pictures) - 1), frame_height), (16, 16, 16))
    x = 0
    for picture in pictures:
        strip.paste(picture, (x, 0))
        x += picture.width + gap
    return strip


def to_qimage(image: Image.Image) -> QImage:
    """An RGB Pillow image as a QImage that owns its pixels."""
    data = image.convert("RGB").tobytes()
    return QImage(data, image.width, image.height, 3 * image.width, QImage.Format.Format_RGB888).copy()


class _Job(QRunnable):
    def __init__(self, loader: FilmstripLoader, key: tuple[str, int]) -> None:
        super().__init__()
        self.loader, self.key = loader, key

    def run(self) -> None:  # a pool thread: no widgets, no QPixmap
        path, height = self.key
        try:
            image, error = filmstrip_image(path, height), ""
        except Exception as exc:  # noqa: BLE001 - every failure becomes the chip's one-line error
            image, error = None, " ".join(str(exc).split()) or type(exc).__name__
        self.loader.finished.emit(self.key, to_qimage(image) if image is not None else QImage(), error)


class FilmstripLoader(QObject):
    """Decodes filmstrips on a thread pool, once per (path, height); results are cached.

    ``ready(key, QImage, error)`` arrives on the UI thread; a null image comes with the error.
    """

    ready = Signal(object, QImage, str)
    finished = Signal(object, QImage, str)  # from the pool thread; re-emitted as ``ready``

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(2)
        self._cache: dict[tuple[str, int], tuple[QImage, str]] = {}
        self._queued: set[tuple[str, int]] = set()
        self.finished.connect(self._finished, Qt.ConnectionType.QueuedConnection)

    def request(self, path: str, height: int) -> tuple[QImage, str] | None:
        """The cached ``(image, error)`` for ``(path, height)``, or None after queueing its decode."""
        key = (path, height)
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
        self._height = round(box.height() * dpr)
        strips = loader()
        strips.ready.connect(self._ready)
        cached = strips.request(path, self._height)
        if cached is not None:
            self._apply(*cached)
        self._render()

    def set_caption(self, caption: str) -> None:
        self.caption = caption
        self._render()

    @Slot(object, QImage, str)
    def _ready(self, key, image: QImage, error: str) -> None:
        if key == (self.path, self._height):
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

    def __init__(self, path: str, plan: VideoPlan | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("videoChip")
        self.path = path
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
        remove = QToolButton(self)
        remove.setObjectName("removeAttachment")
        remove.setText("✕")
        remove.setToolTip(f"Remove {Path(path).name}")
        remove.setAccessibleName(f"Remove {Path(path).name}")
        remove.setCursor(Qt.CursorShape.PointingHandCursor)
        remove.setGeometry(self.width() - 24, 0, 22, 22)
        remove.clicked.connect(lambda: self.remove_requested.emit(self.path))
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
        lines = [Path(self.path).name]
        if self.plan:
            lines.append(f"{self.plan.caption} sampled for the model")
        if self.problem:
            lines.append(self.problem)
        self.setToolTip("\n".join(lines))


class VideoThumbnail(Filmstrip):
    """A video in a sent message: its filmstrip; a click opens the file in the system's player."""

    def __init__(self, path: str, box: QSize, caption: str, parent: QWidget | None = None) -> None:
        super().__init__(path, box, caption, radius=12, parent=parent)
        self.setObjectName("messageVideo")
        self.setToolTip(f"{Path(path).name} — click to play")
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            QDesktopServices.openUrl(QUrl.fromLocalFile(self.path))
        super().mouseReleaseEvent(event)


def message_video(path: str, box: QSize) -> VideoThumbnail:
    """The filmstrip of a stored video for a message bubble (caption: its duration)."""
    from app.video_attachments import InvalidVideoError, format_duration, plan_video

    try:
        caption = format_duration(plan_video(path).duration)
    except InvalidVideoError:
        caption = ""
    return VideoThumbnail(path, box, caption)
