"""The chat search's hits in the open chat: the words found are marked in its messages, and the view
steps from one message holding them to the next, newest first (as a messenger's search in a chat).

The sidebar's search lists the chats whose title or messages hold its text; this module is the other
half, for the chat that is open: which of its shown messages hold the text (any case; a message's
stored text, so Markdown marks count), where in them (the display's zero-width spaces skipped), and
the count row under the search field ("2 of 5 in this chat", ↑ older, ↓ newer).
"""

from __future__ import annotations

import re

from PySide6.QtCore import QRegularExpression, Qt, Signal
from PySide6.QtGui import QColor, QPalette, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QTextEdit, QToolButton, QWidget

from app.markdown import ZERO_WIDTH_SPACE
from app.text_fit import WrappingLabel
from app.versions import step_button

#: Markdown's marks around words (emphasis, code) and a link's address: not in the displayed text.
_MARKS = re.compile(r"\*\*|__|~~|`|\]\([^)\s]*\)|\[(?=[^\]\n]*\]\()")


def shown_text(markdown: str) -> str:
    """``markdown`` as the chat shows its words, near enough to count hits: without emphasis and code
    marks (``**very** good`` reads "very good") and links' addresses (``[docs](https://…)`` reads "docs")."""
    return _MARKS.sub("", markdown)


def holds(text: str, query: str) -> bool:
    """Whether ``text`` (a message's stored Markdown) shows ``query`` in any case (casefolded:
    "STRASSE" finds "Straße"), as :func:`shown_text` reads it: a hit counted is one that can be marked."""
    return bool(query) and query.casefold() in shown_text(text).casefold()


def _pattern(query: str) -> str:
    """A regular expression for ``query`` in displayed text: any case, and a zero-width space allowed
    between any two characters (the display puts them into long runs; :func:`app.markdown.breakable`)."""
    return "(?i)" + f"{ZERO_WIDTH_SPACE}?".join(re.escape(c) for c in query) if query else ""


def _q_pattern(query: str) -> QRegularExpression:
    body = "\\x{200B}?".join(QRegularExpression.escape(c) for c in query)
    return QRegularExpression(body, QRegularExpression.PatternOption.CaseInsensitiveOption)


def mark(message: QWidget, query: str, current: bool) -> QWidget | None:
    """Mark ``query`` wherever ``message`` (a transcript message widget) shows it: its answer text's
    views get an extra selection per hit (the theme's highlight colour; ``current``: full, else a
    lighter tint), a question's text label selects its first hit. ``""`` clears the marks.
    Returns the first view or label holding a hit, None when no displayed text does."""
    first = None
    for view in message.findChildren(QTextEdit):
        selections = []
        # Not in the streamed text that a finished answer's rendered blocks replace (hidden, not deleted).
        if query and not (view.isHidden() and view.testAttribute(Qt.WidgetAttribute.WA_WState_ExplicitShowHide)):
            colour = view.palette().color(QPalette.ColorRole.Highlight)
            if not current:
                colour = QColor(colour)
                colour.setAlpha(90)
            look = QTextCharFormat()
            look.setBackground(colour)
            if current:
                look.setForeground(view.palette().color(QPalette.ColorRole.HighlightedText))
            expression = _q_pattern(query)
            cursor = view.document().find(expression)
            while not cursor.isNull() and len(selections) < 1000:
                selection = QTextEdit.ExtraSelection()
                selection.cursor, selection.format = cursor, look
                selections.append(selection)
                cursor = view.document().find(expression, cursor)
        view.setExtraSelections(selections)
        if selections and first is None:
            first = view
    for label in message.findChildren(WrappingLabel):
        hit = re.search(_pattern(query), label.text()) if query else None
        if hit is not None:
            # (Qt counts UTF-16 units: an emoji before the hit is two of them, one Python character)
            start = len(label.text()[:hit.start()].encode("utf-16-le")) // 2
            label.setSelection(start, len(hit.group(0).encode("utf-16-le")) // 2)
            first = first or label
        elif label.hasSelectedText():
            label.setSelection(0, 0)
    return first


def hit_top(view: QWidget, query: str) -> int:
    """The y of the first hit of ``query`` in ``view`` (a text view or label that :func:`mark` found),
    in ``view``'s pixels: where the view should scroll to."""
    if isinstance(view, QTextEdit):
        cursor = view.document().find(_q_pattern(query))
        if not cursor.isNull():
            cursor.setPosition(cursor.selectionStart())
            return view.viewport().mapTo(view, view.cursorRect(QTextCursor(cursor)).topLeft()).y()
    return 0


class FindRow(QWidget):
    """"2 of 5 in this chat  ↑ ↓" under the chat search; hidden while the open chat holds no hit.

    ``step(+1)``: the next older hit (↑, F3, Enter in the search); ``step(-1)``: the next newer (↓)."""

    step = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("findRow")
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 0, 0)
        row.setSpacing(2)
        self.label = QLabel()
        self.label.setObjectName("findCount")
        row.addWidget(self.label, 1)
        self.older = self._button("findOlder", "↑", "Older match (F3, Enter in the search)", 1)
        self.newer = self._button("findNewer", "↓", "Newer match (Shift+F3, Shift+Enter in the search)", -1)
        row.addWidget(self.older)
        row.addWidget(self.newer)
        self.hide()

    def _button(self, name: str, text: str, tip: str, step: int) -> QToolButton:
        return step_button(name, text, tip, tip.split(" (")[0], lambda: self.step.emit(step))

    def show_count(self, number: int | None, count: int) -> None:
        """``number`` of ``count`` hits (1: the newest; None: none shown yet); hidden for no hits."""
        self.label.setText(f"{number} of {count} in this chat" if number else
                           f"{count} message{'s' if count != 1 else ''} in this chat")
        self.setVisible(count > 0)
