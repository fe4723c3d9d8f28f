"""Loading checkpoints: sharded and single files agree; broken folders raise clear EngineErrors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.api.errors import ConfigError, ModelLoadError, UnsupportedModelError
from engine.cache import CacheConfig
from engine.registry import load_model, read_metadata
from engine.sources import LocalDirSource
from tools.make_checkpoint import write_checkpoint


@pytest.fixture
def broken(tiny_checkpoint, tmp_path):
    """A private copy of the tiny checkpoint that a test may damage."""
    dst = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, dst)
    return dst


def _logits(model):
    cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=16))
    ids = torch.tensor([[1, 4093, 42, 1159]])
    return model.prefill(model.embed(ids), cache, range(0, 4))


def test_sharded_checkpoint_equals_single_file(tiny_checkpoint, tmp_path):
    config_dir = tiny_checkpoint
    sharded = write_checkpoint(config_dir, tmp_path / "sharded", tiny=False, dtype="float32", shards=3)
    # write_checkpoint(tiny=False) on the tiny folder keeps its (already tiny) config: same weights, seed 0.
    assert len(list(sharded.glob("model-*.safetensors"))) == 3
    assert json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    a = load_model(tiny_checkpoint, device="cpu")
    b = load_model(sharded, device="cpu")
    # Same tensors; a matmul may still take another kernel path for differently aligned buffers
    # (seen on an AVX-512 EPYC): equal within float32 rounding, not necessarily bit for bit.
    torch.testing.assert_close(_logits(a), _logits(b), rtol=0, atol=1e-5)


def test_missing_tensor_is_named(broken):
    state = load_file(broken / "model.safetensors")
    del state["model.text_model.layers.1.mlp.up_proj.weight"]
    save_file(state, broken / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"1 tensor\(s\) missing.*layers\.1\.mlp\.up_proj\.weight"):
        load_model(broken, device="cpu")


def test_shape_mismatch_names_tensor_and_shapes(broken):
    state = load_file(broken / "model.safetensors")
    state["model.connector.modality_projection.proj.weight"] = torch.zeros(64, 100)
    save_file(state, broken / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"proj\.weight has shape \(64, 100\), expected \(64, 512\)"):
        load_model(broken, device="cpu")


def test_unknown_model_type(broken):
    cfg = json.loads((broken / "config.json").read_text())
    cfg["model_type"] = "qwen2_vl"
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="'qwen2_vl' is not supported"):
        load_model(broken, device="cpu")


def test_missing_config_key_names_file_and_key(broken):
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["text_config"]["num_hidden_layers"]
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"config\.json text_config: required key 'num_hidden_layers'"):
        read_metadata(broken)


def test_missing_and_corrupt_files(broken, tmp_path):
    with pytest.raises(ModelLoadError, match="model folder not found"):
        load_model(tmp_path / "nope", device="cpu")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelLoadError, match="not a readable safetensors file"):
        load_model(broken, device="cpu")
    (broken / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="no safetensors weights"):
        LocalDirSource(broken)
    (broken / "config.json").write_text("{ truncated")
    with pytest.raises(ConfigError, match="cannot read JSON"):
        read_metadata(broken)


def test_tied_lm_head_is_used_when_absent(broken):
    cfg = json.loads((broken / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (broken / "config.json").write_text(json.dumps(cfg))
    state = load_file(broken / "model.safetensors")
    del state["lm_head.weight"]
    save_file(state, broken / "model.safetensors")
    model = load_model(broken, device="cpu")
    assert model.lm_head.weight.data_ptr() == model.model.text_model.embed_tokens.weight.data_ptr()


def test_bf16_checkpoint_loads_as_fp32_on_cpu(real_checkpoint):
    model = load_model(real_checkpoint, device="cpu")
    assert model.dtype == torch.float32
    assert model.metadata.text.num_hidden_layers == 30
    n = sum(p.numel() for p in model.parameters())
    assert n == 256_484_928  # the published SmolVLM-256M-Instruct parameter count (reference §2)


def test_make_checkpoint_without_a_config_folder_says_so(tmp_path, capsys):
    """A --config path that is not a model folder (the README's ../shared path from a clone elsewhere):
    one line saying what to give, exit 2, nothing written."""
    from tools.make_checkpoint import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--config", str(tmp_path / "missing"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and not (tmp_path / "out").exists()
    assert f"error: no config.json in {tmp_path / 'missing'}: give a model folder" in capsys.readouterr().err
