"""``ChatSession``: one conversation, streamed answer by answer, reusing the KV cache between turns.

Each turn renders the whole conversation with the chat template, finds the longest prefix already
in the KV cache (one key per position: the token id, and for image tokens the id plus the content
hash of their tile), truncates the cache there and prefills only the rest, in chunks of
``prefill_chunk`` tokens. Assistant turns are replayed with the exact ids the model generated (not
a re-tokenization of their text, which need not give the same ids back), so a new turn, a
regenerated answer or an edited message prefills only what actually changed.

With the paged cache, the full blocks of every sequence the session held are also kept in the arena's
prefix cache (:mod:`engine.cache.prefix`), keyed by a hash chain of the same keys: when the prompt
switches to another conversation (an API client re-sending its own chat, the app reopening another
chat), the longest run of its blocks found there is adopted instead of prefilled, images included.

When a turn would not fit the context (the cache's capacity, at most ``max_position_embeddings``)
with room for an answer, the oldest whole exchanges are dropped (a user message with its answers;
never the system prompt, never part of an image) and the stats say so. A message that does not fit
even alone raises :class:`~engine.api.errors.PromptTooLongError` before any work is done.

Answers stream through a detokenizer that never splits a UTF-8 character and never emits stop tokens.

``cancel()`` is checked between tokens, before every decoder layer of the prefill and inside the
vision tower (within each layer of each tile), so a cancel ends the answer within a fraction of a second even before its
first token; ``progress`` (when set) receives :class:`~engine.api.backend.ProgressEvent` s from the
same points.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import os
import threading
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import torch

from engine.api.backend import ProgressEvent
from engine.api.errors import (
    MEDIA_KINDS,
    MEDIA_SHARE,
    SYSTEM_PROMPT_TOO_LONG,
    PromptTooLongError,
    UnsupportedOperation,
    describe_error,
    is_engine_error,
)
from engine.api.events import (
    DoneEvent,
    GenerationEvent,
    GenerationParams,
    GenerationStats,
    TokenEvent,
    answer_room,
    resolve_detail,
)
from engine.api.images import bytes_digest, file_digest
from engine.cache import CacheConfig, KVCache
from engine.cache.paged import PagedKVCache
from engine.cache.prefix import chain_digests
from engine.cancellation import Cancelled, layer_cancel_points, load_cancel_point
from engine.generate import token_stream
from engine.models.base import GenerativeModel
from engine.sampling import LogprobSampler, make_sampler
from engine.speculative import SpeculativeDecoder
from engine.tokenizer import StreamingDetokenizer, Tokenizer

if TYPE_CHECKING:  # the processor and its images come from the model's package (None: text-only)
    from engine.models.smolvlm.processing import ImageProcessor, ProcessedImage

ImageInput = str | Path | bytes
# Prompt tokens per prefill call: bounds attention scores and activations for long image prompts.
DEFAULT_PREFILL_CHUNK = 512  # CPU and MPS: [chunk, past + chunk] attention scores
# CUDA: SDPA's flash kernel never materializes scores, and a first chunk that starts at position 0
# takes the causal fast path. A 17-tile image prompt (1141 tokens) was 3 chunks: 96 ms on an H200.
DEFAULT_PREFILL_CHUNK_CUDA = 4096
#: Set to 0 to skip :meth:`ChatSession.warmup` at load on CUDA.
WARMUP_ENV = "SMOLCHAT_WARMUP"
#: ``0`` leaves the synthetic photo question out of the CUDA warm-up (:meth:`ChatSession.warmup`).
WARMUP_PHOTO_ENV = "SMOLCHAT_WARMUP_PHOTO"
# Tiled images kept for reuse (ChatSession._preprocess_one): about eight 17-tile photos.
PROCESSED_CACHE_BYTES = 128 * 2**20
#: On CUDA a prefill of at most this many new tokens runs without per-layer cancel points (see _prefill).
SHORT_PREFILL = 64


def check_text_parts(text_parts: Sequence[str] | None, media: int) -> None:
    """Raises ValueError unless ``text_parts`` (see :class:`Turn`) is None or ``media + 1`` long."""
    if text_parts is not None and len(text_parts) != media + 1:
        raise ValueError(f"text_parts holds {len(text_parts)} pieces of text for {media} videos and images; "
                         "it needs one more than there are media (the text before each, and after the last)")


@dataclass
class Turn:
    """One message of the conversation. ``images`` are preprocessed tiles and ``videos`` sampled
    frames (user turns only; in the prompt the videos come first, then the images, then the text);
    ``token_ids`` are the ids an assistant turn was generated as (stop token excluded), replayed
    as they are in later prompts. ``None`` (e.g. a turn written by hand) means: tokenize ``text``.
    ``prompt_ids`` (assistant turns this session generated) are the plain encoding of the conversation
    the turn answered, kept so that later prompts need not encode that prefix again to replay it.
    ``text_parts`` (``len(media) + 1`` strings: the text before each video or image, in
    :attr:`media` order, and after the last) lays a message's text out between its media, as an
    OpenAI content list does ("Image A: <image> Image B: <image> Which is brighter?"); ``None``:
    the media, then ``text``."""

    role: str
    text: str
    images: list[ProcessedImage] = field(default_factory=list)
    token_ids: list[int] | None = None
    videos: list = field(default_factory=list)  # ProcessedVideo (engine.models.smolvlm.video)
    prompt_ids: list[int] | None = field(default=None, repr=False, compare=False)
    text_parts: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_text_parts(self.text_parts, len(self.videos) + len(self.images))

    def content(self) -> list[dict]:
        """The message's content list for the chat template (``{"type": "video" | "image" | "text"}``)."""
        kinds = ["video"] * len(self.videos) + ["image"] * len(self.images)
        if self.text_parts is None:
            content = [{"type": kind} for kind in kinds]
            if self.text or not content:
                content.append({"type": "text", "text": self.text})
            return content
        content = []
        for before, kind in zip(self.text_parts, [*kinds, None]):
            if before:
                content.append({"type": "text", "text": before})
            if kind is not None:
                content.append({"type": kind})
        return content or [{"type": "text", "text": ""}]

    @property
    def media(self) -> list[ProcessedImage]:
        """Videos then images: the order their tiles take in the prompt."""
        return [*self.videos, *self.images]


class Prompt(NamedTuple):
    """A conversation's prompt as :class:`ChatSession` prefills it."""

    ids: list[int]
    #: Per position the prefix cache's key: the token id, or ``(id, tile digest)`` at an image-token
    #: position (reference §0.8: image tokens alone are not a cache key).
    keys: list
    images: list[ProcessedImage]
    #: The image-token positions, ascending: one per feature slot of ``images``, in order.
    image_positions: list[int]


def slot_keys(ids: list[int], image_id: int | None, images: Sequence[ProcessedImage]) -> tuple[list, list[int]]:
    """Cache keys of prompt ``ids`` and its image-token positions: ``images``' feature slots take the
    ``image_id`` positions in prompt order, ``num_image_tokens`` slots spread evenly over each image's
    tiles (read from the processed images, never from model metadata), and a slot's key is
    ``(image_id, digest of its tile)``; every other key is the id itself.

    A tile's slots are found as one run with C-level list operations where they lie together (every
    SmolVLM prompt), else position by position: a follow-up's prompt of ~900 tokens is keyed in
    tens of steps, not one per token.

    Raises:
        ValueError: ``ids`` hold fewer ``image_id`` tokens than the images have slots.
    """
    keys = list(ids)
    positions: list[int] = []
    if image_id is None or not images:
        return keys, positions
    p = 0
    for img in images:
        per_tile = img.num_image_tokens // img.num_tiles
        run = [image_id] * per_tile
        for digest in img.tile_digests:
            key = (image_id, digest)
            left = per_tile
            while left:
                try:
                    p = ids.index(image_id, p)
                except ValueError:
                    raise ValueError(f"the prompt has {len(positions)} image tokens but its images have "
                                     f"{sum(i.num_image_tokens for i in images)} feature slots") from None
                if ids[p:p + left] == run[:left]:
                    keys[p:p + left] = [key] * left
                    positions.extend(range(p, p + left))
                    p += left
                    break
                keys[p] = key
                positions.append(p)
                p += 1
                left -= 1
    return keys, positions


def tile_first_slots(images: Sequence[ProcessedImage]) -> list[int]:
    """The feature-slot index (over all ``images``, in prompt order) of each tile's first slot."""
    starts, slot = [], 0
    for img in images:
        per_tile = img.num_image_tokens // img.num_tiles
        for _ in img.tile_digests:
            starts.append(slot)
            slot += per_tile
    return starts


def common_prefix(a: Sequence, b: Sequence, limit: int) -> int:
    """Length of the common prefix of ``a[:limit]`` and ``b[:limit]`` (both at least ``limit``
    long), found with slice compares (C-level, 64 positions at a time) rather than a Python step
    per position."""
    if a[:limit] == b[:limit]:
        return limit
    n = 0
    while n + 64 <= limit and a[n:n + 64] == b[n:n + 64]:
        n += 64
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def _chars(turn: Turn) -> int:
    """The characters of ``turn``'s text (laid out between its media, or whole)."""
    return sum(map(len, turn.text_parts)) if turn.text_parts is not None else len(turn.text or "")


class ChatSession:
    """A multi-turn conversation with one model (DESIGN.md §4).

    ``send`` is a generator; consume it to run the answer. ``cancel()`` may be called from another
    thread and ends the running answer after the current token.
    """

    def __init__(self, model: GenerativeModel, tokenizer: Tokenizer, processor: ImageProcessor | None,
                 cache_config: CacheConfig | None = None, system_prompt: str | None = None,
                 prefill_chunk: int | None = None, name: str = ""):
        self.model = model
        self.tokenizer = tokenizer
        #: ``None`` for a text-only model: :meth:`send` and :meth:`edit` then refuse images.
        self.processor = processor
        # The id of the processor's feature-slot token (SmolVLM: ``<image>``); None: no image slots.
        self._image_id = tokenizer.token_to_id(processor.image_token) if processor is not None else None
        self.cache_config = cache_config or CacheConfig()
        self.cache: KVCache = model.create_kv_cache(self.cache_config)
        self.system_prompt = system_prompt
        if prefill_chunk is None:
            prefill_chunk = DEFAULT_PREFILL_CHUNK_CUDA if model.device.type == "cuda" else DEFAULT_PREFILL_CHUNK
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        self.prefill_chunk = prefill_chunk
        #: Launch each token's decode step before reading the token back (engine.speculative.
        #: pipelined_stream): ``None`` = on CUDA, where it hides the host's per-token work.
        self.pipelined: bool | None = None
        self.model_name = name or model.metadata.name
        self.warmup_s: float | None = None
        self.turns: list[Turn] = []
        self._cached_keys: list = []  # what the cache holds, one key per position
        # Prefix-cache digests of the first len(_digests) full blocks of _cached_keys (engine.cache.prefix).
        self._digests: list[bytes] = []
        self._processed: OrderedDict[tuple[bytes, str], ProcessedImage] = OrderedDict()
        self._plain_prompt: list[int] | None = None  # the last prompt's plain encoding (Turn.prompt_ids)
        # Where the last prompt fitted to the context by dropping turns began (its index then, its first
        # turn); None: none was.
        self._kept_turns: tuple[int, Turn] | None = None
        self._cancel = threading.Event()
        #: Called (on the generating thread) with progress through the vision tower and the prefill.
        self.progress: Callable[[ProgressEvent], None] | None = None
        self._last_progress: ProgressEvent | None = None
        self._notice = ""  # the running answer's notice, until its first progress event carries it
        self._reading: list[tuple[str, int]] = []  # (media kind, tiles) of each image this answer reads

    @classmethod
    def load(cls, path_or_repo_id: str | Path, device: str | None = None, dtype: str | None = None,
             cache_config: CacheConfig | None = None, weights: str | None = None, **kwargs) -> ChatSession:
        """Model, tokenizer and image processor (``None`` for a text-only model) from one checkpoint
        folder or Hub repository id (``weights``: see :func:`engine.registry.load_model`)."""
        from engine.registry import load_components

        session = cls(*load_components(path_or_repo_id, device, dtype, weights), cache_config,
                      name=kwargs.pop("name", None) or Path(str(path_or_repo_id)).name, **kwargs)
        if session.model.device.type == "cuda" and os.environ.get(WARMUP_ENV, "1") not in ("0", "false", "no"):
            load_cancel_point()
            session.warmup()
        return session

    def warmup(self) -> float:
        """Do a first answer's one-time work now (CUDA kernels, Triton compilation, CUDA graphs of the
        KV buckets a photo question reaches: :meth:`LlamaLM.warmup`), so the first answer is as fast
        as the tenth. :meth:`load` calls it on CUDA (``SMOLCHAT_WARMUP=0`` turns that off). Returns the
        seconds it took (also in :attr:`warmup_s`)."""
        t = time.perf_counter()
        self.model.warmup(self.cache)
        if self.processor is not None and self.model.device.type == "cuda" and \
                os.environ.get(WARMUP_PHOTO_ENV, "1") not in ("0", "false", "no"):
            load_cancel_point()
            self._warm_photo_question()
        if self.model.device.type == "cuda":
            torch.cuda.synchronize()
            # What the warm-up's dummy prompt and graph captures left cached in the allocator goes back
            # to the driver once, here (the captures no longer empty it each time: that was slow).
            torch.cuda.empty_cache()
        self.warmup_s = time.perf_counter() - t
        return self.warmup_s

    def _warm_photo_question(self) -> None:
        """Answer one question about a synthetic 600 x 400 photo (2 tokens), then forget it entirely.

        The model's warm-up runs each part on dummy shapes; a first real photo question still paid
        ~0.25 s more than later ones on the H200 (the resize kernels' first launch, the tile upload
        and lookup, the image-feature scatter, the first prefill at a photo's length). This is that
        question, at load, where the window is already usable."""
        import numpy as np
        from PIL import Image

        photo = Image.fromarray(np.random.default_rng(0).integers(0, 256, (400, 600, 3), dtype=np.uint8))
        try:
            for _ in self.send("Describe this photo.", images=[photo],
                               params=GenerationParams(max_new_tokens=2, ignore_eos=True)):
                pass
        except Exception as exc:  # noqa: BLE001 - e.g. a context too small for a photo: load anyway
            logging.getLogger(__name__).info("warm-up photo question skipped: %s", exc)
        finally:
            self.reset()
            self._processed.clear()
            if isinstance(self.cache, PagedKVCache) and self.cache.prefix is not None:
                self.cache.prefix.clear()

    @property
    def device(self) -> str:
        return self.model.device.type

    @property
    def dtype(self) -> str:
        return str(self.model.dtype).removeprefix("torch.")

    @property
    def weights(self) -> str:
        """``int8`` / ``int4`` when the weights were quantized (``weights=``), else the dtype."""
        from engine.layers.linear import weight_format

        return weight_format(self.model) or self.dtype

    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        """Forget the conversation (the cache is emptied)."""
        self.turns.clear()
        self.cache.reset()
        self._keep_keys(0)

    # -- prompt ---------------------------------------------------------------------------------
    def _messages(self, turns: Sequence[Turn] | None = None, system_prompt: str | None = None) -> list[dict]:
        """The template's messages of ``turns`` and ``system_prompt`` (default: the conversation's)."""
        if turns is None:
            turns, system_prompt = self.turns, self.system_prompt
        msgs = []
        if system_prompt:
            msgs.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
        for turn in turns:
            msgs.append({"role": turn.role, "content": turn.content()})
        return msgs

    def _prompt(self, continuing: bool = False, add_generation_prompt: bool = True, replay: bool = True) -> Prompt:
        """The conversation's prompt (generation prompt included unless ``add_generation_prompt`` is
        off; ``continuing``: instead the last turn left open, :meth:`continue_answer`): ids, cache
        keys, the images and videos in prompt order, the image-token positions. ``replay`` off: the
        answers as their text re-tokenized, not their generated ids (:meth:`_replay_answers`), a
        length to search with only."""
        images = [m for t in self.turns for m in t.media]
        messages = self._messages()
        encoded = self._encode(messages, self.turns, continuing, add_generation_prompt)
        plain = encoded.input_ids
        self._plain_prompt = list(plain)  # what the answer to this prompt keeps as its prompt_ids
        ids = self._replay_answers(plain, messages, chunks=encoded.message_chunks) if replay else list(plain)
        keys, positions = slot_keys(ids, self._image_id, images)
        return Prompt(ids, keys, images, positions)

    def _replay_answers(self, ids: list[int], messages: list[dict], turns: Sequence[Turn] | None = None,
                        chunks: dict[int, int] | None = None) -> list[int]:
        """Swap the re-tokenized text of each assistant turn in ``ids`` for the ids it was generated as
        (``turns``, the ones ``messages`` hold: default the conversation's).

        ``encode_chat`` tokenizes the plain text between special tokens chunk by chunk, so the ids up
        to the last special token of a prefix rendering are a prefix of the full rendering. An
        assistant message's text sits in the chunk that starts after the last special token of the
        prompt it answered (``...<end_of_utterance>`` + ``"\nAssistant:"``) and ends at the next
        special token; that chunk becomes the generation prompt's tail plus the generated ids. A turn
        is left as text when this layout does not hold, its ids contain ``<image>`` (no tile) or an id
        outside the vocabulary (stored ids that are damaged or another model's). The last turn, left
        open for :meth:`continue_answer`, has no special token after it: its chunk runs to the end.

        ``chunks`` (``EncodedPrompt.message_chunks`` of ``ids``) says where each message's chunk begins:
        once one answer's prefix was encoded (its generation prompt's tail known), an answer whose
        chunk begins after a special token with that tail is swapped without encoding its prefix. Each
        answer encoded the whole conversation before it, per prompt: 1.5 s of a follow-up's fit in a
        chat of 1,000 exchanges at an 8,192-token context (trial 75 N4).
        """
        turns = self.turns if turns is None else turns
        special = self.tokenizer.special_ids
        offset = len(messages) - len(turns)  # the system message, if any
        vocab = self.tokenizer.vocab_size
        swaps = []
        tail: list[int] | None = None  # the generation prompt after its last special token, once known
        for j, turn in enumerate(turns):
            if turn.role != "assistant" or turn.token_ids is None or (not turn.token_ids and turn.text):
                continue  # (no ids for a text: damaged, or written by hand; an import gave "" as []: trial 75 N2)
            if self._image_id is not None and self._image_id in turn.token_ids:
                continue
            if not all(isinstance(t, int) and 0 <= t < vocab for t in turn.token_ids):
                continue  # ids no tokenizer of this model made (damaged, or another model's): use the text
            if not self._ids_spell(turn):
                continue  # the text was changed (an export edited by hand): it is what the user reads
            start = chunks.get(j + offset) if chunks is not None and tail is not None else None
            if start and ids[start - 1] in special and ids[start:start + len(tail)] == tail:
                end = next((i for i in range(start, len(ids)) if ids[i] in special), None)
                if end is None and j == len(turns) - 1:
                    end = len(ids)
                if end is not None:
                    swaps.append((start, end, tail + list(turn.token_ids)))
                    continue
            # The plain encoding of the conversation up to this turn: kept from when it was generated
            # (encoded again when it no longer matches, e.g. after a system prompt change).
            for asked in (turn.prompt_ids, None) if turn.prompt_ids is not None else (None,):
                if asked is None:
                    asked = self._encode(messages[:j + offset], turns[:j]).input_ids
                # After the prompt's last special token: searched from the end, where it lies
                # ("<end_of_utterance>\nAssistant:"), not over the whole ~900-token prompt.
                start = next((i + 1 for i in range(len(asked) - 1, -1, -1) if asked[i] in special), 0)
                end = next((i for i in range(start, len(ids)) if ids[i] in special), None)
                if end is None and j == len(turns) - 1:
                    end = len(ids)  # the last turn left open (continue_answer): its text runs to the end
                if end is not None and ids[:start] == asked[:start]:
                    swaps.append((start, end, asked[start:] + list(turn.token_ids)))
                    if chunks is not None and chunks.get(j + offset) == start:
                        tail = asked[start:]
                    break
        for start, end, replacement in reversed(swaps):  # back to front: earlier offsets stay valid
            ids[start:end] = replacement
        return ids

    def _ids_spell(self, turn: Turn) -> bool:
        """``turn.token_ids`` decode to ``turn.text``, as the answer streamed them (the detokenizer's
        bytes of each id), whitespace at either end and a character left unfinished (U+FFFD) aside.
        Ids kept beside a text that says something else (trial 75 N3: an export's answer edited by
        hand) would have the model read, and Continue go on from, words the user cannot see."""
        eos = self.model.metadata.eos_token_ids  # (an answer with ignore_eos kept them; its text did not)
        spelled = b"".join(self.tokenizer.token_bytes(t) for t in turn.token_ids if t not in eos).decode(
            "utf-8", "replace")
        return spelled.strip().rstrip("\ufffd").rstrip() == turn.text.strip().rstrip("\ufffd").rstrip()

    def _encode(self, messages: list[dict], turns: Sequence[Turn], continuing: bool = False,
                add_generation_prompt: bool = True):
        """``Tokenizer.encode_chat`` of ``messages`` with the images and videos of ``turns``
        (``continuing``: the last message left open, ``continue_final_message``)."""
        return self.tokenizer.encode_chat(messages, [img for t in turns for img in t.images],
                                          add_generation_prompt=add_generation_prompt,
                                          videos=[v for t in turns for v in t.videos],
                                          continue_final_message=continuing)

    def prompt_ids(self, turns: Sequence[Turn], system_prompt: str | None, continuing: bool = False,
                   add_generation_prompt: bool = True) -> list[int]:
        """The ids a conversation of ``turns`` (and ``system_prompt``) is prefilled as, answers'
        generated ids replayed as :meth:`send` and :meth:`continue_answer` do it (a server's
        ``/tokenize``). Not fitted to the context: the prompt may be longer than it.
        ``add_generation_prompt`` off: the prompt without the assistant's opening (never what an
        answer reads). The turns' images may be :meth:`image_grids` (sizes only, no pixels).

        Reads only the tokenizer (thread-safe) and settings fixed at load, and changes nothing of
        this session, so it may run on any thread while the engine thread answers."""
        messages = self._messages(turns, system_prompt or None)
        encoded = self._encode(messages, turns, continuing, add_generation_prompt)
        return self._replay_answers(list(encoded.input_ids), messages, turns, encoded.message_chunks)

    def image_grids(self, images: Sequence[str | Path], detail: str = "full") -> list:
        """What the prompt needs of image files, from their headers alone (no decoding, no tiles, no
        model): each one's grid (:class:`~engine.models.smolvlm.processing.ImageGrid`), the one
        :meth:`preprocess` would cut, so a prompt of them has the ids a prompt of the tiled images
        has. Any thread. Raises as :meth:`count_image_tokens`."""
        from engine.models.smolvlm.processing import image_size

        self._require_vision(len(images))
        detail = resolve_detail(detail, self.model.device.type)
        return [self.processor.image_grid(*image_size(image), detail) for image in images]

    def count_image_tokens(self, image: str | Path, detail: str = "full") -> int:
        """``<image>`` tokens an image file will take in the prompt, from its header alone (cheap:
        no resize, no tiles). Raises :class:`~engine.api.errors.ImageError` for unreadable files and
        :class:`~engine.api.errors.UnsupportedOperation` for a text-only model."""
        from engine.models.smolvlm.processing import image_size

        self._require_vision(1)
        return self.processor.count_image_tokens(*image_size(image), resolve_detail(detail, self.model.device.type))

    def _require_vision(self, n: int) -> None:
        if n and self.processor is None:
            raise UnsupportedOperation(
                f"{self.model_name or type(self.model).__name__} is a text-only model: it takes no images "
                f"(got {n}); remove the image or load a vision model")

    def preprocess(self, images: Sequence[ImageInput], detail: str = "full") -> list[ProcessedImage]:
        """Load and tile images.

        Raises:
            UnsupportedOperation: images were given to a text-only model (no processor).
            ImageError: an image cannot be read.
        """
        self._require_vision(len(images))
        detail = resolve_detail(detail, self.model.device.type)
        return [self._preprocess_one(img, detail) for img in images]

    def _preprocess_one(self, image: ImageInput, detail: str) -> ProcessedImage:
        """One image, from :attr:`_processed` when the same bytes were tiled at this detail lately.

        Decoding and tiling a photo on the CPU (two large LANCZOS resizes) is ~0.25 s, most of a
        GPU's time to the first token; the prefix cache skips the vision tower and the prefill for a
        photo seen before, and this skips the rest. Keyed by a digest of the file's bytes, so a copy
        under another name (the server stores each request's images anew) is found too."""
        try:
            digest = bytes_digest(image) if isinstance(image, bytes) else file_digest(image)
        except (OSError, TypeError, ValueError):
            return self.processor(image, detail=detail)  # its error names the file
        key = (digest, detail)
        hit = self._processed.get(key)
        if hit is not None:
            self._processed.move_to_end(key)
            return hit
        # The file's digest also keys its tiles in the prefix cache (no second pass over the pixels).
        out = self.processor(image, detail=detail, source_digest=key[0])
        self._processed[key] = out
        while len(self._processed) > 1 and sum(p.pixels.nbytes for p in self._processed.values()) > PROCESSED_CACHE_BYTES:
            self._processed.popitem(last=False)
        return out

    def preprocess_videos(self, videos: Sequence[str | Path], params: GenerationParams | None = None,
                          cancellable: bool = False) -> list:
        """Sample and resize the frames of video files (``params.video_fps`` / ``video_max_frames``
        override the checkpoint's ``video_sampling``).

        With ``cancellable``, :meth:`cancel` stops the sampling between two decoded frames.

        Raises:
            UnsupportedOperation: the model takes no videos (only SmolVLM2 checkpoints do).
            VideoError: a video cannot be read.
            Cancelled: ``cancellable`` and :meth:`cancel` was called.
        """
        if not videos:
            return []
        self._require_video()
        params = params or GenerationParams()
        out = []
        for index, video in enumerate(videos):
            check = functools.partial(self._frame_point, index, len(videos)) if cancellable else None
            out.append(self.processor.preprocess_video(video, params.video_fps, params.video_max_frames, check=check))
        return out

    def _frame_point(self, index: int, count: int, done: int, total: int) -> None:
        """Between two decoded frames of video ``index`` of ``count``: a cancellation point, and the
        sampling's progress ("frames": a 4K video's seeking took 14 s of the first answer, said as
        nothing but "Waiting for the first word…", trial 52), once for each frame sampled."""
        if self._cancel.is_set():
            raise Cancelled()
        if (index, done) != getattr(self, "_frames_said", None):
            self._frames_said = (index, done)
            self._checkpoint(ProgressEvent("frames", done, total, index, count, done, total, "video"))

    def _sample_for_turn(self, videos: Sequence[str | Path], params: GenerationParams) -> list | None:
        """The videos of a new user turn, sampled on this (the engine) thread so that :meth:`cancel`
        stops it between frames; ``None`` when it was cancelled (the turn is not added)."""
        self._cancel.clear()  # a cancel of an earlier answer must not stop this one
        try:
            return self.preprocess_videos(videos, params, cancellable=True)
        except Cancelled:
            return None

    def _require_video(self) -> None:
        if not (self.model.supports_video() and getattr(self.processor, "takes_video", False)):
            meta = self.model.metadata  # named as the refusal of images names it (trial 59)
            raise UnsupportedOperation(f"{meta.name or self.model_name or type(self.model).__name__} "
                                       f"({meta.model_type}) takes no videos; load a SmolVLM2 model")

    def count_video_tokens(self, video: str | Path, params: GenerationParams | None = None) -> int:
        """Prompt tokens a video file will take (its intro, frame stamps and image tokens), from its
        headers alone: no decoding (within a token: the BPE may merge its edges with the text around
        it; fewer if the file turns out truncated). Raises :class:`~engine.api.errors.VideoError` for unreadable files
        and :class:`~engine.api.errors.UnsupportedOperation` for a model without video."""
        from engine.models.smolvlm.video import planned_prompt

        self._require_video()
        params = params or GenerationParams()
        text = planned_prompt(self.processor, video, params.video_fps, params.video_max_frames)
        return len(self.tokenizer.encode(text, allow_special=True))

    # -- generation -----------------------------------------------------------------------------
    def send(self, text: str, images: Sequence[ImageInput] = (), params: GenerationParams | None = None,
             videos: Sequence[str | Path] = (), text_parts: Sequence[str] | None = None) -> Iterator[GenerationEvent]:
        """Add a user turn (with images and video files) and stream the assistant's answer.
        ``text_parts``: the text laid out between the videos and images (:class:`Turn`); ``text``
        stays the turn's text as a whole.

        Yields :class:`TokenEvent` per generated token, then one :class:`DoneEvent`.

        Raises (before anything is yielded, leaving the conversation unchanged):
            UnsupportedOperation: ``images`` given to a text-only model.
            ImageError: an image cannot be read.
            VideoError: a video cannot be read (one line naming it).
            UnsupportedOperation: videos given to a model that takes none.
            PromptTooLongError: the conversation does not fit the context.
            ValueError: ``text_parts`` is not one longer than the media.

        :meth:`cancel` while the video frames are sampled (between two frames) ends the call with a
        single ``DoneEvent("cancelled")`` and leaves the conversation unchanged.
        """
        params = params or GenerationParams()
        t0 = time.perf_counter()
        parts = None if text_parts is None else tuple(text_parts)
        check_text_parts(parts, len(images) + len(videos))
        processed = self.preprocess(images, params.image_detail)
        clips = self._sample_for_turn(videos, params)
        if clips is None:
            return self._cancelled_before_start()
        snapshot = list(self.turns)
        self.turns.append(Turn("user", text, processed, videos=clips, text_parts=parts))
        return self._start(snapshot, params, t0)

    def regenerate(self, params: GenerationParams | None = None) -> Iterator[GenerationEvent]:
        """Drop the last answer and stream a new one to the same prompt.

        The cache is truncated to the prompt (all of it but its last token is reused:
        ``stats.cached_tokens == stats.prompt_tokens - 1``). Events as :meth:`send`.

        Raises (before anything is yielded, leaving the conversation unchanged):
            ValueError: the conversation does not end with an answer.
            PromptTooLongError: as :meth:`send`.
        """
        params = params or GenerationParams()
        t0 = time.perf_counter()
        if not self.turns or self.turns[-1].role != "assistant":
            raise ValueError("there is no answer to regenerate: the conversation does not end with one")
        snapshot = list(self.turns)
        while self.turns and self.turns[-1].role == "assistant":
            self.turns.pop()
        return self._start(snapshot, params, t0)

    def edit(self, turn_index: int, text: str, images: Sequence[ImageInput] | None = None,
             params: GenerationParams | None = None, videos: Sequence[str | Path] | None = None
             ) -> Iterator[GenerationEvent]:
        """Replace user turn ``turn_index`` (0-based over :attr:`turns`), drop every later turn, and
        stream a new answer. The cache keeps the prefix the old and new prompts share.

        ``images=None`` keeps the turn's images; a sequence (possibly empty) replaces them; ``videos`` likewise.

        Raises (before anything is yielded, leaving the conversation unchanged):
            ValueError: ``turn_index`` is not a user turn of the conversation.
            ImageError: an image cannot be read.
            PromptTooLongError: as :meth:`send`.
        """
        params = params or GenerationParams()
        t0 = time.perf_counter()
        if not 0 <= turn_index < len(self.turns) or self.turns[turn_index].role != "user":
            roles = [t.role for t in self.turns]
            raise ValueError(f"turn {turn_index} is not a user turn of this conversation (turns: {roles})")
        processed = self.turns[turn_index].images if images is None else self.preprocess(images, params.image_detail)
        clips = self.turns[turn_index].videos if videos is None else self._sample_for_turn(videos, params)
        if clips is None:
            return self._cancelled_before_start()
        snapshot = list(self.turns)
        del self.turns[turn_index:]
        self.turns.append(Turn("user", text, list(processed), videos=list(clips)))
        return self._start(snapshot, params, t0)

    def continue_answer(self, params: GenerationParams | None = None) -> Iterator[GenerationEvent]:
        """Continue the last turn, an assistant's (a prefill, or an answer cut short), where its text
        ends: the prompt is the conversation with that turn left open (no end-of-utterance, no new
        generation prompt), as transformers' ``apply_chat_template(continue_final_message=True)`` and
        vLLM's ``continue_final_message`` render it. The events carry only the continuation; the turn's
        text becomes its text plus the continuation. Events as :meth:`send`.

        Raises (before anything is yielded, leaving the conversation unchanged):
            ValueError: the conversation does not end with an assistant turn.
            PromptTooLongError: as :meth:`send`.
        """
        params = params or GenerationParams()
        t0 = time.perf_counter()
        if not self.turns or self.turns[-1].role != "assistant":
            raise ValueError("there is no answer to continue: the conversation does not end with one")
        return self._start(list(self.turns), params, t0, continuing=True)

    def _cancelled_before_start(self) -> Iterator[GenerationEvent]:
        """The answer of a call cancelled while its video frames were sampled: one ``DoneEvent``
        ("cancelled"), the conversation unchanged."""
        yield DoneEvent("cancelled", GenerationStats())

    def _start(self, snapshot: list[Turn], params: GenerationParams, t0: float,
               continuing: bool = False) -> Iterator[GenerationEvent]:
        """Fit the prompt to the context and return the answer's generator; on any error restore
        ``snapshot`` (the turns as they were before the call) and raise. ``continuing``: the answer
        continues the last turn (:meth:`continue_answer`)."""
        self._cancel.clear()
        try:
            prompt, dropped = self._fit_context(params, continuing)
        except BaseException:
            self.turns[:] = snapshot
            raise
        return self._generate(prompt, params, t0, snapshot, dropped, continuing)

    def _fit_context(self, params: GenerationParams, continuing: bool = False) -> tuple[Prompt, int]:
        """The prompt of the conversation, after dropping the fewest oldest exchanges (a user turn and
        its answers; never the last user turn) for the prompt plus room for the answer to fit the
        context (none with ``params.drop_old_turns`` off). Returns the prompt and how many turns
        were dropped.

        Raises:
            PromptTooLongError: the prompt does not fit even with every earlier turn dropped.
        """
        capacity = self.cache.capacity
        room = answer_room(params.max_new_tokens, capacity)
        # What is kept whatever is dropped: far longer than the context is refused before it is
        # rendered and encoded (seconds of the engine thread for megabytes of text).
        kept = self.turns[-1:] if params.drop_old_turns else self.turns
        least = self.tokenizer.least_tokens(len(self.system_prompt or "") + sum(_chars(t) for t in kept))
        if least >= capacity:
            raise PromptTooLongError(f"the prompt has at least {least} tokens but the context holds {capacity}")
        # Where an exchange starts: dropping turns[:s] for one of these leaves whole exchanges.
        starts = [i for i in range(1, len(self.turns)) if self.turns[i].role == "user"]
        if not (params.drop_old_turns and starts):
            prompt, dropped = self._prompt(continuing), 0
        else:
            prompt, dropped = self._fit_by_dropping([0, *starts], room, capacity, continuing)
        if dropped:  # (a fit that dropped nothing keeps the last one's: a branch switched back to finds it)
            self._kept_turns = dropped, self.turns[0]
        if len(prompt.ids) >= capacity:
            alone = "; the last message does not fit even with every earlier turn dropped" if len(self.turns) == 1 \
                and dropped else ""
            system = len(self.tokenizer.encode(self.system_prompt)) if self.system_prompt else 0
            if system and system >= capacity // 2:  # a stored setting, not this message, fails every answer
                alone = f"; the system prompt alone has {system} tokens{SYSTEM_PROMPT_TOO_LONG}"
            raise PromptTooLongError(f"the prompt has {len(prompt.ids)} tokens{self._media_share(prompt, continuing)} "
                                     f"but the context holds {capacity}{alone}")
        return prompt, dropped

    def _fit_by_dropping(self, starts: list[int], room: int, capacity: int, continuing: bool) -> tuple[Prompt, int]:
        """The prompt of ``self.turns[s:]`` for the first ``s`` of ``starts`` (0, then where each exchange
        begins) whose prompt leaves ``room`` tokens of ``capacity``, the last if none does; ``self.turns``
        is left as that. Returns the prompt and ``s``.

        The prompt only shrinks as more is dropped, so the first that fits is bisected for: a few
        renderings instead of one per dropped exchange (quadratic: a 10,000-message request held the
        engine for minutes). The guess tried first is where the last fit began (:meth:`_fit_guess`; a
        follow-up adds a turn or two): it and the start before it are rendered, prompts of about the
        context's size, where every send rendered the whole history and half of it (2.5 s of a
        10,000-message chat's follow-up with SmolLM2, trial 74 F6). Any guess gives the same answer.

        The search reads the answers as their text re-tokenized: replaying an answer's generated ids
        (:meth:`_replay_answers`) encodes the conversation before it again wherever the cut differs
        from its own, per answer and per candidate, and a fit from scratch of 1,000 exchanges whose
        answers kept their ids took 68 s (trial 75 N4). Generated ids may be a few tokens more or fewer
        than their text's, so the prompts next to the one found are replayed until the first that
        fits with them is known: the same answer as a search of replayed prompts."""
        turns = list(self.turns)
        # (index in starts, replayed) -> prompt, plain encoding
        rendered: dict[tuple[int, bool], tuple[Prompt, list[int] | None]] = {}

        def fits(index: int, replay: bool = False) -> bool:
            if (index, replay) not in rendered:
                self.turns[:] = turns[starts[index]:]
                rendered[index, replay] = self._prompt(continuing, replay=replay), self._plain_prompt
            return len(rendered[index, replay][0].ids) + room <= capacity

        # From the guess, steps of 1, 2, 4... towards the first that fits, then a bisection between the
        # last two tried. Indices below lo do not fit; hi fits, or is len(starts): none is known to fit.
        n, guess = len(starts), self._fit_guess(turns, starts)
        lo, hi, step = 0, n, 1
        if fits(guess):
            hi = guess
            while hi > 0:
                below = max(hi - step, 0)
                if not fits(below):
                    lo = below + 1
                    break
                hi, step = below, step * 2
        else:
            lo = guess + 1
            while guess and lo < n:  # (from 0, no guess: the bisection alone)
                above = min(guess + step, n - 1)
                if fits(above):
                    hi = above
                    break
                lo, step = above + 1, step * 2
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        fit = min(lo, n - 1)  # none fits: the last user turn alone, as close as it gets
        if fits(fit, replay=True):
            while fit > 0 and fits(fit - 1, replay=True):  # the answers' ids are shorter than their text
                fit -= 1
        else:
            while fit < n - 1:  # ... or longer (the last start's prompt is then replayed too: it is the one kept)
                fit += 1
                if fits(fit, replay=True):
                    break
        self.turns[:] = turns[starts[fit]:]
        # _prompt() also records the plain prompt the answer keeps: the chosen one's.
        prompt, self._plain_prompt = rendered[fit, True]
        return prompt, starts[fit]

    def _fit_guess(self, turns: list[Turn], starts: list[int]) -> int:
        """The index in ``starts`` of where the last fit's first turn is in ``turns``: at its index then,
        when the turn there has its role and text (a front end that states the whole history again,
        as the app's engine service does), else wherever that same turn is (a conversation that goes on
        from the turns the fit kept, as the command line's); 0 (all of it) before any fit dropped turns,
        or where the turn is gone (another chat)."""
        if self._kept_turns is None:
            return 0
        start, first = self._kept_turns
        if not (start < len(turns) and turns[start].role == first.role and turns[start].text == first.text):
            start = next((i for i, turn in enumerate(turns) if turn is first), 0)
        return min(bisect.bisect_left(starts, start), len(starts) - 1)

    def _media_share(self, prompt: Prompt, continuing: bool) -> str:
        """``" (1530 of them for images)"`` in a too-long prompt's message: the tokens its images and
        videos bring (their tiles, a frame's time stamp, the wrappers around them), where the prompt
        without them fits the context, so that fewer or smaller media would make it fit; ``""``
        otherwise (the text alone is too long, or no media). Front ends look for
        :data:`~engine.api.errors.MEDIA_SHARE` and the kind after it (:func:`~engine.api.errors.media_kind`)
        to suggest what to send instead. Encodes the conversation once more: a refusal's cost only."""
        if not prompt.image_positions:
            return ""
        text_only = [replace(t, images=[], videos=[], text_parts=None,
                             text="".join(t.text_parts) if t.text_parts is not None else t.text) for t in self.turns]
        text_tokens = len(self.prompt_ids(text_only, self.system_prompt, continuing))
        if text_tokens >= self.cache.capacity:
            return ""
        videos, images = any(t.videos for t in self.turns), any(t.images for t in self.turns)
        kind = MEDIA_KINDS[2] if videos and images else MEDIA_KINDS[1] if videos else MEDIA_KINDS[0]
        return f" ({len(prompt.ids) - text_tokens}{MEDIA_SHARE}{kind})"

    def _generate(self, prompt: Prompt, params: GenerationParams, t0: float, snapshot: list[Turn],
                  dropped: int = 0, continuing: bool = False) -> Iterator[GenerationEvent]:
        ids, images = prompt.ids, prompt.images
        stats = GenerationStats(prompt_tokens=len(ids),
                                image_tokens=sum(img.num_image_tokens for img in images),
                                video_frames=sum(getattr(img, "num_frames", 0) for img in images),
                                dropped_turns=dropped)
        notices = []
        if dropped:
            what = "the oldest message was" if dropped == 1 else f"the {dropped} oldest messages were"
            notices.append(f"The conversation no longer fits the {self.cache.capacity}-token context: {what} dropped.")
        new_videos = self.turns[-1].videos if self.turns and self.turns[-1].role == "user" else []
        for video in new_videos:  # a file that ended early: the chip promised more frames than were read
            planned = getattr(video, "planned_frames", 0)
            lost = (f"Only {video.num_frames} of the {planned} frames of {video.name or 'the video'} could be read "
                    "(the file ends early: truncated or damaged); the answer is about those.")
            if planned > video.num_frames and lost not in notices:  # (a file sent twice: said once)
                notices.append(lost)
        if notices:
            stats.notice = " ".join(notices)
        self._notice = stats.notice  # said on this answer's first progress event too (_checkpoint)
        answer_ids: list[int] = []
        pieces: list[str] = []  # the answer's text as streamed: the turn's text is what the client got
        reason = "error"
        error, error_type = None, ""
        try:
            if params.max_new_tokens < 1:  # (0 only reads a raw completion's prompt: engine.completion)
                raise ValueError("an answer needs max_new_tokens >= 1")
            logits = self._prefill(prompt, stats)
            stats.ttft_s = time.perf_counter() - t0
            sampler = make_sampler(params, self.model.device)
            if params.logprobs is not None:  # one token per step, recorded: no speculation, no pipelining
                sampler = LogprobSampler(sampler, params.logprobs)
            eos = set() if params.ignore_eos else set(self.model.metadata.eos_token_ids)
            detok = StreamingDetokenizer(self.tokenizer, skip_special_ids=set(self.model.metadata.eos_token_ids))
            if continuing and self.turns[-1].token_ids:
                detok.prime(self.turns[-1].token_ids)  # a character the answer left unfinished comes first
            spec = None if params.logprobs is not None else self._speculative_decoder(params, sampler)
            prompt_len = len(self._cached_keys)  # == len(ids): the cache holds the prompt
            t_decode = time.perf_counter()
            reason = "length"
            # The prompt read (the prefill's last progress event) is reported when the host is about
            # to wait for the first token, its sampling and the next step launched: a server starts
            # its response at this event, event-loop work that holds the GIL. Reported while the
            # host still launched kernels, the two threads traded the GIL: H200, a new 13-tile
            # photo through HTTP, +0.6 ms to the first token at the prefill's end, +0.5 ms at the
            # vision tower's start, +0.0 ms here (bench/results/h200-session30).
            new_tokens = len(ids) - stats.cached_tokens
            read = functools.partial(self._checkpoint, ProgressEvent("prefill", new_tokens, new_tokens))
            for token in token_stream(self.model, self.cache, sampler, list(ids), logits, params.max_new_tokens, spec,
                                      pipelined=self.pipelined and params.logprobs is None, on_wait=read):
                if token in eos:
                    reason = "stop"
                    break
                answer_ids.append(token)
                piece = detok.add(token)
                pieces.append(piece)
                yield TokenEvent(piece, token, *self._logprobs(sampler, token))
                if self._cancel.is_set() and len(answer_ids) < params.max_new_tokens:
                    reason = "cancelled"
                    break
            # The cache holds the prompt, then the answer's tokens in order (plus, with speculation,
            # accepted drafts past the point where the answer stopped): keep the answer's part.
            fed = min(self.cache.seq_len - prompt_len, len(answer_ids))
            self._cached_keys.extend(answer_ids[:fed])
            if spec is not None:
                stats.draft_tokens, stats.accepted_tokens = spec.draft_tokens, spec.accepted_tokens
            # An answer that can be continued (cut by its token limit, stopped) keeps the bytes of a
            # character it left unfinished out of its text: its continuation finishes that character.
            tail = "" if reason in ("length", "cancelled") and detok.hold() else detok.flush()
            if tail:
                pieces.append(tail)
                yield TokenEvent(tail, -1)  # text held back at the end, no new token
            stats.generated_tokens = len(answer_ids)
            decode_s = time.perf_counter() - t_decode
            if len(answer_ids) > 1 and decode_s > 0:
                stats.decode_tokens_per_s = (len(answer_ids) - 1) / decode_s
        except GeneratorExit:
            reason = "cancelled"
            raise
        except Cancelled:  # during the vision tower or the prefill: the user turn stays, the answer is empty
            reason = "cancelled"
        except Exception as exc:  # noqa: BLE001  (reported in the DoneEvent; the session stays usable)
            # An engine error's words alone (they name what failed) and its name; anything else (a bug)
            # with its type in the words, and no name a front end would take for the user's mistake.
            reason, error = "error", describe_error(exc)
            error_type = type(exc).__name__ if is_engine_error(exc) else ""
        finally:
            stats.total_s = time.perf_counter() - t0
            self._notice = ""  # not carried into another request's progress
            # The cache and its keys must describe the same tokens, whatever failed.
            kept = min(self.cache.seq_len, len(self._cached_keys))
            self.cache.truncate(kept)
            self._keep_keys(kept)
            self._share_blocks()
            if reason == "error" and not answer_ids:
                self.turns[:] = snapshot  # nothing was answered: the conversation is as before the call
            elif continuing:
                # One turn, its text as a client sends it back (prefill + continuation). An answer
                # replayed from its ids keeps them, the continuation's after them (the tokens the model
                # read and wrote); a text prefill is tokenized again in later prompts.
                text = "".join(pieces)
                last = self.turns[-1]
                ids = None if last.token_ids is None else [*last.token_ids, *answer_ids]
                self.turns[-1] = Turn("assistant", last.text + text, token_ids=ids, prompt_ids=last.prompt_ids)
            else:
                text = "".join(pieces)
                self.turns.append(Turn("assistant", text[1:] if text.startswith(" ") else text,
                                       token_ids=list(answer_ids), prompt_ids=self._plain_prompt))
        yield DoneEvent(reason, stats, error, error_type, token_ids=tuple(answer_ids))

    def _logprobs(self, sampler, token: int) -> tuple:
        """``(logprob, top_logprobs, token_bytes)`` of ``token`` for its TokenEvent when the answer
        asked for them: raw bytes, not decoded text, which turns every partial UTF-8 character into U+FFFD."""
        record = sampler.pop(token) if isinstance(sampler, LogprobSampler) else None
        if record is None:
            return ()
        logprob, best = record
        token_bytes = self.tokenizer.token_bytes
        return logprob, tuple((token_bytes(i), lp) for i, lp in best), token_bytes(token)

    def _speculative_decoder(self, params: GenerationParams, sampler) -> SpeculativeDecoder | None:
        """Prompt-lookup speculation (engine.speculative) unless ``params.speculative`` is False.

        ``None`` (auto) uses it where it pays off: the model supports ``decode_all_logits`` and runs
        on the CPU, where verifying k+1 positions costs about 0.85-1.5 decode steps (k = 1..4). On
        CUDA a decode step is a replayed CUDA graph and an eager verification costs ~8 of them
        (H200, bench/speculative.py), so auto leaves it off there; ``True`` forces it. It only
        drafts when the n-gram lookup matches and backs off after misses."""
        if params.speculative is False or not self.model.supports_decode_all_logits():
            return None
        if params.speculative is None and self.model.device.type != "cpu":
            return None
        ready = getattr(self.model, "native_decode_ready", None)
        if params.speculative is None and ready is not None and ready(self.cache):
            # The native CPU step (engine.native) decodes ~3-4x faster than the eager step that the
            # verification's decode_all_logits still is: verifying k+1 positions now costs several
            # decode steps, more than accepted drafts save.
            return None
        return SpeculativeDecoder(self.model, self.cache, sampler)

    def _prefill(self, prompt: Prompt, stats: GenerationStats) -> torch.Tensor:
        """Reuse the cached prefix, prefill the rest in chunks; logits of the last prompt token ``[1, V]``.

        The host's work before the prefill is bisections and slice compares over the prompt, not a
        step per token: on a follow-up it sits between the question and its first token."""
        ids, keys, images, positions = prompt
        limit = min(len(self._cached_keys), len(ids) - 1)  # always prefill at least one token
        common = self._adopt_cached_prefix(keys, common_prefix(self._cached_keys, keys, limit))
        # Never start inside a tile's run of image tokens: back off to its first one.
        before = bisect_left(positions, common)  # feature slots already in the cache
        tile_starts = tile_first_slots(images)
        if 0 < before < len(positions):
            first = tile_starts[bisect_right(tile_starts, before) - 1]  # of the tile of slot `before`
            if first < before:
                before, common = first, positions[first]
        self.cache.truncate(common)
        self._keep_keys(common)
        stats.cached_tokens = common
        skip = bisect_right(tile_starts, before - 1) if before else 0  # tiles already in the cache
        self._last_progress = None  # each answer reports its own first tile
        tiles = []
        self._reading = []
        vision_dtype = getattr(self.model, "vision_dtype", None)
        for img in images:
            if skip >= img.num_tiles:
                skip -= img.num_tiles
                continue
            # Normalized on the model's device from uint8 (a quarter of the bytes to copy), straight
            # into the vision tower's dtype: one [n, 3, M, M] tensor per image.
            tiles.append(img.tiles_tensor(self.model.device, vision_dtype)[skip:])
            self._reading.append(("video" if getattr(img, "num_frames", 0) else "image", img.num_tiles - skip))
            skip = 0
        new_ids = torch.tensor([ids[common:]])
        # Only a vision model gets the tower's callback (a text-only model's embed_multimodal needs none).
        embeds = self.model.embed_multimodal(new_ids, tiles, *((self._tiles_done,) if tiles else ()))
        del tiles  # not needed during the prefill
        t = time.perf_counter()
        logits = None
        total = embeds.shape[1]
        # A cancel waits for one layer, not a chunk. On CUDA a follow-up's few tokens are one replayed
        # graph (no layer runs as a module, so no hook would fire) of about a millisecond.
        short = self._short_prefill(total)
        points = contextlib.nullcontext() if short else layer_cancel_points(self.model, self._cancel)
        with points:
            for start in range(0, total, self.prefill_chunk):
                if not short:
                    self._checkpoint(ProgressEvent("prefill", start, total))
                elif self._cancel.is_set():
                    raise Cancelled()
                # A short prefill reports no progress of its own: its one event, the prompt read
                # (_generate), comes once the host waits for the GPU (see there).
                chunk = embeds[:, start:start + self.prefill_chunk]
                pos = range(self.cache.seq_len, self.cache.seq_len + chunk.shape[1])
                logits = self.model.prefill(chunk, self.cache, pos)
                self._cached_keys.extend(keys[pos.start:pos.stop])
        elapsed = time.perf_counter() - t
        if elapsed > 0:
            stats.prefill_tokens_per_s = (len(ids) - common) / elapsed
        return logits

    def _short_prefill(self, tokens: int) -> bool:
        """Whether a prefill of ``tokens`` new tokens is one short step (a follow-up's few tokens on
        CUDA: one replayed graph of about a millisecond)."""
        return tokens <= SHORT_PREFILL and self.model.device.type == "cuda"

    def _keep_keys(self, n: int) -> None:
        """Keep the first ``n`` cache keys (the cache itself was truncated to ``n``) and their digests."""
        del self._cached_keys[n:]
        del self._digests[n // self.cache.block_size if isinstance(self.cache, PagedKVCache) else 0:]

    def _full_block_digests(self, keys: Sequence, n_blocks: int) -> list[bytes]:
        """Digests of the first ``n_blocks`` full blocks of ``keys``; those of blocks that ``keys``
        shares with the cache's keys come from :attr:`_digests` (``keys`` may be the cache's own)."""
        bs = self.cache.block_size
        known = common_prefix(keys, self._cached_keys, min(len(self._digests), n_blocks) * bs) // bs
        parent = self._digests[known - 1] if known else b""
        return self._digests[:known] + chain_digests(keys[known * bs:n_blocks * bs], bs, parent)

    def _adopt_cached_prefix(self, keys: list, common: int) -> int:
        """Start the cache with the longest run of the prompt's full blocks in the arena's prefix
        cache when that covers more than ``common`` (the tokens this sequence already shares with the
        prompt); returns the tokens now shared. The last prompt token is never adopted (its logits
        are needed)."""
        cache = self.cache
        if not isinstance(cache, PagedKVCache) or not len(cache.prefix):
            return common
        bs = cache.block_size
        n_blocks = (len(keys) - 1) // bs
        if n_blocks * bs <= common:
            return common
        digests = self._full_block_digests(keys, n_blocks)
        found = cache.prefix.match(digests)
        if len(found) * bs <= common:
            return common
        cache.adopt_prefix(found)
        self._cached_keys = list(keys[:len(found) * bs])
        self._digests = digests[:len(found)]
        return len(found) * bs

    def _share_blocks(self) -> None:
        """Register the sequence's full blocks in the arena's prefix cache (paged cache only)."""
        cache = self.cache
        if not isinstance(cache, PagedKVCache) or not cache.prefix.max_blocks:
            return
        n_blocks = len(self._cached_keys) // cache.block_size
        self._digests = self._full_block_digests(self._cached_keys, n_blocks)
        cache.prefix.insert(self._digests, cache.block_table[:n_blocks])

    def _tiles_done(self, done: int, total: int) -> None:
        """The vision tower's callback: a cancellation point, and progress when ``done`` moved."""
        event = self._image_progress(done, total)
        if event != self._last_progress:
            self._last_progress = event
            self._checkpoint(event)
        elif self._cancel.is_set():
            raise Cancelled()

    def _image_progress(self, done: int, total: int) -> ProgressEvent:
        """``done``/``total`` tiles over all images read, as "image ``index`` of ``count``, tile ``tile``
        of ``tiles``": the image being read is the first one not finished (the last one once all are)."""
        spans = self._reading
        if sum(n for _, n in spans) != total:  # padding tiles were dropped: no per-image breakdown
            return ProgressEvent("image", done, total)
        start = 0
        for index, (media, n) in enumerate(spans):
            if done < start + n or index == len(spans) - 1:
                return ProgressEvent("image", done, total, index, len(spans), done - start, n, media)
            start += n
        return ProgressEvent("image", done, total)  # no tiles at all (not called then)

    def _checkpoint(self, event: ProgressEvent) -> None:
        """A cancellation point before the first token: raise :class:`Cancelled`, else report ``event``."""
        if self._cancel.is_set():
            raise Cancelled()
        if self.progress is not None:
            if self._notice:  # the answer's first event: its notice now, not only with the answer's end
                event, self._notice = replace(event, notice=self._notice), ""
            self.progress(event)
