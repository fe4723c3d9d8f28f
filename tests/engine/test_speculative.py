"""Speculative decoding: greedy output identical to plain decoding (text and image prompts, both cache
kinds), sampled output distributed as plain sampling, the prompt-lookup drafter, decode_all_logits."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter

import pytest
import torch

from engine.api.events import GenerationParams
from engine.cache import CacheConfig
from engine.generate import token_stream
from engine.models.smolvlm import SmolVlmModel
from engine.sampling import make_sampler
from engine.sources import LocalDirSource
from engine.speculative import PromptLookupDrafter, SpeculativeDecoder

IMAGE, FAKE, GLOBAL = 49190, 49189, 49152
TEXT_PROMPT = [1, 4093, 42, 1159, 314, 253, 1345, 49279, 198, 9519, 42]


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"), torch.float32)


def image_prompt():
    ids = [1, 11126, 42, FAKE, GLOBAL] + [IMAGE] * 64 + [FAKE] + [31, 45, 67, 2000]
    tiles = [torch.randn(1, 3, 512, 512, generator=torch.Generator().manual_seed(5))]
    return ids, tiles


def generate(model, ids, tiles, n, kind, params=None, drafter=None, speculative=True, **kw):
    cache = model.create_kv_cache(CacheConfig(kind=kind, max_tokens=len(ids) + n + 16))
    logits = model.prefill(model.embed_multimodal(torch.tensor([ids]), tiles), cache, range(0, len(ids)))
    sampler = make_sampler(params or GenerationParams())
    spec = SpeculativeDecoder(model, cache, sampler, drafter, **kw) if speculative else None
    history = list(ids)
    tokens = list(token_stream(model, cache, sampler, history, logits, n, spec))
    return tokens, spec, cache


class NoisyOracle:
    """Drafts the known continuation ``ref`` with every third position wrong: accepts and rejects."""

    def __init__(self, ref):
        self.ref = ref

    def propose(self, history, k):
        i = len(history)
        return [t if (i + j) % 3 != 2 else (t + 1) % 49000 for j, t in enumerate(self.ref[i:i + k])]


# -- drafter --------------------------------------------------------------------------------------
def test_drafter_proposes_continuation_of_latest_longest_match():
    d = PromptLookupDrafter(max_ngram=3, min_ngram=1)
    h = [5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 5, 6, 7]
    # "5 6 7" occurs at the start, followed by 8 9 1 ...
    assert d.propose(h, 4) == [8, 9, 1, 6]
    h += [2]  # tail "6 7 2": matched at index 6..8, followed by 3 5 6 ...
    assert d.propose(h, 3) == [3, 5, 6]
    assert d.propose([1, 2, 3, 4], 3) == []
    assert d.propose(h, 0) == []


def test_drafter_index_is_incremental_and_rebuilds_on_a_new_history():
    inc, gen = PromptLookupDrafter(), torch.Generator().manual_seed(0)
    h = torch.randint(0, 6, (300,), generator=gen).tolist()
    for n in range(2, len(h)):
        assert inc.propose(h[:n], 5) == PromptLookupDrafter().propose(h[:n], 5)
    assert inc.propose([9, 9, 1, 9, 9], 2) == [1, 9]  # shorter, different history


def test_drafter_skips_image_tokens():
    d = PromptLookupDrafter(min_ngram=1, ignore_ids={IMAGE})
    assert d.propose([4, IMAGE, IMAGE, IMAGE, 4], 3) == []
    assert d.propose([4, 5, IMAGE, 4, 5], 3) == []
    assert d.propose([4, 5, 6, IMAGE, 4, 5], 3) == [6]


# -- the model seam -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_decode_all_logits_equals_sequential_decodes(model, kind):
    ids, tiles = image_prompt()
    nxt = [17, 4093, 42, 9519, 3]
    caches = [model.create_kv_cache(CacheConfig(kind=kind, max_tokens=128)) for _ in range(2)]
    for c in caches:
        model.prefill(model.embed_multimodal(torch.tensor([ids]), tiles), c, range(0, len(ids)))
    seq = torch.stack([model.decode(model.embed(torch.tensor([[t]])), caches[0])[0] for t in nxt])
    allv = model.decode_all_logits(model.embed(torch.tensor([nxt])), caches[1])
    assert allv.shape == (1, 5, model.metadata.text.vocab_size)
    assert caches[1].seq_len == len(ids) + 5
    assert (allv[0] - seq).abs().max() < 1e-4
    caches[1].truncate(len(ids) + 2)  # roll back three, redo them: same logits
    again = model.decode_all_logits(model.embed(torch.tensor([nxt[2:]])), caches[1])
    assert (again[0] - seq[2:]).abs().max() < 1e-4
    assert model.supports_decode_all_logits()


# -- greedy identity ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["contiguous", "paged"])
@pytest.mark.parametrize("prompt", ["text", "image"])
def test_greedy_identical_to_plain_decoding(model, kind, prompt):
    ids, tiles = (TEXT_PROMPT, []) if prompt == "text" else image_prompt()
    plain, _, plain_cache = generate(model, ids, tiles, 40, "contiguous", speculative=False)
    # The prompt-lookup drafter (repeat the first answer as prompt so that it has matches).
    tokens, spec, cache = generate(model, ids, tiles, 40, kind)
    assert tokens == plain
    assert cache.seq_len == plain_cache.seq_len == len(ids) + 39
    # A drafter that is right two times out of three: every accept / reject / rollback path.
    tokens, spec, cache = generate(model, ids, tiles, 40, kind, drafter=NoisyOracle(ids + plain))
    assert tokens == plain
    assert cache.seq_len == len(ids) + 39
    assert spec.draft_tokens > 20 and 0 < spec.accepted_tokens < spec.draft_tokens
    assert spec.steps < 39  # fewer model calls than tokens


def test_greedy_prompt_lookup_drafts_when_the_answer_repeats(model):
    """This random model falls into a short loop (227, 14433, ...) within 20 tokens: lookup drafts it."""
    plain, _, _ = generate(model, TEXT_PROMPT, [], 60, "contiguous", speculative=False)
    tokens, spec, _ = generate(model, TEXT_PROMPT, [], 60, "paged", drafter=PromptLookupDrafter(min_ngram=1))
    assert tokens == plain
    assert spec.accepted_tokens > 0 and spec.draft_tokens >= spec.accepted_tokens


def test_speculation_respects_cache_capacity_and_limit(model):
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=len(TEXT_PROMPT) + 6))
    logits = model.prefill(model.embed(torch.tensor([TEXT_PROMPT])), cache, range(0, len(TEXT_PROMPT)))
    sampler = make_sampler(GenerationParams())
    plain, _, _ = generate(model, TEXT_PROMPT, [], 40, "contiguous", speculative=False)
    spec = SpeculativeDecoder(model, cache, sampler, NoisyOracle(TEXT_PROMPT + [plain[0]] * 40))
    tokens = list(token_stream(model, cache, sampler, list(TEXT_PROMPT), logits, 40, spec))
    assert tokens == plain[:6] and cache.seq_len == cache.capacity - 1
    tokens, _, _ = generate(model, TEXT_PROMPT, [], 3, "paged", drafter=NoisyOracle(TEXT_PROMPT + plain))
    assert tokens == plain[:3]


# -- sampling keeps the distribution ----------------------------------------------------------------
V = 4


class TokenCache:
    """Stands in for a KV cache: remembers token ids."""

    def __init__(self, capacity=64):
        self.tokens, self.capacity = [], capacity

    @property
    def seq_len(self):
        return len(self.tokens)

    def truncate(self, n):
        del self.tokens[n:]


class BigramModel:
    """A 4-token model whose next-token logits depend on the last two tokens."""

    device = torch.device("cpu")
    table = torch.randn(V, V, V, generator=torch.Generator().manual_seed(11)) * 1.5

    def supports_decode_all_logits(self):
        return True

    def embed(self, tokens):
        return tokens[..., None].float()

    def _logits(self, cache):
        t = cache.tokens
        return self.table[t[-2], t[-1]]

    def decode_all_logits(self, x, cache):
        out = []
        for t in x[0, :, 0].long().tolist():
            cache.tokens.append(t)
            out.append(self._logits(cache))
        return torch.stack(out)[None]

    def decode(self, x, cache):
        return self.decode_all_logits(x, cache)[0, -1:]


class CyclingDrafter:
    """Deterministic drafts that are sometimes likely and sometimes not."""

    def propose(self, history, k):
        return [(sum(history) + j) % V for j in range(k)]


@pytest.mark.parametrize("params", [
    GenerationParams(temperature=1.0),
    GenerationParams(temperature=0.7, top_k=3, repetition_penalty=1.3),
])
def test_sampled_output_keeps_the_target_distribution(params):
    """3-token continuations from 6000 seeded runs against the exact joint distribution (chi-square)."""
    model, n_runs, n = BigramModel(), 6000, 3
    prompt = [1, 2]
    counts, drafted, accepted = Counter(), 0, 0
    for seed in range(n_runs):
        cache = TokenCache()
        cache.tokens = list(prompt)
        sampler = make_sampler(dataclasses.replace(params, seed=seed))
        spec = SpeculativeDecoder(model, cache, sampler, CyclingDrafter(), initial_draft=2, adaptive=False)
        spec._adapt = lambda a, d: None  # keep drafting on every step
        logits = model._logits(cache)[None]
        counts[tuple(token_stream(model, cache, sampler, list(prompt), logits, n, spec))] += 1
        drafted, accepted = drafted + spec.draft_tokens, accepted + spec.accepted_tokens
    assert 0 < accepted < drafted
    exact = {}
    probe = make_sampler(params)
    for seq in itertools.product(range(V), repeat=n):
        hist, p = list(prompt), 1.0
        for t in seq:
            p *= float(probe.probs(model.table[hist[-2], hist[-1]], hist)[t])
            hist.append(t)
        exact[seq] = p
    chi2 = sum((counts[s] - n_runs * p) ** 2 / (n_runs * p) for s, p in exact.items() if n_runs * p > 1e-9)
    assert sum(counts[s] for s, p in exact.items() if p == 0) == 0
    dof = sum(1 for p in exact.values() if p > 0) - 1
    # 99.9% quantile of chi-square, Wilson-Hilferty approximation.
    z = 3.09
    limit = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < limit, (chi2, limit)


def test_capabilities_follow_the_model(tiny_checkpoint):
    """``info`` reads capabilities from the model's own methods: a model that drops one says so."""
    from engine.validate import model_info

    caps = model_info(str(tiny_checkpoint))["capabilities"]
    assert caps["vision"] and caps["embeddings"] and caps["all_logits"] and caps["speculative"]
    assert caps["image_tokens_per_tile"] == 64 and caps["max_context"] == 8192

    class NoVerify(SmolVlmModel):
        def supports_decode_all_logits(self) -> bool:
            return False

    model = NoVerify.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"))
    got = model.capabilities()
    assert (got.all_logits, got.speculative, got.embeddings) == (False, False, True)


# -- through ChatSession.send ---------------------------------------------------------------------
def session_tokens(session, text, images=(), n=40, **kw):
    from engine.api.events import DoneEvent, TokenEvent

    events = list(session.send(text, images=images, params=GenerationParams(max_new_tokens=n, ignore_eos=True, **kw)))
    assert isinstance(events[-1], DoneEvent) and events[-1].finish_reason == "length", events[-1]
    return [e.token_id for e in events if isinstance(e, TokenEvent) and e.token_id >= 0], events[-1].stats


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_session_greedy_identical_with_and_without_speculation(tiny_checkpoint, images_dir, kind):
    from engine.chat import ChatSession

    sessions = {flag: ChatSession.load(str(tiny_checkpoint), device="cpu", cache_config=CacheConfig(kind=kind))
                for flag in (False, True)}
    # Turn 1 with an image, turn 2 quoting part of the first answer back: both turns must agree.
    out = {flag: [] for flag in sessions}
    for flag, s in sessions.items():
        a, stats_a = session_tokens(s, "Describe this.", [images_dir / "coffee.png"], n=30, speculative=flag,
                                    image_detail="fast")
        quote = s.tokenizer.decode(a[:20])
        b, stats_b = session_tokens(s, f"Repeat: {quote} {quote}", n=40, speculative=flag)
        out[flag] = (a, b, stats_b)
        assert len(s._cached_keys) == s.cache.seq_len
    assert out[True][0] == out[False][0] and out[True][1] == out[False][1]
    assert out[False][2].draft_tokens == 0 and out[False][2].acceptance_rate == 0.0
    st = out[True][2]
    # Turn 2 quotes turn 1's answer back: the prompt-lookup drafter must have drafted and been right.
    assert st.draft_tokens > 0 and 0 < st.accepted_tokens <= st.draft_tokens
    assert st.to_dict()["acceptance_rate"] == st.acceptance_rate


def test_session_sampling_with_speculation_is_seeded(tiny_checkpoint):
    from engine.chat import ChatSession

    runs = []
    for _ in range(2):
        s = ChatSession.load(str(tiny_checkpoint), device="cpu")
        runs.append(session_tokens(s, "Tell me a story.", n=24, temperature=0.8, seed=3, speculative=True)[0])
    assert runs[0] == runs[1] and len(runs[0]) == 24


def test_auto_speculation_only_where_it_pays_off(tiny_checkpoint, monkeypatch):
    """Auto: on the CPU (verify ~1 decode step); not on CUDA, where an eager verify costs ~8
    graph-replayed steps (bench/results/gpu-speculative.json). ``True`` forces, ``False`` disables."""
    from engine.chat import ChatSession
    from engine.sampling import make_sampler

    session = ChatSession.load(str(tiny_checkpoint), device="cpu")
    sampler = make_sampler(GenerationParams())
    # With the native CPU decode step running, an eager verification costs several of its steps:
    # auto is off (tests/engine/test_cpu_step.py); with the eager step it is on.
    monkeypatch.setenv("SMOLCHAT_NATIVE", "0")
    assert session._speculative_decoder(GenerationParams(), sampler) is not None
    assert session._speculative_decoder(GenerationParams(speculative=False), sampler) is None
    monkeypatch.setattr(SmolVlmModel, "device", property(lambda self: torch.device("cuda")))
    assert session._speculative_decoder(GenerationParams(), sampler) is None
    assert session._speculative_decoder(GenerationParams(speculative=True), sampler) is not None
