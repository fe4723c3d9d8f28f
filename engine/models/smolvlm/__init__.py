"""SmolVLM / Idefics3 and SmolVLM2: config, vision (SigLIP), connector, model, processing.

The registry (:mod:`engine.registry`) reads ``Model``, ``parse_metadata`` and ``load_processor``.
The model classes are imported on first use, so configs and processing never import torch modules.
"""

import importlib

from engine.models.smolvlm.config import SmolVlmMetadata, VisionConfig, parse_metadata


def load_processor(folder, metadata):
    """The image processor of a SmolVLM checkpoint folder (``preprocessor_config.json`` ...).

    Raises:
        ConfigError: a processor file is missing or unreadable.
    """
    from engine.models.smolvlm.processing import ImageProcessor

    return ImageProcessor.from_pretrained(folder)


def __getattr__(name: str):
    if name in ("Model", "SmolVlmModel"):
        return importlib.import_module("engine.models.smolvlm.model").SmolVlmModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Model", "SmolVlmMetadata", "SmolVlmModel", "VisionConfig", "load_processor", "parse_metadata"]
