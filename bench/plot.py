"""Bar chart of ours/transformers ratios from bench/compare.py JSON files -> docs/benchmarks.png.

    python bench/plot.py bench/results/cpu.json bench/results/gpu-run3-decode-ttft.json bench/results/gpu-run2-memory-load.json
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
    out = []
    for p in paths:
        res = json.loads(Path(p).read_text())
        dev = "H200" if res["device"] == "cuda" else "CPU"
        s = res["sections"]
        if "ratio" in s.get("decode", {}):
            out.append((f"{dev} decode tok/s", s["decode"]["ratio"], 2.0 if dev == "CPU" else 4.0, True))
        if "ratio" in s.get("ttft", {}):
            out.append((f"{dev} image TTFT", s["ttft"]["ratio"], 0.6 if dev == "CPU" else 0.5, False))
        if "ratio" in s.get("load", {}):
            out.append((f"{dev} load", s["load"]["ratio"], 0.5, False))
        if "ratio" in s.get("memory", {}):
            out.append((f"{dev} peak memory", s["memory"]["ratio"], 0.75, False))
    return out


def main(argv):
    data = rows(argv)
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(data)))
    names = [d[0] for d in data]
    ax.barh(names, [d[1] for d in data], color=["tab:green" if (d[1] >= d[2]) == d[3] else "tab:red" for d in data])
    for i, d in enumerate(data):
        ax.plot([d[2], d[2]], [i - 0.4, i + 0.4], "k--")
        ax.text(d[1], i, f" {d[1]:.2f}x", va="center")
    ax.set_xscale("log")
    ax.set_xlabel("ours / transformers (dashed: target; decode higher is better, others lower)")
    fig.tight_layout()
    out = REPO / "docs" / "benchmarks.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
