"""Raw SSE checks (httpx) of the streaming contract, on the real tiny model and on a scripted engine."""

from __future__ import annotations

import json

import httpx
import pytest

from server import ServerConfig, create_app
from tests.server.fakes import FakeSession, fake_loader
from tests.server.helpers import ThreadServer


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
    else:
        assert usage_chunks == [] and all("usage" not in c for c in chunks)


def test_an_error_before_the_first_token_is_a_real_status_not_a_stream(url):
    response, lines = stream_lines(url, {"model": "tiny-f32", "stream": True, "max_tokens": 5,
                                         "messages": [{"role": "user", "content": "x " * 9000}]})
    assert response.status_code == 400
    assert json.loads("".join(lines))["error"]["code"] == "context_length_exceeded"


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
