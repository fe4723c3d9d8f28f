"""Where a follow-up's ~3 ms in process go (session 26): ChatSession as the server's engine loads it,
a new photo's turn, then a follow-up; stamps around _fit_context, _prefill and the first token with
and without a CUDA sync after the prefill; then cProfile (host Python) of 8 follow-ups and
torch.profiler of one.

    python followup_profile.py CHECKPOINT PHOTO
"""
import cProfile
import functools
import io
import pstats
import statistics
import sys
import time

import torch
from PIL import Image

from engine.api import GenerationParams, TokenEvent
from engine.chat import ChatSession
from engine.service import default_loader

ck, photo_path = sys.argv[1], sys.argv[2]
session = default_loader(ck, {})
params = GenerationParams(max_new_tokens=8, ignore_eos=True, image_detail="full")
STAMPS = {}
SYNC = [False]


def wrap(name):
    orig = getattr(ChatSession, name)

    @functools.wraps(orig)
    def inner(self, *a, **k):
        STAMPS[name + "_start"] = time.perf_counter()
        try:
            return orig(self, *a, **k)
        finally:
            if SYNC[0] and name == "_prefill":
                torch.cuda.synchronize()
            STAMPS[name + "_end"] = time.perf_counter()
    setattr(ChatSession, name, inner)


wrap("_fit_context")
wrap("_prefill")
base = Image.open(photo_path).convert("RGB")


def photo(i):
    img = base.copy()
    img.putpixel((0, 0), (i % 256, 3, 7))
    path = f"/tmp/fp{i}.png"
    img.save(path)
    return path


def turn(text, images):
    STAMPS.clear()
    t0 = time.perf_counter()
    first = None
    for ev in session.send(text, images=images, params=params):
        if isinstance(ev, TokenEvent) and ev.token_id >= 0 and first is None:
            first = time.perf_counter()
    return {"ttft": first - t0, "to_fit": STAMPS["_fit_context_start"] - t0,
            "fit": STAMPS["_fit_context_end"] - STAMPS["_fit_context_start"],
            "prefill": STAMPS["_prefill_end"] - STAMPS["_prefill_start"], "first": first - STAMPS["_prefill_end"]}


rows = {False: [], True: []}
for i in range(24):
    session.reset()
    session.system_prompt = f"Run {i}."
    turn("Describe this photo.", [photo(i)])
    SYNC[0] = bool(i % 2)
    r = turn("What colours does it have?", [])
    if i >= 4:
        rows[SYNC[0]].append(r)
    SYNC[0] = False
for sync, rs in rows.items():
    print(f"follow-up, {'synchronized after the prefill' if sync else 'as shipped'} (median of {len(rs)}, ms):",
          {k: round(statistics.median(r[k] for r in rs) * 1000, 3) for k in rs[0]})

prof = cProfile.Profile()
for i in range(8):
    session.reset()
    session.system_prompt = f"Prof {i}."
    turn("Describe this photo.", [photo(100 + i)])
    prof.enable()
    turn("What colours does it have?", [])
    prof.disable()
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(35)
print(out.getvalue())
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(45)
print(out.getvalue())

session.reset()
session.system_prompt = "Torch profile."
turn("Describe this photo.", [photo(200)])
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as p:
    turn("What colours does it have?", [])
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
print(p.key_averages().table(sort_by="self_cuda_time_total", row_limit=20))
