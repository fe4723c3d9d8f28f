"""The "‹ 2 / 3 ›" switcher under a message that has other versions (regenerated answers, edited questions).

The widget only announces a step (-1: the previous version, +1: the next); the window asks the
:class:`~app.conversations.ConversationKeeper` to switch branches, and the store keeps the choice.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


def step_button(name: str, text: str, tip: str, accessible: str, clicked) -> QToolButton:
    """A flat one-character button that steps through something (‹ › versions, ↑ ↓ search matches)."""
    button = QToolButton()
    button.setObjectName(name)
    button.setText(text)
    button.setToolTip(tip)
    button.setAccessibleName(accessible)
    button.setAutoRaise(True)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    button.clicked.connect(lambda: clicked())
    return button


class VersionSwitcher(QWidget):
    """``‹ number / count ›``; hidden while the message has a single version."""

    step = Signal(int)  # -1 or +1

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("versionSwitcher")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 4, 0)
        row.setSpacing(0)
        self.previous = self._button("previousVersion", "‹", "Previous version", -1)
        self.label = QLabel()
        self.label.setObjectName("versionLabel")
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.next = self._button("nextVersion", "›", "Next version", +1)
        for widget in (self.previous, self.label, self.next):
            row.addWidget(widget)
        self.number = self.count = 1
        self.hide()

    def _button(self, name: str, text: str, tip: str, step: int) -> QToolButton:
        return step_button(name, text, tip, tip, lambda: self.step.emit(step))

    def set_versions(self, number: int, count: int) -> None:
        """Show version ``number`` (1-based) of ``count``."""
        self.number, self.count = number, count
        self.label.setText(f"{number} / {count}")
        self.label.setAccessibleName(f"Version {number} of {count}")
        self.previous.setEnabled(number > 1)
        self.next.setEnabled(number < count)
        self.setVisible(count > 1)

    def text(self) -> str:
        """What it shows, e.g. ``"‹ 2 / 3 ›"`` ("" while hidden)."""
        return f"‹ {self.label.text()} ›" if self.count > 1 else ""
