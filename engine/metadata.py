"""Model metadata parsed from a checkpoint's config.json and generation_config.json.

Frozen dataclasses keep Hugging Face's field names (``hidden_size``, ``num_key_value_heads``,
``rope_theta`` ...). Unknown keys are ignored, derived values are computed in ``__post_init__``,
and a missing required key raises :class:`~engine.errors.ConfigError` naming the file and key.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import ConfigError

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def _from_dict(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build dataclass ``cls`` from ``data``, dropping unknown keys (mlx-lm ``BaseModelArgs.from_dict``).

    Raises:
        ConfigError: a field without default is absent; the message names ``where`` and the key.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected an object, got {type(data).__name__}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in data and data[f.name] is not None:
            kwargs[f.name] = data[f.name]
        elif f.default is _MISSING and f.default_factory is _MISSING:
            raise ConfigError(f"{where}: required key {f.name!r} is missing")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


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


@dataclass(frozen=True, slots=True)
class TextConfig:
    """Llama text decoder (``text_config``)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float | None = None
    rope_parameters: dict | None = None
    rope_scaling: dict | None = None
    max_position_embeddings: int = 8192
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    eos_token_id: int | list[int] | None = None

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        theta = self.rope_theta
        if theta is None and self.rope_parameters:  # transformers 5 spelling
            theta = self.rope_parameters.get("rope_theta")
        if theta is None:
            raise ValueError("rope_theta is missing (reference §0.4: never default to 10000)")
        object.__setattr__(self, "rope_theta", float(theta))
        rope_type = (self.rope_scaling or {}).get("rope_type") or (self.rope_parameters or {}).get("rope_type")
        if rope_type not in (None, "default"):
            raise ValueError(f"rope scaling {rope_type!r} is not supported")

    @property
    def num_key_value_groups(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads


@dataclass(frozen=True, slots=True)
class GenerationConfig:
    """Defaults from generation_config.json. ``eos_token_ids`` is always a tuple."""

    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    do_sample: bool | None = None
    max_new_tokens: int | None = None

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(int(i) for i in self.eos_token_id)


SUPPORTED_MODEL_TYPES = ("idefics3", "smolvlm")


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """Everything the engine needs to know about a checkpoint before loading tensors.

    ``eos_token_ids`` come from generation_config.json (SmolVLM: ``<end_of_utterance>`` 49279), falling
    back to ``text_config.eos_token_id`` only when generation_config.json has none (reference §0.6).
    """

    model_type: str
    vision: VisionConfig
    text: TextConfig
    scale_factor: int
    image_token_id: int
    tie_word_embeddings: bool
    generation: GenerationConfig
    name: str = ""
    image_seq_len: int = field(init=False)
    eos_token_ids: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        grid = self.vision.image_size // self.vision.patch_size
        if grid % self.scale_factor:
            raise ValueError(f"patch grid {grid} is not divisible by scale_factor {self.scale_factor}")
        # TF4 modeling_idefics3.py L534-536: int((image_size // patch)**2 / scale**2)
        object.__setattr__(self, "image_seq_len", int(self.vision.num_patches / self.scale_factor**2))
        eos = self.generation.eos_token_ids
        if not eos and self.text.eos_token_id is not None:
            eos = GenerationConfig(eos_token_id=self.text.eos_token_id).eos_token_ids
        object.__setattr__(self, "eos_token_ids", eos)

    @property
    def max_context(self) -> int:
        return self.text.max_position_embeddings

    @classmethod
    def from_dicts(cls, config: dict, generation: dict | None = None, name: str = "",
                   where: str = "config.json") -> ModelMetadata:
        """Parse already-loaded JSON objects.

        Raises:
            ConfigError: a required key is missing or a value is inconsistent.
            UnsupportedModelError: ``model_type`` is not one of :data:`SUPPORTED_MODEL_TYPES`.
        """
        from engine.errors import UnsupportedModelError

        model_type = config.get("model_type")
        if model_type is None:
            raise ConfigError(f"{where}: required key 'model_type' is missing")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedModelError(
                f"{where}: model_type {model_type!r} is not supported (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        for key in ("vision_config", "text_config"):
            if key not in config:
                raise ConfigError(f"{where}: required key {key!r} is missing")
        vision = _from_dict(VisionConfig, config["vision_config"], f"{where} vision_config")
        text = _from_dict(TextConfig, config["text_config"], f"{where} text_config")
        scale = config.get("scale_factor")
        if scale is None:
            raise ConfigError(f"{where}: required key 'scale_factor' is missing")
        image_token_id = config.get("image_token_id", config.get("image_token_index"))
        if image_token_id is None:
            raise ConfigError(f"{where}: required key 'image_token_id' is missing")
        gen = _from_dict(GenerationConfig, generation or {}, "generation_config.json")
        tie = config.get("tie_word_embeddings", text.tie_word_embeddings)
        try:
            return cls(model_type=model_type, vision=vision, text=text, scale_factor=int(scale),
                       image_token_id=int(image_token_id), tie_word_embeddings=bool(tie),
                       generation=gen, name=name)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    @classmethod
    def from_folder(cls, folder: str | Path) -> ModelMetadata:
        """Read ``config.json`` (required) and ``generation_config.json`` (optional) from ``folder``."""
        folder = Path(folder)
        config = read_json(folder / "config.json")
        gen_path = folder / "generation_config.json"
        generation = read_json(gen_path) if gen_path.exists() else None
        return cls.from_dicts(config, generation, name=folder.name, where=str(folder / "config.json"))


def read_json(path: Path) -> dict:
    """Load a JSON object; raises :class:`ConfigError` naming the file if missing or malformed."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data
