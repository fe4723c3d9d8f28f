"""Switching between answer versions: the branch left behind stays cached (engine.branches), so going
back prefills only the new question, and the answer equals a from-scratch run of that branch."""

from __future__ import annotations

import pytest

from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession


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


def test_switching_back_to_a_branch_reuses_its_whole_cache(parts, images_dir):
    session = ChatSession(*parts, cache_config=CacheConfig(kind="paged"))
    coffee = images_dir / "coffee.png"
    _, a1 = run(session, "What is in this image?", [coffee])
    _, a2 = run(session, "Tell me more.")
    branch_a = list(session.turns)
    a_cached = a2.prompt_tokens + a2.generated_tokens - 1  # what the cache holds after branch A

    session.turns = []  # edit the first question: branch B shares only the start of the prompt
    _, b1 = run(session, "What colour is the cup?", [coffee])
    assert 64 < b1.cached_tokens < a1.prompt_tokens  # the header and the image (it comes before the text)
    _, b2 = run(session, "And the table?")
    branch_b = list(session.turns)

    session.turns = list(branch_a)  # switch back to A and ask on: only the new question is prefilled
    tokens_a, a3 = run(session, "Thanks.")
    assert a3.cached_tokens == a_cached
    assert a3.prompt_tokens - a3.cached_tokens == a3.prompt_tokens - a_cached < 20

    session.turns = list(branch_b)  # and to B again
    _, b3 = run(session, "Thanks.")
    assert b3.cached_tokens == b2.prompt_tokens + b2.generated_tokens - 1

    fresh = ChatSession(*parts, cache_config=CacheConfig(kind="contiguous"), prefill_chunk=10**6)
    fresh.turns = list(branch_a)
    ref_tokens, ref = run(fresh, "Thanks.")
    assert ref.cached_tokens == 0 and tokens_a == ref_tokens  # the kept cache holds exactly branch A


def test_a_contiguous_cache_keeps_no_branches_but_stays_correct(parts, images_dir):
    session = ChatSession(*parts, cache_config=CacheConfig(kind="contiguous"))
    run(session, "What is in this image?", [images_dir / "coffee.png"])
    branch_a = list(session.turns)
    session.turns = []
    run(session, "Hello?")
    session.turns = list(branch_a)
    tokens, stats = run(session, "More.")
    assert session.branches.spares == [] and stats.cached_tokens < 30
    fresh = ChatSession(*parts, cache_config=CacheConfig(kind="contiguous"))
    fresh.turns = list(branch_a)
    assert run(fresh, "More.")[0] == tokens


def test_kept_branches_give_way_to_the_current_conversation(parts):
    session = ChatSession(*parts, cache_config=CacheConfig(kind="paged", max_tokens=256))
    for i in range(5):  # five branches that part after the first message
        session.turns = []
        run(session, f"Question number {i} is about something else entirely, with words.")
        run(session, "Go on.")
    assert len(session.branches.spares) == 2  # SPARE_BRANCHES, least recently used dropped
    arena = session.cache.arena
    assert arena.max_num_blocks - arena.allocator.num_used >= \
        session.cache.max_blocks_per_seq - len(session.cache.block_table)


def test_the_service_switching_histories_reuses_the_other_branch(parts, images_dir):
    """As the app switches versions: set_history with each branch's messages (answers as text), then send."""
    import threading

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
        # "full": the detail set_history preprocesses a rebuilt history's images at.
        service.send(text, [Attachment(str(p)) for p in images], params(8, "full"), lambda e: (events.append(e),
                     isinstance(e, DoneEvent) and done.set()))
        assert done.wait(60)
        return "".join(e.text for e in events if isinstance(e, TokenEvent)).strip(), events[-1].stats

    coffee = images_dir / "coffee.png"
    a1, _ = send([], "What is in this image?", [coffee])
    question = HistoryMessage("user", "What is in this image?", (Attachment(str(coffee)),))
    branch_a = [question, HistoryMessage("assistant", a1)]
    _, a2 = send(branch_a, "Tell me more.")
    send([], "Describe the picture.", [coffee])  # an edited first question: another branch
    _, back = send(branch_a, "Tell me more.")  # back to A: its whole prompt is still cached
    try:
        assert back.prompt_tokens == a2.prompt_tokens and back.cached_tokens == a2.prompt_tokens - 1
    finally:
        service.shutdown()


def test_the_blocks_kept_for_other_branches_are_counted(parts):
    session = ChatSession(*parts, cache_config=CacheConfig(kind="paged"))
    run(session, "A first question with some words in it, to fill a block or two of the cache.")
    session.turns = []
    run(session, "Something else.")
    cache, branches = session.cache, session.branches
    [(spare, _keys)] = branches.spares
    assert branches.blocks_beside(cache) == len(set(spare.block_table) - set(cache.block_table)) > 0
    assert cache.allocator.num_used == len(set(spare.block_table) | set(cache.block_table))
