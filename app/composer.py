"""The message input: Enter sends, Shift+Enter breaks the line, images can be dropped or pasted."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QMimeData, QRect, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent, QFocusEvent, QImage, QKeyEvent, QResizeEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from app.markdown import longest_run
from app.mime import carries_images, image_from_mime, local_files
from app.zoom import ctrl_wheel

MIN_LINES, MAX_LINES = 1, 8
#: The most characters the composer takes (~250,000 tokens of English: past every model Smolchat runs,
#: most served ones too). Qt lays out a paragraph whole, and one of 5 million characters stalled the
#: window for up to a second at every cursor blink; a paste that would go past this is refused.
MAX_TEXT_CHARS = 1_000_000
#: The longest run of characters without a break opportunity (a space, a line break) a paste may
#: hold: Qt wraps such a run scanning the rest of it for every line, quadratic: a pasted million
#: characters of base64 held the window 43 s, 100,000 take ~0.4 s.
MAX_PASTE_RUN = 100_000


class Composer(QPlainTextEdit):
    """A plain-text editor that emits signals instead of inserting files or images.

    Dropped or pasted files become ``files_added(list[str])``; pasted image data becomes
    ``image_pasted(QImage)``. Validation belongs to the window, not to this widget.
    """

    submitted = Signal()
    files_added = Signal(list)
    image_pasted = Signal(QImage)
    zoom_requested = Signal(int)  # Ctrl+wheel: +1 in, -1 out (app.zoom), as over the chat
    refused = Signal(str)  # why a paste or drop of text was not inserted

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.setAccessibleName("Message")
        self.setPlaceholderText("Ask about an image…")
        self.setTabChangesFocus(True)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # see _fit_height
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self._fit_height()

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if not ctrl_wheel(event, self.zoom_requested):
            super().wheelEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        is_enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if is_enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            event.accept()
            self.submitted.emit()
            return
        if is_enter:  # Shift+Enter: a plain newline, not QPlainTextEdit's line separator
            self.insertPlainText("\n")
            event.accept()
            return
        super().keyPressEvent(event)

    def focusInEvent(self, event: QFocusEvent) -> None:  # noqa: N802 - Qt's name
        super().focusInEvent(event)
        self._show_focus(True)

    def focusOutEvent(self, event: QFocusEvent) -> None:  # noqa: N802 - Qt's name
        super().focusOutEvent(event)
        self._show_focus(False)

    def _show_focus(self, focused: bool) -> None:
        """The frame around the editor (with the attach and send buttons) draws the focus ring
        (``#composerFrame[focused="true"]`` in the style sheet): the editor has no border of its own."""
        frame = self.parentWidget()
        if frame is None or frame.property("focused") == focused:
            return
        frame.setProperty("focused", focused)
        frame.style().unpolish(frame)
        frame.style().polish(frame)

    # Paste (Ctrl+V) and drop both end in insertFromMimeData.
    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return carries_images(source) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        if not self._take_images(source) and not self._too_long(source):
            super().insertFromMimeData(source)

    def _too_long(self, source: QMimeData) -> bool:
        """Emit :attr:`refused` and return True where ``source``'s text would take the composer past
        :data:`MAX_TEXT_CHARS` (what is selected is replaced, so it does not count), or holds a run
        longer than :data:`MAX_PASTE_RUN` without a break opportunity."""
        text = source.text() if source.hasText() else ""
        kept = self.document().characterCount() - 1 - len(self.textCursor().selectedText())
        if len(text) + kept > MAX_TEXT_CHARS:
            self.refused.emit(f"The text was not pasted: it has {len(text):,} characters, and a message takes at most "
                              f"{MAX_TEXT_CHARS:,} (about 250,000 tokens, more than any model here reads). "
                              "Paste a part of it.")
            return True
        if longest_run(text) > MAX_PASTE_RUN:
            self.refused.emit(f"The text was not pasted: it has more than {MAX_PASTE_RUN:,} characters without a "
                              "space or a line break (data rather than words?), which the message box cannot "
                              "show without stalling. Paste a part of it, or attach the file it came from.")
            return True
        return False

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if carries_images(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if carries_images(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        if self._take_images(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dropEvent(event)

    def _take_images(self, mime: QMimeData) -> bool:
        files = local_files(mime)
        if files:
            self.files_added.emit(files)
            return True
        image = image_from_mime(mime)
        if not image.isNull():
            self.image_pasted.emit(image)
            return True
        return False

    def setPlaceholderText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setPlaceholderText(text)
        self._fit_height()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            # The placeholder wraps anew (the text's own lines refit by themselves); after this resize
            # is done: a height set inside it left the viewport at the old height.
            QTimer.singleShot(0, self, self._fit_height)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # (a style sheet's font): the placeholder's lines change
            self._fit_height()

    def placeholder_lines(self) -> int:
        """Lines the placeholder takes while it shows (0 with text): Qt wraps it at the viewport's
        width, as its paintEvent draws it, so a narrow window (a video model's "Ask about an image
        or a video…" at ~460 px) showed its first line and cut the rest off."""
        text = self.placeholderText()
        if not text or not self.document().isEmpty():
            return 0
        margin = round(self.document().documentMargin())
        flags = int(Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextWordWrap)
        wrapped = self.fontMetrics().boundingRect(QRect(0, 0, max(1, self.viewport().width() - margin), 100_000),
                                                  flags, text).height()
        one = self.fontMetrics().boundingRect(QRect(0, 0, 100_000, 100_000), flags, "X").height()
        return round(wrapped / max(1, one))

    def _fit_height(self) -> None:
        line = self.fontMetrics().lineSpacing()
        # laid-out lines (wrapped lines count), or the placeholder's while it shows
        needed = max(round(self.document().size().height()), min(MAX_LINES, self.placeholder_lines()))
        # A scroll bar only when the text is taller than the editor may grow: otherwise its handle sat
        # beside Send as a stray grey pill whenever wrapping made the line count flicker (issue 19).
        policy = Qt.ScrollBarPolicy.ScrollBarAsNeeded if needed > MAX_LINES else Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        if self.verticalScrollBarPolicy() != policy:
            self.setVerticalScrollBarPolicy(policy)
        lines = max(MIN_LINES, min(MAX_LINES, needed))
        margins = self.contentsMargins().top() + self.contentsMargins().bottom()
        padding = 2 * round(self.document().documentMargin()) + margins + 4
        self.setFixedHeight(lines * line + padding)
