"""The short-prefill step's launch parameters (rows_block_n, rows_block_k, rows_warps) for a
follow-up's 16 new tokens after ~900 cached (session 27): the step's graph replay timed
synchronized, median of 30 after 5 warm ones, per config; logits against the default config's.

    python rows_sweep.py CHECKPOINT [PAST] [NEW] [attention]

``attention``: the attention kernel's tile, warps and query block instead, with the GEMMs at the
first sweep's best.
"""
import itertools
import statistics
import sys
import time

import torch

from engine.cache import CacheConfig
from engine.registry import load_model

ck = sys.argv[1]
past = int(sys.argv[2]) if len(sys.argv) > 2 else 898
new = int(sys.argv[3]) if len(sys.argv) > 3 else 16
model = load_model(ck, device="cuda")
torch.manual_seed(0)
ids = torch.randint(0, 40000, (1, past + new))
static = model._static_decoder()
with torch.inference_mode():
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=2048))
    model.prefill(model.embed(ids[:, :past]), cache, range(0, past))
    emb = model.embed(ids[:, past:])
    model.prefill(emb, cache, range(past, past + new))  # builds the Triton step
    tri = static.triton
    default = dict(tri.cfg)
    ref = None
    rows = []
    if len(sys.argv) > 4 and sys.argv[4] == "attention":  # the GEMMs' best from the first sweep
        base = {"rows_block_n": 16, "rows_block_k": 256, "rows_warps": 2}
        configs = [dict(base, **dict(zip(("rows_block_t", "rows_attn_warps", "rows_block_q"), c)))
                   for c in itertools.product((16, 32, 64), (2, 4, 8), (16, 32, 64))]
        default.update(base)
    else:
        configs = [dict(zip(("rows_block_n", "rows_block_k", "rows_warps"), c))
                   for c in itertools.product((16, 32, 64), (64, 128, 256), (2, 4, 8))]
    configs = [{k: default[k] for k in configs[0]}] + configs
    # A graph per config under its own key: dropping captured graphs tripped the caching
    # allocator's assert (their pool is shared).
    key_of, tag = static._graph_key, [0]
    static._graph_key = lambda kind, kv: key_of(kind + (tag[0],) if kind[0] == "rows" else kind, kv)
    for n, cfg in enumerate(configs):
        if 576 % cfg["rows_block_n"] or (cfg["rows_block_n"] == 64 and cfg["rows_block_k"] == 256):
            continue
        tri.cfg.update(cfg)
        tag[0] = n + 1
        times = []
        try:
            for _ in range(35):
                cache.truncate(past)
                torch.cuda.synchronize()
                t = time.perf_counter()
                logits = model.prefill(emb, cache, range(past, past + new))
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
        except Exception as exc:  # noqa: BLE001
            print(cfg, "failed:", repr(exc)[:200])
            continue
        if not static.rows_triton:  # the step fell back to PyTorch for this config
            print(cfg, "failed: the Triton rows step did not build or capture")
            static.rows_triton = True
            continue
        if ref is None:
            ref = logits.float()
        diff = float((logits.float() - ref).abs().max())
        med = statistics.median(times[5:]) * 1e6
        graph = next(v[0] for k, v in static.graphs.items() if k[0][0] == "rows" and k[0][-1] == tag[0])
        rows.append([cfg, diff, med, graph, []])
        print(f"{cfg}  prefill call {med:7.1f} us  max logit diff vs default {diff:.3f}", flush=True)
    # The graph alone, GPU time: 50 back-to-back replays between two events, configs alternating.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        for row in rows:
            torch.cuda.synchronize()
            start.record()
            for _ in range(50):
                row[3].replay()
            end.record()
            torch.cuda.synchronize()
            row[4].append(start.elapsed_time(end) / 50 * 1000)
    print("graph replay, GPU us (5 rounds of 50, alternating), best first:")
    for cfg, diff, med, _, gpu in sorted(rows, key=lambda r: statistics.median(r[4])):
        print(f"  {cfg}  median {statistics.median(gpu):7.1f} us  rounds {' '.join(f'{x:.1f}' for x in gpu)}  diff {diff:.3f}")
