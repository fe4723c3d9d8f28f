"""Parsing config.json / generation_config.json into frozen dataclasses, and the metadata every model has.

Frozen dataclasses keep Hugging Face's field names (``hidden_size``, ``num_key_value_heads``,
``rope_theta`` ...). Unknown keys are ignored, derived values are computed in ``__post_init__``,
and a missing required key, or a value of another JSON kind than its field takes, raises
:class:`~engine.api.errors.ConfigError` naming the file and key.
Each model package parses its own config (``engine.models.<arch>.config``); this module holds what
they share.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from engine.api.errors import ConfigError
from engine.models.llama.config import LlamaConfig

T = TypeVar("T")

_MISSING = dataclasses.MISSING


_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "text", dict: "an object",
          list: "a list", tuple: "a list"}


class _Mismatch(Exception):
    pass


def _coerce(value: Any, hint: Any) -> Any:
    """``value`` as the field type ``hint`` takes it (a whole float such as 2.0 for an int, a list for a
    tuple); :class:`_Mismatch` with what was expected when JSON gave another kind. Types other than
    those of :data:`_KINDS` (and unions of them) are not checked."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [h for h in typing.get_args(hint) if h is not type(None)]
        for kind in kinds:
            try:
                return _coerce(value, kind)
            except _Mismatch:
                pass
        raise _Mismatch(" or ".join(dict.fromkeys(_KINDS.get(typing.get_origin(k) or k, str(k)) for k in kinds)))
    base = origin or hint
    if base not in _KINDS:
        return value
    if base is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if base is tuple and isinstance(value, list):
        return tuple(value)
    if base in (int, float):  # (JSON's true is no number: bool is an int subclass)
        fits = isinstance(value, int if base is int else (int, float)) and not isinstance(value, bool)
    else:
        fits = isinstance(value, base)
    if fits:
        return value
    raise _Mismatch(_KINDS[base])


def from_dict(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build dataclass ``cls`` from ``data``, dropping unknown keys (mlx-lm ``BaseModelArgs.from_dict``),
    each value checked against its field's type (a whole number, a number, true/false, text, an
    object or a list: JSON's kinds).

    Raises:
        ConfigError: a field without default is absent, or a value is of another kind than its field
            takes ("num_hidden_layers is 'two', not a whole number"); the message names ``where`` and
            the key.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in data and data[f.name] is not None:
            try:
                kwargs[f.name] = _coerce(data[f.name], hints.get(f.name, Any))
            except _Mismatch as exc:
                shown = repr(data[f.name])
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise ConfigError(f"{where}: {f.name} is {shown}, not {exc}") from None
        elif f.default is _MISSING and f.default_factory is _MISSING:
            raise ConfigError(f"{where}: required key {f.name!r} is missing")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


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


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """Everything the engine needs to know about a checkpoint before loading tensors.

    ``text`` is the decoder's configuration. ``eos_token_ids`` come from generation_config.json
    (SmolVLM: ``<end_of_utterance>`` 49279), falling back to the config's ``eos_token_id`` only when
    generation_config.json has none (reference §0.6). Models that take images set
    ``image_token_id`` (the placeholder id their features replace) and ``image_seq_len`` (placeholder
    tokens per image tile); text-only models leave them ``None`` / 0.
    """

    model_type: str
    text: LlamaConfig
    generation: GenerationConfig
    tie_word_embeddings: bool = False
    name: str = ""
    image_token_id: int | None = None
    image_seq_len: int = 0
    eos_token_ids: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        eos = self.generation.eos_token_ids
        if not eos and self.text.eos_token_id is not None:
            eos = GenerationConfig(eos_token_id=self.text.eos_token_id).eos_token_ids
        object.__setattr__(self, "eos_token_ids", eos)

    @property
    def max_context(self) -> int:
        return self.text.max_position_embeddings

    @property
    def takes_images(self) -> bool:
        return self.image_token_id is not None and self.image_seq_len > 0


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
