"""Configuration of a Llama decoder, parsed from config.json with Hugging Face's field names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """A Llama decoder: ``config.json`` of ``LlamaForCausalLM``, or SmolVLM's ``text_config``."""

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
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
            if getattr(self, name) < 1:  # (a -1 passed to the weights' check: "18 unknown tensors")
                raise ValueError(f"{name} is {getattr(self, name)}, not a positive whole number")
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
