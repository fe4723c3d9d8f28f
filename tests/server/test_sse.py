"""Raw SSE checks (httpx) of the streaming contract, on the real tiny model and on a scripted engine."""

from __future__ import annotations

import base64
import json
import re
import threading
import time

import httpx
import pytest

from server import ServerConfig, create_app
from tests.server.fakes import FakeSession, fake_loader
from tests.server.helpers import ThreadServer, png_bytes

PNG = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()


def stream_lines(url: str, body: dict) -> tuple[httpx.Response, list[str]]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        lines = [line for line in response.iter_lines()]
    return response, lines


def events(lines: list[str]) -> list[str]:
    """The ``data:`` payloads; every other non-empty line would break the contract."""
    assert all(line.startswith("data: ") for line in lines if line), lines
    return [line[len("data: "):] for line in lines if line]


@pytest.mark.parametrize("include_usage", [False, True])
def test_every_rule_of_the_stream_contract(url, include_usage):
    body = {"model": "tiny-f32", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6,
            "stream": True, **({"stream_options": {"include_usage": True}} if include_usage else {})}
    response, lines = stream_lines(url, body)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    payloads = events(lines)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]  # every other data line is JSON
    assert len({c["id"] for c in chunks}) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    with_choices = [c for c in chunks if c["choices"]]
    assert with_choices[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in with_choices[1:])
    finishes = [c["choices"][0]["finish_reason"] for c in with_choices]
    assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1])
    usage_chunks = [c for c in chunks if not c["choices"]]
    if include_usage:
        assert usage_chunks == [chunks[-1]] and chunks[-1]["usage"]["completion_tokens"] >= 1
        assert all(c["usage"] is None for c in with_choices)  # OpenAI's "usage": null until then
    else:
        assert usage_chunks == [] and all("usage" not in c for c in chunks)


@pytest.mark.parametrize("details", [(), ("low",), ("auto",), ("low", "high")])
def test_an_error_before_the_first_token_is_a_real_status_not_a_stream(url, details):
    """A prompt beyond the context: 400 with what to do; sending fewer images is suggested only
    where images take part of the prompt (64 tokens: a photo at 'detail': 'low'), and 'detail':
    'low' only where a photo was sent finer (to photos all at 'low' it would say nothing new)."""
    context = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["context_length"]
    if details:  # the text alone fits, the photos' 64 tokens (or more) do not
        content = [{"type": "text", "text": "x" + " x" * (context - 40)},
                   *({"type": "image_url", "image_url": {"url": PNG, "detail": d}} for d in details)]
    else:
        content = [{"type": "text", "text": "x " * 9000}]
    response, lines = stream_lines(url, {"model": "tiny-f32", "stream": True, "max_tokens": 5,
                                         "messages": [{"role": "user", "content": content}]})
    assert response.status_code == 400
    error = json.loads("".join(lines))["error"]
    assert error["code"] == "context_length_exceeded"
    if details:
        assert re.fullmatch(r"the prompt has \d+ tokens \(\d+ of them for images\) but the context holds \d+: "
                            r"shorten the prompt or the conversation, or send fewer images"
                            + ("" if details == ("low",) else r" \(or 'detail': 'low'\)"), error["message"]), error
    else:
        assert re.fullmatch(r"the prompt has \d+ tokens but the context holds \d+: shorten the prompt or the "
                            r"conversation", error["message"]), error


@pytest.fixture
def fake():
    session = FakeSession()
    srv = ThreadServer(create_app(ServerConfig(model="fake", max_queue=2), loader=fake_loader(session)))
    try:
        yield srv, session
    finally:
        srv.stop()


def test_an_error_during_the_stream_is_one_error_event_then_the_end(fake):
    srv, _ = fake
    response, lines = stream_lines(srv.url, {"model": "fake", "stream": True, "messages": [
        {"role": "user", "content": "fail after two words"}]})
    assert response.status_code == 200
    payloads = events(lines)
    last = json.loads(payloads[-1])
    assert set(last) == {"error"} and set(last["error"]) == {"message", "type", "param", "code"}
    assert "boom" in last["error"]["message"] and "[DONE]" not in payloads
    # (tokens that arrive together may share a chunk)
    assert "".join(json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[1:-1]) == "fail after "
    ok = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": "fake", "messages": [
        {"role": "user", "content": "still here"}]}, timeout=30)  # the server keeps serving
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "still here "


def test_a_stream_starts_once_the_engine_has_read_the_prompt(fake):
    """The status and headers go out once the engine has read the prompt (the prompt's last progress
    event, sent as it is about to wait for the first token), not at its first progress event, while
    the event loop's work would hold up the engine's launches, and not with the first token, on that
    token's way to the client."""
    srv, session = fake
    body = {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "read this"}]}
    started, payloads = [], []

    def client() -> None:
        with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, timeout=30) as response:
            started.append((response.status_code, response.headers["content-type"], session.yielded))
            session.answering.set()
            payloads.extend(events(list(response.iter_lines())))

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    assert session.in_prompt.wait(10)  # the engine reported the vision tower's and the prefill's start
    time.sleep(0.3)
    assert started == []  # no status while it reads
    session.reading.set()
    thread.join(30)
    assert started[0][0] == 200 and started[0][1].startswith("text/event-stream")
    assert started[0][2] == 0  # before the first token (the engine waits for `answering`, set only then)
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert payloads[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "read this "


def test_an_engine_failure_while_it_reads_the_prompt_gets_its_own_status(fake):
    """(The vision tower out of GPU memory: a 500 the client's library raises, not a 200 stream.)"""
    srv, session = fake
    threading.Thread(target=lambda: (session.in_prompt.wait(10), time.sleep(0.3), session.reading.set()),
                     daemon=True).start()  # failing after a while in the vision tower
    body = {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "read and fail"}]}
    response, lines = stream_lines(srv.url, body)
    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    assert json.loads("".join(lines)) == {"error": {"message": "RuntimeError: out of memory", "type": "server_error",
                                                   "param": None, "code": "engine_error"}}


def test_an_engine_error_after_the_stream_started_is_its_error_event(fake):
    srv, session = fake
    session.reading.set()
    body = {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "read then fail"}]}
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        session.answering.set()
        payloads = events(list(response.iter_lines()))
    assert [json.loads(p) for p in payloads] == [  # the error alone: no role chunk, no [DONE]
        {"error": {"message": "RuntimeError: out of memory", "type": "server_error", "param": None,
                   "code": "engine_error"}}]


@pytest.mark.parametrize("stream", [True, False])
def test_the_engine_thread_is_held_only_until_the_first_chunk_is_sent(monkeypatch, stream):
    """After an answer's first token the engine thread waits for the request to send its first chunk
    (server.bridge.Answer.first_sent), at most FIRST_EVENT_HOLD_S. Every wait must end because the
    route said so, not at the bound; a control where the route's call does nothing shows the waits
    are really recorded. (Chat completions: the scripted engine has no tokenizer for
    /v1/completions, whose routes call first_sent alike.)"""
    from server import bridge
    from tests.server.test_load_and_cache import RecordingEvent

    events: list[RecordingEvent] = []
    init = bridge.Answer.__init__

    def recording_init(self, *args):
        init(self, *args)
        self._first_sent = RecordingEvent()
        events.append(self._first_sent)

    monkeypatch.setattr(bridge.Answer, "__init__", recording_init)
    monkeypatch.setattr(bridge, "FIRST_EVENT_HOLD_S", 0.5)
    srv = ThreadServer(create_app(ServerConfig(model="fake", max_queue=2), loader=fake_loader(FakeSession(0.05))))

    def ask() -> list[tuple[float | None, bool]]:
        events.clear()
        body = {"model": "fake", "stream": stream, "messages": [{"role": "user", "content": "one two three"}]}
        with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, timeout=30) as response:
            assert response.status_code == 200
            response.read()
        return [w for e in events for w in e.waits]

    try:
        waits = ask()
        assert all(set_ for _, set_ in waits), waits
        if stream:
            assert waits == [(0.5, True)]  # the first token (50 ms after the request) was held, once
        monkeypatch.setattr(bridge.Answer, "first_sent", lambda self: None)  # control: nobody lets it go
        assert ask() == [(0.5, False)]
    finally:
        srv.stop()


def test_stopping_the_server_mid_stream_ends_the_stream_properly(tiny_checkpoint):
    """Ctrl-C (SIGINT) while an answer streams and another waits in the queue: the stream ends with
    one 503 ``server_shutting_down`` error event (not a finish chunk that would pass the cut answer
    off as complete), the queued request gets a 503 response, the process exits within seconds, and
    the log has no traceback (uvicorn's own shutdown waited 3 s, cancelled the response task and cut
    the stream)."""
    import signal
    import threading

    from tests.server.helpers import ServerProcess, wait_ready

    proc = ServerProcess(tiny_checkpoint)
    try:
        wait_ready(proc.url, proc=proc.proc)
        body = {"model": "tiny-f32", "stream": True, "max_tokens": 4000, "ignore_eos": True, "temperature": 0,
                "messages": [{"role": "user", "content": "Count."}]}
        queued: list = []

        def ask_behind() -> None:  # admitted behind the stream: it waits in the engine's queue
            queued.append(httpx.post(f"{proc.url}/v1/chat/completions", json=dict(body, stream=False), timeout=30))

        behind = threading.Thread(target=ask_behind)
        payloads = []
        with httpx.stream("POST", f"{proc.url}/v1/chat/completions", json=body, timeout=30) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            for line in lines:
                if line:
                    payloads.append(line[len("data: "):])
                if len(payloads) == 3:  # the role chunk and two of content: generating now
                    behind.start()
                    deadline = time.monotonic() + 10
                    while 'smolchat_queue_length 2.0' not in httpx.get(f"{proc.url}/metrics").text:
                        assert time.monotonic() < deadline, "the second request was never admitted"
                        time.sleep(0.05)
                    proc.proc.send_signal(signal.SIGINT)
                    break
            payloads += [line[len("data: "):] for line in lines if line]
        last = json.loads(payloads[-1])
        assert last["error"]["code"] == "server_shutting_down", payloads[-3:]
        assert "[DONE]" not in payloads
        assert all("error" not in json.loads(p) for p in payloads[:-1])
        assert len(payloads) < 2000  # it stopped long before its 4000 tokens
        behind.join(30)
        assert queued and queued[0].status_code == 503, queued
        assert queued[0].json()["error"]["code"] == "server_shutting_down"
        proc.proc.wait(10)  # it exits (uvicorn's own shutdown also waited 3 s, then cut the stream)
        assert "Traceback" not in proc.output() and "CancelledError" not in proc.output(), proc.output()[-2000:]
    finally:
        proc.stop()


async def _asgi_writes(body: dict) -> list[bytes]:
    """The body messages the app sends for one request, driven through ASGI itself (over HTTP
    they could be merged or split on the way), on a scripted engine."""
    import asyncio

    app = create_app(ServerConfig(model="fake"), loader=fake_loader(FakeSession()))
    async with app.router.lifespan_context(app):
        while app.state.smolchat.bridge.state != "ready":
            await asyncio.sleep(0.01)
        raw, done, writes = json.dumps(body).encode(), asyncio.Event(), []

        async def receive() -> dict:
            if not done.is_set():
                done.set()
                return {"type": "http.request", "body": raw, "more_body": False}
            await asyncio.Event().wait()  # the client stays: the app cancels this wait when it is done

        async def send(message: dict) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                writes.append(message["body"])
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
                 "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 80)}
        await app(scope, receive, send)
    return writes


def test_the_role_goes_out_with_the_first_text_and_the_end_in_one_write():
    """One write (one send, one wake-up of the client) for the role and the first text, and one
    for the finish chunk, the usage and [DONE]; the events themselves are as the contract says."""
    import asyncio

    writes = asyncio.run(_asgi_writes({"model": "fake", "stream": True, "stream_options": {"include_usage": True},
                                       "messages": [{"role": "user", "content": "one two"}]}))
    split = [[json.loads(e[len("data: "):]) if e != "data: [DONE]" else e for e in w.decode().split("\n\n") if e]
             for w in writes]
    assert [len(events) for events in split] == [2, 1, 3]
    (role, first), (second,), (finish, use, done) = split
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["delta"] == {"content": "one "} and second["choices"][0]["delta"] == {"content": "two "}
    assert finish["choices"][0]["finish_reason"] == "stop" and use["choices"] == [] and done == "data: [DONE]"
    assert use["usage"]["completion_tokens"] == 2


def test_a_request_after_the_stop_began_is_refused_not_run():
    """Ctrl-C first cancels every admitted answer (``Server.end_answers``); a keep-alive connection's
    next request can still arrive before uvicorn closes it. It gets the same 503, and never reaches
    the engine: run, it would be cut at uvicorn's grace period and could end as a finished 200."""
    import threading

    import uvicorn

    from server.runner import Server
    from tests.server.helpers import free_port

    session = FakeSession(delay=0.05)
    app = create_app(ServerConfig(model="fake"), loader=fake_loader(session))
    port = free_port()
    server = Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"), app.state.smolchat.bridge)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started or httpx.get(f"http://127.0.0.1:{port}/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        body = {"model": "fake", "messages": [{"role": "user", "content": "hello there"}]}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", timeout=10) as client:  # one keep-alive connection
            assert client.post("/chat/completions", json=body).status_code == 200
            server.end_answers()  # what the signal handler does first
            while not app.state.smolchat.bridge.stopping:
                time.sleep(0.01)
            for stream in (False, True):
                after = client.post("/chat/completions", json=dict(body, stream=stream))
                assert after.status_code == 503, after.text
                assert after.json()["error"]["code"] == "server_shutting_down"
        assert len(session.sent) == 1  # only the request before the stop reached the engine
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_cli_against_this_server_takes_max_new_tokens_beyond_the_context(url):
    """Found by a trial: ``generate --server ... --max-new-tokens 100000`` failed with "The
    conversation is longer than the model's context" (the server refuses max_tokens beyond its
    context); the remote backend now asks for at most the context less one, as the local engine
    takes any limit and stops at the context's end. A refusal before any work prints no stats line."""
    import subprocess
    import sys

    from app.backends.remote import request_body
    from engine.api import GenerationParams

    assert request_body("m", [], GenerationParams(max_new_tokens=100_000), 8192)["max_tokens"] == 8191
    assert request_body("m", [], GenerationParams(max_new_tokens=100_000))["max_tokens"] == 100_000  # unknown context
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    cmd = [sys.executable, "-m", "engine", "generate", "--server", url, "--model", model, "--prompt", "hi",
           "--max-new-tokens", "100000", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["type"] == "done" and done["finish_reason"] in ("stop", "length"), done
    assert done["prefill_tokens_per_s"] is None and done["ttft_s"] > 0  # a stream says no prefill time (trial 55)
    proc = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=300)  # the text form: no made-up rate
    assert proc.returncode == 0 and "prefill" not in proc.stderr and " decode " in proc.stderr, proc.stderr
    proc = subprocess.run([*cmd[:-3], "--system", "x " * 20_000], capture_output=True, text=True, timeout=300)
    # Bad input, exit 2, as the same prompt refused by a local model (trial 71 F6: it was 1 through --server).
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {url}: The conversation is longer"), proc.stderr
