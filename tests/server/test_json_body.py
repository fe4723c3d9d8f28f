"""Request bodies parsed by pydantic-core (server.json_body): the same values and errors as json.loads."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from server import ServerConfig, create_app, json_body
from server.json_body import parse_json
from tests.server.fakes import FakeSession, fake_loader

# Bodies both parsers accept, and bodies the standard library accepts where pydantic-core may not (an
# escaped surrogate pair, a byte-order mark, UTF-16, nesting deeper than pydantic-core's 200 levels).
SAME = [b'{"a": NaN, "b": Infinity, "c": -Infinity}', b'{"a": 1, "a": 2}', b'{"x": 123456789012345678901234567890}',
        b'{"f": 0.1, "g": 1e400, "h": 5e-324, "i": -0.0, "j": 1.0, "k": 10}', b'"\\u00e9\\/\\n"',
        '{"k": "\u00e9\u4e2d\U0001f600"}'.encode(), b'  {"a": [true, false, null]}  ']
STDLIB_ONLY = [b'"\\ud83d\\ude00"', b'\xef\xbb\xbf{"a": 1}', '{"a": 1}'.encode("utf-16"), b"[" * 300 + b"]" * 300]


@pytest.mark.parametrize("body", SAME + STDLIB_ONLY)
def test_parse_json_gives_what_json_loads_gives(body):
    assert repr(parse_json(body)) == repr(json.loads(body))  # repr: NaN != NaN, and -0.0 == 0.0


@pytest.mark.parametrize("body", [b'{"model": "m", "messages": [', b"{} x", b"", b"{'a': 1}"])
def test_invalid_json_raises_the_standard_librarys_error(body):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(body)
    with pytest.raises(json.JSONDecodeError) as got:
        parse_json(body)
    assert (got.value.msg, got.value.pos) == (expected.value.msg, expected.value.pos)


@pytest.mark.parametrize("body", [b'"\\ud800"', b'{"messages": [{"content": "hi \\udfff"}]}'])
def test_a_lone_surrogate_is_invalid_json(body):
    """json.loads accepts it, but it is not Unicode text (the tokenizer failed on it: a 500)."""
    with pytest.raises(json.JSONDecodeError, match="lone UTF-16 surrogate"):
        parse_json(body)


def test_a_lone_surrogate_in_a_request_is_a_400():
    app = create_app(ServerConfig(model="fake"), loader=fake_loader(FakeSession()))
    with TestClient(app, base_url="http://127.0.0.1") as client:  # a loopback Host, as a local client sends
        while app.state.smolchat.bridge.state != "ready":
            time.sleep(0.01)
        for path, body in (("/v1/chat/completions", b'{"model": "fake", "messages": [{"role": "user", "content": "hi \\ud800"}]}'),
                           ("/v1/completions", b'{"model": "fake", "prompt": "\\ud800"}'),
                           ("/v1/embeddings", b'{"model": "fake", "input": "\\ud800"}')):
            r = client.post(path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400, (path, r.text)
            assert r.json()["error"]["code"] == "invalid_json" and "surrogate" in r.json()["error"]["message"]
        ok = client.post("/v1/chat/completions", json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
        assert ok.status_code == 200


@pytest.mark.parametrize("body, message", [
    (b'{"s": "\xff"}', "it is not UTF-8 text (byte 0xff at offset 7)"),
    (b"[" * 100_000 + b"]" * 100_000, "its arrays or objects are nested too deeply"),
    (b'{"n": ' + b"1" * 5000 + b"}", "a number in it has more than 4300 digits"),
    # json.loads reads these as UTF-16 (by their first bytes), where they are no JSON: "Expecting value"
    (b'\xff\xfe{"a": 1}', "it is not UTF-8 text (byte 0xff at offset 0)"),
    (b'\xff\xfe{"a": 12}', "it is not UTF-8 text (byte 0xff at offset 0)"),  # (an odd length: "not UTF-16 text")
    ('{"a": '.encode("utf-16"), "it is not UTF-8 text (byte 0xff at offset 0)"),
], ids=["invalid UTF-8", "nested too deeply", "a number too long", "UTF-16 BOM before UTF-8",
        "UTF-16 BOM before UTF-8, odd length", "UTF-16, cut short"])
def test_what_json_loads_raises_besides_syntax_errors_is_a_syntax_error_naming_it(body, message):
    with pytest.raises(json.JSONDecodeError) as info:
        parse_json(body)
    assert info.value.msg == message


def test_the_routes_parse_bodies_once_with_pydantic_core(monkeypatch):
    calls = []
    real = json_body.from_json
    monkeypatch.setattr(json_body, "from_json", lambda data: calls.append(len(data)) or real(data))
    app = create_app(ServerConfig(model="fake"), loader=fake_loader(FakeSession()))
    with TestClient(app, base_url="http://127.0.0.1") as client:  # a loopback Host, as a local client sends
        deadline = time.monotonic() + 20
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "hello there"}]}).encode()
        ok = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "hello there "  # the fake echoes words
        assert calls == [len(body)]
        bad = client.post("/v1/chat/completions", content=b'{"model": "fake", "messages": [',
                          headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"] == {
            "message": "the body is not valid JSON: Expecting value at line 1, column 32",
            "type": "invalid_request_error", "param": None, "code": "invalid_json"}
        raw = client.post("/v1/chat/completions", headers={"content-type": "application/json"},
                          content=b'{"model": "fake",\n "messages": [{"role": "user", "content": "one\ntwo"}]}')
        assert raw.status_code == 400 and raw.json()["error"]["message"] == (
            "the body is not valid JSON: Invalid control character at line 2, column 47 (a string holds a raw "
            "newline, tab or other control character: write it as \\n, \\t or \\u00XX)")
        nan = client.post("/v1/chat/completions", headers={"content-type": "application/json"},
                          content=b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}')
        assert nan.status_code == 400 and nan.json()["error"]["param"] == "temperature"
        assert len(calls) == 4
