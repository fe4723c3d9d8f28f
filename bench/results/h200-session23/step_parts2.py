"""Where the decode step's time goes: each kernel kind replaced by an empty PDL kernel (one load, one
store: the chain's floor), the graph replay timed; "only:KIND" replaces every kind but KIND.
Measurement only (the step's output is wrong). Session 21: adds the merge kernel and "only:"."""
import json, sys
sys.path.insert(0, ".")
import torch
from bench.common import load_ours
from bench.decode_step import loop
from bench.triton_decode import step_profile
from bench.pdl_floor import link_kernel
import engine.models.llama.triton_decode as T
from engine.models.llama.static_decode import StaticDecoder

ck, prompt_tokens, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
CONFIG = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
session = load_ours(ck, "cuda", torch.bfloat16)
m = session.model
prompt = torch.randint(0, 49000, (1, prompt_tokens), generator=torch.Generator().manual_seed(0)).to(m.device)
buf = [torch.ones(65536, device="cuda")]

class Empty:
    def __getitem__(self, grid):
        def launch(*a, **k):
            link_kernel[(grid[0] if isinstance(grid, tuple) else grid,)](buf[0], buf[0], PDL=True, num_warps=4, launch_pdl=True)
        return launch

orig = {n: getattr(T, n) for n in ("qkv_rope_kernel", "attn_kernel", "rows_attn_merge_kernel", "gemv_residual_kernel",
                                   "norm_gate_up_kernel", "head_argmax_kernel")}
res = {}
sys.path.insert(0, ".device-in")
AV = None  # attn_variants only for "attn_no*" variants
VARIANTS = sys.argv[4].split(",") if len(sys.argv) > 4 else ["", "attn_kernel", "qkv_rope_kernel", "norm_gate_up_kernel", "gemv_residual_kernel", ""]
for name in [v or None for v in VARIANTS]:
    for n, k in orig.items():
        setattr(T, n, k)
    if name and name.startswith("attn_no"):
        import attn_variants as AV
        T.attn_kernel = getattr(AV, name)
    elif name and name.startswith("only:"):
        for n in orig:
            if n != name[5:]:
                setattr(T, n, Empty())
    elif name:
        setattr(T, name, Empty())
    with torch.inference_mode():
        m._static = StaticDecoder(m, triton_config=CONFIG)
        try:
            loop(m, prompt, new, True)
        except Exception as exc:  # emptied kernels give garbage logits; the graphs are captured by then
            print("  (loop:", type(exc).__name__ + ")", flush=True)
        p = step_profile(m, top=4, kind="token")
    key = name or "none (the real step)"
    res.setdefault(key, []).append(round(p["graph_replay_us"], 1))
    print(key, round(p["graph_replay_us"], 1), "us", p["kernels_per_step"], "kernels", flush=True)
    m._static = None
    torch.cuda.empty_cache()
print(json.dumps(res))
