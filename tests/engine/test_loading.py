"""Loading checkpoints: sharded and single files agree; broken folders raise clear EngineErrors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.api.errors import ConfigError, EngineError, ModelLoadError, UnsupportedModelError
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


def test_the_model_is_built_while_the_device_is_chosen(tiny_checkpoint, monkeypatch):
    """choose_device (on CUDA: the driver's start-up, 0.18-0.34 s on the H200's host) runs beside
    the model's construction on the meta device, not before it."""
    import engine.device
    from engine.models.smolvlm.model import SmolVlmModel

    built = threading.Event()
    seen = {}
    choose_device, init = engine.device.choose_device, SmolVlmModel.__init__

    def slow_choose_device(preference=None):
        seen["built_first"] = built.wait(timeout=10)  # serially, the build would only start after this
        return choose_device(preference)

    def recording_init(self, *args, **kwargs):
        seen["build_thread"] = threading.current_thread()
        init(self, *args, **kwargs)
        built.set()

    monkeypatch.setattr(engine.device, "choose_device", slow_choose_device)
    monkeypatch.setattr(SmolVlmModel, "__init__", recording_init)
    model = load_model(tiny_checkpoint, device="cpu")
    assert seen == {"built_first": True, "build_thread": threading.main_thread()}
    assert model.device == torch.device("cpu") and model.dtype == torch.float32
    torch.testing.assert_close(_logits(model), _logits(load_model(tiny_checkpoint, device="cpu")), rtol=0, atol=0)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a machine without an Apple GPU")
def test_an_unavailable_device_or_unknown_dtype_is_an_engine_error(tiny_checkpoint, broken, monkeypatch):
    with pytest.raises(EngineError, match="device 'mps' was requested but the Apple GPU"):
        load_model(tiny_checkpoint, device="mps")
    # Reported before the checkpoint's tensors are read: before a broken folder's own error, and
    # without reading (for a GGUF file: dequantizing) any tensor.
    state = load_file(broken / "model.safetensors")
    del state["model.text_model.layers.1.mlp.up_proj.weight"]
    save_file(state, broken / "model.safetensors")
    monkeypatch.setattr(LocalDirSource, "tensors", lambda self: pytest.fail("tensors read"))
    for device in ("mps", "nonsense"):
        with pytest.raises(EngineError, match="mps' was requested|unknown device 'nonsense'"):
            load_model(broken, device=device)
    monkeypatch.undo()
    with pytest.raises(ModelLoadError, match="missing"):
        load_model(broken, device="cpu")
    with pytest.raises(EngineError, match="unknown dtype 'float8'"):
        load_model(tiny_checkpoint, device="cpu", dtype="float8")
    assert load_model(tiny_checkpoint, device="cpu", dtype="bfloat16").dtype == torch.bfloat16


def test_choose_device_checks_names_and_device_objects_alike(monkeypatch):
    """A ``torch.device`` is checked as its name is: an unavailable GPU or a CUDA index beyond the
    GPUs present is an EngineError at the load, not a failure at the first weight's copy."""
    import engine.device as device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    for preference in ("cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 1)):
        with pytest.raises(EngineError, match="device 'cuda' was requested but this PyTorch build sees no CUDA GPU"):
            device.choose_device(preference)
    for preference in ("mps", torch.device("mps")):
        with pytest.raises(EngineError, match="device 'mps' was requested but the Apple GPU"):
            device.choose_device(preference)
    for preference in ("gpu", "CUDA", "meta", "cuda:x", torch.device("meta")):
        with pytest.raises(EngineError, match="unknown device '(gpu|CUDA|meta|cuda:x)' "):
            device.choose_device(preference)
    assert device.choose_device(None) == device.choose_device("auto") == torch.device("cpu")
    assert device.choose_device(torch.device("cpu")) == device.choose_device("cpu") == torch.device("cpu")

    with pytest.raises(EngineError, match=r"unknown device 'cuda:-1' \(use auto, cuda, cuda:N, mps or cpu\)"):
        device.choose_device("cuda:-1")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert device.choose_device("mps") == device.choose_device(torch.device("mps")) == torch.device("mps")
    assert device.choose_device("mps:0") == torch.device("mps", 0)
    with pytest.raises(EngineError, match=r"device 'mps:1' was requested but the Apple GPU is one device"):
        device.choose_device("mps:1")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device.choose_device("auto") == torch.device("cuda")
    assert device.choose_device("cuda:1") == device.choose_device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    for preference in ("cuda:2", torch.device("cuda", 7)):
        with pytest.raises(EngineError, match=r"device 'cuda:[27]' was requested but this machine has 2 CUDA GPUs "
                                              r"\(cuda:0 to cuda:1\)"):
            device.choose_device(preference)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(EngineError, match=r"device 'cuda:1' was requested but this machine has 1 CUDA GPU \(cuda:0\)$"):
        device.choose_device("cuda:1")


def test_start_cuda_driver_only_where_cuda_may_be_chosen(monkeypatch):
    """cuInit is called for auto or CUDA preferences of a CUDA build, never for CPU or MPS, and a
    missing driver library is not an error (torch's own query reports it)."""
    import engine.device as device

    opened = []

    class Driver:
        def __init__(self, name):
            opened.append(name)
            if name == "missing":
                raise OSError(f"{name}: cannot open shared object file")

        def cuInit(self, flags):  # noqa: N802 - the driver's name
            assert flags == 0
            return 0

    monkeypatch.setattr(device.ctypes, "CDLL", Driver)
    monkeypatch.setattr(device, "CUDA_DRIVER_LIBRARY", {sys.platform: "driver"})
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    for preference in ("cpu", torch.device("cpu"), "mps", torch.device("mps")):
        assert device.start_cuda_driver(preference) is False
    assert opened == []
    for preference in (None, "", "auto", "cuda", "cuda:1", torch.device("cuda", 0)):
        assert device.start_cuda_driver(preference) is True
    assert opened == ["driver"] * 6
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # torch has done it already
    assert device.start_cuda_driver("cuda") is False and len(opened) == 6
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(device, "CUDA_DRIVER_LIBRARY", {sys.platform: "missing"})
    assert device.start_cuda_driver("auto") is False
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build of torch
    assert device.start_cuda_driver("auto") is False and opened == ["driver"] * 6 + ["missing"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA driver")
def test_start_cuda_driver_starts_the_driver_before_torch_asks():
    """In a fresh process: cuInit through ctypes succeeds, torch is not initialised by it, and
    torch's own query then finds the GPU."""
    code = ("import torch; from engine.device import start_cuda_driver; ok = start_cuda_driver('auto'); "
            "print(ok, torch.cuda.is_initialized(), torch.cuda.is_available())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["True", "False", "True"], out.stderr[-2000:]


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


@pytest.mark.parametrize("section, key, value, message", [
    ("text_config", "num_hidden_layers", "two", "num_hidden_layers is 'two', not a whole number"),
    ("text_config", "num_hidden_layers", True, "num_hidden_layers is True, not a whole number"),
    ("text_config", "rope_theta", "10k", "rope_theta is '10k', not a number"),
    ("text_config", "tie_word_embeddings", "yes", "tie_word_embeddings is 'yes', not true or false"),
    ("vision_config", "hidden_act", 7, "hidden_act is 7, not text"),
    ("text_config", "num_hidden_layers", -1, "num_hidden_layers is -1, not a positive whole number"),
    (None, "tie_word_embeddings", "no", "tie_word_embeddings is 'no', not true or false"),
])
def test_a_config_value_of_another_kind_names_file_key_and_kind(broken, section, key, value, message):
    """Trial 79 P2: ``"num_hidden_layers": "two"`` passed the config and failed in the model's build as
    "TypeError: 'str' object cannot be interpreted as an integer" (a traceback and exit 1 from the CLI)."""
    cfg = json.loads((broken / "config.json").read_text())
    part = cfg[section] if section else cfg  # (SmolVLM keeps tie_word_embeddings at the top too)
    part[key] = value
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as refused:
        read_metadata(broken)
    assert str(refused.value).endswith(f"config.json{' ' + section if section else ''}: {message}")
    part[key] = {"num_hidden_layers": 2.0, "rope_theta": 10000, "tie_word_embeddings": False,
                 "hidden_act": "gelu_pytorch_tanh"}[key]  # a whole float and an int for a float are taken
    (broken / "config.json").write_text(json.dumps(cfg))
    assert read_metadata(broken) is not None


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


def test_make_checkpoint_converts_each_tensor_as_it_is_drawn(shared_dir):
    """Trial 57 F10: the 2.2B shape's whole float32 set and its bfloat16 copy peaked at 13.4 GB. Drawn
    and converted one tensor at a time (6.4 GB), the checkpoint is the same, byte for byte."""
    from engine.registry import parse_metadata
    from tools.make_checkpoint import random_state_dict, tiny_config

    config = tiny_config(json.loads((shared_dir / "models" / "SmolVLM-256M-Instruct" / "config.json").read_text()))
    meta = parse_metadata(config, None)
    whole = random_state_dict(meta, seed=3)
    each = random_state_dict(meta, seed=3, dtype=torch.bfloat16)
    assert list(each) == list(whole) and len(each) > 50
    for name, tensor in whole.items():
        assert each[name].dtype == torch.bfloat16 and torch.equal(each[name], tensor.to(torch.bfloat16)), name
