"""The pipelined token stream (a token's decode step is launched before the token is read back):
same tokens as the plain stream, exact token budget, and a cache its callers can truncate."""

from __future__ import annotations

import pytest
import torch

from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession
from engine.generate import token_stream
from engine.registry import load_components
from engine.sampling import TokenSampler, make_sampler

PROMPT = [1, 4093, 42, 1159, 314, 253, 1345, 49279, 198, 9519, 42]


@pytest.fixture(scope="module")
def components(tiny_checkpoint):
    return load_components(tiny_checkpoint, device="cpu", dtype="float32")


def stream(model, kind, params, n, pipelined, stop_after=None):
    cache = model.create_kv_cache(CacheConfig(kind=kind, max_tokens=64))
    logits = model.prefill(model.embed(torch.tensor([PROMPT])), cache, range(0, len(PROMPT)))
    tokens = []
    for token in token_stream(model, cache, make_sampler(params), list(PROMPT), logits, n, pipelined=pipelined):
        tokens.append(token)
        if len(tokens) == stop_after:
            break
    return tokens, cache.seq_len


@pytest.mark.parametrize("kind", ["paged", "contiguous"])
@pytest.mark.parametrize("params", [GenerationParams(temperature=0.0),
                                    GenerationParams(temperature=0.9, top_p=0.9, seed=7),
                                    GenerationParams(temperature=0.0, repetition_penalty=1.3)],
                         ids=["greedy", "sampled", "penalty"])
def test_same_tokens_as_the_plain_stream(components, kind, params):
    model = components[0]
    plain, plain_len = stream(model, kind, params, 20, pipelined=False)
    piped, piped_len = stream(model, kind, params, 20, pipelined=True)
    assert piped == plain and len(piped) == 20
    # At the budget neither stream feeds the last token: the cache holds the prompt + 19 tokens.
    assert piped_len == plain_len == len(PROMPT) + 19


def test_a_consumer_that_stops_leaves_one_extra_step(components):
    model = components[0]
    plain, plain_len = stream(model, "paged", GenerationParams(), 20, pipelined=False, stop_after=5)
    piped, piped_len = stream(model, "paged", GenerationParams(), 20, pipelined=True, stop_after=5)
    assert piped == plain
    assert plain_len == len(PROMPT) + 4  # lazy: the 5th token was never fed
    assert piped_len == len(PROMPT) + 5  # its step was launched before it was read back


def test_chat_session_conversation_is_the_same_pipelined(components):
    answers = {}
    for pipelined in (False, True):
        session = ChatSession(*components, CacheConfig(kind="paged", max_tokens=256))
        session.pipelined = pipelined
        turns = []
        for text, n in (("Hello there", 6), ("And again", 5)):
            events = list(session.send(text, params=GenerationParams(max_new_tokens=n, ignore_eos=True)))
            done = events[-1]
            assert isinstance(done, DoneEvent) and done.error is None
            turns.append(([e.token_id for e in events if isinstance(e, TokenEvent) and e.token_id >= 0],
                          done.stats.cached_tokens))
        # Cancel mid-answer: the extra step is dropped with the rest of the unkept cache.
        gen = session.send("Stop early", params=GenerationParams(max_new_tokens=30, ignore_eos=True))
        next(gen)
        session.cancel()
        events = list(gen)
        assert events[-1].finish_reason == "cancelled"
        assert session.cache.seq_len == len(session._cached_keys)
        turns.append(session.cache.seq_len)
        answers[pipelined] = turns
    assert answers[True][:2] == answers[False][:2]
    # After the cancel the pipelined stream has already fed the answer's last token to the cache (its
    # step runs one ahead), so it may keep that token too. (On the CPU both sessions used to take the
    # speculative path, which ignores `pipelined`; with the native decode step auto speculation is
    # off and the pipelined stream really runs.)
    assert answers[False][2] <= answers[True][2] <= answers[False][2] + 1
    assert answers[True][1][1] > 0  # the second turn reused the first turn's cache


@pytest.fixture(scope="module")
def static_components(tiny_checkpoint):
    """The tiny model decoding through the static decoder (eager on the CPU): the token step path."""
    parts = load_components(tiny_checkpoint, device="cpu", dtype="float32")
    parts[0].static_decode = True
    return parts


@pytest.mark.parametrize("kind", ["paged", "contiguous"])
@pytest.mark.parametrize("params", [GenerationParams(temperature=0.0),
                                    GenerationParams(temperature=0.9, top_p=0.9, seed=7),
                                    GenerationParams(temperature=0.0, repetition_penalty=1.3)],
                         ids=["greedy", "sampled", "penalty"])
def test_token_step_gives_the_plain_streams_tokens(components, static_components, kind, params):
    model = static_components[0]
    assert model.supports_token_decode(model.create_kv_cache(CacheConfig(kind=kind, max_tokens=64)))
    plain, plain_len = stream(components[0], kind, params, 40, pipelined=False)
    piped, piped_len = stream(model, kind, params, 40, pipelined=True)
    assert piped == plain and len(piped) == 40
    assert piped_len == plain_len == len(PROMPT) + 39


def test_device_greedy_samples_only_the_first_token_on_the_host(static_components, monkeypatch):
    model = static_components[0]
    calls = []
    original = TokenSampler.sample_checked

    def counted(self, logits, history):
        calls.append(len(history))
        return original(self, logits, history)

    monkeypatch.setattr(TokenSampler, "sample_checked", counted)
    tokens, _ = stream(model, "paged", GenerationParams(), 12, pipelined=True)
    assert len(tokens) == 12
    assert calls == [len(PROMPT)]  # the prefill's token; every later argmax came from the step's graph


def test_decode_token_continues_only_its_own_steps(static_components):
    model = static_components[0]

    def prefilled():
        cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=64))
        model.prefill(model.embed(torch.tensor([PROMPT])), cache, range(0, len(PROMPT)))
        return cache

    cache = prefilled()
    with pytest.raises(ValueError, match="continues a previous decode_token"):
        model.decode_token(None, cache)
    _, first, _ = model.decode_token(torch.tensor([5]), cache)
    fed = int(first)
    logits, argmax, reported = model.decode_token(None, cache)  # fed `fed` on the device
    logits = logits.clone()
    assert cache.seq_len == len(PROMPT) + 2
    assert int(argmax) == int(reported) == int(logits.argmax(-1))
    # The same two steps through the plain decode path.
    ref = prefilled()
    model.decode(model.embed(torch.tensor([[5]])), ref)
    want = model.decode(model.embed(torch.tensor([[fed]])), ref)
    assert (logits - want).abs().max() < 1e-5
    model.decode(model.embed(torch.tensor([[int(argmax)]])), cache)  # a plain step in between
    with pytest.raises(ValueError, match="continues a previous decode_token"):
        model.decode_token(None, cache)


@pytest.mark.parametrize("pipelined", [False, True])
def test_on_wait_runs_once_when_the_host_would_wait_for_the_first_token(components, pipelined):
    """The hook a server starts its response from (the prompt-read progress event): once, before the
    first token; pipelined, after the next step's launch (the cache already holds the first token)."""
    model = components[0]
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=64))
    logits = model.prefill(model.embed(torch.tensor([PROMPT])), cache, range(0, len(PROMPT)))
    calls, seen = [], []
    for token in token_stream(model, cache, make_sampler(GenerationParams(temperature=0.0)), list(PROMPT), logits, 4,
                              pipelined=pipelined, on_wait=lambda: calls.append((cache.seq_len, len(seen)))):
        seen.append(token)
    assert calls == [(len(PROMPT) + (1 if pipelined else 0), 0)] and len(seen) == 4


def test_what_on_wait_raises_ends_the_stream_before_the_first_token(components):
    model = components[0]
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=64))
    logits = model.prefill(model.embed(torch.tensor([PROMPT])), cache, range(0, len(PROMPT)))

    def cancelled() -> None:
        raise RuntimeError("cancelled")
    seen = []
    with pytest.raises(RuntimeError, match="cancelled"):
        for token in token_stream(model, cache, make_sampler(GenerationParams()), list(PROMPT), logits, 4,
                                  pipelined=True, on_wait=cancelled):
            seen.append(token)
    assert seen == []
