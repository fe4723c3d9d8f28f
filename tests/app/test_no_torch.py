"""The UI thread never imports torch (or the engine): checked in a fresh interpreter."""

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
    model_name, device, dtype = "Fake", "cpu", "float32"
    def send(self, text, images=(), params=None): return iter(())
    def cancel(self): pass
    def reset(self): pass
    def preprocess(self, images, detail="full"): return []

app = QApplication([])
import app.main as main_module
from app.main_window import MainWindow
window = MainWindow("/models/fake", session_factory=lambda path, device, dtype: Session())
window.show()
deadline = time.monotonic() + 10
while not window.model_info and time.monotonic() < deadline:
    app.processEvents()
assert window.model_info["model_name"] == "Fake", window.model_info
window.close()
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "engine")))
print("LOADED", loaded)
sys.exit(1 if loaded else 0)
"""


def test_building_the_window_does_not_import_torch(tmp_path):
    env = dict(os.environ, SMOLCHAT_DATA_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LOADED []" in proc.stdout
