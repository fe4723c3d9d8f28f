"""Generation parameters and the events a streaming generation yields.

These are plain dataclasses (no tensors) so that the app can pass them across threads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "cancelled", "error"]
#: Image detail levels (see :class:`GenerationParams`); ``auto`` is resolved per device (:func:`resolve_detail`).
DETAILS = ("auto", "full", "balanced", "fast")


def resolve_detail(detail: str, device: str) -> str:
    """The detail an image is read at: ``auto`` is ``full`` (the reference tiling) on a GPU (``cuda``,
    ``mps``) and on a remote server, and ``balanced`` on a CPU, where a 17-tile photo is tens of
    seconds of vision tower: the image at its own size, never upscaled (what LM Studio and Ollama
    users get by default). Other levels are returned as they are."""
    if detail != "auto":
        return detail
    return "balanced" if device == "cpu" else "full"


#: The most alternatives ``GenerationParams.logprobs`` may ask for (OpenAI's limit).
MAX_TOP_LOGPROBS = 20
#: Weight formats a model can be loaded with: ``auto`` keeps the run dtype; ``int8`` and ``int4`` (CPU
#: and CUDA) quantize the text decoder's projections and lm_head weight-only.
WEIGHT_FORMATS = ("auto", "int8", "int4")
#: The context sizes (KV cache tokens) the app's Settings and the server's --context-size take, besides
#: 0 for the model's own: below 256 tokens not even a short question and its answer fit.
MIN_CONTEXT, MAX_CONTEXT = 256, 131072

#: Room kept for the answer when a conversation's oldest exchanges are dropped to fit the context:
#: min(max_new_tokens, this share of the context) (:func:`answer_room`).
ANSWER_ROOM_FRACTION = 0.25


def answer_room(max_new_tokens: int, context: int) -> int:
    """Tokens kept free for the answer when old turns are dropped to fit ``context`` (tokens): the
    whole ``max_new_tokens`` where it is at most a quarter of the context, else that quarter (a long
    limit must not empty the conversation). Used alike by the engine, the app's attachment budget
    and the remote backend, so that a chat keeps the same turns whatever answers it."""
    return max(0, min(max_new_tokens, int(context * ANSWER_ROOM_FRACTION)))


@dataclass(frozen=True, slots=True)
class GenerationParams:
    """Sampling and stopping settings for one answer.

    ``temperature == 0`` means greedy (argmax). ``top_k == 0`` and ``top_p == 1.0`` disable those
    filters; ``repetition_penalty == 1.0`` disables the penalty (CTRL, Keskar et al. 2019, as in
    transformers' ``RepetitionPenaltyLogitsProcessor``). ``seed`` makes sampling reproducible.
    ``max_new_tokens`` bounds the answer (0, for a raw completion only: read, and with
    ``prompt_logprobs`` score, the prompt and generate nothing; a chat answer needs 1);
    ``ignore_eos`` keeps decoding past end-of-utterance (benchmarks only). ``logprobs`` (``None``:
    off) asks for the log-probability of each sampled token under the model's raw distribution
    and the ``logprobs`` most likely alternatives (0..20); it turns speculation and pipelining off
    for that answer (the cost stays off the hot path otherwise). ``image_detail`` is one of
    ``"full"`` (the checkpoint's reference preprocessing), ``"balanced"`` (never upscale an image beyond its own size), ``"fast"``
    (one global tile per image) or ``"auto"`` (full on a GPU, balanced on a CPU:
    :func:`resolve_detail`). ``speculative`` picks prompt-lookup speculative decoding
    (``engine.speculative``): ``None`` uses it where it pays off (the CPU), ``True`` requires it,
    ``False`` turns it off. It never changes greedy output, nor the distribution of sampled output.
    ``video_fps`` and ``video_max_frames`` override how a video's frames are sampled (default: the
    checkpoint's ``video_sampling``, 1 fps and at most 64 frames for SmolVLM2).
    ``prompt_logprobs`` (``None``: off; a raw completion only, ``engine.completion``) asks for the
    log-probability of each prompt token given the ones before it and the ``prompt_logprobs`` most
    likely alternatives (0..20), in one :class:`PromptLogprobsEvent` before the answer's first
    token (the legacy completions API's ``echo`` with ``logprobs``: scoring a text).
    ``echo_prompt`` (a raw completion only) sends that event unscored when ``prompt_logprobs`` is
    ``None`` (each token's ``logprob`` ``None``): the text of a prompt given as token ids, which
    only the engine's tokenizer can decode, for the API's ``echo``.
    ``drop_old_turns``: when the conversation plus room for the answer exceeds the context, drop
    its oldest exchanges (the app: a chat goes on for ever); ``False`` keeps every turn and refuses
    only a prompt that does not fit at all (the HTTP API: its clients choose their context, and
    OpenAI's API refuses rather than cutting it).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_new_tokens: int = 512
    seed: int | None = None
    ignore_eos: bool = False
    image_detail: Literal["auto", "full", "balanced", "fast"] = "full"
    speculative: bool | None = None
    logprobs: int | None = None
    video_fps: float | None = None
    video_max_frames: int | None = None
    drop_old_turns: bool = True
    prompt_logprobs: int | None = None
    echo_prompt: bool = False

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repetition_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_TOP_LOGPROBS:
                raise ValueError(f"{name} must be in [0, {MAX_TOP_LOGPROBS}], got {value}")
        if self.image_detail not in DETAILS:
            raise ValueError(f"image_detail must be auto, full, balanced or fast, got {self.image_detail!r}")
        if self.video_fps is not None and not (math.isfinite(self.video_fps) and self.video_fps > 0):
            raise ValueError(f"video_fps must be a positive number, got {self.video_fps}")
        if self.video_max_frames is not None and self.video_max_frames < 1:
            raise ValueError(f"video_max_frames must be >= 1, got {self.video_max_frames}")


@dataclass(slots=True)
class GenerationStats:
    """Counters and timings of one answer.

    Times are seconds (wall clock, ``time.perf_counter``); rates are tokens per second.
    ``ttft_s`` runs from the call to the first generated token being available (preprocessing,
    vision tower and prefill included). ``cached_tokens`` are prompt tokens reused from the KV
    cache instead of being prefilled again. ``dropped_turns`` counts the oldest messages dropped
    from the conversation so that it fits the context; ``notice`` then says so in words (for the UI).
    ``draft_tokens`` were proposed by the speculative drafter and checked by the model;
    ``accepted_tokens`` of them were kept. ``video_frames`` counts the frames sampled from the
    videos of the conversation's prompt (their ``<image>`` tokens are part of ``image_tokens``).
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    image_tokens: int = 0
    video_frames: int = 0
    ttft_s: float = 0.0
    prefill_tokens_per_s: float = 0.0
    decode_tokens_per_s: float = 0.0
    total_s: float = 0.0
    dropped_turns: int = 0
    notice: str = ""
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0.0 when nothing was drafted)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "acceptance_rate": self.acceptance_rate}


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One generated token and the text it completes (may be ``""`` mid UTF-8 character).

    ``logprob``, ``top_logprobs`` (``(token bytes, logprob)`` pairs, most likely first) and
    ``token_bytes`` are set only when :attr:`GenerationParams.logprobs` asked for them. A token's
    bytes are its own raw bytes (:meth:`Tokenizer.token_bytes`), so a token holding part of a UTF-8
    character has just that part (``b"\\xf0\\x9f"``), as OpenAI's logprobs ``bytes`` give it; its
    decoded text could only say U+FFFD, the same for every such token.
    """

    text: str
    token_id: int
    logprob: float | None = None
    top_logprobs: tuple[tuple[bytes, float], ...] = ()
    token_bytes: bytes = b""


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """The last event of a generation. ``error_type`` names the exception behind an ``"error"``
    (e.g. ``"PromptTooLongError"``) so a front end can tell the user's mistake from a bug.
    ``token_ids`` are the answer's ids as generated (end-of-utterance excluded; empty when unknown,
    e.g. a remote server's answer): stored with the answer, they come back as
    ``HistoryMessage.token_ids`` so a reopened chat gives the model the same context as the live one."""

    finish_reason: FinishReason
    stats: GenerationStats = field(default_factory=GenerationStats)
    error: str | None = None
    error_type: str = ""
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PromptLogprobsEvent:
    """The prompt's own tokens, scored (:attr:`GenerationParams.prompt_logprobs`); sent once, after
    the prompt is read and before the answer's first token.

    One :class:`TokenEvent` per prompt token, in order: ``text`` is what the token adds to the
    prompt's text as a streaming detokenizer decodes it (``""`` for a token holding part of a UTF-8
    character, whose character comes with the token that completes it), ``token_bytes`` its own raw
    bytes, ``logprob`` the log-probability of the token given the tokens before it (float32
    log-softmax of the model's raw logits, as for generated tokens) and ``top_logprobs`` the most
    likely alternatives at its position. The first token has nothing before it: its ``logprob`` is
    ``None`` and its ``top_logprobs`` empty."""

    tokens: tuple[TokenEvent, ...]


GenerationEvent = TokenEvent | DoneEvent
