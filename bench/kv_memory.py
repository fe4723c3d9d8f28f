"""KV memory a conversation reserves as it grows: paged vs contiguous cache, SmolVLM-256M shape.

Drives real caches through ``begin_forward``/``end_forward`` (no attention is computed) on the
``meta`` device, so nothing is allocated and the numbers are the caches' own ``nbytes``: the
contiguous cache reserves ``max_tokens`` up front, the paged cache holds one block at a time
(``nbytes``) out of an arena that doubles as it fills (``arena_nbytes``).

``--chat CHECKPOINT`` instead runs a real :class:`~engine.chat.ChatSession` (greedy, CPU) through a
growing conversation (image turns and text turns) and prints, per turn, the tokens cached and
reused and the blocks the paged cache holds, converted to SmolVLM-256M's bytes per block (blocks
depend on tokens only, not on the checkpoint's shape, so a tiny random checkpoint gives the same
blocks as the real model would for the same tokens).

    python bench/kv_memory.py                       # table every 64 tokens, plot to docs/kv_memory.png
    python bench/kv_memory.py --step 512 --markdown # the table in docs/KV_CACHE.md
    python bench/kv_memory.py --chat CHECKPOINT --markdown  # the conversation table in docs/KV_CACHE.md

matplotlib is only needed for the plot (``pip install matplotlib``; not a runtime dependency).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.shared import SHARED  # noqa: E402
from engine.cache import CacheShape, ContiguousKVCache, PagedKVCache  # noqa: E402

SMOLVLM_256M = CacheShape(num_layers=30, num_kv_heads=3, head_dim=64)  # text model of SmolVLM-256M
MAX_TOKENS = 8192
BLOCK_SIZE = 16
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MIB = 2**20


def reserved_bytes(dtype: torch.dtype, tokens: list[int]) -> dict[str, list[int]]:
    """Bytes each cache reserves after a conversation has grown to each count in ``tokens``."""
    contiguous = ContiguousKVCache(SMOLVLM_256M, MAX_TOKENS, "meta", dtype)
    paged = PagedKVCache(SMOLVLM_256M, MAX_TOKENS, "meta", dtype, block_size=BLOCK_SIZE)
    out: dict[str, list[int]] = {"contiguous": [], "paged": [], "arena": []}
    for t in tokens:
        for cache in (contiguous, paged):
            if t > cache.seq_len:
                cache.begin_forward(t - cache.seq_len)  # one chunk per row: a prompt or an answer
                cache.end_forward()
            out["contiguous" if cache is contiguous else "paged"].append(cache.nbytes)
        out["arena"].append(paged.arena_nbytes)
    return out


def chat_rows(checkpoint: str, turns: int) -> tuple[list[str], list[list[str]]]:
    """A real ChatSession conversation; one row per turn (see the module docstring)."""
    from engine.api.events import DoneEvent, GenerationParams  # noqa: PLC0415
    from engine.chat import ChatSession  # noqa: PLC0415

    images = sorted((SHARED / "images").glob("*.png"))[:2]
    script = [("What is in this image?", [images[0]], "full"), ("Tell me more about it.", [], "full"),
              ("And in this one?", [images[1]], "full"), ("Compare the two.", [], "full")]
    script += [(f"Follow-up question {i}.", [], "full") for i in range(max(0, turns - len(script)))]
    session = ChatSession.load(checkpoint, device="cpu", dtype="float32")
    ref = PagedKVCache(SMOLVLM_256M, MAX_TOKENS, "meta", torch.float32, block_size=BLOCK_SIZE)
    head = ["turn", "prompt", "cached", "new", "tokens in cache", "blocks held", "paged (MiB)",
            "in use (MiB)", "arena (MiB)", "contiguous (MiB)"]
    rows = []
    for i, (text, imgs, detail) in enumerate(script[:turns]):
        params = GenerationParams(max_new_tokens=48, ignore_eos=True, image_detail=detail)
        done = [e for e in session.send(text, imgs, params) if isinstance(e, DoneEvent)][0]
        cache, s = session.cache, done.stats
        blocks = len(cache.block_table)
        assert blocks == -(-cache.seq_len // BLOCK_SIZE)  # reservation tracks tokens within one block
        rows.append([str(i + 1), str(s.prompt_tokens), str(s.cached_tokens), str(s.prompt_tokens - s.cached_tokens),
                     str(cache.seq_len), str(blocks), f"{blocks * ref.bytes_per_block / MIB:.2f}",
                     f"{cache.seq_len * ref.bytes_per_token / MIB:.2f}",
                     f"{cache.num_blocks * ref.bytes_per_block / MIB:.2f}",
                     f"{MAX_TOKENS * ref.bytes_per_token / MIB:.2f}"])
    return head, rows


def print_table(head: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---:|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), 8) for h in head]
        print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
        for r in rows:
            print("  ".join(x.rjust(w) for x, w in zip(r, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=4096, help="largest token count (default 4096)")
    parser.add_argument("--step", type=int, default=64, help="token step between rows (default 64)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "kv_memory.png", help="PNG path ('' to skip)")
    parser.add_argument("--chat", metavar="CHECKPOINT", help="run a real ChatSession conversation instead")
    parser.add_argument("--turns", type=int, default=8, help="turns of the --chat conversation (default 8)")
    args = parser.parse_args()
    if args.chat:
        head, rows = chat_rows(args.chat, args.turns)
        print_table(head, rows, args.markdown)
        print(f"\nMiB at the SmolVLM-256M shape {SMOLVLM_256M}, fp32, block_size {BLOCK_SIZE}; "
              f"contiguous max_tokens {MAX_TOKENS}")
        return

    tokens = list(range(0, args.max + 1, args.step))
    data = {name: reserved_bytes(dtype, tokens) for name, dtype in DTYPES.items()}
    cols = [(f"contiguous {d} (MiB)", data[d]["contiguous"]) for d in DTYPES] + \
           [(f"paged {d} (MiB)", data[d]["paged"]) for d in DTYPES] + \
           [("paged arena fp32 (MiB)", data["fp32"]["arena"])]
    head = ["tokens"] + [c for c, _ in cols]
    rows = [[str(t)] + [f"{c[i] / MIB:.2f}" for _, c in cols] for i, t in enumerate(tokens)]
    print_table(head, rows, args.markdown)
    paged = PagedKVCache(SMOLVLM_256M, MAX_TOKENS, "meta", torch.float32, block_size=BLOCK_SIZE)
    print(f"\nshape {SMOLVLM_256M}, block_size {BLOCK_SIZE}, contiguous max_tokens {MAX_TOKENS}; "
          f"fp32: {paged.bytes_per_token} B/token, {paged.bytes_per_block} B/block; paged arena starts at "
          f"{paged.num_blocks} blocks = {paged.arena_nbytes / MIB:.0f} MiB, doubles up to "
          f"{paged.max_num_blocks} blocks = {paged.max_num_blocks * paged.bytes_per_block / MIB:.0f} MiB")

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
            style = "--" if label.startswith("contiguous") else (":" if "arena" in label else "-")
            ax.plot(tokens, [b / MIB for b in col], label=label.replace(" (MiB)", ""), linestyle=style)
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
