"""The header button that shows the current model; its menu switches models or opens the manager."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QFileDialog, QMenu, QPushButton, QWidget

from app.icons import icon
from app.settings import known_models


class ModelPicker(QPushButton):
    """Shows the model's name (or the loading state). Its menu lists the user's models."""

    model_chosen = Signal(str)
    manage_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelPicker")
        self.setAccessibleName("Choose model")
        self.setToolTip("Switch model, or manage models")
        self._menu = QMenu(self)
        self._menu.setObjectName("modelMenu")
        self._menu.aboutToShow.connect(self._fill_menu)
        self.setMenu(self._menu)
        self.set_none()

    def set_none(self) -> None:
        self.setText("Choose a model…")

    def set_loading(self, path: str) -> None:
        self.setText("Loading model…")
        self.setToolTip(path)

    def set_model(self, name: str, path: str) -> None:
        self.setText(name)
        self.setToolTip(f"{path}\nClick to switch model")

    def model_actions(self) -> list:
        self._fill_menu()
        return self._menu.actions()

    @Slot()
    def _fill_menu(self) -> None:
        self._menu.clear()
        for model in known_models():
            action = self._menu.addAction(model["name"])
            action.setToolTip(model["path"])
            action.triggered.connect(lambda _=False, p=model["path"]: self.model_chosen.emit(p))
        if not self._menu.isEmpty():
            self._menu.addSeparator()
        self._menu.addAction(icon("folder"), "Open model folder…", self._choose)
        self._menu.addAction(icon("models"), "Manage models…", lambda: self.manage_requested.emit())

    @Slot()
    def _choose(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.window(), "Choose a model folder")
        if folder:
            self.model_chosen.emit(folder)
