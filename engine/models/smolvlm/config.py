"""SmolVLM / Idefics3 configuration: the SigLIP vision tower, the connector and the Llama text decoder."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.api.errors import ConfigError
from engine.models.config import GenerationConfig, ModelMetadata, from_dict
from engine.models.llama.config import LlamaConfig


@dataclass(frozen=True, slots=True)
class VisionConfig:
    """SigLIP vision tower (``vision_config``)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    patch_size: int
    image_size: int
    num_channels: int = 3
    layer_norm_eps: float = 1e-6
    hidden_act: str = "gelu_pytorch_tanh"
    head_dim: int = field(init=False)
    num_patches: int = field(init=False)

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )
        object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        object.__setattr__(self, "num_patches", (self.image_size // self.patch_size) ** 2)


@dataclass(frozen=True, slots=True, kw_only=True)
class SmolVlmMetadata(ModelMetadata):
    """:class:`ModelMetadata` plus the vision tower and the pixel-shuffle ``scale_factor``."""

    vision: VisionConfig
    scale_factor: int

    def __post_init__(self) -> None:
        ModelMetadata.__post_init__(self)
        grid = self.vision.image_size // self.vision.patch_size
        if grid % self.scale_factor:
            raise ValueError(f"patch grid {grid} is not divisible by scale_factor {self.scale_factor}")
        # TF4 modeling_idefics3.py L534-536: int((image_size // patch)**2 / scale**2)
        object.__setattr__(self, "image_seq_len", int(self.vision.num_patches / self.scale_factor**2))


def parse_metadata(config: dict, generation: dict | None, name: str = "", where: str = "config.json"
                   ) -> SmolVlmMetadata:
    """SmolVLM metadata from loaded config.json / generation_config.json objects.

    Raises:
        ConfigError: a required key (``vision_config``, ``text_config``, ``scale_factor``,
            ``image_token_id``) is missing or a value is inconsistent; the message names it.
    """
    for key in ("vision_config", "text_config"):
        if key not in config:
            raise ConfigError(f"{where}: required key {key!r} is missing")
    vision = from_dict(VisionConfig, config["vision_config"], f"{where} vision_config")
    text = from_dict(LlamaConfig, config["text_config"], f"{where} text_config")
    scale = config.get("scale_factor")
    if scale is None:
        raise ConfigError(f"{where}: required key 'scale_factor' is missing")
    image_token_id = config.get("image_token_id", config.get("image_token_index"))
    if image_token_id is None:
        raise ConfigError(f"{where}: required key 'image_token_id' is missing")
    gen = from_dict(GenerationConfig, generation or {}, "generation_config.json")
    tie = config.get("tie_word_embeddings")
    tie = text.tie_word_embeddings if tie is None else tie
    if not isinstance(tie, bool):  # bool("no") is True: checked as from_dict checks text_config's
        raise ConfigError(f"{where}: tie_word_embeddings is {tie!r:.60}, not true or false")
    try:
        return SmolVlmMetadata(model_type=config["model_type"], vision=vision, text=text, scale_factor=int(scale),
                               image_token_id=int(image_token_id), tie_word_embeddings=bool(tie),
                               generation=gen, name=name)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
