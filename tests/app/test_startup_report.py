"""``SMOLCHAT_STARTUP_REPORT`` (used by bench/startup.py): the real entry point shows its window,
writes when the window was shown and when the model was ready, and quits by itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_app(tmp_path: Path, **env) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "startup.json"
    full = dict(os.environ, SMOLCHAT_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(REPO),
                QT_QPA_PLATFORM="offscreen", SMOLCHAT_STARTUP_REPORT=str(out), **env)
    proc = subprocess.run([sys.executable, "-m", "app.main", "--model", "/models/fake"], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=120)
    return proc, out


def test_report_has_window_and_ready_times_and_the_app_quits(tmp_path):
    proc, out = run_app(tmp_path, SMOLCHAT_BACKEND="app.backends.fake:slow_backend")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report) == {"window_shown_s", "model_ready_s", "device", "dtype"}
    assert isinstance(report["window_shown_s"], float) and isinstance(report["model_ready_s"], float)
    assert report["device"] == "cpu"


def test_report_says_why_the_model_did_not_load(tmp_path):
    proc, out = run_app(tmp_path, SMOLCHAT_BACKEND="app.backends.fake:failing_backend")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert "model_ready_s" not in report
    assert report["error"] == "model.safetensors is missing tensor model.norm.weight"
