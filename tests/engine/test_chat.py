"""ChatSession end to end (image files -> tiles -> prompt -> vision -> prefill -> streamed decode)
against transformers' processor + Idefics3 generate on the same random tiny checkpoint."""

from __future__ import annotations

import random
import re

import pytest
import torch
from PIL import Image

from engine.api.errors import ImageError, PromptTooLongError
from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession, Turn

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    model = transformers.Idefics3ForConditionalGeneration.from_pretrained(
        tiny_checkpoint, dtype=torch.float32, attn_implementation="eager").eval()
    processor = transformers.AutoProcessor.from_pretrained(tiny_checkpoint, backend="pil")
    return model, processor


@pytest.fixture
def session(tiny_checkpoint):
    return ChatSession.load(str(tiny_checkpoint), device="cpu")


def reference_greedy(reference, messages, images, n):
    model, processor = reference
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=prompt, images=images or None, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return inputs["input_ids"][0].tolist(), out[0, inputs["input_ids"].shape[1]:].tolist()


def run(session, text, images=(), n=24, text_parts=None, **kw):
    more = {} if text_parts is None else {"text_parts": text_parts}
    events = list(session.send(text, images=images, params=GenerationParams(max_new_tokens=n, ignore_eos=True, **kw),
                               **more))
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    return [e.token_id for e in events if isinstance(e, TokenEvent) and e.token_id >= 0], done, events


def user(text, n_images=0):
    return [{"role": "user", "content": [{"type": "image"}] * n_images + [{"type": "text", "text": text}]}]


def test_one_photo_greedy_24_tokens_identical(session, reference, images_dir):
    path = images_dir / "chelsea.png"
    ref_ids, ref_tokens = reference_greedy(reference, user("What is in this image?", 1),
                                           [Image.open(path).convert("RGB")], 24)
    tokens, done, _ = run(session, "What is in this image?", [path])
    assert tokens == ref_tokens
    assert done.finish_reason == "length"
    assert done.stats.prompt_tokens == len(ref_ids) == 876  # 13 tiles x 64 + text (reference §3 grid)
    assert done.stats.image_tokens == 832 and done.stats.generated_tokens == 24


def test_text_between_two_images_is_the_references_prompt_and_answer(session, reference, images_dir, tmp_path):
    """An OpenAI-style content list that puts text before, between and after its images: the prompt's
    ids are transformers' (its chat template renders the parts in order) and so is the greedy answer."""
    small = tmp_path / "small.png"
    Image.new("RGB", (20, 12), (30, 90, 200)).save(small)
    paths = [images_dir / "rocket.jpg", small]
    parts = ("Image A:", "\nImage B:", "\nWhich one is blue?")
    messages = [{"role": "user", "content": [
        {"type": "text", "text": parts[0]}, {"type": "image"}, {"type": "text", "text": parts[1]}, {"type": "image"},
        {"type": "text", "text": parts[2]}]}]
    ref_ids, ref_tokens = reference_greedy(reference, messages, [Image.open(p).convert("RGB") for p in paths], 12)
    tokens, done, _ = run(session, "".join(parts), paths, n=12, text_parts=parts)
    assert session._plain_prompt == ref_ids
    assert tokens == ref_tokens
    # Without text_parts the images come first: another prompt (the control for the assertion above).
    assert session.turns[0].content()[0] == {"type": "text", "text": "Image A:"}
    session.reset()
    run(session, "".join(parts), paths, n=1)
    assert session._plain_prompt != ref_ids and session._plain_prompt[3] == reference[1].tokenizer.convert_tokens_to_ids(
        "<fake_token_around_image>")
    with pytest.raises(ValueError, match="text_parts holds 2 pieces of text for 2 videos and images"):
        session.send("x", images=paths, text_parts=("a", "b"))


def test_two_images_of_different_sizes_and_streamed_text(session, reference, images_dir, tmp_path):
    tall = tmp_path / "tall.png"
    Image.new("RGB", (9, 13), (200, 30, 30)).save(tall)
    paths = [images_dir / "rocket.jpg", tall]
    ref_ids, ref_tokens = reference_greedy(reference, user("Compare them.", 2),
                                           [Image.open(p).convert("RGB") for p in paths], 24)
    tokens, done, events = run(session, "Compare them.", paths)
    assert tokens == ref_tokens
    assert done.stats.prompt_tokens == len(ref_ids)
    text = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert text == session.tokenizer.decode(tokens)


def test_second_turn_reuses_cache_and_equals_a_fresh_run(session, tiny_checkpoint, images_dir):
    first, done1, _ = run(session, "Describe.", [images_dir / "coffee.png"], n=6)
    second, done2, _ = run(session, "Shorter please.", n=8)
    # What the cache held after turn 1: its prompt plus the answer tokens fed back (the last one is not).
    assert done2.stats.cached_tokens >= done1.stats.prompt_tokens
    fresh = ChatSession.load(str(tiny_checkpoint), device="cpu")
    fresh.turns = [t for t in session.turns[:2]]
    fresh_tokens, fresh_done, _ = run(fresh, "Shorter please.", n=8)
    assert fresh_done.stats.cached_tokens == 0
    assert fresh_tokens == second


def test_user_text_with_special_strings_does_not_create_image_slots(session):
    tokens, done, _ = run(session, "Here is <image> and <end_of_utterance> typed by hand", n=2)
    assert done.finish_reason == "length" and done.stats.image_tokens == 0


def test_cancel_stops_between_tokens(session):
    gen = session.send("Tell me a story.", params=GenerationParams(max_new_tokens=50, ignore_eos=True))
    events = [next(gen), next(gen)]
    session.cancel()
    events += list(gen)
    assert events[-1].finish_reason == "cancelled"
    assert events[-1].stats.generated_tokens == 2  # checked right after the token already yielded


def test_bad_image_and_too_long_prompt_leave_conversation_unchanged(tiny_checkpoint, tmp_path, images_dir):
    session = ChatSession.load(str(tiny_checkpoint), device="cpu",
                               cache_config=CacheConfig(kind="contiguous", max_tokens=64))
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    with pytest.raises(ImageError):
        session.send("What is this?", images=[bad])
    with pytest.raises(PromptTooLongError, match="^the prompt has 1[0-9]{3} tokens but the context holds 64$"):
        session.send("word " * 1000)
    assert session.turns == []
    # With media, the message says how much of the prompt they take (front ends then suggest fewer):
    # the photo at "fast" is one tile of 64 image tokens, and the tokens around it.
    fast = GenerationParams(image_detail="fast")
    with pytest.raises(PromptTooLongError) as info:
        session.send("What is this?", images=[images_dir / "chelsea.png"], params=fast)
    match = re.fullmatch(r"the prompt has (\d+) tokens \((\d+) of them for images\) but the context holds 64",
                         str(info.value))
    text_alone = len(session.prompt_ids([Turn("user", "What is this?")], None))
    assert match and int(match[1]) - int(match[2]) == text_alone and int(match[2]) > 64, str(info.value)
    # ... and nothing of them where the text alone is too long: fewer images would not help.
    with pytest.raises(PromptTooLongError, match="^the prompt has 1[0-9]{2} tokens but the context holds 64$"):
        session.send("word " * 100, images=[images_dir / "chelsea.png"], params=fast)
    assert session.turns == []
    tokens, done, _ = run(session, "Hi", n=3)
    assert done.finish_reason == "length" and len(tokens) == 3


def test_stops_on_end_of_utterance(session, monkeypatch):
    eos = session.model.metadata.eos_token_ids[0]
    original = session.model.decode

    def decode_then_eos(x, cache):
        logits = original(x, cache).clone()
        logits[:, eos] = 1e4
        return logits

    monkeypatch.setattr(session.model, "decode", decode_then_eos)
    events = list(session.send("Hi", params=GenerationParams(max_new_tokens=10)))
    assert events[-1].finish_reason == "stop"
    assert events[-1].stats.generated_tokens == 1
    assert all(e.token_id != eos for e in events[:-1])


def test_count_image_tokens_matches_what_send_uses(session, images_dir):
    photo = images_dir / "chelsea.png"
    assert session.count_image_tokens(photo) == 832  # 13 tiles x 64, as in the parity test above
    assert session.count_image_tokens(photo, "fast") == 64
    assert session.count_image_tokens(photo, "balanced") == session.preprocess([photo], "balanced")[0].num_image_tokens


def test_image_grids_make_the_prompt_tiled_images_make_and_prompt_ids_changes_nothing(session, images_dir):
    """/tokenize builds prompts from images' grids (their headers) off the engine thread: the same ids
    as the tiled images, and the session's conversation untouched while it does."""
    from engine.chat import Turn

    photos = [images_dir / name for name in ("chelsea.png", "rocket.jpg", "logo.png")]
    for detail in ("full", "balanced", "fast"):
        grids, tiled = session.image_grids(photos, detail), session.preprocess(photos, detail)
        assert [(g.rows, g.cols, g.num_image_tokens, g.prompt) for g in grids] == \
            [(t.rows, t.cols, t.num_image_tokens, t.prompt) for t in tiled]
    assert [g.num_image_tokens for g in session.image_grids(photos[:1])] == [832]  # 13 tiles x 64

    run(session, "Hello", n=3)
    before = (list(session.turns), session.system_prompt, session._plain_prompt)
    asked = [Turn("user", "Hi"), Turn("assistant", "Hello there", token_ids=[1, 2]),
             Turn("user", "What is this?", session.image_grids(photos[:1]))]
    ids = session.prompt_ids(asked, "Be brief.")
    tiled = [*asked[:2], Turn("user", "What is this?", session.preprocess(photos[:1]))]
    assert ids == session.prompt_ids(tiled, "Be brief.") and ids.count(session._image_id) == 832
    assert (list(session.turns), session.system_prompt, session._plain_prompt) == before


def test_without_a_processor_text_works_and_images_are_refused_before_any_work(session, images_dir):
    """``processor=None`` (a text-only model): text chats as before; images raise UnsupportedOperation
    before anything runs, leaving the conversation and cache as they were."""
    from engine.api.errors import EngineError, UnsupportedOperation

    plain = ChatSession(session.model, session.tokenizer, None)
    tokens, done, _ = run(plain, "Hello there", n=4)
    assert done.finish_reason == "length" and len(tokens) == 4
    before, cached = list(plain.turns), plain.cache.seq_len
    with pytest.raises(UnsupportedOperation, match="text-only model: it takes no images") as err:
        plain.send("What is this?", images=[images_dir / "coffee.png"])
    assert isinstance(err.value, EngineError)
    assert plain.turns == before and plain.cache.seq_len == cached
    with pytest.raises(UnsupportedOperation):
        plain.count_image_tokens(images_dir / "coffee.png")
    tokens, done, _ = run(plain, "And now?", n=3)
    assert done.stats.cached_tokens > 0


def test_done_event_carries_the_answer_ids_and_damaged_stored_ids_fall_back_to_the_text(session):
    """Issue 18: the DoneEvent names the ids the answer was generated as (what the app stores); ids a
    model cannot have generated (out of its vocabulary: a damaged row) are not replayed, the text is."""
    from engine.chat import Turn

    ids, done, _ = run(session, "Hello", n=6)
    assert list(done.token_ids) == ids == session.turns[-1].token_ids
    text = session.turns[-1].text
    as_text = [Turn("user", "Hello"), Turn("assistant", text)]
    session.turns[:] = as_text
    expected = session._prompt()[0]
    session.turns[:] = [Turn("user", "Hello"), Turn("assistant", text, token_ids=[99_999_999, -3])]
    assert session._prompt()[0] == expected  # before: the ids went into the prompt (IndexError in the embedding)
    _, done, _ = run(session, "Again", n=4)
    assert done.finish_reason == "length" and done.error is None


def test_a_continued_answer_is_the_uncut_answer_token_for_token(session, tiny_checkpoint):
    """An answer cut at 6 tokens and continued for 6 more is the greedy 12-token answer: the cut
    answer's ids are replayed (its open turn has no special token after it; before, its text was
    tokenized again, other ids for a random model, and the continuation went elsewhere), and the
    continued turn keeps them with the continuation's after them, also across a new session."""
    params = GenerationParams(max_new_tokens=12, ignore_eos=True)
    whole = list(session.send("Tell me about cats", params=params))[-1].token_ids
    session.reset()
    cut = list(session.send("Tell me about cats", params=GenerationParams(max_new_tokens=6, ignore_eos=True)))
    more = list(session.continue_answer(GenerationParams(max_new_tokens=6, ignore_eos=True)))
    assert [*cut[-1].token_ids, *more[-1].token_ids] == list(whole) and len(whole) == 12
    assert session.turns[-1].token_ids == list(whole)
    # From a stored history (the app after a restart): the same continuation.
    fresh = ChatSession.load(str(tiny_checkpoint), device="cpu")
    fresh.turns[:] = [Turn("user", "Tell me about cats"),
                      Turn("assistant", session.tokenizer.decode(list(cut[-1].token_ids)).lstrip(),
                           token_ids=list(cut[-1].token_ids))]
    again = list(fresh.continue_answer(GenerationParams(max_new_tokens=6, ignore_eos=True)))
    assert list(again[-1].token_ids) == list(more[-1].token_ids)


def test_an_answer_cut_inside_a_character_and_continued_has_the_whole_character(session, monkeypatch):
    """Trial 60: an answer cut by its token limit inside an emoji ended in U+FFFD, and its continuation
    began with U+FFFD for each of the emoji's remaining bytes: "🌍���🌍" in the app's stored answer
    while the ids were right. The cut answer now leaves the unfinished character out of its text, and
    the continuation's first text is the whole character: the streamed parts join to the ids' text."""
    import engine.chat as chat_module

    script = session.tokenizer.encode("Hola 🌍🌍 adiós")
    cut = next(k for k in range(1, len(script)) if session.tokenizer.decode(script[:k]).endswith("\ufffd"))

    emit: list[int] = []

    def scripted(model, cache, sampler, history, logits, max_tokens, *args, **kwargs):
        for token in emit[:max_tokens]:  # the model's tokens, as if it had chosen these
            history.append(token)
            yield token
    monkeypatch.setattr(chat_module, "token_stream", scripted)

    emit[:] = script[:cut]
    first = list(session.send("Say hello", params=GenerationParams(max_new_tokens=cut, ignore_eos=True)))
    first_text = "".join(e.text for e in first if isinstance(e, TokenEvent))
    assert first[-1].finish_reason == "length" and list(first[-1].token_ids) == script[:cut]
    assert "\ufffd" not in first_text and session.turns[-1].text == first_text.lstrip()
    emit[:] = script[cut:]
    more = list(session.continue_answer(GenerationParams(max_new_tokens=len(script) - cut, ignore_eos=True)))
    more_text = "".join(e.text for e in more if isinstance(e, TokenEvent))
    assert list(more[-1].token_ids) == script[cut:]
    assert first_text + more_text == session.tokenizer.decode(script) == "Hola 🌍🌍 adiós"
    assert session.turns[-1].text == "Hola 🌍🌍 adiós" and session.turns[-1].token_ids == script


def test_text_far_beyond_the_context_is_refused_before_it_is_encoded(tiny_checkpoint, monkeypatch):
    """Trial 39: an 18 MB message held the engine thread 12-22 s (template and encoding) before its
    refusal, and every other client waited behind it. Far beyond the context, nothing is encoded."""
    session = ChatSession.load(str(tiny_checkpoint), device="cpu", cache_config=CacheConfig(max_tokens=256))
    text = "hello " * 20_000
    least = session.tokenizer.least_tokens(len(text))
    assert least == 120_000 // (2 * session.tokenizer.max_token_chars) > 256

    def no_encoding(*args, **kwargs):
        raise AssertionError("encoded")

    with monkeypatch.context() as patch:
        patch.setattr(session.tokenizer, "encode_chat", no_encoding)
        patch.setattr(session.tokenizer, "encode", no_encoding)
        with pytest.raises(PromptTooLongError, match=f"^the prompt has at least {least} tokens but the context "
                                                     "holds 256$"):
            session.send(text)
        # What cannot be dropped counts: the system prompt with the last message.
        session.system_prompt = text
        with pytest.raises(PromptTooLongError, match="at least"):
            session.send("Hi")
    session.system_prompt = None
    assert session.turns == []
    assert len(session.tokenizer.encode(text)) >= least  # a lower bound: nothing that fits is refused
    tokens, done, _ = run(session, "Hi", n=3)  # the session goes on
    assert done.finish_reason == "length" and len(tokens) == 3


def test_a_system_prompt_too_long_for_the_context_is_named_as_the_cause(tiny_checkpoint):
    """Issue 18: a huge system prompt (a stored setting) fails every answer: the error says it is the cause."""
    session = ChatSession.load(str(tiny_checkpoint), device="cpu", cache_config=CacheConfig(max_tokens=256),
                               system_prompt="word " * 400)
    with pytest.raises(PromptTooLongError, match=r"^the prompt has 414 tokens but the context holds 256; the system "
                       r"prompt alone has 401 tokens: shorten it in Settings$"):
        run(session, "Hi", n=2)


def test_engine_counts_auto_as_balanced_on_the_cpu(tiny_checkpoint, shared_dir):
    from engine.chat import ChatSession

    session = ChatSession.load(str(tiny_checkpoint), device="cpu")
    photo = shared_dir / "images" / "astronaut.png"
    balanced = session.count_image_tokens(photo, "balanced")
    assert session.count_image_tokens(photo, "auto") == balanced != session.count_image_tokens(photo, "full")
    assert [p.num_tiles for p in session.preprocess([photo], "auto")] == \
        [p.num_tiles for p in session.preprocess([photo], "balanced")]


def test_a_kept_prompt_encoding_gives_the_same_prompt_and_a_stale_one_is_not_used(session, images_dir, monkeypatch):
    """An answer keeps the plain encoding of the conversation it answered (Turn.prompt_ids), so the
    next prompt encodes the conversation once instead of twice. The prompt is the same as with the
    encoding redone; after a system prompt change the kept ones no longer match and are redone."""
    run(session, "Describe.", [images_dir / "coffee.png"], n=6)
    run(session, "Shorter please.", n=4)
    answers = [t for t in session.turns if t.role == "assistant"]
    assert len(answers) == 2 and all(t.prompt_ids for t in answers)
    session.turns.append(type(answers[0])("user", "And the colours?"))
    encodes = []
    real = session._encode
    monkeypatch.setattr(session, "_encode", lambda *a: encodes.append(1) or real(*a))
    kept = session._prompt()[0]
    assert len(encodes) == 1  # the whole conversation, once
    saved = [t.prompt_ids for t in answers]
    for t in answers:
        t.prompt_ids = None
    encodes.clear()
    redone = session._prompt()[0]
    # The conversation, and the first answer's prefix: the second answer's place is then known from
    # the first's generation prompt (EncodedPrompt.message_chunks), with no encoding (trial 75 N4).
    assert len(encodes) == 2 and redone == kept
    # Generated ids replayed: the first answer's ids sit in the prompt as generated.
    start = len(saved[0])
    assert redone[start:start + len(answers[0].token_ids)] == answers[0].token_ids
    for t, ids in zip(answers, saved):
        t.prompt_ids = ids
    session.system_prompt = "Be brief."
    encodes.clear()
    with_stale = session._prompt()[0]
    assert len(encodes) == 2  # the first kept encoding was checked, found stale, and redone
    for t in answers:
        t.prompt_ids = None
    assert with_stale == session._prompt()[0]


def test_a_short_prefill_reports_its_progress_once_its_step_is_launched(session, monkeypatch):
    """A follow-up's few tokens (one graph step on CUDA): the first progress event, when a server
    sends its headers, comes after the model's prefill call; a long prefill reports before each chunk.
    Both answer the same tokens."""
    order = []
    session.progress = lambda event: order.append(("progress", event.done, event.total))
    prefill = session.model.prefill
    monkeypatch.setattr(session.model, "prefill", lambda *a, **k: order.append(("prefill",)) or prefill(*a, **k))
    long_tokens, _, _ = run(session, "Tell me about the sea.", n=4)
    total = order[0][2]
    assert order == [("progress", 0, total), ("prefill",), ("progress", total, total)]
    order.clear()
    monkeypatch.setattr(session, "_short_prefill", lambda tokens: True)
    session.reset()
    short_tokens, _, _ = run(session, "Tell me about the sea.", n=4)
    assert order == [("prefill",), ("progress", total, total)]
    assert short_tokens == long_tokens


def test_a_cache_cut_inside_a_tile_backs_off_to_that_tile_and_skips_the_earlier_ones(session, tiny_checkpoint,
                                                                                     images_dir, monkeypatch):
    """When the cached prefix ends inside a tile's run of image tokens, the prefill starts at that
    tile's first token: the earlier tiles stay cached (the vision tower reads only the rest) and the
    answer equals a fresh session's."""
    photo = images_dir / "coffee.png"
    _, done, _ = run(session, "What is it?", [photo], n=3)
    prompt = session._prompt()  # the conversation so far plus a generation prompt: the photo's positions
    tile = 64
    third = prompt.image_positions[2 * tile]  # the third tile's first token
    session.cache.truncate(third + 10)
    session._keep_keys(third + 10)
    session.cache.prefix.clear()  # else the arena's prefix cache gives the blocks back whole
    read = []
    encode = session.model.encode_images
    monkeypatch.setattr(session.model, "encode_images", lambda tiles, *a: read.append(len(tiles)) or encode(tiles, *a))
    tokens, again, _ = run(session, "And its colour?", n=4)
    assert again.stats.cached_tokens == third
    assert read == [done.stats.image_tokens // tile - 2]  # every tile from the third on
    fresh = ChatSession.load(str(tiny_checkpoint), device="cpu")
    fresh.turns = list(session.turns[:2])
    assert run(fresh, "And its colour?", n=4)[0] == tokens


def test_slot_keys_and_common_prefix_equal_a_walk_position_by_position():
    """The slice-based keys, image positions and common prefix equal the plain per-position walk,
    for tile runs together and split by text; too few image tokens for the slots is named."""
    from types import SimpleNamespace

    from engine.chat import common_prefix, slot_keys

    img = 7
    a = SimpleNamespace(num_image_tokens=6, num_tiles=2, tile_digests=[b"a0", b"a1"])
    b = SimpleNamespace(num_image_tokens=2, num_tiles=1, tile_digests=[b"b0"])
    ids = [1, img, img, img, img, img, img, 2, img, 3, img, 4]  # a's tiles together, b's one split by text
    slots = iter([(img, b"a0")] * 3 + [(img, b"a1")] * 3 + [(img, b"b0")] * 2)
    keys, positions = slot_keys(ids, img, [a, b])
    assert keys == [next(slots) if t == img else t for t in ids]
    assert positions == [i for i, t in enumerate(ids) if t == img]
    assert slot_keys(ids, None, [a, b]) == (ids, [])
    with pytest.raises(ValueError, match="7 image tokens but its images have 8 feature slots"):
        slot_keys(ids[:-3], img, [a, b])

    rng = random.Random(0)
    for _ in range(300):
        x = [rng.randrange(3) for _ in range(rng.randrange(200))]
        y = x[:rng.randrange(len(x) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(100))]
        limit = rng.randrange(min(len(x), len(y)) + 1)
        walk = 0
        while walk < limit and x[walk] == y[walk]:
            walk += 1
        assert common_prefix(x, y, limit) == walk
