"""Keyboard focus across windows: where it goes back to when a dialog closes."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QDialog, QWidget


def give_focus_back(dialog: QDialog, window: QWidget) -> None:
    """When ``dialog`` closes, activate ``window`` again and focus the widget of it that had the focus
    as the dialog opened (a message's button, a photo, the message box).

    Left to the window system, the window came back with its first control focused (the Attach button:
    trial 50, Help ▸ Keyboard shortcuts) or, where nothing activates it, with nothing focused."""
    before = window.focusWidget()

    def back() -> None:
        if before is None or not shiboken6.isValid(before) or not before.isVisible() or not before.isEnabled():
            return  # gone meanwhile (a message deleted, another chat opened): Qt's choice stands
        window.activateWindow()
        before.setFocus(Qt.FocusReason.OtherFocusReason)

    dialog.finished.connect(lambda _result: back())


def activates(event: QKeyEvent) -> bool:
    """Whether ``event`` presses a focused control that is not a button (a sent photo or video): Enter,
    Return or Space, without a modifier (the keypad's Enter too)."""
    keys = (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Space)
    return event.key() in keys and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
