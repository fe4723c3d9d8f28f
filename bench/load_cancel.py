"""How soon a stopped model load ends, and what memory it gives back (the app's Esc while a model
loads: ``EngineService.cancel_load``).

A fresh process per stop time, as a user's first load is: the engine service starts loading the
checkpoint the app's way (``default_loader``: ``ChatSession.load``, its CUDA warm-up included), the
load is stopped ``--after`` seconds in, and the time from the stop to the load's "stopped" answer is
measured, with the memory the process holds before the load, at the stop and after it (on the CPU
the anonymous resident memory, ``RssAnon``; on CUDA ``torch.cuda.memory_allocated``):

    python bench/load_cancel.py --checkpoint /path/to/ckpt --device cpu --weights int8 \\
        --after 1,3,9 --out load-cancel.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load_memory import GIB, rss_anon  # noqa: E402


def child(checkpoint: str, device: str, weights: str, after: float) -> dict:
    import torch

    from engine.service import EngineService

    def held() -> int:
        return torch.cuda.memory_allocated() if device == "cuda" else rss_anon()

    if device == "cuda":
        torch.zeros(1, device=device)  # the context before the baseline
    service = EngineService()
    ended = threading.Event()
    result: list = []
    before = held()
    t = time.perf_counter()
    service.load(checkpoint, {"device": device, "weights": weights},
                 lambda info, message: (result.append(message or "loaded"), ended.set()))
    ended.wait(after)
    at_stop = held()
    stopped_at = time.perf_counter()
    stopped = service.cancel_load()
    ended.wait(600)
    end = time.perf_counter()
    time.sleep(0.2)  # (the service frees what the load built after answering)
    if device == "cuda":
        torch.cuda.synchronize()
    service.shutdown()
    return {"checkpoint": Path(checkpoint).name, "device": device, "weights": weights, "after_s": after,
            "stopped": stopped, "result": result[0] if result else "",
            "stopped_to_end_s": round(end - stopped_at, 3), "load_ran_s": round(end - t, 2),
            "at_stop_gib": round((at_stop - before) / GIB, 3), "after_gib": round((held() - before) / GIB, 3),
            "measure": "cuda allocated" if device == "cuda" else "RssAnon"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--after", default="1,3", help="seconds into the load to stop it, comma-separated")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.checkpoint, args.device, args.weights, float(args.after))))
        return 0
    rows = []
    for after in args.after.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", "--checkpoint", args.checkpoint, "--device",
                              args.device, "--weights", args.weights, "--after", after], capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-2000:], file=sys.stderr)
            return out.returncode
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{row['checkpoint']} {args.weights} on {args.device}, stopped {after} s in: "
              f"{row['result']!r} {row['stopped_to_end_s']} s after the stop; held at the stop "
              f"{row['at_stop_gib']} GiB, after {row['after_gib']} GiB ({row['measure']})", flush=True)
        rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
