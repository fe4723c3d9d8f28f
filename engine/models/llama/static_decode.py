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

A short prefill after cached tokens (a follow-up question) runs the same way as one fixed-shape step
of :data:`PREFILL_ROWS` query rows (:meth:`StaticDecoder.prefill`): row ``t`` sits at position
``pos + t`` and attends to the bucket's slots ``<= pos + t``, and rows past the prompt repeat its last
token at its last position, so they write the very keys/values that row writes and their outputs are
dropped. One replay instead of a decode step per token, or ~700 eager kernel launches.

The same steps run eagerly on any device (``use_graph=False``), which is how the CPU tests check them
against the ordinary decode and prefill paths.

On CUDA, when Triton imports, the step is instead six fused Triton kernels a layer
(:mod:`engine.models.llama.triton_decode`), captured the same way. ``SMOLCHAT_TRITON=0`` keeps
the PyTorch step; Triton is imported only when the fused step is used.
"""

from __future__ import annotations

import os
import threading
import warnings

import torch
import torch.nn.functional as F

from engine.cache import ContiguousKVCache, PagedKVCache
from engine.cache.base import KVCache
from engine.device import host_staged
from engine.layers import apply_rotary
from engine.models.cuda_graph import capture, capture_stream

MIN_BUCKET = 256
#: Query rows of the short-prefill step: a prefill of at most this many tokens after cached ones is
#: one replay (longer ones are several). A follow-up question is ~10-40 tokens, and at batch 32 the
#: step's GEMMs still read each weight once, so a padded row costs little.
PREFILL_ROWS = 32


def triton_wanted(device: torch.device) -> bool:
    """Whether to run the fused Triton step: on CUDA, unless ``SMOLCHAT_TRITON=0``, if Triton imports."""
    if device.type != "cuda" or os.environ.get("SMOLCHAT_TRITON", "1") in ("0", "false", "no", "off"):
        return False
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001  (ImportError, or a broken install)
        return False
    return True


def start_triton_key(device: torch.device) -> None:
    """Have Triton's kernel-cache key ready before the warm-up's first fused kernel, on a background
    thread that overlaps the weights' load: read from disk when Triton's files are unchanged since it
    was stored, else computed (Triton hashes its compiler and ``libtriton``: ~0.5 s on the H200's
    host, hashlib releasing the GIL) and stored (:mod:`.triton_key`); then Triton's driver and
    compiler backend are set up there too (:func:`.triton_key.warm_backend`). Does nothing off CUDA or with
    ``SMOLCHAT_TRITON=0``; any failure is left to the first kernel, which computes the key itself."""
    if device.type != "cuda" or os.environ.get("SMOLCHAT_TRITON", "1") in ("0", "false", "no", "off"):
        return

    def run() -> None:
        try:
            from engine.models.llama.triton_key import prepare, warm_backend

            prepare()
            warm_backend(device.index)
        except Exception:  # noqa: BLE001  (no Triton, or another layout: the kernels compute it later)
            pass

    threading.Thread(target=run, name="smolchat-triton-key", daemon=True).start()


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
        # The token step (decode_token): its input id, and what its graph leaves for the host: the
        # argmax and the argmax or INVALID_TOKEN. ``_token_next`` is (cache, position) the device's
        # ``pos`` and ``token`` are set for after a token step, so consecutive steps upload nothing.
        self.token = torch.zeros(1, dtype=torch.long, device=dev)
        self.argmax = torch.zeros(1, dtype=torch.long, device=dev)
        self.reported = torch.zeros(1, dtype=torch.long, device=dev)
        self._token_next: tuple | None = None
        # The short-prefill step's rows: inputs, positions, cache rows written, and the last real row.
        self.rows = PREFILL_ROWS
        self.x_rows = torch.zeros(1, self.rows, cfg.hidden_size, device=dev, dtype=dt)
        self.pos_rows = torch.zeros(self.rows, dtype=torch.long, device=dev)
        self.slot_rows = torch.zeros(self.rows, dtype=torch.long, device=dev)
        self.last_row = torch.zeros(1, dtype=torch.long, device=dev)
        self.rows_triton = True  # False once the Triton short-prefill step failed to build or capture
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.use_graph else None
        # Every capture (and its warm-up run) on one stream: cuBLAS keeps a workspace per stream (32 MiB
        # on Hopper), and torch.cuda.graph's default, a new stream per capture, gave each captured
        # graph its own (measured: +37 MiB allocated per short-prefill graph); one per device, not
        # per decoder, for the same reason across model loads.
        self.capture_stream = capture_stream(dev) if self.use_graph else None
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
        # Pinned host memory the fused token step's last kernel also writes ``reported`` into, at
        # index ``position % 2`` (see :meth:`token_report_host`); None without it.
        self.host_reported: torch.Tensor | None = None
        if self.triton is not None and dev.type == "cuda" and self.triton.cfg["host_report"]:
            self.host_reported = torch.zeros(2, dtype=torch.long, pin_memory=True)

    def supports(self, cache: KVCache, input: torch.Tensor) -> bool:
        return input.shape[0] == 1 and isinstance(cache, ContiguousKVCache | PagedKVCache)

    def _sync_paged(self, cache: PagedKVCache) -> None:
        """Copy this step's write slot, and the gather index if the block table changed."""
        self.write_slot.copy_(cache.metadata.slot_mapping)
        self._sync_gather(cache)

    def _sync_gather(self, cache: PagedKVCache) -> None:
        """Refresh the gather index (arena slot of every logical position) if the block table changed.

        Computed on the host and sent in one copy that does not wait for the GPU (the decode loop
        runs a step ahead of it). When blocks were only appended, as a growing sequence does every
        ``block_size`` tokens, only their positions are sent."""
        key = (tuple(cache.block_table), cache.arena_version)
        if key == self._gather_key:
            return
        bs, table, prev = cache.block_size, key[0], self._gather_key
        lo = 0
        if prev is not None and prev[1] == key[1] and 0 < len(prev[0]) < len(table) and table[:len(prev[0])] == prev[0]:
            lo = len(prev[0])  # positions past the old blocks already hold position 0's slot
        per_pos = (torch.tensor(table[lo:], dtype=torch.long)[:, None] * bs + torch.arange(bs)).flatten()
        if lo:
            values, start = per_pos, lo * bs
        else:
            values = torch.full((self.gather.numel(),), table[0] * bs, dtype=torch.long)  # position 0's row:
            values[: per_pos.numel()] = per_pos[: values.numel()]  # written, finite, masked
            start = 0
        values = values[: self.gather.numel() - start]
        self.gather[start:start + values.numel()].copy_(host_staged(values, self.gather.device), non_blocking=True)
        self._gather_key = key

    def _kv(self, kv: tuple[torch.Tensor, ...], layer: int, k: torch.Tensor, v: torch.Tensor, bucket: int,
            rows: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k``/``v [1, H_kv, R, D]`` (R = 1, or :data:`PREFILL_ROWS` with ``rows``) at their
        positions of ``layer``; return its keys/values ``[1, H_kv, bucket, D]`` (contiguous: a slice;
        paged: gathered from the arena). ``rows``: the (positions, arena slots) of the R rows; default
        the decode step's ``pos`` and ``write_slot``."""
        pos, slot = rows if rows is not None else (self.pos, self.write_slot)
        if len(kv) == 2:  # contiguous [L, B, H_kv, T, D]
            kc, vc = kv
            kc[layer, :1].index_copy_(2, pos, k)
            vc[layer, :1].index_copy_(2, pos, v)
            return kc[layer, :1, :, :bucket], vc[layer, :1, :, :bucket]
        arena = kv[0]  # [2, L, num_blocks, block_size, H_kv, D]
        out = []
        for cache, new in ((arena[0, layer], k), (arena[1, layer], v)):
            flat = cache.view(-1, self.hkv, self.d)  # [num_blocks * block_size, H_kv, D]
            flat.index_copy_(0, slot, new[0].transpose(0, 1))
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

    def _rows_step(self, kv: tuple[torch.Tensor, ...], bucket: int) -> torch.Tensor:
        """``self.x_rows [1, R, hidden]`` at positions ``self.pos_rows`` -> logits ``[1, V]`` of row
        ``self.last_row``; writes every row's layer keys/values (rows past the prompt repeat its last
        row, position and slot included, so they write the same values to the same place). The fused
        Triton kernels where the decode step uses them and they take the model's shape, else PyTorch."""
        if self.triton is not None and self.rows_triton and self.triton.rows_supported():
            return self.triton.rows(kv, bucket)
        return self._rows_step_torch(kv, bucket)

    def _rows_step_torch(self, kv: tuple[torch.Tensor, ...], bucket: int) -> torch.Tensor:
        text = self.model.decoder
        h, hkv, d, r = self.h, self.hkv, self.d, self.rows
        g = h // hkv
        pos = self.pos_rows
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)  # [R, D]
        zero = torch.zeros((), device=pos.device, dtype=self.x_rows.dtype)
        # Row t sees slots <= its position: causal within the chunk, everything cached before it.
        bias = torch.where(self.slots[:bucket][None, :] <= pos[:, None], zero, float("-inf"))  # [R, bucket]
        bias = bias.repeat(g, 1).view(1, 1, g * r, bucket)
        rows = (pos, self.slot_rows if len(kv) == 1 else pos)
        x = self.x_rows
        for i, layer in enumerate(text.layers):
            attn = layer.self_attn
            qkv = attn.qkv_proj(layer.input_layernorm(x)).view(1, r, h + 2 * hkv, d).transpose(1, 2)
            qk = apply_rotary(qkv[:, :h + hkv], cos, sin)
            keys, values = self._kv(kv, i, qk[:, h:], qkv[:, h + hkv:], bucket, rows)
            # The G query heads of a KV head times R rows are the "query rows" of one SDPA call.
            q = qk[:, :h].reshape(1, hkv, g * r, d)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=bias)  # [1, H_kv, G*R, D]
            o = o.view(1, hkv, g, r, d).permute(0, 3, 1, 2, 4).reshape(1, r, h * d)
            x = x + attn.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        last = x.index_select(1, self.last_row)  # [1, 1, hidden]
        return self.model.lm_head(text.norm(last)[:, -1])

    def prefill(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """``input [1, S, H]`` at positions ``[cache.seq_len, +S)``, after cached ones -> logits of the
        last position ``[1, V]``; every position's keys and values are written to ``cache``. Runs
        ``ceil(S / PREFILL_ROWS)`` steps of :meth:`_rows_step` (CUDA graph replays on CUDA).

        Raises:
            ValueError: ``S`` is 0.
        """
        n = input.shape[1]
        if n < 1:
            raise ValueError("prefill needs at least one position")
        for c0 in range(0, n, self.rows):
            logits = self._prefill_chunk(input[:, c0:c0 + self.rows], cache)
        return logits

    def _prefill_chunk(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        n, r, start = x.shape[1], self.rows, cache.seq_len
        cache.begin_forward(n)
        try:
            bucket = bucket_for(start + n, cache.capacity)
            self.x_rows[:, :n].copy_(x)
            self.pos_rows[:n].copy_(self.slots[start:start + n])
            if n < r:
                self.x_rows[:, n:].copy_(x[:, -1:].expand(1, r - n, x.shape[2]))
                self.pos_rows[n:].fill_(start + n - 1)
            self.last_row.fill_(n - 1)
            if isinstance(cache, PagedKVCache):
                slots = cache.metadata.slot_mapping
                self.slot_rows[:n].copy_(slots)
                if n < r:
                    self.slot_rows[n:].copy_(slots[-1:].expand(r - n))
                self._sync_gather(cache)
                kv = (cache.kv,)
            else:
                kv = (cache.k, cache.v)
            try:
                logits = self._run(("rows", bucket), kv, bucket, self._rows_step)
            except Exception as exc:  # noqa: BLE001
                if self.triton is None or not self.rows_triton or not self.use_graph:
                    raise
                # As for decode: a Triton that cannot build or capture these kernels here. The
                # PyTorch step rewrites the same positions' keys/values.
                warnings.warn(f"Triton short-prefill step failed ({exc!r:.200}); using the PyTorch step",
                              RuntimeWarning, stacklevel=2)
                self.rows_triton = False
                self.graphs = {k: v for k, v in self.graphs.items() if k[0][0] != "rows"}
                logits = self._run(("rows", bucket), kv, bucket, self._rows_step)
        except BaseException:
            cache.abort_forward()
            raise
        cache.end_forward()
        return logits

    def _run(self, kind: tuple, kv: tuple[torch.Tensor, ...], bucket: int, step, clone: bool = True,
             key: tuple | None = None):
        """``step(kv, bucket)``: eagerly, or by replaying its graph for these cache tensors (captured
        on first use). ``clone=False`` returns the graph's own output tensors, which the next replay
        overwrites. ``key``: :meth:`_graph_key` of ``kind`` and ``kv``, when the caller has it."""
        if not self.use_graph:
            return step(kv, bucket)
        key = key or self._graph_key(kind, kv)
        entry = self.graphs.get(key)
        if entry is None:
            return self._capture(key, kv, bucket, step)
        graph, out = entry
        graph.replay()
        return out.clone() if clone else out

    @staticmethod
    def _graph_key(kind: tuple, kv: tuple[torch.Tensor, ...]) -> tuple:
        return kind, tuple((t.data_ptr(), tuple(t.shape)) for t in kv)

    def _token_step(self, kv: tuple[torch.Tensor, ...], bucket: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The decode step fed and followed on the device: embeds ``self.token`` at ``self.pos`` (paged:
        its arena slot read from the gather index), runs :attr:`step`, takes the argmax of the logits
        into ``self.token`` (the next step's input) and ``self.argmax``, writes the argmax or
        :data:`~engine.sampling.INVALID_TOKEN` (NaN or +inf logits) into ``self.reported`` and
        advances ``self.pos``. Returns ``(logits [1, V], argmax [1], reported [1])``."""
        from engine.sampling import INVALID_TOKEN

        if self.triton is not None:  # one kernel each for the head and the tail instead of ~15
            self.triton.embed_token(paged=len(kv) == 1)
            if self.triton.fused_head:
                self.triton(kv, bucket, head=False)
                logits = self.triton.head_argmax()
            else:
                logits = self.step(kv, bucket)
                self.triton.argmax_token(logits)
            return logits, self.argmax, self.reported
        self.x.copy_(self.model.decoder.embed_tokens(self.token.view(1, 1)))
        if len(kv) == 1:
            torch.index_select(self.gather, 0, self.pos, out=self.write_slot)
        logits = self.step(kv, bucket)
        # Greedy's token, as TokenSampler.sample_checked takes it: the first of equal maxima of the
        # float32 logits; a NaN or +inf wins an argmax, so a finite winner means finite logits.
        best, index = torch.max(logits[0].float(), 0)
        self.argmax.copy_(index.view(1))
        self.token.copy_(index.view(1))
        self.reported.copy_(torch.where(torch.isfinite(best), index, INVALID_TOKEN).view(1))
        self.pos.add_(1)
        return logits, self.argmax, self.reported

    def decode_token(self, token: torch.Tensor | None, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decode step of token id ``token [1] int64`` (on the model's device) at position
        ``cache.seq_len``, its argmax taken in the same CUDA graph. ``token=None`` feeds the argmax of
        the previous ``decode_token`` on this cache, already on the device: a greedy loop then does
        one graph replay per token and nothing else on the GPU.

        Returns ``(logits [1, V], argmax [1] int64, reported [1] int64)``, where ``reported`` is the
        argmax or :data:`~engine.sampling.INVALID_TOKEN` for NaN/inf logits. They are the graph's
        own buffers: the next step overwrites them (copy them, or enqueue a copy, before it).

        Raises:
            ValueError: ``token`` is ``None`` but the previous step was not a ``decode_token`` on
                ``cache`` ending at ``cache.seq_len``.
        """
        start = cache.seq_len
        follows = self._token_next == (id(cache), start)
        if token is None and not follows:
            raise ValueError("decode_token(None) continues a previous decode_token on the same cache")
        self._token_next = None
        cache.begin_forward(1)
        try:
            bucket = bucket_for(start + 1, cache.capacity)
            if token is not None:
                self.token.copy_(token.view(1))
            if not follows:
                self.pos.fill_(start)
            if isinstance(cache, PagedKVCache):
                self._sync_gather(cache)
                kv = (cache.kv,)
            else:
                kv = (cache.k, cache.v)
            # A capture runs the step once before it records it, and that run feeds its argmax back
            # into ``token``: if the capture then fails, the retry needs this step's input again.
            key = self._graph_key(("token", bucket), kv)
            fed = self.token.clone() if self.use_graph and key not in self.graphs else None

            def restore() -> None:
                self.pos.fill_(start)
                if fed is not None:
                    self.token.copy_(fed)
            out = self._run_decode("token", kv, bucket, restore, key)
        except BaseException:
            cache.abort_forward()
            raise
        cache.end_forward()
        self._token_next = (id(cache), start + 1)
        return out

    def token_report_host(self) -> torch.Tensor | None:
        """Where the token steps also leave their ``reported`` value in host memory: a pinned
        ``[2] int64`` tensor, element ``p % 2`` written by the step at position ``p`` (the cache's
        ``seq_len`` before its :meth:`decode_token`), readable once the step has completed (an event
        recorded after it has fired). A loop that reads a token before launching the step after
        next never sees it overwritten. ``None`` where the steps do not write it (the PyTorch step,
        the CPU): copy ``reported`` instead."""
        return self.host_reported

    def _run_decode(self, kind: str, kv: tuple[torch.Tensor, ...], bucket: int, restore=None, key: tuple | None = None):
        """:meth:`_run` of the ``"decode"`` step (:attr:`step`, logits cloned) or the ``"token"`` step
        (:meth:`_token_step`, its own buffers). A Triton that cannot build or capture these kernels
        here: warn, decode with the PyTorch step from now on (it rewrites the same position's
        keys/values) and retry once, after ``restore()`` undoes what the failed attempt changed. A
        token step that stores its token in pinned host memory is first retried without that store
        (a Triton whose launcher refuses a host pointer keeps the fused step; the loop copies)."""
        def attempt():
            step, clone = (self._token_step, False) if kind == "token" else (self.step, True)
            return self._run((kind, bucket), kv, bucket, step, clone, key)
        try:
            return attempt()
        except Exception as exc:  # noqa: BLE001
            if self.triton is None or not self.use_graph:
                raise
            if kind == "token" and self.host_reported is not None:
                warnings.warn(f"Triton token step failed with its host store ({exc!r:.200}); retrying without it",
                              RuntimeWarning, stacklevel=3)
                self.host_reported = None
                self.graphs = {k: v for k, v in self.graphs.items() if k[0][0] != "token"}
                if restore is not None:
                    restore()
                try:
                    return attempt()
                except Exception as again:  # noqa: BLE001
                    exc = again
            warnings.warn(f"Triton decode step failed ({exc!r:.200}); using the PyTorch step",
                          RuntimeWarning, stacklevel=3)
            self.triton = None
            self.step = self._step
            self.host_reported = None
            self.graphs = {k: v for k, v in self.graphs.items() if k[0][0] not in ("decode", "token")}
            if restore is not None:
                restore()
            return attempt()

    def decode(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        self._token_next = None  # pos is set here, and not advanced
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
            logits = self._run_decode("decode", kv, bucket)
        except BaseException:
            cache.abort_forward()
            raise
        cache.end_forward()
        return logits

    def _capture(self, key: tuple, kv: tuple[torch.Tensor, ...], bucket: int, step) -> torch.Tensor:
        """Warm up and capture ``key``'s graph on the capture stream (:func:`engine.models.cuda_graph.capture`).
        Capture does not run the kernels: this step's result is the warm-up's."""
        graph, logits, out = capture(lambda: step(kv, bucket), self.capture_stream, self.pool)
        self.graphs[key] = (graph, out)
        return logits

    def release(self) -> None:
        """Drop captured graphs (their memory pool goes when nothing references it)."""
        self.graphs.clear()
