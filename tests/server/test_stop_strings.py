"""OpenAI's ``stop`` strings: never a character of one reaches the client, the finish reason is
"stop", and a request cannot make the matching expensive (server/answer_stream.StopMatcher)."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from server import ServerConfig, create_app
from server.answer_stream import StopMatcher
from server.schemas import MAX_STOP_CHARS
from tests.server.fakes import FakeSession, fake_loader
from tests.server.helpers import ThreadServer


def run(stops: list[str], tokens: list[str]) -> tuple[list[str], bool]:
    """What a matcher emits per token (then its flush, when no stop matched), and whether one did."""
    matcher, out = StopMatcher(stops), []
    for token in tokens:
        text, stopped = matcher.feed(token)
        out.append(text)
        if stopped:
            return out, True
    return [*out, matcher.flush()], False


def test_a_stop_string_split_over_tokens_is_held_back_and_never_sent():
    assert run(["<end>"], ["Hello <", "en", "d> more"]) == (["Hello ", "", ""], True)
    # A held-back start that turns out not to be the stop string is sent as soon as that is known.
    assert run(["<end>"], ["a <", "en", "x", "y"]) == (["a ", "", "<enx", "y", ""], False)
    # Overlapping starts: "aab" inside "aaab" is found although the first "aa" led nowhere.
    assert run(["aab"], ["a", "a", "a", "b!"]) == (["", "", "a", ""], True)


def test_the_earliest_of_several_stop_strings_wins():
    # "bc" is complete first, but "abcd" begins earlier in the same token.
    assert run(["bc", "abcd"], ["x", "abcd"]) == (["x", ""], True)
    assert run(["zz", "b"], ["azz", "b"]) == (["a"], True)


def test_the_text_held_back_is_at_most_one_less_than_the_longest_stop_string():
    matcher = StopMatcher(["Z" * 300, "ab"])
    assert matcher.feed("Z" * 299) == ("", False) and matcher.buffer == "Z" * 299
    assert matcher.feed("a") == ("Z" * 299, False) and matcher.buffer == "a"  # "a" may begin "ab"
    assert matcher.feed("Y" + "Z" * 299) == ("aY", False) and matcher.buffer == "Z" * 299
    assert matcher.feed("Zb") == ("", True)


def _reference(stops: list[str], tokens: list[str]) -> tuple[list[str], bool]:
    """The rule said directly: emit all but the longest end of the text so far that begins a stop
    string; at a match, emit up to the earliest stop string's start."""
    buffer, out = "", []
    for token in tokens:
        buffer += token
        hits = [i for i in (buffer.find(s) for s in stops) if i >= 0]
        if hits:
            return [*out, buffer[:min(hits)]], True
        hold = max((k for s in stops for k in range(1, len(s)) if buffer.endswith(s[:k])), default=0)
        out.append(buffer[:len(buffer) - hold])
        buffer = buffer[len(buffer) - hold:]
    return [*out, buffer], False


def test_the_matcher_agrees_with_the_rule_on_random_text():
    rng = random.Random(7)
    for _ in range(3000):
        stops = ["".join(rng.choices("ab", k=rng.randint(1, 6))) for _ in range(rng.randint(1, 4))]
        tokens = ["".join(rng.choices("abc", k=rng.randint(0, 4))) for _ in range(rng.randint(1, 12))]
        assert run(stops, tokens) == _reference(stops, tokens), (stops, tokens)


@pytest.fixture(scope="module")
def fake_url():
    srv = ThreadServer(create_app(ServerConfig(model="fake"), loader=fake_loader(FakeSession())))
    try:
        yield srv.url
    finally:
        srv.stop()


def chat(url: str, **fields) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
        "model": "fake", "messages": [{"role": "user", "content": "alpha beta gamma delta"}], **fields})


def test_a_stop_string_ends_the_answer_streamed_or_not(fake_url):
    answer = chat(fake_url, stop=["ta ga", "x" * MAX_STOP_CHARS])
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    assert choice["message"]["content"] == "alpha be" and choice["finish_reason"] == "stop"
    streamed = chat(fake_url, stop="ta ga", stream=True)
    events = [json.loads(line[len("data: "):]) for line in streamed.text.split("\n\n")
              if line.startswith("data: {")]
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == "alpha be"
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("stop,param", [("Z" * (MAX_STOP_CHARS + 1), "stop"),
                                        (["ok", "Z" * 600_000], "stop[1]")])
def test_a_stop_string_longer_than_the_limit_is_refused(fake_url, stop, param):
    refused = chat(fake_url, stop=stop)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "message": f"{param}: String should have at most {MAX_STOP_CHARS} characters",
        "type": "invalid_request_error", "param": param, "code": "invalid_value"}
    assert httpx.get(f"{fake_url}/health", timeout=5).status_code == 200


class _Scripted:
    """An admitted answer's shape for server.answer_stream.pieces: these tokens, then the end."""

    shut_down = False

    def __init__(self, tokens: list[str]):
        from engine.api import DoneEvent, GenerationStats, TokenEvent

        self.events = [TokenEvent(t, i, logprob=-0.5) for i, t in enumerate(tokens)] + [
            DoneEvent("stop", GenerationStats(generated_tokens=len(tokens)))]

    async def next(self, is_disconnected=None):
        return self.events.pop(0)

    def cancel(self) -> None:
        pass


def given(stops: list[str], tokens: list[str]) -> tuple[str, list[str]]:
    """The text :func:`pieces` gives, and the tokens it gives events for (their logprobs), in order."""
    import asyncio

    from server.answer_stream import Outcome, pieces

    async def collect():
        return [pair async for pair in pieces(_Scripted(tokens), None, stops, Outcome())]
    pairs = asyncio.run(collect())
    return "".join(text for text, _ in pairs), [event.text for _, event in pairs if event is not None]


def test_tokens_come_with_their_text_and_a_stop_strings_tokens_do_not():
    """Trial 66 F4: logprobs listed " " and "8" of the stop string " 8", whose text was not sent, and
    their text_offset pointed past the text's end."""
    tokens = [" 5", ",", " 6", ",", " 7", ",", " ", "8", ",", " 9"]
    assert given([" 8"], tokens) == (" 5, 6, 7,", tokens[:6])
    assert given([], tokens) == ("".join(tokens), tokens)
    assert given(["XY"], ["ab", "cX", "Yd", "e"]) == ("abc", ["ab", "cX"])  # "cX" began in the text
    assert given(["zz"], ["a", "z"]) == ("az", ["a", "z"])  # held back, then given at the end
    assert given(["b"], ["", "a", "b"]) == ("a", ["", "a"])  # (a token of no whole character yet)


def test_logprobs_cover_the_text_a_stop_string_ends(url):
    """The real engine: the logprob tokens joined are the text returned, streamed or not."""
    body = {"model": "tiny-f32", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
            "ignore_eos": True, "logprobs": 1}
    whole = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert len(whole["logprobs"]["tokens"]) == 24
    # A stop string beginning at a token from the 9th on, found nowhere before it in the text.
    cut, stop = next((cut, whole["text"][cut:cut + 3]) for cut in whole["logprobs"]["text_offset"][8:]
                     if whole["text"].find(whole["text"][cut:cut + 3]) == cut)
    answer = httpx.post(f"{url}/v1/completions", json={**body, "stop": stop}, timeout=60).json()["choices"][0]
    text = whole["text"][:cut]
    assert answer["text"] == text and answer["finish_reason"] == "stop"
    assert "".join(answer["logprobs"]["tokens"]) == text
    assert all(offset < len(text) for offset in answer["logprobs"]["text_offset"])
    lines = httpx.post(f"{url}/v1/completions", json={**body, "stop": stop, "stream": True}, timeout=60).text
    chunks = [json.loads(line[6:]) for line in lines.split("\n\n") if line.startswith("data: {")]
    streamed = [t for c in chunks for t in ((c["choices"][0]["logprobs"] or {}).get("tokens") or [])]
    assert "".join(c["choices"][0]["text"] for c in chunks) == text and "".join(streamed) == text
