"""The floor under a chain of dependent kernels: what one kernel boundary costs on this GPU.

    python bench/pdl_floor.py --out bench/results/pdl-floor.json

The batch-1 decode step is a chain of dependent kernels (154 a token for the 256M: 5 a layer, plus
the embedding, final norm, lm_head and argmax). This times chains of near-empty Triton kernels, each
reading one value the previous kernel wrote and writing one value (the dependency a GEMV has on its
input vector), captured in one CUDA graph as the engine captures its step, with and without
programmatic dependent launch (``launch_pdl=True``, ``gdc_launch_dependents``/``gdc_wait``), at grid
sizes of the step's kernels (1 program: argmax; 3: attention per KV head; 72-384: the GEMVs).

Reported per chain length: microseconds per graph replay (median of 5 x 200 replays, CUDA events)
and per kernel. The step's kernels cannot be cheaper than this per boundary, whatever they compute:
``kernels x floor`` is a lower bound on the step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_PDL = True
except Exception:  # noqa: BLE001
    HAS_PDL = False


@triton.jit
def link_kernel(x_ptr, y_ptr, PDL: tl.constexpr):
    """``y[pid] = x[0] + 1``: every program depends on the previous kernel's output."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    v = tl.load(x_ptr)
    tl.store(y_ptr + tl.program_id(0), v + 1.0)


@triton.jit
def gemv_link_kernel(x_ptr, w_ptr, y_ptr, N: tl.constexpr, K: tl.constexpr, BLOCK_N: tl.constexpr,
                     PRELOAD: tl.constexpr, LATE: tl.constexpr, PDL: tl.constexpr):
    """``y = W @ x`` (bf16, fp32 accumulation), ``BLOCK_N`` rows a program, the step's GEMV without
    its norm or residual; ``PRELOAD``: the weight rows are read before ``gdc_wait``; ``LATE``: the
    next kernel is let launch after the wait instead of at the start."""
    if PDL and not LATE:
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, K)
    if PRELOAD:
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :])
    if PDL:
        gdc_wait()
        if LATE:
            gdc_launch_dependents()
    if not PRELOAD:
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :])
    x = tl.load(x_ptr + cols).to(tl.float32)
    y = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty))


def replay_us(chain, length: int) -> tuple[float, float]:
    """Capture ``chain()`` in a CUDA graph; ``(us per replay, us per kernel)``, median of 5 x 200."""
    chain()  # compile
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        chain()
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            chain()
    for _ in range(20):
        graph.replay()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 200 * 1e3)
    per_replay = statistics.median(times)
    return per_replay, per_replay / length


def gemv_chain_us(length: int, shape: str, pdl: bool, preload: bool, warps: int = 4,
                  late: bool = False) -> tuple[float, float]:
    """A chain of GEMVs each with its own weights (so they stream from HBM as the step's do):
    ``square``: 512 -> 512, 8 rows a program (64 programs, about o_proj's shape, 576 in the 256M);
    ``mlp``: alternately 512 -> 2048 (8 rows, 256 programs: gate/up) and 2048 -> 512 (4 rows, 128
    programs: down; 1536 in the 256M). Powers of two: ``tl.arange`` takes no other length."""
    dims = [(512, 512, 8)] * length if shape == "square" else \
        [(2048, 512, 8) if i % 2 == 0 else (512, 2048, 4) for i in range(length)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for n, k, _ in dims]
    vecs = [torch.randn(max(n, k), device="cuda", dtype=torch.bfloat16) for n, k, _ in dims[:2]]
    launch = {"launch_pdl": True} if pdl else {}

    def chain():
        for i, (n, k, bn) in enumerate(dims):
            gemv_link_kernel[(n // bn,)](vecs[i % 2], ws[i], vecs[(i + 1) % 2], N=n, K=k, BLOCK_N=bn, PRELOAD=preload,
                                         LATE=late, PDL=pdl, num_warps=warps, **launch)

    return replay_us(chain, length)


def chain_us(length: int, grid: int, pdl: bool, warps: int = 4) -> tuple[float, float]:
    """``(us per replay, us per kernel)`` of a captured chain of ``length`` dependent kernels."""
    bufs = [torch.zeros(max(grid, 1), device="cuda") for _ in range(2)]
    launch = {"launch_pdl": True} if pdl else {}

    def chain():
        for i in range(length):
            link_kernel[(grid,)](bufs[i % 2], bufs[(i + 1) % 2], PDL=pdl, num_warps=warps, **launch)

    out = replay_us(chain, length)
    assert bufs[length % 2][0].item() > 0  # the chain ran
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lengths", default="1,154")
    ap.add_argument("--grids", default="1,3,72,384")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "pdl_available": HAS_PDL, "rows": []}
    for pdl in ([False, True] if HAS_PDL else [False]):
        for grid in [int(g) for g in args.grids.split(",")]:
            for length in [int(n) for n in args.lengths.split(",")]:
                replay, per = chain_us(length, grid, pdl)
                row = {"pdl": pdl, "grid": grid, "kernels": length, "replay_us": round(replay, 2),
                       "us_per_kernel": round(per, 3)}
                res["rows"].append(row)
                print(row, flush=True)
    for shape in ("square", "mlp"):
        for pdl, preload, late in ([(False, False, False), (True, False, False), (True, True, False), (True, True, True)]
                                   if HAS_PDL else [(False, False, False)]):
            for warps in (4, 2):
                replay, per = gemv_chain_us(154, shape, pdl, preload, warps, late)
                row = {"gemv": shape, "pdl": pdl, "preload": preload, "late_trigger": late, "warps": warps,
                       "kernels": 154,
                       "replay_us": round(replay, 2), "us_per_kernel": round(per, 3)}
                res["rows"].append(row)
                print(row, flush=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
