"""A model whose logits hold NaN or infinity fails with a clear error naming the token, instead of
ending the answer silently (greedy argmax picks the NaN) or raising a device error (sampling)."""

from __future__ import annotations

import pytest
import torch

from engine.api.errors import InvalidLogitsError
from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.chat import ChatSession
from engine.generate import token_stream
from engine.sampling import INVALID_TOKEN, make_sampler


@pytest.fixture(scope="module")
def session(tiny_checkpoint):
    return ChatSession.load(str(tiny_checkpoint), device="cpu")


def poison_decode(monkeypatch, model, at_call: int, value: float):
    """Make the ``at_call``-th decode step (1-based) return logits with one ``value`` entry."""
    original, calls = model.decode, []

    def decode(x, cache):
        logits = original(x, cache)
        calls.append(1)
        if len(calls) == at_call:
            logits = logits.clone()
            logits[0, 123] = value
        return logits

    monkeypatch.setattr(model, "decode", decode)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("sampling", [False, True])
@pytest.mark.parametrize("pipelined", [False, True])
def test_invalid_logits_end_the_answer_with_an_error_naming_the_token(session, monkeypatch, value, sampling,
                                                                       pipelined):
    session.reset()
    session.pipelined = pipelined
    poison_decode(monkeypatch, session.model, at_call=2, value=value)
    params = GenerationParams(max_new_tokens=8, ignore_eos=True, speculative=False,
                              temperature=0.8 if sampling else 0.0, seed=1)
    events = list(session.send("Hello", params=params))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "error"
    # Token 1 comes from the prefill, tokens 2 and 3 from decode calls 1 and 2.
    assert done.error == ("The model produced invalid numbers (NaN or infinity) at token 3: its weights may be "
                          "damaged (check the model's files, or download it again)")  # float32: no overflow
    assert done.error_type == "InvalidLogitsError"
    assert [e for e in events if isinstance(e, TokenEvent) and e.token_id >= 0][:2] and \
        len([e for e in events if isinstance(e, TokenEvent) and e.token_id >= 0]) == 2


@pytest.mark.parametrize(("dtype", "cause"), [
    (torch.float16, "its weights may be damaged, or float16 overflowed (try the bfloat16 or float32 data type)"),
    (torch.bfloat16, "its weights may be damaged (the float32 data type may help)"),
    (torch.float32, "its weights may be damaged (check the model's files, or download it again)")])
def test_the_advice_on_invalid_numbers_fits_the_models_data_type(dtype, cause):
    """Trial 62: a model computing in float32 was told to try float32."""
    from engine.generate import _invalid

    assert _invalid(7, dtype) == f"The model produced invalid numbers (NaN or infinity) at token 7: {cause}"


def test_invalid_prefill_logits_fail_at_token_1(session):
    sampler = make_sampler(GenerationParams())
    cache = session.model.create_kv_cache(session.cache_config)
    bad = torch.full((1, 10), float("nan"))
    with pytest.raises(InvalidLogitsError, match="at token 1: its weights may be damaged"):
        next(token_stream(session.model, cache, sampler, [], bad, 4))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sampler_reports_invalid_logits_without_a_host_sync(temperature):
    sampler = make_sampler(GenerationParams(temperature=temperature, seed=0))
    logits = torch.tensor([0.5, float("nan"), 2.0, -1.0])
    token, reported = sampler.sample_checked(logits, [])
    assert 0 <= int(token) < 4 and int(reported) == INVALID_TOKEN  # token stays embeddable
    good = torch.tensor([0.5, 1.0, 2.0, float("-inf")])  # -inf is a masked token, not an error
    token, reported = sampler.sample_checked(good, [])
    assert int(token) == int(reported) != INVALID_TOKEN
    with pytest.raises(InvalidLogitsError):
        sampler(logits, [])


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("sampling", [False, True])
def test_invalid_logits_in_the_token_step(tiny_checkpoint, monkeypatch, value, sampling):
    """The same error when the decode step takes its argmax on the device (the token step of the
    static decoder, eager on the CPU): greedy reads the graph's reported token, not the logits."""
    session = ChatSession.load(str(tiny_checkpoint), device="cpu")
    session.pipelined = True
    model = session.model
    model.static_decode = True
    static = model._static_decoder()
    original, calls = static.step, []

    def step(kv, bucket):
        logits = original(kv, bucket)
        calls.append(1)
        if len(calls) == 2:
            logits[0, 123] = value
        return logits

    monkeypatch.setattr(static, "step", step)
    params = GenerationParams(max_new_tokens=8, ignore_eos=True, speculative=False,
                              temperature=0.8 if sampling else 0.0, seed=1)
    events = list(session.send("Hello", params=params))
    done = events[-1]
    assert calls, "the token step did not run"
    assert isinstance(done, DoneEvent) and done.finish_reason == "error"
    assert done.error == ("The model produced invalid numbers (NaN or infinity) at token 3: its weights may be "
                          "damaged (check the model's files, or download it again)")  # float32: no overflow
    assert done.error_type == "InvalidLogitsError"
    assert len([e for e in events if isinstance(e, TokenEvent) and e.token_id >= 0]) == 2
