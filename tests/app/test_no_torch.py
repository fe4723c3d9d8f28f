"""The UI thread never imports torch, nor any part of the engine but ``engine.api`` (and the torch-free
``engine.service`` that runs the engine thread, with ``engine.cancellation`` for a load's stop points): checked in a fresh interpreter, with the real local
backend over a fake session loader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import os, sys, time
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtWidgets import QApplication

class Session:
    model_name, device, dtype, weights = "Fake", "cpu", "float32", "float32"
    turns = []
    def send(self, text, images=(), params=None): return iter(())
    def cancel(self): pass
    def reset(self): pass
    def count_image_tokens(self, image, detail="full"): return 64

app = QApplication([])
import app.main as main_module
from app.main_window import MainWindow
from app.backends.local import LocalBackend
window = MainWindow("/models/fake", backend=LocalBackend(lambda model, options: Session()))
window.show()
deadline = time.monotonic() + 45  # a fresh clone compiles every module first, on a busy CI machine
while not window.model_info and time.monotonic() < deadline:
    app.processEvents()
assert window.model_info["model_name"] == "Fake", window.model_info
window.close()
allowed = {"engine", "engine.service", "engine.cancellation"}  # (torch-free: a load's stop point)
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")
                or (m.startswith("engine") and m not in allowed and not m.startswith("engine.api")))
print("LOADED", loaded)
sys.exit(1 if loaded else 0)
"""


def test_building_the_window_does_not_import_torch(tmp_path):
    env = dict(os.environ, SMOLCHAT_DATA_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LOADED []" in proc.stdout
