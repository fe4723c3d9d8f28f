"""Building blocks shared by decoder models: norm, rotary embedding, MLP, linear variants, attention.

Each concept is its own module; this package re-exports the names models use.
"""

from engine.layers.attention import causal_attention, single_query_attention
from engine.layers.linear import (
    Int4Linear,
    Int8Linear,
    fuse_linears,
    is_quantized,
    quantize_int8,
    quantize_weights,
    weight_format,
)
from engine.layers.mlp import GatedMLP
from engine.layers.norm import RMSNorm
from engine.layers.q4 import Q4Linear
from engine.layers.rope import RotaryEmbedding, apply_rotary

__all__ = [
    "GatedMLP",
    "Int4Linear",
    "Int8Linear",
    "Q4Linear",
    "RMSNorm",
    "RotaryEmbedding",
    "apply_rotary",
    "causal_attention",
    "fuse_linears",
    "is_quantized",
    "quantize_int8",
    "quantize_weights",
    "single_query_attention",
    "weight_format",
]
