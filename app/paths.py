"""Where Smolchat keeps its data and finds its bundled resources."""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path

import platformdirs

DATA_DIR_ENV = "SMOLCHAT_DATA_DIR"


# requested folder -> (temporary folder used instead, why the requested one cannot be used)
_fallbacks: dict[Path, tuple[Path, str]] = {}
# requested folder -> why it cannot be written (it holds conversations: they are shown read-only)
_read_only: dict[Path, str] = {}
DATABASE_NAME = "smolchat.sqlite3"


def requested_data_dir() -> Path:
    """The folder the user asked for (``$SMOLCHAT_DATA_DIR``) or the platform's default."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir("Smolchat", appauthor=False))


def _check_writable(path: Path) -> None:
    """Create ``path`` and prove a file can be written in it (raises OSError otherwise)."""
    if path.is_symlink() and not path.exists():
        raise OSError(errno.ELOOP, "it is a symbolic link that leads nowhere (a loop, or its target is missing)")
    path.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
    os.close(fd)
    os.unlink(probe)


def data_dir() -> Path:
    """The app data folder (created on demand).

    ``$SMOLCHAT_DATA_DIR`` wins, so tests and portable installs never touch the user's real data.
    A folder that holds conversations but cannot be written (a read-only disk or folder) is still
    used, read-only (:func:`data_dir_read_only` says why; the store opens it without writing, and
    :func:`writable_dir` gives folders for new files elsewhere). A folder that cannot be created or
    written and holds no conversations (a file in the way) is replaced by a temporary folder for this
    run, so the app still starts; :func:`data_dir_problem` says why.
    """
    path = requested_data_dir()
    if path in _fallbacks:
        return _fallbacks[path][0]
    if path in _read_only:
        return path
    try:
        _check_writable(path)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        try:
            has_chats = (path / DATABASE_NAME).is_file()
        except OSError:  # e.g. a symlink loop: not a folder we can read either
            has_chats = False
        if has_chats:
            _read_only[path] = reason
            return path
        _fallbacks[path] = (Path(tempfile.mkdtemp(prefix="smolchat-")), reason)
        return _fallbacks[path][0]
    return path


def data_dir_read_only() -> str:
    """Why the data folder, which holds conversations, cannot be written ("" when it can)."""
    path = requested_data_dir()
    data_dir()
    return _read_only.get(path, "")


_scratch: list[Path] = []


def _scratch_dir() -> Path:
    """One temporary folder per run for new files while the data folder is read-only."""
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="smolchat-")))
    return _scratch[0]


def writable_dir(name: str) -> Path:
    """``data_dir()/name``, created; in a read-only data folder, ``name`` in a temporary folder instead
    (pasted images, downloads: files of this run that cannot go where they belong)."""
    path = data_dir() / name
    if data_dir_read_only():
        if path.is_dir():
            return path  # readable as it is (e.g. models already there)
        path = _scratch_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir_problem() -> str:
    """Why the requested data folder is not used ("" when it is), naming the folder."""
    path = requested_data_dir()
    data_dir()
    if path not in _fallbacks:
        return ""
    return (f"The data folder {path} cannot be used ({_fallbacks[path][1]}). Conversations will not "
            f"be kept after Smolchat closes: this session uses a temporary folder, {_fallbacks[path][0]}.")


def use_temporary_data_dir(reason: str) -> Path:
    """Switch to a temporary folder for this run (the store failed to open in the real one).
"""
    path = requested_data_dir()
    if path not in _fallbacks:
        _fallbacks[path] = (Path(tempfile.mkdtemp(prefix="smolchat-")), reason)
    return _fallbacks[path][0]


def remove_temporary_dirs() -> None:
    """Delete this run's temporary folders (run at exit): what they hold (the chats of a run whose
    data folder could not be used, pasted photos) was said not to be kept, and it can be private.
    A folder still open elsewhere (Windows) is left, never an error at exit."""
    for folder in [fallback for fallback, _ in _fallbacks.values()] + _scratch:
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(remove_temporary_dirs)


def models_dir() -> Path:
    """Per-user folder for downloaded or imported models (created on demand).

    Models never go inside the install folder (read-only when installed, replaced on upgrade);
    Hub downloads go to the standard per-user Hugging Face cache (``$HF_HOME``, ~/.cache/huggingface).
    """
    return writable_dir("models")


def is_frozen() -> bool:
    """True in the PyInstaller build (the installed app), False when run from source."""
    return bool(getattr(sys, "frozen", False))


def pasted_images_dir() -> Path:
    """Folder for images pasted from the clipboard, stored by content hash."""
    path = data_dir() / "pasted"
    if data_dir_read_only():  # a pasted image in a read-only folder could never be sent anyway
        path = _scratch_dir() / "pasted"
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
