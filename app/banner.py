"""A dismissible inline message shown at the top of the chat (errors the user should read)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget


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
        layout.addWidget(self._message, 1)
        layout.addWidget(self._action, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def message(self) -> str:
        return self._message.text() if not self.isHidden() else ""

    @Slot(str)
    def show_error(self, text: str) -> None:
        self._show(text, "error", "!", "Error message")

    def show_info(self, text: str, action: str = "", callback: Callable[[], None] | None = None) -> None:
        """A neutral message, optionally with one button (e.g. "Undo")."""
        self._show(text, "info", "i", "Notice")
        if action and callback:
            self._action.setText(action)
            self._action.setAccessibleName(action)
            self._callback = callback
            self._action.show()

    def _show(self, text: str, tone: str, mark: str, name: str) -> None:
        self._message.setText(text)
        self._icon.setText(mark)
        self.setAccessibleName(name)
        self.setProperty("tone", tone)
        self.style().unpolish(self)
        self.style().polish(self)
        self._action.hide()
        self._callback = None
        self.show()

    def _run_action(self) -> None:
        callback = self._callback
        self.dismiss()
        if callback:
            callback()

    @Slot()
    def dismiss(self) -> None:
        self._message.clear()
        self._action.hide()
        self._callback = None
        self.hide()
