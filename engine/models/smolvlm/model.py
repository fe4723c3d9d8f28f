"""SmolVLM / Idefics3: SigLIP vision tower + pixel-shuffle connector + Llama decoder.

Implements the :class:`~engine.models.base.GenerativeModel` contract. Image features are spliced
into the ``<image>`` token positions (TF4 ``Idefics3Model.inputs_merger`` L581-607); the vision
tower runs once, at prefill.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import Self

import torch
from torch import nn

from engine.device import choose_dtype, choose_vision_dtype, single_thread
from engine.errors import ModelLoadError
from engine.kv_cache import CacheConfig, CacheShape, KVCache, create_kv_cache
from engine.metadata import ModelMetadata
from engine.models.base import GenerativeModel, check_prefill_positions
from engine.models.smolvlm.connector import Connector
from engine.models.smolvlm.text import TextModel
from engine.models.smolvlm.vision import VisionTransformer
from engine.sources import ModelSource

# Tiles per vision-tower call: bounds the [tiles, heads, 1024, 1024] attention scores on the CPU.
# On a GPU 4 tiles (4096 tokens per matmul) already fill an H200 and keep activations (the
# [tiles, 1024, 3072] MLP intermediate) small next to the weights: peak memory is a target.
VISION_TILE_CHUNK = 4
VISION_TILE_CHUNK_GPU = 4


class Idefics3Inner(nn.Module):
    """``model.*`` of the checkpoint: ``vision_model``, ``connector``, ``text_model``."""

    def __init__(self, meta: ModelMetadata):
        super().__init__()
        self.vision_model = VisionTransformer(meta.vision)
        self.connector = Connector(meta.vision.hidden_size, meta.text.hidden_size, meta.scale_factor)
        self.text_model = TextModel(meta.text)


def sanitize(names_and_tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Map checkpoint tensor names onto this module tree. Every exception to a 1:1 mapping is here:

    - ``model.text_model.model.*`` (a spelling seen in some exports) -> ``model.text_model.*``;
    - rotary ``inv_freq`` and vision ``position_ids`` buffers are dropped (recomputed).
    """
    out = {}
    for name, tensor in names_and_tensors:
        if name.endswith(("rotary_emb.inv_freq", "embeddings.position_ids")):
            continue
        name = re.sub(r"^model\.text_model\.model\.", "model.text_model.", name)
        out[name] = tensor
    return out


class SmolVlmModel(GenerativeModel, nn.Module):
    """SmolVLM-256M/500M/2.2B-Instruct and SmolVLM2 (``model_type`` idefics3 / smolvlm)."""

    #: Decode through :class:`StaticDecoder` (a CUDA graph per KV bucket): ``None`` = on CUDA only.
    static_decode: bool | None = None

    def __init__(self, meta: ModelMetadata):
        nn.Module.__init__(self)
        self._meta = meta
        self._static = None
        self._threads = None  # DecodeThreads, made at the first CPU decode step
        self.model = Idefics3Inner(meta)
        self.lm_head = nn.Linear(meta.text.hidden_size, meta.text.vocab_size, bias=False)

    # -- contract: metadata, loading ------------------------------------------------------------
    @property
    def metadata(self) -> ModelMetadata:
        return self._meta

    @property
    def device(self) -> torch.device:
        return self.model.text_model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.text_model.embed_tokens.weight.dtype

    @classmethod
    def load(cls, source: ModelSource, device: torch.device, dtype: torch.dtype | None = None) -> Self:
        """Build on the ``meta`` device, then assign the checkpoint's tensors (strict names and shapes).

        Raises:
            ModelLoadError: a tensor is missing (all missing names listed, up to 10), has the wrong
                shape (name and both shapes), or the checkpoint holds tensors this model has no place for.
        """
        meta = source.metadata()
        device = torch.device(device)
        dtype = dtype or choose_dtype(device)
        with torch.device("meta"):
            model = cls(meta)
        expected = {k: v.shape for k, v in model.state_dict().items()}
        state = sanitize(source.tensors())
        if "lm_head.weight" not in state and meta.tie_word_embeddings:
            tied = state.get("model.text_model.embed_tokens.weight")
            if tied is not None:
                state["lm_head.weight"] = tied
        missing = sorted(set(expected) - set(state))
        if missing:
            shown = ", ".join(missing[:10]) + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else "")
            raise ModelLoadError(f"{source.folder}: {len(missing)} tensor(s) missing from the checkpoint: {shown}")
        unexpected = sorted(set(state) - set(expected))
        if unexpected:
            shown = ", ".join(unexpected[:10])
            raise ModelLoadError(f"{source.folder}: checkpoint has {len(unexpected)} unknown tensor(s): {shown}")
        for name, shape in expected.items():
            if tuple(state[name].shape) != tuple(shape):
                raise ModelLoadError(
                    f"{source.folder}: tensor {name} has shape {tuple(state[name].shape)}, expected {tuple(shape)}"
                )
        for name, tensor in state.items():
            if not tensor.is_floating_point():
                raise ModelLoadError(f"{source.folder}: tensor {name} has non-float dtype {tensor.dtype}")
        # Assign the memory-mapped checkpoint tensors as they are, build the fused q/k/v and gate/up
        # weights from them directly in ``dtype`` (one conversion pass), convert the rest, and move
        # each final tensor to the device once: the device never holds both fused and unfused copies.
        model.load_state_dict(state, strict=True, assign=True)
        if meta.tie_word_embeddings and state["lm_head.weight"] is state["model.text_model.embed_tokens.weight"]:
            model.lm_head.weight = model.model.text_model.embed_tokens.weight
        model.eval()
        model.requires_grad_(False)
        vision_dtype = choose_vision_dtype(device, dtype)  # bf16 on AMX CPUs; see its docstring
        with single_thread():
            # Each part straight from the checkpoint's dtype to its own (no float32 round trip for a
            # bf16 vision tower: that cost ~0.2-0.7 s of the CPU load).
            model.model.text_model.fuse(dtype)
            model.model.vision_model.fuse(vision_dtype)
            model.model.text_model.to(dtype)
            model.lm_head.to(dtype)
            model.model.vision_model.to(vision_dtype)
            model.model.connector.to(vision_dtype)
        model.to(device)
        return model

    def create_kv_cache(self, config: CacheConfig) -> KVCache:
        t = self._meta.text
        shape = CacheShape(t.num_hidden_layers, t.num_key_value_heads, t.head_dim)
        return create_kv_cache(config, shape, t.max_position_embeddings, self.device, self.dtype)

    # -- contract: embedding ----------------------------------------------------------------------
    @torch.inference_mode()
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.text_model.embed_tokens(tokens.to(self.device))

    @property
    def vision_dtype(self) -> torch.dtype:
        """dtype of the vision tower and connector (``engine.device.choose_vision_dtype``)."""
        return self.model.connector.modality_projection.proj.weight.dtype

    @torch.inference_mode()
    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Tiles ``[N, 3, image_size, image_size]`` -> image-token features ``[N, image_seq_len, H]``."""
        pixel_values = pixel_values.to(device=self.device, dtype=self.vision_dtype)
        chunk_size = VISION_TILE_CHUNK if self.device.type == "cpu" else VISION_TILE_CHUNK_GPU
        feats = []
        for chunk in pixel_values.split(chunk_size):
            feats.append(self.model.connector(self.model.vision_model(chunk)))
        return torch.cat(feats).to(self.dtype)

    @torch.inference_mode()
    def embed_multimodal(self, tokens: torch.Tensor, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """``tokens [B, S]`` and tiles ``[n, 3, M, M]`` (``n >= 1``; e.g. one tensor per tile, or all
        tiles of an image), one tile per image-token span in prompt order (global tile last per
        image) -> ``[B, S, H]`` with image features in the ``<image>`` positions.

        Raises:
            ValueError: the number of ``<image>`` tokens differs from tiles x image_seq_len (both named).
        """
        embeds = self.embed(tokens)
        mask = tokens.to(self.device) == self._meta.image_token_id
        num_slots = int(mask.sum())
        num_tiles = sum(int(t.shape[0]) for t in images)
        expected = num_tiles * self._meta.image_seq_len
        if num_slots != expected:
            raise ValueError(
                f"image features and image tokens do not match: tokens: {num_slots}, "
                f"features: {expected} ({num_tiles} tiles x {self._meta.image_seq_len})"
            )
        if not images:
            return embeds
        # One image's tiles come as one tensor: no concatenated copy (peak GPU memory is a target).
        feats = self.encode_images(images[0] if len(images) == 1 else torch.cat(list(images)))  # [N, seq, H]
        embeds[mask] = feats.reshape(-1, feats.shape[-1]).to(embeds.dtype)
        return embeds

    def _static_decoder(self):
        use = self.static_decode if self.static_decode is not None else self.device.type == "cuda"
        if not use:
            return None
        if self._static is None:
            from engine.models.smolvlm.static_decode import StaticDecoder

            self._static = StaticDecoder(self)
        return self._static

    # -- contract: prefill / decode ---------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        check_prefill_positions(pos, input.shape[1], cache.seq_len)
        hidden = self.model.text_model(input, cache)
        return self.lm_head(hidden[:, -1])

    @torch.inference_mode()
    def decode(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        if input.shape[1] != 1:
            raise ValueError(f"decode takes one position per row, got {input.shape[1]}")
        static = self._static_decoder()
        if static is not None and static.supports(cache, input):
            return static.decode(input.to(device=self.device, dtype=self.dtype), cache)
        if self.device.type != "cpu":
            return self.lm_head(self.model.text_model(input, cache)[:, -1])
        if self._threads is None:
            from engine.device import DecodeThreads

            self._threads = DecodeThreads()
        n, prev = self._threads.pick(), torch.get_num_threads()
        torch.set_num_threads(n)
        t = time.perf_counter()
        try:
            logits = self.lm_head(self.model.text_model(input, cache)[:, -1])
        finally:
            torch.set_num_threads(prev)
        self._threads.record(n, time.perf_counter() - t)
        return logits

    # -- contract: provided methods (speculative verification, embeddings, perplexity) ----------
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
        return self.lm_head(self.model.text_model(input, cache))

    def supports_hidden_states(self) -> bool:
        return True

    @torch.inference_mode()
    def prefill_hidden(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """Final-norm hidden states ``[1, S, H]`` of ``input [1, S, H]`` at ``pos`` (prefill rules)."""
        check_prefill_positions(pos, input.shape[1], cache.seq_len)
        return self.model.text_model(input, cache)

    @torch.inference_mode()
    def prefill_all_logits(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """Logits ``[1, S, V]`` of every position of ``input [1, S, H]`` at ``pos`` (prefill rules)."""
        check_prefill_positions(pos, input.shape[1], cache.seq_len)
        return self.lm_head(self.model.text_model(input, cache))
