"""The transcript: a scrolling column of message widgets that follows the newest answer."""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from app.messages import AssistantMessage, UserMessage

EMPTY_TEXT = "Drop a photo here, or paste one, and ask a question about it.\nEverything runs on this computer."


class ChatView(QScrollArea):
    """Shows the conversation; new answers stream into the last :class:`AssistantMessage`."""

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
        self._follow = True
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)

    def messages(self) -> list[dict]:
        """The conversation as plain data: ``[{"role", "text", "images"}...]``."""
        return [
            {"role": m.role, "text": m.text, "images": list(getattr(m, "images", []))} for m in self._messages
        ]

    def last_assistant(self) -> AssistantMessage | None:
        return next((m for m in reversed(self._messages) if isinstance(m, AssistantMessage)), None)

    def set_placeholder(self, text: str) -> None:
        self._empty.setText(text)

    def add_user_message(self, text: str, images: list[str]) -> None:
        self._add(UserMessage(text, images))

    def begin_answer(self, model_name: str) -> None:
        self._current = AssistantMessage(model_name)
        self._add(self._current)

    @Slot(str)
    def append_token(self, piece: str) -> None:
        if self._current is not None:
            self._current.append(piece)

    def end_answer(self, finish_reason: str, footer: str = "") -> None:
        if self._current is not None:
            self._current.finish(finish_reason, footer)
            self._current = None

    @Slot()
    def clear(self) -> None:
        for message in self._messages:
            self._column.removeWidget(message)
            message.deleteLater()
        self._messages.clear()
        self._current = None
        self._empty.show()

    def _add(self, message: UserMessage | AssistantMessage) -> None:
        self._empty.hide()
        self._messages.append(message)
        self._follow = True
        self._column.insertWidget(self._column.count() - 1, message)

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)

    def _on_scrolled(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - 8
