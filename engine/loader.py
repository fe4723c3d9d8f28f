"""``load_model``: pick the implementor of the model contract from config.json's ``model_type``."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from engine.device import choose_device, choose_dtype
from engine.errors import EngineError, UnsupportedModelError
from engine.models.base import GenerativeModel
from engine.sources import ModelSource, resolve_source


def model_class(model_type: str) -> type[GenerativeModel]:
    if model_type in ("idefics3", "smolvlm"):
        from engine.models.smolvlm import SmolVlmModel

        return SmolVlmModel
    raise UnsupportedModelError(f"model_type {model_type!r} is not supported")


WEIGHTS_ENV = "SMOLCHAT_WEIGHTS"
WEIGHTS = ("auto", "int8")


def load_model(path_or_repo_id: str | Path | ModelSource, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None, weights: str | None = None) -> GenerativeModel:
    """Load a checkpoint folder or Hub repository id on ``device`` (auto: CUDA > MPS > CPU).

    ``weights`` (default ``$SMOLCHAT_WEIGHTS``, else ``auto``): ``auto`` keeps the weights in
    ``dtype``; ``int8`` quantizes the text decoder's projections and lm_head to int8 weight-only
    (:mod:`engine.models.quantize`) when the model runs on the CPU (~1.5x faster decode there, with
    slightly different logits); on a GPU it is ignored.

    Raises:
        ModelLoadError: (and subclasses) the folder, config or tensors are unusable.
        EngineError: the device, dtype or weights option is not available.
    """
    from_env = not weights and bool(os.environ.get(WEIGHTS_ENV, "").strip())
    weights = (weights or os.environ.get(WEIGHTS_ENV, "")).strip().lower() or "auto"
    if weights not in WEIGHTS:
        where = f"${WEIGHTS_ENV}" if from_env else "weights"
        raise EngineError(f"{where}: unknown value {weights!r} (use {' or '.join(WEIGHTS)})")
    source = path_or_repo_id if isinstance(path_or_repo_id, ModelSource) else resolve_source(path_or_repo_id)
    meta = source.metadata()
    dev = choose_device(device)
    model = model_class(meta.model_type).load(source, dev, choose_dtype(dev, dtype))
    if weights == "int8" and dev.type == "cpu":
        from engine.models.quantize import quantize_int8

        quantize_int8(model, inplace=True)
    return model


def load_components(path_or_repo_id: str | Path, device: str | torch.device | None = None,
                    dtype: str | torch.dtype | None = None, weights: str | None = None):
    """Model, tokenizer and image processor of one checkpoint folder or Hub id (what a chat or an
    embedder needs). Raises as :func:`load_model`, plus ConfigError for missing tokenizer files."""
    from engine.processing import ImageProcessor
    from engine.tokenizer import Tokenizer

    source = resolve_source(path_or_repo_id)
    model = load_model(source, device, dtype, weights)
    return model, Tokenizer.from_pretrained(source.folder), ImageProcessor.from_pretrained(source.folder)
