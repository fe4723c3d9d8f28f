"""The strip of images and videos waiting to be sent with the next message."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QEvent, QRect, QSize, Qt, Signal, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.scroll_area import one_way_scroll
from app.thumbnails import thumbnail

CHIP_SIZE = QSize(64, 64)
#: A PDF page's file name (app.pdf_pages): "<the PDF's name> page <number>.png".
PDF_PAGE = re.compile(r"^(.*) page (\d+)\.png$")


def add_remove_button(chip: QWidget, path: str, name: str) -> QToolButton:
    """The "✕" in the top-right corner of an attachment chip; it emits ``chip.remove_requested(path)``."""
    remove = QToolButton(chip)
    remove.setObjectName("removeAttachment")
    remove.setText("✕")
    remove.setToolTip(f"Remove {name}")
    remove.setAccessibleName(f"Remove {name}")
    remove.setCursor(Qt.CursorShape.PointingHandCursor)
    remove.setGeometry(chip.width() - 24, 0, 22, 22)
    remove.clicked.connect(lambda: chip.remove_requested.emit(path))
    return remove


class Caption(QLabel):
    """The file's name on a band across the foot of a chip's thumbnail (``thumb``), cut in its middle to
    fit (a PDF page's number kept whole: "Quart… p. 12") and measured again when the style sheet's font comes:
    three pages of one PDF, or two screenshots, looked alike (trial 62). Clicks go through it."""

    def __init__(self, chip: QWidget, thumb: QRect, name: str) -> None:
        super().__init__(chip)
        self.setObjectName("attachmentCaption")
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.thumb, self.name = thumb, name
        self.ensurePolished()  # the style sheet's font, before the name is measured against it
        self._fit()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fit()

    def _fit(self) -> None:
        metrics = self.fontMetrics()
        height = metrics.height() + 2
        self.setGeometry(self.thumb.left(), self.thumb.bottom() + 1 - height, self.thumb.width(), height)
        room = self.thumb.width() - 4
        page = PDF_PAGE.match(self.name)
        if page is None:
            self.setText(metrics.elidedText(self.name, Qt.TextElideMode.ElideMiddle, room))
            return
        tail = f" p. {page[2]}"  # what tells a PDF's pages apart, kept whole
        self.setText(metrics.elidedText(page[1], Qt.TextElideMode.ElideRight, room - metrics.horizontalAdvance(tail))
                     + tail)


class AttachmentChip(QFrame):
    """One pending image: a square thumbnail with a remove button in its corner."""

    remove_requested = Signal(str)
    kind = "image"

    def __init__(self, path: str, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("attachmentChip")
        self.path = path
        self.name = name or Path(path).name  # the user's file name (a stored copy's own is a hash)
        self.setToolTip(self.name)
        self.setFixedSize(CHIP_SIZE + QSize(8, 8))
        image = QLabel(self)
        image.setObjectName("attachmentThumb")
        image.setGeometry(4, 4, CHIP_SIZE.width(), CHIP_SIZE.height())
        image.setPixmap(thumbnail(path, CHIP_SIZE, square=True, radius=8, dpr=self.devicePixelRatioF()))
        Caption(self, image.geometry(), self.name)
        add_remove_button(self, path, self.name)


class AttachmentStrip(QWidget):
    """Thumbnails of the images that go with the next message, in a row that scrolls sideways when
    they are more than the window is wide; hidden while empty."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachments")
        self._chips: list = []  # AttachmentChip, or app.filmstrip.VideoChip for a video
        # Each chip's place: (pick, position in the pick[, page…]). A PDF's pages come back from
        # rendering later and take the PDF's place among the files picked with it, not the end.
        self._ranks: dict[str, tuple[int, ...]] = {}
        self._picks = 0
        # In a scroll area: a row of chips in a plain layout asked for its whole width as the window's
        # minimum (24 photos of a dropped folder: 2,063 px, Send and the settings off a 1,280 px screen).
        row = QWidget()
        row.setObjectName("attachmentRow")
        self._layout = QHBoxLayout(row)
        self._layout.setContentsMargins(4, 4, 4, 0)
        self._layout.setSpacing(6)
        self._layout.addStretch(1)
        self._scroll = one_way_scroll("attachmentScroll", row, sideways=True)
        self._scroll.viewport().setAutoFillBackground(False)
        row.setAutoFillBackground(False)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self._scroll)
        self._scroll.horizontalScrollBar().rangeChanged.connect(lambda *_: self._fit_height())
        self.hide()

    def paths(self) -> list[str]:
        return [chip.path for chip in self._chips]

    def chips(self) -> list:
        return list(self._chips)

    def video_chips(self) -> list:
        return [chip for chip in self._chips if chip.kind == "video"]

    def chip(self, path: str):
        return next((chip for chip in self._chips if chip.path == path), None)

    def new_pick(self) -> int:
        """A number for one pick, drop or paste of files, above every earlier one (see :meth:`add`)."""
        self._picks += 1
        return self._picks

    @Slot(str)
    def add(self, path: str, video_plan=None, name: str = "", rank: tuple[int, ...] | None = None) -> bool:
        """Add ``path`` unless it is already pending; True when added. With ``video_plan``
        (:class:`app.video_attachments.VideoPlan`) it is a video and shows a filmstrip. ``name``:
        what the chip calls it (default the file's name; a stored copy's is a hash). ``rank``:
        ``(pick, position[, sub-position…])``, where the chip goes among the others (compared as
        tuples); default: after every chip."""
        if path in self.paths():
            return False
        rank = rank if rank is not None else (self.new_pick(),)
        self._picks = max(self._picks, rank[0])
        index = sum(1 for chip in self._chips if self._ranks.get(chip.path, ()) <= rank)
        if video_plan is not None:
            from app.filmstrip import VideoChip

            chip = VideoChip(path, video_plan, self, name=name)
        else:
            chip = AttachmentChip(path, self, name=name)
        chip.remove_requested.connect(self.remove)
        self._chips.insert(index, chip)
        self._ranks[path] = rank
        self._layout.insertWidget(index, chip)
        self._sync()
        return True

    def replace(self, path: str, video_plan=None) -> None:
        """Show the pending ``path`` again, in its place and under its name, as a video (with
        ``video_plan``) or as an image: an animated GIF, WebP or PNG attached under one model is sent
        as what the model loaded since takes. One ``changed`` at the end: between the two chips the
        strip is never seen empty (an empty strip withdraws the notes about the files attached)."""
        old = self.chip(path)
        if old is None:
            return
        if video_plan is not None:
            from app.filmstrip import VideoChip

            chip = VideoChip(path, video_plan, self, name=old.name)
        else:
            chip = AttachmentChip(path, self, name=old.name)
        chip.remove_requested.connect(self.remove)
        index = self._chips.index(old)
        self._chips[index] = chip
        self._layout.replaceWidget(old, chip)
        old.hide()
        old.deleteLater()
        self._sync()

    @Slot(str)
    def remove(self, path: str) -> None:
        self._ranks.pop(path, None)
        for chip in [c for c in self._chips if c.path == path]:
            self._chips.remove(chip)
            chip.hide()
            chip.deleteLater()
        self._sync()

    @Slot()
    def clear(self) -> None:
        for path in self.paths():
            self.remove(path)

    def _sync(self) -> None:
        self.setVisible(bool(self._chips))
        self._fit_height()
        self.changed.emit()

    def _fit_height(self) -> None:
        """As tall as the chips, plus the scroll bar while they overflow the width (also called when
        the bar's range changes: a chip's size hint read right after it was added can be the layout's
        old one, and the bar then covered the chips' lower edge on an 800 px wide window)."""
        bar = self._scroll.horizontalScrollBar()
        overflow = bar.maximum() > 0 or self._scroll.widget().sizeHint().width() > self._scroll.viewport().width()
        self._scroll.setFixedHeight(self._scroll.widget().sizeHint().height()
                                    + (bar.sizeHint().height() if overflow else 0))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_height()
