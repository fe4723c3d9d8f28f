"""Automatic prefix caching across conversations (engine.cache.prefix): a session switched to another
chat and back, or an API client re-sending its conversation, adopts the blocks it computed earlier,
images included, and gives the same tokens as a from-scratch run. Budget and eviction hold."""

from __future__ import annotations

import pytest

from engine.cache import CacheConfig, PagedKVCache
from engine.cache.block_allocator import BlockAllocator
from engine.cache.prefix import PrefixBlockCache, chain_digests
from engine.chat import ChatSession
from tests.engine.test_chat_cache import consume, from_scratch, params


@pytest.fixture(scope="module")
def parts(tiny_checkpoint):
    s = ChatSession.load(str(tiny_checkpoint), device="cpu")
    return s.model, s.tokenizer, s.processor


def session(parts, **config) -> ChatSession:
    return ChatSession(*parts, cache_config=CacheConfig(**config))


def test_chain_digests_cover_every_earlier_token_and_the_tile_contents():
    a = chain_digests(list(range(40)), 16)
    assert len(a) == 2  # the 8 trailing tokens are not a full block
    b = chain_digests([99] + list(range(1, 40)), 16)
    assert a[0] != b[0] and a[1] != b[1]  # a different first token changes every later digest
    assert chain_digests(list(range(16, 32)), 16, a[0]) == [a[1]]  # resumable from a parent
    tiles = [(7, b"tile-A")] * 16, [(7, b"tile-B")] * 16
    assert chain_digests(tiles[0], 16) != chain_digests(tiles[1], 16)


def test_switching_back_to_a_photo_conversation_skips_its_prefill_and_matches_from_scratch(parts, images_dir):
    s = session(parts)
    photo = [images_dir / "coffee.png"]
    _, first = consume(s.send("What is in this image?", photo, params()))
    a_turns = list(s.turns)
    assert first.stats.cached_tokens == 0 and first.stats.image_tokens == 64
    # Another conversation (another photo) replaces A in the session's own cache...
    s.turns = []
    _, other = consume(s.send("Describe this one.", [images_dir / "rocket.jpg"], params()))
    assert other.stats.cached_tokens < 16  # only the shared template start, at most
    # ...and going back to A finds A's blocks in the arena: its image is not prefilled again.
    s.turns = list(a_turns)
    tokens, back = consume(s.send("Tell me more.", (), params()))
    bs = s.cache.block_size
    assert back.stats.cached_tokens == (first.stats.prompt_tokens + 6 - 1) // bs * bs
    assert back.stats.cached_tokens > first.stats.prompt_tokens - bs
    expected, _ = from_scratch(parts, a_turns, "Tell me more.")
    assert tokens == expected


def test_prefix_caching_off_prefills_the_other_conversation_again(parts, images_dir):
    s = session(parts, prefix_cache_tokens=0)
    consume(s.send("What is in this image?", [images_dir / "coffee.png"], params()))
    a_turns = list(s.turns)
    s.turns = []
    consume(s.send("Describe this one.", [images_dir / "rocket.jpg"], params()))
    s.turns = a_turns
    _, back = consume(s.send("Tell me more.", (), params()))
    assert back.stats.cached_tokens < 16


def test_the_cache_stays_within_its_budget_and_gives_blocks_back(parts):
    s = session(parts, prefix_cache_tokens=64, max_tokens=512)
    cache = s.cache
    assert isinstance(cache, PagedKVCache) and cache.prefix.max_blocks == 4
    for i in range(5):
        s.turns = []
        consume(s.send(f"Conversation {i}: " + "word " * 60, (), params()))
        assert len(cache.prefix) <= 4
    s.reset()
    cache.prefix.clear()
    assert cache.allocator.num_free == cache.allocator.num_blocks  # nothing leaked


def test_a_full_arena_evicts_cached_blocks_least_recently_used_tail_first():
    alloc = BlockAllocator(6)
    pool = PrefixBlockCache(alloc, max_blocks=6)
    blocks = [alloc.allocate() for _ in range(3)]
    digests = chain_digests(list(range(48)), 16)
    pool.insert(digests, blocks)
    for b in blocks:
        alloc.decref(b)  # the sequence let go: only the prefix cache holds them
    assert alloc.num_free == 3
    assert pool.evict(4) == 1 and alloc.num_free == 4
    assert pool.match(digests) == blocks[:2]  # the tail block went first; the prefix is still usable


def test_adopted_blocks_are_copied_before_a_write_into_them(parts):
    s = session(parts)
    text = "A question long enough to fill a few blocks of sixteen tokens each, at least."
    consume(s.send(text, (), params()))
    first_turns = list(s.turns)
    s.turns = []
    consume(s.send("Something else entirely.", (), params()))
    s.turns = list(first_turns)
    _, back = consume(s.send("Next.", (), params()))
    assert back.stats.cached_tokens >= 16  # adopted from the prefix cache
    # A prompt that diverges inside an adopted block: writing there must not touch the cached original.
    s.turns = []
    _, diverged = consume(s.send(text[:30] + " but different", (), params()))
    assert 0 < diverged.stats.cached_tokens % s.cache.block_size
    s.turns = list(first_turns)
    tokens, done = consume(s.send("Next.", (), params()))
    expected, _ = from_scratch(parts, first_turns, "Next.")
    assert tokens == expected and done.stats.cached_tokens >= back.stats.cached_tokens


def test_the_same_photo_is_tiled_once_whatever_its_file_name(parts, images_dir, tmp_path):
    s = session(parts)
    data = (images_dir / "coffee.png").read_bytes()
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.write_bytes(data)
    b.write_bytes(data)
    first = s.preprocess([a], "balanced")[0]
    assert s.preprocess([b], "balanced")[0] is first  # the server stores each request's copy anew
    assert s.preprocess([data], "balanced")[0] is first
    assert s.preprocess([a], "fast")[0] is not first  # another detail is other tiles
    b.write_bytes((images_dir / "rocket.jpg").read_bytes())  # the file changed on disk: read anew
    changed = s.preprocess([b], "balanced")[0]
    assert changed is not first and changed.pixels.shape != first.pixels.shape or \
        (changed.pixels != first.pixels).any()


def test_a_files_tiles_are_keyed_by_its_bytes_without_hashing_the_pixels(parts, images_dir, tmp_path, monkeypatch):
    """``ChatSession`` hands the file's digest to the processor: the tiles' cache keys follow from it,
    the detail and the processor's settings, and the pixels are not hashed a second time."""
    from engine.models.smolvlm.processing import ProcessedImage

    s = session(parts)
    monkeypatch.setattr(ProcessedImage, "_digest", lambda self, i: pytest.fail("pixels hashed"))
    photo, other = tmp_path / "photo.png", tmp_path / "other.jpg"
    photo.write_bytes((images_dir / "coffee.png").read_bytes())
    other.write_bytes((images_dir / "rocket.jpg").read_bytes())
    first = s.preprocess([photo], "balanced")[0]
    assert len(set(first.tile_digests)) == first.num_tiles  # one key per tile
    s._processed.clear()  # tiled again from the same bytes: the same keys
    assert s.preprocess([photo], "balanced")[0].tile_digests == first.tile_digests
    fast = s.preprocess([photo], "fast")[0]
    assert not set(fast.tile_digests) & set(first.tile_digests)  # other tiles, other keys
    assert not set(s.preprocess([other], "balanced")[0].tile_digests) & set(first.tile_digests)
    settings = s.processor.settings_digest
    s._processed.clear()
    s.processor.__dict__["settings_digest"] = b"another processor"
    assert not set(s.preprocess([photo], "balanced")[0].tile_digests) & set(first.tile_digests)
    s.processor.__dict__["settings_digest"] = settings
    # A digest the server noted when it stored the file (engine.api.images.note_digest) is used as it is.
    from engine.api import images

    s._processed.clear()
    images.note_digest(photo, b"noted by the server")
    try:
        assert not set(s.preprocess([photo], "balanced")[0].tile_digests) & set(first.tile_digests)
    finally:
        images._DIGESTS.clear()
    # A PIL image has no file bytes: its pixels are hashed, as before.
    monkeypatch.undo()
    from PIL import Image

    pil = s.preprocess([Image.open(photo)], "balanced")[0]
    assert pil.tile_digests == tuple(pil._digest(i) for i in range(pil.num_tiles))
