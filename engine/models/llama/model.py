"""Text-only Llama-family chat models (``LlamaForCausalLM``: SmolLM2 and the like).

The decoder, prefill/decode and their fast paths come from :class:`LlamaLM`; this class adds the
checkpoint's names and loading. It takes no images: ``embed_multimodal`` with images raises
:class:`~engine.api.errors.UnsupportedOperation`, and its capabilities say ``vision: false``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Self

import torch
from torch import nn

from engine.api.errors import UnsupportedOperation
from engine.models.base import GenerativeModel
from engine.models.config import ModelMetadata
from engine.models.llama.decoder import LlamaDecoder
from engine.models.llama.lm import LlamaLM
from engine.sources import ModelSource


class LlamaModel(LlamaLM, GenerativeModel, nn.Module):
    """A ``LlamaForCausalLM`` checkpoint: ``model.embed_tokens``, ``model.layers.N.*``, ``model.norm``
    and ``lm_head`` (tied to the embeddings when ``tie_word_embeddings``; the checkpoint may omit it)."""

    def __init__(self, meta: ModelMetadata):
        nn.Module.__init__(self)
        self._meta = meta
        self.model = LlamaDecoder(meta.text)
        self.lm_head = nn.Linear(meta.text.hidden_size, meta.text.vocab_size, bias=False)

    @property
    def decoder(self) -> LlamaDecoder:
        return self.model

    @property
    def metadata(self) -> ModelMetadata:
        return self._meta

    @classmethod
    def map_checkpoint(cls, items: Iterable, meta: ModelMetadata) -> dict:
        """Rotary ``inv_freq`` buffers dropped (recomputed); ``lm_head.weight`` from the embeddings
        when they are tied and the checkpoint leaves it out."""
        state = {name: t for name, t in items if not name.endswith("rotary_emb.inv_freq")}
        if "lm_head.weight" not in state and meta.tie_word_embeddings:
            tied = state.get("model.embed_tokens.weight")
            if tied is not None:
                state["lm_head.weight"] = tied
        return state

    @classmethod
    def load(cls, source: ModelSource, device: torch.device | Callable[[], torch.device],
             dtype: torch.dtype | None = None, *, weights: str | None = None) -> Self:
        """Build on the ``meta`` device, then assign the checkpoint's tensors (strict names and shapes),
        fuse the q/k/v and gate/up projections in ``dtype``, quantize them for ``weights`` ``int8`` /
        ``int4`` (layer by layer, :meth:`LlamaLM._build_text`) and move to ``device``.

        Raises:
            ModelLoadError: a tensor is missing, mis-shaped, not float, or has no place in this model
                (:func:`engine.validate.check_state`).
            ValueError: an unknown ``weights`` value.
        """
        model, device, dtype = cls._assign_checkpoint(source, device, dtype, "model.embed_tokens.weight")
        model._build_text(device, dtype, weights)
        model.to(device)
        return model

    def embed_multimodal(self, tokens: torch.Tensor, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """``tokens [B, S]`` -> ``[B, S, H]`` (:meth:`embed`).

        Raises:
            UnsupportedOperation: ``images`` is not empty (a text-only model).
        """
        if len(images):
            raise UnsupportedOperation(f"{self._meta.name or 'this model'} ({self._meta.model_type}) is a "
                                       f"text-only model: it takes no images (got {len(images)})")
        return self.embed(tokens)
