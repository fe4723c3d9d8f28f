"""``POST /tokenize``, ``POST /detokenize`` and ``GET /tokenizer_info``: the model's own tokenizer, as
vLLM serves it (and as lm-evaluation-harness's ``local-completions`` finds it: with its default
``tokenizer_backend="auto"`` it asks for ``/tokenizer_info`` and tries ``/tokenize``, then tokenizes
every request with them instead of a Hugging Face tokenizer it would have to be given).

A text is tokenized as ``/v1/completions`` reads its prompt (special-token strings are those tokens)
on a worker thread, outside the engine's queue, with the GIL released (``Tokenizer.encode_aside``): a
long text neither waits for answers nor holds up the event loop. Chat ``messages`` are converted as a
chat request's (``conversation.to_turns``: the same checks, the same media handling, the same
reading of ``add_generation_prompt`` and ``continue_final_message``) and their prompt is built by
``conversation.prompt_ids`` (beside the engine, not behind running answers, unless there is a video
or a closed last answer): exactly the ids a ``/v1/chat/completions`` request with these messages and
fields prefills, images and videos counted as it reads them, answers this server generated replayed
as their generated ids.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from server.bridge import model_loading
from server.conversation import prompt_ids, refuse_raw_media, to_turns
from server.errors import APIError
from server.json_body import JSONBodyRoute
from server.schemas import DetokenizeRequest, TokenizeRequest

router = APIRouter(route_class=JSONBodyRoute)  # bodies parsed by pydantic-core (json_body)

#: The longest text ``/tokenize`` takes (characters; the messages' texts together for the chat
#: form), and the most ids ``/detokenize`` takes: ~0.6 s of a CPU core (this project's), 30 times an
#: 8k context. Counting a text longer than the context is allowed (the client compares ``count``
#: with ``max_model_len``); a text the model could never read whole is not worth that much work.
MAX_TOKENIZE_CHARS = 1 << 20


def _json(body: dict) -> Response:
    """A JSON response made here (on a worker thread for the long ones: a million ids take ~0.1 s)."""
    return Response(json.dumps(body, ensure_ascii=False, separators=(",", ":")), media_type="application/json")


def _tokenizer(request: Request, model: str | None) -> tuple[Any, Any]:
    """The state and the loaded tokenizer, after the model check (404) and the load state (503)."""
    state = request.app.state.smolchat
    if model is not None:
        state.check_model(model)
    state.bridge.require_ready()
    tokenizer = state.bridge.service.tokenizer()
    if tokenizer is None:  # (a service whose model is being replaced)
        raise model_loading()
    return state, tokenizer


def _answer(state: Any, tokenizer: Any, ids: list[int], token_strs: bool) -> Response:
    return _json({"count": len(ids), "max_model_len": state.context_length(), "tokens": ids,
                  "token_strs": [tokenizer.id_to_token(i) or "" for i in ids] if token_strs else None})


@router.post("/tokenize", summary="Token ids of a text or of chat messages (vLLM's /tokenize)")
async def tokenize(body: TokenizeRequest, request: Request):
    state, tokenizer = _tokenizer(request, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "give either prompt (a text) or messages (a chat), not both" if body.prompt is not None
                       else "prompt is required: the text to tokenize (or messages, a chat)", "invalid_value",
                       "prompt")
    if body.prompt is not None:
        if len(body.prompt) > MAX_TOKENIZE_CHARS:
            raise APIError(400, f"prompt has {len(body.prompt)} characters; /tokenize takes at most "
                           f"{MAX_TOKENIZE_CHARS}", "invalid_value", "prompt")
        add = True if body.add_special_tokens is None else body.add_special_tokens
        prompt = body.prompt

        def run() -> Response:
            return _answer(state, tokenizer, tokenizer.encode_aside(prompt, add), body.return_token_strs)
        return await asyncio.to_thread(run)
    return await _tokenize_chat(body, request, state, tokenizer)


async def _tokenize_chat(body: TokenizeRequest, request: Request, state: Any, tokenizer: Any) -> Response:
    chars = sum(len(m.content) if isinstance(m.content, str) else
                sum(len(p.text) for p in m.content if getattr(p, "type", "") == "text")
                for m in body.messages if m.content is not None)
    if chars > MAX_TOKENIZE_CHARS:
        raise APIError(400, f"the messages hold {chars} characters of text; /tokenize takes at most "
                       f"{MAX_TOKENIZE_CHARS}", "invalid_value", "messages")
    # add_generation_prompt and continue_final_message are read (and refused) as a chat request reads them.
    turns = await to_turns(body, state.media, state.bridge.capabilities, state.config, state.answers)
    try:
        refuse_raw_media(turns, body)  # (a prompt a chat request refuses is not counted: trial 78 R3)
        ids = await prompt_ids(state, turns)
    except BaseException:
        state.media.settle(turns.pending)
        raise
    if body.add_special_tokens:
        before, after = await asyncio.to_thread(tokenizer.special_affixes)
        ids = [*before, *ids, *after]
    return await asyncio.to_thread(_answer, state, tokenizer, ids, body.return_token_strs)


@router.post("/detokenize", summary="The text of token ids (vLLM's /detokenize)")
async def detokenize(body: DetokenizeRequest, request: Request):
    state, tokenizer = _tokenizer(request, body.model)
    tokens = body.tokens
    if len(tokens) > MAX_TOKENIZE_CHARS:
        raise APIError(400, f"tokens holds {len(tokens)} ids; /detokenize takes at most {MAX_TOKENIZE_CHARS}",
                       "invalid_value", "tokens")
    vocab = state.bridge.service.vocab_size()

    def run() -> Response:
        for n, token in enumerate(tokens):
            if not (isinstance(token, int) and not isinstance(token, bool) and 0 <= token < vocab):
                shown = json.dumps(token)
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                raise APIError(400, f"tokens[{n}] is {shown}: token ids are integers in [0, {vocab}), the model's "
                               "vocabulary", "invalid_value", "tokens")
        return _json({"prompt": tokenizer.decode_aside(tokens)})
    return await asyncio.to_thread(run)


@router.get("/tokenizer_info", summary="The tokenizer's special tokens and chat template (vLLM's /tokenizer_info)")
async def tokenizer_info(request: Request):
    state, tokenizer = _tokenizer(request, None)
    specials = dict(tokenizer.special_tokens_map)
    info: dict[str, Any] = {"tokenizer_class": "tokenizers.Tokenizer",
                            # lm-evaluation-harness requires the key (null when the tokenizer names none)
                            "bos_token": None, "eos_token": None, "pad_token": None, "unk_token": None,
                            **specials,
                            "model_max_length": state.context_length(), "vocab_size": state.bridge.service.vocab_size()}
    if tokenizer.chat_template:
        info["chat_template"] = tokenizer.chat_template
    return info
