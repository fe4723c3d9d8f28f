"""``POST /v1/chat/completions`` and ``POST /v1/completions``, streamed (SSE) and not.

The SSE contract: every ``data:`` line is JSON except the final ``[DONE]``; the first chunk's delta
carries the role; the last choice chunk carries ``finish_reason``; with ``stream_options.include_usage``
one more chunk with ``"choices": []`` and the usage comes before ``[DONE]``. A refusal (a prompt too
long, unreadable media, an engine failure in the vision tower) is a plain HTTP error: the response
starts only once the engine has read the prompt (streamed) or with the first event (not streamed).
An error after that is one ``data: {"error": ...}`` event, and the stream ends there.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine.api import PromptLogprobsEvent, TokenEvent
from server.answer_stream import Outcome, first_event, notice_of, pieces, stops_of, usage
from server.bridge import Answer, ClientDisconnected
from server.conversation import Turns, params_for, prompt_ids, refuse_raw_media, to_turns
from server.errors import APIError
from server.json_body import JSONBodyRoute
from server.metrics import STATUS_KEY
from server.schemas import ChatRequest, CompletionRequest

router = APIRouter(route_class=JSONBodyRoute)  # bodies parsed by pydantic-core (json_body)
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


# Response ids: 128 random bits as uuid4().hex gives them, from a generator of their own (seeded from
# os.urandom once). uuid4 reads os.urandom per response, a system call that lets the GIL go, and the
# event loop may then wait for the engine thread to give it back before the response can start.
# Ids need to be unique, not secret.
_IDS = random.Random()


def response_id(prefix: str) -> str:
    """``prefix`` + 32 hex digits, e.g. ``chatcmpl-...``."""
    return f"{prefix}{_IDS.getrandbits(128):032x}"


class EventStream(StreamingResponse):
    """An SSE response written straight from its generator, whose ``answer`` is cancelled as soon as
    the client disconnects.

    Starlette's StreamingResponse (on uvicorn, whose ASGI spec version is 2.3) runs the generator in
    an anyio task group beside a second task that waits for the client to disconnect; making the
    group and starting its task is ~0.15 ms of the event loop's time (2-core dev VM) at each stream's
    start, with the GIL held while the first token is on its way. Here the watching task (a plain
    asyncio task) starts only once the first chunk is written, off that way; before it, the
    generator asks for its client itself (:func:`~server.answer_stream.pieces` with
    ``request.is_disconnected``, at most every ``DISCONNECT_POLL_S``) and ends with
    :class:`ClientDisconnected`. Polling alone let a fast engine run on for a quarter of a second
    (over 1,000 tokens of the tiny model on a CPU) for a client that had gone.
    """

    def __init__(self, content: AsyncIterator[str], answer: Answer, **kwargs) -> None:
        super().__init__(content, **kwargs)
        self.answer = answer

    async def __call__(self, scope, receive, send) -> None:
        watcher: asyncio.Task | None = None

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.answer.cancel()  # the engine stops at its next token; the generator ends with it

        async def sending(message: dict) -> None:
            nonlocal watcher
            await send(message)
            if watcher is None and message["type"] == "http.response.body":
                watcher = asyncio.ensure_future(watch())
        try:
            await self.stream_response(sending)
        except ClientDisconnected:
            return
        finally:
            if watcher is not None:
                watcher.cancel()
        if self.background is not None:
            await self.background()


def token_text(raw: bytes) -> str:
    """A token's ``token`` string in logprobs: its text when its bytes are whole UTF-8 characters,
    else ``"bytes:"`` and each byte as ``\\xNN`` (``b"\\xf0\\x9f"`` -> ``bytes:\\xf0\\x9f``), as
    OpenAI writes a token that holds part of a character (its ``bytes`` field carries the bytes
    themselves). Decoding with replacement would make every such token the same ``"\ufffd"``: one
    key for different tokens in /v1/completions' ``top_logprobs``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def _chat_logprobs(event: TokenEvent | None) -> dict | None:
    if event is None or event.logprob is None:
        return None

    def entry(raw: bytes, logprob: float) -> dict:
        return {"token": token_text(raw), "logprob": logprob, "bytes": list(raw)}
    return {"content": [{**entry(event.token_bytes, event.logprob),
                         "top_logprobs": [entry(raw, lp) for raw, lp in event.top_logprobs]}]}


def _text_logprobs(events: Sequence[TokenEvent], start: int = 0) -> dict:
    """The legacy completions shape: parallel lists per token; ``text_offset`` is where each token's
    text starts in the choice's whole text, the echoed prompt included (``start``: where the first
    does; a token holding part of a character starts where that character does). A token without
    a logprob (an echoed prompt's first: nothing comes before it) has ``null`` for both its
    ``token_logprobs`` and its ``top_logprobs`` entry, as OpenAI and vLLM write it."""
    offsets, at = [], start
    for e in events:
        offsets.append(at)
        at += len(e.text)
    return {"tokens": [token_text(e.token_bytes) for e in events], "token_logprobs": [e.logprob for e in events],
            "top_logprobs": [None if e.logprob is None else {token_text(raw): lp for raw, lp in e.top_logprobs}
                             for e in events],
            "text_offset": offsets}


def _joined(first: dict, second: dict) -> dict:
    """Two :func:`_text_logprobs` dicts as one (an echoed prompt's, then its completion's)."""
    return {key: first[key] + second[key] for key in first}


# Other servers' output constraints (both endpoints), and what each is, for the 400's message.
CONSTRAINTS = {"guided_json": "vLLM's guided decoding", "guided_regex": "vLLM's guided decoding",
               "guided_choice": "vLLM's guided decoding", "guided_grammar": "vLLM's guided decoding",
               "structured_outputs": "vLLM's structured outputs", "grammar": "llama.cpp's grammar",
               "json_schema": "llama.cpp's JSON schema"}
# OpenAI's chat parameters for what this server does not do.
CHAT_FEATURES = {"prediction": "prediction (Predicted Outputs) is not supported by this server",
                 "web_search_options": "web search is not supported: this server answers from the model alone"}


def _given(value) -> bool:
    """A value that asks for something: not null, ``""`` or ``[]`` (clients send them for what they
    leave unset). An object asks even when empty: ``"web_search_options": {}`` is OpenAI's way to turn
    web search on with its defaults, ``"json_schema": {}`` llama.cpp's "any JSON"."""
    return value is not None and not (isinstance(value, str | list) and not value)


def refuse_unsupported(body: ChatRequest | CompletionRequest) -> None:
    """APIError 400 for what a client asks and this server cannot do (``unsupported_parameter``) and
    for values OpenAI itself refuses (``invalid_value``); empty or default values pass, as clients
    send them (``tools: []``, ``tool_choice: "none"``, ``response_format: {"type": "text"}``,
    ``logit_bias: {}`` or all zeros)."""
    if body.logit_bias and any(bias != 0 for bias in body.logit_bias.values()):
        raise APIError(400, "logit_bias is not supported by this server", "unsupported_parameter", "logit_bias")
    if body.stream_options is not None and not body.stream:  # as OpenAI and vLLM answer it
        raise APIError(400, "stream_options is only allowed with \"stream\": true", "invalid_value", "stream_options")
    for name, what in CONSTRAINTS.items():
        if _given(getattr(body, name)):
            raise APIError(400, f"{name} ({what}) is not supported: this server does not constrain its output "
                           "(ask for the format in the prompt instead)", "unsupported_parameter", name)
    if body.response_format is not None:
        kind = body.response_format.get("type")
        if kind in ("json_object", "json_schema"):
            raise APIError(400, f"response_format {kind} is not supported: this server does not constrain its "
                           "output to JSON (ask for JSON in the prompt instead)", "unsupported_parameter",
                           "response_format")
        if kind != "text":
            raise APIError(400, f"response_format.type must be \"text\", \"json_object\" or \"json_schema\", "
                           f"got {json.dumps(kind)}", "invalid_value", "response_format")
    if not isinstance(body, ChatRequest):
        if body.best_of not in (None, 1):
            raise APIError(400, "best_of must be 1: this server generates one completion per request",
                           "invalid_value", "best_of")
        if body.suffix:
            raise APIError(400, "suffix is not supported: this server completes text, it does not insert it",
                           "unsupported_parameter", "suffix")
        return
    if body.modalities and any(kind != "text" for kind in body.modalities):
        raise APIError(400, "this server answers in text only: leave modalities out or set it to [\"text\"]",
                       "unsupported_parameter", "modalities")
    if body.audio is not None:
        raise APIError(400, "audio output is not supported: this server answers in text", "unsupported_parameter",
                       "audio")
    for name in ("tools", "functions"):
        if getattr(body, name) and body.tool_choice != "none" and body.function_call != "none":
            raise APIError(400, f"this server does not call tools (functions): leave {name} out or set "
                           "tool_choice to \"none\"", "unsupported_parameter", name)
    for name, choice, tools in (("tool_choice", body.tool_choice, body.tools),
                                ("function_call", body.function_call, body.functions)):
        if isinstance(choice, str) and choice not in ("none", "auto", "required"):
            raise APIError(400, f"{name} must be \"none\", \"auto\", \"required\" or a named function, got "
                           f"{json.dumps(choice)}", "invalid_value", name)
        if not tools and (choice == "required" or isinstance(choice, dict)):
            raise APIError(400, f"{name} names or requires a tool, but the request has none", "invalid_value", name)
    for name, message in CHAT_FEATURES.items():
        if _given(getattr(body, name)):
            raise APIError(400, message, "unsupported_parameter", name)


async def _start(request: Request, model: str, submit: Callable[[Answer], object],
                 stream: bool, confirm: Callable[[], Awaitable[None]] | None = None,
                 prompt_param: str = "messages", all_images_low: bool = False) -> tuple[Answer, object]:
    """Admit a request (429/503), queue it with ``submit(answer)``, await ``confirm()`` (new photos'
    decodes, which the engine waits for too: a refusal raises its APIError and cancels the answer)
    and its first event, or for a stream only its start (``None``, see
    :func:`~server.answer_stream.first_event`). A non-streamed answer sends nothing before its end:
    the engine thread is never held for it. A prompt too long for the context is named by
    ``prompt_param`` (the request field that holds the prompt), as OpenAI's error names it, and
    suggests 'detail': 'low' only where not ``all_images_low`` (every image already was)."""
    state = request.app.state.smolchat
    state.check_model(model)
    answer = state.bridge.admit()
    if not stream:
        answer.first_sent()
    try:
        answer.handle = submit(answer)
        if confirm is not None:
            await confirm()
        return answer, await first_event(answer, request.is_disconnected, stream, all_images_low)
    except APIError as exc:
        answer.cancel()
        if exc.code == "context_length_exceeded" and exc.param is None:
            exc.param = prompt_param
        raise
    except BaseException:
        answer.cancel()
        raise


def _finish(request: Request, outcome: Outcome, streamed: bool) -> None:
    """After an answer's request: a stream's error status for the request count, and a new reading
    of the KV cache. (The answer's stats reach the metrics from its sink: ``Answer.sink``.)"""
    state = request.app.state.smolchat
    if streamed and outcome.error is not None:  # its header said 200: count the error's status
        request.scope[STATUS_KEY] = outcome.error.status
    state.bridge.refresh_kv()  # queued behind the answer: /metrics shows the cache after it


def _remember(state, text: str, outcome: Outcome, continuing: bool = False) -> None:
    """Keep the answer's token ids for when the client sends it back as history (AnswerIds); not a
    continuation's, which comes back joined to the text it continued."""
    if not outcome.cut_at_stop and not continuing:
        state.answers.remember(text, outcome.token_ids)


@router.post("/v1/chat/completions", summary="Chat completion (OpenAI-compatible), streamed or not")
async def chat_completions(body: ChatRequest, request: Request):
    state = request.app.state.smolchat
    state.check_model(body.model)
    state.bridge.require_ready()
    refuse_unsupported(body)
    turns = await to_turns(body, state.media, state.bridge.capabilities, state.config, state.answers)
    try:
        return await _chat(body, request, turns)
    except BaseException:
        state.media.settle(turns.pending)  # refused before its photos were confirmed (a 400, a 429)
        raise


def _submit_turns(service, turns: Turns, params, answer: Answer):
    """Queue the answer to ``turns`` as the engine's chat builds it: the history, then the new user
    message (``send``) or the last answer continued (``continue_answer``)."""
    # Back to back: no other request's history (ours, or the app's when it shares the service)
    # can slip in between.
    with service.atomic():
        service.set_history(turns.history, system_prompt=turns.system)
        if turns.continuing:
            return service.continue_answer(params, answer.sink, system_prompt=turns.system)
        return service.send(turns.text, turns.attachments, params, answer.sink, system_prompt=turns.system,
                            text_parts=turns.text_parts)


async def _chat(body: ChatRequest, request: Request, turns: Turns):
    state = request.app.state.smolchat
    if body.top_logprobs is not None and not body.logprobs:  # as OpenAI answers it
        raise APIError(400, "top_logprobs needs logprobs: true", "invalid_value", "top_logprobs")
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    params = params_for(body, body.max_completion_tokens or body.max_tokens, state.bridge.capacity, state.config,
                        turns.detail, logprobs,
                        "max_completion_tokens" if body.max_completion_tokens else "max_tokens")
    service = state.bridge.service
    if turns.raw:
        # No prompt of the engine's chat answers (add_generation_prompt false, or a closed last answer
        # answered after it): built as ids, exactly /tokenize's, and completed as a raw prompt.
        refuse_raw_media(turns, body)
        ids = await prompt_ids(state, turns)

        def submit(answer: Answer):
            return service.complete(ids, params, answer.sink)
    else:
        def submit(answer: Answer):
            return _submit_turns(service, turns, params, answer)

    answer, first = await _start(request, body.model, submit, body.stream,
                                 (lambda: state.media.confirm(turns.pending)) if turns.pending else None,
                                 all_images_low=turns.all_images_low)
    cid, created, stops, outcome = response_id("chatcmpl-"), int(time.time()), stops_of(body.stop), Outcome()
    base = {"id": cid, "created": created, "model": state.model_id, "system_fingerprint": state.fingerprint}
    videos = [a.path for a in turns.attachments if a.kind == "video"]  # how an answer's notice names them

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        # With include_usage, OpenAI's chunks carry "usage": null until the usage chunk.
        no_usage = {"usage": None} if include_usage else {}

        def chunk(delta: dict, finish: str | None = None, logprobs: dict | None = None, extra: dict | None = None) -> str:
            return sse({**base, "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
                        **no_usage, **(extra or {})})

        async def stream() -> AsyncIterator[str]:
            # The role chunk goes out with the first text (or the end) in one write: one send and
            # one wake-up of the client fewer on the way to its first token.
            role = chunk({"role": "assistant", "content": ""})
            try:
                streamed, held = [], []
                async for text, event in pieces(answer, first, stops, outcome, request.is_disconnected):
                    streamed.append(text)
                    lp = _chat_logprobs(event) if logprobs is not None else None
                    if lp:
                        yield role + chunk({"content": text}, logprobs=lp)
                        role = ""
                        answer.first_sent()
                        continue
                    held.append(text)
                    # Tokens that arrived meanwhile go out in one chunk (one JSON encode and one write
                    # instead of one per token when the engine is faster than this loop).
                    if answer.ready and isinstance(answer.events[0], TokenEvent):
                        continue
                    if "".join(held):
                        yield role + chunk({"content": "".join(held)})
                        role = ""
                    held.clear()
                    answer.first_sent()  # written (or nothing to write yet): the engine thread goes on
                if "".join(held):
                    yield role + chunk({"content": "".join(held)})
                    role = ""
                if outcome.error is not None:  # alone when nothing was sent: no empty role chunk first
                    yield sse(outcome.error.body())
                    return
                _remember(state, "".join(streamed), outcome, turns.continuing or turns.raw)
                # The finish chunk (with the answer's notice), the usage and [DONE] in one write, too.
                yield role + chunk({}, outcome.finish_reason, extra=notice_of(outcome, videos)) + (sse({
                    **base, "object": "chat.completion.chunk", "choices": [], "usage": usage(outcome)})
                    if include_usage else "") + "data: [DONE]\n\n"
            finally:
                answer.cancel()  # a no-op when it finished; else the client left: stop generating
                _finish(request, outcome, True)
        return EventStream(stream(), answer, media_type="text/event-stream", headers=SSE_HEADERS)

    texts, content_lp = [], []
    try:
        async for text, event in pieces(answer, first, stops, outcome, request.is_disconnected):
            texts.append(text)
            lp = _chat_logprobs(event) if logprobs is not None else None
            if lp:
                content_lp += lp["content"]
    finally:
        answer.cancel()
        _finish(request, outcome, False)
    if outcome.error is not None:
        raise outcome.error
    _remember(state, "".join(texts), outcome, turns.continuing or turns.raw)
    return {**base, "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(texts)},
                         "logprobs": {"content": content_lp} if logprobs is not None else None,
                         "finish_reason": outcome.finish_reason}],
            "usage": usage(outcome), **notice_of(outcome, videos)}


#: ``/v1/completions``' answer length when a request gives no ``max_tokens`` (OpenAI's legacy API and
#: vLLM's default: a client that leaves it out gets what it would get there, not a 512-token answer).
COMPLETION_MAX_TOKENS = 16

#: The 400 for a batch: this server answers one completion per request.
ONE_PROMPT = ("prompt: send one prompt (a string, a list of one string, a list of token ids, or a list of one list "
              "of token ids); several prompts in one request are not supported")


def one_prompt(prompt: str | list) -> str | list[int]:
    """The request's prompt: its text, or its token ids (``[1, 2]`` or ``[[1, 2]]``), which go to the
    engine as they are. APIError 400 ``invalid_value`` on ``prompt`` for several prompts, an empty
    one, and an id that is no JSON integer (a float, a bool, a list: nested too deep); whether an
    id is in the vocabulary is the engine's to say (:func:`engine.completion.complete_text`)."""
    if isinstance(prompt, str):
        return prompt
    where = "prompt"
    if len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt, where = prompt[0], "prompt[0]"
        if isinstance(prompt, str):
            return prompt
        if not prompt:
            raise APIError(400, "prompt[0] is an empty list: a prompt of token ids needs at least one",
                           "invalid_value", "prompt")
    elif all(isinstance(item, (str, list)) for item in prompt):
        raise APIError(400, ONE_PROMPT, "invalid_value", "prompt")
    for n, token in enumerate(prompt):
        if not isinstance(token, int) or isinstance(token, bool):  # JSON's true is no token id
            shown = json.dumps(token)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise APIError(400, f"{where}[{n}] is {shown}: a prompt's token ids are integers (a prompt is a string, "
                           "a list of token ids, or a list of one of those)", "invalid_value", "prompt")
    return prompt


@router.post("/v1/completions", summary="Text completion without the chat template, streamed or not")
async def completions(body: CompletionRequest, request: Request):
    state = request.app.state.smolchat
    state.check_model(body.model)
    state.bridge.require_ready()
    refuse_unsupported(body)
    prompt = one_prompt(body.prompt)
    if not prompt:
        raise APIError(400, "the prompt is empty", "invalid_value", "prompt")
    if body.max_tokens == 0 and not body.echo:  # as vLLM: nothing would be answered
        raise APIError(400, "max_tokens 0 completes nothing: it needs \"echo\": true (the prompt alone, scored "
                       "with logprobs)", "invalid_value", "max_tokens")
    # echo with logprobs: the prompt's tokens are scored too (lm-evaluation-harness's loglikelihood)
    scored = body.echo and body.logprobs is not None
    # Without max_tokens, OpenAI's legacy completions (and vLLM's) generate 16 tokens; chat has its own default.
    capacity = state.bridge.capacity
    max_tokens = body.max_tokens if body.max_tokens is not None else (
        max(1, min(COMPLETION_MAX_TOKENS, capacity // 2)) if capacity else COMPLETION_MAX_TOKENS)
    params = params_for(body, max_tokens, state.bridge.capacity, state.config, logprobs=body.logprobs,
                        prompt_logprobs=body.logprobs if scored else None)
    # The echo of token ids is their text, as vLLM echoes it: the engine's tokenizer decodes them,
    # and sends it with the prompt's tokens (scored or not) before the answer.
    echo = (prompt if isinstance(prompt, str) else None) if body.echo else ""
    if echo is None:
        params = replace(params, echo_prompt=True)
    service = state.bridge.service
    answer, first = await _start(request, body.model, lambda a: service.complete(prompt, params, a.sink),
                                 body.stream, prompt_param="prompt")
    cid, created, stops, outcome = response_id("cmpl-"), int(time.time()), stops_of(body.stop), Outcome()
    base = {"id": cid, "object": "text_completion", "created": created, "model": state.model_id,
            "system_fingerprint": state.fingerprint}

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        no_usage = {"usage": None} if include_usage else {}  # as for chat chunks

        def chunk(text: str, finish: str | None = None, logprobs: dict | None = None) -> str:
            return sse({**base, "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}],
                        **no_usage})

        async def stream() -> AsyncIterator[str]:
            nonlocal echo
            try:
                if echo and not scored:
                    yield chunk(echo)
                offset = len(echo or "")  # where the next token's text starts in the whole streamed text
                async for text, event in pieces(answer, first, stops, outcome, request.is_disconnected):
                    if isinstance(event, PromptLogprobsEvent):  # the echo's chunk carries its logprobs (vLLM)
                        if echo is None:  # token ids: their text
                            echo = "".join(e.text for e in event.tokens)
                            offset = len(echo)
                        yield chunk(echo, logprobs=_text_logprobs(event.tokens) if scored else None)
                        answer.first_sent()
                        continue
                    lp = None
                    if event is not None:
                        # The text held back at the end (an unfinished character) is no token: no entry.
                        if body.logprobs is not None and event.logprob is not None:
                            lp = _text_logprobs([event], offset)
                        offset += len(event.text)
                    if text or lp:
                        yield chunk(text, logprobs=lp)
                    answer.first_sent()
                if outcome.error is not None:
                    yield sse(outcome.error.body())
                    return
                yield chunk("", outcome.finish_reason) + (sse({**base, "choices": [], "usage": usage(outcome)})
                                                          if include_usage else "") + "data: [DONE]\n\n"
            finally:
                answer.cancel()
                _finish(request, outcome, True)
        return EventStream(stream(), answer, media_type="text/event-stream", headers=SSE_HEADERS)

    texts, events, prompt_lp = [], [], None
    try:
        async for text, event in pieces(answer, first, stops, outcome, request.is_disconnected):
            if isinstance(event, PromptLogprobsEvent):
                if echo is None:  # token ids: their text
                    echo = "".join(e.text for e in event.tokens)
                if scored:
                    prompt_lp = _text_logprobs(event.tokens)
                continue
            texts.append(text)
            if event is not None and event.logprob is not None:
                events.append(event)
    finally:
        answer.cancel()
        _finish(request, outcome, False)
    if outcome.error is not None:
        raise outcome.error
    echo = echo or ""  # (None: token ids whose answer was cancelled before it began, so without their text)
    logprobs = _text_logprobs(events, len(echo)) if body.logprobs is not None else None
    if prompt_lp is not None:
        logprobs = _joined(prompt_lp, logprobs)
    return JSONResponse({**base, "choices": [{"index": 0, "text": echo + "".join(texts), "logprobs": logprobs,
                                              "finish_reason": outcome.finish_reason}],
                         "usage": usage(outcome)})
