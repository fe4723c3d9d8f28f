"""The AVX2 integer-dot GEMV kernels of the native CPU step (engine/native/gemv_avx2.h) against the
exact integer arithmetic they implement: int8 and 4-bit rows at several widths (odd block counts
included), through a small C harness (tests/engine/native/kernels_avx2.c) built with the compiler
the library is built with. End to end, tests/engine/test_cpu_step.py checks the step against the
dequantized weights."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.native import build

HERE = Path(__file__).resolve().parent


def test_avx2_integer_kernels_match_exact_integer_sums(tmp_path):
    cc = build.compiler()
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc})")
    exe = tmp_path / "kernels"
    subprocess.run([cc, "-O2", "-std=gnu11", "-fopenmp", "-fno-math-errno", f"-I{build.HERE}",
                    str(HERE / "native" / "kernels_avx2.c"), "-o", str(exe), "-lm"], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    if out[0] == "no-avx2":
        pytest.skip("this CPU has no AVX2")
    rows = [line.split() for line in out if line]
    assert [(kind, int(k)) for kind, k, _, _ in rows] == [(kind, k) for k in (32, 96, 576, 1536, 2048)
                                                          for kind in ("i8", "q4")]
    worst = {f"{kind} K={k}": float(rel) for kind, k, _, rel in rows}
    assert max(worst.values()) < 1e-4, worst
