"""Raw text completion (``/v1/completions``): continue a prompt without the chat template.

Runs on a :class:`~engine.chat.ChatSession`'s model and cache through its token loop, so sampling,
stop tokens, cancellation, stats and prefix reuse (a prompt that extends the last one prefills only
the new tokens) behave exactly as in chat. It drops the session's turns: a following chat request
rebuilds its conversation (the service's ``set_history`` does that).

With ``params.prompt_logprobs`` (the API's ``echo`` with ``logprobs``) the prompt's own tokens are
scored (:mod:`engine.prompt_logprobs`) and sent in one :class:`PromptLogprobsEvent` once the prompt
is read, before the first token; with ``max_new_tokens`` 0 that is all: no answer is generated (nor
prefilled into the session's cache), and the answer ends with ``"length"``. With
``params.echo_prompt`` alone the event carries the prompt's tokens unscored (``logprob`` ``None``):
the text of a prompt sent as token ids, for the API's ``echo``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from engine.api.backend import ProgressEvent
from engine.api.errors import InvalidPromptError, PromptTooLongError
from engine.api.events import DoneEvent, GenerationEvent, GenerationParams, GenerationStats, PromptLogprobsEvent, TokenEvent
from engine.cancellation import Cancelled
from engine.chat import Prompt
from engine.tokenizer import StreamingDetokenizer


def complete_text(session: Any, prompt: str | list[int], params: GenerationParams) -> Iterator[GenerationEvent]:
    """Stream the continuation of ``prompt`` (events as :meth:`ChatSession.send`).

    ``prompt``: text, or the token ids themselves (the API's token-id prompts: lm-evaluation-harness
    sends its own tokenization), which go to the model as they are, neither decoded nor encoded again,
    so that a scored prompt is scored on exactly those tokens. Either way the rest is one path.

    Special-token strings in a text ``prompt`` (``<|im_start|>``, ``<end_of_utterance>``) are their
    ids, as transformers' ``tokenizer(prompt)`` encodes added tokens and as vLLM and llama-server read
    a completion prompt: a client that renders a chat template itself sends them as text. (A chat
    message's text never becomes a special token: :meth:`Tokenizer.encode_chat`.)

    Raises (before anything is yielded):
        InvalidPromptError (a ValueError): the prompt is empty, holds an id that is no integer in
            ``[0, vocabulary size)`` (named in the message), or holds the model's image token (``<image>``): a completion
            has no image to fill its slot.
        PromptTooLongError: the prompt does not fit the context (with room for one token; a
            prompt that is only scored, ``max_new_tokens`` 0, may fill it).
    """
    t0 = time.perf_counter()
    capacity = session.cache.capacity
    least = session.tokenizer.least_tokens(len(prompt)) if isinstance(prompt, str) else 0
    if least > capacity:  # megabytes of text: refused without the seconds its encoding would hold the engine
        raise PromptTooLongError(f"the prompt has at least {least} tokens but the context holds {capacity}")
    ids = session.tokenizer.encode(prompt, allow_special=True) if isinstance(prompt, str) else _checked(session, prompt)
    if not ids:
        raise InvalidPromptError("the prompt is empty")
    image_id = session._image_id  # None: a text-only model
    if image_id is not None and image_id in ids:
        # The model fills every image-token position with an image's features; without one it
        # could only fail (or read a slot no image was meant for).
        name = session.tokenizer.id_to_token(image_id)
        raise InvalidPromptError(f"the prompt holds the image token {name}, but a text completion takes no "
                                 "images (send images in a chat message)")
    if len(ids) > capacity or (len(ids) == capacity and params.max_new_tokens > 0):
        raise PromptTooLongError(f"the prompt has {len(ids)} tokens but the context holds {capacity}")
    session.turns.clear()
    session._cancel.clear()
    if params.prompt_logprobs is not None or params.echo_prompt or params.max_new_tokens == 0:
        return _scored(session, ids, params, t0)
    # ChatSession's own loop: keys of plain tokens are the ids themselves, so the cache's common
    # prefix with the last prompt (chat or raw) is found and reused as for a chat turn.
    return session._generate(Prompt(ids, list(ids), [], []), params, t0, [])


def _checked(session: Any, ids: list[int]) -> list[int]:
    """``ids`` as a new list, when each is an ``int`` (not a ``bool``) that both the tokenizer and
    the model's embeddings have; else InvalidPromptError naming the first that is not (an id past the
    embeddings would fail in the model: on a GPU, an index error that takes the device down)."""
    vocab = min(session.tokenizer.vocab_size, session.model.metadata.text.vocab_size)
    for n, token in enumerate(ids):
        is_int = isinstance(token, int) and not isinstance(token, bool)
        if not (is_int and 0 <= token < vocab):
            what = token if is_int else f"{token!r} ({type(token).__name__})"
            raise InvalidPromptError(f"the prompt's token {n} is {what}: token ids are integers in "
                                     f"[0, {vocab}), the model's vocabulary")
    return list(ids)


def _scored(session: Any, ids: list[int], params: GenerationParams, t0: float) -> Iterator[GenerationEvent]:
    """The prompt's PromptLogprobsEvent (with ``params.prompt_logprobs``: scored; with
    ``params.echo_prompt`` alone: its tokens' text only), then the answer (none with
    ``max_new_tokens`` 0)."""
    from engine.prompt_logprobs import score_prompt  # torch: imported on the engine thread only

    event = None
    try:
        if params.prompt_logprobs is not None:
            scores = score_prompt(session.model, ids, params.prompt_logprobs, session._cancel)
            event = PromptLogprobsEvent(prompt_tokens(session.tokenizer, ids, scores))
        elif params.echo_prompt:
            event = PromptLogprobsEvent(prompt_tokens(session.tokenizer, ids, [(None, [])] * (len(ids) - 1)))
        if params.max_new_tokens == 0:
            session._checkpoint(ProgressEvent("prefill", len(ids), len(ids)))  # the prompt is read
    except Cancelled:
        yield DoneEvent("cancelled", GenerationStats(prompt_tokens=len(ids), total_s=time.perf_counter() - t0))
        return
    if params.max_new_tokens == 0:
        elapsed = time.perf_counter() - t0
        if event is not None:
            yield event
        yield DoneEvent("length", GenerationStats(prompt_tokens=len(ids), ttft_s=elapsed, total_s=elapsed))
        return
    answer = session._generate(Prompt(ids, list(ids), [], []), params, t0, [])
    first = next(answer)  # the prompt read (a server starts its response then), and the first token
    if event is not None and (isinstance(first, TokenEvent) or first.finish_reason in ("stop", "length")):
        yield event  # not before an answer that failed or was cancelled: its error comes alone
    yield first
    yield from answer


def prompt_tokens(tokenizer: Any, ids: list[int],
                  scores: list[tuple[float | None, list[tuple[int, float]]]]) -> tuple[TokenEvent, ...]:
    """The prompt's tokens as PromptLogprobsEvent has them: ``scores`` (of ``ids[1:]``, as
    :func:`~engine.prompt_logprobs.score_prompt` gives them; ``(None, [])`` for unscored tokens)
    with each token's text and bytes. Their texts together are ``tokenizer.decode(ids)``: a
    character the prompt's last tokens leave unfinished (a token-id prompt may) is the last one's
    U+FFFD."""
    detok, token_bytes = StreamingDetokenizer(tokenizer), tokenizer.token_bytes
    out = [TokenEvent(detok.add(ids[0]), ids[0], None, (), token_bytes(ids[0]))]
    for token, (logprob, best) in zip(ids[1:], scores):
        out.append(TokenEvent(detok.add(token), token, logprob, tuple((token_bytes(i), lp) for i, lp in best),
                              token_bytes(token)))
    rest = detok.flush()
    if rest:
        out[-1] = replace(out[-1], text=out[-1].text + rest)
    return tuple(out)
