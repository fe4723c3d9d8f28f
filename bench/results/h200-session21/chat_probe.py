"""Session 21 probe (issue 17): why ChatSession streams slower than the raw token loop.

    python .device-in/chat_probe.py CHECKPOINT OUT.json

Per-token gaps (p50/p90/max) of ChatSession answers (256 tokens, ignore_eos, greedy), with the
cyclic GC on and off, the raw token_stream on the same model for comparison, and a cProfile of
one answer (top functions by own time)."""

import cProfile
import gc
import io
import json
import pstats
import statistics
import sys
import time

sys.path.insert(0, ".")
import torch  # noqa: E402

from bench.common import load_ours, new_session  # noqa: E402
from engine.api.events import DoneEvent, GenerationParams, TokenEvent  # noqa: E402


def answer(s, n=256, text="Write a story about a robot."):
    params = GenerationParams(max_new_tokens=n, ignore_eos=True, temperature=0.0)
    torch.cuda.synchronize()
    stamps, done = [], None
    for ev in s.send(text, params=params):
        if isinstance(ev, TokenEvent) and ev.token_id >= 0:
            stamps.append(time.perf_counter())
        elif isinstance(ev, DoneEvent):
            done = ev
    gaps = sorted((b - a) * 1e6 for a, b in zip(stamps, stamps[1:]))
    return {"tok_s": round((len(stamps) - 1) / (stamps[-1] - stamps[0]), 1), "p50": round(statistics.median(gaps), 1),
            "p90": round(gaps[len(gaps) * 9 // 10], 1), "p99": round(gaps[len(gaps) * 99 // 100], 1),
            "max": round(gaps[-1], 1), "over_1ms": sum(g > 1000 for g in gaps), "reason": done.finish_reason,
            "text_chars": sum(len(e) for e in [])}


def main():
    ck, out = sys.argv[1], sys.argv[2]
    res = {}
    session = load_ours(ck, "cuda", torch.bfloat16)
    s = new_session(session, "paged", None)
    for _ in range(2):
        answer(s)
    rows = []
    for mode in ("gc on", "gc off", "gc on", "gc off", "gc frozen"):
        if mode == "gc off":
            gc.disable()
        elif mode == "gc frozen":
            gc.collect()
            gc.freeze()
        r = answer(s)
        gc.enable()
        r["mode"] = mode
        r["gc_counts"] = gc.get_count()
        rows.append(r)
        print(json.dumps(r), flush=True)
    res["chat"] = rows
    # A fresh session for every answer (no prefix reuse), as decode_step's ChatSession line does.
    rows = []
    for _ in range(3):
        s = new_session(session, "paged", None)
        r = answer(s)
        rows.append(r)
        print("fresh session", json.dumps(r), flush=True)
    res["chat_fresh_session"] = rows
    prof = cProfile.Profile()
    prof.enable()
    r = answer(s)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
    res["profiled"] = r
    res["profile"] = buf.getvalue()
    print(buf.getvalue()[:6000], flush=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
