"""Message widgets of the transcript: the user's bubble and the assistant's streamed answer.

Each message has a row of actions (copy; edit for the user, regenerate for the assistant; delete;
``previous_version`` / ``next_version`` from its version switcher) that it only announces through
``action_requested(str)``: the window decides what they do.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTextBoundaryFinder, Signal
from PySide6.QtGui import QColor, QGuiApplication, QKeyEvent, QMouseEvent, QMovie
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.filmstrip import message_video
from app.focus import activates, give_focus_back
from app.formatting import message_time
from app.icons import icon
from app.image_viewer import ImageViewer
from app.markdown import RichText, render_blocks
from app.text_fit import ElidedLabel, FittingLabel, utf16_length
from app.thumbnails import fit_image, is_animation, rounded, thumbnail
from app.versions import VersionSwitcher
from app.video_attachments import is_video_file
from app.wait_progress import WaitProgress

BUBBLE_MAX_WIDTH = 560
#: The most characters of a question its bubble shows; the rest is counted in a line under them. A
#: word-wrapped label lays its whole text out again whenever the chat scrolls past it: a stored
#: 1,000,000-character question (an import, a server model's long context) scrolled the chat at
#: 170 ms a wheel notch; 20,000 characters take 5 ms. Copy and Edit take the whole text.
USER_TEXT_SHOWN = 20_000


def shown_length(text: str, limit: int = USER_TEXT_SHOWN) -> int:
    """How many characters of ``text`` to show: at most ``limit``, cut between two graphemes (Unicode
    UAX #29, Qt's boundary finder), so an emoji sequence, a flag or a letter with its accents is shown
    whole or not at all. The finder reads 64 characters either side of the cut, not the whole text."""
    if len(text) <= limit:
        return len(text)
    start = max(0, limit - 64)
    window = text[start:limit + 64]
    finder = QTextBoundaryFinder(QTextBoundaryFinder.BoundaryType.Grapheme, window)
    finder.setPosition(utf16_length(window[:limit - start]))  # Qt counts UTF-16 units, Python code points
    if not finder.isAtBoundary():
        finder.toPreviousBoundary()
    cut = finder.position()
    kept = window.encode("utf-16-le")[:2 * max(cut, 0)].decode("utf-16-le")
    return start + len(kept)


IMAGE_BOX = QSize(240, 180)
#: The tint of a search hit in a question (not the current one, which is selected: white): a darker
#: blue under the white text, which keeps it readable (the bubble's #4a5af0 darkened by 45%).
QUESTION_MARK = QColor(0, 0, 40, 115)
VIDEO_BOX = QSize(260, 96)
ACTIONS = {
    "copy": ("copy", "Copy text"),
    "edit": ("edit", "Edit and resend"),
    "regenerate": ("regenerate", "Regenerate answer"),
    "delete": ("delete", "Delete message"),
    "continue": ("continue", "Continue the answer from where it stopped"),
}
#: The buttons' accessible names, where the tooltip's words would not say whose message it is.
SPOKEN = {"copy": "Copy {whose}", "edit": "Edit question and resend", "delete": "Delete {whose}"}
#: How much of a message its buttons' accessible description quotes (characters).
DESCRIBED_CHARS = 80
#: The answers Continue is offered for (the chat's last one, with text): cut short by the token limit,
#: by Stop, by a quit, or by an error after some of it (a server that hung up: Continue tries again).
CONTINUABLE = ("length", "cancelled", "interrupted", "error")


def _tab_stops(widget: QWidget) -> list[QWidget]:
    """``widget`` and its descendants that Tab stops at, in their focus-chain order."""
    inside = [widget] + widget.findChildren(QWidget)
    stops, seen, current = [], set(), widget
    for _ in range(len(inside) + 1):
        if current in seen:
            break
        seen.add(current)
        if current in inside and current.focusPolicy() & Qt.FocusPolicy.TabFocus:
            stops.append(current)
        current = current.nextInFocusChain()
    return stops


class ActionRow(QWidget):
    """Small flat buttons under a message."""

    triggered = Signal(str)

    def __init__(self, names: list[str], align_right: bool, parent: QWidget | None = None, whose: str = "message") -> None:
        """``whose``: "question" or "answer", in the buttons' accessible names (a screen reader tabbing
        through a chat heard "Copy text, Delete message" for every message alike)."""
        super().__init__(parent)
        self.setObjectName("messageActions")
        self.whose = whose
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(2)
        # When it was sent, on the side away from the bubble's edge (set_time; empty until then).
        self.time = QLabel()
        self.time.setObjectName("messageTime")
        self.sent_at: float | None = None
        if align_right:
            row.addStretch(1)
            row.addWidget(self.time)
        self._notes: dict[str, str] = {}  # action -> a second tooltip line (set_note)
        self.versions = VersionSwitcher()  # "‹ 2 / 3 ›" once the message has other versions
        self.versions.step.connect(lambda step: self.triggered.emit("previous_version" if step < 0 else "next_version"))
        row.addWidget(self.versions)
        for name in names:
            icon_name, tip = ACTIONS[name]
            button = QToolButton()
            button.setObjectName(f"{name}Message")
            button.setIcon(icon(icon_name))
            button.setIconSize(QSize(15, 15))
            button.setToolTip(tip)
            button.setAccessibleName(SPOKEN.get(name, tip).format(whose=whose))
            button.setAutoRaise(True)
            button.clicked.connect(lambda _=False, n=name: self.triggered.emit(n))
            if name == "continue":  # words, not an icon alone: the one way on after a cut-off answer
                button.setText("Continue")
                button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
                button.hide()
            row.addWidget(button)
        if not align_right:
            row.addWidget(self.time)
            row.addStretch(1)

    def button(self, name: str) -> QToolButton:
        return self.findChild(QToolButton, f"{name}Message")

    def describe(self, text: str) -> None:
        """Say which message the buttons act on: its start, as each button's accessible description."""
        start = " ".join(text[:4 * DESCRIBED_CHARS].split())  # (an answer may be megabytes)
        start = start if len(start) <= DESCRIBED_CHARS else start[:DESCRIBED_CHARS].rstrip() + "…"
        description = f"{self.whose.capitalize()}: {start}" if start else ""
        for button in self.findChildren(QToolButton):
            button.setAccessibleDescription(description)

    def set_time(self, when: float | None, now: float | None = None) -> None:
        """Show when the message was sent (seconds since the epoch; None: nothing shown), as of ``now``
        (default: the clock), the full date and time in its tooltip (:func:`app.formatting.message_time`)."""
        self.sent_at = when
        shown, full = message_time(when, time.time() if now is None else now) if when is not None else ("", "")
        self.time.setText(shown)
        self.time.setToolTip(full)
        self.time.setAccessibleName(f"Sent {full}" if full else "")

    def set_changes_enabled(self, enabled: bool) -> None:
        """Enable or grey out what changes the conversation (edit, regenerate, delete, the version
        switch); Copy stays. Off while an answer streams: the window ignores them then."""
        self.versions.setEnabled(enabled)
        for name in ACTIONS:
            button = self.button(name)
            if button is not None and name != "copy":
                button.setEnabled(enabled)
                self._set_tip(name)

    def set_note(self, name: str, note: str) -> None:
        """A second line for button ``name``'s tooltip ("" for none), e.g. why Regenerate gives the same answer."""
        self._notes[name] = note
        self._set_tip(name)

    def _set_tip(self, name: str) -> None:
        button = self.button(name)
        if button is None:
            return
        tip = ACTIONS[name][1]
        if not button.isEnabled():
            tip += " (after the answer, or Stop)"
        note = self._notes.get(name)
        button.setToolTip(f"{tip}\n{note}" if note else tip)


class ClickableImage(QLabel):
    """A thumbnail that opens the full image when clicked, or when Enter or Space is pressed on it: it
    is a Tab stop with a focus ring (trial 50: only a mouse could open it). ``name``: the name it was
    attached as ("": the file's own, which for a copy in the image store is a hash).

    An animation (GIF, WebP) carries a "GIF" badge and plays while the pointer is over it or it has
    the focus, then stops on the frame it reached: a chat of them playing at once would take the CPU
    an answer on the CPU needs, and movement beside the text being read distracts."""

    def __init__(self, path: str, box: QSize, square: bool, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(parent)
        self.path = path
        self.name = name or Path(path).name
        self.setObjectName("messageImage")
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click opens it: no focus ring left behind
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._box, self._square = box, square
        self.setPixmap(thumbnail(path, box, square=square, radius=12, dpr=self.devicePixelRatioF()))
        self.viewer: ImageViewer | None = None
        self.movie: QMovie | None = None  # made when first played: a long chat of them holds no open files
        self.animated = is_animation(path)
        if self.animated:
            self.badge = QLabel("GIF", self)
            self.badge.setObjectName("animationBadge")
        what = "animation" if self.animated else "image"
        self.setToolTip(f"{self.name} — click to view full size" + (" (hover to play)" if self.animated else ""))
        self.setAccessibleName(f"View {self.name} full size" + (", an animation" if self.animated else ""))
        self.setAccessibleDescription(f"Press Enter or Space to open the {what} at full size")

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self.animated:  # the badge in the picture's lower left corner (QLabel centres it vertically)
            self.badge.adjustSize()
            area, shown = self.contentsRect(), self.pixmap().deviceIndependentSize().toSize()
            bottom = area.top() + (area.height() + shown.height()) // 2
            self.badge.move(area.left() + 6, max(area.top(), bottom - self.badge.height() - 6))

    def playing(self) -> bool:
        return self.movie is not None and self.movie.state() == QMovie.MovieState.Running

    def _play(self, on: bool) -> None:
        if not self.animated or on == self.playing():
            return
        if on and self.movie is None:
            self.movie = QMovie(self.path, parent=self)
            self.movie.frameChanged.connect(self._show_frame)
        if on:
            self.movie.start() if self.movie.state() == QMovie.MovieState.NotRunning else self.movie.setPaused(False)
        else:
            self.movie.setPaused(True)

    def _show_frame(self, _number: int) -> None:
        dpr = self.devicePixelRatioF()
        box = QSize(round(self._box.width() * dpr), round(self._box.height() * dpr))
        frame = self.movie.currentImage()
        if not frame.isNull():
            self.setPixmap(rounded(fit_image(frame, box, self._square), 12, dpr))

    def enterEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self._play(True)
        super().enterEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self._play(self.hasFocus())
        super().leaveEvent(event)

    def focusInEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self._play(True)
        super().focusInEvent(event)

    def focusOutEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self._play(self.underMouse())
        super().focusOutEvent(event)

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self._play(False)  # its chat closed, or the window minimised
        super().hideEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.open_viewer()
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        if activates(event):
            event.accept()
            self.open_viewer()
            return
        super().keyPressEvent(event)

    def open_viewer(self) -> ImageViewer:
        self._play(False)  # the viewer plays it
        self.viewer = ImageViewer(self.path, self.window(), self.name)
        give_focus_back(self.viewer, self.window())  # to this photo, when it was opened from the keyboard
        self.viewer.show()
        return self.viewer


class MissingMedia(QLabel):
    """In place of a stored photo or video gone from the data folder: a dashed box naming it (as
    attached) and saying it is missing, which nothing opens. A thumbnail of nothing was a 6-px sliver
    that opened an empty viewer, and a video showed its cached filmstrip, its click doing nothing
    (trial 69 F8)."""

    def __init__(self, path: str, box: QSize, name: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.name = name or Path(path).name
        what = "video" if is_video_file(path) else "photo"
        self.setObjectName("missingMedia")
        self.setText(f"{self.name}\n({what} missing)")
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setFixedSize(min(box.width(), 200), min(box.height(), 96))
        self.setToolTip(f"{self.name}: this {what} is no longer in Smolchat's data folder")
        self.setAccessibleName(f"{self.name}, {what} missing")


class UserMessage(QWidget):
    """A right-aligned bubble with the user's images (thumbnails) above their text. ``names``: the name
    each image was attached as (the message's ``attached_names``; "" or missing: unknown), which its
    thumbnail and viewer show instead of the stored copy's hash."""

    role = "user"
    action_requested = Signal(str)

    def __init__(self, text: str, images: list[str], parent: QWidget | None = None, names: list[str] | None = None) -> None:
        super().__init__(parent)
        self.text = text
        self.images = list(images)
        self.attached_names = list(names or [])
        self.status = "done"
        bubble = QFrame()
        bubble.setObjectName("userBubble")
        bubble.setMaximumWidth(BUBBLE_MAX_WIDTH)
        inner = QVBoxLayout(bubble)
        inner.setContentsMargins(6, 6, 6, 6) if images else inner.setContentsMargins(14, 10, 14, 10)
        inner.setSpacing(6)
        if images:
            # Rows that wrap within the bubble's width: one row of a dropped folder's 24 photos made
            # the window 3,000 px wide.
            rows = QVBoxLayout()
            rows.setSpacing(6)
            box = IMAGE_BOX if len(images) == 1 else QSize(120, 120)
            row, width = None, 0
            padded = list(names or []) + [""] * len(images)  # zip stops at the images' end
            for path, name in zip(images, padded):
                if not Path(path).is_file():
                    widget = MissingMedia(path, box, name)
                elif is_video_file(path):  # a filmstrip; a click plays it
                    widget = message_video(path, QSize(VIDEO_BOX.width(), VIDEO_BOX.height()), name)
                else:
                    widget = ClickableImage(path, box, len(images) > 1, name=name)
                wide = max(widget.sizeHint().width(), widget.minimumWidth(), 1)
                if row is None or width + 6 + wide > BUBBLE_MAX_WIDTH - 12:
                    if row is not None:
                        row.addStretch(1)
                    row, width = QHBoxLayout(), -6
                    row.setSpacing(6)
                    rows.addLayout(row)
                row.addWidget(widget)
                width += 6 + wide
            row.addStretch(1)
            inner.addLayout(rows)
        if text:  # as wide as the sentence needs, up to the bubble's width (not Qt's narrow guess)
            shown = shown_length(text)
            label = FittingLabel(text[:shown], "userText", BUBBLE_MAX_WIDTH - 28)
            label.mark_colour = QUESTION_MARK  # search hits: the highlight's tint would not show on the blue
            if images:
                label.setContentsMargins(8, 0, 8, 4)
            inner.addWidget(label)
            if len(text) > shown:
                more = QLabel(f"… {len(text) - shown:,} more characters (Copy copies all, Edit shows all)")
                more.setObjectName("userTextMore")
                more.setWordWrap(True)
                if images:
                    more.setContentsMargins(8, 0, 8, 4)
                inner.addWidget(more)
        self.actions_row = ActionRow(["copy", "edit", "delete"], align_right=True, whose="question")
        self.actions_row.describe(text)
        self.actions_row.triggered.connect(self._on_action)
        line = QHBoxLayout()
        line.addStretch(1)
        line.addWidget(bubble)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(80, 0, 0, 0)
        outer.setSpacing(2)
        outer.addLayout(line)
        outer.addWidget(self.actions_row)

    def _on_action(self, name: str) -> None:
        if name == "copy":
            QGuiApplication.clipboard().setText(self.text)
        self.action_requested.emit(name)


class AssistantMessage(QWidget):
    """A left-aligned answer that grows token by token, with a muted footer once it is done.

    While streaming, tokens are appended to one plain-text document (only its last line is laid
    out again); :meth:`finish` renders the Markdown once.
    """

    role = "assistant"
    action_requested = Signal(str)

    def __init__(self, model_name: str = "Smolchat", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = ""
        self.images: list[str] = []
        self.finish_reason: str | None = None
        self.status = "streaming"
        self.can_continue = True  # False: it filled the model's context (see app.formatting.context_full)
        avatar = QLabel("S")
        avatar.setObjectName("assistantAvatar")
        avatar.setAccessibleName("Answer")  # (read first: what follows is an answer, not a letter "S")
        avatar.setAlignment(Qt.AlignmentFlag.AlignCenter)
        avatar.setFixedSize(30, 30)
        # Elided: a long model name ("SmolLM2-135M-Instruct.Q4_1.gguf + …") at a large zoom made the
        # bubble wider than the chat in a small window, its right side out of reach.
        name = self._name = ElidedLabel()
        name.setText(model_name)
        name.setObjectName("assistantName")
        self.engine = ""  # where it was written (set_engine)
        self._stream = RichText("assistantText")
        self._stream.setPlainText("…")
        self._blocks: list[QWidget] = []
        self._footer = QLabel("")
        self._footer.setObjectName("messageFooter")
        self._footer.setWordWrap(True)
        self._footer.hide()
        self.waiting = WaitProgress()  # until the first word: what the engine reads, how far it is
        self._column = QVBoxLayout()
        self._column.setSpacing(6)
        self._column.addWidget(name)
        self._column.addWidget(self._stream)
        self._column.addWidget(self.waiting)
        self._column.addWidget(self._footer)
        bubble = QFrame()
        bubble.setObjectName("assistantBubble")
        bubble.setMaximumWidth(BUBBLE_MAX_WIDTH + 120)
        bubble_layout = QVBoxLayout(bubble)
        bubble_layout.setContentsMargins(14, 10, 14, 10)
        bubble_layout.addLayout(self._column)
        self.actions_row = ActionRow(["copy", "regenerate", "delete", "continue"], align_right=False, whose="answer")
        self.actions_row.triggered.connect(self._on_action)
        self.actions_row.hide()
        right = QVBoxLayout()
        right.setSpacing(2)
        # Held left by a stretch after it: alone in the column, a box layout centres a bubble narrower
        # than the column (its maximum width), and the answer floated right, away from its avatar (issue 19).
        row = QHBoxLayout()
        row.addWidget(bubble, 1)
        row.addStretch(0)
        right.addLayout(row)
        right.addWidget(self.actions_row)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 40, 0)
        outer.setSpacing(10)
        outer.addWidget(avatar, 0, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        outer.addLayout(right, 1)

    def append(self, piece: str) -> None:
        if not self.text:
            piece = piece.lstrip()  # the model's first token usually carries the space after "Assistant:"
        if not piece:
            return
        if not self.text:
            self.waiting.hide()
            self._stream.clear()
        self.text += piece
        self._stream.append_plain(piece)

    def restore(self, text: str, finish_reason: str, footer: str = "") -> None:
        """Show a stored answer, finished (restoring a conversation). Its text is rendered once, not set
        first as the plain text a streaming answer shows and then hidden (a 740 KB answer's opening took
        ~1.2 s in the window, ~1.0 s with this and :func:`~app.markdown.breakable`'s callback for long
        runs only)."""
        self.text = text
        self.finish(finish_reason, footer)
        if text and not self._blocks:  # (nothing to render: blank lines)
            self._stream.setPlainText(text)

    def show_progress(self, event) -> None:
        """The engine's progress before the first word (an ``engine.api.ProgressEvent``)."""
        if not self.text and self.status == "streaming":
            self.waiting.set_event(event)

    def finish(self, finish_reason: str, footer: str = "") -> None:
        self.waiting.hide()
        self.finish_reason = finish_reason
        self.status = finish_reason if finish_reason != "stop" else "done"
        if not self.text:
            self._stream.setPlainText("(no answer)" if finish_reason != "error" else "(failed)")
        else:
            self._render_markdown()
        self._footer.setText(footer)
        self._footer.setVisible(bool(footer))
        self.actions_row.describe(self.text)
        self.actions_row.show()

    def resume(self) -> None:
        """Stream again after the text already here (Continue): the rendered Markdown goes back to
        the plain text that tokens are appended to, until :meth:`finish` renders it again."""
        self._drop_blocks()
        self._stream.setPlainText(self.text)
        self._stream.show()
        self.status, self.finish_reason = "streaming", None
        self._footer.hide()
        self.actions_row.hide()

    def set_model_name(self, name: str) -> None:
        """The name over the answer: who wrote it (two models for one continued by another)."""
        self._name.setText(name)
        self.set_engine(self.engine)

    def set_engine(self, engine: str) -> None:
        """Where the answer was written (its stats' ``engine``: "local", "remote:SERVER"; "": unknown),
        said in the name's tooltip: a local model and a server's of one name look alike (trial 55)."""
        self.engine = engine
        where = f"on the server {engine.removeprefix('remote:')}" if engine.startswith("remote:") else \
            "on this computer" if engine else ""
        self._name.set_tip(f"Written by {self._name.text()} {where}" if where else "")

    def model_name(self) -> str:
        return self._name.text()

    def set_continuable(self, continuable: bool) -> None:
        """Show Continue under this answer (see :data:`CONTINUABLE`)."""
        self.actions_row.button("continue").setVisible(continuable)

    def footer(self) -> str:
        return self._footer.text()

    def rendered_widgets(self) -> list[QWidget]:
        return list(self._blocks)

    def _drop_blocks(self) -> None:
        for widget in self._blocks:
            widget.hide()
            widget.deleteLater()
        self._blocks = []

    def _render_markdown(self) -> None:
        self._drop_blocks()  # finished again (a continuation that added nothing is put back as it was)
        index = self._column.indexOf(self._stream)
        self._blocks = render_blocks(self.text)
        if not self._blocks:
            return
        width, live = self._stream.width(), self.isVisible()
        self._stream.hide()
        for offset, widget in enumerate(self._blocks):
            self._column.insertWidget(index + 1 + offset, widget)
            if live:
                # Shown and sized now, at the width of the streamed text they replace: shown later (Qt's
                # default for a widget added to a shown window) and sized by later layout passes, the
                # answer was drawn for a moment as an empty bubble, or with its last lines over its
                # footer. (A stored answer is laid out before it is first drawn: its width is not known
                # yet, and a guess squeezed its code blocks.)
                widget.show()
                for _ in range(2):  # a code block's text takes its height from the first, its frame from the second
                    widget.resize(width, widget.sizeHint().height())
        # Qt appends the new widgets to the window's focus chain, after this answer's buttons (and
        # any later message's): put them back where they are on the screen, text before buttons.
        chain = [self._stream] + [w for block in self._blocks for w in _tab_stops(block)] + _tab_stops(self.actions_row)
        for first, second in zip(chain, chain[1:]):
            QWidget.setTabOrder(first, second)

    def _on_action(self, name: str) -> None:
        if name == "copy":
            QGuiApplication.clipboard().setText(self.text)
        self.action_requested.emit(name)
