"""Shared fixtures: where the read-only shared folder (models, images, docs) lives.

The folder is ``$SMOLCHAT_SHARED``, by default ``<repo>/../shared``. Model files and photos are read
from there and never copied into the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Parity tests compare float32 against transformers' float32 within 1e-4. On a CPU with AMX the
# engine's default runs the vision tower in bf16 (engine.device.choose_vision_dtype); that path
# has its own tests (tests/engine/test_vision_dtype.py). Subprocesses (CLI, app) inherit this.
os.environ.setdefault("SMOLCHAT_VISION_DTYPE", "float32")


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


# The fused Triton kernels' tests (tests/engine/test_triton_decode.py) run in Triton's CPU
# interpreter, which Triton reads once, at its first import. In a full run another test imports
# Triton first (transformers, torch's compiler), and all 14 of them skipped. Set here, before any
# test module is imported, on machines without a CUDA GPU (on one the kernels run for real).
if _no_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = Path(os.environ.get("SMOLCHAT_SHARED") or REPO_ROOT.parent / "shared").expanduser()
    if not path.is_dir():
        pytest.fail(f"shared folder not found: {path} (set SMOLCHAT_SHARED)")
    return path


@pytest.fixture(scope="session")
def model_config_dir(shared_dir: Path) -> Path:
    """The SmolVLM-256M-Instruct config/tokenizer folder (no weights needed)."""
    path = shared_dir / "models" / "SmolVLM-256M-Instruct"
    if not (path / "config.json").is_file():
        pytest.fail(f"model config folder not found: {path}")
    return path


@pytest.fixture(scope="session")
def images_dir(shared_dir: Path) -> Path:
    return shared_dir / "images"


@pytest.fixture(scope="session")
def hf_processor(model_config_dir: Path):
    """transformers' Idefics3Processor with the PIL image backend: the pixel-exact test oracle.

    ``backend="pil"`` selects ``Idefics3ImageProcessorPil`` (transformers 5); the default torchvision
    backend swaps LANCZOS for BICUBIC + antialias and is not pixel-exact.
    """
    transformers = pytest.importorskip("transformers")
    processor = transformers.AutoProcessor.from_pretrained(model_config_dir, backend="pil")
    assert type(processor.image_processor).__name__ == "Idefics3ImageProcessorPil"
    return processor
