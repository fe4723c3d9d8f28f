"""Switching between answer versions (branches of one conversation): the branch left behind stays in the
arena's prefix cache (engine.cache.prefix), so going back prefills only what is not in a full cached
block plus the new question, and the answer equals a from-scratch run of that branch."""

from __future__ import annotations

import threading

import pytest

from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession

BS = CacheConfig().block_size


@pytest.fixture(scope="module")
def parts(tiny_checkpoint):
    s = ChatSession.load(str(tiny_checkpoint), device="cpu")
    return s.model, s.tokenizer, s.processor


def params(n=24, detail="fast") -> GenerationParams:
    return GenerationParams(max_new_tokens=n, ignore_eos=True, image_detail=detail)


def run(session, text, images=()):
    events = list(session.send(text, images, params()))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "length", done
    return [e.token_id for e in events if isinstance(e, TokenEvent) and e.token_id >= 0], done.stats


def test_switching_back_to_a_branch_prefills_only_its_last_partial_block(parts, images_dir):
    session = ChatSession(*parts, cache_config=CacheConfig(kind="paged"))
    coffee = images_dir / "coffee.png"
    _, a1 = run(session, "What is in this image?", [coffee])
    _, a2 = run(session, "Tell me more.")
    branch_a = list(session.turns)
    a_held = a2.prompt_tokens + a2.generated_tokens - 1  # what the cache holds after branch A

    session.turns = []  # edit the first question: branch B shares only the start of the prompt
    _, b1 = run(session, "What colour is the cup?", [coffee])
    assert 64 < b1.cached_tokens < a1.prompt_tokens  # the header and the image (it comes before the text)
    run(session, "And the table?")

    session.turns = list(branch_a)  # back to A: its full blocks come from the prefix cache
    tokens_a, a3 = run(session, "Thanks.")
    assert a3.cached_tokens == a_held // BS * BS
    assert a3.prompt_tokens - a3.cached_tokens < 20 + BS

    fresh = ChatSession(*parts, cache_config=CacheConfig(kind="contiguous"), prefill_chunk=10**6)
    fresh.turns = list(branch_a)
    ref_tokens, ref = run(fresh, "Thanks.")
    assert ref.cached_tokens == 0 and tokens_a == ref_tokens


def test_a_contiguous_cache_keeps_no_other_branch_but_stays_correct(parts, images_dir):
    session = ChatSession(*parts, cache_config=CacheConfig(kind="contiguous"))
    run(session, "What is in this image?", [images_dir / "coffee.png"])
    branch_a = list(session.turns)
    session.turns = []
    run(session, "Hello?")
    session.turns = list(branch_a)
    tokens, stats = run(session, "More.")
    assert stats.cached_tokens < 30
    fresh = ChatSession(*parts, cache_config=CacheConfig(kind="contiguous"))
    fresh.turns = list(branch_a)
    assert run(fresh, "More.")[0] == tokens


def test_the_service_switching_histories_reuses_the_other_branch(parts, images_dir):
    """As the app switches versions: set_history with each branch's messages (answers as text), then send."""
    from engine.api.backend import Attachment, HistoryMessage
    from engine.service import EngineService

    session = ChatSession(*parts, cache_config=CacheConfig(kind="paged"))
    service = EngineService(lambda model, options: session)
    loaded = threading.Event()
    service.load("tiny", {}, lambda info, message: loaded.set())
    assert loaded.wait(30)

    def send(history, text, images=()):
        events, done = [], threading.Event()
        service.set_history(history)
        service.send(text, [Attachment(str(p)) for p in images], params(8, "fast"), lambda e: (events.append(e),
                     isinstance(e, DoneEvent) and done.set()))
        assert done.wait(60)
        return "".join(e.text for e in events if isinstance(e, TokenEvent)).strip(), events[-1].stats

    coffee = images_dir / "coffee.png"
    a1, _ = send([], "What is in this image?", [coffee])
    question = HistoryMessage("user", "What is in this image?", (Attachment(str(coffee), detail="fast"),))
    branch_a = [question, HistoryMessage("assistant", a1)]
    _, a2 = send(branch_a, "Tell me more.")
    send([], "Describe the picture.", [coffee])  # an edited first question: another branch
    _, back = send(branch_a, "Tell me more.")  # back to A: its blocks are still cached
    try:
        assert back.prompt_tokens == a2.prompt_tokens
        assert back.cached_tokens >= (a2.prompt_tokens - 1) // BS * BS > 64  # the image is not read again
    finally:
        service.shutdown()
