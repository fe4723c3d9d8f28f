"""Our CPU decode (and prefill) against llama.cpp at equal precision, side by side, in one run.

Both engines get the same random weights at SmolVLM-256M's text shape: a float32 checkpoint from
``tools.make_checkpoint``, converted by llama.cpp's ``convert_hf_to_gguf.py --outtype f32`` and
quantized by ``llama-quantize`` to Q8_0 and Q4_K_M. Pairs: float32 vs f32, our int8 (per-row) vs
Q8_0, our 4-bit (blocks of 32, ``weights="int4"``) vs Q4_K_M. Each round runs every pair,
alternating engines, because the machine is shared; medians are reported, with the load average
before and after each measurement.

- decode: ours streams 128 greedy tokens after the ~60-token text prompt through ``ChatSession``
  (what the app does: tokenizer, sampling, paged cache); llama.cpp is ``llama-bench -n 128 -d P``
  (128 tokens generated after P tokens of context, P = our prompt length).
- prefill: 512 text tokens. Ours is one ``prefill`` call (eager batched matmuls); llama.cpp is
  ``llama-bench -p 512``.

    python bench/cpu_llamacpp.py --out bench/results/cpu-llamacpp.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.common import load_ours, machine, median, new_session, ours_generate  # noqa: E402
from bench.compare import TEXT_PROMPT, session_prompt  # noqa: E402
from bench.shared import SHARED  # noqa: E402

PAIRS = [("float32", "auto", "f32"), ("int8", "int8", "q8_0"), ("4-bit", "int4", "q4_k_m")]


def load() -> list[str]:
    try:
        return open("/proc/loadavg").read().split()[:3]
    except OSError:
        return []


def llama_paths(args) -> tuple[Path, Path]:
    from tools.build_llama_cpp import cache_root

    root = cache_root() / "llama.cpp"
    return root / "build" / "bin", root


def float32_checkpoint(ck: Path) -> Path:
    """``ck``, written once (random float32 weights at SmolVLM-256M's shape) if it has no config."""
    if not (ck / "config.json").is_file():
        from tools.make_checkpoint import write_checkpoint

        write_checkpoint(SHARED / "models" / "SmolVLM-256M-Instruct", ck, tiny=False,
                         dtype="float32", seed=0)
    return ck


def convert(tree: Path, ck: Path, out: Path, *extra: str, outtype: str = "f32") -> Path:
    """``ck`` as an ``outtype`` (f32, q8_0, ...) GGUF at ``out`` (llama.cpp's ``convert_hf_to_gguf.py``),
    unless it exists."""
    if not out.is_file():
        subprocess.run([sys.executable, str(tree / "convert_hf_to_gguf.py"), str(ck), "--outtype", outtype,
                        "--outfile", str(out), *extra], check=True, capture_output=True)
    return out


def make_ggufs(args, ck: Path) -> dict[str, Path]:
    """The checkpoint as f32 / Q8_0 / Q4_K_M GGUFs (made once, cached in ``--gguf-dir``)."""
    bin_dir, tree = llama_paths(args)
    out = Path(args.gguf_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {kind: out / f"text-{kind}.gguf" for _, _, kind in PAIRS}
    convert(tree, ck, files["f32"])
    for kind in ("q8_0", "q4_k_m"):
        if not files[kind].is_file():
            subprocess.run([str(bin_dir / "llama-quantize"), str(files["f32"]), str(files[kind]), kind.upper()],
                           check=True, capture_output=True)
    return files


def _bench_once(args, gguf: Path, flags: list[str]) -> float | None:
    bin_dir, _ = llama_paths(args)
    cmd = [str(bin_dir / "llama-bench"), "-m", str(gguf), "-t", str(args.threads), "-r", "1", "-o", "json", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return float(json.loads(proc.stdout)[0]["avg_ts"]) if proc.returncode == 0 else None


def llama_bench(args, gguf: Path, *flags: str) -> tuple[float, str]:
    """tokens/s of one llama-bench test (one repetition) and how llama.cpp ran it.

    On AMX CPUs this llama.cpp build's repacked quantized weights (its default) crash with SIGSEGV on
    any batch of more than one token at this model's shape (hidden size 576). Then the test runs
    again with ``--repack 0`` and, for decode, also repacked at depth 0 (no prompt before the
    generated tokens, so no batch); the faster is llama.cpp's figure.

    Raises:
        RuntimeError: every way failed."""
    flags = list(flags)
    ts = _bench_once(args, gguf, flags)
    if ts is not None:
        return ts, "default"
    tries = {"repack 0": _bench_once(args, gguf, [*flags, "--repack", "0"])}
    if "-d" in flags:
        depth0 = list(flags)
        depth0[flags.index("-d") + 1] = "0"
        tries["repacked, depth 0"] = _bench_once(args, gguf, depth0)
    good = {k: v for k, v in tries.items() if v is not None}
    if not good:
        raise RuntimeError(f"llama-bench failed on {gguf.name} with {flags}, also without repacking")
    best = max(good, key=good.get)
    return good[best], best


def ours_prefill(model, n: int) -> float:
    """tokens/s of one ``n``-token prefill into a fresh paged cache."""
    from engine.cache import CacheConfig

    ids = torch.randint(0, 49000, (1, n), generator=torch.Generator().manual_seed(0))
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=n + 16))
    emb = model.embed(ids)
    t = time.perf_counter()
    model.prefill(emb, cache, range(0, n))
    dt = time.perf_counter() - t
    cache.release()
    return n / dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="float32 checkpoint (default: made once with "
                    "tools.make_checkpoint from shared/models/SmolVLM-256M-Instruct)")
    ap.add_argument("--gguf-dir", default=str(Path.home() / ".cache" / "smolchat-bench" / "gguf-256m-random"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--sections", default="decode,prefill")
    ap.add_argument("--head4", action="store_true",
                    help="also our 4-bit weights with a 4-bit lm_head (int4 before session 56) against Q4_K_M")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "cpu-llamacpp.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ck = float32_checkpoint(Path(args.checkpoint) if args.checkpoint else Path(args.gguf_dir) / "checkpoint-f32")
    ggufs = make_ggufs(args, ck)
    from engine.layers.linear import quantize_weights
    from engine.native import build

    session = load_ours(str(ck), "cpu", torch.float32)
    step = build.describe(wait=True)
    models = {"auto": session.model}
    pairs = PAIRS + ([("4-bit, 4-bit head", "int4-head4", "q4_k_m")] if args.head4 else [])
    for _, w, _ in pairs:
        if w not in ("auto", "int4-head4"):
            models[w] = quantize_weights(session.model, w)
    if args.head4:
        # int4 as it was before the lm_head stayed int8 (engine.layers.linear.head_class): the same
        # 4-bit decoder, the head in 4-bit blocks too.
        from engine.layers.q4 import Q4Linear

        head4 = models["int4-head4"] = quantize_weights(session.model, "int4")
        head4.lm_head = Q4Linear(session.model.lm_head)
        head4._static = head4._native = None
    prompt = len(session_prompt(session, TEXT_PROMPT)[0])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    res = {"machine": machine("cpu"), "commit": commit, "cpu_flags": [f for f in flags if f.startswith(("avx", "fma", "amx"))],
           "cpu_decode_step": step, "threads": args.threads,
           "checkpoint": str(ck), "prompt_tokens": prompt, "new_tokens": args.new_tokens, "rounds": []}
    out = Path(args.out)

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2))

    sections = args.sections.split(",")
    for r in range(args.rounds + 1):  # round 0 warms both engines up and is not counted
        rnd = {"round": r, "load_start": load()}
        for name, w, kind in pairs:
            model = models[w]
            if "decode" in sections:
                session.model = model
                s = new_session(session, "paged", 2048)
                ours = ours_generate(s, TEXT_PROMPT, [], args.new_tokens, "cpu")[2]
                theirs, how = llama_bench(args, ggufs[kind], "-p", "0", "-n", str(args.new_tokens), "-d", str(prompt))
                rnd[f"decode_{name}"] = {"ours": ours, "llama_cpp": theirs, "llama_cpp_run": how, "load": load()}
                print(f"round {r} decode {name:8s} ours {ours:6.1f} tok/s  llama.cpp {kind} {theirs:6.1f} tok/s"
                      f" ({how})  load {load()[0]}", flush=True)
            if "prefill" in sections:
                ours = ours_prefill(model, args.prefill_tokens)
                theirs, how = llama_bench(args, ggufs[kind], "-p", str(args.prefill_tokens), "-n", "0")
                rnd[f"prefill_{name}"] = {"ours": ours, "llama_cpp": theirs, "llama_cpp_run": how, "load": load()}
                print(f"round {r} pp{args.prefill_tokens} {name:8s} ours {ours:6.1f} tok/s  llama.cpp {kind} "
                      f"{theirs:6.1f} tok/s ({how})  load {load()[0]}", flush=True)
        rnd["load_end"] = load()
        if r:
            res["rounds"].append(rnd)
        save()
    summary = {}
    for sec in ("decode", "prefill"):
        for name, _, kind in pairs:
            key = f"{sec}_{name}"
            rows = [rnd[key] for rnd in res["rounds"] if key in rnd]
            if rows:
                o, t = median([x["ours"] for x in rows]), median([x["llama_cpp"] for x in rows])
                summary[key] = {"ours_tok_s": o, "llama_cpp": kind, "llama_cpp_tok_s": t, "ratio": o / t}
    res["summary"] = summary
    res["machine"]["loadavg_end"] = load()
    save()
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
