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


# -- a prompt given as token ids (the API's token-id prompts) -------------------------------------


def test_a_token_id_prompt_is_the_text_prompt(session):
    """The same ids, scored and continued exactly as the text they encode; its event's texts
    (with ``echo_prompt`` alone, unscored) are the text."""
    ids = session.tokenizer.encode(PROMPT, allow_special=True)
    params = GenerationParams(max_new_tokens=4, prompt_logprobs=3, logprobs=2, ignore_eos=True)
    by_text, by_ids = list(complete_text(session, PROMPT, params)), list(complete_text(session, list(ids), params))
    assert by_ids[0] == by_text[0] and [t.token_id for t in by_ids[0].tokens] == ids
    assert [e.token_id for e in by_ids[1:-1]] == [e.token_id for e in by_text[1:-1]]
    assert [e.logprob for e in by_ids[1:-1]] == pytest.approx([e.logprob for e in by_text[1:-1]], abs=1e-4)
    assert by_ids[-1].stats.prompt_tokens == len(ids) and by_ids[-1].finish_reason == "length"

    echoed = list(complete_text(session, list(ids), GenerationParams(max_new_tokens=1, echo_prompt=True)))
    assert isinstance(echoed[0], PromptLogprobsEvent) and isinstance(echoed[1], TokenEvent)
    assert "".join(t.text for t in echoed[0].tokens) == PROMPT
    assert all(t.logprob is None and t.top_logprobs == () for t in echoed[0].tokens)
    assert echoed[1].token_id == by_text[1].token_id


def test_a_token_id_prompt_that_ends_inside_a_character(session):
    """The robot emoji's last byte token left out: the echoed text ends with U+FFFD, as the
    tokenizer decodes those ids, and scoring still covers every token."""
    ids = session.tokenizer.encode("a robot 🤖")
    cut = next(n for n in range(len(ids), 0, -1) if session.tokenizer.decode(ids[:n]).endswith("\ufffd"))
    events = list(complete_text(session, ids[:cut], GenerationParams(max_new_tokens=0, prompt_logprobs=1)))
    tokens = events[0].tokens
    assert "".join(t.text for t in tokens) == session.tokenizer.decode(ids[:cut])
    assert len(tokens) == cut and all(t.logprob is not None for t in tokens[1:])


@pytest.mark.parametrize(("ids", "message"), [
    ([], "the prompt is empty"),
    ([5, -1], r"token 1 is -1: token ids are integers in \[0, 49280\)"),
    ([49280], r"token 0 is 49280: token ids are integers in \[0, 49280\)"),
    ([5, True], r"token 1 is True \(bool\)"),
    ([5.0], r"token 0 is 5.0 \(float\)"),
])
def test_a_token_id_prompt_outside_the_vocabulary_is_refused(session, ids, message):
    with pytest.raises(ValueError, match=message):
        complete_text(session, ids, GenerationParams(max_new_tokens=1))


def test_a_token_id_prompt_with_the_image_token_is_refused(session):
    with pytest.raises(ValueError, match="image token <image>"):
        complete_text(session, [5, session.tokenizer.token_to_id("<image>"), 6], GenerationParams(max_new_tokens=1))


def test_a_text_prompt_far_beyond_the_context_is_refused_before_it_is_encoded(session, monkeypatch):
    """Trial 39: megabytes of prompt held the engine thread for seconds of encoding, to be refused."""
    from engine.api.errors import PromptTooLongError

    text = "hello " * 500_000
    least = session.tokenizer.least_tokens(len(text))
    assert least > max(session.cache.capacity, 9999)
    monkeypatch.setattr(session.tokenizer, "encode", lambda *a, **k: pytest.fail("encoded"))
    with pytest.raises(PromptTooLongError) as err:
        complete_text(session, text, GenerationParams(max_new_tokens=1))
    # Plain numbers, as every other count in these messages ("18518", not "18,518").
    assert str(err.value) == f"the prompt has at least {least} tokens but the context holds {session.cache.capacity}"
