"""ChatSession cache reuse: new turns, regenerate and edit prefill only what changed, give the tokens
of a from-scratch run, drop old turns at the context limit, and prefill in chunks. Both cache kinds.

The from-scratch reference is a fresh session (contiguous cache, one unchunked prefill) given the
same earlier turns. Answers use ``ignore_eos`` and end on ``max_new_tokens``, so the last answer
token is never fed back: after a turn the cache holds ``prompt_tokens + generated_tokens - 1``.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from engine.api.errors import ImageError, PromptTooLongError
from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.cache import CacheConfig, ContiguousKVCache, PagedKVCache
from engine.chat import ChatSession, Turn

KINDS = ["paged", "contiguous"]


@pytest.fixture(scope="module")
def parts(tiny_checkpoint):
    """Model, tokenizer and processor, loaded once and shared by every session here."""
    s = ChatSession.load(str(tiny_checkpoint), device="cpu")
    return s.model, s.tokenizer, s.processor


def new_session(parts, kind="paged", **kw) -> ChatSession:
    max_tokens = kw.pop("max_tokens", None)
    return ChatSession(*parts, cache_config=CacheConfig(kind=kind, max_tokens=max_tokens), **kw)


def params(n=6, **kw) -> GenerationParams:
    return GenerationParams(max_new_tokens=n, ignore_eos=True, image_detail="fast", **kw)


def consume(gen):
    events = list(gen)
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    assert done.finish_reason != "error", done.error
    return [e.token_id for e in events if isinstance(e, TokenEvent) and e.token_id >= 0], done


def from_scratch(parts, turns, text, images=(), n=6, system_prompt=None):
    """The same earlier turns, one full unchunked prefill into a fresh contiguous cache."""
    fresh = new_session(parts, "contiguous", prefill_chunk=10**6, system_prompt=system_prompt)
    fresh.turns = list(turns)
    tokens, done = consume(fresh.send(text, images, params(n)))
    assert done.stats.cached_tokens == 0
    return tokens, done


@pytest.mark.parametrize("kind", KINDS)
def test_four_turn_conversation_reuses_everything_and_matches_from_scratch(parts, kind, images_dir):
    session = new_session(parts, kind)
    script = [("What is in this image?", [images_dir / "coffee.png"]), ("Tell me more.", []),
              ("And in this one?", [images_dir / "rocket.jpg"]), ("Compare the two.", [])]
    previous = None
    for i, (text, images) in enumerate(script):
        earlier, cached_before = list(session.turns), session.cache.seq_len
        tokens, done = consume(session.send(text, images, params(6)))
        ref_tokens, ref_done = from_scratch(parts, earlier, text, images)
        assert tokens == ref_tokens, f"turn {i}"
        assert done.stats.prompt_tokens == ref_done.stats.prompt_tokens
        if previous is None:
            assert done.stats.cached_tokens == 0
        else:  # the whole previous conversation, images included, answer included
            assert done.stats.cached_tokens == cached_before == \
                previous.prompt_tokens + previous.generated_tokens - 1, f"turn {i}"
        assert done.stats.image_tokens == 64 * (1 + (i >= 2))  # one tile per image ("fast")
        assert session.cache.seq_len == done.stats.prompt_tokens + 6 - 1
        previous = done.stats
    assert [t.role for t in session.turns] == ["user", "assistant"] * 4
    if kind == "paged":
        assert isinstance(session.cache, PagedKVCache)
        assert session.cache.nbytes == math.ceil(session.cache.seq_len / 16) * session.cache.bytes_per_block
    else:
        assert isinstance(session.cache, ContiguousKVCache)


def test_paged_is_the_default_cache(parts):
    session = ChatSession(*parts)
    assert isinstance(session.cache, PagedKVCache)
    assert session.cache.capacity == session.model.metadata.text.max_position_embeddings
    assert session.cache.num_blocks == 64  # 1024 tokens' worth; the arena grows on demand


@pytest.mark.parametrize("kind", KINDS)
def test_regenerate_reuses_the_prompt_and_replaces_the_answer(parts, kind, images_dir):
    session = new_session(parts, kind)
    first, done1 = consume(session.send("Describe this.", [images_dir / "coffee.png"], params(5)))
    again, done2 = consume(session.regenerate(params(5)))
    assert again == first  # greedy: the same answer
    assert done2.stats.prompt_tokens == done1.stats.prompt_tokens
    assert done2.stats.cached_tokens == done1.stats.prompt_tokens - 1  # only the last prompt token is prefilled
    assert [t.role for t in session.turns] == ["user", "assistant"]
    sampled, done3 = consume(session.regenerate(params(5, temperature=1.5, seed=3)))
    assert done3.stats.cached_tokens == done1.stats.prompt_tokens - 1
    assert session.turns[-1].token_ids == sampled and len(session.turns) == 2
    # The next turn builds on the regenerated answer, all of it cached.
    tokens, done4 = consume(session.send("Why?", params=params(4)))
    assert done4.stats.cached_tokens == done1.stats.prompt_tokens + 5 - 1
    ref, _ = from_scratch(parts, session.turns[:2], "Why?", n=4)
    assert tokens == ref


def test_regenerate_needs_an_answer_and_restores_it_after_a_failure(parts, monkeypatch):
    session = new_session(parts)
    with pytest.raises(ValueError, match="no answer to regenerate"):
        session.regenerate()
    consume(session.send("Hi", params=params(3)))
    before = list(session.turns)

    def broken(*args, **kwargs):
        raise RuntimeError("device lost")

    monkeypatch.setattr(session.model, "prefill", broken)
    events = list(session.regenerate(params(3)))
    assert events[-1].finish_reason == "error" and "device lost" in events[-1].error
    assert session.turns == before  # the old answer is back
    monkeypatch.undo()
    _, done = consume(session.send("Again", params=params(3)))
    assert done.stats.cached_tokens > 0  # cache and keys still describe the same tokens


@pytest.mark.parametrize("kind", KINDS)
def test_edit_reuses_the_common_prefix(parts, kind, images_dir):
    session = new_session(parts, kind)
    _, d1 = consume(session.send("Describe this.", [images_dir / "coffee.png"], params(5)))
    consume(session.send("Shorter please.", params=params(5)))
    consume(session.send("Thanks.", params=params(5)))
    tokens, done = consume(session.edit(2, "Longer please.", params=params(5)))
    assert [t.text for t in session.turns if t.role == "user"] == ["Describe this.", "Longer please."]
    assert len(session.turns) == 4
    ref, ref_done = from_scratch(parts, session.turns[:2], "Longer please.", n=5)
    assert tokens == ref and done.stats.prompt_tokens == ref_done.stats.prompt_tokens
    # Shared: the first exchange, its <end_of_utterance>, and the tokens the two messages' chunks share.
    enc = session.tokenizer.encode
    old, new = enc("\nUser: Shorter please."), enc("\nUser: Longer please.")
    same = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
    assert done.stats.cached_tokens == d1.stats.prompt_tokens + 5 + 1 + same

    # Editing the first message's text keeps its image (images=None) and reuses the image span.
    tokens, done = consume(session.edit(0, "What colour is it?", params=params(5)))
    assert len(session.turns) == 2 and len(session.turns[0].images) == 1
    assert done.stats.image_tokens == 64
    image_end = max(i for i, k in enumerate(session._cached_keys) if isinstance(k, tuple)) + 1
    assert done.stats.cached_tokens >= image_end + 1  # the image span and the token after it
    ref, _ = from_scratch(parts, [], "What colour is it?", [images_dir / "coffee.png"], n=5)
    assert tokens == ref

    # New images replace the old ones.
    tokens, done = consume(session.edit(0, "What colour is it?", images=[], params=params(5)))
    assert done.stats.image_tokens == 0 and session.turns[0].images == []


def test_edit_failures_leave_the_conversation_unchanged(parts, tmp_path):
    session = new_session(parts, max_tokens=160)
    consume(session.send("Hi", params=params(3)))
    consume(session.send("Hello again", params=params(3)))
    before, seq_len = list(session.turns), session.cache.seq_len
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    with pytest.raises(ImageError):
        session.edit(0, "What is this?", images=[bad])
    with pytest.raises(PromptTooLongError, match="the prompt has [0-9]+ tokens but the context holds 160"):
        session.edit(2, "word " * 300)
    with pytest.raises(ValueError, match="turn 1 is not a user turn"):
        session.edit(1, "answers are not edited")
    with pytest.raises(ValueError, match="turn 7 is not a user turn"):
        session.edit(7, "no such turn")
    assert session.turns == before and session.cache.seq_len == seq_len
    _, done = consume(session.send("Still here?", params=params(3)))
    assert done.stats.cached_tokens == seq_len


@pytest.mark.parametrize("kind", KINDS)
def test_context_limit_drops_oldest_exchanges_and_keeps_the_system_prompt(parts, kind, images_dir):
    system = "You are terse."
    session = new_session(parts, kind, max_tokens=200, system_prompt=system)
    first, d0 = consume(session.send("Look.", [images_dir / "coffee.png"], params(8)))
    assert d0.stats.dropped_turns == 0 and d0.stats.notice == ""
    dones = []
    for i in range(12):
        earlier = list(session.turns)
        text = f"Question number {i}, please answer."
        tokens, done = consume(session.send(text, params=params(8)))
        dones.append(done)
        if done.stats.dropped_turns:
            break
    else:
        pytest.fail("no turn was ever dropped")
    stats = done.stats
    assert stats.dropped_turns == 2  # the image exchange, whole
    assert "200-token context" in stats.notice and "2 oldest messages were dropped" in stats.notice
    assert session.turns[0].role == "user" and session.turns[:-2] == earlier[2:]
    assert stats.image_tokens == 0 and stats.prompt_tokens + 8 <= 200
    # The system prompt is kept (it is the reused prefix) and the tokens equal a fresh run.
    system_ids = session.tokenizer.encode_chat([{"role": "system", "content": system}],
                                               add_generation_prompt=False).input_ids
    assert len(system_ids) - 2 <= stats.cached_tokens < stats.prompt_tokens // 2
    ref, ref_done = from_scratch(parts, earlier[2:], text, n=8, system_prompt=system)
    assert tokens == ref and ref_done.stats.prompt_tokens == stats.prompt_tokens
    # The next turn fits again and reuses everything.
    _, nxt = consume(session.send("Last one.", params=params(8)))
    assert nxt.stats.dropped_turns == 0
    assert nxt.stats.cached_tokens == stats.prompt_tokens + 8 - 1


def test_a_message_too_long_alone_fails_before_any_work(parts, monkeypatch):
    session = new_session(parts, max_tokens=120)
    consume(session.send("Hi", params=params(3)))
    before, seq_len = list(session.turns), session.cache.seq_len
    calls = []
    monkeypatch.setattr(session.model, "prefill", lambda *a, **k: calls.append(a))
    with pytest.raises(PromptTooLongError, match="the prompt has [0-9]+ tokens but the context holds 120; "
                                                 "the last message does not fit even with every earlier turn"):
        session.send("word " * 200, params=params(3))
    assert calls == [] and session.turns == before and session.cache.seq_len == seq_len


def test_a_context_smaller_than_the_template_does_not_blame_an_empty_system_prompt(parts):
    """A 1-token context (a Settings value) said "the system prompt alone has 0 tokens: shorten it"."""
    session = new_session(parts, max_tokens=1)
    with pytest.raises(PromptTooLongError) as info:
        session.send("Hello there", params=params(1))
    assert re.fullmatch(r"the prompt has \d+ tokens but the context holds 1", str(info.value)), str(info.value)


def test_prefill_is_chunked_and_chunking_does_not_change_the_logits(parts, images_dir, monkeypatch):
    logits, chunks = {}, {}
    for chunk in (7, 10**6):
        session = new_session(parts, prefill_chunk=chunk)
        original = session.model.prefill
        seen, outs = [], []

        def spy(x, cache, pos, _orig=original, _seen=seen, _outs=outs):
            _seen.append(x.shape[1])
            _outs.append(_orig(x, cache, pos))
            return _outs[-1]

        monkeypatch.setattr(session.model, "prefill", spy)
        _, done = consume(session.send("What is in this image?", [images_dir / "coffee.png"], params(1)))
        monkeypatch.undo()
        n = done.stats.prompt_tokens
        assert sum(seen) == n and len(seen) == math.ceil(n / min(chunk, n)) and max(seen) <= chunk
        logits[chunk], chunks[chunk] = outs[-1], seen
    assert len(chunks[7]) > 10 and chunks[10**6] == [sum(chunks[7])]
    # float32 GEMMs over 7 rows and over the whole prompt block their sums differently: an AMD EPYC
    # gave 1.1e-5 on these logits (up to ~37; Intel machines stayed under 1e-5). Two positions
    # swapped in the third chunk moved them by 0.30.
    torch.testing.assert_close(logits[7], logits[10**6], atol=1e-4, rtol=0)


def test_a_17_tile_image_is_prefilled_in_bounded_chunks(parts, images_dir, monkeypatch):
    session = new_session(parts)  # default prefill_chunk 512
    seen = []
    original = session.model.prefill

    def spy(x, cache, pos):
        seen.append(x.shape[1])
        return original(x, cache, pos)

    monkeypatch.setattr(session.model, "prefill", spy)
    _, done = consume(session.send("What is this?", [images_dir / "hubble_deep_field.jpg"],
                                   GenerationParams(max_new_tokens=1, image_detail="full")))
    assert done.stats.image_tokens == 17 * 64
    assert max(seen) == 512 and sum(seen) == done.stats.prompt_tokens and len(seen) == 3


def test_prefill_chunk_must_be_positive(parts):
    with pytest.raises(ValueError, match="prefill_chunk must be >= 1, got 0"):
        ChatSession(*parts, prefill_chunk=0)


def test_an_answer_holding_an_image_token_id_is_replayed_as_text(parts):
    session = new_session(parts)
    consume(session.send("Hi", params=params(3)))
    answer = session.turns[-1]
    answer.token_ids = answer.token_ids + [session.model.metadata.image_token_id]  # no tile for it
    tokens, done = consume(session.send("Next", params=params(3)))
    assert done.stats.image_tokens == 0
    ref, ref_done = from_scratch(parts, [session.turns[0], answer], "Next", n=3)
    assert ref_done.stats.prompt_tokens == done.stats.prompt_tokens
    assert tokens == ref


def _linear_fit(session, room: int) -> int:
    """How many oldest turns the one-exchange-at-a-time rule drops (the reference for the bisection)."""
    turns = list(session.turns)
    starts = [0] + [i for i in range(1, len(turns)) if turns[i].role == "user"]
    try:
        for s in starts:
            session.turns[:] = turns[s:]
            if len(session._prompt().ids) + room <= session.cache.capacity:
                return s
        return starts[-1]
    finally:
        session.turns[:] = turns


@pytest.mark.parametrize("exchanges", [12, 40, 200])
def test_a_long_history_is_fitted_in_a_few_renderings(parts, monkeypatch, exchanges):
    """The oldest exchanges dropped are as few as one at a time would drop, found in O(log n)
    renderings of the conversation: dropping them one by one rendered it once per exchange, and a
    10,000-message HTTP request held the engine for minutes."""
    from engine.chat import Turn

    session = new_session(parts, max_tokens=200)
    for i in range(exchanges):
        session.turns += [Turn("user", f"Fact {i}: the number is {i * 7}."), Turn("assistant", "Noted.")]
    session.turns.append(Turn("user", "What was the first fact?"))
    expected = _linear_fit(session, room=8)
    renders = []
    real = type(session)._prompt
    monkeypatch.setattr(type(session), "_prompt", lambda self, *a, **k: renders.append(1) or real(self, *a, **k))
    session.turns.pop()
    _, done = consume(session.send("What was the first fact?", params=params(8)))
    assert done.stats.dropped_turns == expected > 0
    assert len(renders) <= (2 * exchanges).bit_length() + 2, len(renders)
    assert done.stats.prompt_tokens + 8 <= 200


@pytest.mark.parametrize("restated", [True, False])
def test_a_follow_up_is_fitted_from_where_the_last_fit_began(parts, monkeypatch, restated):
    """Trial 74 F6: every follow-up in a long chat rendered the whole history and half of it again to
    find what fits (2.5 s of each answer's wait in a chat of 10,000 messages). Each is now tried first
    where the last fit began: only prompts about the context's size are rendered, and what is dropped
    is still what one exchange at a time would drop, the room for the answer grown or shrunk.
    ``restated``: the whole history is set again before each send (the app's engine service); else
    the session goes on from the turns its last fit kept (the command line)."""
    from engine.chat import Turn

    session = new_session(parts, max_tokens=200)
    history = []
    for i in range(60):
        history += [Turn("user", f"Fact {i}: the number is {i * 7}."), Turn("assistant", "Noted.")]
    session.turns[:] = history
    consume(session.send("What was the first fact?", params=params(8)))
    history = history + [Turn("user", "What was the first fact?"), Turn("assistant", session.turns[-1].text)]
    renders = []
    real = type(session)._prompt
    monkeypatch.setattr(type(session), "_prompt", lambda self, *a, **k: renders.append(len(self.turns)) or real(self, *a, **k))
    for n, question in ((8, "And the second?"), (40, "And the third one, please?"), (2, "The fourth?")):
        if restated:
            session.turns[:] = [Turn(t.role, t.text) for t in history]
        session.turns.append(Turn("user", question))
        expected = _linear_fit(session, room=n)
        session.turns.pop()
        renders.clear()
        before = len(session.turns)
        _, done = consume(session.send(question, params=params(n)))
        assert done.stats.dropped_turns == expected > 0, n
        assert before - expected + 1 == len(session.turns) - 1  # (the question and its answer after the kept)
        assert len(renders) <= 8 and max(renders) <= 60, (n, renders)  # never the whole history (121+)
        history = history + [Turn("user", question), Turn("assistant", session.turns[-1].text)]


def test_a_branch_that_fits_whole_keeps_the_long_branchs_fit_for_when_it_comes_back(parts, monkeypatch):
    """Trial 75 N4: a send on a short branch (nothing dropped) forgot where the long branch's fit began:
    back on the long branch, the whole history was bisected again."""
    from engine.chat import Turn

    session = new_session(parts, max_tokens=200)
    long_branch = []
    for i in range(60):
        long_branch += [Turn("user", f"Fact {i}: the number is {i * 7}."), Turn("assistant", "Noted.")]
    session.turns[:] = list(long_branch)
    _, first = consume(session.send("What was the first fact?", params=params(8)))
    long_branch += [Turn("user", "What was the first fact?"), Turn("assistant", session.turns[-1].text)]
    session.turns[:] = [Turn("user", "Hi"), Turn("assistant", "Hello.")]  # another version of the first message
    _, short = consume(session.send("And now?", params=params(8)))
    assert short.stats.dropped_turns == 0
    renders = []
    real = type(session)._prompt
    monkeypatch.setattr(type(session), "_prompt", lambda self, *a, **k: renders.append(len(self.turns)) or real(self, *a, **k))
    session.turns[:] = [Turn(t.role, t.text) for t in long_branch]
    session.turns.append(Turn("user", "And the second?"))
    expected = _linear_fit(session, room=8)
    session.turns.pop()
    renders.clear()
    _, done = consume(session.send("And the second?", params=params(8)))
    assert done.stats.dropped_turns == expected > 0 and max(renders) <= 60, renders


@pytest.mark.parametrize("ids_of", ["Noted, and noted again.", "Noted, and noted again, and once more: noted.", "No."])
def test_answers_that_kept_their_ids_are_fitted_without_replaying_every_candidate(parts, monkeypatch, ids_of):
    """Trial 75 N4: replaying an answer's generated ids encodes the conversation before it again where
    the cut differs from its own; the search replayed every prompt it tried, per answer, and a fit from
    scratch of 1,000 exchanges whose answers kept their ids took 68 s (0.4 s now). The search reads the
    answers' text; the prompts next to the one found are replayed: what is dropped is what one exchange
    at a time of replayed prompts drops, with ids as long as their text, longer or shorter (ids taken
    as the text's here: what they spell is not under test)."""
    from engine.chat import Turn

    session = new_session(parts, max_tokens=200)
    monkeypatch.setattr(type(session), "_ids_spell", lambda self, turn: True)
    ids = session.tokenizer.encode(" " + ids_of)
    for i in range(60):
        session.turns += [Turn("user", f"Fact {i}: the number is {i * 7}."),
                          Turn("assistant", "Noted, and noted again.", token_ids=list(ids))]
    session.turns.append(Turn("user", "What was the first fact?"))
    expected = _linear_fit(session, room=8)
    replays = []
    real = type(session)._replay_answers
    monkeypatch.setattr(type(session), "_replay_answers",
                        lambda self, *a, **k: replays.append(len(self.turns)) or real(self, *a, **k))
    session.turns.pop()
    _, done = consume(session.send("What was the first fact?", params=params(8)))
    assert done.stats.dropped_turns == expected > 0
    assert len(replays) <= 4 and max(replays) <= 60, replays  # the whole history (121 turns) is never replayed


def test_an_answer_whose_ids_spell_another_text_is_read_as_its_text(parts):
    """Trial 75 N3: an exported answer edited by hand kept its generated ids, and the model read (and
    Continue went on from) the words the user had replaced. Ids that spell the text are replayed: a
    character at a time here, more ids than the text re-tokenized, so the two prompts differ."""
    from engine.chat import Turn

    session = new_session(parts)
    question, text = Turn("user", "Name a colour."), "Blue, like the sky."
    spelled = [i for ch in " " + text for i in session.tokenizer.encode(ch)]
    as_text = session.prompt_ids([question, Turn("assistant", text)], None)
    replayed = session.prompt_ids([question, Turn("assistant", text, token_ids=spelled)], None)
    assert replayed != as_text and any(replayed[i:i + len(spelled)] == spelled for i in range(len(replayed)))
    edited = Turn("assistant", "Red, like a rose.", token_ids=spelled)
    assert session.prompt_ids([question, edited], None) == session.prompt_ids([question, Turn("assistant", edited.text)], None)
    cut = Turn("assistant", "Blue, like", token_ids=spelled)  # the end of the text deleted
    assert session.prompt_ids([question, cut], None) == session.prompt_ids([question, Turn("assistant", cut.text)], None)


@pytest.mark.parametrize("continuing", [False, True])
def test_answers_placed_by_their_chunk_are_replayed_as_by_encoding_each_prefix(parts, images_dir, continuing):
    """Trial 75 N4: each answer's place in the prompt came from encoding the whole conversation before
    it (1.5 s of a follow-up's fit at an 8,192-token context); past the first answer it comes from
    where the encoding put its chunk. The ids are those of encoding every prefix, photos, a system
    prompt and an answer left open for Continue included; ids one character at a time make every
    swap show."""
    from engine.chat import Turn

    session = new_session(parts)
    tok = session.tokenizer
    photo = session.image_grids([images_dir / "coffee.png"], "fast")

    def answer(text):
        return Turn("assistant", text, token_ids=[i for ch in " " + text for i in tok.encode(ch)])
    turns = [Turn("user", "What is this?", photo), answer("A cup of coffee."), Turn("user", "Hot?"),
             answer("Steaming, yes."), Turn("user", "123 and 日本語"), answer("\n- a list\n- of two")]
    if not continuing:
        turns.append(Turn("user", "Thanks."))
    messages = session._messages(turns, "Be brief.")
    encoded = session._encode(messages, turns, continuing)
    encodes = []
    real = session._encode
    session._encode = lambda *a: encodes.append(len(a[0])) or real(*a)
    by_chunks = session._replay_answers(list(encoded.input_ids), messages, turns, encoded.message_chunks)
    assert encodes == [2]  # the system prompt and the first question: the first answer's prefix alone
    by_prefixes = session._replay_answers(list(encoded.input_ids), messages, turns)
    assert encodes == [2, 2, 4, 6]
    assert by_chunks == by_prefixes != encoded.input_ids
    for t in turns[1::2]:
        assert any(by_chunks[i:i + len(t.token_ids)] == t.token_ids for i in range(len(by_chunks)))


def test_an_answer_whose_ids_are_longer_than_its_text_is_fitted_to_the_last_start(parts):
    """Found in review: where the plain search's pick did not fit replayed and the steps reached the last
    start, that prompt had never been replayed, and every send in the chat raised KeyError. Here the
    answer's ids (a character each) are about twice its text's tokens: the question alone is kept."""
    from engine.chat import Turn

    session = new_session(parts, "contiguous", max_tokens=60)
    text = "Blue, like the sky on a clear summer day."
    spelled = [i for ch in " " + text for i in session.tokenizer.encode(ch)]
    session.turns[:] = [Turn("user", "Name a colour."), Turn("assistant", text, token_ids=spelled)]
    _, done = consume(session.send("Why?", params=params(10)))
    assert done.stats.dropped_turns == 2 and [t.text for t in session.turns[:1]] == ["Why?"]


def test_an_answer_that_went_past_its_end_of_utterance_is_replayed(parts):
    """Found in review: an answer made with ignore_eos keeps its end-of-utterance ids, which its text
    (as streamed) leaves out: its ids still spell the text."""
    from engine.chat import Turn

    session = new_session(parts)
    tok, [eos] = session.tokenizer, session.model.metadata.eos_token_ids[:1]
    ids = tok.encode(" Blue.") + [eos] + tok.encode(" Red.")
    assert session._ids_spell(Turn("assistant", "Blue. Red.", token_ids=ids))
    assert not session._ids_spell(Turn("assistant", "Blue. Green.", token_ids=ids))


def test_an_answer_of_text_and_no_ids_is_read_as_its_text(parts):
    """Trial 75 N2: an answer stored with no ids but a text (an export's "token_ids": "") was replayed as
    no tokens at all: its text was missing from the prompt, and Continue wrote the whole answer again."""
    from engine.chat import Turn

    session = new_session(parts)
    turns = [Turn("user", "Name a colour."), Turn("assistant", "Blue, like the sky.")]
    assert session.prompt_ids(turns, None) == session.prompt_ids(
        [turns[0], Turn("assistant", "Blue, like the sky.", token_ids=())], None)


def test_without_dropping_turns_a_history_too_long_is_refused_whole(parts):
    """``drop_old_turns=False`` (the HTTP API): every turn kept; a prompt beyond the context is
    refused with the turns unchanged, one that leaves less room than asked is answered in it."""
    from engine.chat import Turn

    session = new_session(parts, max_tokens=200)
    for i in range(30):
        session.turns += [Turn("user", f"Fact {i}: the number is {i * 7}."), Turn("assistant", "Noted.")]
    before = list(session.turns)
    with pytest.raises(PromptTooLongError, match="context holds 200$"):
        session.send("What was the first fact?", params=params(8, drop_old_turns=False))
    assert session.turns == before
    session.turns[:] = before[-4:]  # a prompt of ~60 tokens: room for 140 more
    tokens, done = consume(session.send("And?", params=params(190, drop_old_turns=False)))
    assert done.stats.dropped_turns == 0 and done.finish_reason == "length"
    assert done.stats.prompt_tokens + len(tokens) == 200


def test_one_dropped_message_is_named_in_the_singular(parts):
    """A question left unanswered (its answer never started) then another: dropping the first is one
    message, and the notice says so ("the oldest message was dropped", not "the 1 oldest messages")."""
    session = new_session(parts, max_tokens=200)
    session.turns[:] = [Turn("user", "word " * 180), Turn("user", "Second question?"), Turn("assistant", "Yes.")]
    _, done = consume(session.send("Third?", params=params(8)))
    assert done.stats.dropped_turns == 1
    assert done.stats.notice == "The conversation no longer fits the 200-token context: the oldest message was dropped."


def test_the_drop_notice_comes_with_the_answers_first_progress_event(parts):
    """A front end says the notice while the prompt is read (trial: the banner came only after the
    answer): the first progress event carries it, the later ones and the next answer's do not."""
    session = new_session(parts, max_tokens=200)
    events = []
    session.progress = events.append
    session.turns[:] = [Turn("user", "word " * 180), Turn("user", "Second question?"), Turn("assistant", "Yes.")]
    _, done = consume(session.send("Third?", params=params(8)))
    assert done.stats.notice.startswith("The conversation no longer fits the 200-token context")
    assert events and events[0].notice == done.stats.notice
    assert all(e.notice == "" for e in events[1:])
    events.clear()
    _, again = consume(session.send("Fourth?", params=params(8)))
    assert again.stats.notice == "" and events and all(e.notice == "" for e in events)
