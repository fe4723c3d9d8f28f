"""Text and image embeddings from a model's final-norm hidden states (``prefill_hidden``); images
need a vision model (SmolVLM), text works with any (SmolLM2 too).

The input is rendered as one user turn of the chat template, without the generation prompt
(``<|im_start|>User:<images><text><end_of_utterance>\\n``), so images are expanded and tokenized
exactly as in chat. The vector is pooled from the hidden states and L2-normalised (float32).

Pooling (``pooling=``):

- ``"mean"`` (default): the mean over the *content* positions, the user's text tokens and the image
  tokens; template tokens (``<|im_start|>``, ``User:``, ``<end_of_utterance>``, image row/column
  markers) are left out, so two inputs are not pulled together by the text they share with every
  input. SmolVLM is a chat model, not an embedding model: its last position is trained to predict
  the next token (after ``<end_of_utterance>``, the newline of every turn), which says little about
  the input. Mean pooling is the robust choice for decoder models not tuned for embeddings
  (SGPT, Muennighoff 2022, arXiv 2202.08904; Jiang et al. 2023, PromptEOL, arXiv 2307.16645).
- ``"last"``: the hidden state of the last content token, which has attended to the whole input (the
  choice of embedding models fine-tuned that way, e.g. E5-Mistral); offered for such checkpoints.

Content positions: the user text's tokens are found by tokenizing the same turn with an empty text
and removing the common prefix and suffix; image positions are those holding the processor's image
token (SmolVLM: ``<image>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch

from engine.api.events import resolve_detail
from engine.cache import CacheConfig
from engine.models.base import GenerativeModel
from engine.tokenizer import Tokenizer

Pooling = Literal["mean", "last"]
POOLINGS = ("mean", "last")


def content_mask(ids: Sequence[int], empty_ids: Sequence[int], image_token_id: int | None) -> list[bool]:
    """True where ``ids`` holds user content: ``<image>`` tokens, and the span where ``ids`` differs from
    ``empty_ids`` (the same turn tokenized with an empty text)."""
    n, m = len(ids), len(empty_ids)
    pre = 0
    while pre < min(n, m) and ids[pre] == empty_ids[pre]:
        pre += 1
    suf = 0
    while suf < min(n, m) - pre and ids[n - 1 - suf] == empty_ids[m - 1 - suf]:
        suf += 1
    return [pre <= i < n - suf or t == image_token_id for i, t in enumerate(ids)]


class Embedder:
    """Pooled, L2-normalised embeddings of text and images.

    ``Embedder.load(path)`` builds model, tokenizer and processor from a checkpoint folder (or Hub id);
    ``embed(text, images=...)`` returns a ``[H]`` float32 tensor of norm 1.

    Raises:
        UnsupportedOperation: the model has no ``prefill_hidden``; images for a text-only model
            (``processor`` is ``None``).
    """

    def __init__(self, model: GenerativeModel, tokenizer: Tokenizer, processor,
                 pooling: Pooling = "mean", chunk: int = 512):
        if not model.supports_hidden_states():
            from engine.api.errors import UnsupportedOperation

            raise UnsupportedOperation(f"{type(model).__name__} does not provide hidden states for embeddings")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.model, self.tokenizer, self.processor = model, tokenizer, processor
        self.pooling, self.chunk = pooling, chunk

    @classmethod
    def load(cls, path_or_repo_id: str | Path, device: str | None = None, dtype: str | None = None,
             **kwargs) -> Embedder:
        from engine.registry import load_components

        return cls(*load_components(path_or_repo_id, device, dtype), **kwargs)

    @property
    def dim(self) -> int:
        return self.model.metadata.text.hidden_size

    def encode(self, text: str, images: Sequence = (), image_detail: str = "full"
               ) -> tuple[list[int], list[bool], list]:
        """Token ids, content mask and processed images of one input.

        Raises:
            PromptTooLongError: the input does not fit into the model's context.
            ValueError: nothing to embed (an empty text and no image).
            UnsupportedOperation: images given to a text-only model.
        """
        if images and self.processor is None:
            from engine.api.errors import UnsupportedOperation

            raise UnsupportedOperation(f"{self.model.metadata.name or type(self.model).__name__} is a text-only "
                                       f"model: it takes no images (got {len(images)})")
        detail = resolve_detail(image_detail, self.model.device.type)
        processed = [self.processor(img, detail=detail) for img in images]

        def turn(t: str) -> list[dict]:
            return [{"role": "user", "content": [{"type": "image"}] * len(processed) + [{"type": "text", "text": t}]}]

        ids = self.tokenizer.encode_chat(turn(text), processed, add_generation_prompt=False).input_ids
        empty = self.tokenizer.encode_chat(turn(""), processed, add_generation_prompt=False).input_ids
        image_id = self.tokenizer.token_to_id(self.processor.image_token) if processed else None
        mask = content_mask(ids, empty, image_id)
        if not any(mask):
            raise ValueError("nothing to embed: give a non-empty text or an image")
        context = self.model.capabilities().max_context
        if context and len(ids) > context:
            from engine.api.errors import PromptTooLongError

            raise PromptTooLongError(f"the input is {len(ids)} tokens long (images included), more than the "
                                     f"model's context of {context} tokens")
        return ids, mask, processed

    @torch.inference_mode()
    def hidden_states(self, ids: list[int], processed: Sequence = ()) -> torch.Tensor:
        """Final-norm hidden states ``[S, H]`` of ``ids`` (prefilled in chunks into a fresh cache)."""
        model = self.model
        # Normalized on the model's device from uint8 (a quarter of the bytes to copy).
        tiles = [img.tiles_tensor(model.device, getattr(model, "vision_dtype", None)) for img in processed]
        embeds = model.embed_multimodal(torch.tensor([ids]), tiles)
        cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=len(ids)))
        out = []
        for start in range(0, len(ids), self.chunk):
            x = embeds[:, start:start + self.chunk]
            out.append(model.prefill_hidden(x, cache, range(start, start + x.shape[1]))[0])
        return torch.cat(out)

    def embed(self, text: str = "", images: Sequence = (), pooling: Pooling | None = None,
              image_detail: str = "full") -> torch.Tensor:
        """One L2-normalised float32 vector ``[H]`` for ``text`` and ``images`` (paths, bytes or PIL images)."""
        return self.embed_encoded(*self.encode(text, images, image_detail), pooling=pooling)

    def embed_encoded(self, ids: list[int], mask: list[bool], processed: Sequence = (),
                      pooling: Pooling | None = None) -> torch.Tensor:
        """:meth:`embed` of what :meth:`encode` returned (a caller that also wants the token count
        reads the images once). Raises ValueError for an unknown ``pooling``."""
        pooling = pooling or self.pooling
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        hidden = self.hidden_states(ids, processed).float()
        keep = torch.tensor(mask, device=hidden.device)
        if pooling == "mean":
            vec = hidden[keep].mean(0)
        else:
            vec = hidden[int(keep.nonzero()[-1])]
        return torch.nn.functional.normalize(vec, dim=0).cpu()


def embed(path_or_repo_id: str | Path, text: str = "", images: Sequence = (), pooling: Pooling = "mean",
          device: str | None = None, dtype: str | None = None) -> torch.Tensor:
    """One-shot :meth:`Embedder.embed` (loads the model; keep an :class:`Embedder` for many inputs)."""
    return Embedder.load(path_or_repo_id, device, dtype, pooling=pooling).embed(text, images)
