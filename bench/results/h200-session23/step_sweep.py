"""Each GEMV kind's launch parameters swept with every other kernel kind emptied (an empty PDL
kernel: the chain's floor), so the replay measures that kind's streaming alone; then the real step
with the best of each kind combined, alternating with the default. Session 23."""
import itertools, json, sys, time
sys.path.insert(0, ".")
import torch
from bench.common import load_ours
from bench.decode_step import loop
from bench.triton_decode import step_profile
from bench.pdl_floor import link_kernel
import engine.models.llama.triton_decode as T
from engine.models.llama.static_decode import StaticDecoder

ck, out = sys.argv[1], sys.argv[2]
session = load_ours(ck, "cuda", torch.bfloat16)
m = session.model
prompt = torch.randint(0, 49000, (1, 58), generator=torch.Generator().manual_seed(0)).to(m.device)
buf = [torch.ones(65536, device="cuda")]


class Empty:
    def __getitem__(self, grid):
        def launch(*a, **k):
            link_kernel[(grid[0] if isinstance(grid, tuple) else grid,)](buf[0], buf[0], PDL=True, num_warps=4, launch_pdl=True)
        return launch


KINDS = ("qkv_rope_kernel", "attn_kernel", "rows_attn_merge_kernel", "gemv_residual_kernel", "norm_gate_up_kernel",
         "head_argmax_kernel")
orig = {n: getattr(T, n) for n in KINDS}


def measure(config, only=None, new=32):
    for n, k in orig.items():
        setattr(T, n, k if only is None or n == only else Empty())
    with torch.inference_mode():
        m._static = StaticDecoder(m, triton_config=config)
        try:
            loop(m, prompt, new, True)
        except Exception:  # emptied kernels give garbage logits; the graphs are captured by then
            pass
        us = step_profile(m, top=1, kind="token")["graph_replay_us"]
    m._static = None
    torch.cuda.empty_cache()
    return round(us, 1)


# Only configurations whose weight rows fit in registers (<= 512 bytes a thread, as the defaults).
SWEEPS = {
    "qkv_rope_kernel": [{"qkv_block_r": r, "qkv_warps": w} for r, w in itertools.product([1, 2, 4, 8, 16], [2, 4, 8])
                        if r <= 2 * w],
    "norm_gate_up_kernel": [{"gu_block_n": b, "gu_warps": w} for b, w in itertools.product([2, 4, 8], [2, 4, 8])
                            if b <= 2 * w],
    "gemv_residual_kernel": [{"down_block_n": b, "down_warps": w} for b, w in itertools.product([1, 2, 4, 8], [2, 4, 8])
                             if b <= w] + [{"o_block_n": b} for b in (2, 4, 16)],
}
res = {"floor": measure({}, only="none"), "sweeps": {}}
print("floor (every kind empty)", res["floor"], "us", flush=True)
best = {}
for kind, configs in SWEEPS.items():
    rows = []
    for c in [{}] + configs + [{}]:
        us = measure(c, only=kind)
        rows.append({"config": c, "us": us})
        print(f"only {kind} {json.dumps(c)}: {us} us", flush=True)
    res["sweeps"][kind] = rows
    default = min(r["us"] for r in rows if not r["config"])
    top = min(rows, key=lambda r: r["us"])
    print(f"  best {kind}: {top} against the default's {default}", flush=True)
    if top["config"] and top["us"] < default * 0.97:
        best.update(top["config"])
print("combined", best, flush=True)
res["combined"] = best
rounds = []
for i in range(3):
    for name, c in (("default", {}), ("combined", best)):
        us = measure(c, new=256)
        rounds.append({"variant": name, "us": us})
        print(f"real step, {name}: {us} us", flush=True)
res["real"] = rounds
open(out, "w").write(json.dumps(res, indent=1))
