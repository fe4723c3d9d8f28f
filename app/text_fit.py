"""Labels that fit their room: :class:`FittingLabel` (word-wrapped at its text's natural width),
:class:`WrappedLabel` (word-wrapped, at least as tall as its lines at its width) and
:class:`ElidedLabel` (one line, shortened with "…" and the whole text in its tooltip).

A word-wrapped label that asks for its text's natural width, not Qt's narrow word-wrap guess.

QLabel with word wrap reports a size hint from a heuristic that ignores the room available, so a
long sentence in a user bubble wrapped into a tall, narrow column (issue 19). :class:`FittingLabel`
asks for the width its longest line needs (capped at ``max_width`` pixels) and lets the layout shrink it
in a narrow window; the height then follows from ``heightForWidth``.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import (
    QClipboard,
    QColor,
    QContextMenuEvent,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QResizeEvent,
    QTextDocument,
)
from PySide6.QtWidgets import QLabel, QMenu, QSizePolicy, QWidget

from app.markdown import breakable, unbreakable


def utf16_length(text: str) -> int:
    """``text``'s length as Qt counts it (UTF-16 units: an emoji outside the BMP is two, one Python
    character): for positions in a label's or a document's text."""
    return len(text.encode("utf-16-le")) // 2


#: The narrowest a label shrinks to in a tight window (pixels), unless its text is shorter.
MIN_WRAP_WIDTH = 120
#: The longest run of characters without a break opportunity a label shows as it is: longer than
#: words (a break inside one would look wrong), short enough for a bubble (URLs, hashes get one
#: every WRAP_RUN characters).
WRAP_RUN = 24


def hit_tint(palette: QPalette) -> QColor:
    """The colour behind a search hit that is not the current one: ``palette``'s highlight, lighter
    (the current hit gets the highlight itself)."""
    tint = QColor(palette.color(QPalette.ColorRole.Highlight))
    tint.setAlpha(90)
    return tint


class WrappingLabel(QLabel):
    """Plain, selectable, word-wrapped text. A label wraps only where a line may break: a pasted
    hash or a run of 300 letters ran on past the label's edge, clipped. So a run without a break
    opportunity gets one (a zero-width space) every ``run`` characters, and what is copied (Copy,
    the context menu, X11's selection) leaves them out: a path or hash pastes as it was."""

    def __init__(self, text: str = "", run: int = WRAP_RUN, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.run = run
        self.setTextFormat(Qt.TextFormat.PlainText)  # a file named "<b>x</b>.png" is not markup
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._marks: list[tuple[int, int]] = []
        self._mark_rects: list[QRectF] | None = None
        super().setText(breakable(text, limit=self.run)[0])

    def text_layout(self) -> QTextDocument:
        """The label's text laid out in a document of its font and its contents' width, as the label
        lays it out (a label does not tell where its characters are): positions in UTF-16 units,
        coordinates from the contents' top left."""
        document = QTextDocument()
        document.setDocumentMargin(0)
        document.setDefaultFont(self.font())
        document.setPlainText(self.text())
        document.setTextWidth(max(1, self.contentsRect().width()))
        return document

    #: The tint of :meth:`set_marks` where the highlight colour would not show (a blue bubble).
    mark_colour: QColor | None = None

    def set_marks(self, marks: list[tuple[int, int]]) -> None:
        """Tint the text's ``(start, length)`` spans (UTF-16 units) under the text, as a text view's
        extra selections do (a label's own selection shows one span only): in :attr:`mark_colour`,
        else the highlight colour, lighter. ``[]`` clears them."""
        colour = self.mark_colour if self.mark_colour is not None else hit_tint(self.palette())
        if marks or self._marks:
            self._marks, self._mark_colour, self._mark_rects = list(marks), colour, None
            self.update()

    def marks(self) -> list[tuple[int, int]]:
        return list(self._marks)

    def mark_rects(self) -> list[QRectF]:
        """The tinted areas of :meth:`set_marks`' spans, one a line a span covers (label pixels)."""
        if self._mark_rects is None:
            document, rects = self.text_layout(), []
            layout, origin = document.documentLayout(), self.contentsRect().topLeft()
            for start, length in self._marks:
                end, position = start + length, start
                while position < end:
                    block = document.findBlock(position)
                    if not block.isValid():
                        break
                    top = layout.blockBoundingRect(block).top()
                    lines = block.layout()
                    for number in range(lines.lineCount()):
                        line = lines.lineAt(number)
                        first = block.position() + line.textStart()
                        last = first + line.textLength()
                        if last <= start or first >= end:
                            continue
                        x1 = line.cursorToX(max(start, first) - block.position())
                        x2 = line.cursorToX(min(end, last) - block.position())
                        x1, x2 = (x1[0] if isinstance(x1, tuple) else x1), (x2[0] if isinstance(x2, tuple) else x2)
                        rects.append(QRectF(min(x1, x2), top + line.y(), abs(x2 - x1), line.height())
                                     .translated(origin.x(), origin.y()))
                    position = block.position() + block.length()
            self._mark_rects = rects
        return self._mark_rects

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._mark_rects = None  # the lines break elsewhere

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt's name
        if self._marks:
            painter = QPainter(self)
            for rect in self.mark_rects():
                painter.fillRect(rect, self._mark_colour)
            painter.end()
        super().paintEvent(event)

    # -- copying: the selection without the display's zero-width spaces (Qt's own copy keeps them) --
    def selected_text(self) -> str:
        return unbreakable(self.selectedText())

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        if event.matches(QKeySequence.StandardKey.Copy) and self.hasSelectedText():
            QGuiApplication.clipboard().setText(self.selected_text())
            event.accept()
            return
        super().keyPressEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        super().mouseReleaseEvent(event)  # (sets the X11 primary selection from Qt's text)
        clipboard = QGuiApplication.clipboard()
        if clipboard.supportsSelection() and self.hasSelectedText():
            clipboard.setText(self.selected_text(), QClipboard.Mode.Selection)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 - Qt's name
        menu = QMenu(self)
        copy = menu.addAction("Copy", lambda: QGuiApplication.clipboard().setText(self.selected_text()))
        copy.setEnabled(self.hasSelectedText())
        menu.addAction("Select All", lambda: self.setSelection(0, len(self.text())))
        menu.exec(event.globalPos())


class FittingLabel(WrappingLabel):
    """Plain, selectable, word-wrapped text as wide as its longest line, up to ``max_width`` px."""

    def __init__(self, text: str, object_name: str, max_width: int, parent: QWidget | None = None) -> None:
        super().__init__(text, WRAP_RUN, parent)
        self.setObjectName(object_name)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.max_width = max_width

    def natural_width(self) -> int:
        """Pixels the text needs unwrapped (its longest line), contents margins included, at most ``max_width``."""
        metrics = self.fontMetrics()
        longest = max((metrics.horizontalAdvance(line) for line in self.text().split("\n")), default=0)
        margins = self.contentsMargins()
        return min(self.max_width, longest + 2 + margins.left() + margins.right())

    def sizeHint(self) -> QSize:
        width = self.natural_width()
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:
        # The height is the least the text needs (at its natural width): the layout asks
        # heightForWidth for the width it gives. The height at the narrowest width instead was kept
        # by the transcript's scroll area as the bubble's minimum (a long question: ~900 px of blank
        # space below the last answer).
        return QSize(min(self.natural_width(), MIN_WRAP_WIDTH), self.heightForWidth(self.natural_width()))


class WrappedLabel(QLabel):
    """Word-wrapped text whose least height is what its lines take at the width it has.

    A window's least height is the sum of its widgets' least heights, and Qt's for a word-wrapped
    label is one guess, whatever the width: where a narrow window wrapped the line under the message box
    onto more lines than that, the column came up short and its layout squeezed the widgets above the
    label below their own minimums: at the window's minimum size the message box was cut through its
    line of text (trial 50). Here a narrower label asks for the height it needs, and a top-level window
    then keeps at least that much taller."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = super().minimumSizeHint()
        if not self.isVisible():  # not laid out yet: its width is Qt's default, not one it was given
            return hint
        return QSize(hint.width(), max(hint.height(), self.heightForWidth(self.width())))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()  # the layouts above ask minimumSizeHint again


class ElidedLabel(QLabel):
    """One line of plain text that ends in "…" where its room is too short (a status bar in a
    narrow window clipped its texts mid-word), the whole text then its tooltip (no tooltip while it
    fits). :meth:`text` is the whole text; ``min_chars`` characters' width is the least it asks for."""

    def __init__(self, parent: QWidget | None = None, min_chars: int = 8) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.min_chars = min_chars
        self._tip = ""

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setText(text)
        self._sync_tip()

    def set_tip(self, tip: str) -> None:
        """A tooltip shown whether or not the text fits (it should hold the whole text); "": the default."""
        self._tip = tip
        self._sync_tip()

    def shown_text(self) -> str:
        """What is painted: the text, elided to the width it has."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def is_elided(self) -> bool:
        return self.shown_text() != self.text()

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        least = self.fontMetrics().horizontalAdvance("x" * self.min_chars + "…")
        margins = self.contentsMargins()
        return QSize(min(hint.width(), least + margins.left() + margins.right()), hint.height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._sync_tip()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        self.style().drawItemText(painter, self.contentsRect(), int(self.alignment()), self.palette(),
                                  self.isEnabled(), self.shown_text(), self.foregroundRole())

    def _sync_tip(self) -> None:
        self.setToolTip(self._tip or (self.text() if self.is_elided() else ""))
