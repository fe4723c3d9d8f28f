"""The transcript: a scrolling column of message widgets that follows the newest answer."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from app.messages import CONTINUABLE, AssistantMessage, UserMessage
from app.zoom import ctrl_wheel

#: The empty chat's second line with a local model (a server's model names the server instead).
LOCAL_LINE = "Everything runs on this computer."
EMPTY_TEXT = f"Drop a photo here, or paste one, and ask a question about it.\n{LOCAL_LINE}"
#: The empty chat's line for a model that takes no images.
EMPTY_TEXT_ONLY = f"Ask a question below.\n{LOCAL_LINE}"


class ChatView(QScrollArea):
    """Shows the conversation; new answers stream into the last :class:`AssistantMessage`.

    ``message_action(action, index)`` reports a click on a message's copy/edit/regenerate/delete;
    ``zoom_requested(step)`` a Ctrl+wheel over the chat (+1 in, -1 out; see :mod:`app.zoom`).
    """

    message_action = Signal(str, int)
    zoom_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setAccessibleName("Conversation")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        content = QWidget()
        content.setObjectName("transcriptContent")
        self._column = QVBoxLayout(content)
        self._column.setContentsMargins(24, 20, 24, 20)
        self._column.setSpacing(16)
        self._empty = QLabel(EMPTY_TEXT)
        self._empty.setObjectName("emptyState")
        self._empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._empty.setWordWrap(True)
        # The placeholder takes all the room while it shows; afterwards the trailing stretch keeps
        # the messages packed at the top.
        self._column.addWidget(self._empty, 1)
        self._column.addStretch(0)
        self.setWidget(content)
        self._messages: list[UserMessage | AssistantMessage] = []
        self._current: AssistantMessage | None = None
        self._continuable: AssistantMessage | None = None  # the answer showing Continue
        self._follow = True
        self._changes_enabled = True
        self._regenerate_note = ""
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if not ctrl_wheel(event, self.zoom_requested):
            super().wheelEvent(event)

    def messages(self) -> list[dict]:
        """The conversation as plain data: ``[{"role", "text", "images"}...]``."""
        return [
            {"role": m.role, "text": m.text, "images": list(getattr(m, "images", []))} for m in self._messages
        ]

    def widgets(self) -> list[UserMessage | AssistantMessage]:
        return list(self._messages)

    def add_stored_answer(self, model_name: str, text: str, finish_reason: str, footer: str) -> AssistantMessage:
        """An answer restored from the store, rendered complete."""
        message = AssistantMessage(model_name)
        self._add(message)
        message.set_text(text)
        message.finish(finish_reason, footer)
        self.mark_continuable()
        return message

    def remove_from(self, index: int) -> None:
        """Remove message ``index`` and everything after it."""
        for message in self._messages[index:]:
            self._discard(message)
        del self._messages[index:]
        self._current = None
        self._empty.setVisible(not self._messages)
        self.mark_continuable()

    def remove_at(self, index: int) -> None:
        self._discard(self._messages.pop(index))
        self._empty.setVisible(not self._messages)
        self.mark_continuable()

    def last_assistant(self) -> AssistantMessage | None:
        return next((m for m in reversed(self._messages) if isinstance(m, AssistantMessage)), None)

    def set_placeholder(self, text: str) -> None:
        self._empty.setText(text)

    def add_user_message(self, text: str, images: list[str]) -> UserMessage:
        message = UserMessage(text, images)
        self._add(message)
        return message

    def begin_answer(self, model_name: str) -> AssistantMessage:
        self._current = AssistantMessage(model_name)
        self._add(self._current)
        return self._current

    @Slot(str)
    def append_token(self, piece: str) -> None:
        if self._current is not None:
            self._current.append(piece)

    @Slot(object)
    def show_progress(self, event) -> None:
        """Progress before the first word of the streaming answer (an ``engine.api.ProgressEvent``)."""
        if self._current is not None:
            self._current.show_progress(event)

    def end_answer(self, finish_reason: str, footer: str = "") -> None:
        if self._current is not None:
            self._current.finish(finish_reason, footer)
            self._current = None
        self.mark_continuable()

    def resume_answer(self, index: int) -> AssistantMessage:
        """Stream the continuation of answer ``index`` (the last message) into it."""
        self._current = self._messages[index]
        self._current.resume()
        self._follow = True
        return self._current

    def mark_continuable(self) -> None:
        """Continue under the last message when it is an answer cut short (:data:`CONTINUABLE`) with
        text to go on from; under no other (continuing an earlier answer would drop what follows it).
        Only the one showing it and the last are touched: called for every message a chat opens with."""
        last = self._messages[-1] if self._messages else None
        offer = last is not None and last.role == "assistant" and last is not self._current and last.can_continue \
            and last.status in CONTINUABLE and bool(last.text.strip())
        shown = self._continuable
        if shown is not None and shown is not last:
            shown.set_continuable(False)
        if last is not None and last.role == "assistant":
            last.set_continuable(offer)
        self._continuable = last if offer else None

    @Slot()
    def clear(self) -> None:
        for message in self._messages:
            self._discard(message)
        self._messages.clear()
        self._current = None
        self._empty.show()

    def _discard(self, message: UserMessage | AssistantMessage) -> None:
        """Take ``message`` off the transcript at once. It is deleted later (a click on it may be what
        is removing it), and until Qt does so it must not show: out of the layout it would stay drawn
        where it was, under or over the next chat's messages (trial 37, finding 6, seen whenever the
        deferred deletion waits, e.g. while code runs inside a nested event loop)."""
        if message is self._continuable:
            self._continuable = None
        self._column.removeWidget(message)
        message.hide()
        message.deleteLater()

    def set_regenerate_note(self, note: str) -> None:
        """A line added to every Regenerate button's tooltip, the answers added later too ("" for none)."""
        if note == self._regenerate_note:
            return
        self._regenerate_note = note
        for message in self._messages:
            message.actions_row.set_note("regenerate", note)

    def set_changes_enabled(self, enabled: bool) -> None:
        """Every message's edit, regenerate, delete and version buttons on or greyed out (Copy stays),
        the messages added later too."""
        if enabled != self._changes_enabled:
            self._changes_enabled = enabled
            for message in self._messages:
                message.actions_row.set_changes_enabled(enabled)

    def _add(self, message: UserMessage | AssistantMessage) -> None:
        self._empty.hide()
        if not self._changes_enabled:
            message.actions_row.set_changes_enabled(False)
        if self._regenerate_note:
            message.actions_row.set_note("regenerate", self._regenerate_note)
        message.action_requested.connect(lambda name, m=message: self._on_action(name, m))
        self._messages.append(message)
        self._follow = True
        self._column.insertWidget(self._column.count() - 1, message)
        self.mark_continuable()  # a message after a cut answer: Continue goes

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)

    def _on_scrolled(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - 8

    def _on_action(self, name: str, message) -> None:
        if message in self._messages:
            self.message_action.emit(name, self._messages.index(message))
