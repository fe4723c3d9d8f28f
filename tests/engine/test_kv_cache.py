"""Contiguous and paged KV caches against a no-cache reference, with real fp32 values.

The reference is full causal attention over the whole sequence (``causal_attention(..., past=0)``),
sliced to the rows of each step. Every cache, fed the same steps, must reproduce it.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine.api.errors import EngineError, PromptTooLongError
from engine.cache import (
    BlockAllocator,
    CacheConfig,
    CacheShape,
    ContiguousKVCache,
    KVCache,
    OutOfBlocksError,
    PagedKVCache,
    create_kv_cache,
)
from engine.layers.attention import causal_attention

KINDS = ["contiguous", "paged"]
SMOLVLM = (CacheShape(num_layers=2, num_kv_heads=3, head_dim=64), 9)  # SmolVLM-256M heads, 2 layers
TINY = (CacheShape(num_layers=2, num_kv_heads=1, head_dim=4), 2)
SHAPES = {"smolvlm": SMOLVLM, "tiny": TINY}
ATOL = 1e-6


def make_cache(kind: str, shape: CacheShape, max_tokens: int, block_size: int = 16,
               num_blocks: int | None = None, max_num_blocks: int | None = None) -> KVCache:
    if kind == "contiguous":
        return ContiguousKVCache(shape, max_tokens, "cpu", torch.float32)
    return PagedKVCache(shape, max_tokens, "cpu", torch.float32, block_size=block_size, num_blocks=num_blocks,
                        max_num_blocks=max_num_blocks)


class Seq:
    """Random per-layer q ``[1, H, T, D]`` and k/v ``[1, H_kv, T, D]`` of a whole sequence."""

    def __init__(self, shape: CacheShape, heads: int, length: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        d = shape.head_dim

        def rand(h: int) -> list[torch.Tensor]:
            return [torch.randn(1, h, length, d, generator=g) for _ in range(shape.num_layers)]

        self.q, self.k, self.v = rand(heads), rand(shape.num_kv_heads), rand(shape.num_kv_heads)

    def __len__(self) -> int:
        return self.q[0].shape[2]

    def splice(self, n: int, other: Seq) -> Seq:
        """The first ``n`` tokens of this sequence followed by all of ``other``."""
        out = object.__new__(Seq)
        out.q, out.k, out.v = ([torch.cat([a[:, :, :n], b], dim=2) for a, b in zip(x, y)]
                               for x, y in ((self.q, other.q), (self.k, other.k), (self.v, other.v)))
        return out

    def reference(self) -> list[torch.Tensor]:
        """No-cache outputs ``[1, H, T, D]`` per layer."""
        return [causal_attention(q, k, v, past=0) for q, k, v in zip(self.q, self.k, self.v)]


def feed(cache: KVCache, seq: Seq, start: int, end: int) -> list[torch.Tensor]:
    """Run positions ``[start, end)`` of ``seq`` through ``cache`` as one step, like the model does."""
    assert cache.seq_len == start
    cache.begin_forward(end - start)
    outs = []
    for layer in range(len(seq.q)):
        keys, values = cache.update(layer, seq.k[layer][:, :, start:end], seq.v[layer][:, :, start:end])
        outs.append(causal_attention(seq.q[layer][:, :, start:end], keys, values, past=start))
    cache.end_forward()
    return outs


def feed_steps(cache: KVCache, seq: Seq, bounds: list[int]) -> list[tuple[int, int, list[torch.Tensor]]]:
    return [(a, b, feed(cache, seq, a, b)) for a, b in zip(bounds, bounds[1:])]


def assert_matches_reference(results, seq: Seq) -> None:
    ref = seq.reference()
    for start, end, outs in results:
        for layer, out in enumerate(outs):
            torch.testing.assert_close(out, ref[layer][:, :, start:end], atol=ATOL, rtol=0,
                                       msg=lambda m: f"positions {start}:{end}, layer {layer}: {m}")


def step_bounds(prefill: int, decodes: int = 3, chunk: int = 7) -> list[int]:
    bounds = [0, prefill]
    bounds += [prefill + i + 1 for i in range(decodes)]
    return bounds + [bounds[-1] + chunk]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("block_size", [16, 4])
@pytest.mark.parametrize("prefill_at", ["bs-1", "bs", "bs+1", "3bs+5"])
def test_steps_match_no_cache_reference(kind, shape_name, block_size, prefill_at):
    shape, heads = SHAPES[shape_name]
    prefill = {"bs-1": block_size - 1, "bs": block_size, "bs+1": block_size + 1, "3bs+5": 3 * block_size + 5}[prefill_at]
    bounds = step_bounds(prefill)
    seq = Seq(shape, heads, bounds[-1], seed=prefill)
    cache = make_cache(kind, shape, max_tokens=80, block_size=block_size)
    assert_matches_reference(feed_steps(cache, seq, bounds), seq)
    assert cache.seq_len == bounds[-1]


@pytest.mark.parametrize("block_size", [16, 4])
def test_paged_is_bitwise_equal_to_contiguous(block_size):
    shape, heads = SMOLVLM
    bounds = step_bounds(3 * block_size + 5)
    seq = Seq(shape, heads, bounds[-1], seed=1)
    paged = feed_steps(make_cache("paged", shape, 80, block_size), seq, bounds)
    contiguous = feed_steps(make_cache("contiguous", shape, 80), seq, bounds)
    for (_, _, p), (_, _, c) in zip(paged, contiguous):
        assert all(torch.equal(a, b) for a, b in zip(p, c))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keep", [0, 3, 4, 6, 13])
def test_truncate_then_write_equals_fresh_run(kind, keep):
    shape, heads = TINY
    seq = Seq(shape, heads, 14, seed=2)
    cache = make_cache(kind, shape, max_tokens=40, block_size=4)
    feed_steps(cache, seq, [0, 9, 10, 14])
    cache.truncate(keep)
    assert cache.seq_len == keep
    if isinstance(cache, PagedKVCache):
        assert len(cache.block_table) == math.ceil(keep / 4)
        assert cache.allocator.num_used == math.ceil(keep / 4)
    new = Seq(shape, heads, 6, seed=3)
    spliced = seq.splice(keep, new)
    results = feed_steps(cache, spliced, [keep, keep + 5, keep + 6])
    assert_matches_reference(results, spliced)


@pytest.mark.parametrize("kind", KINDS)
def test_truncate_rejects_growing(kind):
    cache = make_cache(kind, TINY[0], 10, block_size=4)
    with pytest.raises(ValueError, match="cannot truncate a cache of 0 tokens to 1"):
        cache.truncate(1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fork_at", [6, 8])  # mid-block and on a block boundary (block_size 4)
@pytest.mark.parametrize("first_writer", ["child", "parent"])
def test_fork_branches_continue_independently(kind, fork_at, first_writer):
    shape, heads = TINY
    trunk = Seq(shape, heads, fork_at, seed=4)
    parent = make_cache(kind, shape, max_tokens=32, block_size=4)
    feed_steps(parent, trunk, [0, fork_at])
    child = parent.fork()
    assert child.seq_len == fork_at
    branches = {"parent": (parent, trunk.splice(fork_at, Seq(shape, heads, 6, seed=5))),
                "child": (child, trunk.splice(fork_at, Seq(shape, heads, 6, seed=6)))}
    order = [first_writer, "child" if first_writer == "parent" else "parent"]
    results = {name: [] for name in branches}
    for bounds in ([fork_at, fork_at + 1], [fork_at + 1, fork_at + 5], [fork_at + 5, fork_at + 6]):
        for name in order:  # interleave the branches step by step
            cache, seq = branches[name]
            results[name] += feed_steps(cache, seq, bounds)
    for name, (_, seq) in branches.items():
        assert_matches_reference(results[name], seq)


def test_fork_shares_blocks_and_copies_a_shared_partial_block_on_write():
    shape, heads = TINY
    trunk = Seq(shape, heads, 6, seed=7)
    parent = make_cache("paged", shape, max_tokens=32, block_size=4)
    feed_steps(parent, trunk, [0, 6])  # blocks: [full, 2 of 4 rows]
    alloc = parent.allocator
    before = parent.kv[:, :, parent.block_table].clone()
    child = parent.fork()
    assert child.block_table == parent.block_table
    assert alloc.num_used == 2  # shared, not copied
    assert [alloc.ref_count(b) for b in parent.block_table] == [2, 2]
    assert child.nbytes == parent.nbytes

    branch = trunk.splice(6, Seq(shape, heads, 3, seed=8))
    feed_steps(child, branch, [6, 7])  # writes into the shared partial block -> copy-on-write
    assert child.block_table[0] == parent.block_table[0]
    assert child.block_table[1] != parent.block_table[1]
    assert [alloc.ref_count(b) for b in parent.block_table] == [2, 1]
    assert alloc.ref_count(child.block_table[1]) == 1
    assert alloc.num_used == 3
    assert torch.equal(parent.kv[:, :, parent.block_table], before)  # parent untouched by the child
    # The copy carries the shared rows; the child's new row follows them.
    assert torch.equal(child.kv[:, :, child.block_table[1], :2], before[:, :, 1, :2])

    feed_steps(child, branch, [7, 9])  # fills block 1 and opens block 2: no further copies
    assert alloc.num_used == 4
    parent.release()
    assert alloc.num_used == 3 and alloc.ref_count(child.block_table[0]) == 1
    child.release()
    assert alloc.num_free == alloc.num_blocks


def test_fork_is_rejected_mid_forward():
    cache = make_cache("paged", TINY[0], 8, block_size=4)
    cache.begin_forward(2)
    with pytest.raises(RuntimeError, match="during a forward pass"):
        cache.fork()


def test_paged_nbytes_grows_block_by_block():
    shape, heads = TINY  # 2 layers * (k, v) * 1 head * 4 dims * 4 bytes = 64 bytes per token
    cache = make_cache("paged", shape, max_tokens=12, block_size=4, num_blocks=5)
    assert (cache.bytes_per_token, cache.bytes_per_block) == (64, 256)
    assert cache.arena_nbytes == 5 * 256
    seq = Seq(shape, heads, 9, seed=9)
    sizes = [cache.nbytes] + [(feed(cache, seq, t, t + 1), cache.nbytes)[1] for t in range(9)]
    assert sizes == [0, 256, 256, 256, 256, 512, 512, 512, 512, 768]
    cache.truncate(4)
    assert cache.nbytes == 256
    assert cache.fork().nbytes == 256
    cache.reset()
    assert cache.nbytes == 0
    assert cache.allocator.num_used == 1  # the fork still holds its block


def test_nbytes_at_smolvlm_256m_shape():
    # 30 layers * (k, v) * 3 KV heads * 64 dims * 4 bytes = 46,080 bytes per token (fp32).
    shape = CacheShape(num_layers=30, num_kv_heads=3, head_dim=64)
    contiguous = ContiguousKVCache(shape, 8192, "meta", torch.float32)
    assert contiguous.nbytes == 8192 * 46_080 == 377_487_360
    paged = PagedKVCache(shape, 8192, "meta", torch.float32, block_size=16)
    # The arena starts with 1024 tokens' worth (64 blocks, 45 MiB) and may grow to 2 * 8192/16 blocks.
    assert (paged.num_blocks, paged.max_num_blocks) == (64, 1024)
    assert paged.arena_nbytes == 64 * 16 * 46_080 == 47_185_920
    sizes = []
    for n in (1, 15, 1, 100):
        paged.begin_forward(n)
        paged.end_forward()
        sizes.append(paged.nbytes)
    assert sizes == [737_280, 737_280, 1_474_560, 8 * 737_280]
    paged.begin_forward(2000)  # 2117 tokens = 133 blocks: 64 -> 256 blocks in one reallocation
    paged.end_forward()
    assert (paged.nbytes, paged.num_blocks, paged.arena_version) == (133 * 737_280, 256, 1)
    assert paged.arena_nbytes == 256 * 737_280


@pytest.mark.parametrize("kind", KINDS)
def test_capacity_errors_name_the_numbers(kind):
    shape, heads = TINY
    cache = make_cache(kind, shape, max_tokens=12, block_size=4)
    with pytest.raises(PromptTooLongError, match="0 cached \\+ 13 new tokens exceed the cache capacity of 12"):
        cache.begin_forward(13)
    seq = Seq(shape, heads, 12, seed=10)
    feed(cache, seq, 0, 5)
    used = cache.nbytes
    with pytest.raises(PromptTooLongError, match="5 cached \\+ 8 new tokens exceed the cache capacity of 12"):
        cache.begin_forward(8)
    assert (cache.seq_len, cache.nbytes) == (5, used)
    assert_matches_reference([(5, 12, feed(cache, seq, 5, 12))], seq)  # still usable up to capacity


def test_out_of_blocks_is_clear_and_leaves_state_unchanged():
    shape, heads = TINY
    a = make_cache("paged", shape, max_tokens=8, block_size=4, num_blocks=2, max_num_blocks=2)
    seq = Seq(shape, heads, 8, seed=11)
    feed(a, seq, 0, 6)
    b = a.fork()
    # b's first write needs a private copy of the shared partial block, and no block is free.
    with pytest.raises(OutOfBlocksError, match="need 1 more blocks of 4 tokens, but only 0 of 2 blocks are free "
                                               "and the arena may not grow past 2 blocks"):
        b.begin_forward(1)
    assert issubclass(OutOfBlocksError, EngineError)
    assert b.block_table == a.block_table and b.seq_len == 6 and b.metadata is None
    assert [a.allocator.ref_count(i) for i in a.block_table] == [2, 2]
    a.release()  # frees nothing yet (b holds both) ...
    assert a.allocator.num_free == 0
    c = PagedKVCache(shape, 8, "cpu", torch.float32, block_size=4, share_with=b)
    with pytest.raises(OutOfBlocksError, match="only 0 of 2 blocks are free"):
        c.begin_forward(1)
    b.truncate(4)  # ... truncating b does
    assert_matches_reference([(0, 4, feed(c, seq, 0, 4))], seq)


def test_arena_must_hold_one_full_sequence():
    with pytest.raises(ValueError, match="3 blocks of 4 tokens cannot hold max_tokens=13"):
        PagedKVCache(TINY[0], 13, "cpu", torch.float32, block_size=4, max_num_blocks=3)
    with pytest.raises(ValueError, match="1 <= num_blocks <= max_num_blocks, got 5 and 4"):
        PagedKVCache(TINY[0], 13, "cpu", torch.float32, block_size=4, num_blocks=5, max_num_blocks=4)
    # num_blocks alone is where the arena starts; the cap is never below it.
    assert PagedKVCache(TINY[0], 13, "cpu", torch.float32, block_size=4, num_blocks=12).max_num_blocks == 12


@pytest.mark.parametrize("fork_at", [6, 8])
def test_arena_grows_by_doubling_and_forks_see_the_grown_arena(fork_at):
    shape, heads = TINY
    cache = make_cache("paged", shape, max_tokens=40, block_size=4, num_blocks=1)  # cap 2 * 10 blocks
    trunk = Seq(shape, heads, fork_at, seed=20)
    results = feed_steps(cache, trunk, [0, 3, fork_at])  # 1 block, then 2: 1 -> 2 blocks
    assert (cache.num_blocks, cache.arena_version) == (2, 1)
    assert_matches_reference(results, trunk)
    table = list(cache.block_table)
    child = cache.fork()
    assert child.arena is cache.arena
    a = trunk.splice(fork_at, Seq(shape, heads, 30, seed=21))
    b = trunk.splice(fork_at, Seq(shape, heads, 9, seed=22))
    ra = feed_steps(cache, a, [fork_at, fork_at + 1, fork_at + 13, fork_at + 14])  # grows 2 -> 4 -> 8
    assert cache.block_table[: fork_at // 4] == table[: fork_at // 4]  # ids survive the growth
    rb = feed_steps(child, b, [fork_at, fork_at + 9])
    assert child.kv is cache.kv and child.arena_version == cache.arena_version
    ra += feed_steps(cache, a, [fork_at + 14, fork_at + 30])
    assert_matches_reference(ra, a)
    assert_matches_reference(rb, b)
    assert cache.num_blocks == 16 and cache.arena_nbytes == 16 * cache.bytes_per_block
    assert cache.nbytes == math.ceil(len(a) / 4) * cache.bytes_per_block
    cache.begin_forward(2)
    assert cache.metadata.arena_version == cache.arena_version
    cache.end_forward()


def test_growth_stops_at_the_cap_with_a_clear_error():
    shape, heads = TINY
    a = make_cache("paged", shape, max_tokens=8, block_size=4, num_blocks=1, max_num_blocks=3)
    seq = Seq(shape, heads, 8, seed=23)
    feed(a, seq, 0, 8)  # 2 blocks: grows 1 -> 2
    b = PagedKVCache(shape, 8, "cpu", torch.float32, block_size=4, share_with=a)
    feed(b, seq, 0, 4)  # grows 2 -> 3 (capped)
    assert (a.num_blocks, a.arena_version) == (3, 2)
    with pytest.raises(OutOfBlocksError, match="only 0 of 3 blocks are free and the arena may not grow past 3"):
        b.begin_forward(1)
    assert (b.seq_len, len(b.block_table), a.num_blocks) == (4, 1, 3)


def test_paged_rejects_batches():
    shape, heads = TINY
    cache = make_cache("paged", shape, max_tokens=8, block_size=4)
    cache.begin_forward(1)
    kv = torch.zeros(2, 1, 1, 4)
    with pytest.raises(ValueError, match="batch size must be 1, got B=2"):
        cache.update(0, kv, kv)


@pytest.mark.parametrize("kind", KINDS)
def test_update_checks_the_reserved_length(kind):
    cache = make_cache(kind, TINY[0], 8, block_size=4)
    cache.begin_forward(2)
    t = torch.zeros(1, 1, 3, 4)
    with pytest.raises(ValueError, match="update got 3 new positions, begin_forward reserved 2"):
        cache.update(0, t, t)


@pytest.mark.parametrize("kind", KINDS)
def test_abort_forward_drops_the_reservation(kind):
    shape, heads = TINY
    seq = Seq(shape, heads, 10, seed=12)
    cache = make_cache(kind, shape, max_tokens=16, block_size=4)
    feed(cache, seq, 0, 3)
    used = cache.nbytes
    cache.begin_forward(6)
    cache.update(0, seq.k[0][:, :, 3:9], seq.v[0][:, :, 3:9])  # layer 1 "fails"
    cache.abort_forward()
    assert (cache.seq_len, cache.nbytes) == (3, used)
    assert_matches_reference([(3, 10, feed(cache, seq, 3, 10))], seq)


def test_release_and_reset_return_every_block():
    shape, heads = TINY
    seq = Seq(shape, heads, 9, seed=13)
    a = make_cache("paged", shape, max_tokens=16, block_size=4)
    feed(a, seq, 0, 9)
    b = a.fork()
    feed(b, seq.splice(9, Seq(shape, heads, 4, seed=14)), 9, 13)
    assert a.allocator.num_used == 5  # 2 shared + a's partial block + b's copy of it + b's new block
    a.reset()
    assert (a.seq_len, a.block_table, a.allocator.num_used) == (0, [], 4)  # b still holds its 4
    b.release()
    assert (b.seq_len, b.nbytes) == (0, 0)
    assert a.allocator.num_free == a.allocator.num_blocks
    assert_matches_reference([(0, 9, feed(b, seq, 0, 9))], seq)  # reusable after release


def test_metadata_slot_mapping():
    shape, heads = TINY
    a = make_cache("paged", shape, max_tokens=16, block_size=4)
    hog = PagedKVCache(shape, 16, "cpu", torch.float32, block_size=4, share_with=a)
    hog.begin_forward(4)  # takes block 0, so a's blocks are 1 and 2
    a.begin_forward(6)
    md = a.metadata
    assert (md.past, md.num_new) == (0, 6)
    assert md.block_table.tolist() == [1, 2]
    assert md.first_block == 1  # consecutive blocks: attention reads one slice of the arena
    assert md.slot_mapping.tolist() == [4, 5, 6, 7, 8, 9]
    assert md.slot_mapping.dtype == torch.long
    a.end_forward()
    assert a.metadata is None
    a.begin_forward(3)
    assert a.metadata.slot_mapping.tolist() == [10, 11, 12]  # 2 rows left in block 2, then block 3


def test_metadata_slot_mapping_of_scattered_blocks():
    """Blocks that are not a run: each position's slot comes from its block's id."""
    shape, heads = TINY
    a = make_cache("paged", shape, max_tokens=16, block_size=4)
    hog = PagedKVCache(shape, 16, "cpu", torch.float32, block_size=4, share_with=a)
    a.begin_forward(3)  # block 0
    a.end_forward()
    hog.begin_forward(4)  # block 1
    a.begin_forward(3)  # positions 3..5: row 3 of block 0, then block 2
    md = a.metadata
    assert md.block_table.tolist() == [0, 2] and md.first_block is None
    assert md.slot_mapping.tolist() == [3, 8, 9]


def test_interleaved_sequences_get_scattered_blocks_and_still_match_the_reference():
    """Two conversations growing in turn on one arena take alternate blocks: their tables are not
    runs, so attention gathers them (``first_block is None``); a lone one reads a slice."""
    shape, heads = SMOLVLM
    a = make_cache("paged", shape, max_tokens=64, block_size=4)
    b = PagedKVCache(shape, 64, "cpu", torch.float32, block_size=4, share_with=a)
    seqs = {"a": Seq(shape, heads, 20, seed=11), "b": Seq(shape, heads, 20, seed=12)}
    results = {"a": [], "b": []}
    for start in range(0, 20, 4):
        for name, cache in (("a", a), ("b", b)):
            results[name] += feed_steps(cache, seqs[name], [start, start + 4])
    assert sorted(a.block_table + b.block_table) == list(range(10))
    for cache in (a, b):
        assert any(y != x + 1 for x, y in zip(cache.block_table, cache.block_table[1:]))
        cache.begin_forward(1)
        assert cache.metadata.first_block is None
        cache.abort_forward()
    for name in results:
        assert_matches_reference(results[name], seqs[name])


def test_create_kv_cache_builds_the_configured_kind():
    shape = TINY[0]
    paged = create_kv_cache(CacheConfig(kind="paged", max_tokens=100, block_size=16), shape, 8192, "cpu", torch.float32)
    assert isinstance(paged, PagedKVCache) and isinstance(paged.allocator, BlockAllocator)
    # 1024 initial tokens is more than the cap of 2 * ceil(100 / 16) = 14 blocks.
    assert (paged.capacity, paged.block_size, paged.num_blocks, paged.max_num_blocks) == (100, 16, 14, 14)
    assert CacheConfig().kind == "paged"
    default = create_kv_cache(CacheConfig(), shape, 8192, "cpu", torch.float32)
    assert isinstance(default, PagedKVCache)
    assert (default.capacity, default.num_blocks, default.max_num_blocks) == (8192, 64, 1024)
    sized = create_kv_cache(CacheConfig(kind="paged", max_tokens=100, num_blocks=9, max_num_blocks=20), shape,
                            8192, "cpu", torch.float32)
    assert (sized.num_blocks, sized.max_num_blocks) == (9, 20)
    capped = create_kv_cache(CacheConfig(kind="paged"), shape, 64, "cpu", torch.bfloat16)
    assert (capped.capacity, capped.num_blocks, capped.kv.dtype) == (64, 8, torch.bfloat16)
    contiguous = create_kv_cache(CacheConfig(kind="contiguous", max_tokens=10), shape, 64, "cpu", torch.float32)
    assert isinstance(contiguous, ContiguousKVCache) and contiguous.k.shape == (2, 1, 1, 10, 4)
    with pytest.raises(ValueError, match="max_batch_size=2"):
        create_kv_cache(CacheConfig(kind="paged", max_batch_size=2), shape, 64, "cpu", torch.float32)
    with pytest.raises(ValueError, match="num_blocks must be >= 1, got 0"):
        CacheConfig(kind="paged", num_blocks=0)
    with pytest.raises(ValueError, match="max_num_blocks must be >= num_blocks"):
        CacheConfig(kind="paged", num_blocks=4, max_num_blocks=3)


# --- Randomized: append / fork / truncate / release on caches sharing one arena ---------------------

class SharedArenaMachine(RuleBasedStateMachine):
    """Every live cache must reproduce the no-cache reference of its own sequence, and the
    allocator's counts must equal the references the live block tables hold. The arena starts at
    2 blocks and grows (2 -> 4 -> 7) while forks share it."""

    SHAPE, HEADS, BS, MAX_TOKENS, NUM_BLOCKS = CacheShape(2, 1, 4), 2, 4, 16, 7

    def __init__(self):
        super().__init__()
        self.root = PagedKVCache(self.SHAPE, self.MAX_TOKENS, "cpu", torch.float32,
                                 block_size=self.BS, num_blocks=2, max_num_blocks=self.NUM_BLOCKS)
        self.alloc = self.root.allocator
        self.live: list[tuple[PagedKVCache, Seq]] = [(self.root, Seq(self.SHAPE, self.HEADS, 0, seed=0))]

    @initialize(n=st.integers(1, 16), forks=st.integers(0, 3), seed=st.integers(0, 2**16))
    def prefill_and_fork(self, n, forks, seed):
        self.append(0, n, seed)
        for _ in range(forks):
            self.fork(0)

    @rule(pick=st.integers(0, 100), n=st.integers(1, 7), seed=st.integers(0, 2**16))
    @precondition(lambda self: self.live)
    def append(self, pick, n, seed):
        i = pick % len(self.live)
        cache, seq = self.live[i]
        t = cache.seq_len
        grown = seq.splice(t, Seq(self.SHAPE, self.HEADS, n, seed=seed))
        if t + n > self.MAX_TOKENS:
            event("prompt too long")
            with pytest.raises(PromptTooLongError):
                cache.begin_forward(n)
            return
        cow = t % self.BS != 0 and self.alloc.ref_count(cache.block_table[t // self.BS]) > 1
        needed = math.ceil((t + n) / self.BS) - math.ceil(t / self.BS) + cow
        if needed > self.alloc.num_free + self.NUM_BLOCKS - self.alloc.num_blocks:
            event("out of blocks")
            table = list(cache.block_table)
            with pytest.raises(OutOfBlocksError):
                cache.begin_forward(n)
            assert cache.block_table == table
            return
        if cow:
            event("copy-on-write")
        if needed > self.alloc.num_free:
            event("arena grows")
        assert_matches_reference([(t, t + n, feed(cache, grown, t, t + n))], grown)
        self.live[i] = (cache, grown)

    @rule(pick=st.integers(0, 100))
    @precondition(lambda self: self.live)
    def fork(self, pick):
        cache, seq = self.live[pick % len(self.live)]
        free = self.alloc.num_free
        self.live.append((cache.fork(), seq))
        assert self.alloc.num_free == free  # a fork shares, it copies nothing

    @rule(pick=st.integers(0, 100), keep=st.floats(0, 1))
    @precondition(lambda self: self.live)
    def truncate(self, pick, keep):
        i = pick % len(self.live)
        cache, seq = self.live[i]
        n = int(cache.seq_len * keep)
        cache.truncate(n)
        self.live[i] = (cache, seq.splice(n, Seq(self.SHAPE, self.HEADS, 0, seed=0)))

    @rule(pick=st.integers(0, 100))
    @precondition(lambda self: self.live)
    def release(self, pick):
        cache, _ = self.live.pop(pick % len(self.live))
        cache.release()
        assert cache.block_table == [] and cache.nbytes == 0

    @rule()
    def new_sequence(self):
        cache = PagedKVCache(self.SHAPE, self.MAX_TOKENS, "cpu", torch.float32, block_size=self.BS, share_with=self.root)
        self.live.append((cache, Seq(self.SHAPE, self.HEADS, 0, seed=0)))

    @invariant()
    def counts_match_block_tables(self):
        refs = Counter(b for cache, _ in self.live for b in cache.block_table)
        free = self.alloc.free_block_ids
        n = self.alloc.num_blocks
        assert n in (2, 4, self.NUM_BLOCKS) and self.root.kv.shape[2] == n
        assert sum(refs.values()) == sum(self.alloc.ref_count(b) for b in range(n))
        assert all(self.alloc.ref_count(b) == refs[b] for b in range(n))
        assert self.alloc.num_free + self.alloc.num_used == n
        assert len(set(free)) == len(free) and set(free).isdisjoint(refs)
        for cache, seq in self.live:
            assert cache.seq_len == len(seq)
            assert len(cache.block_table) == math.ceil(cache.seq_len / self.BS)
            assert cache.nbytes == len(cache.block_table) * cache.bytes_per_block

    def teardown(self):
        for cache, _ in self.live:
            cache.release()
        assert self.alloc.num_free == self.alloc.num_blocks
        assert all(self.alloc.ref_count(b) == 0 for b in range(self.alloc.num_blocks))


SharedArenaMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_shared_arena_random_operations = SharedArenaMachine.TestCase
