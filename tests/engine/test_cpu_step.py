"""The native (C) CPU decode step against the eager decode: float32 within 1e-4 over 40+ steps with
identical greedy tokens on both caches (across block boundaries and a non-consecutive block table),
int8 and 4-bit against their own dequantized float32 weights, and the eager fallback when the
library is off or cannot be built."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
from torch import nn

from engine.cache import CacheConfig
from engine.layers.linear import Int8Linear, quantize_weights
from engine.layers.q4 import Q4Linear
from engine.native import build
from engine.registry import load_model

STEPS = 44


@pytest.fixture(scope="module")
def lib():
    """The library, built into the per-machine cache if needed (skips only without any compiler)."""
    build.reset()
    lib = build.library(wait=True)
    if lib is None:
        if shutil.which(build.compiler()) is None:
            pytest.skip(f"no C compiler ({build.compiler()}) and no prebuilt library")
        pytest.fail(f"native library failed to build: {build.last_error()}")
    return lib


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint):
    return load_model(tiny_checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="module", params=["smolvlm", "smollm2"])
def any_tiny(request, tiny):
    """The SmolVLM text model and the SmolLM2-shaped text-only Llama (tied embeddings)."""
    if request.param == "smolvlm":
        return tiny
    return load_model(request.getfixturevalue("llama_tiny_checkpoint"), device="cpu", dtype="float32")


def run(model, native: bool, kind: str = "contiguous", steps: int = STEPS, greedy: bool = False,
        fork: bool = False, prefill: bool = True):
    """Prefill 7 tokens (or decode them: ``prefill=False``), then decode ``steps`` tokens (fixed
    ids, or greedy); returns (logits, token ids, the model's NativeStep or None).

    ``fork``: a paged cache whose block table is not consecutive (a fork on the same arena decodes
    in lockstep, so the two sequences' new blocks interleave)."""
    model._native = None if native else False
    model._threads = None
    cache = model.create_kv_cache(CacheConfig(kind=kind, max_tokens=128, block_size=4))
    ids = torch.randint(0, 1000, (1, 7 + steps), generator=torch.Generator().manual_seed(3))
    if prefill:
        logits = model.prefill(model.embed(ids[:, :7]), cache, range(0, 7))
    else:
        for i in range(7):
            logits = model.decode(model.embed(ids[:, i:i + 1]), cache)
    other = cache.fork() if fork else None
    outs, tokens = [], []
    for i in range(steps):
        tok = logits.argmax(-1, keepdim=True) if greedy else ids[:, 7 + i:8 + i]
        tokens.append(int(tok))
        logits = model.decode(model.embed(tok), cache)
        if other is not None:
            model.decode(model.embed(tok), other)
        outs.append(logits)
    if fork:
        table = cache.block_table
        assert table != list(range(table[0], table[0] + len(table))), table
    used = model._native
    model._native = None
    return torch.cat(outs), tokens, used


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_float32_step_matches_eager(lib, any_tiny, kind):
    native, _, used = run(any_tiny, True, kind)
    assert used  # the native step really ran
    eager, _, _ = run(any_tiny, False, kind)
    torch.testing.assert_close(native, eager, rtol=1e-4, atol=1e-4)
    n_tok, n_ids, _ = run(any_tiny, True, kind, greedy=True)
    e_tok, e_ids, _ = run(any_tiny, False, kind, greedy=True)
    assert n_ids == e_ids
    torch.testing.assert_close(n_tok, e_tok, rtol=1e-4, atol=1e-4)


def test_avx512_attention_matches_the_portable_one(lib, any_tiny):
    """attend_avx512 (zmm registers, a polynomial exp) against the compiler-vectorised attend(): both
    within 1e-4 of eager over 51 positions (three full 16-lane exp groups and a masked tail)."""
    if lib.smol_set_attn(1) == 0:
        pytest.skip("this CPU has no AVX-512: only the portable attention runs")
    try:
        fast, _, used = run(any_tiny, True, "paged")
        assert used
        assert lib.smol_set_attn(0) == 0
        portable, _, _ = run(any_tiny, True, "paged")
        eager, _, _ = run(any_tiny, False, "paged")
        assert not torch.equal(fast, portable)  # the AVX-512 attention really ran
        torch.testing.assert_close(fast, eager, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(portable, eager, rtol=1e-4, atol=1e-4)
        # A NaN query (a diverging model) stays NaN through the softmax, as in the portable path,
        # so the logits say so instead of averaging the values into finite numbers.
        broken = copy.deepcopy(any_tiny)
        with torch.no_grad():
            broken.decoder.layers[0].self_attn.qkv_proj.weight[0] = float("nan")
        for on in (1, 0):
            lib.smol_set_attn(on)
            logits, _, _ = run(broken, True, "paged", steps=2)
            assert torch.isnan(logits).all(), on
    finally:
        lib.smol_set_attn(1)


def test_paged_non_consecutive_blocks(lib, any_tiny):
    native, _, _ = run(any_tiny, True, "paged", fork=True)
    eager, _, _ = run(any_tiny, False, "paged", fork=True)
    torch.testing.assert_close(native, eager, rtol=1e-4, atol=1e-4)


def dequantized_copy(model):
    """The model with every Int8Linear / Q4Linear replaced by an nn.Linear of its float32 weights."""
    ref = copy.deepcopy(model)
    mods = [(layer.self_attn, n) for layer in ref.decoder.layers for n in ("qkv_proj", "o_proj")]
    mods += [(layer.mlp, n) for layer in ref.decoder.layers for n in ("gate_up", "down_proj")]
    mods += [(ref, "lm_head")]
    for parent, name in mods:
        q = getattr(parent, name)
        if isinstance(q, Int8Linear):
            w = q.weight.float() * q.scale.float()[:, None]
        else:
            assert isinstance(q, Q4Linear)
            w = q.dequantized()
        lin = nn.Linear(q.in_features, q.out_features, bias=q.bias is not None)
        lin.weight = nn.Parameter(w, requires_grad=False)
        if q.bias is not None:
            lin.bias = nn.Parameter(q.bias.clone(), requires_grad=False)
        setattr(parent, name, lin)
    return ref


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_quantized_step_matches_its_dequantized_weights(lib, tiny, fmt):
    q = quantize_weights(tiny, fmt)
    # The prompt is decoded too: eager int8 prefill (bf16 activations) would fill another cache.
    ref, _, _ = run(dequantized_copy(q), False, "paged", prefill=False)
    try:
        # float32 activations: the same products as the dequantized weights, up to summation order.
        assert lib.smol_set_intdot(0) == 0
        exact, _, used = run(q, True, "paged", prefill=False)
        assert used
        torch.testing.assert_close(exact, ref, rtol=1e-4, atol=1e-4)
        # Integer dot products (AVX512-VNNI, else AVX2): activations in int8 blocks of 32, as
        # llama.cpp's Q8_0 / Q4_1 dot products do.
        kind = lib.smol_set_intdot(1)
        if kind == 0:
            pytest.skip("this CPU has neither AVX512-VNNI nor AVX2: no integer-dot kernels to check")
        fast, _, _ = run(q, True, "paged", prefill=False)
        assert not torch.equal(fast, exact)  # the integer kernels really ran (activations rounded)
        rel = float((fast - ref).norm() / ref.norm())
        agree = float((fast.argmax(-1) == ref.argmax(-1)).float().mean())
        # Tiny random model, 2 layers: seen rel 0.9% (int8) / 2.6% (int4), top-1 41-43 of 44 (VNNI).
        assert rel < 0.05 and agree > 0.8, (kind, rel, agree)
    finally:
        lib.smol_set_intdot(1)


def test_failed_build_decodes_eagerly(tiny, monkeypatch, tmp_path):
    eager, _, _ = run(tiny, False)
    monkeypatch.setenv("SMOLCHAT_CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("SMOLCHAT_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "prebuilt_path", lambda: tmp_path / build.LIBNAME)
    build.reset()
    try:
        assert build.library(wait=True) is None and "no C compiler" in build.last_error()
        assert build.describe() == "eager" and tiny.cpu_decode_step() == "eager"
        fallback, _, used = run(tiny, True)
        assert used is None  # never built a native step
        assert torch.equal(fallback, eager)
    finally:
        monkeypatch.undo()
        build.reset()


def test_a_compiler_error_decodes_eagerly(tiny, monkeypatch, tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'fakecc 1.0' && exit 0\n"
                    "echo 'cc: fatal error: broken' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SMOLCHAT_CC", str(fake))
    monkeypatch.setenv("SMOLCHAT_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "prebuilt_path", lambda: tmp_path / build.LIBNAME)
    build.reset()
    try:
        assert build.library(wait=True) is None and "broken" in build.last_error()
    finally:
        monkeypatch.undo()
        build.reset()


def test_switched_off(tiny, monkeypatch):
    eager, _, _ = run(tiny, False)
    monkeypatch.setenv("SMOLCHAT_NATIVE", "0")
    assert build.library(wait=True) is None and build.describe() == "eager"
    assert tiny.cpu_decode_step() == "eager"
    off, _, used = run(tiny, True)
    assert used is None and torch.equal(off, eager)


def test_reports_which_step_runs(lib, tiny, tiny_checkpoint):
    from engine.validate import model_info

    build.library(wait=True)  # earlier tests reset it: the next call only starts the (cached) load
    assert tiny.cpu_decode_step().startswith("native-")
    assert model_info(tiny_checkpoint)["cpu_decode_step"] == build.describe()


def test_speculation_stays_off_while_the_native_step_decodes(lib, tiny_checkpoint, monkeypatch):
    """Auto speculation verifies drafts eagerly: slower than native decode steps, so it is off."""
    from engine.api.events import GenerationParams
    from engine.chat import ChatSession

    build.library(wait=True)
    session = ChatSession.load(str(tiny_checkpoint), device="cpu")
    assert session.model.native_decode_ready(session.cache)
    assert session._speculative_decoder(GenerationParams(), None) is None
    assert session._speculative_decoder(GenerationParams(speculative=True), None) is not None
    monkeypatch.setenv("SMOLCHAT_NATIVE", "0")
    assert session._speculative_decoder(GenerationParams(), None) is not None
