"""``GET /v1/models``, ``GET /v1/model/info``, ``POST /v1/embeddings``, ``GET /health``, ``GET /metrics``.

What the model can do is read from its :class:`~engine.api.Capabilities` (never a hard-coded copy):
``/v1/models`` reports input modalities as llama-server does (``architecture.input_modalities``) and
the context length; ``/v1/model/info`` is shaped like LiteLLM's, so tools that read either know
whether to offer image upload.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import threading
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from server.bridge import DISCONNECT_POLL_S, LOADING_RETRY_S, ClientDisconnected, shutting_down
from server.errors import APIError, engine_result
from server.json_body import JSONBodyRoute
from server.media import DETAILS
from server.schemas import EmbeddingItem, EmbeddingRequest, ImageURL

router = APIRouter(route_class=JSONBodyRoute)  # bodies parsed by pydantic-core (json_body)


def _modalities(caps) -> list[str]:
    return ["text"] + (["image"] if caps.vision else []) + (["video"] if caps.video else [])


def _model_entry(state) -> dict:
    caps, context = state.bridge.capabilities, state.context_length()
    return {
        "id": state.model_id, "object": "model", "created": state.created, "owned_by": "smolchat",
        "context_length": context, "max_model_len": context,
        "architecture": {"input_modalities": _modalities(caps), "output_modalities": ["text"]},
        "meta": {"n_ctx": context, "n_ctx_train": state.bridge.kv.get("trained") or caps.max_context,
                 "capabilities": caps.to_dict(),
                 "status": state.bridge.state, **_engine(state)},
    }


def _engine(state) -> dict:
    """Where and how the model runs: ``device``, ``dtype`` and ``weights`` (``int8`` / ``int4`` when
    quantized, else the dtype): a client comparing answers can tell a quantized model's apart.
    Empty without a loaded model, which the routes calling it answer with 503 before they get here."""
    info = state.bridge.service.info
    return {"device": info.device, "dtype": info.dtype, "weights": info.weights} if info else {}


@router.get("/v1/models", summary="The served model, its input modalities and context length")
async def models(request: Request):
    # 503 while the model loads, as /health and llama-server say: before it, the entry's capabilities
    # are the empty ones (text only, no context), and a client that read them believed the model could
    # not see images (trial 59: Smolchat's own --server refused a photo question for good).
    request.app.state.smolchat.bridge.require_ready()
    return {"object": "list", "data": [_model_entry(request.app.state.smolchat)]}


@router.get("/v1/models/{model:path}", summary="One model by id (the OpenAI client's models.retrieve)")
async def model(model: str, request: Request):
    state = request.app.state.smolchat
    state.check_model(model)  # 404 for another id
    state.bridge.require_ready()  # (as /v1/models)
    return _model_entry(state)


@router.get("/v1/model/info", summary="LiteLLM-style model info (supports_vision, max_input_tokens, ...)")
async def model_info(request: Request):
    state = request.app.state.smolchat
    state.bridge.require_ready()  # (as /v1/models)
    caps, context = state.bridge.capabilities, state.context_length()
    return {"data": [{
        "model_name": state.model_id,
        "litellm_params": {"model": f"openai/{state.model_id}"},
        "model_info": {"id": state.model_id, "key": state.model_id, "mode": "chat", "litellm_provider": "openai",
                       "supports_vision": caps.vision, "supports_video": caps.video,
                       "supports_embeddings": caps.embeddings, "supports_system_messages": True,
                       "supports_response_schema": False, "supports_function_calling": False,
                       "max_input_tokens": context, "max_output_tokens": context, "max_tokens": context,
                       "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, **_engine(state)},
    }]}


def _embed_all(session: Any, inputs: list[tuple[str, list[str], str]],
               stop: threading.Event) -> list[tuple[list[float], int]] | None:
    """Engine thread: one vector and token count per ``(text, image paths, image detail)``
    (engine.embeddings); each input's images are read once. None once ``stop`` is set (checked
    before each input: the client left, or the server is stopping)."""
    from engine.api.errors import PromptTooLongError
    from engine.embeddings import Embedder

    embedder = Embedder(session.model, session.tokenizer, session.processor)
    out = []
    for i, (text, images, detail) in enumerate(inputs):
        if stop.is_set():
            return None
        try:
            ids, mask, processed = embedder.encode(text, images, detail)
        except PromptTooLongError as exc:  # which of the inputs
            raise APIError(400, f"input[{i}]: {exc}", "context_length_exceeded", f"input[{i}]") from None
        out.append((embedder.embed_encoded(ids, mask, processed).tolist(), len(ids)))
    return out


async def _embedded(bridge, answer, inputs: list, request: Request) -> list[tuple[list[float], int]]:
    """:func:`_embed_all` on the engine thread, stopped between inputs when the client leaves
    (asked every ``DISCONNECT_POLL_S``) or the server stops (``answer.cancel``): run to its end for
    nobody, 256 inputs held every later answer for over a minute (trial 66).

    Raises:
        ClientDisconnected: the client left (the app answers 499 to nobody).
        APIError: 503 ``server_shutting_down``; an input too long (400); the engine's errors."""
    stop = answer.stopped
    job = asyncio.ensure_future(bridge.call(lambda session: _embed_all(session, inputs, stop)))
    while not job.done():
        await asyncio.wait({job}, timeout=DISCONNECT_POLL_S)
        if not job.done() and not stop.is_set() and await request.is_disconnected():
            stop.set()
            job.add_done_callback(lambda done: done.cancelled() or done.exception())  # (read: not logged)
            raise ClientDisconnected()
    results = await engine_result(job)
    if results is None:  # stopped: the server is shutting down (a client that left was answered above)
        raise shutting_down(cut=False)
    return results


@router.post("/v1/embeddings", summary="Embeddings of texts (and, as an extension, images)")
async def embeddings(body: EmbeddingRequest, request: Request):
    state = request.app.state.smolchat
    state.check_model(body.model)
    state.bridge.require_ready()
    caps = state.bridge.capabilities
    if not caps.embeddings:
        raise APIError(400, "this model gives no embeddings", "embeddings_not_supported", "model")
    if isinstance(body.input, list) and body.input and isinstance(body.input[0], (int, list)):
        raise APIError(400, "input: token ids are not taken here; send the text (the server's chat template and "
                       "tokenizer read it as a user message)", "unsupported_parameter", "input")
    items = [body.input] if isinstance(body.input, str) else body.input
    with_images = sum(1 for item in items if isinstance(item, EmbeddingItem) and item.image_url is not None)
    if with_images > state.config.max_images:  # each is a vision tower pass on the engine thread
        raise APIError(413, f"{with_images} inputs with images in one request; the limit is "
                       f"{state.config.max_images}", "too_many_images", "input")
    inputs = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = EmbeddingItem(text=item)
        images = []
        if item.image_url is not None:
            if not caps.vision:
                raise APIError(400, "this model takes no images", "images_not_supported", f"input[{i}]")
            url, detail = (item.image_url.url, item.image_url.detail) if isinstance(item.image_url, ImageURL) \
                else (item.image_url, "auto")
            images.append(await state.media.image(url, f"input[{i}].image_url"))
        if not item.text and not images:
            raise APIError(400, f"input[{i}] is empty: give a text or an image", "invalid_value", f"input[{i}]")
        inputs.append((item.text, images, DETAILS[detail] if images else "full"))
    answer = state.bridge.admit()  # embeddings take a place in the same queue as answers
    try:
        results = await _embedded(state.bridge, answer, inputs, request)
    finally:
        answer.release()
    if body.dimensions is not None and results and body.dimensions != len(results[0][0]):
        raise APIError(400, f"this model's embeddings have {len(results[0][0])} dimensions", "invalid_value",
                       "dimensions")
    data = []
    for i, (vector, _) in enumerate(results):
        value: Any = vector
        if body.encoding_format == "base64":  # little-endian float32, as OpenAI sends it
            value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = sum(n for _, n in results)
    return {"object": "list", "data": data, "model": state.model_id,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@router.get("/health", summary="200 when the model is ready, 503 while it loads or after it failed")
async def health(request: Request):
    bridge = request.app.state.smolchat.bridge
    if bridge.state == "ready":
        return {"status": "ok"}
    headers = {"Retry-After": str(LOADING_RETRY_S)} if bridge.state == "loading" else None
    return JSONResponse({"status": bridge.state, "message": bridge.message}, status_code=503, headers=headers)


@router.head("/health", include_in_schema=False)  # what some uptime monitors send
async def health_head(request: Request):
    return await health(request)


@router.get("/metrics", summary="Prometheus metrics: requests, tokens, TTFT, tok/s, KV blocks")
async def metrics(request: Request):
    state = request.app.state.smolchat
    state.bridge.refresh_kv()  # read on the engine thread; this scrape shows the previous reading
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
