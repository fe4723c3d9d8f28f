"""Help ▸ About Smolchat: the version, where this computer keeps the chats, settings and models, the
model in use, and the versions of what runs it, with "Copy details" for a bug report.

Versions are read from the installed packages' metadata (:mod:`importlib.metadata`), not by
importing them: the UI thread never imports torch (seconds on a cold start)."""

from __future__ import annotations

import contextlib
import html
import platform
from importlib import metadata
from pathlib import Path

import shiboken6
from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, QUrl, qVersion
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPushButton, QVBoxLayout

from app.formatting import model_summary
from engine.api import smolchat_version

PRIVACY = ("Answers come from a model on this computer: nothing you write or attach leaves it, unless you "
           "choose a server's model (Settings ▸ Engines).")


def package_version(name: str) -> str:
    """``name``'s installed version, or "not installed"."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def models_folder() -> str:
    """Where downloaded models go: the Hugging Face cache ($HF_HUB_CACHE / $HF_HOME honoured)."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def details(window) -> list[tuple[str, str]]:
    """(label, value) rows: what the About box lists and "Copy details" copies."""
    info = window.model_info or {}
    model = model_summary(info) if info.get("model_name") else "none loaded"
    return [
        ("Version", f"Smolchat {smolchat_version()}"),
        ("Model", model),
        ("Chats", str(Path(window.store.folder))),
        ("Settings", window.qsettings.fileName()),
        ("Downloaded models", models_folder()),
        ("Runs on", f"Python {platform.python_version()}, PyTorch {package_version('torch')}, "
                    f"Qt {qVersion()} (PySide6 {pyside_version}), {platform.system()} {platform.machine()}"),
        ("License", "Apache-2.0"),
    ]


def _text(window) -> str:
    rows = details(window)
    table = "".join(f"<tr><td style='padding-right:12px'><b>{html.escape(k)}</b></td><td>{html.escape(v)}</td></tr>"
                    for k, v in rows[1:])
    return (f"<h3>{html.escape(rows[0][1])}</h3><p>Private, local multimodal chat.</p>"
            f"<p>{html.escape(PRIVACY)}</p><table style='margin-top:6px'>{table}</table>")


def _disconnect(window, slot) -> None:
    with contextlib.suppress(RuntimeError, TypeError):  # the window (or its controller) is gone first
        window.controller.model_loaded.disconnect(slot)


def about_dialog(window) -> QDialog:
    """Show the About box (non-modal) and return it."""
    dialog = QDialog(window)
    dialog.setObjectName("aboutDialog")
    dialog.setWindowTitle("About Smolchat")
    label = QLabel(_text(window))
    label.setObjectName("aboutText")
    # Another model loaded while the box is open: its Model line follows (as Copy details does).
    def follow(_info) -> None:
        if shiboken6.isValid(label):
            label.setText(_text(window))

    window.controller.model_loaded.connect(follow)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.destroyed.connect(lambda *_: _disconnect(window, follow))
    label.setWordWrap(True)
    label.setTextInteractionFlags(label.textInteractionFlags().TextSelectableByMouse)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    open_folder = QPushButton("Open chats folder")
    open_folder.setToolTip("Show the folder that holds the chats and the images and videos sent in them")
    open_folder.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(window.store.folder))))
    copy = QPushButton("Copy details")
    copy.setToolTip("Copy these lines, e.g. for a bug report")
    copy.clicked.connect(lambda: (QGuiApplication.clipboard().setText("\n".join(f"{k}: {v}" for k, v in details(window))),
                                  copy.setText("Copied")))
    for button in (open_folder, copy):
        button.setAutoDefault(False)  # Enter closes the box, as Close is the default
        buttons.addButton(button, QDialogButtonBox.ButtonRole.ActionRole)
    buttons.button(QDialogButtonBox.StandardButton.Close).setDefault(True)
    layout = QVBoxLayout(dialog)
    layout.addWidget(label)
    layout.addWidget(buttons)
    dialog.setMinimumWidth(520)
    dialog.show()
    return dialog
