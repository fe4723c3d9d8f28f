"""Rendering answers: Markdown text (Qt's own Markdown support) and code blocks with a copy button.

While an answer streams it is plain text appended at the end of one document, so each token lays
out only the last paragraph; when it is complete it is split into typed blocks (text / code) and
rendered once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication, QTextCursor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QTextBrowser, QToolButton, QVBoxLayout, QWidget

from app.icons import icon

FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    kind: str  # "text" | "code"
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


class RichText(QTextBrowser):
    """A borderless, non-scrolling text view as tall as its document (selectable, links open)."""

    def __init__(self, object_name: str = "assistantText", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(object_name)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setOpenExternalLinks(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(0)
        self.viewport().setAutoFillBackground(False)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._fit()

    def append_plain(self, text: str) -> None:
        """Insert ``text`` at the end without touching the rest of the document."""
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)

    def _fit(self, *_args) -> None:
        height = math.ceil(self.document().size().height()) + self.contentsMargins().top() + self.contentsMargins().bottom()
        if height != self.height() or self.minimumHeight() != height:
            self.setFixedHeight(max(height, self.fontMetrics().lineSpacing()))

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()


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
        self.view = RichText("codeText")
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.view.setPlainText(code)
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


def render_blocks(markdown: str, parent: QWidget | None = None) -> list[QWidget]:
    """Widgets for a finished answer: Markdown text views and code blocks, in order."""
    widgets: list[QWidget] = []
    for block in split_blocks(markdown):
        if block.kind == "code":
            widgets.append(CodeBlock(block.text, block.language, parent))
        else:
            view = RichText("assistantText", parent)
            view.setMarkdown(block.text)
            widgets.append(view)
    return widgets
