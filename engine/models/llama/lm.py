"""The causal-LM half of every model with a Llama decoder: prefill, decode and their variants.

:class:`LlamaLM` implements the contract's prefill/decode methods on top of two attributes a model
provides: ``decoder`` (a :class:`LlamaDecoder`) and ``lm_head``. SmolVLM's text model and text-only
Llama checkpoints (SmolLM2) share it, and with it the decode steps: eager, CUDA graph and fused
Triton (:mod:`engine.models.llama.static_decode`) and the CPU thread choice (:class:`DecodeThreads`).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from engine.cache import CacheConfig, CacheShape, KVCache, create_kv_cache
from engine.models.base import check_prefill_positions
from engine.models.llama.decoder import LlamaDecoder


class LlamaLM:
    """Mixin for a :class:`~engine.models.base.GenerativeModel` built around a Llama decoder.

    Subclasses set ``self.decoder`` (:class:`LlamaDecoder`), ``self.lm_head`` (``nn.Linear``) and
    ``self._meta`` (metadata with a ``text`` :class:`LlamaConfig`).
    """

    decoder: LlamaDecoder
    lm_head: nn.Linear
    #: Decode through :class:`StaticDecoder` (a CUDA graph per KV bucket): ``None`` = on CUDA only.
    static_decode: bool | None = None
    _static = None
    _threads = None  # DecodeThreads, made at the first CPU decode step
    _native = None  # NativeStep, or False when this model's layers are not ones it runs

    @classmethod
    def _assign_checkpoint(cls, source, device, dtype, embed_key: str):
        """Build ``cls`` on the ``meta`` device and assign ``source``'s tensors to it (strict names and
        shapes, :func:`engine.validate.check_state`); a tied ``lm_head`` shares ``embed_key``'s tensor.
        ``device`` may be a callable that returns it, called once the model is built, before the
        tensors are read (``load_model`` chooses the device on a thread meanwhile); ``dtype``: ``None`` for the device's default
        (:func:`engine.device.choose_dtype`). Returns ``(model, device, dtype)``, the model in eval
        mode without gradients; callers fuse, convert and move it.

        Raises:
            ModelLoadError: a tensor is missing, mis-shaped, not float, or has no place in this model.
        """
        from engine.device import choose_dtype
        from engine.validate import check_state

        meta = source.metadata()
        with torch.device("meta"):
            model = cls(meta)
        # The device before the checkpoint's tensors: one that is not available is reported before a
        # broken folder's errors, and before a GGUF file is dequantized (seconds, gigabytes).
        device = torch.device(device() if callable(device) else device)
        dtype = choose_dtype(device, dtype)
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        state = cls.map_checkpoint(source.tensors(), meta)
        check_state(expected, state, str(source.folder))
        # The memory-mapped checkpoint tensors are assigned as they are: fusing and conversion then
        # write each final tensor once, and the device never holds fused and unfused copies.
        model.load_state_dict(state, strict=True, assign=True)
        if meta.tie_word_embeddings and state["lm_head.weight"] is state[embed_key]:
            model.lm_head.weight = model.decoder.embed_tokens.weight  # one tensor, as the checkpoint has
        model.eval()
        model.requires_grad_(False)
        return model, device, dtype

    def _build_text(self, device: torch.device, dtype: torch.dtype, weights: str | None = None) -> None:
        """After :meth:`_assign_checkpoint`: fuse each decoder layer's projections in ``dtype``, convert
        the rest of the text model and the lm_head to ``dtype`` and, for ``weights`` ``int8`` /
        ``int4`` (:func:`engine.layers.linear.load_class`), quantize them, one layer at a time.

        Layer by layer, the float copies of one layer exist at once, not of the whole decoder: the
        2.2B shape's int8 load on the CPU held 8.6 GiB of float32 before quantizing to 2.6 GiB. On
        CUDA each part goes to the GPU as the checkpoint stores it and is fused and quantized there
        (one more single-threaded host pass over the weights otherwise); elsewhere it is converted on
        the host, and moved by the caller, except that a quantized layer is made on ``device``
        (int4's packed layout is the device's own).

        Raises:
            ValueError: an unknown ``weights`` value.
            LoadCancelled: the load was stopped (:func:`engine.cancellation.load_cancel_point`).
        """
        from engine.cancellation import load_cancel_point
        from engine.device import release_free_host_memory, single_thread
        from engine.layers.linear import head_class, load_class, quantize_layer

        layer_cls = load_class(weights, device)
        on_device_first = device.type == "cuda"
        decoder = self.decoder
        rest = [child for name, child in decoder.named_children() if name != "layers"] + [self.lm_head]
        head = self.lm_head.weight
        if layer_cls is not None and head is not decoder.embed_tokens.weight and dtype == torch.float32 \
                and head.dtype in (torch.bfloat16, torch.float16):
            # Quantized straight from the checkpoint's half-precision values, which float32 holds
            # exactly (the quantizers widen each chunk themselves): the same int8 / int4 weights
            # without the whole float32 head (0.4 GB for the 2.2B shape's untied one) in between.
            rest.remove(self.lm_head)
        load_cancel_point()
        for part in rest:
            if on_device_first:
                part.to(device)
            with single_thread():
                part.to(dtype)
        if layer_cls is not None:
            load_cancel_point()
            self.lm_head = head_class(layer_cls)(self.lm_head.to(device))  # a tied head gets its own copy
        for layer in decoder.layers:
            load_cancel_point()  # a front end's Stop during a long load waits for one layer at most
            if on_device_first:
                layer.to(device)
            with single_thread():
                layer.fuse(dtype)  # the fused weights are built in ``dtype`` straight from the checkpoint
                layer.to(dtype)
            if layer_cls is not None:
                quantize_layer(layer.to(device), layer_cls)
                if not on_device_first:
                    # The layer's float copies just freed, back to the system before the next layer's
                    # are made: the 2.2B's int8 CPU load peaked at 3.1-3.2 GiB so, 3.1-4.3 without.
                    release_free_host_memory()

    @property
    def device(self) -> torch.device:
        return self.decoder.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.embed_tokens.weight.dtype

    def create_kv_cache(self, config: CacheConfig) -> KVCache:
        t = self._meta.text
        shape = CacheShape(t.num_hidden_layers, t.num_key_value_heads, t.head_dim)
        return create_kv_cache(config, shape, t.max_position_embeddings, self.device, self.dtype)

    @torch.inference_mode()
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, S] int64`` -> embeddings ``[B, S, H]`` in the model's dtype."""
        return self.decoder.embed_tokens(tokens.to(self.device))

    def _static_decoder(self):
        use = self.static_decode if self.static_decode is not None else self.device.type == "cuda"
        if not use:
            return None
        if self._static is None:
            from engine.models.llama.static_decode import StaticDecoder

            self._static = StaticDecoder(self)
        return self._static

    #: A prefill of at most this many tokens after cached ones (a follow-up question) runs as fixed-shape
    #: steps of the static decoder (CUDA graph replays) when the model decodes through one.
    short_prefill_tokens: int = 64

    @torch.inference_mode()
    def prefill(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """``input [1, S, H]`` at ``pos`` (which must start at ``cache.seq_len``) -> logits of the last
        position ``[1, V]``; every position's keys and values are written to ``cache``.

        A short prefill after cached tokens (``S <= short_prefill_tokens``, e.g. a follow-up question)
        runs as ``ceil(S / 32)`` fixed-shape steps of 32 query rows
        (:meth:`StaticDecoder.prefill <engine.models.llama.static_decode.StaticDecoder.prefill>`) where
        :meth:`decode` replays CUDA graphs: an eager prefill of 20 tokens is ~700 kernel launches, ~16 ms
        of H200 host time, and 20 replayed decode steps ~11 ms.
        """
        check_prefill_positions(pos, input.shape[1], cache.seq_len)
        n = input.shape[1]
        static = self._static_decoder() if 0 < n <= self.short_prefill_tokens and cache.seq_len else None
        if static is not None and static.supports(cache, input):
            return static.prefill(input.to(device=self.device, dtype=self.dtype), cache)
        hidden = self.decoder(input, cache)
        return self.lm_head(hidden[:, -1])

    @torch.inference_mode()
    def decode(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        if input.shape[1] != 1:
            raise ValueError(f"decode takes one position per row, got {input.shape[1]}")
        static = self._static_decoder()
        if static is not None and static.supports(cache, input):
            return static.decode(input.to(device=self.device, dtype=self.dtype), cache)
        if self.device.type != "cpu":
            return self.lm_head(self.decoder(input, cache)[:, -1])
        if self._threads is None:
            from engine.device import DecodeThreads

            self._threads = DecodeThreads()
        native = self._native_step(cache, input)
        n, prev = self._threads.pick(), torch.get_num_threads()
        t = time.perf_counter()
        if native is not None:
            logits = native.decode(input, cache, n)
        else:
            torch.set_num_threads(n)
            try:
                logits = self.lm_head(self.decoder(input, cache)[:, -1])
            finally:
                torch.set_num_threads(prev)
        self._threads.record(n, time.perf_counter() - t)
        return logits

    def supports_token_decode(self, cache: KVCache) -> bool:
        """Whether :meth:`decode_token` runs for ``cache``: batch-1 decode through the static decoder
        (CUDA graphs; by default on CUDA only)."""
        static = self._static_decoder()
        return static is not None and static.supports(cache, torch.empty(1, 1))

    @torch.inference_mode()
    def decode_token(self, token: torch.Tensor | None, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decode step of token id ``token [1] int64`` on the device, with the embedding and the
        argmax in the step's CUDA graph (``None``: the previous ``decode_token``'s argmax, still on
        the device). Returns ``(logits [1, V], argmax [1] int64, reported [1] int64)``, the graph's
        buffers, overwritten by the next step; ``reported`` is the argmax or ``INVALID_TOKEN`` for
        NaN/inf logits. Only where :meth:`supports_token_decode`
        (:meth:`StaticDecoder.decode_token <engine.models.llama.static_decode.StaticDecoder.decode_token>`).

        Raises:
            ValueError: ``token`` is ``None`` and the last step was not a ``decode_token`` on ``cache``;
                or the model does not decode through the static decoder.
        """
        static = self._static_decoder()
        if static is None:
            raise ValueError("decode_token needs the static decoder (CUDA graphs)")
        return static.decode_token(token, cache)

    def token_report_host(self) -> torch.Tensor | None:
        """Pinned host memory ``[2] int64`` where each :meth:`decode_token` step also stores its
        ``reported`` value, at index ``position % 2`` (``position``: the cache's ``seq_len`` before
        the call), or ``None`` where it does not (copy ``reported`` then). See
        :meth:`StaticDecoder.token_report_host <engine.models.llama.static_decode.StaticDecoder.token_report_host>`."""
        static = self._static
        return None if static is None else static.token_report_host()

    def _native_step(self, cache: KVCache, input: torch.Tensor):
        """The fused C decode step (:mod:`engine.native`) when its library is ready and it runs this
        model, cache and input; else ``None`` (the eager step). Never waits for a build."""
        if self._native is False:
            return None
        from engine.native import build

        lib = build.library()
        if lib is None:
            return None
        if self._native is None or self._native.lib is not lib:
            from engine.native.step import NativeStep, Unsupported

            try:
                self._native = NativeStep(self, lib)
            except Unsupported as exc:
                import logging

                logging.getLogger(__name__).info("native CPU decode step not used: %s", exc)
                self._native = False
                return None
        return self._native if self._native.supports(cache, input) else None

    def native_decode_ready(self, cache: KVCache) -> bool:
        """Whether batch-1 ``decode`` into ``cache`` runs the native CPU step right now."""
        if self.device.type != "cpu":
            return False
        probe = torch.zeros(1, 1, self.decoder.config.hidden_size, dtype=self.dtype)
        return self._native_step(cache, probe) is not None

    def cpu_decode_step(self) -> str:
        """Which batch-1 decode step runs on the CPU now: ``native-avx512`` (``-avx2``, ``-generic``)
        or ``eager`` (off the CPU, ``SMOLCHAT_NATIVE=0``, no library yet or at all, or a layer kind
        the native step does not run)."""
        if self.device.type != "cpu" or self.dtype != torch.float32:
            return "eager"
        from engine.native import build

        probe = torch.zeros(1, 1, self.decoder.config.hidden_size)
        cache = self.create_kv_cache(CacheConfig(kind="paged", max_tokens=16, num_blocks=1))
        if self._native_step(cache, probe) is None:
            return "eager"
        return build.ISA_NAMES.get(self._native.lib.smol_isa(), "native")

    @torch.inference_mode()
    def warmup(self, cache: KVCache, prompt_tokens: int = 1100) -> None:
        """Do the one-time work of a first answer now, on ``cache`` (left empty afterwards).

        On CUDA a first answer paid for lazily loaded kernels (cuBLAS, SDPA with and without a mask,
        at long and short prompt shapes), the fused Triton decode kernels' compilation (or their load
        from Triton's disk cache) and one CUDA-graph capture per KV bucket, and again whenever the paged
        arena grew. This prefills ``prompt_tokens`` dummy tokens and a second long chunk after them
        (growing the paged arena to what a photo question needs, no more: peak memory is a target),
        decodes once in that length's bucket (capturing its graph on the arena the conversation will use),
        prefills a short follow-up there (the short-prefill step's graph) and a follow-up chunk just
        longer than :attr:`short_prefill_tokens`,
        then truncates the cache to 0. Tokens are id 0; nothing is kept but kernels and graphs.
        """
        if cache.seq_len:
            raise ValueError(f"warmup needs an empty cache, got {cache.seq_len} tokens")
        total = min(prompt_tokens + 256, cache.capacity - 32)
        if total < 64:
            return
        ids = torch.zeros(1, total, dtype=torch.long, device=self.device)
        embeds = self.embed(ids)
        first = total - 256 if total > 512 else total // 2
        from engine.cancellation import load_cancel_point  # (a no-op outside a load: see its docstring)

        try:
            self.prefill(embeds[:, :first], cache, range(0, first))  # no past: causal fast path
            self.prefill(embeds[:, first:], cache, range(first, total))  # with past: masked path
            load_cancel_point()  # the decode compiles the fused Triton kernels: seconds with a cold cache
            # One decode in the bucket a photo question reaches: compiles the fused kernels and captures
            # that bucket's graph. Smaller buckets are captured when first used (tens of ms each): every
            # captured graph keeps its own buffers, and peak memory is a target.
            if self.supports_token_decode(cache):  # what the token loop replays (engine.generate)
                self.decode_token(ids[0, :1], cache)
            else:
                self.decode(self.embed(ids[:, :1]), cache)
            load_cancel_point()
            # A follow-up question in that bucket: the short-prefill step's graph.
            self.prefill(embeds[:, :8], cache, range(cache.seq_len, cache.seq_len + 8))
            cache.truncate(min(cache.seq_len, 64))
            # A follow-up longer than the static step takes (shorter ones replay its graphs).
            n = self.short_prefill_tokens + 8
            self.prefill(embeds[:, :n], cache, range(cache.seq_len, cache.seq_len + n))
        finally:
            cache.truncate(0)

    def supports_decode_all_logits(self) -> bool:
        return True

    @torch.inference_mode()
    def decode_all_logits(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """``input [1, n, H]`` at positions ``[cache.seq_len, +n)`` -> logits ``[1, n, V]``.

        A prefill that keeps every position's logits: the ``n`` positions are committed to ``cache``
        (roll rejected ones back with ``cache.truncate``).
        """
        if input.shape[0] != 1 or input.shape[1] < 1:
            raise ValueError(f"decode_all_logits takes [1, n>=1, H], got {tuple(input.shape)}")
        return self.lm_head(self.decoder(input, cache))

    def supports_hidden_states(self) -> bool:
        return True

    @torch.inference_mode()
    def prefill_hidden(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """Final-norm hidden states ``[1, S, H]`` of ``input [1, S, H]`` at ``pos`` (prefill rules)."""
        check_prefill_positions(pos, input.shape[1], cache.seq_len)
        return self.decoder(input, cache)

    @torch.inference_mode()
    def prefill_all_logits(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """Logits ``[1, S, V]`` of every position of ``input [1, S, H]`` at ``pos`` (prefill rules)."""
        check_prefill_positions(pos, input.shape[1], cache.seq_len)
        return self.lm_head(self.decoder(input, cache))
