"""OpenAI messages -> the engine service's conversation, and request fields -> GenerationParams.

An OpenAI client re-sends the whole conversation each turn. The earlier messages become the service's
history (``set_history`` keeps the longest prefix its session already holds, KV cache included) and
the last user message is ``send``; so a follow-up about the same photo prefills only the new question.
A last message from the assistant (a prefill, or Open WebUI's "Continue response") is continued
instead: it is the history's last message and the answer is ``continue_answer``'s. vLLM's
``add_generation_prompt`` and ``continue_final_message`` say otherwise where given
(:func:`template_mode`); a prompt the engine's chat answers do not build (no assistant opening, or
a closed assistant message answered after) is built as ids (:func:`prompt_ids`) and completed raw.

Answers come back as text; :class:`AnswerIds` remembers the token ids this server generated each
recent answer as, so that a re-sent conversation is the same token sequence the engine computed (the
re-tokenized text can differ), and its blocks are found in the prefix cache even when another
conversation ran in between.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from engine.api import Attachment, Capabilities, GenerationParams, HistoryMessage
from server.config import ServerConfig
from server.errors import APIError, engine_result
from server.media import DETAILS, MediaStore, PendingImage
from server.schemas import (
    ChatRequest,
    ImagePart,
    ImageURL,
    SamplingFields,
    TemplateFields,
    TextPart,
    TokenizeRequest,
    VideoPart,
)

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
    # The last message is the assistant's, the end of ``history``, closed (continue_final_message
    # false, or add_generation_prompt true): the prompt goes on after it.
    closed_answer: bool = False
    # The prompt ends with the assistant's opening (add_generation_prompt); never while continuing.
    generation_prompt: bool = True

    @property
    def raw(self) -> bool:
        """The prompt is none of those the engine's chat answers build (``send``: a user message, then
        the assistant's opening; ``continue_answer``): it is built as ids (:func:`prompt_ids`) and an
        answer completes them as a raw prompt."""
        return self.closed_answer or not (self.continuing or self.generation_prompt)

    def has_media(self) -> bool:
        return bool(self.attachments) or any(m.attachments for m in self.history)


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


@dataclass(frozen=True)
class TemplateMode:
    """How a conversation's prompt ends (:func:`template_mode`)."""

    continuing: bool  # the last message, an assistant's, left open: the answer continues it
    generation_prompt: bool  # the assistant's opening at the end (never while continuing)


def template_mode(request: TemplateFields) -> TemplateMode:
    """vLLM's ``add_generation_prompt`` (default true) and ``continue_final_message`` (default false)
    for ``request.messages``, as ``/v1/chat/completions`` and ``/tokenize`` both read them.

    Where neither says otherwise, a last assistant message is continued, as this server and
    llama-server always did (Open WebUI's "Continue response" sends the answer so far, and no field):
    ``continue_final_message`` left out counts as true for it unless ``add_generation_prompt`` is
    given true. Given, they are vLLM's: ``continue_final_message`` false closes a last assistant message
    and the prompt goes on after it (with the assistant's opening unless ``add_generation_prompt`` is
    false); ``add_generation_prompt`` false leaves the assistant's opening out.

    Raises:
        APIError: 400 ``invalid_value`` on ``continue_final_message`` when it is true and
            ``add_generation_prompt`` is not false, or the last message is not the assistant's.
    """
    add, keep_open = request.add_generation_prompt, request.continue_final_message
    if keep_open and add is not False:  # as vLLM answers it (its add_generation_prompt defaults to true)
        raise APIError(400, "add_generation_prompt and continue_final_message cannot both be true: set "
                       "add_generation_prompt to false to continue the last message", "invalid_value",
                       "continue_final_message")
    last_is_answer = request.messages[-1].role == "assistant"
    if keep_open and not last_is_answer:
        raise APIError(400, "continue_final_message needs the last message to be the assistant's",
                       "invalid_value", "continue_final_message")
    continuing = last_is_answer and keep_open is not False and add is not True
    return TemplateMode(continuing, generation_prompt=not continuing and add is not False)


async def to_turns(request: ChatRequest | TokenizeRequest, media: MediaStore, caps: Capabilities,
                   config: ServerConfig, answers: AnswerIds | None = None) -> Turns:
    """Check and convert ``request.messages``; APIError 400/413 for what the model cannot take
    (:func:`template_mode`'s 400s first). Assistant messages found in ``answers`` carry the token ids
    they were generated as."""
    mode = template_mode(request)
    _check_media_count(request, config)
    pending: list[PendingImage] = []
    try:
        return await _to_turns(request, media, caps, answers, pending, mode)
    except BaseException:
        media.settle(pending)  # new photos of a request refused after them: kept or deleted on their own
        raise


async def _to_turns(request: ChatRequest | TokenizeRequest, media: MediaStore, caps: Capabilities,
                    answers: AnswerIds | None, pending: list[PendingImage], mode: TemplateMode) -> Turns:
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
        if not mode.continuing:  # closed (vLLM's continue_final_message false): the prompt goes on after it
            turns = Turns("\n\n".join(system), messages, "", detail=detail, all_images_low=all_images_low,
                          pending=pending, closed_answer=True, generation_prompt=mode.generation_prompt)
            refuse_raw_media(turns, request)  # (no engine prompt of media builds it: prompt_ids)
            return turns
        # Continued where its text ends (vLLM's continue_final_message, llama-server's prefill). Its
        # ids as this server generated them would not be replayed: the open message is text.
        last = messages[-1]
        messages[-1] = HistoryMessage("assistant", last.text, last.attachments, None, last.text_parts)
        return Turns("\n\n".join(system), messages, "", detail=detail, all_images_low=all_images_low,
                     pending=pending, continuing=True, generation_prompt=False)
    last = messages.pop()
    return Turns("\n\n".join(system), messages, last.text, list(last.attachments), detail, all_images_low,
                 pending=pending, text_parts=last.text_parts, generation_prompt=mode.generation_prompt)


def refuse_raw_media(turns: Turns, request: TemplateFields) -> None:
    """APIError 400 ``unsupported_parameter`` for a conversation with images or videos whose prompt
    is :attr:`Turns.raw`: such a prompt is built as ids, and ids carry no pixels (a completion of
    them is refused for its image tokens), nor do the engine's chat answers build it."""
    if not (turns.raw and turns.has_media()):
        return
    if turns.closed_answer:
        field = "continue_final_message" if request.continue_final_message is False else "add_generation_prompt"
        what = f"{field} {str(getattr(request, field)).lower()} with a last assistant message (answered after it)"
    else:
        field, what = "add_generation_prompt", "add_generation_prompt false"
    raise APIError(400, f"{what} takes a conversation without images or videos: the server builds that prompt as "
                   "token ids, which carry no pictures", "unsupported_parameter", field)


async def prompt_ids(state: Any, turns: Turns) -> list[int]:
    """The token ids of ``turns``' prompt, exactly as a chat request prefills it (``/tokenize``'s
    messages; a :attr:`Turns.raw` chat request completes them): the engine's
    ``EngineService.prompt_ids`` (beside the engine, unless there is a video), or for a closed last
    answer, which that does not build, ``ChatSession.prompt_ids`` of the conversation's turns on the
    engine thread (text only: :func:`refuse_raw_media`). Takes a place in the queue while it runs; new
    images are confirmed (their 400 if broken inside their pixels). ``state``: the app's ServerState.

    Raises:
        APIError: 400 for media the engine cannot read, 429 when the queue is full, as the engine's
            errors (:func:`server.errors.engine_result`).
    """
    service = state.bridge.service
    answer = state.bridge.admit()  # a place in the queue (with a video, the engine thread builds it)
    try:
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        # Retrieved even when the request is refused before awaiting it (a photo broken inside its pixels).
        done.add_done_callback(lambda f: f.cancelled() or f.exception())

        def settle(result, error) -> None:
            def set_() -> None:
                if not done.done():
                    done.set_exception(error) if error is not None else done.set_result(result)
            loop.call_soon_threadsafe(set_)
        if turns.closed_answer:
            history, system, add = list(turns.history), turns.system, turns.generation_prompt

            def build(session: Any) -> list[int]:
                from engine.chat import Turn  # engine thread (torch is loaded there)

                return session.prompt_ids(
                    [Turn(m.role, m.text, token_ids=None if m.token_ids is None else list(m.token_ids))
                     for m in history], system or None, False, add)
            service.call(build, settle)
        else:
            # A chat request reads its new images at the request's finest detail (params_for).
            service.prompt_ids(
                turns.history, turns.system, turns.text, turns.attachments, GenerationParams(image_detail=turns.detail),
                settle, text_parts=turns.text_parts, continuing=turns.continuing,
                add_generation_prompt=turns.generation_prompt)
        if turns.pending:
            await state.media.confirm(turns.pending)  # a photo broken inside its pixels: its 400
        return await engine_result(done)
    finally:
        answer.release()


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
