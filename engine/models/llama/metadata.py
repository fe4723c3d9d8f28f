"""Metadata of a text-only ``LlamaForCausalLM`` checkpoint (config.json at the top level)."""

from __future__ import annotations

from engine.api.errors import ConfigError
from engine.models.config import GenerationConfig, ModelMetadata, from_dict
from engine.models.llama.config import LlamaConfig


def parse_metadata(config: dict, generation: dict | None, name: str = "", where: str = "config.json"
                   ) -> ModelMetadata:
    """:class:`ModelMetadata` of a Llama checkpoint from loaded config.json / generation_config.json
    objects; no image token (``image_token_id=None``). Stop ids: generation_config.json's
    ``eos_token_id`` (SmolLM2: ``<|im_end|>``, 2), else config.json's.

    Raises:
        ConfigError: a required key is missing or a value is inconsistent; the message names it.
    """
    text = from_dict(LlamaConfig, config, where)
    gen = from_dict(GenerationConfig, generation or {}, "generation_config.json")
    try:
        return ModelMetadata(model_type=config["model_type"], text=text, generation=gen, name=name,
                             tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                             image_token_id=None)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def load_processor(folder, metadata) -> None:
    """Text-only: no image processor."""
    return None
