"""Memory a model load holds at its peak and after it, by weights format (issue 17's memory target:
the load is where a quantized model used to hold its whole float copy).

A fresh process per (checkpoint, weights) pair, so that each peak is the load's own:

    python bench/load_memory.py --checkpoint /path/to/ckpt [--checkpoint ...] --device cuda \\
        --weights auto,int8 --out load-memory.json

On CUDA it reports ``torch.cuda.max_memory_allocated`` (the load's peak) and the memory allocated
after it; on the CPU the process's anonymous resident memory (``RssAnon``), sampled every 5 ms
for the peak, and after the load. Load seconds are wall time of ``engine.registry.load_model``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

GIB = 2 ** 30


def rss_anon() -> int:
    """This process's anonymous resident memory in bytes (``RssAnon`` of /proc/self/status; 0 elsewhere)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def child(checkpoint: str, device: str, weights: str) -> dict:
    import torch

    from engine.registry import load_model

    peak = [0]
    stop = threading.Event()
    if device == "cpu":
        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_anon())
                time.sleep(0.005)

        threading.Thread(target=watch, daemon=True).start()
    else:
        torch.zeros(1, device=device)  # the context before the baseline
    before = torch.cuda.memory_allocated() if device == "cuda" else rss_anon()
    t = time.perf_counter()
    model = load_model(checkpoint, device=device, weights=weights)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    stop.set()
    if device == "cuda":
        after, top = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
    else:
        after, top = rss_anon(), max(peak[0], rss_anon())
    return {"checkpoint": Path(checkpoint).name, "device": device, "weights": weights, "dtype": str(model.dtype),
            "load_s": round(seconds, 2), "peak_gib": round((top - before) / GIB, 3),
            "after_gib": round((after - before) / GIB, 3),
            "measure": "cuda allocated" if device == "cuda" else "RssAnon"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", action="append", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--weights", default="auto,int8")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.checkpoint[0], args.device, args.weights)))
        return 0
    rows = []
    for checkpoint in args.checkpoint:
        for weights in args.weights.split(","):
            out = subprocess.run([sys.executable, __file__, "--child", "--checkpoint", checkpoint, "--device",
                                  args.device, "--weights", weights], capture_output=True, text=True)
            if out.returncode:
                print(out.stderr[-2000:], file=sys.stderr)
                return out.returncode
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{row['checkpoint']} {weights}: load {row['load_s']} s, peak {row['peak_gib']} GiB, "
                  f"after {row['after_gib']} GiB ({row['measure']})", flush=True)
            rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
