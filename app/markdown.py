"""Rendering answers: Markdown text (Qt's own Markdown support) and code blocks with a copy button.

While an answer streams it is plain text appended at the end of one document, so each token lays
out only the last paragraph; when it is complete it is split into typed blocks (text / code) and
rendered once. Qt's Markdown importer leaves headings without space above them and block quotes
as a bare indent: :meth:`RichText.setMarkdown` spaces and marks them (:func:`shape_blocks`). Code
blocks keep each line whole and scroll sideways (:class:`CodeText`), as do tables (:class:`TableText`;
one too big to lay out quickly is shown as its text, :class:`TableAsText`).
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QGuiApplication,
    QPainter,
    QPalette,
    QTextBlock,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextTable,
)
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QTextBrowser,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.icons import icon
from app.zoom import ctrl_wheel

FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)

#: The longest run of characters without a break opportunity that is laid out as it is. Qt wraps a
#: longer one anywhere, scanning the rest of the run for every line: quadratic, so an answer of 5
#: million letters without a space (a broken server, a model stuck on one token) held the window
#: ~10 min. A zero-width space after every LONG_RUN characters of a run keeps it linear (1.7 s).
LONG_RUN = 1000
#: The longest paragraph (characters) a streaming answer grows before it goes on in a new one
#: (:meth:`RichText.append_plain`): ~25 lines of a wide window.
STREAM_BLOCK = 2000
ZERO_WIDTH_SPACE = "\u200b"

#: How answers are read: GitHub's dialect (tables, strikethrough, task lists, autolinks) with raw
#: HTML shown as the text it is (md4c's no-HTML flags).
MARKDOWN_FEATURES = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML

#: Space above a heading, in pixels, by level (1-6). Qt's importer gives headings no margins, so a
#: heading sat on the paragraph before it, reading as that paragraph's last line.
HEADING_SPACE = {1: 18, 2: 16, 3: 12}
HEADING_SPACE_DEFAULT = 10
#: Space below a heading (px): less than above, so the heading goes with the text it introduces.
HEADING_BELOW = 4
#: Space between list items (px). Qt gives items a paragraph's 6 px, which spread a list as loosely
#: as separate paragraphs; a list keeps 6 px from the text before and after it (Qt collapses adjacent
#: margins to the larger one).
LIST_ITEM_SPACE = 2
#: Space above and below a table (px), a paragraph's.
TABLE_SPACE = 6
#: Indent per block-quote level (px), the quote's rule included; Qt's own 40 px read as a stray indent.
QUOTE_INDENT = 18
#: Width (px) of the rule left of a block quote, one per level, drawn in the palette's Mid colour.
QUOTE_RULE = 3
#: Code lines up to this many characters are kept whole and the block scrolls sideways; a block with
#: a longer line (minified code, data) wraps instead. Scrolling sideways through such a line reads
#: nothing, and Qt's line widths (26.6 fixed point) overflow past ~33 million pixels: a 5-million
#: character line laid out whole measured 72 px wide, the rest of it unreachable.
CODE_SCROLL_LIMIT = 2000
#: The most cells (rows × columns, the header row counted) a Markdown table is laid out as a table
#: with. Qt's table layout takes about 0.25 ms a cell, all at once when the answer ends or the chat
#: opens, whatever the rows and columns: 1,000 cells took 0.25 s, a 5,000-row table of 3 columns
#: 5.4 s, and a chat holding one of 20,000 rows 28 s to open. A larger table is shown as its Markdown
#: text in a code block instead (:class:`TableAsText`): that chat opens in 0.5 s. The limit is an
#: answer's, all its tables together: 20 tables of 999 cells each took 3.8 s.
TABLE_CELL_LIMIT = 1000


#: Where Qt's line breaking may already break: breaking spaces, line separators and the zero-width
#: space itself. Not the no-break spaces (U+00A0, U+2007, U+202F): a run joined by them is one run.
BREAKS = " \t\n\r\f\v\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2008\u2009\u200a\u2028\u2029\u205f\u3000\u200b"
#: Characters a zero-width space must not separate from what comes before them: joiners, variation
#: selectors, skin tones, combining marks, keycaps and flag tags (one emoji or one letter on screen).
_GLUE = re.compile("[\u200d\u0300-\u036f\u20d0-\u20ff\ufe00-\ufe0f\U0001f3fb-\U0001f3ff\U000e0020-\U000e007f]")


def breakable(text: str, run: int = 0, limit: int = LONG_RUN) -> tuple[str, int]:
    """``text`` with a zero-width space (display only: :func:`unbreakable` takes them out of what is
    copied; never stored) after every ``limit`` characters of a run without a break opportunity
    (:data:`BREAKS`; not inside an emoji sequence or before a combining mark), and the length of its
    trailing run. ``run``: the trailing run of the text ``text`` continues (streaming; at most ``limit``)."""
    if run + len(text) <= limit:  # no run can be long enough
        tail = _trailing_run(text)
        return text, run + tail if tail == len(text) else tail
    source = "x" * run + text

    def mark(m: re.Match) -> str:
        whole = m.group(0)
        pieces, start = [], 0
        while len(whole) - start > limit:  # more of the run follows these limit characters
            end = start + limit
            glued = whole[end - 1] == "\u200d" or _GLUE.match(whole, end)
            pieces.append(whole[start:end] if glued else whole[start:end] + ZERO_WIDTH_SPACE)
            start = end
        pieces.append(whole[start:])
        return "".join(pieces)
    marked = _long_runs(limit).sub(mark, source)[run:]
    return marked, _trailing_run(marked)


def unbreakable(text: str) -> str:
    """``text`` without the zero-width spaces :func:`breakable` put in (for the clipboard)."""
    return text.replace(ZERO_WIDTH_SPACE, "")


_BREAK = re.compile(f"[{re.escape(BREAKS)}]")


def longest_run(text: str) -> int:
    """Characters in ``text``'s longest run without a break opportunity (:data:`BREAKS`). Linear: a
    search for a run longer than N restarts at every character of a shorter run (a million characters
    in runs of 99,999 took 124 s)."""
    return max(map(len, _BREAK.split(text)), default=0)


_NOT_BREAK = f"[^{re.escape(BREAKS)}]"


@functools.lru_cache(maxsize=4)
def _long_runs(limit: int) -> re.Pattern:
    """A whole run without a break opportunity longer than ``limit``. It starts only where one ends
    (the lookbehind), so each character is read once: ``[^…]{limit}(?=[^…])`` tried a match at every
    character of a shorter run (a 500,000-character answer in runs of 1,000 took 1 s, twice per
    finished answer). Shorter runs do not match at all: a callback for every word took ~0.1 s of a
    740 KB answer's rendering (now ~0.02 s)."""
    return re.compile(rf"(?<!{_NOT_BREAK}){_NOT_BREAK}{{{limit + 1},}}")


def _trailing_run(text: str) -> int:
    """Characters after ``text``'s last break opportunity (at most ~``limit`` here: a backward scan;
    a regex anchored at the end would try every start, quadratic in a long run)."""
    n = 0
    for ch in reversed(text):
        if ch in BREAKS:
            break
        n += 1
    return n


def quote_level(block: QTextBlock) -> int:
    """How deep ``block`` is in block quotes (0: not in one), as Qt's Markdown importer marks it."""
    return int(block.blockFormat().property(QTextFormat.Property.BlockQuoteLevel) or 0)


def quote_base(block: QTextBlock) -> int:
    """The indent steps (of the document's ``indentWidth``) a quoted block's quote starts at: 0 at
    the answer's edge, one per list level it is nested in (a quote in a list item starts under the
    item's text; a list in a quote counts its own level as the quote's content, not its start)."""
    items = block.textList()
    return max(items.format().indent() - 1, 0) if items is not None else block.blockFormat().indent()


#: What ends a sentence after a bare URL rather than the URL (GitHub's autolinks leave these out; Qt's
#: importer kept a full stop in the link: "see https://x.y/z." linked to "https://x.y/z.").
_LINK_END = ".,:;!?"


def _trim_link_ends(block: QTextBlock, cursor: QTextCursor) -> None:
    """Take sentence punctuation off the end of ``block``'s bare links (text and target the same URL)."""
    it = block.begin()
    found = []
    while not it.atEnd():
        fragment = it.fragment()
        fmt = fragment.charFormat()
        text, href = fragment.text(), fmt.anchorHref()
        if fmt.isAnchor() and text == href and text.rstrip(_LINK_END) != text and text.rstrip(_LINK_END):
            found.append((fragment.position(), text, fmt))
        it += 1
    for position, text, fmt in found:
        kept = text.rstrip(_LINK_END)
        link, plain = QTextCharFormat(fmt), QTextCharFormat(fmt)
        link.setAnchorHref(kept)
        for prop in (QTextFormat.Property.IsAnchor, QTextFormat.Property.AnchorHref, QTextFormat.Property.ForegroundBrush):
            plain.clearProperty(prop)  # the link's own, not the text's (bold, italic stay)
        cursor.setPosition(position)
        cursor.setPosition(position + len(kept), QTextCursor.MoveMode.KeepAnchor)
        cursor.setCharFormat(link)
        cursor.setPosition(position + len(kept))
        cursor.setPosition(position + len(text), QTextCursor.MoveMode.KeepAnchor)
        cursor.setCharFormat(plain)


#: Behind inline code: grey at 16% shows on the light and the dark bubble alike (a theme switch keeps it
#: right without rendering the answer again); a monospace font alone read as plain text (trial 55).
CODE_SPAN_BACKGROUND = QColor(128, 128, 128, 40)


def _code_spans_at_text_size(block: QTextBlock, cursor: QTextCursor) -> None:
    """Code at the size of the text around it, on a grey ground (:data:`CODE_SPAN_BACKGROUND`): Qt's
    Markdown importer gives inline code (fixed pitch) and an indented code block (a monospace family)
    the system's fixed font with that font's point size, which stayed put when View ▸ Zoom sized the
    text (trial 51, the indented block)."""
    it = block.begin()
    spans = []
    while not it.atEnd():
        fragment = it.fragment()
        look = fragment.charFormat()
        if look.hasProperty(QTextFormat.Property.FontPointSize) and (
                look.fontFixedPitch() or look.hasProperty(QTextFormat.Property.FontFamilies)):
            spans.append((fragment.position(), fragment.length(), QTextCharFormat(fragment.charFormat())))
        it += 1
    for position, length, fmt in spans:
        fmt.clearProperty(QTextFormat.Property.FontPointSize)
        fmt.setBackground(CODE_SPAN_BACKGROUND)
        cursor.setPosition(position)
        cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
        cursor.setCharFormat(fmt)


def shape_blocks(document: QTextDocument) -> list[QTextBlock]:
    """Space ``document``'s headings and list items and indent its block quotes (see
    :data:`HEADING_SPACE`, :data:`LIST_ITEM_SPACE`, :data:`QUOTE_INDENT`); returns the quoted blocks,
    whose rules :class:`RichText` paints. Only those blocks are changed, in one edit."""
    quotes: list[QTextBlock] = []
    cursor = QTextCursor(document)
    cursor.beginEditBlock()
    block = document.begin()
    while block.isValid():
        fmt = block.blockFormat()
        level, heading = quote_level(block), fmt.headingLevel()
        changed = True
        if heading:
            # The answer's first line stays at the top of its bubble.
            fmt.setTopMargin(HEADING_SPACE.get(heading, HEADING_SPACE_DEFAULT) if block.previous().isValid() else 0)
            fmt.setBottomMargin(HEADING_BELOW)
        elif (items := block.textList()) is not None:
            # A list's first item keeps its space above (a list straight after another stays apart),
            # unless the list is nested in an item.
            if items.itemNumber(block) != 0 or items.format().indent() > 1:
                fmt.setTopMargin(LIST_ITEM_SPACE)
            fmt.setBottomMargin(LIST_ITEM_SPACE)
        else:
            changed = False
        if level:
            fmt.setLeftMargin(level * QUOTE_INDENT)
            quotes.append(block)
            changed = True
        if changed:
            cursor.setPosition(block.position())
            cursor.setBlockFormat(fmt)
        if heading > 4:
            # Qt draws levels 5 and 6 smaller than the text they head (size adjustment -1, -2):
            # body size, bold, as GitHub shows them.
            cursor.setPosition(block.position())
            cursor.setPosition(block.position() + block.length() - 1, QTextCursor.MoveMode.KeepAnchor)
            size = QTextCharFormat()
            size.setProperty(QTextFormat.Property.FontSizeAdjustment, 0)
            cursor.mergeCharFormat(size)
        _trim_link_ends(block, cursor)
        _code_spans_at_text_size(block, cursor)
        block = block.next()
    for frame in document.rootFrame().childFrames():
        # A table has a paragraph's space above and below it (Qt's importer gives it none: its
        # border sat on the list item before it).
        if isinstance(frame, QTextTable):
            table = frame.format()
            table.setTopMargin(max(table.topMargin(), TABLE_SPACE))
            table.setBottomMargin(max(table.bottomMargin(), TABLE_SPACE))
            frame.setFormat(table)
    cursor.endEditBlock()
    return quotes


@dataclass(frozen=True)
class Block:
    kind: str  # "text" | "code" | "table"
    text: str
    language: str = ""


def split_blocks(markdown: str) -> list[Block]:
    """Split at fenced code blocks; an unclosed fence runs to the end (as while streaming)."""
    blocks: list[Block] = []
    pos = 0
    while True:
        start = FENCE.search(markdown, pos)
        if start is None:
            break
        before = markdown[pos:start.start()].strip("\n")
        if before.strip():
            blocks.append(Block("text", before))
        fence, language = start.group(1), start.group(2)
        close = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        end = close.search(markdown, start.end())
        body_end = end.start() if end else len(markdown)
        blocks.append(Block("code", markdown[start.end() + 1:body_end].rstrip("\n"), language))
        pos = end.end() if end else len(markdown)
    rest = markdown[pos:].strip("\n")
    if rest.strip():
        blocks.append(Block("text", rest))
    return blocks


#: A GitHub table's delimiter row: cells of dashes, optionally aligned with colons ("| :-- | --: |").
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def split_tables(text: str) -> list[Block]:
    """``text`` (a text block, no fences) split into text and GitHub tables (a header row, a
    delimiter row, then rows while lines hold a "|"), in order: a table is laid out in a view of its
    own that scrolls sideways (:class:`TableText`) instead of squeezing its columns to the bubble."""
    lines = text.split("\n")
    blocks: list[Block] = []
    start = i = 0
    while i < len(lines) - 1:
        if "|" in lines[i] and _TABLE_DELIMITER.match(lines[i + 1]) and not lines[i].lstrip().startswith(">"):
            end = i + 2
            while end < len(lines) and "|" in lines[end] and lines[end].strip():
                end += 1
            before = "\n".join(lines[start:i]).strip("\n")
            if before.strip():
                blocks.append(Block("text", before))
            blocks.append(Block("table", "\n".join(lines[i:end])))
            start = i = end
            continue
        i += 1
    rest = "\n".join(lines[start:]).strip("\n")
    if rest.strip():
        blocks.append(Block("text", rest))
    return blocks


class RichText(QTextBrowser):
    """A borderless, non-scrolling text view as tall as its document (selectable, links open)."""

    def __init__(self, object_name: str = "assistantText", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(object_name)
        if object_name == "assistantText":  # (its text is its value; the name says what the text is)
            self.setAccessibleName("Answer text")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setOpenExternalLinks(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(0)
        self.viewport().setAutoFillBackground(False)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._run = 0  # the document's trailing run without a break opportunity (breakable)
        self._quotes: list[QTextBlock] = []  # the blocks in a block quote (shape_blocks), for their rules
        self._fit()

    def setPlainText(self, text: str) -> None:
        marked, self._run = breakable(text)
        self._quotes = []
        super().setPlainText(marked)

    def setMarkdown(self, markdown: str) -> None:
        """Show ``markdown`` rendered, its headings, lists and quotes shaped by :func:`shape_blocks`."""
        marked, self._run = breakable(markdown)
        self._quotes = []
        # Raw HTML is text: Qt's importer treated "vector<int>" or "List<T>" in an answer as an
        # unknown tag and dropped the rest of the answer with it (tags a model writes are meant to be read).
        self.document().setMarkdown(marked, MARKDOWN_FEATURES)
        self.moveCursor(QTextCursor.MoveOperation.Start)  # (the document's own setter leaves it at the end:
        # a table wider than its view showed its last columns)
        self._quotes = shape_blocks(self.document())

    def quote_rules(self) -> list[QRectF]:
        """Where the block quotes' rules are drawn, in viewport pixels: one per level of each quoted
        block, joined down to the next block where that is quoted as deeply."""
        dx, dy = -self.horizontalScrollBar().value(), -self.verticalScrollBar().value()
        rules = []
        for block in self._quotes:
            base = quote_base(block) * self.document().indentWidth()
            layout = block.layout()
            top = layout.position().y()
            bottom = top + layout.boundingRect().height()
            after = block.next()
            deeper = quote_level(after) if after.isValid() else 0
            for level in range(1, quote_level(block) + 1):
                end = after.layout().position().y() if deeper >= level else bottom
                x = base + (level - 1) * QUOTE_INDENT + 1
                rules.append(QRectF(x + dx, top + dy, QUOTE_RULE, end - top))
        return rules

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().paintEvent(event)
        if self._quotes:
            painter = QPainter(self.viewport())
            color = self.palette().color(QPalette.ColorRole.Mid)  # at paint time: follows a theme switch
            for rule in self.quote_rules():
                painter.fillRect(rule, color)
            painter.end()

    def createMimeDataFromSelection(self):  # noqa: N802 - Qt's name
        """What a copy or drag of the selection carries: the text without the display's zero-width spaces."""
        data = super().createMimeDataFromSelection()
        if data.hasHtml():
            data.setHtml(unbreakable(data.html()))
        if data.hasText():
            data.setText(unbreakable(data.text()))
        return data

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            # The whole chat zooms (app.zoom): QTextEdit's own Ctrl+wheel would zoom this text alone.
            view = self.parentWidget()
            while view is not None and not hasattr(view, "zoom_requested"):
                view = view.parentWidget()
            if view is not None:
                ctrl_wheel(event, view.zoom_requested)
            event.accept()
            return
        super().wheelEvent(event)

    def append_plain(self, text: str) -> None:
        """Insert ``text`` at the end without touching the rest of the document.

        Qt lays out a block (a paragraph) whole on every insert into it, so a streamed paragraph
        cost its length per token: quadratic, a 500,000-character one held the window ~20 s. Past
        :data:`STREAM_BLOCK` characters the last block is ended at a break opportunity of ``text``
        (or where ``text`` starts) and the text goes on in a new one: a line breaks early there
        while the answer streams, until the finished answer is rendered again."""
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if cursor.block().length() + len(text) > STREAM_BLOCK and "\n" not in text:
            cut = max(text.rfind(" "), text.rfind("\t")) + 1  # 0: no space in it, end the block before it
            head, text = text[:cut], text[cut:]
            if head:
                marked, self._run = breakable(head, self._run)
                cursor.insertText(marked)
            cursor.insertBlock()
            self._run = 0
        marked, self._run = breakable(text, self._run)
        cursor.insertText(marked)

    def _fit(self, *_args) -> None:
        height = math.ceil(self.document().size().height()) + self.contentsMargins().top() + self.contentsMargins().bottom()
        if height != self.height() or self.minimumHeight() != height:
            self.setFixedHeight(max(height, self.fontMetrics().lineSpacing()))

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()


class SidewaysText(RichText):
    """A view whose lines stay whole and that scrolls sideways where one is wider than the view
    (code, tables): as tall as its lines plus the scroll bar where one shows. The vertical wheel
    still scrolls the chat (this view never scrolls down, so it passes the wheel on); a horizontal
    wheel or Shift+wheel scrolls the view."""

    def __init__(self, object_name: str, parent: QWidget | None = None) -> None:
        super().__init__(object_name, parent)
        self.setLineWrapMode(QTextEdit.LineWrapMode.NoWrap)

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt's name
        delta, bar = event.angleDelta(), self.horizontalScrollBar()
        if event.modifiers() & Qt.KeyboardModifier.ShiftModifier and not delta.x() and delta.y() and bar.maximum():
            # Shift+wheel is sideways for a mouse without a tilt wheel (Qt's scroll bar would take
            # Shift as a page step, and the chat's would page the chat): as many steps a notch as
            # Qt's own wheel scrolls lines. A system that turns Shift+wheel into a sideways wheel
            # itself sends delta.x() and goes the usual way.
            bar.setValue(bar.value() - delta.y() * QApplication.wheelScrollLines() * bar.singleStep() // 120)
            event.accept()
            return
        super().wheelEvent(event)

    def _fit(self, *_args) -> None:
        # The bar only where the content is wider than the view; decided here rather than left to Qt
        # (as needed), so that the height below counts it before it shows.
        wide = self.document().size().width() > self.viewport().width()
        bar = self.horizontalScrollBar()
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn if wide else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        margins = self.contentsMargins()
        height = math.ceil(self.document().size().height()) + margins.top() + margins.bottom()
        height = max(height, self.fontMetrics().lineSpacing()) + (bar.sizeHint().height() if wide else 0)
        if height != self.height() or self.minimumHeight() != height:
            self.setFixedHeight(height)


class CodeText(SidewaysText):
    """A code block's text: monospaced, each line whole, scrolling sideways where a line is wider
    than the block (as editors do: a wrapped line restarted at column 0, hiding its indentation).
    A block with a line over :data:`CODE_SCROLL_LIMIT` characters wraps."""

    def __init__(self, code: str, parent: QWidget | None = None) -> None:
        super().__init__("codeText", parent)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        if max((len(line) for line in code.split("\n")), default=0) > CODE_SCROLL_LIMIT:
            self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.setPlainText(code)


class TableText(SidewaysText):
    """A Markdown table at its columns' own widths, scrolling sideways where it is wider than the
    bubble: squeezed to it, a 30-column table wrapped its cells a letter a line (4,355 px tall)."""

    def __init__(self, table: str, parent: QWidget | None = None) -> None:
        super().__init__("assistantText", parent)
        self.setMarkdown(table)


class CodeBlock(QFrame):
    """A monospaced code block with its language and a copy button."""

    copied = Signal(str)

    def __init__(self, code: str, language: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self.code = code
        header = QHBoxLayout()
        header.setContentsMargins(10, 4, 4, 0)
        lang = QLabel(language or "code")
        lang.setObjectName("codeLanguage")
        copy = QToolButton()
        copy.setObjectName("copyCode")
        copy.setIcon(icon("copy"))
        copy.setText("Copy")
        copy.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        copy.setToolTip("Copy code")
        copy.setAccessibleName("Copy code")
        copy.clicked.connect(self.copy)
        header.addWidget(lang)
        header.addStretch(1)
        header.addWidget(copy)
        self.view = CodeText(code)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(header)
        body = QVBoxLayout()
        body.setContentsMargins(10, 2, 10, 8)
        body.addWidget(self.view)
        layout.addLayout(body)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.code)
        self.copied.emit(self.code)


def table_size(table: str) -> tuple[int, int]:
    """The rows (the header not counted) and columns of a Markdown ``table`` (a table block of
    :func:`split_tables`), columns counted in its delimiter row."""
    lines = table.split("\n")
    columns = len(lines[1].strip().strip("|").split("|")) if len(lines) > 1 else 1
    return max(len(lines) - 2, 0), columns


class TableAsText(QWidget):
    """A table too big to lay out as one (over :data:`TABLE_CELL_LIMIT` cells): its Markdown text in
    a code block (monospaced, each row a whole line, scrolling sideways; Copy copies it), under a
    muted note that says why it is not a table (``alone``: it is too big by itself, else with the
    answer's tables before it)."""

    def __init__(self, table: str, parent: QWidget | None = None, alone: bool = True) -> None:
        super().__init__(parent)
        rows, columns = table_size(table)
        self.note = QLabel(f"This table has {rows:,} rows and {columns:,} columns, too many to lay out quickly, "
                           "so it is shown as text." if alone else
                           f"This table ({rows:,} rows, {columns:,} columns) is shown as text: with this answer's "
                           "tables before it, there are too many cells to lay out quickly.")
        self.note.setObjectName("tableNote")
        self.note.setWordWrap(True)
        self.code = CodeBlock(table, "table")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.note)
        layout.addWidget(self.code)


LINE_SEPARATOR = "\u2028"
#: A line that starts a block of its own: a list item, a heading, a quote, a table row, a setext
#: underline or thematic break (CommonMark's block starts, fences excepted: code is split out before).
_BLOCK_START = re.compile(r" {0,3}(?:[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|#{1,6}(?:[ \t]|$)|>|\|"
                          r"|(?:=+|-+)[ \t]*$|(?:[-*_][ \t]*){3,}$)")


_QUOTE = re.compile(r" {0,3}(?:>[ \t]?)+")
_ITEM = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])[ \t]")


def hard_breaks(markdown: str, separator: str = LINE_SEPARATOR) -> str:
    """``markdown`` with the line breaks inside a paragraph kept, as chat apps show an answer: a poem or
    an address streamed line by line, then ran into one paragraph (each break read as a space) once
    the finished answer was rendered (trial 50).

    Such a break becomes U+2028 LINE SEPARATOR inside the paragraph's text, which Qt lays out as a new
    line of the same paragraph (Markdown's own hard break, two spaces or a backslash, became a new
    paragraph in Qt's importer, spaced as one); the next line's indent (and its quote marks, in a
    quote as deep) goes, as Markdown drops it. A break stays as it is where either line starts a
    block (a list item's marker, a heading, a table row, an underline; a list item's line may go on),
    around a blank line, and before or after a line indented as code; a line whose first strong letter
    reads the other way than its paragraph's (Hebrew after English) starts a paragraph of its own.
    Code blocks are not given to this. ``separator``: what a kept break becomes (an export writes
    Markdown's own hard break, two spaces and a newline, which Markdown viewers show as a new line)."""
    out: list[str] = []  # finished lines and paragraphs
    para: list[str] = []  # the paragraph being read: its lines as they will be joined (kept as a list, so
    # a paragraph of 100,000 lines is joined once, not copied at each line)
    depth, last, way = 0, "", ""  # its quote depth, its last line without marks, its direction

    def start(line: str) -> None:
        nonlocal depth, last, way
        if para:
            out.append(separator.join(para))
        para[:] = [line]
        marks = _QUOTE.match(line)
        depth = marks.group(0).count(">") if marks else 0
        last, way = (line[marks.end():] if marks else line), _direction(line)

    for number, line in enumerate(markdown.split("\n")):
        if number == 0:
            start(line)
            continue
        marks = _QUOTE.match(line)
        line_depth = marks.group(0).count(">") if marks else 0
        if depth == line_depth:
            line_text = line[marks.end():] if marks else line
        elif depth and not line_depth:  # a line without the marks goes on in the quote (CommonMark's "lazy" line)
            line_text = line
        else:
            start(line)
            continue
        line_way = _direction(line_text)
        prose = last.strip() and line_text.strip() and not _BLOCK_START.match(line_text)
        if (prose and not last.startswith(("    ", "\t")) and (not _BLOCK_START.match(last) or _ITEM.match(last))
                and (not way or not line_way or way == line_way)):
            kept = para[-1].rstrip(" \t")
            if kept.endswith("\\") and not kept.endswith("\\\\"):  # Markdown's backslash hard break
                kept = kept[:-1]
            para[-1] = kept
            para.append(line_text.lstrip(" \t"))
            last, way = line_text, way or line_way
        elif prose and way and line_way and way != line_way and not depth and not _BLOCK_START.match(last):
            # A line in the other direction than its paragraph (Hebrew after English): a paragraph of its
            # own, laid out in its direction. In one paragraph the first line's direction ruled them all
            # (trial 51: Hebrew lines left-aligned, an English line's full stop on its left).
            start("")
            start(line)
        else:
            start(line)
    out.append(separator.join(para))
    return "\n".join(out)


def _direction(text: str) -> str:
    """"L" or "R": the direction of ``text``'s first strong character (Unicode's bidi classes: "R" for
    Hebrew and Arabic letters), "" when it has none (digits, punctuation)."""
    for char in text:
        kind = unicodedata.bidirectional(char)
        if kind == "L":
            return "L"
        if kind in ("R", "AL"):
            return "R"
    return ""


def render_blocks(markdown: str, parent: QWidget | None = None) -> list[QWidget]:
    """Widgets for a finished answer: Markdown text views, tables and code blocks, in order."""
    widgets: list[QWidget] = []
    blocks = [part for block in split_blocks(markdown)
              for part in ([block] if block.kind == "code" else split_tables(block.text))]
    cells = 0  # laid out as tables so far
    for block in blocks:
        if block.kind == "code":
            widgets.append(CodeBlock(block.text, block.language, parent))
        elif block.kind == "table":
            rows, columns = table_size(block.text)
            alone = (rows + 1) * columns > TABLE_CELL_LIMIT
            big = alone or cells + (rows + 1) * columns > TABLE_CELL_LIMIT
            cells += 0 if big else (rows + 1) * columns
            widgets.append(TableAsText(block.text, parent, alone) if big else TableText(block.text, parent))
        else:
            view = RichText("assistantText", parent)
            view.setMarkdown(hard_breaks(block.text))
            widgets.append(view)
    return widgets
