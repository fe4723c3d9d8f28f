"""One Smolchat per data folder.

Two processes on one data folder would each keep their unsent message under the same settings key
(the last to quit wins: the other's is lost without a word) and both write the conversations'
database. So a start takes a lock file in the data folder (``QLockFile``: it holds the owner's process
id, and a lock whose process is gone, after a crash, is taken over); a second start finds it held,
says that Smolchat is already open, and ends before making a window.

A data folder that cannot be written takes no lock: the store opens read-only there anyway.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QLockFile

LOCK_NAME = "smolchat.lock"
WAIT_MS = 200  # a lock being released by a window that is closing right now


def take_lock(data_dir: Path) -> tuple[QLockFile | None, bool]:
    """``(lock, already_open)``: the lock to keep for the process's life (None where none could be
    made: a folder that cannot be written), and whether another live Smolchat holds it."""
    try:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
    except OSError:
        return None, False
    lock = QLockFile(str(Path(data_dir) / LOCK_NAME))
    lock.setStaleLockTime(0)  # held as long as its process lives, however long that is
    if lock.tryLock(WAIT_MS):
        return lock, False
    if lock.error() == QLockFile.LockError.LockFailedError:
        return None, True
    return None, False  # a permission or other error: no lock, and nothing known to be open


def already_open_text(data_dir: Path) -> str:
    """What a second start says (a dialog and the terminal)."""
    return (f"Smolchat is already open with the conversations in {data_dir}: switch to its window. (A second "
            "window on the same conversations would overwrite the first one's unsent message.)")
