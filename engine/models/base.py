"""The model contract every generative model of the engine implements (DESIGN.md §2)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from typing import Self, TypeVar

import torch

from engine.api.capabilities import Capabilities
from engine.api.errors import UnsupportedOperation
from engine.cache import CacheConfig, KVCache
from engine.models.config import ModelMetadata
from engine.sources import ModelSource

T = TypeVar("T")


def check_prefill_positions(pos: range, seq_len: int, cache_len: int) -> None:
    """Enforce the seed's prefill rule: ``len(pos) == S`` and ``pos.start == cache.seq_len``.

    Raises:
        ValueError: naming both numbers of the violated rule.
    """
    if len(pos) != seq_len:
        raise ValueError(f"prefill got {seq_len} input positions but len(pos) == {len(pos)}")
    if pos.step != 1:
        raise ValueError(f"prefill positions must be a dense range, got step {pos.step}")
    if pos.start != cache_len:
        raise ValueError(f"prefill pos.start == {pos.start} but cache.seq_len == {cache_len}")


class GenerativeModel(abc.ABC):
    """Embed tokens (and images), prefill a prompt into a KV cache, decode one token at a time.

    Shapes: ``B`` batch, ``S`` prompt length, ``H`` hidden size, ``V`` vocabulary size. Hidden
    states and logits are in the model's dtype.
    """

    @property
    @abc.abstractmethod
    def metadata(self) -> ModelMetadata: ...

    @property
    @abc.abstractmethod
    def device(self) -> torch.device: ...

    @property
    @abc.abstractmethod
    def dtype(self) -> torch.dtype: ...

    @classmethod
    @abc.abstractmethod
    def load(cls, source: ModelSource, device: torch.device | Callable[[], torch.device],
             dtype: torch.dtype | None = None, *, weights: str | None = None) -> Self:
        """Build the model from ``source`` on ``device``: a ``torch.device``, or a callable that returns
        one, called when the model needs it (``load_model`` chooses the device while the model is
        built). ``dtype``: ``None`` for the device's default (:func:`engine.device.choose_dtype`).
        ``weights``: ``None``/``auto`` keeps ``dtype``; ``int8`` / ``int4`` quantize the text decoder's
        projections and lm_head as they are built (:func:`engine.layers.linear.load_class`: ignored
        where no kernel reads them, MPS), so a load never holds the whole float decoder.

        Raises:
            ModelLoadError: a tensor is missing, mis-shaped or unreadable.
            EngineError: what the ``device`` callable raises (the device asked for is not available).
            ValueError: an unknown ``weights`` value.
        """

    @classmethod
    def map_checkpoint(cls, items: Iterable[tuple[str, T]], meta: ModelMetadata) -> dict[str, T]:
        """Checkpoint names -> this module tree's names (renames, dropped buffers, tied weights).

        Used on tensors by ``load`` and on shapes by :func:`engine.validate.check_checkpoint`, so both
        see the same names. Default: the names as they are.
        """
        return dict(items)

    @abc.abstractmethod
    def create_kv_cache(self, config: CacheConfig) -> KVCache: ...

    def capabilities(self) -> Capabilities:
        """What this model can do, derived from its own methods and metadata (never a hard-coded copy)."""
        meta = self.metadata
        all_logits = self.supports_decode_all_logits()
        return Capabilities(vision=meta.takes_images, video=self.supports_video(),
                            embeddings=self.supports_hidden_states(), all_logits=all_logits,
                            speculative=all_logits, max_context=meta.max_context,
                            image_tokens_per_tile=meta.image_seq_len)

    def supports_video(self) -> bool:
        return False

    def warmup(self, cache: KVCache) -> None:
        """Do a first answer's one-time work (kernel loading, compilation, graph captures) on the empty
        ``cache``, leaving it empty. Default: nothing to do."""

    @abc.abstractmethod
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, S] int64`` -> embeddings ``[B, S, H]``."""

    @abc.abstractmethod
    def prefill(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """Run ``input [B, S, H]`` at positions ``pos`` into ``cache``; logits of the last position ``[B, V]``.

        Raises:
            ValueError: ``len(pos) != S`` or ``pos.start != cache.seq_len``.
        """

    @abc.abstractmethod
    def decode(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run ``input [B, 1, H]`` at position ``cache.seq_len``; logits ``[B, V]``."""

    # Provided methods, with defaults.
    def embed_multimodal(self, tokens: torch.Tensor, images: Sequence[torch.Tensor], on_tiles=None) -> torch.Tensor:
        """Text-only default: reject images, else :meth:`embed`. ``on_tiles(done, total)``: progress
        and cancellation through the vision tower (vision models; unused here)."""
        if len(images):
            raise UnsupportedOperation(f"{type(self).__name__} takes no images (got {len(images)})")
        return self.embed(tokens)

    def supports_decode_all_logits(self) -> bool:
        return False

    def decode_all_logits(self, input: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """``input [1, n, H]`` at the cache tail -> logits ``[1, n, V]`` (speculative verification)."""
        raise UnsupportedOperation(f"{type(self).__name__} does not implement decode_all_logits")

    def supports_hidden_states(self) -> bool:
        return False

    def prefill_hidden(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """Final-norm hidden states ``[1, S, H]`` (embeddings path)."""
        raise UnsupportedOperation(f"{type(self).__name__} does not implement prefill_hidden")

    def prefill_all_logits(self, input: torch.Tensor, cache: KVCache, pos: range) -> torch.Tensor:
        """Logits for every prompt position ``[1, S, V]`` (perplexity); callers chunk."""
        raise UnsupportedOperation(f"{type(self).__name__} does not implement prefill_all_logits")
