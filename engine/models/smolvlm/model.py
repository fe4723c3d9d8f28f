"""SmolVLM / Idefics3: SigLIP vision tower + pixel-shuffle connector + Llama decoder.

Implements the :class:`~engine.models.base.GenerativeModel` contract. Image features are spliced
into the ``<image>`` token positions (TF4 ``Idefics3Model.inputs_merger`` L581-607); the vision
tower runs once, at prefill.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Self

import torch
from torch import nn

from engine.device import choose_vision_dtype, choose_vision_int8, single_thread
from engine.models.base import GenerativeModel
from engine.models.llama.decoder import LlamaDecoder
from engine.models.llama.lm import LlamaLM
from engine.models.smolvlm.config import SmolVlmMetadata
from engine.models.smolvlm.connector import Connector
from engine.models.smolvlm.vision import VisionTransformer
from engine.models.smolvlm.vision_graphs import GraphCaptureError, VisionGraphs
from engine.sources import ModelSource

# Tiles per vision-tower call: bounds the [tiles, heads, 1024, 1024] attention scores on the CPU.
# On a GPU 4 tiles (4096 tokens per matmul) already fill an H200 and keep activations (the
# [tiles, 1024, 3072] MLP intermediate) small next to the weights: peak memory is a target.
VISION_TILE_CHUNK = 4
VISION_TILE_CHUNK_GPU = 4
# The chunk sizes captured as CUDA graphs. A photo is rows x cols + 1 tiles (13 and 17 at the usual
# sizes), so its last chunk of 4 is mostly 1 tile; a chunk of 2 or 3 runs the 4-tile graph. On the
# H200 that took 30-80 ms off every load (two captures fewer) and adds 0.4-1.2 ms to a photo of
# 2, 3, 7 or 10 tiles (a tile is ~0.6 ms of the tower; docs/BENCHMARKS.md, session 32).
VISION_GRAPH_SIZES_GPU = (1, VISION_TILE_CHUNK_GPU)
# With a progress/cancel callback on the CPU, one tile per call: the callback runs inside each
# encoder layer (after attention, between MLP chunks), and that work grows with the tiles per call.
VISION_TILE_CHUNK_CANCELLABLE = 1
#: Set to 0 to run the vision tower as modules on CUDA too (:attr:`SmolVlmModel.vision_graphs`).
VISION_GRAPHS_ENV = "SMOLCHAT_VISION_GRAPHS"
#: ``on_tiles(done, total)``: called before, during (between layers) and after the tiles; may raise to stop.
TileCallback = Callable[[int, int], None]


class Idefics3Inner(nn.Module):
    """``model.*`` of the checkpoint: ``vision_model``, ``connector``, ``text_model``."""

    def __init__(self, meta: SmolVlmMetadata):
        super().__init__()
        self.vision_model = VisionTransformer(meta.vision)
        self.connector = Connector(meta.vision.hidden_size, meta.text.hidden_size, meta.scale_factor)
        self.text_model = LlamaDecoder(meta.text)


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


class SmolVlmModel(LlamaLM, GenerativeModel, nn.Module):
    """SmolVLM-256M/500M/2.2B-Instruct and SmolVLM2 (``model_type`` idefics3 / smolvlm).

    Prefill and decode come from :class:`LlamaLM` over ``model.text_model``; this class adds the
    vision tower, the connector and the splicing of image features into the prompt.
    """

    def __init__(self, meta: SmolVlmMetadata):
        nn.Module.__init__(self)
        self._meta = meta
        self.model = Idefics3Inner(meta)
        self.lm_head = nn.Linear(meta.text.hidden_size, meta.text.vocab_size, bias=False)

    @property
    def decoder(self) -> LlamaDecoder:
        return self.model.text_model

    # -- contract: metadata, loading ------------------------------------------------------------
    @property
    def metadata(self) -> SmolVlmMetadata:
        return self._meta

    @classmethod
    def map_checkpoint(cls, items, meta):
        """:func:`sanitize`, plus ``lm_head.weight`` from the embeddings when they are tied."""
        state = sanitize(items)
        if "lm_head.weight" not in state and meta.tie_word_embeddings:
            tied = state.get("model.text_model.embed_tokens.weight")
            if tied is not None:
                state["lm_head.weight"] = tied
        return state

    @classmethod
    def load(cls, source: ModelSource, device: torch.device | Callable[[], torch.device],
             dtype: torch.dtype | None = None, *, weights: str | None = None) -> Self:
        """Build on the ``meta`` device, then assign the checkpoint's tensors (strict names and shapes);
        the text model as :meth:`LlamaLM._build_text` makes it (``weights`` ``int8`` / ``int4``: its
        projections quantized layer by layer), the vision tower in its own dtype.

        Raises:
            ModelLoadError: a tensor is missing (names listed, up to 10), has the wrong shape (name and
                both shapes), or the checkpoint holds tensors this model has no place for
                (:func:`engine.validate.check_state`).
            ValueError: an unknown ``weights`` value.
            LoadCancelled: the load was stopped (:func:`engine.cancellation.load_cancel_point`).
        """
        from engine.cancellation import load_cancel_point

        model, device, dtype = cls._assign_checkpoint(source, device, dtype, "model.text_model.embed_tokens.weight")
        load_cancel_point()
        vision_dtype = choose_vision_dtype(device, dtype)  # bf16 on AMX CPUs; see its docstring
        vision = (model.model.vision_model, model.model.connector)
        if device.type == "cuda":
            # Each memory-mapped tensor goes to the GPU as it is, and the fusing runs there: on the
            # host it was one more single-threaded pass over the weights.
            for part in vision:
                part.to(device)
        with single_thread():
            # Straight from the checkpoint's dtype to the tower's own (no float32 round trip for a
            # bf16 vision tower: that cost ~0.2-0.7 s of the CPU load).
            model.model.vision_model.fuse(vision_dtype)
            for part in vision:
                part.to(vision_dtype)
        if choose_vision_int8(device, dtype):
            # The encoder's linears as int8 GEMMs on AVX2 CPUs (~2.1x their float32 speed), in the
            # native library that load_model starts finding or building before the weights load.
            # Before the text model, so that the tower's float32 copy is gone while that is built.
            load_cancel_point()
            model.model.vision_model.quantize_int8()
        model._build_text(device, dtype, weights)
        model.to(device)
        return model

    # -- contract: embedding ----------------------------------------------------------------------
    @property
    def vision_dtype(self) -> torch.dtype:
        """dtype of the vision tower and connector (``engine.device.choose_vision_dtype``)."""
        return self.model.connector.modality_projection.proj.weight.dtype

    #: Run the vision tower and connector as replayed CUDA graphs (:mod:`.vision_graphs`), one per chunk
    #: size: ``None`` = on CUDA only (``SMOLCHAT_VISION_GRAPHS=0`` turns it off there).
    vision_graphs: bool | None = None
    _vision_graphs: VisionGraphs | None = None

    def _vision_steps(self) -> VisionGraphs | None:
        """The tower's fixed-shape steps where they are used (see :attr:`vision_graphs`), else ``None``."""
        use = self.vision_graphs
        if use is None:
            use = self.device.type == "cuda" and os.environ.get(VISION_GRAPHS_ENV, "1") not in ("0", "false", "no")
        if not use:
            return None
        if self._vision_graphs is None:
            size = self._meta.vision.image_size
            # The decoder's capture stream where there is one: cuBLAS keeps a workspace per stream.
            static = self._static_decoder() if self.device.type == "cuda" else None
            self._vision_graphs = VisionGraphs(
                lambda x: self.model.connector(self.model.vision_model(x)), (3, size, size), self.device,
                self.vision_dtype, VISION_TILE_CHUNK_GPU, stream=getattr(static, "capture_stream", None),
                sizes=VISION_GRAPH_SIZES_GPU)
        return self._vision_graphs

    @torch.inference_mode()
    def encode_images(self, pixel_values: torch.Tensor, on_tiles: TileCallback | None = None) -> torch.Tensor:
        """Tiles ``[N, 3, image_size, image_size]`` -> image-token features ``[N, image_seq_len, H]``.

        ``on_tiles(done, total)`` is called before the first chunk of tiles and after each chunk (as
        modules, also several times inside each vision layer); an exception it raises (a cancel) stops
        the tower there. With the vision graphs (:attr:`vision_graphs`) a chunk of 4 tiles is one
        replay, and a cancel waits for at most two of them.
        """
        pixel_values = pixel_values.to(device=self.device, dtype=self.vision_dtype)
        total, done = int(pixel_values.shape[0]), 0
        if on_tiles is not None:
            on_tiles(0, total)
        steps = self._vision_steps()
        if steps is not None and steps.supports(pixel_values):
            out = torch.empty(total, self._meta.image_seq_len, self._meta.text.hidden_size,
                              device=self.device, dtype=self.dtype)
            try:
                return steps.run(pixel_values, out, None if on_tiles is None else (lambda n: on_tiles(n, total)))
            except GraphCaptureError as exc:
                self._drop_vision_graphs(exc)
        chunk_size = VISION_TILE_CHUNK if self.device.type == "cpu" else VISION_TILE_CHUNK_GPU
        if on_tiles is not None and self.device.type == "cpu":
            chunk_size = VISION_TILE_CHUNK_CANCELLABLE
        between = None if on_tiles is None else (lambda: on_tiles(done, total))
        feats = []
        for chunk in pixel_values.split(chunk_size):
            feats.append(self.model.connector(self.model.vision_model(chunk, between)))
            done += int(chunk.shape[0])
            if on_tiles is not None:
                on_tiles(done, total)
        return torch.cat(feats).to(self.dtype)

    def supports_video(self) -> bool:
        """SmolVLM2 (``model_type`` smolvlm) was trained on video frames; Idefics3 checkpoints were not."""
        return self._meta.model_type == "smolvlm"

    @torch.inference_mode()
    def warmup(self, cache, prompt_tokens: int = 1100) -> None:
        """:meth:`LlamaLM.warmup`, after capturing the vision tower's graphs (:data:`VISION_GRAPH_SIZES_GPU`; each
        capture first runs the tower on its blank input: :attr:`vision_graphs`) or, without graphs,
        running the tower once on blank tiles (a full chunk and a single tile)."""
        steps = self._vision_steps()
        if steps is not None:
            try:
                steps.capture_all()
            except GraphCaptureError as exc:
                self._drop_vision_graphs(exc)
        if self._vision_steps() is None:
            size = self._meta.vision.image_size
            tiles = torch.zeros(VISION_TILE_CHUNK_GPU + 1, 3, size, size, device=self.device, dtype=self.vision_dtype)
            self.encode_images(tiles)
        LlamaLM.warmup(self, cache, prompt_tokens)

    def _drop_vision_graphs(self, exc: GraphCaptureError) -> None:
        """Run the tower as modules from now on (a capture failed: the answer goes on without it)."""
        warnings.warn(f"{exc}; running the vision tower without CUDA graphs", RuntimeWarning, stacklevel=3)
        self.vision_graphs = False
        self._vision_graphs = None

    @torch.inference_mode()
    def embed_multimodal(self, tokens: torch.Tensor, images: Sequence[torch.Tensor],
                         on_tiles: TileCallback | None = None) -> torch.Tensor:
        """``tokens [B, S]`` and tiles ``[n, 3, M, M]`` (``n >= 1``; e.g. one tensor per tile, or all
        tiles of an image or all frames of a video), one tile per image-token span in prompt order
        (global tile last per image) -> ``[B, S, H]`` with image features in the ``<image>`` positions.
        ``on_tiles``: see :meth:`encode_images` (progress and cancellation).

        Tiles whose values are all exactly 0.0 are padding and are dropped, as transformers'
        ``get_image_features`` does (never a real tile: a normalized pixel is never exactly 0.0);
        for SmolVLM2 one tile is kept when all are padding (``modeling_smolvlm.py``). SmolVLM2 also
        requires the ``<image>`` count to be a multiple of ``image_seq_len`` (its merge works in
        whole blocks).

        Raises:
            ValueError: the number of ``<image>`` tokens differs from tiles x image_seq_len, or (SmolVLM2)
                is not a multiple of image_seq_len (both numbers named).
        """
        embeds = self.embed(tokens)
        # The image positions are found on the host, where the prompt's ids come from: on a GPU the
        # compare, count and boolean-mask scatter were three kernels' first launches (~20 ms each in
        # a load) and a wait for the device.
        mask = tokens.cpu() == self._meta.image_token_id
        num_slots = int(mask.sum())
        seq = self._meta.image_seq_len
        images = self._drop_padding_tiles(images)
        num_tiles = sum(int(t.shape[0]) for t in images)
        if self._meta.model_type == "smolvlm" and num_slots % seq:
            raise ValueError(f"image tokens are not whole tiles: tokens: {num_slots}, "
                             f"not a multiple of image_seq_len {seq}")
        expected = num_tiles * seq
        if num_slots != expected:
            raise ValueError(
                f"image features and image tokens do not match: tokens: {num_slots}, "
                f"features: {expected} ({num_tiles} tiles x {seq})"
            )
        if not images:
            return embeds
        # One image's tiles come as one tensor: no concatenated copy (peak GPU memory is a target).
        feats = self.encode_images(images[0] if len(images) == 1 else torch.cat(list(images)), on_tiles)  # [N, seq, H]
        slots = mask.flatten().nonzero().squeeze(1).to(self.device)  # row-major, as embeds[mask] orders them
        embeds.view(-1, embeds.shape[-1]).index_copy_(0, slots, feats.reshape(-1, feats.shape[-1]).to(embeds.dtype))
        return embeds

    def _drop_padding_tiles(self, images: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``images`` without all-zero tiles (transformers' padding images); SmolVLM2 keeps the first
        tile when every tile is padding. Tensors without padding pass through uncopied."""
        images = list(images)
        if not images:
            return images
        real = [t.flatten(1).ne(0).any(dim=1) for t in images]  # [n] per tensor
        if all(bool(r.all()) for r in real):
            return images
        if not any(bool(r.any()) for r in real):
            return [images[0][:1]] if self._meta.model_type == "smolvlm" else []
        return [t[r] for t, r in zip(images, real) if bool(r.any())]
