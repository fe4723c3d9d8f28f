"""Where Smolchat keeps its data and finds its bundled resources."""

from __future__ import annotations

import os
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


def pasted_images_dir() -> Path:
    """Folder for images pasted from the clipboard, stored by content hash."""
    path = data_dir() / "pasted"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resources_dir() -> Path:
    """The repository's ``resources/`` folder."""
    return Path(__file__).resolve().parent.parent / "resources"


def resource(name: str) -> Path:
    """Path of one bundled resource, e.g. ``resource("icons/send.svg")``."""
    return resources_dir() / name
