"""The vision tower's dtype: bf16 on AMX CPUs by default (``choose_vision_dtype``), and that path's
features against transformers' float32 reference at a bf16 tolerance."""

from __future__ import annotations

import pytest
import torch

from engine import device as device_mod
from engine.api.errors import EngineError
from engine.device import VISION_DTYPE_ENV, choose_vision_dtype
from engine.models.smolvlm import SmolVlmModel
from engine.sources import LocalDirSource

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("amx, device, dtype, expected", [
    (True, CPU, torch.float32, torch.bfloat16),   # the fast path: AMX tiles
    (False, CPU, torch.float32, torch.float32),   # bf16 would be emulated: no gain
    (True, CPU, torch.bfloat16, torch.bfloat16),  # already bf16
    (True, CUDA, torch.bfloat16, torch.bfloat16),
    (True, CUDA, torch.float32, torch.float32),   # auto only changes CPUs
])
def test_auto_picks_bf16_only_for_float32_on_amx_cpus(monkeypatch, amx, device, dtype, expected):
    monkeypatch.delenv(VISION_DTYPE_ENV, raising=False)
    monkeypatch.setattr(device_mod, "cpu_has_amx", lambda: amx)
    assert choose_vision_dtype(device, dtype) == expected
    monkeypatch.setenv(VISION_DTYPE_ENV, "auto")
    assert choose_vision_dtype(device, dtype) == expected


def test_explicit_choice_wins_and_bad_names_are_clear(monkeypatch):
    monkeypatch.setattr(device_mod, "cpu_has_amx", lambda: True)
    monkeypatch.setenv(VISION_DTYPE_ENV, "float32")
    assert choose_vision_dtype(CPU, torch.float32) == torch.float32
    assert choose_vision_dtype(CPU, torch.float32, "bfloat16") == torch.bfloat16
    monkeypatch.setenv(VISION_DTYPE_ENV, " BF16 ")  # case and spaces do not matter
    assert choose_vision_dtype(CPU, torch.float32) == torch.bfloat16
    monkeypatch.setenv(VISION_DTYPE_ENV, "float8")
    with pytest.raises(EngineError, match=r"\$SMOLCHAT_VISION_DTYPE: unknown value 'float8' \(use auto, "):
        choose_vision_dtype(CPU, torch.float32)
    with pytest.raises(EngineError, match=r"^vision dtype: unknown value 'int4'"):
        choose_vision_dtype(CPU, torch.float32, "int4")
    assert choose_vision_dtype(CPU, torch.float32, "int8") == torch.float32  # int8 GEMMs, float32 activations


def test_bf16_vision_features_stay_close_to_the_float32_reference(monkeypatch, tiny_checkpoint):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv(VISION_DTYPE_ENV, "bfloat16")
    ours = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), CPU, torch.float32)
    assert ours.model.vision_model.encoder.layers[0].mlp.fc1.weight.dtype == torch.bfloat16
    assert ours.model.connector.modality_projection.proj.weight.dtype == torch.bfloat16
    assert ours.dtype == torch.float32 and ours.lm_head.weight.dtype == torch.float32  # text stays float32
    ref = transformers.Idefics3ForConditionalGeneration.from_pretrained(
        tiny_checkpoint, dtype=torch.float32, attn_implementation="eager").eval()
    px = torch.randn(2, 3, 512, 512, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = ref.model.connector(ref.model.vision_model(px).last_hidden_state)
    got = ours.encode_images(px)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    rel = (got - expected).norm() / expected.norm()
    cos = torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0)
    # bf16 keeps 8 bits of mantissa (relative rounding 2**-9 = 0.002 per value); through 2 layers of
    # matmuls and norms the features drift by under 1% (seen: 0.67%); float32 agrees to ~1e-6.
    assert rel < 0.02, float(rel)
    assert cos > 0.999, float(cos)
    assert rel > 1e-4  # it really ran in bf16 (float32 would agree to ~1e-6)
