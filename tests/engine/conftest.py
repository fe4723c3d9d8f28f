"""Random-weight checkpoints built once per test session from the real SmolVLM-256M and
SmolLM2-135M-Instruct config files."""

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


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """2-layer SmolVLM-shaped model, float32 weights, real tokenizer and processor files."""
    return _checkpoint(tmp_path_factory, "tiny-f32", tiny=True, dtype="float32", seed=0)


@pytest.fixture(scope="session")
def real_checkpoint(tmp_path_factory) -> Path:
    """Random weights at the real SmolVLM-256M shape, bfloat16 like the published checkpoint (513 MB)."""
    return _checkpoint(tmp_path_factory, "smolvlm-256m-random", tiny=False, dtype="bfloat16", seed=0)


def _llama_config_dir() -> Path:
    return _shared() / "models" / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def llama_tiny_checkpoint(tmp_path_factory) -> Path:
    """2-layer SmolLM2-shaped text-only Llama (model_type llama), float32, real tokenizer and template."""
    return _checkpoint(tmp_path_factory, "smollm2-tiny-f32", _llama_config_dir(), tiny=True, dtype="float32", seed=0)


@pytest.fixture(scope="session")
def llama_real_checkpoint(tmp_path_factory) -> Path:
    """Random weights at the real SmolLM2-135M-Instruct shape (30 layers, tied embeddings), float32."""
    return _checkpoint(tmp_path_factory, "smollm2-135m-random-f32", _llama_config_dir(), tiny=False,
                       dtype="float32", seed=0)
