"""Weight-only int8 (``weights="int8"``): what is quantized, how close its logits stay to float32,
and that the option reaches the model through load_model, ChatSession and the CLI."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.api.errors import EngineError
from engine.api.events import GenerationParams, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession
from engine.layers.linear import Int4Linear, Int8Linear, is_quantized, quantize_int8, weight_format
from engine.layers.q4 import Q4Linear
from engine.registry import WEIGHTS_ENV, load_model


def test_int8_linear_matches_its_dequantized_weights():
    torch.manual_seed(0)
    lin = nn.Linear(64, 48, bias=True)
    q = Int8Linear(lin)
    assert q.weight.dtype == torch.int8 and q.weight.shape == (48, 64)
    assert int(q.weight.abs().max()) == 127  # each row's largest weight maps to +-127
    deq = q.weight.float() * q.scale.float()[:, None]
    # Rounding to int8 moves a weight by at most half a step of its row's (bfloat16) scale: the
    # weights are rounded against the scale the kernel multiplies by, not the exact float32 one.
    assert ((deq - lin.weight).abs() <= q.scale.float()[:, None] * 0.5 + 1e-7).all()
    x = torch.randn(5, 64)
    expected = x.bfloat16().float() @ deq.T + lin.bias
    torch.testing.assert_close(q(x), expected, rtol=1e-2, atol=1e-2)
    assert q(x).dtype == torch.float32
    assert q(x.view(5, 1, 64)).shape == (5, 1, 48)


def test_int8_linear_off_the_cpu_multiplies_by_the_widened_weights():
    """The forward CUDA runs (``forward_widened``: no int8 kernel, the weights widened to the
    activation dtype): in float32 the dequantized weights' product within float32 rounding, in
    bfloat16 within its rounding, in the activation's dtype, bias added."""
    torch.manual_seed(1)
    lin = nn.Linear(64, 48, bias=True)
    q = Int8Linear(lin)
    deq = q.weight.float() * q.scale.float()[:, None]
    x = torch.randn(2, 3, 64)
    torch.testing.assert_close(q.forward_widened(x), x @ deq.T + lin.bias, rtol=1e-5, atol=1e-5)
    y = q.forward_widened(x.bfloat16())
    assert y.dtype == torch.bfloat16 and y.shape == (2, 3, 48)
    torch.testing.assert_close(y.float(), x.bfloat16().float() @ deq.T + lin.bias, rtol=2e-2, atol=2e-2)


def test_quantize_replaces_every_text_projection_and_the_head(tiny_checkpoint):
    model = load_model(tiny_checkpoint, device="cpu", dtype="float32")
    q = quantize_int8(model)
    assert q is not model and not is_quantized(model) and is_quantized(q)
    layer = q.model.text_model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, Int8Linear) and isinstance(layer.self_attn.o_proj, Int8Linear)
    assert isinstance(layer.mlp.gate_up, Int8Linear) and isinstance(layer.mlp.down_proj, Int8Linear)
    assert isinstance(q.lm_head, Int8Linear)
    # The vision tower, connector and embeddings stay in floating point.
    assert q.model.connector.modality_projection.proj.weight.dtype == torch.float32
    assert q.model.text_model.embed_tokens.weight.dtype == torch.float32


def test_int8_logits_stay_close_to_float32(tiny_checkpoint):
    model = load_model(tiny_checkpoint, device="cpu", dtype="float32")
    q = quantize_int8(model)
    ids = torch.randint(0, 49000, (1, 40), generator=torch.Generator().manual_seed(1))
    out = {}
    for name, m in (("fp32", model), ("int8", q)):
        cache = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=64))
        out[name] = m.prefill_all_logits(m.embed(ids), cache, range(0, 40))[0]
    rel = (out["int8"] - out["fp32"]).norm() / out["fp32"].norm()
    agree = (out["int8"].argmax(-1) == out["fp32"].argmax(-1)).float().mean()
    # Tiny random model (2 layers, hidden 64): seen rel 1.8%, top-1 agreement 36 of 40 positions.
    # The real shape (30 layers) is reported by bench/compare.py --sections int8 (rel 3.7%).
    assert rel < 0.05, float(rel)
    assert agree >= 0.8, float(agree)
    assert rel > 0  # it really ran the int8 weights


def test_weights_option_reaches_the_model(monkeypatch, tiny_checkpoint):
    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    assert not is_quantized(load_model(tiny_checkpoint, device="cpu"))
    assert is_quantized(load_model(tiny_checkpoint, device="cpu", weights="int8"))
    monkeypatch.setenv(WEIGHTS_ENV, "int8")
    session = ChatSession.load(tiny_checkpoint, device="cpu")
    assert session.weights == "int8"
    tokens = [e.token_id for e in session.send("Hi", params=GenerationParams(max_new_tokens=4, ignore_eos=True))
              if isinstance(e, TokenEvent) and e.token_id >= 0]
    assert len(tokens) == 4
    monkeypatch.setenv(WEIGHTS_ENV, " INT8 ")
    assert is_quantized(load_model(tiny_checkpoint, device="cpu"))
    monkeypatch.setenv(WEIGHTS_ENV, "int3")
    with pytest.raises(EngineError, match=r"^\$SMOLCHAT_WEIGHTS: unknown value 'int3' \(use auto, int8, int4\)"):
        load_model(tiny_checkpoint, device="cpu")
    with pytest.raises(EngineError, match=r"^weights: unknown value 'q4'"):
        load_model(tiny_checkpoint, device="cpu", weights="q4")


def test_int8_linear_quantized_in_row_chunks_equals_the_whole_weight_at_once(monkeypatch):
    """Rows quantized a chunk at a time (the load's memory bound) give the same int8 values and scales
    as one pass, and leave the float weight as it was (a tied lm_head's weight is the embedding)."""
    torch.manual_seed(3)
    lin = nn.Linear(32, 10, bias=False)
    before = lin.weight.detach().clone()
    whole = Int8Linear(lin)
    monkeypatch.setattr(Int8Linear, "QUANTIZE_ROWS", 3)  # 10 rows: chunks of 3, 3, 3, 1
    chunked = Int8Linear(lin)
    assert torch.equal(chunked.weight, whole.weight) and torch.equal(chunked.scale, whole.scale)
    assert torch.equal(lin.weight, before)
    # Against the formula itself, row by row: round(w / s) with s = max|w| / 127 rounded up to bf16.
    exact = lin.weight.abs().amax(dim=1) / 127
    assert (whole.scale.float() >= exact).all() and (whole.scale.float() < exact * (1 + 2 ** -7)).all()
    assert torch.equal(whole.weight, torch.round(lin.weight / whole.scale.float()[:, None]).to(torch.int8))


@pytest.fixture
def bfloat16_checkpoint(family_checkpoint):
    """Tiny SmolVLM in bfloat16, as published checkpoints are, with its own (untied) lm_head."""
    return family_checkpoint("SmolVLM-256M-Instruct", tiny=True, dtype="bfloat16")


@pytest.mark.parametrize("weights", ["int8", "int4"])
@pytest.mark.parametrize("fixture", ["tiny_checkpoint", "llama_tiny_checkpoint", "bfloat16_checkpoint"])
def test_a_quantized_load_builds_one_layer_at_a_time(request, monkeypatch, fixture, weights):
    """``load_model(weights=)`` fuses, converts and quantizes each decoder layer before it touches the
    next (a whole float32 decoder first held 8.6 GiB for the 2.2B shape's 2.6 GiB int8 model), and
    gives the same layers as quantizing a float model after its load; a bfloat16 checkpoint's untied
    head is quantized from its bfloat16 values, which float32 holds exactly: the same weights."""
    import engine.layers.linear as linear

    checkpoint = request.getfixturevalue(fixture)
    seen = []
    quantize_layer = linear.quantize_layer

    def spy(layer, layer_cls):
        layers = list(model_layers[0])
        i = layers.index(layer)
        # This layer is fused and float, every later one still as the checkpoint holds it (unfused).
        assert hasattr(layer.self_attn, "qkv_proj") and isinstance(layer.self_attn.qkv_proj, nn.Linear)
        assert all(hasattr(later.self_attn, "q_proj") for later in layers[i + 1:])
        assert all(not isinstance(earlier.self_attn.o_proj, nn.Linear) for earlier in layers[:i])
        seen.append(i)
        quantize_layer(layer, layer_cls)

    from engine.models.llama.decoder import LlamaDecoder

    model_layers = []
    init = LlamaDecoder.__init__

    def remember(self, cfg):
        init(self, cfg)
        model_layers.append(self.layers)

    monkeypatch.setattr(LlamaDecoder, "__init__", remember)
    monkeypatch.setattr(linear, "quantize_layer", spy)
    model = load_model(checkpoint, device="cpu", dtype="float32", weights=weights)
    assert seen == list(range(len(model.decoder.layers))) and len(seen) >= 2
    assert weight_format(model) == weights
    monkeypatch.setattr(linear, "quantize_layer", quantize_layer)
    after = linear.quantize_weights(load_model(checkpoint, device="cpu", dtype="float32"), weights)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, after.state_dict()[name]), name


def test_int8_refuses_devices_without_an_int8_kernel(tiny_checkpoint):
    """int8 runs on the CPU and on CUDA (the Triton decode step); anywhere else it is refused."""
    model = load_model(tiny_checkpoint, device="cpu")
    model_on_meta = model.to("meta")
    with pytest.raises(ValueError, match="int8 weight-only quantization runs on cpu and cuda, not meta"):
        quantize_int8(model_on_meta)


def test_a_load_keeps_float_weights_where_no_quantized_kernel_runs():
    """Settings offers int8 and 4-bit on every computer: on an Apple GPU a load keeps the float weights
    (4-bit's packing is the CPU's or CUDA's layout: a load there used to fail), as load_model says."""
    from engine.layers.linear import head_class, load_class, quantized_class

    for weights in ("int8", "int4"):
        assert load_class(weights, torch.device("mps")) is None
        with pytest.raises(ValueError, match=f"{weights} weight-only quantization runs on cpu and cuda, not mps"):
            quantized_class(weights, torch.device("mps"))
    assert load_class("int8", torch.device("cuda")) is Int8Linear and load_class("int4", torch.device("cuda")) is Int4Linear
    assert load_class("int4", torch.device("cpu")) is Q4Linear and load_class("auto", torch.device("cpu")) is None
    # A 4-bit decoder's lm_head is int8 on both devices (on CUDA too: bench/results/gpu-session56, the
    # real SmolLM2 weights' perplexity +5.2% with a 4-bit head, +0.12% with an int8 one); int8 stays int8.
    assert head_class(Q4Linear) is Int8Linear and head_class(Int4Linear) is Int8Linear
    assert head_class(Int8Linear) is Int8Linear
    with pytest.raises(ValueError, match="unknown weight format 'q4'"):
        load_class("q4", torch.device("cpu"))


# -- int4 -------------------------------------------------------------------------------------------
def test_int4_linear_matches_its_dequantized_weights():
    torch.manual_seed(0)
    lin = nn.Linear(128, 48, bias=True)
    q = Int4Linear(lin)
    deq = q.dequantized()
    # Each group of 32 inputs spans 15 steps between its min and max: rounding moves a weight by at
    # most half a step (+ the bf16 scale and zero's rounding).
    groups = lin.weight.detach().reshape(48, 4, 32)
    step = ((groups.amax(-1) - groups.amin(-1)) / 15).repeat_interleave(32, dim=1)
    assert ((deq - lin.weight).abs() <= step * 0.5 + lin.weight.abs() * 2**-7 + 1e-4).all()
    x = torch.randn(5, 128)
    torch.testing.assert_close(q(x), x.bfloat16().float() @ deq.T + lin.bias, rtol=1e-2, atol=1e-2)
    assert q(x.view(5, 1, 128)).shape == (5, 1, 48) and q(x).dtype == torch.float32
    with pytest.raises(ValueError, match="divisible by the group size 32"):
        Int4Linear(nn.Linear(40, 8))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_int4_linear_quantized_in_row_chunks_equals_the_whole_weight_at_once(monkeypatch, device):
    """As int8's: a chunk of rows at a time (the 2.2B head's float32 temporaries were 1.6 GB), the
    same packed weights, scales and zeros, from a bfloat16 weight as from its float32 values."""
    torch.manual_seed(4)
    lin = nn.Linear(64, 48, bias=False).to(device)  # (the packing takes rows in 16s)
    whole = Int4Linear(lin)
    monkeypatch.setattr(Int4Linear, "QUANTIZE_ROWS", 20)  # 48 rows: chunks of 20, 20, 8
    chunked = Int4Linear(lin)
    assert torch.equal(chunked.weight, whole.weight)
    assert torch.equal(chunked.scales_and_zeros, whole.scales_and_zeros)
    half = nn.Linear(64, 48, bias=False).to(device)
    half.weight.data = lin.weight.data.bfloat16()
    widened = nn.Linear(64, 48, bias=False).to(device)
    widened.weight.data = half.weight.data.float()
    assert torch.equal(Int4Linear(half).weight, Int4Linear(widened).weight)


def test_int4_weights_through_load_model_and_the_session(tiny_checkpoint):
    model = load_model(tiny_checkpoint, device="cpu", dtype="float32", weights="int4")
    layer = model.decoder.layers[0]
    # On the CPU, int4 is the native step's own 4-bit blocks (engine.layers.q4), not ATen's int4pack.
    assert isinstance(layer.self_attn.qkv_proj, Q4Linear)
    # The head in int8, as llama.cpp keeps output.weight above 4 bits (engine.layers.linear.head_class).
    assert isinstance(model.lm_head, Int8Linear) and weight_format(model) == "int4"
    fp32 = load_model(tiny_checkpoint, device="cpu", dtype="float32")
    ids = torch.randint(0, 49000, (1, 40), generator=torch.Generator().manual_seed(1))
    out = {}
    for name, m in (("fp32", fp32), ("int4", model)):
        cache = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=64))
        out[name] = m.prefill_all_logits(m.embed(ids), cache, range(0, 40))[0]
    rel = (out["int4"] - out["fp32"]).norm() / out["fp32"].norm()
    # Random Gaussian weights in groups of 32 span ~4 sigma in 15 steps: ~8% rms error per layer,
    # compounding over 2 layers and the head (seen: 23%; int8 gives 1.8% here). Quality on real
    # weights is measured as perplexity (docs/BENCHMARKS.md).
    assert rel < 0.3, float(rel)
    session = ChatSession.load(str(tiny_checkpoint), device="cpu", weights="int4")
    assert session.weights == "int4"
    events = list(session.send("Hi", params=GenerationParams(max_new_tokens=4, ignore_eos=True)))
    assert len([e for e in events if isinstance(e, TokenEvent) and e.token_id >= 0]) == 4


def test_native_4bit_dequantize_gives_the_eager_weights_bit_for_bit():
    """smol_dequant_q4 (one C pass, used by prefill on the CPU) against the tensor-op dequantize:
    the same float32 arithmetic, so the same bits, for odd row counts and several thread counts."""
    from engine.native import build

    lib = build.library(wait=True)
    if lib is None:
        pytest.skip(f"no native library here: {build.last_error()}")
    torch.manual_seed(1)
    for rows, cols in ((1, 32), (7, 96), (61, 576), (130, 1536)):
        q = Q4Linear(nn.Linear(cols, rows, bias=False))
        eager = q.dequantized_eager()
        for threads in (1, 2, 3):
            out = torch.full((rows, cols), float("nan"))
            assert lib.smol_dequant_q4(q.qweight.data_ptr(), q.scales.data_ptr(), q.mins.data_ptr(), rows, cols,
                                       out.data_ptr(), threads) == 0
            assert torch.equal(out, eager), (rows, cols, threads)
        assert torch.equal(q.dequantized(), eager)  # what forward uses, through the loaded library
