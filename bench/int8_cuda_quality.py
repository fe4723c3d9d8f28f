"""What CUDA's int8 weights cost in quality, measured on the CPU with SmolLM2-135M-Instruct's real
weights: perplexity with bf16 activations and int8 weights widened to bf16 times their bf16 scale
(:meth:`Int8Linear.forward_widened <engine.layers.linear.Int8Linear.forward_widened>`, the arithmetic
a CUDA prefill runs; the Triton decode step rounds once less), against bf16 and float32 weights.
Same protocol as ``bench/real_weights.py --sections perplexity`` (windows of ``--context`` tokens,
stride ``--context``), so its float32 figures match that run's.

    python bench/int8_cuda_quality.py --model SmolLM2-135M-Instruct.Q4_1.gguf --out bench/results/int8-cuda-quality.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared import SHARED  # noqa: E402

RUNS = (("float32", "float32", "auto"), ("bfloat16", "bfloat16", "auto"),
        ("bfloat16 + int8 weights (CUDA's arithmetic)", "bfloat16", "int8"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, type=Path, help="SmolLM2-135M-Instruct GGUF (or folder)")
    ap.add_argument("--texts", nargs="*", type=Path,
                    default=[SHARED / "texts" / "apache-2.0.txt", SHARED / "texts" / "gpl-3.0.txt"])
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from engine.layers.linear import Int8Linear
    from engine.perplexity import perplexity
    from engine.registry import load_model
    from engine.sources import resolve_source
    from engine.tokenizer import Tokenizer

    source = resolve_source(args.model)
    tokenizer = Tokenizer.from_pretrained(source.folder)
    texts = {t.stem: tokenizer.encode(t.read_text(encoding="utf-8")) for t in args.texts}
    out: dict = {"model": args.model.name, "context": args.context, "stride": args.context,
                 "tokens": {name: len(ids) for name, ids in texts.items()}, "perplexity": {}}
    cpu_forward = Int8Linear.forward
    try:
        for label, dtype, weights in RUNS:
            Int8Linear.forward = Int8Linear.forward_widened if weights == "int8" else cpu_forward
            model = load_model(source, "cpu", dtype, weights=weights)
            for name, ids in texts.items():
                t = time.perf_counter()
                r = perplexity(model, ids, args.context, args.context).to_dict()
                out["perplexity"].setdefault(label, {})[name] = r | {"seconds": round(time.perf_counter() - t, 1)}
                print(f"{label} {name}: {r['perplexity']:.4f}", file=sys.stderr, flush=True)
            del model
    finally:
        Int8Linear.forward = cpu_forward
    for base in ("float32", "bfloat16"):
        out[f"int8_vs_{base}"] = {name: round(out["perplexity"][RUNS[2][0]][name]["perplexity"]
                                              / out["perplexity"][base][name]["perplexity"] - 1, 5) for name in texts}
    print(json.dumps({k: v for k, v in out.items() if k.startswith("int8_vs")}))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
