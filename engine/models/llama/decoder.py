"""The Llama decoder (transformers ``modeling_llama.py``), keeping its keys and values in a :class:`KVCache`.

Generic over hidden size, layers, heads, KV heads, head_dim and rope theta. Submodule names follow the
checkpoint keys (``model.*`` of ``LlamaForCausalLM``, ``model.text_model.*`` of SmolVLM).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.cache import KVCache
from engine.layers import (
    GatedMLP,
    RMSNorm,
    RotaryEmbedding,
    apply_rotary,
    causal_attention,
    fuse_linears,
)
from engine.models.llama.config import LlamaConfig


class SelfAttention(nn.Module):
    """Causal grouped-query attention (Ainslie et al. 2023) with rotary positions; biases if the config has them."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        d = cfg.hidden_size
        self.q_proj = nn.Linear(d, self.num_heads * self.head_dim, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, d, bias=cfg.attention_bias)
        self.qkv_proj: nn.Linear | None = None

    def fuse(self, dtype: torch.dtype | None = None) -> None:
        """Replace q/k/v by one ``qkv_proj`` matmul (after loading; the checkpoint keeps three)."""
        self.qkv_proj = fuse_linears(self.q_proj, self.k_proj, self.v_proj, dtype=dtype)
        del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache,
                layer: int) -> torch.Tensor:
        """``x [B, S, hidden]`` at positions ``[cache.seq_len, +S)`` -> ``[B, S, hidden]`` (needs :meth:`fuse`)."""
        b, s, _ = x.shape
        h, hkv = self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x).view(b, s, h + 2 * hkv, self.head_dim).transpose(1, 2)  # [B, H+2Hkv, S, D]
        qk = apply_rotary(qkv[:, :h + hkv], cos, sin)  # q and k rotated in one pass
        keys, values = cache.update(layer, qk[:, h:], qkv[:, h + hkv:])  # [B, Hkv, past+S, D]
        out = causal_attention(qk[:, :h], keys, values, past=cache.seq_len)  # [B, H, S, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, s, h * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = SelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)

    def forward(self, x, cos, sin, cache: KVCache, layer: int) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))

    def fuse(self, dtype: torch.dtype | None = None) -> None:
        self.self_attn.fuse(dtype)
        self.mlp.fuse(dtype)


class LlamaDecoder(nn.Module):
    """Embeddings, decoder layers and final norm; ``forward`` returns final-norm hidden states."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        if cfg.hidden_act != "silu":
            raise ValueError(f"text hidden_act {cfg.hidden_act!r} is not supported")
        self.config = cfg
        # ``_weight`` skips the random init (the checkpoint overwrites it; on the meta device the
        # normal_ init also imported torch._dynamo, ~1.6 s of load time).
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings)

    def fuse(self, dtype: torch.dtype | None = None) -> None:
        """Fuse q/k/v and gate/up projections of every layer into ``dtype`` (done once, after loading)."""
        for layer in self.layers:
            layer.fuse(dtype)

    def forward(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """``x [B, S, H]`` embeddings at positions ``[cache.seq_len, +S)`` -> hidden ``[B, S, H]``.

        Commits the ``S`` positions to ``cache``; on any error the reservation is dropped.
        """
        start, s = cache.seq_len, x.shape[1]
        cache.begin_forward(s)
        try:
            cos, sin = self.rotary.cos_sin(start, s, x.device, x.dtype)
            for i, layer in enumerate(self.layers):
                x = layer(x, cos, sin, cache, i)
        except BaseException:
            cache.abort_forward()
            raise
        cache.end_forward()
        return self.norm(x)
