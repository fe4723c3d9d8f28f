"""A dismissible inline message shown at the top of the chat: an error, a notice or a success.

Each kind has its own mark and colour (:data:`TONES`); the icon carries the ``tone`` property itself
because a style-sheet rule on a child (``#errorBanner[tone="info"] #bannerIcon``) is not re-evaluated
when only the parent is re-polished, which left notices with the red error mark (issue 19).

The banner sits in the window's column above the transcript, so it pushes the transcript down; a
long message shows :data:`MAX_LINES` lines and scrolls inside the banner (:class:`MessageScroll`).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, Slot
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QWidget,
)

from app.a11y import announce
from app.text_fit import WrappingLabel

#: kind -> (mark, accessible name); colours are in resources/style.qss (``#bannerIcon[tone=...]``).
TONES = {"error": ("!", "Error message"), "info": ("i", "Notice"), "success": ("✓", "Done")}


#: The most lines of a message the banner shows at once; a longer one scrolls inside it. Grown to its
#: whole message (a dropped folder's refused files, one a line), the banner took the chat's column:
#: the transcript left ~70 px tall, the message itself cut off mid-line at the banner's edge.
MAX_LINES = 6
#: The longest run of characters without a break opportunity a banner line holds (~half its width at
#: 800 px): a longer one is given break opportunities.
BREAK_RUN = 40


class MessageScroll(QScrollArea):
    """The banner's message: as tall as its wrapped text, at most :data:`MAX_LINES` lines, then it
    scrolls. It reports its height for a width to the layout, as the bare label did."""

    def __init__(self, label: QLabel) -> None:
        super().__init__()
        self.setObjectName("bannerScroll")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setWidget(label)
        self.viewport().setAutoFillBackground(False)
        label.setAutoFillBackground(False)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def cap(self) -> int:
        """The most height (px) it takes: :data:`MAX_LINES` lines of the message, and in a short window
        no more than a fifth of it (two lines at least; trial 63: at 800 x 500 with a large font, four
        lines covered two thirds of the chat)."""
        line = self.widget().fontMetrics().lineSpacing()
        window = self.window()
        room = window.height() // 5 if window is not None and window is not self and window.height() > 0 else 0
        return min(MAX_LINES * line, max(2 * line, room)) if room else MAX_LINES * line

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt's name
        return min(self.widget().heightForWidth(width), self.cap())

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt's name
        return True

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = self.widget().sizeHint()
        return QSize(hint.width(), min(hint.height(), self.cap()))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        # A line at least (a window too short for more scrolls the rest), as narrow as the label goes.
        line = self.widget().fontMetrics().lineSpacing()
        return QSize(self.widget().minimumSizeHint().width(), min(self.widget().heightForWidth(self.width()), line))


class Banner(QFrame):
    """Shows one message (the latest) until the user dismisses it or :meth:`dismiss` is called."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("errorBanner")
        self.setAccessibleName("Error message")
        self._icon = QLabel("!")
        self._icon.setObjectName("bannerIcon")
        self._icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        # A path, URL or hash wider than the banner wraps (it was one line cut at the banner's edge).
        self._message = WrappingLabel(run=BREAK_RUN)
        self._message.setObjectName("errorMessage")
        self._text = ""  # the message as given (the label's has break opportunities put in)
        self._lasting: tuple[str, str, Callable[[], None] | None] | None = None  # show_lasting's
        close = QToolButton()
        close.setObjectName("dismissBanner")
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.setAccessibleName("Dismiss message")
        close.clicked.connect(self.dismiss)
        self._action = QPushButton()
        self._action.setObjectName("bannerAction")
        self._action.setAccessibleName("Message action")
        self._action.hide()
        self._action.clicked.connect(self._run_action)
        self._callback: Callable[[], None] | None = None
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 8, 8)
        layout.setSpacing(10)
        layout.addWidget(self._icon, 0, Qt.AlignmentFlag.AlignTop)
        self._scroll = MessageScroll(self._message)
        layout.addWidget(self._scroll, 1)
        layout.addWidget(self._action, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def message(self) -> str:
        return self._text if not self.isHidden() else ""

    @Slot(str)
    def show_error(self, text: str) -> None:
        self._show(text, "error")

    @Slot(str)
    def add_error(self, text: str) -> None:
        """Another error beside the one showing, on its own line (a PDF's error arriving from its
        background job after a drop's other files were refused); else :meth:`show_error`."""
        self._add(text, "error")

    def add_info(self, text: str) -> None:
        """Another notice beside the one showing (:meth:`add_error`'s counterpart); an error showing
        stays, with this line under it."""
        self._add(text, "info")

    def _add(self, text: str, tone: str) -> None:
        shown = self.message() if self.tone() in ("error", "info") and not self._action.isVisibleTo(self) else ""
        if text in shown.split("\n"):
            return
        self._show(f"{shown}\n{text}" if shown else text, "error" if self.tone() == "error" else tone, (text, tone))

    def withdraw(self, lines: list[str]) -> None:
        """Take ``lines`` out of the message showing, where they are among its lines (a notice about
        attachments that are no longer pending); the banner closes when no line is left, as
        :meth:`dismiss` does. A message with a button is left whole (its button acts on it)."""
        if self.isHidden() or self._action.isVisibleTo(self) or not lines:
            return
        shown = self._text.split("\n")
        kept = [line for line in shown if line not in lines]
        if len(kept) == len(shown):
            return
        if not kept:
            self.dismiss()
            return
        self._text = "\n".join(kept)
        self._message.setText(self._text)
        self._scroll.updateGeometry()

    def show_success(self, text: str) -> None:
        """Something the user asked for worked (e.g. an export)."""
        self._show(text, "success")

    def tone(self) -> str:
        """The kind of message showing: "error", "info" or "success" ("" when hidden)."""
        return str(self.property("tone") or "") if not self.isHidden() else ""

    def show_info(self, text: str, action: str = "", callback: Callable[[], None] | None = None) -> None:
        """A neutral message, optionally with one button (e.g. "Undo")."""
        self._show(text, "info")
        if action and callback:
            self._action.setText(action)
            self._action.setAccessibleName(action)
            self._callback = callback
            self._action.show()

    def _show(self, text: str, tone: str, said: tuple[str, str] | None = None) -> None:
        """Show ``text`` in ``tone``; a screen reader is told ``said`` ((text, tone); default: the whole
        text, in ``tone``), at once for an error."""
        mark, name = TONES[tone]
        self._text = text
        self._message.setText(text)
        self._scroll.verticalScrollBar().setValue(0)  # a new message shows from its first line
        self._scroll.updateGeometry()
        self._icon.setText(mark)
        self.setAccessibleName(name)
        for widget in (self, self._icon):  # each re-polished: its own rules depend on the tone
            widget.setProperty("tone", tone)
            widget.style().unpolish(widget)
            widget.style().polish(widget)
        self._action.hide()
        self._callback = None
        self.show()
        said_text, said_tone = said or (text, tone)
        announce(self, said_text, assertive=said_tone == "error")

    def offers_undo(self) -> bool:
        """The banner shows an "Undo" (of a delete)."""
        return self._callback is not None and self._action.text() == "Undo" and not self.isHidden()

    def undo(self) -> bool:
        """Press the banner's "Undo" if it shows one (Ctrl+Z outside a text field); True when it did."""
        if not self.offers_undo():
            return False
        self._run_action()
        return True

    def _run_action(self) -> None:
        callback = self._callback
        self.dismiss()
        if callback:
            callback()

    @Slot()
    def dismiss(self) -> None:
        """Close the message; a lasting one (:meth:`show_lasting`) that another had replaced comes back."""
        closed = self._text
        self._message.clear()
        self._text = ""
        self._action.hide()
        self._callback = None
        self.hide()
        lasting = self._lasting
        if lasting is not None and closed != lasting[0]:
            self.show_info(*lasting)

    def show_lasting(self, text: str, action: str = "", callback: Callable[[], None] | None = None) -> None:
        """An info message about a state that lasts (a message being edited): shown now, and again when
        a later message is closed, until :meth:`end_lasting` (trial 54: an attachment's refusal
        replaced the edit's notice, and its "Cancel edit" was gone for the rest of the edit)."""
        self._lasting = (text, action, callback)
        self.show_info(text, action, callback)

    def add_lasting(self, text: str, action: str = "", callback: Callable[[], None] | None = None) -> None:
        """:meth:`show_lasting` under the message showing (an error that ended the state's first try), as
        :meth:`add_info` adds a line: the state's own message, with its button, comes back once the
        user closes them."""
        self._lasting = (text, action, callback)
        self.add_info(text)

    def end_lasting(self) -> None:
        """The state is over: its message goes, if it shows."""
        lasting, self._lasting = self._lasting, None
        if lasting is not None and self._text == lasting[0] and not self.isHidden():
            self.dismiss()
