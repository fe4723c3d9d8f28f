"""Logprobs of tokens that hold part of a UTF-8 character: each entry carries that token's own raw
bytes, and its ``token`` is ``bytes:\\xNN...`` as OpenAI writes such a token (vLLM PR 6626 quotes
OpenAI's ``'bytes:\\xf0\\x9f\\x98'``), for the chosen token and for every alternative alike.

The tiny model's answers are random, so its sampler is replaced by one that picks a scripted
answer (an emoji and CJK characters split over byte tokens) while it records the real logits' top
tokens; the engine's logprobs and the server's JSON are the real code."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

import engine.chat
from engine.chat import ChatSession
from server import ServerConfig, create_app
from tests.server.helpers import ThreadServer

ANSWER = "😀日本 ok"
#: The SmolVLM tokenizer's pieces of ANSWER (checked below): three tokens for the emoji, two for 日.
PIECES = [b"\xf0\x9f", b"\x98", b"\x80", b"\xe6\x97", b"\xa5", "本".encode(), b" ok"]


@pytest.fixture(scope="module")
def session(tiny_checkpoint):
    return ChatSession.load(tiny_checkpoint)


@pytest.fixture(scope="module")
def url(session, tiny_checkpoint):
    srv = ThreadServer(create_app(ServerConfig(model=str(tiny_checkpoint)), loader=lambda model, options: session))
    try:
        yield srv.url
    finally:
        srv.stop()


def gpt2_bytes(vocab_string: str) -> bytes:
    """A byte-level BPE token's bytes from its vocabulary string, by transformers' own table."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    decoder = {c: b for b, c in bytes_to_unicode().items()}
    return bytes(decoder[c] for c in vocab_string)


class Scripted:
    """A sampler that answers ``ids`` and records, per step, the ``top`` most likely ids and their
    log-probabilities under the logits it was given."""

    def __init__(self, ids: list[int], top: int):
        self.ids, self.top, self.seen = list(ids), top, []

    def __call__(self, logits: torch.Tensor, history) -> int:
        values, ids = torch.topk(torch.log_softmax(logits.float(), -1), self.top)
        self.seen.append(list(zip(ids.tolist(), values.tolist())))
        return self.ids[len(self.seen) - 1]


@pytest.fixture
def scripted(session, monkeypatch):
    ids = session.tokenizer.encode(ANSWER)
    assert [gpt2_bytes(session.tokenizer.id_to_token(i)) for i in ids] == PIECES
    samplers = []

    def make(params, device):
        samplers.append(Scripted(ids, 3))
        return samplers[-1]
    monkeypatch.setattr(engine.chat, "make_sampler", make)
    return session.tokenizer, samplers


def expected_top(tokenizer, step: list[tuple[int, float]]) -> list[tuple[bytes, float]]:
    return [(gpt2_bytes(tokenizer.id_to_token(i)), lp) for i, lp in step]


def as_token(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def test_chat_logprobs_carry_each_tokens_own_bytes(url, scripted):
    tokenizer, samplers = scripted
    body = {"model": "tiny-f32", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": len(PIECES),
            "logprobs": True, "top_logprobs": 3, "ignore_eos": True}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
    assert reply["choices"][0]["message"]["content"] == ANSWER
    content = reply["choices"][0]["logprobs"]["content"]
    assert [bytes(e["bytes"]) for e in content] == PIECES
    assert [e["token"] for e in content] == [
        "bytes:\\xf0\\x9f", "bytes:\\x98", "bytes:\\x80", "bytes:\\xe6\\x97", "bytes:\\xa5", "本", " ok"]
    for entry, step in zip(content, samplers[-1].seen, strict=True):
        top = expected_top(tokenizer, step)
        assert [bytes(t["bytes"]) for t in entry["top_logprobs"]] == [raw for raw, _ in top]
        assert [t["token"] for t in entry["top_logprobs"]] == [as_token(raw) for raw, _ in top]
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx([lp for _, lp in top], abs=1e-5)

    # Streamed: the same entries, one per token, though the text waits for whole characters.
    lines = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=60).text.splitlines()
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    streamed = [e for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
                for e in c["choices"][0]["logprobs"]["content"]]
    assert [bytes(e["bytes"]) for e in streamed] == PIECES
    assert [e["token"] for e in streamed] == [e["token"] for e in content]


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs_keep_partial_byte_tokens_apart(url, scripted, stream):
    tokenizer, samplers = scripted
    body = {"model": "tiny-f32", "prompt": "Say it:", "max_tokens": len(PIECES), "logprobs": 3,
            "ignore_eos": True, "stream": stream}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    if stream:
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    else:
        chunks = [response.json()]
    lps = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == ANSWER
    tokens = [t for lp in lps for t in lp["tokens"]]
    tops = [t for lp in lps for t in lp["top_logprobs"]]
    offsets = [o for lp in lps for o in lp["text_offset"]]
    assert tokens == ["bytes:\\xf0\\x9f", "bytes:\\x98", "bytes:\\x80", "bytes:\\xe6\\x97", "bytes:\\xa5", "本", " ok"]
    assert offsets == [0, 0, 0, 1, 1, 2, 3]  # where each token's character starts in the text
    for top, step in zip(tops, samplers[-1].seen, strict=True):
        expected = {as_token(raw): lp for raw, lp in expected_top(tokenizer, step)}
        assert len(expected) == 3  # three different tokens, three different keys
        assert top == pytest.approx(expected, abs=1e-5)


def test_greedy_top_alternative_is_the_chosen_token_with_its_bytes(url):
    body = {"model": "tiny-f32", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
            "logprobs": True, "top_logprobs": 2, "ignore_eos": True}
    content = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    for entry in content:
        assert entry["top_logprobs"][0]["token"] == entry["token"]
        assert entry["top_logprobs"][0]["bytes"] == entry["bytes"]
        assert entry["top_logprobs"][0]["logprob"] == pytest.approx(entry["logprob"])
