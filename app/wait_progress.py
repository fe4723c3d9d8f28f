"""What the pending answer shows until its first word: what the engine is reading and how far it is.

The engine reports :class:`~engine.api.ProgressEvent` s from its thread (the vision tower tile by tile,
then the prompt chunk by chunk); the backend passes them on and the answer bubble shows them here:
"Reading image 1 of 2 — tile 5 of 17", then "Reading your question (1,141 tokens)", over a progress
bar. A backend that reports nothing (a remote server) leaves the bar indeterminate.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QVBoxLayout, QWidget

from app.formatting import describe_progress

#: Shown before any progress event arrives (and throughout, for a backend that sends none).
WAITING_TEXT = "Waiting for the first word…"


class WaitProgress(QWidget):
    """A muted line and a thin bar under the pending answer's "…"."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("waitProgress")
        self.label = QLabel(WAITING_TEXT)
        self.label.setObjectName("waitText")
        self.label.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setObjectName("waitBar")
        self.bar.setAccessibleName("Progress before the first word")
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(6)
        self.bar.setRange(0, 0)  # indeterminate until the engine says how far it is
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)

    def text(self) -> str:
        return self.label.text()

    def set_queued(self, ahead: int) -> None:
        """Another program's answers come first (``ahead`` of them, through the local server), until
        this answer's first progress event replaces the line."""
        text = ("Waiting for the answer the local server is giving another program…" if ahead == 1 else
                f"Waiting for {ahead} answers the local server is giving other programs…")
        self.label.setText(text)
        self.label.setAccessibleName(text)

    def set_event(self, event) -> None:
        """Show one ProgressEvent (see :func:`app.formatting.describe_progress`)."""
        text, done, total = describe_progress(event)
        self.label.setText(text)
        # A prompt read in one chunk reports nothing between its start and its end: a busy bar, not an
        # empty one that looks stuck for the seconds that takes on a CPU (found by a GUI trial).
        if total > 0 and (done > 0 or event.stage != "prefill"):
            self.bar.setRange(0, total)
            self.bar.setValue(done)
        else:
            self.bar.setRange(0, 0)
        self.label.setAccessibleName(text)
