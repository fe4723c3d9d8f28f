"""The header button that shows the current model; its menu switches models or opens the manager.

The menu groups models by engine: "On this computer" (the user's local models), then one section per
server added in Settings ▸ Engines, listing that server's models (:class:`app.remote_models.RemoteModels`).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QFileDialog, QMenu, QPushButton, QWidget

from app.backends.remote import model_label, parse_spec, remote_spec
from app.backends.remote_http import model_id_text
from app.icons import icon
from app.settings import known_models


def shown_name(name: str, path: str) -> str:
    """How the picker and the banners name a model: ``name``, and for a server's (``path`` a
    "remote:SERVER::MODEL" spec) "NAME · SERVER", as the user knows it (trial 56), a server's copy of
    a model told apart from a local one of the same name (trial 60)."""
    remote = parse_spec(path)
    return f"{name} · {remote[0]}" if remote else name


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
        self.remote_models = None  # app.remote_models.RemoteModels, set by the window
        # Local models loaded in this session that the user never added (``--model PATH``, the last
        # model of an earlier run): listed too, or switching away lost the way back (issue 19).
        self._loaded: list[dict] = []
        self.set_none()

    def set_none(self) -> None:
        self._current = ""  # the path or remote spec of the model in use, checked in the menu
        self.setText("Choose a model…")

    def set_loading(self, path: str) -> None:
        self.setText("Loading model…")
        self.setToolTip(path)

    def set_model(self, name: str, path: str) -> None:
        self._current = path
        remote = parse_spec(path)
        self.setText(shown_name(name, path))
        # (The whole id of a server's model, cleaned as its label is: trial 78 R5, a bidi override turned it.)
        self.setToolTip(f"{model_id_text(remote[1]) + ' on ' + remote[0] if remote else path}\nClick to switch model")
        self.remember(path, name)

    def remember(self, path: str, name: str = "") -> None:
        """List the local model ``path`` in the menu for this session (loaded, or its load stopped)."""
        if path and not path.startswith("remote:") and all(m["path"] != path for m in self._loaded):
            self._loaded.append({"name": name or path.rstrip("/").split("/")[-1], "path": path})

    def local_models(self) -> list[dict]:
        """The user's models (Settings' list), then others loaded in this session: ``[{"name", "path"}]``."""
        known = known_models()
        paths = {m["path"] for m in known}
        return known + [m for m in self._loaded if m["path"] not in paths]

    def model_actions(self) -> list:
        self._fill_menu()
        return self._menu.actions()

    @Slot()
    def _fill_menu(self) -> None:
        self._menu.clear()
        local = self.local_models()
        remote = self.remote_models.lists if self.remote_models is not None else {}
        if remote:
            self._menu.addSection("On this computer")
            if not local:  # not a heading over nothing (trial 64)
                self._menu.addAction("no models yet: Manage models… adds one").setEnabled(False)
        for model in local:  # the one in use checked: two servers' "fake" or a local and a served model look alike
            action = self._menu.addAction(model["name"])
            action.setToolTip(model["path"])
            _mark_current(action, model["path"] == self._current)
            action.triggered.connect(lambda _=False, p=model["path"]: self.model_chosen.emit(p))
        for server, models in remote.items():
            self._menu.addSection(server)
            if isinstance(models, str):  # not fetched yet, or why it failed
                self._menu.addAction(models).setEnabled(False)
                continue
            for name in models:
                spec = remote_spec(server, name)
                action = self._menu.addAction(model_label(name))
                action.setToolTip(f"{model_id_text(name)} on {server}")
                _mark_current(action, spec == self._current)
                action.triggered.connect(lambda _=False, p=spec: self.model_chosen.emit(p))
            if not models:
                self._menu.addAction("no models").setEnabled(False)
        if remote:
            self.remote_models.refresh(stale_only=True)
        if not self._menu.isEmpty():
            self._menu.addSeparator()
        self._menu.addAction(icon("folder"), "Open model folder…", self._choose)
        self._menu.addAction(icon("models"), "Manage models…", lambda: self.manage_requested.emit())

    @Slot()
    def _choose(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.window(), "Choose a model folder")
        # Back on the picker it was opened from (trial 51: the focus came back on the Settings button).
        self.window().activateWindow()
        self.setFocus(Qt.FocusReason.OtherFocusReason)
        if folder:
            self.model_chosen.emit(folder)


def _mark_current(action, current: bool) -> None:
    """A check beside the model in use only: every checkable row of a menu gets an indicator, and in
    the light theme the others showed empty boxes, as if the list were a set of options to tick."""
    action.setCheckable(current)
    action.setChecked(current)
