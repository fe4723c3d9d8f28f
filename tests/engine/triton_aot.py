"""Compiles the Triton decode kernels for an H100/H200 (sm_90) without a GPU (Triton's bundled
ptxas) and prints, as JSON, each kernel's global load instructions: run by
tests/engine/test_triton_compile.py in a process of its own (the tests' interpreter mode, set at
Triton's import, cannot compile). Pointers are marked 16-byte aligned, as Triton's launcher
specializes them at run time."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import engine.models.llama.triton_decode as td  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


def compile_ptx(fn, signature: dict, constants: dict, warps: int = 4) -> str:
    aligned = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k, t in signature.items() if t.startswith("*")}
    src = ASTSource(fn=fn, signature={**signature, **{k: "constexpr" for k in constants}},
                    constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()}, attrs=aligned)
    return triton.compile(src, target=TARGET, options={"num_warps": warps}).asm["ptx"]


def kernels(w: str, scaled: bool) -> dict:
    """SmolVLM2-2.2B's shapes (hidden 2048, intermediate 8192, 32 heads of 64) with its launch
    parameters, and the 256M's o_proj (576 = 512 + 64: a split K)."""
    gemv = {"v_ptr": "*bf16", "w_ptr": w, "s_ptr": "*bf16", "res_ptr": "*bf16", "out_ptr": "*bf16"}
    norm = {"x_ptr": "*bf16", "nw_ptr": "*bf16", "w_ptr": w, "s_ptr": "*bf16", "out_ptr": "*bf16", "eps": "fp32"}
    qkv = {"x_ptr": "*bf16", "nw_ptr": "*bf16", "w_ptr": w, "s_ptr": "*bf16", "cos_ptr": "*bf16", "sin_ptr": "*bf16",
           "pos_ptr": "*i64", "slot_ptr": "*i64", "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16",
           "stride_kv_pos": "i32", "stride_kv_head": "i32", "eps": "fp32"}
    head = {"x_ptr": "*bf16", "nw_ptr": "*bf16", "w_ptr": w, "s_ptr": "*bf16", "logits_ptr": "*bf16", "pm_ptr": "*fp32",
            "pi_ptr": "*i32", "cnt_ptr": "*i32", "token_ptr": "*i64", "argmax_ptr": "*i64", "reported_ptr": "*i64",
            "pos_ptr": "*i64", "host_ptr": "*i64", "eps": "fp32"}
    return {
        "down_proj": compile_ptx(td.gemv_residual_kernel, gemv, dict(N=2048, K=8192, KM=8192, KT=0, BLOCK_N=1, EARLY=True,
                                                                     SCALED=scaled, PDL=True), warps=8),
        "o_proj_256m": compile_ptx(td.gemv_residual_kernel, gemv, dict(N=576, K=576, KM=512, KT=64, BLOCK_N=8, EARLY=True,
                                                                       SCALED=scaled, PDL=True)),
        "norm_gate_up": compile_ptx(td.norm_gate_up_kernel, norm, dict(HIDDEN=2048, INTER=8192, KM=2048, KT=0, BLOCK_N=4,
                                                                       SCALED=scaled, PDL=True)),
        "qkv_rope": compile_ptx(td.qkv_rope_kernel, qkv, dict(HIDDEN=2048, KM=2048, KT=0, H=32, HKV=32, D=64, BLOCK_R=2,
                                                              EARLY=True, SCALED=scaled, PDL=True)),
        "head_argmax": compile_ptx(td.head_argmax_kernel, head, dict(V=49280, HIDDEN=2048, KM=2048, KT=0, BLOCK_N=16, P=3080,
                                                                     PP=4096, INVALID=-1, HOST=True, SCALED=scaled, PDL=True)),
        "rows_gemv_residual": compile_ptx(td.rows_gemv_residual_kernel, gemv, dict(N=2048, K=8192, ROWS=32, BLOCK_N=32,
                                                                                   BLOCK_K=256, PREC="tf32", SCALED=scaled,
                                                                                   PDL=False)),
        "rows_norm_gate_up": compile_ptx(td.rows_norm_gate_up_kernel, norm, dict(HIDDEN=2048, INTER=8192, ROWS=32, BLOCK_N=32,
                                                                                 BLOCK_K=256, PREC="tf32", SCALED=scaled,
                                                                                 PDL=False)),
        "rows_qkv_rope": compile_ptx(td.rows_qkv_rope_kernel, qkv, dict(HIDDEN=2048, H=32, HKV=32, D=64, ROWS=32, BLOCK_R=16,
                                                                         BLOCK_K=256, PREC="tf32", SCALED=scaled, PDL=False)),
    }


def main() -> None:
    out = {}
    for name, (w, scaled) in {"bf16": ("*bf16", False), "int8": ("*i8", True)}.items():
        out[name] = {k: {"loads": sorted(set(re.findall(r"ld\.global[\w.]*", ptx))),
                         "async_copies": sorted(set(re.findall(r"cp\.async\.[\w.]*\s+\[[^\]]*\],\s*\[[^\]]*\],\s*(?:0x)?\d+", ptx))),
                         "mma": "mma" in ptx,
                         "griddepcontrol": "griddepcontrol" in ptx}
                     for k, ptx in kernels(w, scaled).items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
