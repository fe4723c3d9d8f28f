"""A dismissible inline message shown at the top of the chat (errors the user should read)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget


class Banner(QFrame):
    """Shows one message (the latest) until the user dismisses it or :meth:`dismiss` is called."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("errorBanner")
        self.setAccessibleName("Error message")
        self._icon = QLabel("!")
        self._icon.setObjectName("bannerIcon")
        self._icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._message = QLabel()
        self._message.setObjectName("errorMessage")
        self._message.setWordWrap(True)
        self._message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton()
        close.setObjectName("dismissBanner")
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.setAccessibleName("Dismiss message")
        close.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 8, 8)
        layout.setSpacing(10)
        layout.addWidget(self._icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self._message, 1)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def message(self) -> str:
        return self._message.text() if not self.isHidden() else ""

    @Slot(str)
    def show_error(self, text: str) -> None:
        self._message.setText(text)
        self.show()

    @Slot()
    def dismiss(self) -> None:
        self._message.clear()
        self.hide()
