"""Writes .device-in/attn_variants.py: copies of attn_kernel without its merge and/or its dots (timing only)."""
import re
from pathlib import Path
src = Path("engine/models/llama/triton_decode.py").read_text()
start = src.index("@triton.jit\ndef attn_kernel(")
end = src.index("@triton.jit", start + 10)
kern = src[start:end]
merge_at = kern.index("        tl.debug_barrier()  # all threads' partials")
no_merge = kern[:merge_at] + "\n\n"
def no_dot(k):
    k = k.replace("_qk(q, k, PREC, DOT)", "(tl.zeros([BLOCK_H, BLOCK_T], tl.float32) + tl.sum(q.to(tl.float32), axis=1)[:, None] + tl.sum(k.to(tl.float32), axis=1)[None, :])")
    return k.replace("_pv(pr, v, PREC, DOT)", "(tl.zeros([BLOCK_H, D], tl.float32) + tl.sum(pr, axis=1)[:, None] + tl.sum(v.to(tl.float32), axis=0)[None, :])")
out = ["import triton\nimport triton.language as tl\nfrom engine.models.llama.triton_decode import _qk, _pv, _kv_tile, gdc_wait, gdc_launch_dependents\n\n"]
for name, body in [("attn_no_merge", no_merge), ("attn_no_dot", no_dot(kern)), ("attn_no_merge_no_dot", no_dot(no_merge))]:
    out.append(body.replace("def attn_kernel(", f"def {name}(") + "\n")
Path(".device-in/attn_variants.py").write_text("".join(out))
