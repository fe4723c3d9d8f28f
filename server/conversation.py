"""OpenAI messages -> the engine service's conversation, and request fields -> GenerationParams.

An OpenAI client re-sends the whole conversation each turn. The earlier messages become the service's
history (``set_history`` keeps the longest prefix its session already holds, KV cache included) and
the last user message is ``send``; so a follow-up about the same photo prefills only the new question.
A last message from the assistant (a prefill, or Open WebUI's "Continue response") is continued
instead: it is the history's last message and the answer is ``continue_answer``'s.

Answers come back as text; :class:`AnswerIds` remembers the token ids this server generated each
recent answer as, so that a re-sent conversation is the same token sequence the engine computed (the
re-tokenized text can differ), and its blocks are found in the prefix cache even when another
conversation ran in between.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

from engine.api import Attachment, Capabilities, GenerationParams, HistoryMessage
from server.config import ServerConfig
from server.errors import APIError
from server.media import DETAILS, MediaStore, PendingImage
from server.schemas import ChatRequest, ImagePart, ImageURL, SamplingFields, TextPart, VideoPart

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: temperatures under it sample as greedy


@dataclass
class Turns:
    """A chat request in the service's terms."""

    system: str
    history: list[HistoryMessage]
    text: str
    attachments: list[Attachment] = field(default_factory=list)
    detail: str = "balanced"
    # Every image of the request was sent with 'detail': 'low' (videos aside: detail does nothing for
    # them): a refusal of a prompt too long does not suggest it (server.errors.from_engine).
    all_images_low: bool = False
    # New photos whose decode still runs: the route confirms them (MediaStore.confirm) once the
    # answer is queued, before its response starts.
    pending: list[PendingImage] = field(default_factory=list)
    text_parts: tuple[str, ...] | None = None  # the last message's text between its media (HistoryMessage)
    # The last message is the assistant's, the end of ``history``: the answer continues it.
    continuing: bool = False


class AnswerIds:
    """Text of a recent answer -> the token ids it was generated as (least recently used dropped).

    Only answers whose text is exactly their tokens' text are kept (not those cut at a stop string).
    """

    def __init__(self, max_entries: int = 1024):
        self.max_entries = max_entries
        self._ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    def remember(self, text: str, token_ids: list[int]) -> None:
        if not text.strip() or not token_ids:
            return
        self._ids[text] = tuple(token_ids)
        self._ids.move_to_end(text)
        while len(self._ids) > self.max_entries:
            self._ids.popitem(last=False)

    def get(self, text: str) -> tuple[int, ...] | None:
        ids = self._ids.get(text)
        if ids is not None:
            self._ids.move_to_end(text)
        return ids


def _url(value: ImageURL | str) -> tuple[str, str]:
    return (value, "auto") if isinstance(value, str) else (value.url, value.detail)


#: Images and videos the earlier messages of one request may hold, as a multiple of ``max_images``.
HISTORY_MEDIA_FACTOR = 4


def _check_media_count(request: ChatRequest, config: ServerConfig) -> None:
    """APIError 413 beyond ``config.max_images`` images or videos in the last message, or beyond
    :data:`HISTORY_MEDIA_FACTOR` times as many in the earlier ones. A client re-sends a conversation's
    photos on every turn, so the earlier messages of a long photo chat hold many (the server finds
    those it stored again without decoding them, and the engine drops the oldest turns when they no
    longer fit the context); the bound on them does not depend on what this server remembers."""
    last = len(request.messages) - 1
    here = earlier = 0
    for i, message in enumerate(request.messages):
        for part in message.content if isinstance(message.content, list) else ():
            if isinstance(part, TextPart):
                continue
            if i == last:
                here += 1
            else:
                earlier += 1
    if here > config.max_images:
        raise APIError(413, f"{here} images or videos in one message; the limit is {config.max_images} "
                            "(the server's --max-images)",
                       "too_many_images", "messages")
    limit = HISTORY_MEDIA_FACTOR * config.max_images
    if earlier > limit:
        raise APIError(413, f"{earlier} images or videos in the conversation's earlier messages; the limit is "
                       f"{limit} ({HISTORY_MEDIA_FACTOR} x --max-images): start a new conversation, or leave "
                       "out older photos", "too_many_images", "messages")


async def to_turns(request: ChatRequest, media: MediaStore, caps: Capabilities, config: ServerConfig,
                   answers: AnswerIds | None = None) -> Turns:
    """Check and convert ``request.messages``; APIError 400/413 for what the model cannot take.
    Assistant messages found in ``answers`` carry the token ids they were generated as."""
    _check_media_count(request, config)
    pending: list[PendingImage] = []
    try:
        return await _to_turns(request, media, caps, answers, pending)
    except BaseException:
        media.settle(pending)  # new photos of a request refused after them: kept or deleted on their own
        raise


async def _to_turns(request: ChatRequest, media: MediaStore, caps: Capabilities, answers: AnswerIds | None,
                    pending: list[PendingImage]) -> Turns:
    system, messages, details, image_details = [], [], [], []
    for i, message in enumerate(request.messages):
        if message.role in ("tool", "function"):
            raise APIError(400, f"a '{message.role}' message (a tool's result): this server runs no tools, so a "
                           "conversation that used them cannot be continued here", "unsupported_parameter",
                           f"messages[{i}].role")
        if message.role == "assistant" and (message.tool_calls or message.function_call):
            field = "tool_calls" if message.tool_calls else "function_call"
            raise APIError(400, f"an assistant message with {field} (a tool call): this server runs no tools, so a "
                           "conversation that used them cannot be continued here", "unsupported_parameter",
                           f"messages[{i}].{field}")
        role = "system" if message.role == "developer" else message.role
        texts, attachments, pieces = [], [], [[]]  # pieces: the texts before each medium, and after the last
        parts = [TextPart(type="text", text=message.content)] if isinstance(message.content, str) else \
            (message.content or [])
        for j, part in enumerate(parts):
            param = f"messages[{i}].content[{j}]"
            if isinstance(part, TextPart):
                texts.append(part.text)
                pieces[-1].append(part.text)
                continue
            pieces.append([])
            if role != "user":
                article = "an" if message.role[0] in "aeiou" else "a"
                raise APIError(400, f"images and videos go in user messages, not in {article} {message.role} message",
                               "invalid_content", param)
            url, detail = _url(part.image_url if isinstance(part, ImagePart) else part.video_url)
            if isinstance(part, VideoPart):
                if not caps.video:
                    raise APIError(400, "this model takes no video (video needs a SmolVLM2 model)",
                                   "video_not_supported", param)
                attachments.append(Attachment(await media.video(url, param), "video"))
            else:
                if not caps.vision:
                    raise APIError(400, "this model takes no images", "images_not_supported", param)
                path, decoding = await media.begin_image(url, param)
                if decoding is not None:
                    pending.append(decoding)
                attachments.append(Attachment(path, detail=DETAILS[detail]))
                image_details.append(detail)
            details.append(DETAILS[detail])
        text = "\n".join(texts)
        if role == "system":
            system.append(text)
        else:
            ids = answers.get(text) if answers is not None and role == "assistant" else None
            messages.append(HistoryMessage(role, text, tuple(attachments), ids, _text_parts(pieces, attachments)))
    if not messages or messages[-1].role not in ("user", "assistant"):
        raise APIError(400, "the last message must be a user message (or an assistant message to continue)",
                       "invalid_messages", "messages")
    # The finest detail asked for in the request (the engine takes one level per answer).
    detail = min(details, key=("full", "balanced", "fast").index) if details else "balanced"
    all_images_low = bool(image_details) and all(d == "low" for d in image_details)
    if messages[-1].role == "assistant":
        # Continued where its text ends (vLLM's continue_final_message, llama-server's prefill). Its
        # ids as this server generated them would not be replayed: the open message is text.
        last = messages[-1]
        messages[-1] = HistoryMessage("assistant", last.text, last.attachments, None, last.text_parts)
        return Turns("\n\n".join(system), messages, "", detail=detail, all_images_low=all_images_low,
                     pending=pending, continuing=True)
    last = messages.pop()
    return Turns("\n\n".join(system), messages, last.text, list(last.attachments), detail, all_images_low,
                 pending=pending, text_parts=last.text_parts)


def _text_parts(pieces: list[list[str]], attachments: list[Attachment]) -> tuple[str, ...] | None:
    """A message's text laid out between its media as sent (``HistoryMessage.text_parts``): the texts
    before each image or video, and after the last, each run of text parts joined as the message's
    text is. None where the engine's own layout gives the same prompt (every text after the media)
    and where it cannot hold the order: an image before a video in one message (the engine puts a
    message's videos first)."""
    kinds = [a.kind for a in attachments]
    if not any(pieces[:-1]) or kinds != sorted(kinds, key=lambda kind: kind != "video"):
        return None
    return tuple("\n".join(piece) for piece in pieces)


def repetition_penalty(request: SamplingFields) -> float:
    """``repetition_penalty`` as given, else OpenAI's ``frequency_penalty`` f (or, when that is absent
    or 0, its ``presence_penalty``) mapped onto the engine's multiplicative penalty: ``1 + f/2`` for
    f >= 0, ``1 / (1 - f/2)`` below (f = 2 -> 2.0, -2 -> 0.5). An approximation: OpenAI's penalties
    are additive, the frequency one growing with the count; ours is CTRL's (Keskar et al. 2019), applied
    once to every token already present, which is the presence penalty's kind."""
    if request.repetition_penalty is not None:
        return request.repetition_penalty
    f = request.frequency_penalty or request.presence_penalty or 0.0
    return 1 + f / 2 if f >= 0 else 1 / (1 - f / 2)


def params_for(request: SamplingFields, max_tokens: int | None, capacity: int, config: ServerConfig,
               detail: str = "full", logprobs: int | None = None, max_tokens_field: str = "max_tokens",
               prompt_logprobs: int | None = None) -> GenerationParams:
    """GenerationParams for a request; APIError 400 for ``n`` other than 1 and answers beyond the
    context (naming ``max_tokens_field``, the field the limit came from)."""
    if request.n != 1:
        raise APIError(400, "n must be 1: this server generates one choice per request", "invalid_value", "n")
    if max_tokens is not None and capacity and max_tokens >= capacity:
        # ">=": the prompt takes at least one position, so an answer of the whole context cannot fit either.
        raise APIError(400, f"{max_tokens_field} is {max_tokens} but must be less than the context's {capacity} "
                       "tokens (the prompt takes some of them)", "context_length_exceeded", max_tokens_field)
    temperature = 1.0 if request.temperature is None else request.temperature  # OpenAI's default
    if temperature < GREEDY_BELOW:  # logits / 1e-300 overflow to inf and NaN probabilities: that is greedy
        temperature = 0.0
    top_k = request.top_k if request.top_k and request.top_k > 0 else 0  # -1 and 0 turn it off (vLLM)
    values = dict(temperature=temperature, top_k=top_k, top_p=request.top_p or 1.0, min_p=request.min_p or 0.0,
                  repetition_penalty=repetition_penalty(request), seed=request.seed,
                  max_new_tokens=max_tokens if max_tokens is not None else (
                      min(config.default_max_tokens, capacity // 2) if capacity else config.default_max_tokens),
                  image_detail=detail, logprobs=logprobs, prompt_logprobs=prompt_logprobs,
                  ignore_eos=request.ignore_eos,
                  # The client sent the context it wants answered: refused when it does not fit, never
                  # cut short without a word (OpenAI's API refuses; the app drops a chat's oldest turns).
                  drop_old_turns=False)
    if logprobs is not None:
        values["speculative"] = False
    assert all(not isinstance(v, float) or math.isfinite(v) for v in values.values())
    try:
        return GenerationParams(**values)
    except ValueError as exc:  # what the schema cannot express (e.g. a combination)
        raise APIError(400, str(exc), "invalid_value") from None
