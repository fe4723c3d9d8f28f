"""Fixed-shape decode step over a contiguous KV cache, replayed as a CUDA graph on CUDA.

A batch-1 decode step of a 256M-parameter Llama decoder (SmolVLM-256M's) is ~1000 tiny kernels:
launched one by one from Python the
GPU idles between them (eager ~30-50 tok/s on an H200). The step below has no shape that depends on
the position: the position lives in a device tensor, new keys/values are written with
``index_copy_`` at that position, and attention spans a fixed power-of-two bucket of cache slots
with the slots past the position masked out. So one capture per bucket is replayed for every token
(gpt-fast's recipe, without a compiler: torch.compile is optional, ``SMOLCHAT_COMPILE=1``).

With a :class:`PagedKVCache` the step addresses the block arena through two static device
buffers: the slot of the new position, and a gather index holding the slot of every logical
position (``block_table[p // block_size] * block_size + p % block_size``). They are refreshed
outside the graph, the gather index only when the block table changes (every ``block_size``
tokens). Positions past the sequence point at slot 0's row of position 0 (always written, so
finite) and are masked. A grown arena is a new tensor, so it gets new captures.

The same step runs eagerly on any device (``use_graph=False``), which is how the CPU tests check it
against the ordinary decode path.

On CUDA, when Triton imports, the step is instead five fused Triton kernels a layer
(:mod:`engine.models.llama.triton_decode`), captured the same way. ``SMOLCHAT_TRITON=0`` keeps
the PyTorch step; Triton is imported only when the fused step is used.
"""

from __future__ import annotations

import gc
import os
import warnings

import torch
import torch.nn.functional as F

from engine.cache import ContiguousKVCache, PagedKVCache
from engine.cache.base import KVCache
from engine.layers import apply_rotary

MIN_BUCKET = 256


def triton_wanted(device: torch.device) -> bool:
    """Whether to run the fused Triton step: on CUDA, unless ``SMOLCHAT_TRITON=0``, if Triton imports."""
    if device.type != "cuda" or os.environ.get("SMOLCHAT_TRITON", "1") in ("0", "false", "no", "off"):
        return False
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001  (ImportError, or a broken install)
        return False
    return True


def bucket_for(length: int, capacity: int) -> int:
    """Smallest power of two >= ``length`` (at least ``MIN_BUCKET``), capped at ``capacity``."""
    b = MIN_BUCKET
    while b < length:
        b *= 2
    return min(b, capacity)


class StaticDecoder:
    """Decode steps of one Llama-decoder model (:class:`~engine.models.llama.lm.LlamaLM`) over a batch-1
    :class:`ContiguousKVCache` or a
    :class:`PagedKVCache`."""

    def __init__(self, model, use_graph: bool | None = None, compile: bool | None = None,
                 use_triton: bool | None = None, triton_config: dict | None = None):
        self.model = model
        text = model.decoder
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
        # Paged caches: arena slot of the new position, and of every logical position.
        self.write_slot = torch.zeros(1, dtype=torch.long, device=dev)
        self.gather = torch.zeros(cfg.max_position_embeddings, dtype=torch.long, device=dev)
        self._gather_key: tuple | None = None
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.use_graph else None
        self.triton = None
        if triton_wanted(dev) if use_triton is None else use_triton:
            from engine.models.llama.triton_decode import TritonStep

            try:
                self.triton = TritonStep(self, triton_config)
            except ValueError:  # a model shape the kernels do not cover: keep the PyTorch step
                if use_triton:
                    raise
        if self.triton is not None:
            self.step = self.triton
        else:
            self.step = torch.compile(self._step, dynamic=False) if compile else self._step

    def supports(self, cache: KVCache, input: torch.Tensor) -> bool:
        return input.shape[0] == 1 and isinstance(cache, ContiguousKVCache | PagedKVCache)

    def _sync_paged(self, cache: PagedKVCache) -> None:
        """Copy this step's write slot, and the gather index if the block table changed."""
        md = cache.metadata
        self.write_slot.copy_(md.slot_mapping)
        key = (tuple(cache.block_table), cache.arena_version)
        if key != self._gather_key:
            bs = cache.block_size
            table = md.block_table
            per_pos = (table[:, None] * bs + torch.arange(bs, device=table.device)).flatten()
            self.gather.fill_(table[0] * bs)  # position 0's row: written, finite, masked
            self.gather[: per_pos.numel()].copy_(per_pos)
            self._gather_key = key

    def _kv(self, kv: tuple[torch.Tensor, ...], layer: int, k: torch.Tensor, v: torch.Tensor, bucket: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k``/``v [1, H_kv, 1, D]`` at ``pos`` of ``layer``; return its keys/values
        ``[1, H_kv, bucket, D]`` (contiguous: a slice; paged: gathered from the arena)."""
        if len(kv) == 2:  # contiguous [L, B, H_kv, T, D]
            kc, vc = kv
            kc[layer, :1].index_copy_(2, self.pos, k)
            vc[layer, :1].index_copy_(2, self.pos, v)
            return kc[layer, :1, :, :bucket], vc[layer, :1, :, :bucket]
        arena = kv[0]  # [2, L, num_blocks, block_size, H_kv, D]
        out = []
        for cache, new in ((arena[0, layer], k), (arena[1, layer], v)):
            flat = cache.view(-1, self.hkv, self.d)  # [num_blocks * block_size, H_kv, D]
            flat.index_copy_(0, self.write_slot, new[0].transpose(0, 1))
            out.append(flat.index_select(0, self.gather[:bucket]).transpose(0, 1).unsqueeze(0))
        return out[0], out[1]

    def _step(self, kv: tuple[torch.Tensor, ...], bucket: int) -> torch.Tensor:
        """``self.x`` at position ``self.pos`` -> logits ``[1, V]``; writes layer k/v at ``pos``."""
        text = self.model.decoder
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
            keys, values = self._kv(kv, i, qk[:, h:], qkv[:, h + hkv:], bucket)
            # The H/H_kv query heads of one KV head are the "query rows" of one SDPA call.
            q = qk[:, :h].reshape(1, hkv, h // hkv, d)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=bias)
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
            if isinstance(cache, PagedKVCache):
                self._sync_paged(cache)
                kv = (cache.kv,)
            else:
                kv = (cache.k, cache.v)
            if not self.use_graph:
                logits = self.step(kv, bucket)
            else:
                key = (tuple((t.data_ptr(), tuple(t.shape)) for t in kv), bucket)
                entry = self.graphs.get(key)
                if entry is None:
                    try:
                        logits = self._capture(key, kv, bucket)
                    except Exception as exc:  # noqa: BLE001
                        if self.triton is None:
                            raise
                        # A Triton that cannot build or capture these kernels here: keep decoding
                        # with the PyTorch step (it rewrites the same position's keys/values).
                        warnings.warn(f"Triton decode step failed ({exc!r:.200}); using the PyTorch step",
                                      RuntimeWarning, stacklevel=2)
                        self.triton = None
                        self.step = self._step
                        self.graphs.clear()
                        logits = self._capture(key, kv, bucket)
                else:
                    graph, out = entry
                    graph.replay()
                    logits = out.clone()
        except BaseException:
            cache.abort_forward()
            raise
        cache.end_forward()
        return logits

    def _capture(self, key: tuple, kv: tuple[torch.Tensor, ...], bucket: int) -> torch.Tensor:
        """Warm up (cuBLAS handles, compiled kernels) on a side stream, then capture ``key``'s graph.
        Capture does not run the kernels: this step's result is the warm-up's."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            logits = self.step(kv, bucket)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # A CUDA graph freed while another is being captured invalidates that capture ("operation
        # not permitted when stream is capturing"). Graphs of an earlier decoder or model that sit
        # in a reference cycle are freed by the cyclic collector, which may run at any allocation:
        # it stays off until the capture ends. (A gc.collect() first made every capture slower: in
        # the H200 bench, which recaptures per session, contiguous decode fell from 1554 to 377
        # tok/s. What is unreachable is collected later, outside a capture.)
        enabled = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                out = self.step(kv, bucket)
        finally:
            if enabled:
                gc.enable()
        self.graphs[key] = (graph, out)
        return logits

    def release(self) -> None:
        """Drop captured graphs (their memory pool goes when nothing references it)."""
        self.graphs.clear()
