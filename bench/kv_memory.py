"""KV memory a conversation reserves as it grows: paged vs contiguous cache, SmolVLM-256M shape.

Drives real caches through ``begin_forward``/``end_forward`` (no attention is computed) on the
``meta`` device, so nothing is allocated and the numbers are the caches' own ``nbytes``: the
contiguous cache reserves ``max_tokens`` up front, the paged cache grows one block at a time.

    python bench/kv_memory.py                       # table every 64 tokens, plot to docs/kv_memory.png
    python bench/kv_memory.py --step 512 --markdown # the table in docs/KV_CACHE.md

matplotlib is only needed for the plot (``pip install matplotlib``; not a runtime dependency).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.kv_cache import CacheShape, ContiguousKVCache, PagedKVCache  # noqa: E402

SMOLVLM_256M = CacheShape(num_layers=30, num_kv_heads=3, head_dim=64)  # text model of SmolVLM-256M
MAX_TOKENS = 8192
BLOCK_SIZE = 16
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MIB = 2**20


def reserved_bytes(dtype: torch.dtype, tokens: list[int]) -> dict[str, list[int]]:
    """Bytes each cache reserves after a conversation has grown to each count in ``tokens``."""
    contiguous = ContiguousKVCache(SMOLVLM_256M, MAX_TOKENS, "meta", dtype)
    paged = PagedKVCache(SMOLVLM_256M, MAX_TOKENS, "meta", dtype, block_size=BLOCK_SIZE)
    out: dict[str, list[int]] = {"contiguous": [], "paged": []}
    for t in tokens:
        for cache in (contiguous, paged):
            if t > cache.seq_len:
                cache.begin_forward(t - cache.seq_len)  # one chunk per row: a prompt or an answer
                cache.end_forward()
            out["contiguous" if cache is contiguous else "paged"].append(cache.nbytes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=4096, help="largest token count (default 4096)")
    parser.add_argument("--step", type=int, default=64, help="token step between rows (default 64)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "kv_memory.png", help="PNG path ('' to skip)")
    args = parser.parse_args()

    tokens = list(range(0, args.max + 1, args.step))
    data = {name: reserved_bytes(dtype, tokens) for name, dtype in DTYPES.items()}
    cols = [(f"contiguous {d} (MiB)", data[d]["contiguous"]) for d in DTYPES] + \
           [(f"paged {d} (MiB)", data[d]["paged"]) for d in DTYPES]
    head = ["tokens"] + [c for c, _ in cols]
    rows = [[str(t)] + [f"{c[i] / MIB:.2f}" for _, c in cols] for i, t in enumerate(tokens)]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---:|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), 8) for h in head]
        print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
        for r in rows:
            print("  ".join(x.rjust(w) for x, w in zip(r, widths)))
    paged = PagedKVCache(SMOLVLM_256M, MAX_TOKENS, "meta", torch.float32, block_size=BLOCK_SIZE)
    print(f"\nshape {SMOLVLM_256M}, block_size {BLOCK_SIZE}, contiguous max_tokens {MAX_TOKENS}; "
          f"fp32: {paged.bytes_per_token} B/token, {paged.bytes_per_block} B/block, "
          f"shared paged arena {paged.num_blocks} blocks = {paged.arena_nbytes / MIB:.0f} MiB")

    if str(args.plot) and args.plot.suffix == ".png":
        try:
            import matplotlib  # noqa: PLC0415  (optional, bench only)
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt  # noqa: PLC0415
        except ImportError:
            print("matplotlib not installed: no plot")
            return
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        for label, col in cols:
            ax.plot(tokens, [b / MIB for b in col], label=label.replace(" (MiB)", ""),
                    linestyle="--" if label.startswith("contiguous") else "-")
        ax.set_xlabel("tokens in the conversation")
        ax.set_ylabel("KV memory reserved (MiB)")
        ax.set_title(f"SmolVLM-256M KV cache: contiguous ({MAX_TOKENS} tokens) vs paged (block {BLOCK_SIZE})")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=8, loc="center right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot)
        print(f"plot saved to {args.plot}")


if __name__ == "__main__":
    main()
