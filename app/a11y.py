"""What a screen reader is told without the focus moving: :func:`announce`.

A banner appearing, an answer ending or another version shown change the window where the focus is
not, and a screen reader says nothing of a change it is not told about (trial 50: a user who pressed
Enter heard nothing until they went looking). Qt 6.8's announcement event is the platform's live
region (AT-SPI's announcement signal, UIA's notification event, NSAccessibility's announcement).
"""

from __future__ import annotations

from PySide6.QtGui import QAccessible, QAccessibleAnnouncementEvent
from PySide6.QtWidgets import QWidget


def announce(widget: QWidget, text: str, assertive: bool = False) -> None:
    """Have a screen reader say ``text`` as coming from ``widget``: after what it is saying now, or at
    once when ``assertive`` (errors). Nothing happens while no assistive technology listens."""
    if not text or not QAccessible.isActive():
        return
    event = QAccessibleAnnouncementEvent(widget, text)
    event.setPoliteness(QAccessible.AnnouncementPoliteness.Assertive if assertive
                        else QAccessible.AnnouncementPoliteness.Polite)
    QAccessible.updateAccessibility(event)
