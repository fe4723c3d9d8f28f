"""Startup of the desktop app: process start -> window shown -> model ready (window-to-ready).

Launches ``python -m app.main --model CK`` (``QT_QPA_PLATFORM=offscreen`` unless a display is
set) several times with ``SMOLCHAT_STARTUP_REPORT``; the app records when its window was shown and
when the worker thread finished loading the model, writes JSON and quits. The window appears before
the model loads (loading runs in the worker's QThread), so ``window_shown_s`` does not include it.

    python bench/startup.py --checkpoint /tmp/ck [--repeats 5] [--out bench/results/startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def launch(checkpoint: str, extra_env: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "startup.json"
        env = dict(os.environ, SMOLCHAT_STARTUP_REPORT=str(out), **extra_env)
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
        # A fresh data folder: no saved conversations or settings from earlier runs.
        env["XDG_DATA_HOME"] = env["XDG_CONFIG_HOME"] = env["SMOLCHAT_DATA_DIR"] = tmp
        env["SMOLCHAT_STARTUP_T0"] = repr(time.time())
        proc = subprocess.run([sys.executable, "-m", "app.main", "--model", checkpoint], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
        if not out.exists():
            raise RuntimeError(f"app exited {proc.returncode} without a report: {proc.stderr[-1500:]}")
        got = json.loads(out.read_text())
        if "error" in got:
            raise RuntimeError(f"model load failed: {got['error']}")
        return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    runs = []
    for r in range(args.repeats + 1):  # run 0 warms the page cache and is not counted
        got = launch(args.checkpoint, {})
        got["window_to_ready_s"] = got["model_ready_s"] - got["window_shown_s"]
        print(f"  run {r}: window {got['window_shown_s']:.2f} s, ready {got['model_ready_s']:.2f} s, "
              f"window-to-ready {got['window_to_ready_s']:.2f} s ({got.get('device')}, {got.get('dtype')})", flush=True)
        if r:
            runs.append(got)
    res = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
           "checkpoint": args.checkpoint, "runs": runs}
    for k in ("window_shown_s", "model_ready_s", "window_to_ready_s"):
        res[k] = statistics.median(r[k] for r in runs)
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
