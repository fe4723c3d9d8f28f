"""BlockAllocator: free list and reference counts, without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.api.errors import EngineError
from engine.cache.block_allocator import BlockAllocator, OutOfBlocksError


def test_module_does_not_import_torch():
    code = "import sys, engine.cache.block_allocator; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_allocates_in_order_then_reuses_freed_blocks_last():
    a = BlockAllocator(3)
    assert (a.num_free, a.num_used) == (3, 0)
    assert [a.allocate(), a.allocate()] == [0, 1]
    assert a.ref_count(0) == 1 and a.ref_count(2) == 0
    assert a.decref(0) is True
    assert a.free_block_ids == (2, 0)
    assert [a.allocate(), a.allocate()] == [2, 0]
    assert a.num_free == 0


def test_shared_block_is_freed_by_its_last_holder():
    a = BlockAllocator(2)
    b = a.allocate()
    a.incref(b)
    a.incref(b)
    assert a.ref_count(b) == 3
    assert a.decref(b) is False
    assert a.decref(b) is False
    assert a.num_free == 1
    assert a.decref(b) is True
    assert a.ref_count(b) == 0
    assert a.num_free == 2


def test_out_of_blocks_names_the_arena_size():
    a = BlockAllocator(2)
    a.allocate()
    a.allocate()
    with pytest.raises(OutOfBlocksError, match="all 2 blocks are in use"):
        a.allocate()
    assert issubclass(OutOfBlocksError, EngineError)


def test_invariant_violations_assert():
    a = BlockAllocator(2)
    with pytest.raises(AssertionError, match="decref of free block 0"):
        a.decref(0)
    with pytest.raises(AssertionError, match="incref of free block 1"):
        a.incref(1)
    b = a.allocate()
    a.decref(b)
    with pytest.raises(AssertionError):
        a.decref(b)  # double free
    assert a.ref_count(b) == 0


def test_rejects_empty_arena():
    with pytest.raises(ValueError, match="num_blocks must be >= 1, got 0"):
        BlockAllocator(0)


def test_grow_keeps_ids_and_counts_and_appends_free_blocks():
    a = BlockAllocator(2)
    x, y = a.allocate(), a.allocate()
    a.incref(x)
    a.grow(5)
    assert (a.num_blocks, a.num_free, a.num_used) == (5, 3, 2)
    assert (a.ref_count(x), a.ref_count(y)) == (2, 1)
    assert a.free_block_ids == (2, 3, 4)
    a.decref(y)
    assert a.free_block_ids == (2, 3, 4, y)  # FIFO: the freed block still comes after the new ones
    with pytest.raises(ValueError, match="cannot shrink a block allocator from 5 to 4 blocks"):
        a.grow(4)


ops = st.lists(st.tuples(st.sampled_from(["allocate", "incref", "decref", "grow"]), st.integers(0, 1000)),
               max_size=60)


@settings(max_examples=150, deadline=None)
@given(num_blocks=st.integers(1, 8), ops=ops)
def test_matches_a_reference_count_model(num_blocks, ops):
    a = BlockAllocator(num_blocks)
    held: dict[int, int] = {}  # block id -> references we hold
    for op, pick in ops:
        if op == "grow":
            num_blocks += pick % 3
            a.grow(num_blocks)
        elif op == "allocate":
            if len(held) == num_blocks:
                with pytest.raises(OutOfBlocksError):
                    a.allocate()
            else:
                b = a.allocate()
                assert b not in held
                held[b] = 1
        elif held:
            b = sorted(held)[pick % len(held)]
            if op == "incref":
                a.incref(b)
                held[b] += 1
            else:
                assert a.decref(b) is (held[b] == 1)
                held[b] -= 1
                if not held[b]:
                    del held[b]
        free = a.free_block_ids
        assert len(set(free)) == len(free) == a.num_free
        assert a.num_free + a.num_used == num_blocks
        assert set(free).isdisjoint(held)
        assert all(a.ref_count(i) == held.get(i, 0) for i in range(num_blocks))
    for b, n in list(held.items()):
        for _ in range(n):
            a.decref(b)
    assert a.num_free == num_blocks
