from __future__ import annotations

import pytest
import torch

from engine.api.events import GenerationParams
from engine.sampling import TokenSampler, apply_repetition_penalty, filter_logits, make_sampler


def test_greedy_is_argmax():
    logits = torch.tensor([0.1, 3.0, -1.0, 2.9])
    assert make_sampler(GenerationParams())(logits, []) == 1


def test_repetition_penalty_matches_ctrl_rule():
    logits = torch.tensor([2.0, -2.0, 1.0])
    out = apply_repetition_penalty(logits, [0, 1, 1], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0]
    # Greedy with a strong penalty moves off the repeated token.
    assert make_sampler(GenerationParams(repetition_penalty=4.0))(torch.tensor([2.0, 1.0]), [0]) == 1


def test_top_k_top_p_min_p_filters():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [False, False, True, True]
    # nucleus 0.8 keeps 0.5 + 0.3
    assert torch.isinf(filter_logits(logits, top_p=0.8)).tolist() == [False, False, True, True]
    assert torch.isinf(filter_logits(logits, top_p=0.81)).tolist() == [False, False, False, True]
    # min_p 0.2 keeps p >= 0.1
    assert torch.isinf(filter_logits(logits, min_p=0.2)).tolist() == [False, False, False, True]


def test_seeded_sampling_is_reproducible_and_follows_distribution():
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1]))
    p = GenerationParams(temperature=1.0, seed=123)
    a = [make_sampler(p)(logits, []) for _ in range(1)]
    s1, s2 = make_sampler(p), make_sampler(p)
    draws1 = [s1(logits, []) for _ in range(2000)]
    draws2 = [s2(logits, []) for _ in range(2000)]
    assert draws1 == draws2 and a[0] == draws1[0]
    freq = [draws1.count(i) / 2000 for i in range(3)]
    assert abs(freq[0] - 0.7) < 0.04 and abs(freq[1] - 0.2) < 0.04 and abs(freq[2] - 0.1) < 0.03


def test_bad_params_rejected():
    with pytest.raises(ValueError, match="top_p"):
        GenerationParams(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        GenerationParams(temperature=-1)


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": float("nan")}, "temperature must be a finite number"),
    ({"temperature": float("inf")}, "temperature must be a finite number"),
    ({"repetition_penalty": float("nan")}, "repetition_penalty must be a finite number"),
    ({"seed": 10**23}, "seed must be in"),
    ({"seed": -1}, "seed must be in"),
])
def test_non_finite_values_and_overflowing_seeds_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GenerationParams(**kwargs)


def test_cpu_greedy_fast_path_picks_what_the_tensor_path_picks():
    """TokenSampler.__call__ on float32 CPU logits (NumPy's argmax) against sample_checked (tensor
    ops, what every other device runs): ties, a repetition penalty, NaN and +inf, a view."""
    from engine.api.errors import InvalidLogitsError
    from engine.sampling import INVALID_TOKEN

    g = torch.Generator().manual_seed(0)
    for penalty in (1.0, 1.3):
        sampler = TokenSampler(GenerationParams(temperature=0.0, repetition_penalty=penalty))
        for _ in range(50):
            logits = torch.randn(300, generator=g).round(decimals=1)  # many ties
            history = torch.randint(0, 300, (20,), generator=g).tolist()
            assert sampler(logits, history) == int(sampler.sample(logits, history))
        rows = torch.randn(2, 300, generator=g)
        assert sampler(rows[1], []) == int(rows[1].argmax())  # a view into a batch's logits
    sampler = TokenSampler(GenerationParams(temperature=0.0))
    for bad in (float("nan"), float("inf")):
        logits = torch.randn(50, generator=g)
        logits[7] = bad
        assert int(sampler.sample(logits, [])) == INVALID_TOKEN
        with pytest.raises(InvalidLogitsError):
            sampler(logits, [])
    masked = torch.full((50,), float("-inf"))
    masked[3] = 0.0
    assert sampler(masked, []) == 3  # -inf alone is a masked token, not an error


def test_seeds_that_differ_only_above_32_bits_sample_differently_on_the_cpu():
    """Trial 67: the CPU generator keeps a seed's low 32 bits, so 5, 2**32 + 5 and 2**63 + 5 gave one
    answer. A small seed keeps the stream it had (torch's own for that seed)."""
    from engine.sampling import generator_seed

    logits = torch.zeros(1000)

    def draws(seed: int) -> list[int]:
        sampler = make_sampler(GenerationParams(temperature=1.0, seed=seed))
        return [sampler(logits, []) for _ in range(20)]
    plain = torch.Generator().manual_seed(5)
    assert draws(5) == [int(torch.multinomial(logits.softmax(-1), 1, generator=plain)) for _ in range(20)]
    streams = {seed: tuple(draws(seed)) for seed in (5, 2**32 + 5, 2**40 + 5, 2**63 + 5, 2**64 - 1)}
    assert len(set(streams.values())) == 5
    assert [generator_seed(s, "cpu") for s in (5, 2**32 - 1)] == [5, 2**32 - 1]
    assert generator_seed(2**32 + 5, "cuda") == 2**32 + 5  # Philox keeps all 64 bits
    assert generator_seed(2**32 + 5, "cpu") == generator_seed(2**32 + 5, "cpu") < 2**32
