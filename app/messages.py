"""Message widgets of the transcript: the user's bubble and the assistant's streamed answer."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.thumbnails import thumbnail

BUBBLE_MAX_WIDTH = 560
IMAGE_BOX = QSize(240, 180)


def _text_label(text: str, object_name: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName(object_name)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    return label


class UserMessage(QWidget):
    """A right-aligned bubble with the user's images (thumbnails) above their text."""

    role = "user"

    def __init__(self, text: str, images: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = text
        self.images = list(images)
        bubble = QFrame()
        bubble.setObjectName("userBubble")
        bubble.setMaximumWidth(BUBBLE_MAX_WIDTH)
        inner = QVBoxLayout(bubble)
        inner.setContentsMargins(6, 6, 6, 6) if images else inner.setContentsMargins(14, 10, 14, 10)
        inner.setSpacing(6)
        if images:
            row = QHBoxLayout()
            row.setSpacing(6)
            dpr = self.devicePixelRatioF()
            box = IMAGE_BOX if len(images) == 1 else QSize(120, 120)
            for path in images:
                image = QLabel()
                image.setObjectName("messageImage")
                image.setToolTip(Path(path).name)
                image.setPixmap(thumbnail(path, box, square=len(images) > 1, radius=12, dpr=dpr))
                row.addWidget(image)
            row.addStretch(1)
            inner.addLayout(row)
        if text:
            label = _text_label(text, "userText")
            if images:
                label.setContentsMargins(8, 0, 8, 4)
            inner.addWidget(label)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(80, 0, 0, 0)
        outer.addStretch(1)
        outer.addWidget(bubble)


class AssistantMessage(QWidget):
    """A left-aligned answer that grows token by token, with a muted footer once it is done.

    Only this message's label changes per token; the rest of the transcript keeps its layout.
    """

    role = "assistant"

    def __init__(self, model_name: str = "Smolchat", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = ""
        self.finish_reason: str | None = None
        avatar = QLabel("S")
        avatar.setObjectName("assistantAvatar")
        avatar.setAlignment(Qt.AlignmentFlag.AlignCenter)
        avatar.setFixedSize(30, 30)
        name = QLabel(model_name)
        name.setObjectName("assistantName")
        self._label = _text_label("", "assistantText")
        self._label.setText("…")
        self._footer = QLabel("Thinking…")
        self._footer.setObjectName("messageFooter")
        column = QVBoxLayout()
        column.setSpacing(4)
        column.addWidget(name)
        column.addWidget(self._label)
        column.addWidget(self._footer)
        bubble = QFrame()
        bubble.setObjectName("assistantBubble")
        bubble.setMaximumWidth(BUBBLE_MAX_WIDTH + 120)
        bubble_layout = QVBoxLayout(bubble)
        bubble_layout.setContentsMargins(14, 10, 14, 10)
        bubble_layout.addLayout(column)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 40, 0)
        outer.setSpacing(10)
        outer.addWidget(avatar, 0, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        outer.addWidget(bubble, 1)
        outer.addStretch(0)  # takes what the bubble's maximum width leaves

    def append(self, piece: str) -> None:
        if not self.text:
            piece = piece.lstrip()  # the model's first token usually carries the space after "Assistant:"
        if not piece:
            return
        if not self.text:
            self._footer.setText("")
            self._footer.hide()
        self.text += piece
        self._label.setText(self.text)

    def finish(self, finish_reason: str, footer: str = "") -> None:
        self.finish_reason = finish_reason
        if not self.text:
            self._label.setText("(no answer)" if finish_reason != "error" else "(failed)")
        self._footer.setText(footer)
        self._footer.setVisible(bool(footer))

    def footer(self) -> str:
        return self._footer.text()
