"""The chat search's hits in the open chat: the words found are marked in its messages, and the view
steps from one hit to the next, newest first (as a messenger's search in a chat), hit by hit inside
a message too.

The sidebar's search lists the chats whose title or messages hold its text; this module is the other
half, for the chat that is open: how often each message shows the text (any case; as the chat shows
its words: Markdown's marks and link addresses left out), where in the message (the display's
zero-width spaces skipped), and the count row under the search field ("2 of 5 in this chat",
↑ older, ↓ newer).
"""

from __future__ import annotations

import re
import unicodedata

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QTextEdit, QToolButton, QWidget

from app.markdown import ZERO_WIDTH_SPACE
from app.store import search_key
from app.text_fit import WrappingLabel, hit_tint, utf16_length
from app.versions import step_button

#: Markdown's marks around words (emphasis, code) and a link's address: not in the displayed text.
_MARKS = re.compile(r"\*\*|__|~~|`|\]\([^)\s]*\)|\[(?=[^\]\n]*\]\()")


def shown_text(markdown: str) -> str:
    """``markdown`` as the chat shows its words, near enough to count hits: without emphasis and code
    marks (``**very** good`` reads "very good") and links' addresses (``[docs](https://…)`` reads "docs")."""
    return _MARKS.sub("", markdown)


def count(text: str, query: str) -> int:
    """How many times ``text`` (a message's stored Markdown) shows ``query`` in any case and form
    (:func:`app.store.search_key`: "STRASSE" finds "Straße", "é" finds "e" and a combining accent), as
    :func:`shown_text` reads it: a hit counted is one that can be marked."""
    return search_key(shown_text(text)).count(search_key(query)) if query else 0


def _pattern(query: str) -> str:
    """A regular expression for ``query`` in displayed text: any case, a composed character in either
    form (the text may hold "é" as "e" and a combining accent: NFD), and a zero-width space allowed
    between any two characters (the display puts them into long runs; :func:`app.markdown.breakable`)."""
    def either(c: str) -> str:
        apart = unicodedata.normalize("NFD", c)
        return re.escape(c) if apart == c else f"(?:{re.escape(c)}|{re.escape(apart)})"
    query = unicodedata.normalize("NFC", query)
    # Not the "e" of an "é" written apart (it is not counted either: search_key composes it).
    return "(?i)" + f"{ZERO_WIDTH_SPACE}?".join(either(c) for c in query) + f"(?!{_COMBINING})" if query else ""


#: The combining marks' blocks (diacritical marks, their extended and supplement blocks, for symbols,
#: half marks): a mark after a hit makes it part of another character.
_COMBINING = "[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]"


#: The most hits of a message marked at once: those around the current hit (the last ones when there
#: is none: the search starts at the newest), so that every hit F3 reaches is marked. Marking and
#: painting take time per mark: 10,000 held the window ~2 s at each search.
MAX_MARKS = 2_000

#: Where a hit is shown: a text view and the cursor selecting it, or a label and the hit's start and
#: length in its text (UTF-16 units, as Qt counts).
Hit = tuple[QTextEdit, QTextCursor] | tuple[QLabel, int, int]


def _spans(message: QWidget, query: str) -> list[tuple[QWidget, int, int]]:
    """Every displayed hit of ``query`` in ``message``, in reading order: its text views' (answers) as
    (view, start, end) document positions, then its labels' (a question's text) as (label, start,
    length); UTF-16 units, as Qt counts."""
    spans: list[tuple[QWidget, int, int]] = []
    if not query:
        return spans
    expression = re.compile(_pattern(query))
    for view in message.findChildren(QTextEdit):
        # Not in the streamed text that a finished answer's rendered blocks replace (hidden, not deleted).
        if view.isHidden() and view.testAttribute(Qt.WidgetAttribute.WA_WState_ExplicitShowHide):
            continue
        if "\n" in query:  # (a hit does not span blocks, as with QTextDocument.find)
            break
        # Found in the plain text by Python, not by QTextDocument.find: each of its calls took longer
        # the longer the document (an answer of 5,000 hits froze the window 4.4 s, of 20,000: 29 s;
        # trial 69 F6). The plain text has one character per document position (a block's end is a
        # line break, an image U+FFFC).
        plain = view.document().toPlainText()
        position = done = 0  # (the UTF-16 position of plain[done])
        for hit in expression.finditer(plain):
            position += utf16_length(plain[done:hit.start()])
            end = position + utf16_length(hit.group(0))
            spans.append((view, position, end))
            position, done = end, hit.end()
    for label in message.findChildren(WrappingLabel):
        text = label.text()
        for hit in expression.finditer(text):
            spans.append((label, utf16_length(text[:hit.start()]), utf16_length(hit.group(0))))
    return spans


def _hit(span: tuple[QWidget, int, int], cursors: dict | None = None) -> Hit:
    """A span of :func:`_spans` as a :data:`Hit` (a view's with its cursor, kept in ``cursors``)."""
    widget, start, end = span
    if not isinstance(widget, QTextEdit):
        return span  # type: ignore[return-value]
    cursor = cursors.get(span) if cursors is not None else None
    if cursor is None:
        cursor = QTextCursor(widget.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        if cursors is not None:
            cursors[span] = cursor
    return widget, cursor


def _found(message: QWidget, query: str) -> tuple[list[tuple[QWidget, int, int]], dict]:
    """:func:`_spans` of ``message``, and the cursors made for them, kept on the message while the
    query and its texts stay the same: F3 marks the same message again at each step, and finding
    and placing 20,000 hits took ~0.3 s of each press (trial 70 N7)."""
    views = message.findChildren(QTextEdit)
    key = (query, tuple((id(v), v.document().revision(), v.isHidden()) for v in views),
           tuple(label.text() for label in message.findChildren(WrappingLabel)))
    kept = getattr(message, "_find_kept", None)
    if kept is None or kept[0] != key:
        kept = (key, _spans(message, query), {})
        message._find_kept = kept
    return kept[1], kept[2]


def mark(message: QWidget, query: str, current: int | None = None) -> Hit | None:
    """Mark ``query`` wherever ``message`` (a transcript message widget) shows it; ``""`` clears the marks.

    ``current``: which of the message's hits (0: the first in reading order) is the one the search
    is at, or None. Text views get an extra selection per hit, the theme's highlight colour for the
    current one and a lighter tint for the others; a label (a question's text) selects the current
    hit and tints the others (:meth:`WrappingLabel.set_marks`). At most :data:`MAX_MARKS` hits are
    marked, around the current one (the last ones when None).
    Returns the current hit (the last displayed one when ``current`` counts past
    them, as the stored text may hold more than is shown), or None (no ``current``, or no hit shown)."""
    spans, cursors = _found(message, query)
    at = min(current, len(spans) - 1) if current is not None and spans else None
    centre = at if at is not None else len(spans) - 1
    first = max(0, min(centre - MAX_MARKS // 2, len(spans) - MAX_MARKS))
    looks: dict[QTextEdit, tuple[QTextCharFormat, QTextCharFormat]] = {}
    selections: dict[QTextEdit, list[QTextEdit.ExtraSelection]] = {v: [] for v in message.findChildren(QTextEdit)}
    current_in: dict[QLabel, tuple[int, int]] = {}
    tints: dict[QLabel, list[tuple[int, int]]] = {}
    for number in range(first, min(len(spans), first + MAX_MARKS)):
        hit = _hit(spans[number], cursors)
        if isinstance(hit[0], QTextEdit):
            view, cursor = hit
            if view not in looks:
                looks[view] = _looks(view)
            selection = QTextEdit.ExtraSelection()
            selection.cursor, selection.format = cursor, looks[view][number == at]
            selections[view].append(selection)
        elif number == at:  # the label's selection: the current hit's look
            current_in[hit[0]] = hit[1:]
        else:
            tints.setdefault(hit[0], []).append(hit[1:])
    for view, chosen in selections.items():
        view.setExtraSelections(chosen)
    for label in message.findChildren(WrappingLabel):
        label.set_marks(tints.get(label, []))
        if label in current_in:
            label.setSelection(*current_in[label])
        elif label.hasSelectedText():
            label.setSelection(0, 0)
    return _hit(spans[at], cursors) if at is not None else None


def _looks(view: QTextEdit) -> tuple[QTextCharFormat, QTextCharFormat]:
    """(another hit's format: the highlight colour, lighter; the current hit's: the highlight)."""
    full = QTextCharFormat()
    full.setBackground(view.palette().color(QPalette.ColorRole.Highlight))
    full.setForeground(view.palette().color(QPalette.ColorRole.HighlightedText))
    light = QTextCharFormat()
    light.setBackground(hit_tint(view.palette()))
    return light, full


def hit_top(hit: Hit) -> int:
    """The y of ``hit`` (from :func:`mark`) in its view's or label's pixels: where to scroll to
    (a label's from :meth:`WrappingLabel.text_layout`)."""
    if isinstance(hit[0], QTextEdit):
        view, cursor = hit
        start = QTextCursor(cursor)
        start.setPosition(cursor.selectionStart())
        return view.viewport().mapTo(view, view.cursorRect(start).topLeft()).y()
    label, start, _length = hit
    document = label.text_layout()
    block = document.findBlock(start)
    top = document.documentLayout().blockBoundingRect(block).top()  # (lays the block out)
    line = block.layout().lineForTextPosition(start - block.position())
    top += line.y() if line.isValid() else 0
    return label.contentsRect().top() + int(top)


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
        self.label.setWordWrap(True)  # a long line would widen the sidebar
        row.addWidget(self.label, 1)
        self.older = self._button("findOlder", "↑", "Older match (F3, Enter in the search)", 1)
        self.newer = self._button("findNewer", "↓", "Newer match (Shift+F3, Shift+Enter in the search)", -1)
        row.addWidget(self.older)
        row.addWidget(self.newer)
        self.hide()

    def _button(self, name: str, text: str, tip: str, step: int) -> QToolButton:
        return step_button(name, text, tip, tip.split(" (")[0], lambda: self.step.emit(step))

    def show_elsewhere(self, messages: int) -> None:
        """None in the versions shown, but in ``messages`` versions not shown ("‹ 1 / 2" under a message)."""
        self.label.setText("In another version: F3 shows it" if messages == 1 else
                           f"In other versions of {messages} messages: F3 shows one")
        self.setVisible(True)

    def show_count(self, number: int | None, count: int, not_shown: bool = False) -> None:
        """``number`` of ``count`` hits (1: the newest; None: none shown yet); hidden for no hits.
        ``not_shown``: hit ``number`` is in the part of a long question its bubble does not show."""
        line = f"{number:,} of {count:,} in this chat" if number else \
            f"{count:,} match{'es' if count != 1 else ''} in this chat"
        if number and not_shown:
            line += ": in the part of a long question not shown (Copy or Edit shows all of it)"
        self.label.setText(line)
        self.setVisible(count > 0)
