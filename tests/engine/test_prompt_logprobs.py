"""A raw completion's scored prompt (``GenerationParams.prompt_logprobs``: the completions API's
``echo`` with ``logprobs``), on the tiny random checkpoint: the values are the float32 log-softmax
of ``prefill_all_logits`` over the whole prompt, whatever the chunking and the session's cache."""

from __future__ import annotations

import pytest
import torch

from engine.api import DoneEvent, GenerationParams, PromptLogprobsEvent, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession
from engine.completion import complete_text
from engine.prompt_logprobs import score_prompt

PROMPT = "Once upon a time, a small robot 🤖 lived in a lighthouse by the sea."


@pytest.fixture(scope="module")
def session(tiny_checkpoint):
    return ChatSession.load(tiny_checkpoint)


def reference(model, ids: list[int]) -> torch.Tensor:
    """float32 log-softmax of the logits of every position, one prefill from an empty cache."""
    cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=len(ids)))
    with torch.inference_mode():
        logits = model.prefill_all_logits(model.embed(torch.tensor([ids])), cache, range(len(ids)))[0]
    return torch.log_softmax(logits.float(), -1)


@pytest.mark.parametrize("chunk", [3, 512])
def test_score_prompt_is_the_log_softmax_of_all_logits(session, chunk):
    ids = session.tokenizer.encode(PROMPT)
    ref = reference(session.model, ids)
    scores = score_prompt(session.model, ids, 4, chunk=chunk)
    assert len(scores) == len(ids) - 1  # the first token has nothing before it
    for t, (logprob, best) in enumerate(scores, start=1):
        assert abs(logprob - float(ref[t - 1, ids[t]])) < 1e-4
        values, top = torch.topk(ref[t - 1], 4)
        assert [i for i, _ in best] == top.tolist()
        assert max(abs(lp - float(v)) for (_, lp), v in zip(best, values)) < 1e-4
        if best[0][0] == ids[t]:  # a greedy token's value is its alternative's, exactly
            assert best[0][1] == logprob


def test_a_completion_with_prompt_logprobs_and_no_tokens(session):
    ids = session.tokenizer.encode(PROMPT)
    events = list(complete_text(session, PROMPT, GenerationParams(max_new_tokens=0, prompt_logprobs=2)))
    assert [type(e) for e in events] == [PromptLogprobsEvent, DoneEvent]
    tokens, done = events[0].tokens, events[1]
    assert done.finish_reason == "length" and done.stats.prompt_tokens == len(ids)
    assert done.stats.generated_tokens == 0
    assert [t.token_id for t in tokens] == ids
    assert "".join(t.text for t in tokens) == PROMPT  # each token's share of the prompt's text
    assert tokens[0].logprob is None and tokens[0].top_logprobs == ()
    ref = reference(session.model, ids)
    for t in range(1, len(ids)):
        assert abs(tokens[t].logprob - float(ref[t - 1, ids[t]])) < 1e-4
        assert len(tokens[t].top_logprobs) == 2
        assert tokens[t].token_bytes == session.tokenizer.token_bytes(ids[t])


def test_prompt_logprobs_then_the_answer_whatever_the_cache_holds(session):
    """The second run finds the prompt in the session's cache (prefix reuse): the scores are the
    same, the answer too, and the scored prompt comes before the first token."""
    params = GenerationParams(max_new_tokens=3, prompt_logprobs=1, logprobs=1, ignore_eos=True)
    runs = []
    for _ in range(2):
        events = list(complete_text(session, PROMPT, params))
        assert isinstance(events[0], PromptLogprobsEvent) and isinstance(events[-1], DoneEvent)
        assert all(isinstance(e, TokenEvent) for e in events[1:-1])
        runs.append(events)
    assert runs[1][-1].stats.cached_tokens > 0
    assert runs[0][0] == runs[1][0]
    assert [e.token_id for e in runs[0][1:-1]] == [e.token_id for e in runs[1][1:-1]]


def test_a_chat_answer_needs_a_token(session):
    turns = list(session.turns)
    events = list(session.send("Hi", params=GenerationParams(max_new_tokens=0)))
    assert len(events) == 1 and events[0].finish_reason == "error" and "max_new_tokens" in events[0].error
    assert session.turns == turns
