"""One Smolchat per data folder (app/single_instance.py): a second start on the same folder says
Smolchat is already open and ends before making a window; another folder, or a lock left by a
process that is gone, does not stop a start. Runs the real entry point in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

STAY = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox
from app import main as entry
from app.main_window import MainWindow

QMessageBox.information = staticmethod(lambda *a, **k: print("DIALOG " + a[2], flush=True))

def ready():
    if any(isinstance(w, MainWindow) for w in QApplication.topLevelWidgets()):
        print("WINDOW", flush=True)
        if sys.argv[1] == "quit":
            QApplication.quit()
    else:
        QTimer.singleShot(50, ready)

entry.create_app(sys.argv[:1])
QTimer.singleShot(50, ready)
code = entry.main(["--model", "/models/slow-fake"])  # no model manager dialog (a modal loop)
print("EXIT", code, flush=True)
sys.exit(code)
"""


def _env(data_dir: Path) -> dict:
    return dict(os.environ, SMOLCHAT_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen",
                SMOLCHAT_BACKEND="app.backends.fake:slow_backend")


def _run(data_dir: Path, then: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STAY, then], cwd=REPO, env=_env(data_dir), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process handling in the test")
def test_a_second_start_on_the_same_data_folder_says_smolchat_is_open_and_ends(data_dir, tmp_path):
    """Found by a trial: two windows on one data folder each kept their unsent message under one key
    (the last to quit won, the other's was lost) and both wrote the database."""
    first = subprocess.Popen([sys.executable, "-c", STAY, "stay"], cwd=REPO, env=_env(data_dir),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while (line := first.stdout.readline()) and line.strip() != "WINDOW":
            assert time.monotonic() < deadline
        second = _run(data_dir, "quit")
        said = (f"Smolchat is already open with the conversations in {data_dir}: switch to its window. (A second "
                "window on the same conversations would overwrite the first one's unsent message.)")
        assert second.returncode == 0 and "WINDOW" not in second.stdout, second.stdout + second.stderr
        assert f"DIALOG {said}" in second.stdout and said in second.stderr
        other = _run(tmp_path / "other-data", "quit")  # another data folder: its own window
        assert "WINDOW" in other.stdout and "EXIT 0" in other.stdout, other.stdout + other.stderr
    finally:
        first.kill()
        first.wait(10)
    after = _run(data_dir, "quit")  # the lock of a process that is gone is taken over
    assert "WINDOW" in after.stdout and "EXIT 0" in after.stdout, after.stdout + after.stderr
