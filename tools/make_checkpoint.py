"""Write a random-weight checkpoint with the exact tensor names and shapes of a config folder (any
architecture in :mod:`engine.registry`: SmolVLM, SmolLM2 / Llama).

These machines cannot download weights, so correctness is proven by parity with transformers on
random weights. The output folder gets the config (shrunk with ``--tiny``), every tokenizer /
processor file of the source folder, and ``model.safetensors`` (or ``--shards N`` shards plus
``model.safetensors.index.json``). Write it outside the repository or under the git-ignored
``checkpoints/``.

    python -m tools.make_checkpoint --config ../shared/models/SmolVLM-256M-Instruct --out checkpoints/smolvlm-256m-random
    python -m tools.make_checkpoint --config ../shared/models/SmolVLM-256M-Instruct --out checkpoints/tiny --tiny
    python -m tools.make_checkpoint --config ../shared/models/SmolLM2-135M-Instruct --out checkpoints/smollm2-tiny --tiny
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.device import DTYPES
from engine.models.config import ModelMetadata
from engine.registry import model_class, parse_metadata

# A shape small enough for fast tests that keeps what the processor, the prompt and the tokenizer
# depend on: each config's tile size, patch size and scale_factor (512-px tiles, 16-px patches, scale 4
# and 64 image tokens per tile for the 256M/500M; 384 px, 14 px, scale 3 and 81 tokens for the 2.2B),
# its model_type, and the real vocabulary. Only widths, depths and head counts shrink.
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".onnx")


KEPT = ("image_size", "patch_size")


def tiny_config(config: dict) -> dict:
    """``config`` shrunk to the tiny shape: its ``vision_config`` and ``text_config`` if it has them
    (SmolVLM), else the top level (a plain ``LlamaForCausalLM`` config). Tile size, patch size,
    ``scale_factor`` and ``model_type`` stay (checked: a shrunk config that changed them would test
    another prompt)."""
    cfg = copy.deepcopy(config)
    if "vision_config" in cfg:
        cfg["vision_config"].update(TINY_VISION)
        for key in KEPT:
            assert cfg["vision_config"][key] == config["vision_config"][key], key
        assert cfg["scale_factor"] == config["scale_factor"]
    (cfg["text_config"] if "text_config" in cfg else cfg).update(TINY_TEXT)
    assert cfg["model_type"] == config["model_type"]
    return cfg


def random_state_dict(meta: ModelMetadata, seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Tensors for every parameter of the registry's model class for ``meta`` (as it is stored: a tied
    ``lm_head.weight`` is left out, as Hugging Face checkpoints do), drawn in float32 and kept in
    ``dtype``, each converted as it is drawn: the 2.2B shape's float32 set and its bfloat16 copy
    together peaked at 13.4 GB, more than the machines its quantized loads are for.

    Linear/conv weights ~ N(0, 1/fan_in) so activations keep unit scale through depth; norms get
    weights around 1 and small biases (so a broken norm shows up in parity); the lm_head is scaled to
    give logits of standard deviation about 8, so greedy decoding has clear winners (top-2 gaps of
    1e-4 in flatter random models flip with float rounding and make parity tests flaky).
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        model = model_class(meta.model_type)(meta)
    out = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and meta.tie_word_embeddings:
            continue
        shape = tuple(p.shape)
        if name.endswith("weight") and ("norm" in name):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("bias"):
            t = 0.02 * torch.randn(shape, generator=gen)
        elif name == "lm_head.weight":
            t = torch.randn(shape, generator=gen) * (8.0 / math.sqrt(shape[1]))
        elif name.endswith(("embed_tokens.weight", "position_embedding.weight")):
            t = torch.randn(shape, generator=gen) * 0.5
        else:
            fan_in = math.prod(shape[1:])
            t = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
        out[name] = t.to(dtype).contiguous()
    return out


def write_checkpoint(config_dir: str | Path, out_dir: str | Path, tiny: bool = False, seed: int = 0,
                     dtype: str = "bfloat16", shards: int = 1) -> Path:
    """Create ``out_dir`` with config, tokenizer files and random weights. Returns ``out_dir``."""
    config_dir, out_dir = Path(config_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in config_dir.iterdir():
        if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and f.name != "model.safetensors.index.json":
            shutil.copyfile(f, out_dir / f.name)
    config = json.loads((config_dir / "config.json").read_text())
    if tiny:
        config = tiny_config(config)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    gen_path = out_dir / "generation_config.json"
    generation = json.loads(gen_path.read_text()) if gen_path.exists() else None
    meta = parse_metadata(config, generation)
    state = random_state_dict(meta, seed, DTYPES[dtype])
    for old in out_dir.glob("*.safetensors"):
        old.unlink()
    (out_dir / "model.safetensors.index.json").unlink(missing_ok=True)
    metadata = {"format": "pt"}
    if shards <= 1:
        save_file(state, out_dir / "model.safetensors", metadata=metadata)
        (out_dir / "model.safetensors").chmod(0o644)  # save_file writes 0600
        return out_dir
    names = list(state)
    per = math.ceil(len(names) / shards)
    weight_map = {}
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: state[k] for k in part}, out_dir / fname, metadata=metadata)
        (out_dir / fname).chmod(0o644)
        weight_map.update({k: fname for k in part})
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--config", required=True, help="folder with config.json and tokenizer files")
    ap.add_argument("--out", required=True, help="output folder (outside the repo, or checkpoints/)")
    ap.add_argument("--tiny", action="store_true", help="shrink to a 2-layer test model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--shards", type=int, default=1)
    args = ap.parse_args(argv)
    if not (Path(args.config) / "config.json").is_file():
        ap.error(f"no config.json in {args.config}: give a model folder of the shared data (its models/ "
                 "folder, e.g. SMOLCHAT_SHARED/models/SmolVLM-256M-Instruct) or any folder with a config.json")
    out = write_checkpoint(args.config, args.out, args.tiny, args.seed, args.dtype, args.shards)
    size = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    print(f"wrote {out} ({size / 1e6:.1f} MB of weights)")


if __name__ == "__main__":
    main()
