"""kill -9 in the middle of an answer loses at most the last few tokens, and the restarted app shows
the partial answer marked interrupted. Runs the real entry point (``app.main.main``) in subprocesses
with a slow fake backend chosen through SMOLCHAT_BACKEND."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.store import Store

REPO = Path(__file__).resolve().parents[2]

ASK = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app import main as entry
from app.main_window import MainWindow

def drive():
    win = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)
    if win is None or not win.send_button.isVisible() or not win.model_info:
        QTimer.singleShot(50, drive)
        return
    win.composer.setPlainText("Tell me a very long story")
    win.send_message()
    print("SENT", flush=True)

entry.create_app(sys.argv[:1])  # main() reuses this application
QTimer.singleShot(50, drive)
sys.exit(entry.main(["--model", "/models/slow-fake"]))
"""

REPORT = r"""
import json, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app import main as entry
from app.main_window import MainWindow

def report():
    win = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))
    out = [{"role": w.role, "text": w.text, "status": w.status,
            "footer": w.footer() if w.role == "assistant" else ""} for w in win.transcript.widgets()]
    print("REPORT " + json.dumps(out), flush=True)
    win.close()

entry.create_app(sys.argv[:1])
QTimer.singleShot(300, report)
sys.exit(entry.main(["--model", "/models/slow-fake"]))
"""


def _env(data_dir: Path) -> dict:
    return dict(os.environ, SMOLCHAT_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen",
                SMOLCHAT_BACKEND="app.backends.fake:slow_backend", SMOLCHAT_FAKE_DELAY="0.01")


def _saved_answer(data_dir: Path) -> str:
    if not (data_dir / "smolchat.sqlite3").exists():
        return ""
    store = Store(data_dir, recover=False)
    try:
        convs = store.conversations()
        messages = store.messages(convs[0].id) if convs else []
        return messages[-1].text if messages and messages[-1].role == "assistant" else ""
    finally:
        store.close()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_sigkill_mid_answer_then_restart_shows_partial_answer_interrupted(data_dir):
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", ASK], cwd=REPO, env=_env(data_dir),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(_saved_answer(data_dir).split()) < 40:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the answer was never saved while streaming"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    partial = _saved_answer(data_dir)
    words = partial.split()
    assert words[:3] == ["word0", "word1", "word2"] and len(words) >= 40
    assert len(words) < 5000  # it really was cut off

    again = subprocess.run([sys.executable, "-c", REPORT], cwd=REPO, env=_env(data_dir), capture_output=True,
                           text=True, timeout=60)
    line = next((l for l in again.stdout.splitlines() if l.startswith("REPORT ")), None)
    assert line is not None, again.stdout + again.stderr
    shown = json.loads(line[len("REPORT "):])
    assert [m["role"] for m in shown] == ["user", "assistant"]
    assert shown[0]["text"] == "Tell me a very long story"
    assert shown[1]["status"] == "interrupted" and "interrupted" in shown[1]["footer"]
    assert shown[1]["text"].startswith(partial[:200]) and len(shown[1]["text"]) >= len(partial) - 1
