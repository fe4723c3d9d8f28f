"""Fixed-shape decode step over a contiguous KV cache, replayed as a CUDA graph on CUDA.

A batch-1 decode step of SmolVLM-256M is ~1000 tiny kernels: launched one by one from Python the
GPU idles between them (eager ~30-50 tok/s on an H200). The step below has no shape that depends on
the position: the position lives in a device tensor, new keys/values are written with
``index_copy_`` at that position, and attention spans a fixed power-of-two bucket of cache slots
with the slots past the position masked out. So one capture per bucket is replayed for every token
(gpt-fast's recipe, without a compiler: torch.compile is optional, ``SMOLCHAT_COMPILE=1``).

The same step runs eagerly on any device (``use_graph=False``), which is how the CPU tests check it
against the ordinary decode path.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from engine.kv_base import KVCache
from engine.models.layers import apply_rotary

MIN_BUCKET = 256


def bucket_for(length: int, capacity: int) -> int:
    """Smallest power of two >= ``length`` (at least ``MIN_BUCKET``), capped at ``capacity``."""
    b = MIN_BUCKET
    while b < length:
        b *= 2
    return min(b, capacity)


class StaticDecoder:
    """Decode steps of one :class:`SmolVlmModel` over :class:`ContiguousKVCache` rows of batch 1."""

    def __init__(self, model, use_graph: bool | None = None, compile: bool | None = None):
        self.model = model
        text = model.model.text_model
        cfg = text.config
        dev, dt = model.device, model.dtype
        self.use_graph = dev.type == "cuda" if use_graph is None else use_graph
        if compile is None:
            compile = os.environ.get("SMOLCHAT_COMPILE", "") not in ("", "0")
        self.h, self.hkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.x = torch.zeros(1, 1, cfg.hidden_size, device=dev, dtype=dt)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.cos, self.sin = text.rotary.table(dev, dt)
        self.slots = torch.arange(cfg.max_position_embeddings, device=dev)
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.use_graph else None
        self.step = torch.compile(self._step, dynamic=False) if compile else self._step

    def supports(self, cache: KVCache, input: torch.Tensor) -> bool:
        return (getattr(cache, "k", None) is not None and input.shape[0] == 1
                and type(cache).__name__ == "ContiguousKVCache")

    def _step(self, kc: torch.Tensor, vc: torch.Tensor, bucket: int) -> torch.Tensor:
        """``self.x`` at position ``self.pos`` -> logits ``[1, V]``; writes layer k/v at ``pos``."""
        text = self.model.model.text_model
        h, hkv, d = self.h, self.hkv, self.d
        pos = self.pos
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)  # [1, D]
        zero = torch.zeros((), device=pos.device, dtype=self.x.dtype)
        bias = torch.where(self.slots[:bucket] <= pos, zero, float("-inf")).view(1, 1, 1, bucket)
        x = self.x
        for i, layer in enumerate(text.layers):
            attn = layer.self_attn
            qkv = attn.qkv_proj(layer.input_layernorm(x)).view(1, 1, h + 2 * hkv, d).transpose(1, 2)
            qk = apply_rotary(qkv[:, :h + hkv], cos, sin)
            kc[i, :1].index_copy_(2, pos, qk[:, h:])
            vc[i, :1].index_copy_(2, pos, qkv[:, h + hkv:])
            # The H/H_kv query heads of one KV head are the "query rows" of one SDPA call.
            q = qk[:, :h].reshape(1, hkv, h // hkv, d)
            o = F.scaled_dot_product_attention(q, kc[i, :1, :, :bucket], vc[i, :1, :, :bucket], attn_mask=bias)
            x = x + attn.o_proj(o.reshape(1, 1, h * d))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.lm_head(text.norm(x)[:, -1])

    def decode(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        start = cache.seq_len
        cache.begin_forward(1)
        try:
            bucket = bucket_for(start + 1, cache.capacity)
            self.x.copy_(input)
            self.pos.fill_(start)
            if not self.use_graph:
                logits = self.step(cache.k, cache.v, bucket)
            else:
                key = (cache.k.data_ptr(), cache.v.data_ptr(), bucket)
                entry = self.graphs.get(key)
                if entry is None:
                    # Warm up (cuBLAS handles, compiled kernels) on a side stream, then capture.
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        logits = self.step(cache.k, cache.v, bucket)
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=self.pool):
                        out = self.step(cache.k, cache.v, bucket)
                    self.graphs[key] = (graph, out)
                    # Capture does not run the kernels: this step's result is the warm-up's.
                else:
                    graph, out = entry
                    graph.replay()
                    logits = out.clone()
        except BaseException:
            cache.abort_forward()
            raise
        cache.end_forward()
        return logits

    def release(self) -> None:
        """Drop captured graphs (their memory pool goes when nothing references it)."""
        self.graphs.clear()
