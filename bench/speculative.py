"""Speculative decoding (prompt lookup + ``decode_all_logits``) against plain decoding.

    python bench/speculative.py                          # CPU, random weights at the SmolVLM-256M shape
    python bench/speculative.py --device cuda --json     # self-contained: no checkpoint or tokenizer needed
    python bench/speculative.py --model DIR              # a real checkpoint folder

Three measurements, greedy, end of utterance ignored:

1. Verification cost: seconds of one ``decode_all_logits`` call over ``k + 1`` positions relative to one
   ``decode`` (``c(k)``), at the cache tail after the prompt. With acceptance rate ``a`` a step yields
   ``E(a, k) = (1 - a**(k+1)) / (1 - a)`` tokens, so the speedup is about ``E(a, k) / c(k)``.
2. End to end on a transcription-style prompt (a passage, then the start of its quote): plain decoding,
   prompt lookup, and two stand-ins for a trained model copying text: an oracle drafter that proposes
   the plain answer (acceptance 1) and one that is wrong on every third token. Random weights do not
   copy text, so prompt lookup's own acceptance here says little about a trained model's.
   Every speculative run must reproduce the plain tokens exactly (checked).
3. The projected speedup for acceptance rates 0.5..0.9 from the measured cost curve.

Without ``--model`` the model is built in memory from ``--config`` (default: the shared
SmolVLM-256M-Instruct config folder) with random
weights (tools.make_checkpoint's initialisation), so the script runs on a bare GPU machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared import SHARED  # noqa: E402
from engine.api.events import GenerationParams  # noqa: E402
from engine.cache import CacheConfig  # noqa: E402
from engine.device import choose_device, choose_dtype  # noqa: E402
from engine.generate import token_stream  # noqa: E402
from engine.sampling import make_sampler  # noqa: E402
from engine.speculative import PromptLookupDrafter, SpeculativeDecoder  # noqa: E402

HERE = Path(__file__).resolve().parent
SHARED_CONFIG = SHARED / "models" / "SmolVLM-256M-Instruct"


def build_model(args, device, dtype):
    if args.model:
        from engine.registry import load_model

        return load_model(args.model, device, dtype)
    from engine.models.smolvlm import SmolVlmModel
    from engine.registry import parse_metadata
    from engine.sources import ModelSource
    from tools.make_checkpoint import random_state_dict

    meta = parse_metadata(json.loads((Path(args.config) / "config.json").read_text()),
                                    {"eos_token_id": 49279}, name="smolvlm-256m-random")

    class RandomSource(ModelSource):
        """Random weights at the real shape, in memory: loaded through the engine's own ``load``
        (fused projections, device placement) like any checkpoint."""

        folder = HERE

        def metadata(self):
            return meta

        def tensor_names(self):
            return list(random_state_dict(meta, seed=0))

        def tensors(self):
            yield from random_state_dict(meta, seed=0).items()

    return SmolVlmModel.load(RandomSource(), device, dtype)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def transcription_prompt(n_passage: int, seed: int = 0) -> list[int]:
    """``<|im_start|>User: Repeat exactly: <passage><end_of_utterance>\\nAssistant: <passage[:6]>`` as ids."""
    g = torch.Generator().manual_seed(seed)
    passage = torch.randint(1000, 40000, (n_passage,), generator=g).tolist()
    user = [1, 11126, 42, 46425, 3797, 42]  # "<|im_start|>User: Repeat exactly:" (approximate ids)
    return user + passage + [49279, 198, 9519, 42] + passage[:6]


def prefilled(model, ids, kind, extra):
    cache = model.create_kv_cache(CacheConfig(kind=kind, max_tokens=len(ids) + extra))
    logits = None
    for start in range(0, len(ids), 512):
        chunk = ids[start:start + 512]
        logits = model.prefill(model.embed(torch.tensor([chunk], device=model.device)), cache,
                               range(start, start + len(chunk)))
    return cache, logits


def cost_curve(model, ids, kind, max_k, reps, device):
    cache, _ = prefilled(model, ids, kind, max_k + 4)
    base = cache.seq_len
    times = {}
    for n in range(1, max_k + 2):
        x = model.embed(torch.randint(1000, 40000, (1, n), generator=torch.Generator().manual_seed(n)).to(device))
        samples = []
        for r in range(reps + 1):
            sync(device)
            t = time.perf_counter()
            if n == 1:
                model.decode(x, cache)
            else:
                model.decode_all_logits(x, cache)
            sync(device)
            if r:  # first call is warm-up
                samples.append(time.perf_counter() - t)
            cache.truncate(base)
        times[n] = statistics.median(samples)
    return {k: times[k + 1] / times[1] for k in range(0, max_k + 1)}, times[1]


class Oracle:
    """Proposes the known answer; with ``wrong_every`` = 3 every third drafted position is wrong."""

    def __init__(self, ref, wrong_every=0):
        self.ref, self.wrong_every = ref, wrong_every

    def propose(self, history, k):
        i = len(history)
        out = self.ref[i:i + k]
        if self.wrong_every:
            out = [t if (i + j) % self.wrong_every != self.wrong_every - 1 else t + 1 for j, t in enumerate(out)]
        return out


def run(model, ids, kind, n, device, drafter=None, speculative=True, max_draft=8):
    cache, logits = prefilled(model, ids, kind, n + max_draft + 2)
    sampler = make_sampler(GenerationParams())
    spec = SpeculativeDecoder(model, cache, sampler, drafter, max_draft=max_draft) if speculative else None
    sync(device)
    t = time.perf_counter()
    tokens = list(token_stream(model, cache, sampler, list(ids), logits, n, spec))
    sync(device)
    elapsed = time.perf_counter() - t
    out = {"tokens_per_s": (len(tokens) - 1) / elapsed, "seconds": elapsed}
    if spec:
        out.update(draft_tokens=spec.draft_tokens, accepted_tokens=spec.accepted_tokens,
                   acceptance_rate=round(spec.acceptance_rate, 4), verify_steps=spec.steps,
                   plain_steps=spec.plain_steps)
    return tokens, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="speculative decoding vs plain decoding")
    ap.add_argument("--model", default=None, help="checkpoint folder (default: random SmolVLM-256M in memory)")
    ap.add_argument("--config", default=str(SHARED_CONFIG),
                    help="SmolVLM config folder for the in-memory random model (default: the shared copy)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    ap.add_argument("--cache", choices=["paged", "contiguous"], default="paged")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--passage", type=int, default=300, help="tokens of the passage to quote")
    ap.add_argument("--max-draft", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5, help="repetitions per point of the cost curve")
    ap.add_argument("--ignore-eos", action="store_true", default=True, help="always on: decode to --max-new-tokens")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = choose_device(args.device)
    dtype = choose_dtype(device, args.dtype)
    torch.manual_seed(0)
    model = build_model(args, device, dtype)
    ids = transcription_prompt(args.passage)
    n = args.max_new_tokens

    costs, decode_s = cost_curve(model, ids, args.cache, args.max_draft, args.reps, device)
    run(model, ids, args.cache, 8, device, speculative=False)  # warm-up
    plain, plain_stats = run(model, ids, args.cache, n, device, speculative=False)
    results = {"plain": plain_stats}
    identical = {}
    for name, drafter in [("prompt_lookup", PromptLookupDrafter(ignore_ids=(model.metadata.image_token_id,))),
                          ("oracle", Oracle(ids + plain)), ("oracle_2_of_3", Oracle(ids + plain, 3))]:
        tokens, stats = run(model, ids, args.cache, n, device, drafter, max_draft=args.max_draft)
        stats["speedup"] = round(stats["tokens_per_s"] / plain_stats["tokens_per_s"], 3)
        identical[name] = tokens == plain
        results[name] = stats
    projected = {}
    for a in (0.5, 0.6, 0.7, 0.8, 0.9):
        best = max(range(1, args.max_draft + 1), key=lambda k: (1 - a ** (k + 1)) / (1 - a) / costs[k])
        projected[str(a)] = {"k": best, "speedup": round((1 - a ** (best + 1)) / (1 - a) / costs[best], 3)}
    report = {
        "device": str(device), "dtype": str(dtype).removeprefix("torch."), "cache": args.cache,
        "model": args.model or "random SmolVLM-256M shape", "prompt_tokens": len(ids), "new_tokens": n,
        "decode_ms": round(decode_s * 1e3, 3),
        "verify_cost_vs_decode": {str(k): round(v, 3) for k, v in costs.items() if k},
        "runs": results, "identical_to_plain": identical, "projected_speedup": projected,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['model']} on {report['device']} ({report['dtype']}, {args.cache} cache), "
              f"prompt {len(ids)} tokens, {n} new tokens, one decode {report['decode_ms']:.2f} ms")
        print("verification cost c(k) = time(decode_all_logits, k+1 positions) / time(decode):")
        print("  " + "  ".join(f"k={k}: {v:.2f}" for k, v in report["verify_cost_vs_decode"].items()))
        print(f"{'run':<15} {'tok/s':>8} {'speedup':>8} {'drafted':>8} {'accepted':>9} {'rate':>6} {'same':>5}")
        for name, s in results.items():
            print(f"{name:<15} {s['tokens_per_s']:8.1f} {s.get('speedup', 1.0):8.2f} {s.get('draft_tokens', 0):8d} "
                  f"{s.get('accepted_tokens', 0):9d} {s.get('acceptance_rate', 0):6.2f} "
                  f"{str(identical.get(name, True)):>5}")
        print("projected speedup from the cost curve: " + ", ".join(
            f"a={a}: {p['speedup']:.2f}x (k={p['k']})" for a, p in projected.items()))
    return 0 if all(identical.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
