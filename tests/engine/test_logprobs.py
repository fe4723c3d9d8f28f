"""Per-token logprobs (GenerationParams.logprobs): recorded only when asked, and they change no token."""

from __future__ import annotations

import math

import pytest

from engine.api import GenerationParams, TokenEvent
from engine.chat import ChatSession


@pytest.fixture(scope="module")
def session(tiny_checkpoint):
    return ChatSession.load(tiny_checkpoint)


def answer(session, **kwargs) -> list[TokenEvent]:
    session.reset()
    events = session.send("Tell me about cats", params=GenerationParams(max_new_tokens=8, ignore_eos=True, **kwargs))
    return [e for e in events if isinstance(e, TokenEvent) and e.token_id >= 0]


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.9, "top_k": 50, "seed": 3}])
def test_logprobs_change_no_token_and_are_off_by_default(session, sampling):
    plain = answer(session, **sampling)
    scored = answer(session, logprobs=3, **sampling)
    assert [e.token_id for e in scored] == [e.token_id for e in plain]
    assert all(e.logprob is None and e.top_logprobs == () for e in plain)
    for event in scored:
        assert event.logprob <= 0 and len(event.top_logprobs) == 3
        tops = [lp for _, lp in event.top_logprobs]
        assert tops == sorted(tops, reverse=True) and sum(math.exp(lp) for lp in tops) <= 1 + 1e-5
        assert event.logprob <= tops[0] + 1e-6
    if not sampling:  # greedy takes the most likely token
        assert all(e.logprob == pytest.approx(e.top_logprobs[0][1]) for e in scored)


def test_logprobs_out_of_range_are_refused():
    with pytest.raises(ValueError, match="logprobs"):
        GenerationParams(logprobs=21)
