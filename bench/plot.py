"""Bar chart of ours/transformers ratios from bench/compare.py JSON files -> docs/benchmarks.png.

    python bench/plot.py bench/results/cpu.json bench/results/cpu-load.json bench/results/gpu-final.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def rows(paths):
    """(label, value, target, higher_is_better) for each figure of issue 7's table found in the JSONs
    (in argument order; :func:`main` keeps the last file's value of a figure)."""
    out = []
    for p in paths:
        res = json.loads(Path(p).read_text())
        dev = "H200" if res["device"] == "cuda" else "CPU"
        s = res["sections"]
        dec = s.get("decode", {})
        if dev == "CPU" and "ratio" in dec:
            out.append(("CPU fp32 decode / transformers", dec["ratio"], 2.0, True))
        if dev == "H200" and dec.get("transformers_static_compile_tok_s"):
            out.append(("H200 decode / transformers static+compile",
                        dec["ours_tok_s"] / dec["transformers_static_compile_tok_s"], 4.0, True))
        if dev == "H200" and dec.get("ours_tok_s"):
            out.append(("H200 decode / 1500 tok/s", dec["ours_tok_s"] / 1500, 1.0, True))
        q8 = res.get("llama_cpp_measured_earlier", {}).get("decode_tok_s_q8_0")
        if s.get("int8", {}).get("int8_tok_s") and q8:
            out.append(("CPU int8 decode / llama.cpp Q8_0", s["int8"]["int8_tok_s"] / q8, 1.0, True))
        if "ratio" in s.get("ttft", {}):
            out.append((f"{dev} image TTFT / transformers", s["ttft"]["ratio"], 0.6 if dev == "CPU" else 0.5, False))
        if "first_token_ratio" in s.get("load", {}):
            out.append((f"{dev} load to first token / transformers", s["load"]["first_token_ratio"], 0.5, False))
        if "ratio" in s.get("memory", {}):
            out.append((f"{dev} peak memory / transformers", s["memory"]["ratio"], 0.75, False))
    return out


def main(argv):
    data = list({row[0]: row for row in rows(argv)}.values())  # a later file's figure replaces an earlier one
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.45 * len(data)))
    names = [d[0] for d in data]
    ax.barh(names, [d[1] for d in data], color=["tab:green" if (d[1] >= d[2]) == d[3] else "tab:red" for d in data])
    for i, d in enumerate(data):
        ax.plot([d[2], d[2]], [i - 0.4, i + 0.4], "k--")
        ax.text(max(d[1], d[2]) * 1.04, i, f"{d[1]:.2f}x", va="center")  # right of the bar and the target
    ax.set_xscale("log")
    ax.set_xlim(right=max(max(d[1], d[2]) for d in data) * 2.5)
    ax.set_xlabel("ratio; dashed line = target (decode: higher is better; time, memory: lower is better)")
    ax.set_title("Smolchat's engine against transformers (green: target met)")
    fig.tight_layout()
    out = REPO / "docs" / "benchmarks.png"
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
