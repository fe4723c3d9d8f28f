"""The fixed-shape decode step (replayed as a CUDA graph on CUDA) against the ordinary decode path,
run eagerly on the CPU: same greedy tokens, across a KV bucket boundary."""

from __future__ import annotations

import pytest
import torch

from engine.cache import CacheConfig
from engine.models.llama.static_decode import bucket_for
from engine.models.smolvlm import SmolVlmModel
from engine.sources import LocalDirSource


def test_bucket_sizes():
    assert bucket_for(1, 8192) == 256 and bucket_for(257, 8192) == 512 and bucket_for(300, 300) == 300


def run_greedy(model, ids, n, kind="contiguous", max_tokens=None):
    """Prefill ``ids``, then greedy-decode until ``n`` tokens; returns (tokens, decode logits, cache).

    Paged caches start with a 4-block arena (64 tokens) that must grow during prompt and decode."""
    extra = {"num_blocks": 4} if kind == "paged" else {}
    cache = model.create_kv_cache(CacheConfig(kind=kind, max_tokens=max_tokens or ids.shape[1] + n + 4, **extra))
    logits = model.prefill(model.embed(ids), cache, range(0, ids.shape[1]))
    out, all_logits = [int(logits.argmax(-1))], []
    for _ in range(n - 1):
        logits = model.decode(model.embed(torch.tensor([[out[-1]]])), cache)
        all_logits.append(logits)
        out.append(int(logits.argmax(-1)))
    return out, torch.cat(all_logits), cache


def greedy(model, ids, n, static, kind="contiguous"):
    model.static_decode = static
    out, logits, _ = run_greedy(model, ids, n, kind)
    return out, logits


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_static_decode_matches_dynamic_across_a_bucket_boundary(tiny_checkpoint, kind):
    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"), torch.float32)
    ids = torch.randint(0, 49000, (1, 240), generator=torch.Generator().manual_seed(0))
    ref_tokens, ref_logits = greedy(model, ids, 40, static=False, kind=kind)
    tokens, logits = greedy(model, ids, 40, static=True, kind=kind)
    assert tokens == ref_tokens
    assert (logits - ref_logits).abs().max() < 1e-4


def test_paged_static_decode_never_reads_garbage_rows(tiny_checkpoint, monkeypatch):
    """The fixed-shape step reads whole blocks and masks rows past the sequence; a mask cannot hide
    NaN (NaN * 0 = NaN), so rows not yet written must be finite. Simulate dirty memory: every
    ``torch.empty`` returns NaNs while the cache is built and grows."""
    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"), torch.float32)
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        out = real_empty(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    ids = torch.randint(0, 49000, (1, 20), generator=torch.Generator().manual_seed(1))
    ref_tokens, _ = greedy(model, ids, 30, static=False, kind="paged")
    monkeypatch.setattr(torch, "empty", nan_empty)
    tokens, logits = greedy(model, ids, 30, static=True, kind="paged")
    assert torch.isfinite(logits).all()
    assert tokens == ref_tokens


@pytest.mark.parametrize("kind", ["paged", "contiguous"])
@pytest.mark.parametrize("follow_up", [1, 10, 32, 45])
def test_a_short_prefill_after_cached_tokens_runs_as_fixed_shape_steps(tiny_checkpoint, kind, follow_up):
    """A follow-up of <= short_prefill_tokens tokens goes through the static decoder's 32-row prefill
    step, one step per 32 tokens (graphs on CUDA; the same step eagerly here; shorter chunks padded),
    and gives the eager prefill's logits and cache, across a paged block boundary and a KV bucket one."""
    from engine.models.llama.static_decode import PREFILL_ROWS, StaticDecoder
    from engine.registry import load_model

    model = load_model(tiny_checkpoint, device="cpu", dtype="float32")
    past = 240  # + 32 or 45 crosses the 256-slot bucket
    ids = torch.randint(0, 1000, (1, past + follow_up), generator=torch.Generator().manual_seed(5))
    results = []
    for static in (False, True):
        model.static_decode = static
        model._static = StaticDecoder(model, use_graph=False) if static else None
        steps = []
        if static:
            rows_step, decode_step = model._static._rows_step, model._static.step
            model._static._rows_step = lambda kv, bucket: steps.append(("rows", bucket)) or rows_step(kv, bucket)
            model._static.step = lambda kv, bucket: steps.append(("decode", bucket)) or decode_step(kv, bucket)
        cache = model.create_kv_cache(CacheConfig(kind=kind, max_tokens=past + 64, block_size=4))
        model.prefill(model.embed(ids[:, :past]), cache, range(0, past))  # the first prefill: always eager
        assert steps == []
        logits = model.prefill(model.embed(ids[:, past:]), cache, range(past, past + follow_up))
        assert cache.seq_len == past + follow_up
        if static:
            chunks = -(-follow_up // PREFILL_ROWS)
            buckets = [bucket_for(past + min((i + 1) * PREFILL_ROWS, follow_up), cache.capacity) for i in range(chunks)]
            assert steps == [("rows", b) for b in buckets]
        after = model.decode(model.embed(ids[:, :1]), cache)  # reads every cached position
        results.append((logits, after, cache.seq_len))
    model.static_decode, model._static = None, None
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-4, atol=1e-4)
    assert results[1][2] == results[0][2]


def test_gather_index_follows_the_block_table(tiny_checkpoint):
    """The paged step's gather index (arena slot of every position; past the sequence, position 0's
    slot) is refreshed from the host, in full or for appended blocks only: after each step it equals
    the index computed from the block table, through block boundaries, arena growth (new arena
    version), a truncation that frees blocks, and a fork's copy-on-write of a shared partial block."""
    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"), torch.float32)
    model.static_decode = True
    ids = torch.randint(0, 49000, (1, 20), generator=torch.Generator().manual_seed(3))
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=160, num_blocks=2))
    model.prefill(model.embed(ids), cache, range(0, ids.shape[1]))
    static = model._static_decoder()

    def step(c):
        model.decode(model.embed(torch.tensor([[5]])), c)
        bs, table = c.block_size, c.block_table
        want = torch.full_like(static.gather, table[0] * bs)
        per_pos = (torch.tensor(table)[:, None] * bs + torch.arange(bs)).flatten()
        want[: per_pos.numel()] = per_pos
        assert torch.equal(static.gather, want), (c.seq_len, table)

    versions = {cache.arena_version}
    for _ in range(40):  # 20 -> 60 tokens: blocks appended, the 2-block arena grows
        step(cache)
        versions.add(cache.arena_version)
    assert len(versions) > 1
    cache.truncate(35)  # blocks freed: the table shrinks
    for _ in range(3):
        step(cache)
    child = cache.fork()  # 38 tokens: the partial last block is shared, the child copies it on write
    step(child)
    assert child.block_table[:-1] == cache.block_table[:-1] and child.block_table[-1] != cache.block_table[-1]
    step(cache)
