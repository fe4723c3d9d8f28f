"""Where Smolchat keeps its data and finds its bundled resources."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

DATA_DIR_ENV = "SMOLCHAT_DATA_DIR"


def data_dir() -> Path:
    """The app data folder (created on demand).

    ``$SMOLCHAT_DATA_DIR`` wins, so tests and portable installs never touch the user's real data.
    """
    override = os.environ.get(DATA_DIR_ENV)
    path = Path(override) if override else Path(platformdirs.user_data_dir("Smolchat", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    """Per-user folder for downloaded or imported models (created on demand).

    Models never go inside the install folder (read-only when installed, replaced on upgrade);
    Hub downloads go to the standard per-user Hugging Face cache (``$HF_HOME``, ~/.cache/huggingface).
    """
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def is_frozen() -> bool:
    """True in the PyInstaller build (the installed app), False when run from source."""
    return bool(getattr(sys, "frozen", False))


def pasted_images_dir() -> Path:
    """Folder for images pasted from the clipboard, stored by content hash."""
    path = data_dir() / "pasted"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resources_dir() -> Path:
    """The bundled ``resources/`` folder: beside the app in the frozen build, else the repository's."""
    if is_frozen():
        return Path(getattr(sys, "_MEIPASS", Path(sys.executable).resolve().parent)) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def resource(name: str) -> Path:
    """Path of one bundled resource, e.g. ``resource("icons/send.svg")``."""
    return resources_dir() / name
