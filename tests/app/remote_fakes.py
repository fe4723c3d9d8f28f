"""A small fake OpenAI-compatible server for fault injection (loopback only, every wait bounded).

The chat request's ``model`` picks the behaviour: ``ok`` streams an answer, ``slow`` streams it with
pauses, ``stall`` sends one token then says nothing, ``midstream500`` sends an error event after two
tokens, ``long`` streams 60 tokens 50 ms apart (``written`` counts them, ``disconnects`` counts clients
that hung up mid-stream), ``malformed`` sends broken SSE, ``error200`` answers HTTP 200 with an error body (LM Studio),
``close`` drops the connection mid-answer, ``status:N`` answers status N (429 with ``Retry-After: 7``).
``ctx:N`` refuses messages of more than N characters in all with OpenAI's 400 ``context_length_exceeded``;
``llamactx:N`` as llama-server does (its numbers said, a character a token); ``vllmctx:N`` as vLLM does,
which counts ``max_tokens`` against the context too and says both numbers.
``props``, ``show`` and ``model_info`` are served as llama-server's ``/props``, Ollama's ``/api/show`` and
LiteLLM's ``/v1/model/info``.
``api_key`` makes every request without ``Bearer api_key`` a 401 (but ``/v1/models`` with ``open_models``, as
llama-server leaves it open); a chat request without ``messages`` is a 400, as real servers answer it. ``requests`` records every body.
``models_delay`` seconds pass before ``/v1/models`` answers (a server busy loading its own model);
``hold_models`` (an Event) holds each ``/v1/models`` until it is set; ``models_held`` counts those held now.
``bad:NAME`` (:data:`BAD_EVENTS`, not listed unless ``models`` says so) streams "The", then one event of a
wrong shape, then a valid end; ``oddusage:NAME`` (:data:`ODD_USAGE`) the same with an odd ``usage``;
``whole:NAME`` (:data:`BAD_WHOLE`, :data:`ODD_WHOLE`) answers that JSON body instead of a stream.
``burst:N`` streams N words as fast as it can, ignoring ``max_tokens`` (``bigwords:N`` words of 1,000
characters); ``pings`` one word, then SSE keep-alive comments until the server stops (``usageflood``
usage-only events every 10 ms). ``split:NAME`` (:data:`SPLIT`) streams those pieces of content, emoji cut into their UTF-16 halves as
servers that slice JavaScript strings send them (JSON ``"\\ud83d"``, then ``"\\ude00"``), then a valid end.
``empty`` streams events without choices, then ``[DONE]``; ``sseerror`` "The", then an SSE ``event: error``
whose data is ``{"message": ...}``; ``jsonsse`` a whole JSON answer under an event-stream header;
``loading:N`` answers its first N chat requests 503 "the model is still loading" with ``Retry-After: 0.2``
(``loading:N:S``: ``Retry-After: S``)
(the requests of every model counted), then as ``ok``; ``thinking`` streams ``reasoning_content`` ("Let me look.") 0.3 s apart, then "Orange."; ``thinkonly``
three events of ``reasoning`` then ``[DONE]``; ``together`` the whole answer (5 tokens, its end and usage) in one write, as a buffering proxy passes it on.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = ["ok", "slow", "long", "stall", "midstream500", "malformed", "error200", "close", "status:500", "status:429",
          "status:403", "text-only"]
TOKENS = ["The", " cat", " is", " orange", "."]
# Events of a wrong shape: each is valid JSON, but a field has the wrong type.
BAD_EVENTS = {
    "content-number": {"choices": [{"index": 0, "delta": {"content": 123}}]},
    "choices-string": {"choices": "oops"},
    "delta-list": {"choices": [{"index": 0, "delta": ["x"]}]},
    "finish-number": {"choices": [{"index": 0, "delta": {}, "finish_reason": 5}]},
    "choice-null": {"choices": [None]},
}
# Events whose usage is of an odd shape: read as no usage (the counts only fill the footer).
ODD_USAGE = {
    "usage-string": {"choices": [], "usage": "lots"},
    "usage-count-string": {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": "many"}},
    "usage-float": {"choices": [], "usage": {"prompt_tokens": 3.0, "completion_tokens": 2}},
    "cached-list": {"choices": [], "usage": {"prompt_tokens": 3, "prompt_tokens_details": []}},
    "completion-negative": {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": -7}},
    "prompt-negative": {"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 2}},
    "cached-negative": {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                                  "prompt_tokens_details": {"cached_tokens": -3}}},
}
# Streamed content pieces with UTF-16 surrogate halves (json.dumps writes each as a "\\udXXX" escape),
# and the text they make: halves that pair up are joined, a lone one is U+FFFD, nothing is lost.
SPLIT = {
    "emoji": (["Hi ", "\ud83d", "\ude00 end"], "Hi \U0001F600 end"),
    "two-in-a-row": (["\ud83d", "\ude00\ud83d", "\ude01!"], "\U0001F600\U0001F601!"),
    "lone": (["a\udc00b", "c\ud83d", "d", "e\ud83d"], "a\ufffdbc\ufffdde\ufffd"),
}
# Whole answers of the right shape whose text holds a lone surrogate half.
ODD_WHOLE = {
    "lone-surrogate": {"choices": [{"message": {"role": "assistant", "content": "x\ud800y\ud83d"},
                                    "finish_reason": "stop"}]},
}
# Whole (non-streamed) answers of a wrong shape.
BAD_WHOLE = {
    "content-number": {"choices": [{"message": {"role": "assistant", "content": 123}, "finish_reason": "stop"}]},
    "choices-string": {"choices": "oops"},
    "message-string": {"choices": [{"message": "hi", "finish_reason": "stop"}]},
}
STALL_LIMIT = 5.0  # a stalled answer ends by itself after this many seconds, whatever the test does


def _chunk(content=None, finish=None, usage=None) -> bytes:
    data = {"id": "x", "object": "chat.completion.chunk", "choices": []}
    if content is not None or finish is not None:
        data["choices"] = [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}]
    if usage is not None:
        data["usage"] = usage
    return f"data: {json.dumps(data)}\n\n".encode()


class FakeOpenAI:
    """``with FakeOpenAI() as fake: fake.url`` — a threaded server on 127.0.0.1 and a free port."""

    def __init__(self, api_key: str = "", props: dict | None = None, models: list[dict] | None = None,
                 show: dict | None = None, model_info: dict | None = None, tokenize: bool = False,
                 models_delay: float = 0.0, open_models: bool = False) -> None:
        self.open_models = open_models
        self.api_key, self.props, self.models, self.show = api_key, props, models, show
        self.models_delay = models_delay
        self.hold_models: threading.Event | None = None
        self.models_held = 0
        self.tokenize = tokenize  # llama-server's /tokenize: {"content"} -> {"tokens"}, a token a word
        self.model_info = model_info
        self.requests: list[dict] = []
        self.written = 0
        self.disconnects = 0
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _json(self, status, data, headers=()):
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _authorized(self) -> bool:
                if outer.api_key and self.headers.get("Authorization") != f"Bearer {outer.api_key}":
                    self._json(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
                    return False
                return True

            def do_GET(self):
                if not (outer.open_models and self.path == "/v1/models") and not self._authorized():
                    return
                if self.path == "/v1/models":
                    outer.stop.wait(min(outer.models_delay, STALL_LIMIT))
                    hold = outer.hold_models
                    if hold is not None:
                        outer.models_held += 1
                        hold.wait(STALL_LIMIT)
                        outer.models_held -= 1
                    data = outer.models or [{"id": m, "object": "model"} for m in MODELS]
                    self._json(200, {"object": "list", "data": data})
                elif self.path == "/props" and outer.props is not None:
                    self._json(200, outer.props)
                elif self.path == "/v1/model/info" and outer.model_info is not None:
                    self._json(200, outer.model_info)
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self._authorized():
                    return
                if self.path == "/api/show" and outer.show is not None:  # Ollama's model card
                    self._json(200, outer.show)
                    return
                if self.path == "/tokenize" and outer.tokenize:  # as llama-server: no "content", an error
                    if "content" not in body:
                        self._json(500, {"error": {"code": 500, "message": "\"content\" must be provided"}})
                    else:
                        self._json(200, {"tokens": list(range(len(body["content"].split())))})
                    return
                if self.path != "/v1/chat/completions":
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if "messages" not in body:  # (check_connection's key check sends {})
                    self._json(400, {"error": {"message": "'messages' is required"}})
                    return
                outer.requests.append(body)
                model = body.get("model", "")
                if model.startswith("status:"):
                    status = int(model.split(":")[1])
                    self._json(status, {"error": {"message": f"fake {status}"}},
                               [("Retry-After", "7")] if status == 429 else [])
                    return
                if model.startswith("loading:"):  # Smolchat's server while its model loads, N requests long
                    if len(outer.requests) <= int(model.split(":")[1]):
                        self._json(503, {"error": {"message": "the model is still loading", "code": "model_loading"}},
                                   [("Retry-After", "0.2" if model.count(":") == 1 else model.split(":")[2])])
                        return
                    model = "ok"
                if model.startswith("ctx:"):  # a context of N characters of message text (OpenAI's refusal)
                    size = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
                    if size > int(model.split(":")[1]):
                        self._json(400, {"error": {"message": f"This model's maximum context length is exceeded "
                                                              f"({size} characters)", "type": "invalid_request_error",
                                                   "param": "messages", "code": "context_length_exceeded"}})
                        return
                if model.startswith("llamactx:"):  # llama-server's refusal, its numbers: a character a token
                    size = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
                    context = int(model.split(":")[1])
                    if size >= context:
                        self._json(400, {"error": {"code": 400, "message": f"request ({size} tokens) exceeds the "
                                                   f"available context size ({context} tokens), try increasing it",
                                                   "type": "exceed_context_size_error", "n_prompt_tokens": size,
                                                   "n_ctx": context}})
                        return
                if model.startswith("vllmctx:"):  # vLLM's refusal: messages and max_tokens against N
                    size = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
                    context, completion = int(model.split(":")[1]), int(body.get("max_tokens") or 16)
                    if size + completion > context:
                        self._json(400, {"object": "error", "message": f"This model's maximum context length is "
                                         f"{context} tokens. However, you requested {size + completion} tokens ({size} "
                                         f"in the messages, {completion} in the completion). Please reduce the length "
                                         "of the messages or completion.", "type": "BadRequestError", "code": 400})
                        return
                if model == "error200":
                    self._json(200, {"error": "Model failed to load: out of memory"})
                    return
                if model.startswith("whole:"):
                    self._json(200, {**BAD_WHOLE, **ODD_WHOLE}[model.split(":", 1)[1]])
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    self._stream(model)
                except (BrokenPipeError, ConnectionResetError):
                    outer.disconnects += 1

            def _stream(self, model):
                w = self.wfile
                if model == "long":
                    for _ in range(60):
                        w.write(_chunk("word "))
                        w.flush()
                        outer.written += 1
                        if outer.stop.wait(0.05):
                            return
                    w.write(_chunk(finish="length") + b"data: [DONE]\n\n")
                    return
                if model.startswith("burst:"):  # as fast as it can, whatever max_tokens asked
                    for _ in range(int(model.split(":", 1)[1])):
                        w.write(_chunk("ab "))
                        outer.written += 1
                    w.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
                    return
                if model.startswith("bigwords:"):  # N "words" of 1,000 characters, ignoring max_tokens
                    for _ in range(int(model.split(":", 1)[1])):
                        w.write(_chunk("A" * 1000 + " "))
                        outer.written += 1
                    w.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
                    return
                if model == "usageflood":  # one word, then usage-only events every 10 ms
                    w.write(_chunk("The"))
                    w.flush()
                    while not outer.stop.wait(0.01):
                        w.write(_chunk(usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}))
                        w.flush()
                    return
                if model == "pings":  # one word, then only SSE keep-alive comments
                    w.write(_chunk("The"))
                    w.flush()
                    while not outer.stop.wait(0.05):
                        w.write(b": keep-alive\n\n")
                        w.flush()
                    return
                if model == "malformed":
                    w.write(_chunk("The") + b"data: {this is not json\n\n")
                    return
                if model.startswith(("bad:", "oddusage:")):
                    kind, name = model.split(":", 1)
                    bad = json.dumps((BAD_EVENTS if kind == "bad" else ODD_USAGE)[name])
                    w.write(_chunk("The") + f"data: {bad}\n\n".encode() + _chunk(" end", finish="stop")
                            + b"data: [DONE]\n\n")
                    return
                if model == "empty":
                    w.write(_chunk() * 3 + b"data: [DONE]\n\n")
                    return
                if model == "sseerror":
                    w.write(_chunk("The") + b'event: error\ndata: {"message": "Internal server error in worker"}\n\n')
                    return
                if model == "jsonsse":
                    w.write(json.dumps({"choices": [{"message": {"role": "assistant", "content": "Whole."},
                                                     "finish_reason": "stop"}]}).encode())
                    return
                if model == "thinkonly":  # a reasoning model that thinks up to its token limit, then [DONE]
                    thought = {"choices": [{"index": 0, "delta": {"reasoning": "Hmm, let me think."}}]}
                    w.write(f"data: {json.dumps(thought)}\n\n".encode() * 3 + b"data: [DONE]\n\n")
                    return
                if model == "thinking":  # a reasoning model: its thoughts (vLLM's field), then the answer
                    for words in ("Let me ", "look.", ""):
                        thought = {"choices": [{"index": 0, "delta": {"reasoning_content": words}}]}
                        w.write(f"data: {json.dumps(thought)}\n\n".encode())
                        w.flush()
                        outer.stop.wait(0.3)
                    w.write(_chunk("Orange.", finish="stop") + b"data: [DONE]\n\n")
                    return
                if model == "together":
                    w.write(b"".join(_chunk(t) for t in TOKENS) + _chunk(finish="stop")
                            + _chunk(usage={"prompt_tokens": 17, "completion_tokens": len(TOKENS)}) + b"data: [DONE]\n\n")
                    return
                if model.startswith("split:"):
                    for piece in SPLIT[model.split(":", 1)[1]][0]:
                        w.write(_chunk(piece))
                        w.flush()
                    w.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
                    return
                for i, token in enumerate(TOKENS):
                    if model == "midstream500" and i == 2:
                        w.write(b'data: {"error": {"message": "CUDA out of memory", "code": 500}}\n\n')
                        return
                    if model == "close" and i == 2:
                        w.flush()
                        self.connection.shutdown(2)  # drop it without ending the chunked body
                        return
                    w.write(_chunk(token))
                    w.flush()
                    if model == "stall":
                        outer.stop.wait(STALL_LIMIT)
                        return
                    if model == "slow":
                        outer.stop.wait(0.3)
                w.write(_chunk(finish="stop") + _chunk(usage={"prompt_tokens": 17, "completion_tokens": len(TOKENS),
                                                             "total_tokens": 17 + len(TOKENS)}))
                w.write(b"data: [DONE]\n\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_done(events: list, timeout: float = 10.0) -> None:
    from engine.api import DoneEvent

    deadline = time.monotonic() + timeout
    while not any(isinstance(e, DoneEvent) for e in events):
        assert time.monotonic() < deadline, f"no DoneEvent within {timeout} s: {events}"
        time.sleep(0.01)
