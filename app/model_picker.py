"""A button that shows the current model and lets the user choose a model folder."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QFileDialog, QPushButton, QWidget
from app.qt_compat import emit


class ModelPicker(QPushButton):
    """Shows the model's name (or the loading state); a click asks for a model folder."""

    model_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelPicker")
        self.setAccessibleName("Choose model")
        self.setToolTip("Choose a model folder")
        self.set_none()
        self.clicked.connect(self._choose)

    def set_none(self) -> None:
        self.setText("Choose a model…")

    def set_loading(self, path: str) -> None:
        self.setText("Loading model…")
        self.setToolTip(path)

    def set_model(self, name: str, path: str) -> None:
        self.setText(f"{name}  ▾")
        self.setToolTip(f"{path}\nClick to choose another model folder")

    @Slot()
    def _choose(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.window(), "Choose a model folder")
        if folder:
            emit(self.model_chosen, folder)
