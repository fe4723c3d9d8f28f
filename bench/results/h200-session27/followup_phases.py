"""A follow-up's phases in process (session 27): ChatSession as the server's engine loads it, a new
photo's turn, then a follow-up of ~16 new tokens after ~900 cached. Stamps: the prompt
(_fit_context), the prefill's host work before the model (cache match, tiles), embed_multimodal,
model.prefill (host: the graph launch returns before the GPU is done), and the first token; every
other follow-up synchronizes after model.prefill to split the GPU's share off.

    python followup_phases.py CHECKPOINT PHOTO [RUNS]
"""
import statistics
import sys
import time

import torch
from PIL import Image

from engine.api import GenerationParams, TokenEvent
from engine.chat import ChatSession
from engine.service import default_loader

ck, photo_path = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 40
session = default_loader(ck, {})
model = session.model
params = GenerationParams(max_new_tokens=8, ignore_eos=True, image_detail="full")
S = {}
SYNC = [False]


def stamp(obj, name, key, sync=False):
    orig = getattr(obj, name)

    def inner(*a, **k):
        S[key + "0"] = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            if sync and SYNC[0] and torch.cuda.is_available():
                torch.cuda.synchronize()
            S[key + "1"] = time.perf_counter()
    setattr(obj, name, inner)


stamp(ChatSession, "_fit_context", "fit")
stamp(ChatSession, "_prefill", "pf")
stamp(model, "embed_multimodal", "emb")
stamp(model, "prefill", "model", sync=True)
base = Image.open(photo_path).convert("RGB")


def photo(i):
    img = base.copy()
    img.putpixel((0, 0), (i % 256, 3, 7))
    path = f"/tmp/fp{i}.png"
    img.save(path)
    return path


def turn(text, images):
    S.clear()
    t0 = time.perf_counter()
    first = None
    for ev in session.send(text, images=images, params=params):
        if isinstance(ev, TokenEvent) and ev.token_id >= 0 and first is None:
            first = time.perf_counter()
    return {"ttft": first - t0, "prompt": S["fit1"] - S["fit0"], "before model": S["emb0"] - S["pf0"],
            "embed": S["emb1"] - S["emb0"], "model.prefill": S["model1"] - S["model0"],
            "after model": S["pf1"] - S["model1"], "first token": first - S["pf1"]}


rows = {False: [], True: []}
firsts = []
for i in range(runs):
    session.reset()
    session.system_prompt = f"Run {i}."
    t0 = time.perf_counter()
    turn("Describe this photo.", [photo(i)])
    firsts.append(time.perf_counter() - t0)
    SYNC[0] = bool(i % 2)
    r = turn("What colours does it have?", [])
    SYNC[0] = False
    if i >= 4:
        rows[bool(i % 2)].append(r)
for sync, rs in rows.items():
    print(f"follow-up, {'synchronized after model.prefill' if sync else 'as shipped'} (median of {len(rs)}, ms):")
    print("  " + ", ".join(f"{k} {statistics.median(r[k] for r in rs) * 1000:.3f}" for k in rs[0]))
