"""``RemoteBackend``: the :class:`~engine.api.ChatBackend` over any OpenAI-compatible server.

Ours (``smolchat serve``), llama.cpp's ``llama-server``, vLLM, Ollama, LM Studio. Calls queue work on the
backend's own thread and return at once; each answer streams (``httpx`` + ``httpx-sse``) on a reader
thread of its own, so Stop takes effect within ~50 ms however slow or stalled the network is: the backend
stops waiting, closes the stream and ends with ``DoneEvent("cancelled")`` keeping the text so far.

A server keeps no conversation for us: every answer re-sends the whole history (system prompt, earlier
turns, images as ``data:`` URIs from :mod:`app.backends.remote_media`). That is also what makes
regenerate, edit and switching engines mid-conversation work. TTFT and tok/s are measured here, on
the client; token counts come from the server's ``usage``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx
from httpx_sse import EventSource

from app.backends.jobs import JobThread
from app.backends.remote_http import (
    STALL_TIMEOUT,
    Overflow,
    RemoteError,
    Server,
    api_base,
    count_text_tokens,
    error_message,
    from_exception,
    from_response,
    html_page,
    list_models,
    mend_surrogates,
    model_label,
    probe_capabilities,
)
from app.backends.remote_media import image_data_uri, video_data_uri
from engine.api import (
    LOAD_CANCELLED,
    Attachment,
    Capabilities,
    DoneEvent,
    GenerationParams,
    GenerationStats,
    HistoryMessage,
    ImageError,
    LoadCancelled,
    LoadTicket,
    ModelInfo,
    ProgressEvent,
    TokenEvent,
    answer_room,
)
from engine.api.backend import EventSink, LoadCallback
from engine.api.errors import describe_error
from engine.api.servers import masked_url

log = logging.getLogger(__name__)

REMOTE_PREFIX = "remote:"
SEPARATOR = "::"
POLL = 0.05  # seconds between cancel checks while waiting for the network


#: How long an answer waits for a server that is loading its model (seconds in all), asking again
#: after each 503's Retry-After (LOADING_RETRY_S where it gives none; at most LOADING_RETRY_MAX_S).
LOADING_WAIT_S = 600.0
LOADING_RETRY_S = 2.0
LOADING_RETRY_MAX_S = 30.0

#: Seconds between two progress events for a reasoning model's thinking before its answer.
THINKING_EVERY_S = 0.25

#: The fewest streamed tokens, each its own chunk, a server's decode rate is measured over (fewer: not
#: said; a stream's chunks can arrive together, and then their interval is no decode time).
MIN_RATE_CHUNKS = 4

#: An image or a video frame counted as this many characters of text when the tokens a refused
#: conversation holds are shared out among its messages (a photo is ~1,000 tokens, text ~4 characters one).
MEDIA_WEIGHT = 4_000
#: What is kept is estimated this much larger than the refusal's numbers say (the shares are estimates).
LEAVE_OUT_MARGIN = 1.05


def exchanges_to_leave_out(history: Sequence[HistoryMessage], starts: list[int], tried: int,
                           overflow: Overflow | None, max_new_tokens: int, system_prompt: str | None) -> int | None:
    """How many of the oldest exchanges to leave out after a server refused ``history[starts[tried-1]:]``
    (``tried`` = 0: all of it) as too long, from the refusal's ``overflow`` (:class:`Overflow`): enough
    for the prompt plus the answer's room (:func:`engine.api.answer_room`, as the local engine keeps) to
    fit, the prompt's tokens shared out among the messages by their text and media (a server that
    counted more ``max_tokens`` than that room is then asked for fewer: see ``RemoteBackend._answer``).
    At least one more than ``tried``, at most ``len(starts)``; None when the server gave no numbers."""
    if overflow is None or not starts:
        return None
    target = overflow.context - answer_room(max_new_tokens, overflow.context)
    sent = history[starts[tried - 1] if tried else 0:]

    def weight(m: HistoryMessage) -> int:
        return len(m.text) + MEDIA_WEIGHT * len(m.attachments) + 16  # 16: the template's tokens around it

    system = len(system_prompt or "")
    per = overflow.prompt / max(1, system + sum(weight(m) for m in sent))
    # The newest exchanges that fit, the margin taken off what is kept (taken off what is left out, it
    # was 3% of a long chat: a quarter of a 2,048-token context, trial 56).
    kept, leave = system + sum(weight(m) for m in history[starts[-1]:]), len(starts)
    while leave - 1 > tried:
        more = sum(weight(m) for m in history[starts[leave - 2]:starts[leave - 1]])
        if (kept + more) * per * LEAVE_OUT_MARGIN > target:
            break
        kept, leave = kept + more, leave - 1
    return leave


#: The most characters a token stands for on average over an answer, for the client's own bound on a
#: server's answer (English BPE tokens average about 4; long indentation or repeated-character tokens
#: run to 16 and more, but not over a whole answer).
MAX_CHARS_PER_TOKEN = 16


def vision_refusal(source: str) -> str:
    """Why a server's model is taken to read no images, after its name: said by the server at ``source``
    (an endpoint), or by nobody (``"your setting"``, ""), where Settings ▸ Engines offers a "can see
    images" toggle (trial 64: the toggle was named where the server had said, and it is not shown then)."""
    if source and source != "your setting":
        return f"cannot read images: the server says so ({source})."
    return ("cannot read images, as far as Smolchat knows (if it can, turn on “can see images” for it in "
            "Settings ▸ Engines).")


def remote_spec(server: str, model: str) -> str:
    """The model string a remote model is loaded and remembered by: ``remote:SERVER::MODEL``."""
    return f"{REMOTE_PREFIX}{server}{SEPARATOR}{model}"


def parse_spec(spec: str) -> tuple[str, str] | None:
    """``(server name, model id)`` of a :func:`remote_spec`, else ``None`` (a local model)."""
    if not spec.startswith(REMOTE_PREFIX) or SEPARATOR not in spec:
        return None
    server, _, model = spec[len(REMOTE_PREFIX):].partition(SEPARATOR)
    return server, model


def openai_messages(history: Sequence[HistoryMessage], system_prompt: str | None, detail: str) -> list[dict]:
    """Chat Completions ``messages`` for ``history`` (images and videos as ``data:`` URIs)."""
    out: list[dict] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for m in history:
        if m.role != "user" or not m.attachments:
            out.append({"role": m.role, "content": m.text})
            continue
        parts: list[dict] = []
        for a in m.attachments:
            if a.kind == "video":
                parts.append({"type": "video_url", "video_url": {"url": video_data_uri(a.path)}})
            else:
                parts.append({"type": "image_url", "image_url": {"url": image_data_uri(a.path, detail)[0]}})
        parts.append({"type": "text", "text": m.text})
        out.append({"role": "user", "content": parts})
    return out


def request_body(model: str, messages: list[dict], params: GenerationParams, context: int = 0) -> dict:
    """The streaming request; fields that are off (top_k 0, min_p 0, penalty 1) are left out, as
    strict servers reject what they do not know. ``context``: the model's context length where the
    server said it (0: unknown); ``max_tokens`` stays below it, as the local engine takes a limit
    beyond its context and stops at the context's end (OpenAI-style servers refuse it instead)."""
    limit = min(params.max_new_tokens, context - 1) if context > 1 else params.max_new_tokens
    body = {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": limit, "temperature": params.temperature, "top_p": params.top_p}
    if params.seed is not None:
        body["seed"] = params.seed
    if params.top_k:
        body["top_k"] = params.top_k
    if params.min_p:
        body["min_p"] = params.min_p
    if params.ignore_eos:  # vLLM's, llama-server's and our extension (benchmarks, tests)
        body["ignore_eos"] = True
    if params.repetition_penalty != 1.0:
        body["repeat_penalty"] = body["repetition_penalty"] = params.repetition_penalty
    return body


def stream_chat(client: httpx.Client, base_url: str, body: dict, put: Callable[[tuple], None],
                keep: Callable[[httpx.Response], None] = lambda r: None,
                stop: threading.Event | None = None) -> None:
    """POST ``body`` and ``put`` ``("token", text)``, ``("usage", dict)``, ``("notice", text)`` (a
    Smolchat server's word on the answer), ``("finish", reason)`` as they arrive; returns early once
    ``stop`` is set (leaving the ``with`` closes the connection, which is how a server learns to stop
    generating). Raises RemoteError: HTTP errors, error bodies (also
    inside an HTTP 200, as LM Studio sends them), malformed SSE, a connection closed before the end."""
    url = api_base(base_url) + "/chat/completions"
    finished = False
    reads = 0  # network reads of the stream so far: each token is put with the read it came in
    mended = _Mended(put)

    def put(item: tuple) -> None:
        mended((*item, reads) if item[0] == "token" else item)

    def counted(texts):
        nonlocal reads
        for text in texts:
            reads += 1
            yield text
    try:
        with client.stream("POST", url, json=body, headers={"Accept": "text/event-stream"}) as response:
            keep(response)
            if response.status_code >= 400:
                raise from_response(response.status_code, response.headers, response.read().decode("utf-8", "replace"),
                                    url)
            if "text/event-stream" not in response.headers.get("content-type", ""):
                _whole_answer(response.read().decode("utf-8", "replace"), put)  # (put mends its text too)
                return
            texts = counted(response.iter_text())
            head = next((text for text in texts if text.strip()), "")
            if head.lstrip("\ufeff \t\r\n").startswith("{"):
                # A whole JSON answer under an event-stream header (an SSE line never starts with "{"): it
                # was read as an empty stream, "the server closed the connection" (trial 77 Q9).
                _whole_answer(head + "".join(texts), put)
                return
            said = False  # whether any text came: a stream of empty events then [DONE] is no answer
            thought = False  # whether a reasoning model's thinking came
            for event in EventSource(_Replayed(response.headers, head, texts)).iter_sse():
                if stop is not None and stop.is_set():
                    return
                if event.event == "error":
                    # The server's words (an SSE error event, as some proxies and servers send one), not
                    # "the server closed the connection" when the stream then ends (trial 77 Q8).
                    raise RemoteError("error", error_message(event.data) or "an error event without words")
                if event.data.strip() == "[DONE]":
                    if not finished and not said and thought:  # (trial 78 R4: called not OpenAI-compatible)
                        raise RemoteError("error", "the model only thought, and gave no answer (its thinking may "
                                          "have used up Max new tokens: raise it in Settings)")
                    if not finished and not said:  # (trial 77 Q7: stored as an empty answer, no error)
                        raise RemoteError("not_openai", "the stream ended ([DONE]) without any of an answer")
                    return
                try:
                    chunk = json.loads(event.data)
                except (ValueError, RecursionError):  # (RecursionError: nested too deep to be an event)
                    raise RemoteError("not_openai", f"malformed event in the stream: {event.data[:80]!r}") from None
                finished, said = _chunk(chunk, put) or finished, said or _has_text(chunk)
                thought = thought or _has_text(chunk, "reasoning_content", "reasoning")
    except httpx.HTTPError as exc:
        raise from_exception(exc) from exc
    if not finished:
        raise RemoteError("closed", "the stream ended before the answer was complete")


class _Replayed:
    """A response whose first text was read already (to tell a stream from a JSON body): what
    ``EventSource`` reads, that text first."""

    def __init__(self, headers, head: str, rest) -> None:
        self.headers, self._head, self._rest = headers, head, rest

    def iter_text(self):
        if self._head:
            yield self._head
        yield from self._rest


def _has_text(chunk, *keys: str) -> bool:
    """Whether an event (already checked by :func:`_chunk`) carries any of an answer's text (``keys``: the
    delta's fields read; default its ``content``)."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    return any(isinstance(c, dict) and isinstance(c.get("delta"), dict) and
               any(isinstance(c["delta"].get(key), str) and c["delta"][key] for key in keys or ("content",))
               for c in (choices if isinstance(choices, list) else ()))


def _chunk(chunk: dict, put) -> bool:
    """One streamed event: checked whole first (a wrongly typed field anywhere is the server's fault, said
    as such, never a Python exception), then ``put`` piece by piece; True when it ends a choice."""
    if not isinstance(chunk, dict):
        raise RemoteError("not_openai", f"unexpected event in the stream: {str(chunk)[:80]}")
    if chunk.get("error"):
        raise RemoteError("error", error_message(json.dumps(chunk)))
    usage = _usage(chunk.get("usage"))
    notice = _typed(chunk.get("notice"), str, "notice")  # Smolchat's server: what the answer should say
    pieces = []
    thought = 0
    for i, choice in enumerate(_objects(chunk.get("choices"), "choices")):
        delta = _typed(choice.get("delta"), dict, f"choices[{i}].delta") or {}
        pieces.append((_typed(delta.get("content"), str, f"choices[{i}].delta.content"),
                       _typed(choice.get("finish_reason"), str, f"choices[{i}].finish_reason")))
        # A reasoning model's thinking (vLLM's and DeepSeek's reasoning_content, llama-server's and
        # OpenRouter's reasoning): not part of the answer, but the server is at work (trial 77 Q7: "has
        # sent nothing for N s" while it came).
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                thought += len(delta[key])
    if thought:
        put(("thinking", thought))
    if usage is not None:
        put(("usage", usage))
    if notice:
        put(("notice", notice))
    finished = False
    for content, finish in pieces:
        if content:
            put(("token", content))
        if finish:
            put(("finish", finish))
            finished = True
    return finished


class _Mended:
    """``put`` with the tokens of one answer passed through :func:`mend_surrogates`; a high half still
    held when the answer finishes is a lone one: U+FFFD."""

    def __init__(self, put: Callable[[tuple], None]) -> None:
        self.put, self.held = put, ""

    def __call__(self, item: tuple) -> None:
        if item[0] == "token":
            text, self.held = mend_surrogates(item[1], self.held)
            if text:
                self.put(("token", text, *item[2:]))
            return
        if item[0] == "finish" and self.held:
            self.put(("token", mend_surrogates(self.held, final=True)[0]))
            self.held = ""
        self.put(item)


def _whole_answer(text: str, put) -> None:
    """A server that answered JSON instead of a stream: an error body, or a whole completion."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # (RecursionError: nested too deep to be an answer)
        page = html_page(text)
        if page is not None:  # a proxy's or a captive portal's page ("Login"), not an API's answer
            raise RemoteError("not_openai", f"expected an event stream, got an HTML page: “{page}”") from None
        raise RemoteError("not_openai", f"expected an event stream, got: {text[:80]!r}") from None
    if not isinstance(data, dict) or data.get("error") or not data.get("choices"):
        raise RemoteError("error", error_message(text))
    choice = _objects(data["choices"], "choices")[0]
    message = _typed(choice.get("message"), dict, "choices[0].message") or {}
    content = _typed(message.get("content"), str, "choices[0].message.content") or ""
    finish = _typed(choice.get("finish_reason"), str, "choices[0].finish_reason") or "stop"
    usage = _usage(data.get("usage"))
    notice = _typed(data.get("notice"), str, "notice")
    put(("token", content))
    if usage is not None:
        put(("usage", usage))
    if notice:
        put(("notice", notice))
    put(("finish", finish))


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a whole number"}


def _typed(value, kind: type, where: str):
    """``value`` when it is null or of JSON type ``kind`` (a number is never true/false), else a
    RemoteError("not_openai") naming the field and what came instead."""
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise _wrong(value, kind, where)


def _wrong(value, kind: type, where: str) -> RemoteError:
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        shown = type(value).__name__
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    return RemoteError("not_openai", f"{where} should be {_KINDS[kind]}, got {shown}")


def _objects(value, where: str) -> list[dict]:
    """A list of objects (null: an empty list)."""
    items = _typed(value, list, where) or []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _wrong(item, dict, f"{where}[{i}]")
    return items


def _count(value, where: str) -> None:
    """A token count: null, or a whole number >= 0 (a negative one is no count: "-7 generated tokens")."""
    if _typed(value, int, where) is not None and value < 0:
        raise RemoteError("not_openai", f"{where} should be a whole number >= 0, got {value}")


def _usage(value) -> dict | None:
    """``usage`` if it is an object whose token counts we read are whole numbers >= 0 (or null); else
    None, as if absent: the counts only fill the footer, and the answer itself is fine."""
    try:
        usage = _typed(value, dict, "usage")
        if usage is not None:
            for key in ("prompt_tokens", "completion_tokens"):
                _count(usage.get(key), f"usage.{key}")
            details = _typed(usage.get("prompt_tokens_details"), dict, "usage.prompt_tokens_details")
            if details is not None:
                _count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")
    except RemoteError as exc:
        log.warning("ignoring the server's usage: %s", exc)
        return None
    return usage


def _unless_stopped(ticket: LoadTicket, request: Callable[[], Any]) -> Any:
    """``request()``'s result, waited for on a thread of its own so that a stopped load ends at once
    instead of after a silent server's timeout (trial 58: a load stopped, then asked for again, waited
    out the first one's 15 s, then its own). A stopped request runs on and its answer is dropped.

    Raises:
        LoadCancelled: the load was stopped first; else whatever ``request`` raised.
    """
    result: list = []

    def run() -> None:
        try:
            result.append((True, request()))
        except BaseException as exc:  # noqa: BLE001 - raised on the waiting thread below
            result.append((False, exc))
    worker = threading.Thread(target=run, name="RemoteBackend-load", daemon=True)
    worker.start()
    while worker.is_alive():
        if ticket.cancelled:
            raise LoadCancelled("the load was stopped")
        worker.join(0.05)
    ok, value = result[0]
    if not ok:
        raise value
    return value


class RemoteBackend:
    """A :class:`~engine.api.ChatBackend` whose model runs on a server.

    ``server`` is a :class:`Server` or a callable returning one (called on the backend thread, so a
    keyring lookup never runs on the UI thread). ``stall_timeout`` bounds the silence between chunks.
    """

    def __init__(self, server: Server | Callable[[], Server], stall_timeout: float = STALL_TIMEOUT) -> None:
        self._server_source = server
        self.server: Server | None = server if isinstance(server, Server) else None
        self.stall_timeout = stall_timeout
        self.model = ""
        self.sources: dict = {}  # where the loaded model's capabilities were read (probe_capabilities)
        self._info: ModelInfo | None = None
        self._history: list[HistoryMessage] = []
        # Exchanges the last answer of this conversation left out to fit the server's context: the next
        # answer starts there (the conversation only grows), not from a refusal of the whole chat.
        self._left_out = 0
        self.jobs = JobThread("RemoteBackend")
        self._cancel = self.jobs.cancelled  # the running answer's flag
        self._response: httpx.Response | None = None
        self._loading: LoadTicket | None = None  # the last load's (cancel_load)

    # -- ChatBackend -------------------------------------------------------------------------------
    @property
    def info(self) -> ModelInfo | None:
        return self._info

    @property
    def capabilities(self) -> Capabilities:
        return self._info.capabilities if self._info else Capabilities()

    def load(self, model: str, options: dict, on_done: LoadCallback) -> None:
        ticket = self._loading = LoadTicket()
        self.jobs.put(lambda: self._load(model, on_done, ticket))

    def cancel_load(self) -> bool:
        ticket, self._loading = self._loading, None
        return ticket is not None and ticket.cancel()

    def set_history(self, messages: Sequence[HistoryMessage]) -> None:
        messages = list(messages)

        def run() -> None:
            if messages[:1] != self._history[:1]:  # another conversation
                self._left_out = 0
            self._history = messages
        self.jobs.put(run)

    def send(self, text: str, attachments: Sequence[Attachment], params: GenerationParams, sink: EventSink,
             system_prompt: str | None = None) -> None:
        user = HistoryMessage("user", text, tuple(attachments))
        self.jobs.put_answer(lambda events: self._answer(self._history, user, params, events, system_prompt), sink)

    def regenerate(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        def run(events: EventSink) -> None:
            turns = list(self._history)
            while turns and turns[-1].role == "assistant":
                turns.pop()
            user = turns.pop() if turns else HistoryMessage("user", "")
            self._answer(turns, user, params, events, system_prompt)
        self.jobs.put_answer(run, sink)

    def edit(self, turn_index: int, text: str, attachments: Sequence[Attachment] | None, params: GenerationParams,
             sink: EventSink, system_prompt: str | None = None) -> None:
        def run(events: EventSink) -> None:
            kept = self._history[turn_index].attachments if attachments is None else tuple(attachments)
            self._answer(self._history[:turn_index], HistoryMessage("user", text, kept), params, events, system_prompt)
        self.jobs.put_answer(run, sink)

    def continue_answer(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> None:
        def run(events: EventSink) -> None:
            if not self._history or self._history[-1].role != "assistant":
                events(DoneEvent("error", GenerationStats(), "there is no answer to continue: the conversation "
                                 "does not end with one", "ValueError"))
                return
            self._answer(self._history[:-1], self._history[-1], params, events, system_prompt)
        self.jobs.put_answer(run, sink)

    def cancel(self) -> None:
        self.jobs.cancel()

    def count_attachment_tokens(self, attachment: Attachment, detail: str,
                                params: GenerationParams | None = None) -> int:
        return -1  # the server's tokenizer decides; asking would cost a round trip per image

    def answers_ahead(self) -> int:
        return 0  # a server does not say what else it answers

    def count_text_tokens(self, text: str) -> int:
        """The server's count from its ``/tokenize`` where it says its context (there is something to
        count against) and has one (vLLM, llama-server, Smolchat's); else -1. Any thread: a request
        of its own, not the backend thread's."""
        server, info = self.server, self._info
        if server is None or info is None or not info.capabilities.max_context:
            return -1
        return count_text_tokens(server, self.model, text)

    def count_prompt_overhead(self, system_prompt: str | None) -> int:
        return -1  # the server's chat template is not known here

    def close(self) -> bool:
        return self.jobs.close()

    # -- the backend thread ------------------------------------------------------------------------
    def _load(self, spec: str, on_done: LoadCallback, ticket: LoadTicket) -> None:
        # The server and model in use change only when the load ends uncancelled (ticket.finish): a
        # load stopped while the server was asked leaves the model before in use, on its server.
        parsed = parse_spec(spec)
        model, server = parsed[1] if parsed else spec, None
        try:
            if ticket.cancelled:
                raise LoadCancelled("the load was stopped")
            server = self._server_source() if callable(self._server_source) else self._server_source
            ids = [m["id"] for m in _unless_stopped(ticket, lambda: list_models(server))]
            named = [i for i in ids if model_label(i) == model]
            if model not in ids and len(named) == 1:  # as shown: llama-server's path by its file name (trial 56)
                model = named[0]
            if model not in ids:
                # The URL answered with a model list: it is right, only the model is not (trial 55: "404
                # Not found: check the base URL" sent the user to fix what was not wrong).
                raise RemoteError("no_model", f"{model!r} (it has: {', '.join(map(model_label, ids[:5])) or 'none'})")
            caps, sources = _unless_stopped(ticket, lambda: probe_capabilities(server, model))
        except LoadCancelled:
            ticket.cancel()
        except (RemoteError, KeyError) as exc:
            # An error may quote the server's URL, and a URL may hold a password.
            if ticket.finish():
                on_done(None, masked_url(f"{getattr(server, 'name', 'server')}: {exc}"))
                return
        except Exception as exc:  # noqa: BLE001 - a bug, or an answer of a shape not foreseen: a load
            # reports every failure, else the window waits on it for good (the engine's service does the same)
            log.error("loading %s failed", spec, exc_info=exc)
            if ticket.finish():
                on_done(None, masked_url(f"{getattr(server, 'name', 'server')}: {describe_error(exc)}"))
                return
        else:
            info = ModelInfo(name=model_label(model), path=spec, capabilities=caps, device=server.name,
                             dtype="", weights="", folder="", backend=f"remote:{server.name}", sources=dict(sources))

            def install() -> None:
                self.server, self.model, self._history = server, model, []
                self._info, self.sources = info, sources
            if ticket.finish(install):
                on_done(info, None)
                return
        on_done(None, LOAD_CANCELLED)

    def _answer(self, turns: list[HistoryMessage], user: HistoryMessage, params: GenerationParams,
                sink: EventSink, system_prompt: str | None) -> None:
        """Stream the answer to ``turns`` + ``user``; a ``user`` that is an answer is continued
        (vLLM's ``continue_final_message``; llama-server, Ollama and Smolchat's server continue a last
        assistant message by themselves)."""
        stats = GenerationStats()
        if self._info is None:
            sink(DoneEvent("error", stats, "No model is loaded yet.", "RuntimeError"))
            return
        vision = self._info.capabilities.vision
        if any(a.kind == "image" for a in user.attachments) and not vision:
            sink(DoneEvent("error", stats, f"{model_label(self.model)} on {self.server.name} "
                           f"{vision_refusal(self.sources.get('vision', ''))}", "UnsupportedOperation"))
            return
        video = self._info.capabilities.video
        if any(a.kind == "video" for a in user.attachments) and not video:
            sink(DoneEvent("error", stats, f"{model_label(self.model)} on {self.server.name} cannot take videos, as "
                           "far as Smolchat knows: remove the video, or ask a SmolVLM2 model.", "UnsupportedOperation"))
            return
        # Photos and videos of earlier messages go unsent to a model that cannot take them, said under the
        # answer, as the local engine leaves them out (trial 56: the whole chat was refused for good, each
        # question: a server rejects a part type it does not know).
        unsent = []
        for kind, takes, one, many, cannot in (("image", vision, "photo", "photos", "cannot see images"),
                                               ("video", video, "video", "videos", "cannot take videos")):
            count = 0 if takes else sum(a.kind == kind for m in turns for a in m.attachments)
            if count:
                turns = [replace(m, attachments=tuple(a for a in m.attachments if a.kind != kind)) for m in turns]
                what = f"1 earlier {one} of this chat is" if count == 1 else f"{count} earlier {many} of this chat are"
                unsent.append(f"{what} not sent: {model_label(self.model)} on {self.server.name} {cannot}.")
        history = [*turns, user]
        # Where an exchange starts: leaving out history[:s] for one of these keeps whole exchanges.
        starts = [i for i in range(1, len(history)) if history[i].role == "user"]
        tried = min(self._left_out, len(starts))
        dropped, step = (starts[tried - 1] if tried else 0), 1
        asked = params  # with max_new_tokens lowered where the server counts it against the context
        waiting_since = 0.0  # when a server loading its model first said so (time.monotonic)
        waited_for_load = False  # a loading server was waited for (said under the answer)
        body = None  # built again only where what is sent changes (not for a loading server's retry)
        asked_at = attempt_at = time.perf_counter()
        while True:
            try:
                if body is None:
                    body = request_body(self.model, openai_messages(history[dropped:], system_prompt,
                                                                    params.image_detail),
                                        asked, self._info.capabilities.max_context)
                    if user.role == "assistant":
                        body.update(continue_final_message=True, add_generation_prompt=False)
            except ImageError as exc:
                sink(DoneEvent("error", stats, str(exc), "ImageError"))
                return
            attempt_at = time.perf_counter()
            reason, error, error_type, text, failure = self._stream(body, sink, stats)
            overflow = failure.overflow if failure is not None else None
            now = time.monotonic()
            waiting_since = (waiting_since or now) if error_type == "Remote:loading" else 0.0
            if error_type == "Remote:loading" and not text and now - waiting_since < LOADING_WAIT_S:
                # The server is loading its model: asked again when its Retry-After says, as its clients
                # are told to, instead of failing the question (trial 77 Q11).
                pause = min(max(failure.retry_after or LOADING_RETRY_S, 0.5), LOADING_RETRY_MAX_S)
                sink(ProgressEvent("server_loading", int(now - waiting_since), 0))
                waited_for_load = True
                if self._wait(pause):
                    continue
                reason, error, error_type = "cancelled", None, ""
                break
            if error_type != "Remote:context" or text or self._cancel.is_set():
                break
            if overflow is not None and overflow.completion and asked.max_new_tokens > overflow.context - overflow.prompt \
                    and overflow.prompt + answer_room(params.max_new_tokens, overflow.context) <= overflow.context:
                # vLLM counts max_tokens against the context: the messages fit with the answer's room, the
                # limit asked for did not (a long limit, or the context less 1 where the server said it:
                # every question was refused). Ask for what is left, as the local engine stops at the
                # context's end.
                asked = replace(params, max_new_tokens=overflow.context - overflow.prompt)
                body = None
                continue
            if tried == len(starts):
                break
            # The server refused the conversation as longer than its context (it keeps every message,
            # as OpenAI's API does): leave out the oldest exchanges, as the local engine drops them.
            # Where the refusal says its numbers, as many as make the rest fit with room for the answer;
            # else one more, then 2, 4, ... more at each refusal (a refusal costs the server no prefill).
            # The doubling alone overshot by up to 2x: all 300 messages of a chat left out, where the
            # last 20 fitted (trial 55).
            estimate = exchanges_to_leave_out(history, starts, tried, overflow, params.max_new_tokens, system_prompt)
            tried, step = (estimate, step) if estimate is not None else (min(len(starts), tried + step), 2 * step)
            dropped, body = starts[tried - 1], None
        if error is None:
            self._left_out = tried
        # The time to the first token is the user's, from the question: a loading server's waits and the
        # requests a too-long conversation was refused in count (each attempt's stats began anew).
        lead = attempt_at - asked_at
        if stats.ttft_s:
            stats.ttft_s += lead
        stats.total_s += lead
        if waited_for_load and stats.ttft_s:
            waited = f"The server loaded its model first: the answer waited {lead:.0f} s for it."
            stats.notice = f"{stats.notice} {waited}" if stats.notice else waited
        if dropped and error is None:
            stats.dropped_turns = dropped
            what = "the oldest message was" if dropped == 1 else f"the {dropped} oldest messages were"
            left_out = (f"The conversation no longer fits the context of {model_label(self.model)} on {self.server.name}: "
                        f"{what} left out.")
            stats.notice = f"{left_out} {stats.notice}" if stats.notice else left_out
        if unsent:
            stats.notice = " ".join([stats.notice, *unsent] if stats.notice else unsent)
        if text and user.role == "assistant":
            self._history = [*turns, HistoryMessage("assistant", user.text + text)]
        elif text:  # the partial answer of a failed stream is kept, like a cancelled one
            self._history = [*history, HistoryMessage("assistant", text)]
        sink(DoneEvent(reason, stats, error, error_type))

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` on the backend thread; False at once when the answer is stopped."""
        return not self._cancel.wait(seconds)

    def _stream(self, body: dict, sink: EventSink, stats: GenerationStats
                ) -> tuple[str, str | None, str, str, RemoteError | None]:
        """Stream one answer into ``sink``; ``(finish reason, error, error type, text so far, the failure:
        its kind, a context refusal's numbers where the server said them, a Retry-After)``."""
        events: queue.Queue = queue.Queue()
        stop = threading.Event()  # this answer's own: the backend's cancel flag is reset by the next answer
        start = time.perf_counter()

        def read() -> None:
            try:
                with self.server.client(self.stall_timeout) as client:
                    stream_chat(client, self.server.url, body, events.put, lambda r: setattr(self, "_response", r),
                                stop)
                events.put(("end",))
            except RemoteError as exc:
                events.put(("error", exc))
            except Exception as exc:  # a bug must still end the answer, not hang the window
                log.error("reading the stream of %s failed", masked_url(self.server.url), exc_info=exc)
                events.put(("error", RemoteError("network", f"{type(exc).__name__}: {exc}")))

        threading.Thread(target=read, name="RemoteStream", daemon=True).start()
        pieces, reason, error, first, last, usage = [], "stop", None, 0.0, 0.0, {}
        arrivals, last_read = 0, None  # tokens after the first that came in a network read of their own
        thought, said_thinking = 0, 0.0  # characters of the model's reasoning; when last said
        # The answer's limit, kept here too: a server that ignores max_tokens (trial 64: 40 tokens for a
        # limit of 10; 2,000,000 for 2,000) is cut there as the local engine stops, "length". Servers
        # send a token or more per event, so counting events never cuts an answer short.
        limit = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else None
        # And the text's: a server may send many tokens an event (and one sending 1,000-character
        # "words" laid a window out for a minute: trial 65); no tokenizer's tokens average more than
        # MAX_CHARS_PER_TOKEN characters over an answer.
        most_text = limit * MAX_CHARS_PER_TOKEN if limit is not None else None
        length = 0
        while True:
            if self._cancel.is_set():
                reason = "cancelled"
                stop.set()  # the reader leaves at its next event and closes the connection
                self._close_stream()  # and a stalled one is closed under it
                break
            # The stall timeout bounds silence between bytes; keep-alive comments (or usage-only
            # events: trial 65) are bytes, so a server that sends only those after its first words is
            # timed out here, as one saying nothing (before the first word it may be reading a long
            # prompt: not cut).
            if first and time.perf_counter() - last > self.stall_timeout:
                reason, error = "error", RemoteError("timeout", f"no more of the answer came for {self.stall_timeout:g} s")
                stop.set()
                self._close_stream()
                break
            try:
                item = events.get(timeout=POLL)
            except queue.Empty:
                continue
            if item[0] == "token":
                if (limit is not None and len(pieces) >= limit) or (most_text is not None and length >= most_text):
                    reason = "length"
                    stop.set()
                    self._close_stream()
                    break
                length += len(item[1])
                read = item[2] if len(item) > 2 else None
                arrivals += bool(first) and (read is None or read != last_read)
                last, last_read = time.perf_counter(), read
                first = first or last
                pieces.append(item[1])
                sink(TokenEvent(item[1], -1))
            elif item[0] == "thinking":
                thought += item[1]
                if not first and time.perf_counter() - said_thinking >= THINKING_EVERY_S:
                    said_thinking = time.perf_counter()
                    sink(ProgressEvent("server_thinking", thought, 0))
            elif item[0] == "usage":
                usage = item[1]
            elif item[0] == "notice":
                stats.notice = item[1]
            elif item[0] == "finish":
                reason = "length" if item[1] == "length" else "stop"
            elif item[0] == "error":
                reason, error = "error", item[1]
                break
            else:
                break
        stop.set()
        self._response = None
        generated = int(usage.get("completion_tokens") or len(pieces))
        stats.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        stats.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        stats.generated_tokens = generated
        stats.ttft_s = first - start if first else 0.0
        # A rate over fewer chunks is the network's: two tokens in one packet read 13,754 tok/s (trial 71),
        # and so is one over chunks that came together (a buffering proxy: 30,914 tok/s, trial 77 Q4).
        # The rate is said where most tokens came in network reads of their own (a proxy that passes a
        # stream on in blocks sends dozens a read: the blocks' interval is its own, not the decode's).
        measured = min(generated, len(pieces)) >= MIN_RATE_CHUNKS and arrivals >= MIN_RATE_CHUNKS - 1 \
            and 2 * arrivals >= len(pieces) - 1
        stats.decode_tokens_per_s = (generated - 1) / (last - first) if measured else 0.0
        stats.total_s = time.perf_counter() - start
        text = "".join(pieces)
        if error is None:
            return reason, None, "", text, None
        message = masked_url(f"{self.server.name}: {error}")  # which server, where several are set up
        if pieces:
            message += "; the answer so far is kept"
        return "error", message, f"Remote:{error.kind}", text, error

    def _close_stream(self) -> None:
        response = self._response
        if response is not None:
            try:  # from this thread while the reader may be blocked in it: best effort, it dies either way
                response.close()
            except Exception:
                pass
