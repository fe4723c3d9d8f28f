"""The Triton decode kernels compiled for a Hopper GPU (sm_90) on this GPU-less machine: the int8
variants (CUDA's ``weights="int8"``) compile, the GEMVs read their weight rows in 16-byte vector
loads as the bf16 ones do and keep programmatic dependent launch, and the short-prefill kernels
stay on tensor cores. The interpreter tests (test_triton_decode.py) check their arithmetic; this checks what only
a real compile shows. Skipped where Triton has no NVIDIA backend or ptxas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")


@pytest.fixture(scope="module")
def compiled():
    try:
        from triton.backends.nvidia.compiler import get_ptxas  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"Triton's NVIDIA backend is not available: {exc}")
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("triton_aot.py"))], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


GEMVS = ("down_proj", "o_proj_256m", "norm_gate_up", "qkv_rope", "head_argmax")
ROWS = ("rows_gemv_residual", "rows_norm_gate_up", "rows_qkv_rope")


@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_decode_kernels_compile_for_sm90_with_vector_loads(compiled, weights):
    kernels = compiled[weights]
    assert set(kernels) == set(GEMVS + ROWS)
    for name in GEMVS:
        assert any(load.startswith("ld.global") and ".v4." in load for load in kernels[name]["loads"]), (name, kernels[name])
        assert kernels[name]["griddepcontrol"], name  # PDL's wait/launch-dependents survived
    for name in ROWS:  # int8 tiles widened to bf16 before tl.dot: still tensor-core MMAs
        assert kernels[name]["mma"], name
