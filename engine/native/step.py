"""The native CPU decode step of a :class:`~engine.models.llama.lm.LlamaLM`: one ctypes call per token.

:class:`NativeStep` describes the model to ``cpu_step.c`` once (raw ``data_ptr()`` s of the fused
qkv / o / gate_up / down weights, norms, lm_head, in float32, int8 per-row or 4-bit), then each
:meth:`NativeStep.decode` reserves the position in the cache, passes the cache's storage (the
contiguous ``[L, B, H_kv, T, D]`` tensors or the paged arena and its block table) and gets the
logits back. The tensors stay owned by the model and the cache; this object only holds references
so they outlive it.
"""

from __future__ import annotations

import ctypes
import threading

import torch
from torch import nn

from engine.cache import ContiguousKVCache, PagedKVCache
from engine.cache.base import KVCache
from engine.layers.linear import Int8Linear
from engine.layers.q4 import Q4Linear

W_F32, W_I8, W_Q4 = 0, 1, 2
P = ctypes.c_void_p


class Lin(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("rows", ctypes.c_int32), ("cols", ctypes.c_int32),
                ("pad", ctypes.c_int32), ("w", P), ("scale", P), ("mins", P), ("bias", P)]


class Layer(ctypes.Structure):
    _fields_ = [("in_norm", P), ("post_norm", P), ("qkv", Lin), ("o", Lin), ("gate_up", Lin), ("down", Lin)]


class Model(ctypes.Structure):
    _fields_ = [("n_layers", ctypes.c_int32), ("hidden", ctypes.c_int32), ("n_heads", ctypes.c_int32),
                ("n_kv", ctypes.c_int32), ("head_dim", ctypes.c_int32), ("inter", ctypes.c_int32),
                ("vocab", ctypes.c_int32), ("pad", ctypes.c_int32), ("eps", ctypes.c_float),
                ("pad2", ctypes.c_float), ("final_norm", P), ("layers", P), ("lm_head", Lin)]


class KV(ctypes.Structure):
    _fields_ = [("k", P), ("v", P), ("layer_stride", ctypes.c_int64), ("pos_stride", ctypes.c_int64),
                ("head_stride", ctypes.c_int64), ("block_table", P), ("block_size", ctypes.c_int64)]


class Unsupported(ValueError):
    """The model has a layer kind or shape the native step does not run (the eager path does)."""


def _f32(t: torch.Tensor | None, keep: list) -> int | None:
    if t is None:
        return None
    if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
        raise Unsupported(f"needs contiguous float32 CPU tensors, got {t.dtype} {tuple(t.shape)}")
    keep.append(t)
    return t.data_ptr()


def describe_linear(mod: nn.Module, keep: list) -> Lin:
    """The :class:`Lin` of an ``nn.Linear`` (float32), :class:`Int8Linear` or :class:`Q4Linear`.

    Raises:
        Unsupported: any other module or dtype.
    """
    if isinstance(mod, Q4Linear):
        keep.extend([mod.qweight, mod.scales, mod.mins])
        return Lin(W_Q4, mod.out_features, mod.in_features, 0, mod.qweight.data_ptr(), mod.scales.data_ptr(),
                   mod.mins.data_ptr(), _f32(mod.bias, keep))
    if isinstance(mod, Int8Linear):
        if not (mod.weight.is_contiguous() and mod.scale.dtype == torch.bfloat16):
            raise Unsupported("int8 layout")
        keep.extend([mod.weight, mod.scale])
        return Lin(W_I8, mod.out_features, mod.in_features, 0, mod.weight.data_ptr(), mod.scale.data_ptr(),
                   None, _f32(mod.bias, keep))
    if type(mod) is nn.Linear:
        rows, cols = mod.weight.shape
        return Lin(W_F32, rows, cols, 0, _f32(mod.weight, keep), None, None, _f32(mod.bias, keep))
    raise Unsupported(f"layer {type(mod).__name__}")


class NativeStep:
    """Batch-1 decode steps of one model through ``lib`` (from :func:`engine.native.build.library`).

    Raises:
        Unsupported: (at construction) a layer kind, dtype or shape the C step does not cover.
    """

    def __init__(self, model, lib: ctypes.CDLL):
        self.lib = lib
        dec = model.decoder
        cfg = dec.config
        if model.dtype != torch.float32:
            raise Unsupported(f"model dtype {model.dtype}")
        if cfg.head_dim > 512 or cfg.hidden_size > 32768 or cfg.intermediate_size > 32768:
            raise Unsupported("shape")
        if cfg.num_attention_heads % cfg.num_key_value_heads:
            raise Unsupported("heads")
        keep: list = []
        layers = (Layer * len(dec.layers))()
        for i, layer in enumerate(dec.layers):
            attn, mlp = layer.self_attn, layer.mlp
            if attn.qkv_proj is None or mlp.gate_up is None:
                raise Unsupported("unfused projections")
            layers[i] = Layer(_f32(layer.input_layernorm.weight.detach(), keep),
                              _f32(layer.post_attention_layernorm.weight.detach(), keep),
                              describe_linear(attn.qkv_proj, keep), describe_linear(attn.o_proj, keep),
                              describe_linear(mlp.gate_up, keep), describe_linear(mlp.down_proj, keep))
        self.model_struct = Model(len(dec.layers), cfg.hidden_size, cfg.num_attention_heads,
                                  cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size,
                                  model.lm_head.out_features if hasattr(model.lm_head, "out_features")
                                  else model.lm_head.weight.shape[0],
                                  0, dec.norm.eps, 0.0, _f32(dec.norm.weight.detach(), keep),
                                  ctypes.addressof(layers), describe_linear(model.lm_head, keep))
        self.layers, self.keep = layers, keep
        self.vocab = self.model_struct.vocab
        self.hidden = cfg.hidden_size
        self.cos, self.sin = dec.rotary.table(torch.device("cpu"), torch.float32)
        self.row_bytes = self.cos.stride(0) * 4
        self.max_pos = cfg.max_position_embeddings
        self._scratch: torch.Tensor | None = None
        self._scratch_threads = 0
        self._kv = KV()
        self._mp = ctypes.addressof(self.model_struct)
        # One scratch buffer and KV descriptor per model: two threads decoding the same model (two
        # sessions served at once) take turns, as they would for the cores anyway.
        self._lock = threading.Lock()

    def __deepcopy__(self, memo):
        # A copied model (quantize_weights copies) describes its own tensors: it builds a new step.
        return None

    @staticmethod
    def supports(cache: KVCache, input: torch.Tensor) -> bool:
        """Batch 1, float32, a contiguous cache (row 0) or the paged one."""
        if input.shape[0] != 1 or input.dtype != torch.float32 or cache.dtype != torch.float32:
            return False
        return isinstance(cache, ContiguousKVCache | PagedKVCache)

    def _scratch_for(self, threads: int) -> torch.Tensor:
        if self._scratch is None or threads > self._scratch_threads:
            n = self.lib.smol_scratch_floats(self._mp, self.max_pos, threads)
            self._scratch = torch.empty(n, dtype=torch.float32)
            self._scratch_threads = threads
        return self._scratch

    def _fill_kv(self, cache: KVCache) -> None:
        kv = self._kv
        if isinstance(cache, PagedKVCache):
            arena = cache.kv  # re-read: begin_forward may have grown (reallocated) it
            _, layers, blocks, bs, hkv, d = arena.shape
            kv.k = arena.data_ptr()
            kv.v = arena[1].data_ptr()
            kv.layer_stride, kv.pos_stride, kv.head_stride = blocks * bs * hkv * d, hkv * d, d
            kv.block_table = cache.metadata.block_table.data_ptr()
            kv.block_size = bs
        else:
            k = cache.k  # [L, B, H_kv, T, D], row 0
            kv.k, kv.v = k.data_ptr(), cache.v.data_ptr()
            kv.layer_stride, kv.head_stride, kv.pos_stride = k.stride(0), k.stride(2), k.stride(3)
            kv.block_table, kv.block_size = None, 1

    def decode(self, input: torch.Tensor, cache: KVCache, threads: int) -> torch.Tensor:
        """``input [1, 1, H]`` at position ``cache.seq_len`` -> logits ``[1, V]`` (commits the position)."""
        x = input.reshape(-1)
        if not x.is_contiguous():
            x = x.contiguous()
        with self._lock:
            return self._decode(x, cache, threads)

    def _decode(self, x: torch.Tensor, cache: KVCache, threads: int) -> torch.Tensor:
        pos = cache.seq_len
        scratch = self._scratch_for(threads)
        logits = torch.empty(1, self.vocab, dtype=torch.float32)
        cache.begin_forward(1)
        try:
            self._fill_kv(cache)
            base_cos, base_sin = self.cos.data_ptr(), self.sin.data_ptr()
            rc = self.lib.smol_step(self._mp, ctypes.addressof(self._kv), x.data_ptr(), pos,
                                    base_cos + pos * self.row_bytes, base_sin + pos * self.row_bytes,
                                    logits.data_ptr(), threads, scratch.data_ptr(), self.max_pos)
            if rc != 0:
                raise RuntimeError(f"native decode step refused position {pos} (rc {rc})")
        except BaseException:
            cache.abort_forward()
            raise
        cache.end_forward()
        return logits
