"""The vision tower's dynamic int8 GEMM (``engine/layers/int8_gemm.py``, ``engine/native/gemm_avx2.h``):
the kernel against the exact integer arithmetic, the layer against float32, the run-time choice,
and a SmolVLM loaded with it against the float32 tower."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine import device as device_mod
from engine.api.errors import EngineError
from engine.device import VISION_DTYPE_ENV, choose_vision_dtype, choose_vision_int8, describe_vision
from engine.layers import int8_gemm
from engine.layers.int8_gemm import WEIGHT_MAX, Int8GemmLinear
from engine.native import build as native_build

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def lib():
    lib = native_build.library(wait=True)
    if lib is None:
        pytest.skip(f"native library unavailable: {native_build.last_error()}")
    if device_mod.cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the int8 GEMM kernel needs AVX2")
    return lib


def exact(layer: Int8GemmLinear, x: torch.Tensor) -> torch.Tensor:
    """What the kernel computes, in float64 from exact integer products: per-row activation scale
    ``d = max|x| / 127``, ``xq = round_half_even(x * (127 / max|x|))`` in float32 (as the kernel's
    ``vcvtps2dq`` rounds), then ``d * s_n * (xq . wq) + bias``."""
    amax = x.abs().amax(dim=1)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    xq = torch.round(x * inv[:, None]).to(torch.int64)
    isum = xq @ layer.weight_int8().to(torch.int64).T
    y = isum.double() * (amax / 127.0).double()[:, None] * layer.scale.double()[None, :]
    return y + layer.bias.double() if layer.bias is not None else y


@pytest.mark.parametrize("m, k, n, bias", [
    (1, 4, 16, True),         # one short row block
    (7, 768, 48, True),       # rows not a multiple of the 4-row tile
    (130, 96, 32, False),     # more than one 64-row task, no bias
    (64, 3072, 16, True),     # the SigLIP fc2 depth: int32 sums up to 127 * 63 * 3072
])
def test_kernel_matches_exact_integer_arithmetic(lib, m, k, n, bias):
    g = torch.Generator().manual_seed(m * 1000 + k + n)
    lin = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g))
        if bias:
            lin.bias.copy_(torch.randn(n, generator=g))
    layer = Int8GemmLinear(lin)
    x = torch.randn(m, k, generator=g) * torch.logspace(-2, 2, m)[:, None]  # rows of very different scales
    x[0, 0] = 50.0  # an outlier: its row's scale follows it
    got = layer(x)
    want = exact(layer, x)
    # float32 output of integer sums up to ~2.5e7 (24 bits): relative 1e-6 of the row's magnitude
    tol = 2e-6 * want.abs().amax(dim=1, keepdim=True) + 1e-6
    assert ((got.double() - want).abs() <= tol).all(), float(((got.double() - want).abs() / tol).max())


def test_zero_rows_and_leading_dims(lib):
    lin = nn.Linear(32, 16)
    layer = Int8GemmLinear(lin)
    x = torch.randn(2, 3, 32)
    x[1, 2] = 0.0
    y = layer(x)
    assert y.shape == (2, 3, 16)
    assert torch.equal(y[1, 2], lin.bias.detach())  # a zero row is exactly the bias
    assert torch.allclose(y.reshape(6, 16).double(), exact(layer, x.reshape(6, 32)), rtol=0, atol=1e-4)


def test_weights_keep_seven_bits_and_the_layout_round_trips():
    lin = nn.Linear(8, 32)
    layer = Int8GemmLinear(lin)
    wq = layer.weight_int8()
    assert wq.abs().max() == WEIGHT_MAX  # every row's largest weight maps to +-63
    assert torch.equal(layer.wsum, wq.sum(dim=1, dtype=torch.int32))
    # panel p, group g, channel c, byte j  <->  wq[16p + c, 4g + j]
    assert torch.equal(layer.packed[1, 1, 3], wq[16 + 3, 4:8])
    err = (layer.dequantized() - lin.weight.detach()).abs().max(dim=1).values
    assert (err <= layer.scale / 2 + 1e-7).all()  # rounding: at most half a step


def test_error_against_float32_is_small_but_real(lib):
    """At the SigLIP MLP shape with Gaussian data: 8-bit activations per token and 7-bit weights per
    channel give ~1.1% relative error (seen 1.07-1.16%); float32 would be ~1e-7."""
    g = torch.Generator().manual_seed(0)
    lin = nn.Linear(768, 3072)
    x = torch.randn(256, 768, generator=g)
    with torch.no_grad():
        want = lin(x)
        got = Int8GemmLinear(lin)(x)
    rel = float((got - want).norm() / want.norm())
    assert 0.003 < rel < 0.02, rel


def test_without_the_library_it_multiplies_by_the_dequantized_weights(monkeypatch):
    lin = nn.Linear(64, 32)
    layer = Int8GemmLinear(lin)
    monkeypatch.setattr(native_build, "library", lambda wait=False: None)
    x = torch.randn(5, 64)
    with torch.no_grad():
        want = nn.functional.linear(x, layer.dequantized(), lin.bias)
        assert torch.allclose(layer(x), want, atol=1e-6)
        kept = layer._dequantized
        assert kept is not None and torch.allclose(layer(x), want, atol=1e-6) and layer._dequantized is kept


def test_gelu_inside_the_kernel_matches_torch(lib):
    """The kernel's tanh GELU (Cephes e^x) against torch's ``gelu(approximate="tanh")`` on the same
    GEMM output, over inputs from -12 to 12 (both tails and the cancellation near 0)."""
    lin = nn.Linear(64, 32)
    plain, fused = Int8GemmLinear(lin), Int8GemmLinear(lin, activation="gelu_tanh")
    x = torch.linspace(-1, 1, 200 * 64).reshape(200, 64) * torch.linspace(0.01, 40, 200)[:, None]
    pre = plain(x)
    assert pre.abs().max() > 10 and pre.abs().min() < 0.05  # the range the test claims
    want = nn.functional.gelu(pre, approximate="tanh")
    got = fused(x)
    assert torch.allclose(got, want, rtol=2e-6, atol=1e-6), float((got - want).abs().max())  # seen 3.2e-7
    with pytest.raises(ValueError, match="unknown activation 'relu'"):
        Int8GemmLinear(lin, activation="relu")


def test_vision_mlp_and_attention_quantize_only_fitting_linears(monkeypatch):
    from engine.models.smolvlm.config import VisionConfig
    from engine.models.smolvlm.vision import VisionAttention, VisionMLP

    monkeypatch.setattr(native_build, "library", lambda wait=False: None)  # the eager fallback, exactly
    cfg = VisionConfig(hidden_size=32, intermediate_size=40, num_hidden_layers=1, num_attention_heads=2, patch_size=16,
                       image_size=64)
    mlp = VisionMLP(cfg)  # fc1 32 -> 40 does not fit the 16-channel panels; fc2 40 -> 32 does
    x = torch.randn(3, 32)
    with torch.no_grad():
        want = mlp.fc2(nn.functional.gelu(mlp.fc1(x), approximate="tanh"))
    mlp.quantize_int8()
    assert isinstance(mlp.fc1, nn.Linear) and not mlp.fc1_applies_gelu
    assert isinstance(mlp.fc2, Int8GemmLinear)
    assert torch.allclose(mlp(x), want, rtol=0.05, atol=0.02)
    cfg = VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, patch_size=16,
                       image_size=64)
    mlp = VisionMLP(cfg)
    with torch.no_grad():
        want = mlp.fc2(nn.functional.gelu(mlp.fc1(x), approximate="tanh"))
    mlp.quantize_int8()
    assert mlp.fc1.activation == "gelu_tanh" and mlp.fc1_applies_gelu  # GELU computed once, in fc1
    assert torch.allclose(mlp(x), want, rtol=0.05, atol=0.02)
    attn = VisionAttention(cfg)
    attn.fuse()
    attn.quantize_int8()
    assert isinstance(attn.qkv_proj, Int8GemmLinear) and isinstance(attn.out_proj, Int8GemmLinear)
    with pytest.raises(ValueError, match=r"in % 4 == 0 and out % 16 == 0, got 6 -> 16"):
        Int8GemmLinear(nn.Linear(6, 16))


@pytest.mark.parametrize("capability, amx, device, dtype, native, expected", [
    ("AVX2", False, CPU, torch.float32, True, True),       # the case it is for
    ("AVX512", False, CPU, torch.float32, True, False),    # float32 sgemm is twice as wide there
    ("AVX2", True, CPU, torch.float32, True, False),       # AMX: bf16 instead
    ("AVX2", False, CPU, torch.bfloat16, True, False),     # a bf16 model keeps its dtype
    ("AVX2", False, CPU, torch.float32, False, False),     # SMOLCHAT_NATIVE=0
    ("AVX2", False, torch.device("cuda"), torch.float32, True, False),
])
def test_auto_picks_int8_on_avx2_cpus_only(monkeypatch, capability, amx, device, dtype, native, expected):
    monkeypatch.delenv(VISION_DTYPE_ENV, raising=False)
    monkeypatch.setattr(device_mod, "cpu_capability", lambda: capability)
    monkeypatch.setattr(device_mod, "cpu_has_amx", lambda: amx)
    monkeypatch.setattr(native_build, "enabled", lambda: native)
    assert choose_vision_int8(device, dtype) is expected
    assert choose_vision_dtype(device, dtype) == (torch.bfloat16 if amx and dtype == torch.float32
                                                  and device.type == "cpu" else dtype)
    if expected:
        assert describe_vision(device, dtype) == "int8 GEMM (AVX2)"


def test_explicit_int8_and_its_errors(monkeypatch):
    monkeypatch.setattr(device_mod, "cpu_capability", lambda: "AVX512")
    monkeypatch.setenv(VISION_DTYPE_ENV, "INT8")
    assert choose_vision_int8(CPU, torch.float32) is True
    assert choose_vision_dtype(CPU, torch.float32) == torch.float32  # activations stay float32
    with pytest.raises(EngineError, match=r"^\$SMOLCHAT_VISION_DTYPE: int8 is for the CPU; on cuda"):
        choose_vision_int8(torch.device("cuda"), torch.bfloat16)
    monkeypatch.setenv(VISION_DTYPE_ENV, "float32")
    assert choose_vision_int8(CPU, torch.float32) is False
    assert describe_vision(CPU, torch.float32) == "float32"
    with pytest.raises(EngineError, match=r"^vision dtype: unknown value 'int4' \(use auto, .* or int8\)"):
        choose_vision_int8(CPU, torch.float32, "int4")


def test_smolvlm_with_int8_vision_stays_close_to_float32(monkeypatch, lib, tiny_checkpoint):
    from engine.models.smolvlm import SmolVlmModel
    from engine.sources import LocalDirSource

    monkeypatch.setenv(VISION_DTYPE_ENV, "float32")
    ref = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), CPU, torch.float32)
    monkeypatch.setenv(VISION_DTYPE_ENV, "int8")
    ours = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), CPU, torch.float32)
    layer = ours.model.vision_model.encoder.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, Int8GemmLinear) and isinstance(layer.mlp.fc2, Int8GemmLinear)
    assert isinstance(ours.model.connector.modality_projection.proj, nn.Linear)  # the connector stays float32
    assert ours.vision_dtype == torch.float32
    px = torch.randn(3, 3, 512, 512, generator=torch.Generator().manual_seed(1)).clamp_(-1, 1)
    want, got = ref.encode_images(px), ours.encode_images(px)
    rel = float((got - want).norm() / want.norm())
    cos = torch.nn.functional.cosine_similarity(got.flatten(1), want.flatten(1)).min()
    # Two layers of ~1% per linear (the 256M's 12 layers: 4.4%, cosine 0.999; docs/BENCHMARKS.md).
    assert 1e-3 < rel < 0.05, rel
    assert cos > 0.998, float(cos)
    assert int8_gemm.native_build.library() is lib  # the kernel ran, not the fallback
    assert layer.mlp.fc1._dequantized is None  # so no float32 copy of the weights is held


def test_info_states_what_the_vision_tower_runs_as(monkeypatch, tiny_checkpoint):
    from engine.validate import model_info

    monkeypatch.setenv(VISION_DTYPE_ENV, "int8")
    assert model_info(tiny_checkpoint)["vision"]["cpu_precision"] == f"int8 GEMM ({device_mod.cpu_capability()})"
    monkeypatch.setenv(native_build.ENV_SWITCH, "0")
    assert model_info(tiny_checkpoint)["vision"]["cpu_precision"] == "int8 weights, float32 matmuls (SMOLCHAT_NATIVE=0)"
    monkeypatch.setenv(VISION_DTYPE_ENV, "float32")
    assert model_info(tiny_checkpoint)["vision"]["cpu_precision"] == "float32"
