"""Random-weight checkpoints built once per test session from the real SmolVLM-256M config files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.make_checkpoint import write_checkpoint

REPO = Path(__file__).resolve().parents[2]


def _shared() -> Path:
    return Path(os.environ.get("SMOLCHAT_SHARED", REPO.parent / "shared"))


def _config_dir() -> Path:
    return _shared() / "models" / "SmolVLM-256M-Instruct"


def _cache_root(tmp_path_factory) -> Path:
    """Where checkpoints are written: ``SMOLCHAT_TEST_CHECKPOINTS`` (kept between runs) or a tmp dir."""
    env = os.environ.get("SMOLCHAT_TEST_CHECKPOINTS")
    return Path(env) if env else tmp_path_factory.getbasetemp() / "checkpoints"


def _checkpoint(tmp_path_factory, name: str, config_dir: Path | None = None, **kwargs) -> Path:
    out = _cache_root(tmp_path_factory) / name
    if not (out / "config.json").exists() or not any(out.glob("*.safetensors")):
        write_checkpoint(config_dir or _config_dir(), out, **kwargs)
    return out


#: Every SmolVLM config folder in shared/models (issue 13: the whole family loads and matches transformers).
FAMILY = ("SmolVLM-256M-Instruct", "SmolVLM-500M-Instruct", "SmolVLM2-256M-Video-Instruct",
          "SmolVLM2-500M-Video-Instruct", "SmolVLM2-2.2B-Instruct")


@pytest.fixture(scope="session")
def family_checkpoint(tmp_path_factory):
    """``(name, tiny=True, dtype="float32") -> folder``: a random-weight checkpoint of a family
    config folder (tiny: 2 layers, each config's tile/patch/scale kept), built once per session."""

    def build(name: str, tiny: bool = True, dtype: str = "float32") -> Path:
        tag = f"{name}-{'tiny' if tiny else 'real'}-{dtype}"
        return _checkpoint(tmp_path_factory, tag, _shared() / "models" / name, tiny=tiny, dtype=dtype, seed=0)

    return build


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """2-layer SmolVLM-shaped model, float32 weights, real tokenizer and processor files."""
    return _checkpoint(tmp_path_factory, "tiny-f32", tiny=True, dtype="float32", seed=0)


@pytest.fixture(scope="session")
def real_checkpoint(tmp_path_factory) -> Path:
    """Random weights at the real SmolVLM-256M shape, bfloat16 like the published checkpoint (513 MB)."""
    return _checkpoint(tmp_path_factory, "smolvlm-256m-random", tiny=False, dtype="bfloat16", seed=0)
