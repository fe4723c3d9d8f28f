"""``ChatSession.warmup``: a first answer's one-time work done at load, with nothing left behind."""

from __future__ import annotations

import pytest

from engine.api.events import GenerationParams, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession
from engine.models.llama.static_decode import StaticDecoder


def answer(session, text="Hello", n=12):
    params = GenerationParams(max_new_tokens=n, ignore_eos=True, speculative=False)
    return [e.token_id for e in session.send(text, params=params) if isinstance(e, TokenEvent) and e.token_id >= 0]


@pytest.mark.parametrize("kind", ["paged", "contiguous"])
def test_warmup_captures_every_bucket_and_changes_no_answer(tiny_checkpoint, kind):
    """Run the CUDA path's warm-up on the CPU (static decode step, eager): afterwards the cache is
    empty, one step in the warm-up length's KV bucket has run, and answers are unchanged."""
    cold = ChatSession.load(str(tiny_checkpoint), device="cpu", cache_config=CacheConfig(kind=kind))
    expected = answer(cold)
    session = ChatSession.load(str(tiny_checkpoint), device="cpu", cache_config=CacheConfig(kind=kind))
    session.model.static_decode = True
    session.model._static = StaticDecoder(session.model, use_graph=False)
    buckets = []
    step = session.model._static.step

    def spy(kv, bucket):
        buckets.append(bucket)
        return step(kv, bucket)

    session.model._static.step = spy
    seconds = session.warmup()
    assert seconds > 0 and session.warmup_s == seconds
    assert session.cache.seq_len == 0 and session.turns == []
    assert sorted(set(buckets)) == [2048]  # a 1356-token warm-up: the bucket a photo question reaches
    if kind == "paged":
        # Every block is free again, in an arena grown to 2048 tokens (128 blocks of 16) by the warm-up.
        assert not session.cache.block_table and session.cache.allocator.num_free == session.cache.num_blocks == 128
    assert answer(session) == expected
    session.model.static_decode, session.model._static = None, None


def test_the_warm_up_photo_question_leaves_nothing_behind(tiny_checkpoint, images_dir):
    """The synthetic photo question of the CUDA warm-up, run on the CPU: afterwards no turn, no cached
    token, no prefix-cache block and no cached tiles remain, and a real photo question answers (token
    ids and cached-token count) exactly as in a session that never warmed up."""
    from engine.api.events import DoneEvent

    def photo_answer(session):
        params = GenerationParams(max_new_tokens=8, ignore_eos=True, speculative=False)
        events = list(session.send("What is in it?", images=[images_dir / "chelsea.png"], params=params))
        done = next(e for e in events if isinstance(e, DoneEvent))
        return [e.token_id for e in events if isinstance(e, TokenEvent) and e.token_id >= 0], done.stats.cached_tokens

    cold = ChatSession.load(str(tiny_checkpoint), device="cpu")
    expected = photo_answer(cold)
    session = ChatSession.load(str(tiny_checkpoint), device="cpu")
    session._warm_photo_question()
    assert session.turns == [] and session.cache.seq_len == 0 and session._cached_keys == []
    assert len(session.cache.prefix) == 0 and not session._processed
    assert session.cache.allocator.num_free == session.cache.num_blocks
    assert photo_answer(session) == expected and expected[1] == 0


def test_a_context_too_small_for_the_warm_up_photo_still_loads(tiny_checkpoint):
    """The photo question needs ~870 tokens; a 256-token context refuses it, and the session is
    still usable and empty afterwards (the warm-up is an optimisation, never a reason to fail)."""
    session = ChatSession.load(str(tiny_checkpoint), device="cpu", cache_config=CacheConfig(max_tokens=256))
    session._warm_photo_question()
    assert session.turns == [] and session.cache.seq_len == 0
    assert len(answer(session, n=4)) == 4
