"""Batch-1 GPU decode step variants side by side in one process: the token loop's rate and the GPU step.

    python bench/decode_step.py --checkpoint /tmp/ck --out bench/results/decode-step.json

Each variant is a Triton step configuration (``engine.models.llama.triton_decode.DEFAULT_CONFIG``
keys, over ``default_config`` of the model's width) plus ``token_step`` (``False``: the loop before the token step, where the host embeds the
token, builds the paged slot and samples outside the graph). For each: the pipelined greedy loop
(``engine.generate.token_stream``, what ``ChatSession`` runs) over ``--new-tokens`` tokens after a
58-token prompt (``--prompt-tokens``), median tok/s of ``--rounds`` rounds after one untimed round (which captures the
graphs); the captured step's GPU time (300 back-to-back replays timed with CUDA events) and its
kernel count (torch.profiler); and, teacher-forced on the first variant's tokens, how often each
variant's argmax agrees with it and the largest logit difference (bf16 rounding and atomic-add
order make near-ties of random weights flip). Then the ``ChatSession`` streaming rate with the
default configuration, which ``bench/first_answers.py`` also reports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.triton_decode import step_profile  # noqa: E402
from engine.api.events import GenerationParams  # noqa: E402
from engine.cache import CacheConfig  # noqa: E402
from engine.generate import token_stream  # noqa: E402
from engine.models.llama.static_decode import StaticDecoder  # noqa: E402
from engine.sampling import make_sampler  # noqa: E402

DEFAULT_VARIANTS = [
    {"token_step": False},  # the loop before the token step
    {},  # the shipped defaults
]


def loop(m, prompt: torch.Tensor, n: int, token_step: bool) -> tuple[list[int], float]:
    """One pipelined greedy answer; returns its tokens and decode tok/s (first token to last)."""
    cache = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=prompt.shape[1] + n + 16))
    logits = m.prefill(m.embed(prompt), cache, range(0, prompt.shape[1]))
    if not token_step:
        m.supports_token_decode = lambda c: False  # instance attribute: the loop's old path
    try:
        stamps, tokens = [], []
        for t in token_stream(m, cache, make_sampler(GenerationParams()), prompt[0].tolist(), logits, n,
                              pipelined=True):
            tokens.append(t)
            stamps.append(time.perf_counter())
    finally:
        m.__dict__.pop("supports_token_decode", None)
        cache.release()
    return tokens, (len(tokens) - 1) / (stamps[-1] - stamps[0])


def teacher_forced(m, prompt: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """Logits ``[len(tokens), V]`` float32 of decode steps fed ``tokens`` (the token step's graph)."""
    cache = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=prompt.shape[1] + len(tokens) + 16))
    m.prefill(m.embed(prompt), cache, range(0, prompt.shape[1]))
    out = []
    try:
        for t in tokens:
            logits, _, _ = m.decode_token(torch.tensor([t], device=m.device), cache)
            out.append(logits.float().clone())
    finally:
        cache.release()
    return torch.cat(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=58,
                    help="context before the first decode step (a 13-tile photo question is ~900)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=None, help="JSON list of variant dicts (default: DEFAULT_VARIANTS)")
    args = ap.parse_args(argv)
    from bench.common import load_ours, machine, new_session, ours_generate

    variants = json.loads(args.variants) if args.variants else DEFAULT_VARIANTS
    session = load_ours(args.checkpoint, "cuda", torch.bfloat16)
    m = session.model
    res: dict = {"machine": machine("cuda"), "new_tokens": args.new_tokens, "prompt_tokens": args.prompt_tokens,
                 "variants": []}
    prompt = torch.randint(0, 49000, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(0)).to(m.device)
    base_tokens = base_logits = None
    with torch.inference_mode():
        for v in variants:
            v = dict(v)
            token_step = v.pop("token_step", True)
            r: dict = {"variant": dict(v, token_step=token_step)}
            try:
                m._static = StaticDecoder(m, triton_config=v)
                tokens, _ = loop(m, prompt, args.new_tokens, token_step)
                rates = [loop(m, prompt, args.new_tokens, token_step)[1] for _ in range(args.rounds)]
                r["tok_s"] = statistics.median(rates)
                r["tok_s_rounds"] = rates
                p = step_profile(m, top=8, kind="token" if token_step else "decode")
                r.update(replay_us=p["graph_replay_us"], kernels=p["kernels_per_step"], top_kernels=p["top_kernels"])
                logits = teacher_forced(m, prompt, tokens if base_tokens is None else base_tokens)
                if base_tokens is None:
                    base_tokens, base_logits = tokens, logits
                else:
                    r["argmax_agreement"] = (logits.argmax(-1) == base_logits.argmax(-1)).float().mean().item()
                    r["max_logit_diff"] = (logits - base_logits).abs().max().item()
                    r["same_greedy_prefix"] = next((i for i, (a, b) in enumerate(zip(tokens, base_tokens)) if a != b),
                                                   len(tokens))
            except Exception as exc:  # noqa: BLE001
                r["error"] = traceback.format_exc()[-1500:]
                print(f"{v}: error {exc!r:.300}", flush=True)
            print(json.dumps({k: (round(x, 3) if isinstance(x, float) else x) for k, x in r.items()
                              if k not in ("tok_s_rounds", "top_kernels")}), flush=True)
            res["variants"].append(r)
            m._static = None
            torch.cuda.empty_cache()
    m._static = None
    s = new_session(session, "paged", None)
    rates = [ours_generate(s, "Write a story about a robot.", [], args.new_tokens, "cuda")[2]
             for _ in range(args.rounds + 1)]
    res["session_tok_s"] = statistics.median(rates[1:])
    res["session_tok_s_rounds"] = rates
    print(f"ChatSession streaming (default config): {res['session_tok_s']:.0f} tok/s ({[round(x) for x in rates]})")
    Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
