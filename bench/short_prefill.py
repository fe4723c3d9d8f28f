"""A follow-up question's prefill on CUDA: the 32-row graph step against the eager prefill and the
per-token decode steps it replaced.

    python bench/short_prefill.py --checkpoint /tmp/ck [--past 1131] [--tokens 20 45] [--out short.json]

After ``--past`` cached tokens (a photo question's prompt), each of ``--tokens`` new tokens is
prefilled three ways into a paged cache: ``eager`` (``short_prefill_tokens = 0``: the decoder's
ordinary prefill), ``decode_steps`` (one replayed decode step per token, the way before the 32-row
step) and ``rows_graph`` (``LlamaLM.prefill``: ``StaticDecoder.prefill``'s replayed 32-row step).
Reports the median of 10 synchronized timings after 3 warm ones, the largest logit difference from
the eager prefill (bf16 rounding on random weights moves logits by up to ~1), and whether 16 greedy
tokens decoded afterwards equal the eager path's (random weights have near ties, so a single flip
shows up for both non-eager paths alike).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.cache import CacheConfig  # noqa: E402
from engine.registry import load_model  # noqa: E402

WAYS = ("eager", "decode_steps", "rows_graph")


@torch.inference_mode()
def measure(model, ids: torch.Tensor, past: int, n: int, way: str) -> tuple[torch.Tensor, list[int], float]:
    """``(last logits, 17 greedy tokens, median seconds)`` of prefilling ``n`` tokens after ``past``."""
    model.short_prefill_tokens = 0 if way == "eager" else 64
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=2048))
    model.prefill(model.embed(ids[:, :past]), cache, range(0, past))
    emb = model.embed(ids[:, past:past + n])

    def run() -> torch.Tensor:
        if way == "decode_steps":
            static = model._static_decoder()
            for i in range(n):
                logits = static.decode(emb[:, i:i + 1], cache)
            return logits
        return model.prefill(emb, cache, range(past, past + n))

    times = []
    for _ in range(13):
        cache.truncate(past)
        torch.cuda.synchronize()
        t = time.perf_counter()
        logits = run()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    tokens = [int(logits.argmax(-1))]
    for _ in range(16):
        step = model.decode(model.embed(torch.tensor([[tokens[-1]]], device=model.device)), cache)
        tokens.append(int(step.argmax(-1)))
    cache.release()
    return logits.float(), tokens, statistics.median(times[3:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--past", type=int, default=1131)
    ap.add_argument("--tokens", type=int, nargs="+", default=[20, 45])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA (the steps compared are CUDA graphs)", file=sys.stderr)
        return 2
    model = load_model(args.checkpoint, device="cuda")
    ids = torch.randint(0, 40000, (1, args.past + max(args.tokens)), generator=torch.Generator().manual_seed(0))
    ids = ids.cuda()
    result = {"checkpoint": args.checkpoint, "past": args.past, "gpu": torch.cuda.get_device_name()}
    for n in args.tokens:
        runs = {way: measure(model, ids, args.past, n, way) for way in WAYS}
        eager_logits, eager_tokens, _ = runs["eager"]
        result[str(n)] = {
            "ms": {way: round(r[2] * 1e3, 3) for way, r in runs.items()},
            "max_logit_diff_vs_eager": {way: (r[0] - eager_logits).abs().max().item() for way, r in runs.items()
                                        if way != "eager"},
            "logit_scale": eager_logits.abs().max().item(),
            "greedy17_equal_to_eager": {way: r[1] == eager_tokens for way, r in runs.items() if way != "eager"},
        }
        print(json.dumps({n: result[str(n)]}), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
