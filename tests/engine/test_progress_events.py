"""The progress a ChatSession reports before its first token (issue 19, "Waiting for the first word"):
per image, per tile, then the prompt's tokens, on a tiny random-weight SmolVLM."""

from __future__ import annotations

import pytest
from PIL import Image

from engine.api.backend import ProgressEvent
from engine.api.events import DoneEvent, GenerationParams
from engine.chat import ChatSession


@pytest.fixture
def session(tiny_checkpoint):
    return ChatSession.load(str(tiny_checkpoint), device="cpu")


def answer(session, text, images):
    events: list[ProgressEvent] = []
    session.progress = events.append
    *_, done = session.send(text, images=images, params=GenerationParams(max_new_tokens=1))
    assert isinstance(done, DoneEvent) and done.finish_reason in ("stop", "length"), done
    return events, done


def test_two_images_report_each_image_and_tile_then_the_prompt(session, tmp_path):
    wide, small = tmp_path / "wide.png", tmp_path / "small.png"
    Image.new("RGB", (1024, 768), (200, 90, 40)).save(wide)
    Image.new("RGB", (9, 13), (20, 90, 240)).save(small)
    events, done = answer(session, "Compare them.", [wide, small])
    counts = [img.num_tiles for img in session.turns[0].images]
    assert counts[0] > 1 and counts[1] >= 1

    tiles = [e for e in events if e.stage == "image"]
    prefill = [e for e in events if e.stage == "prefill"]
    assert events == tiles + prefill  # every tile before the prompt
    assert {(e.count, e.media) for e in tiles} == {(2, "image")}
    assert {e.index: e.tiles for e in tiles} == {0: counts[0], 1: counts[1]}
    # Tile by tile, in order: the same numbers as the overall done/total.
    assert (tiles[0].index, tiles[0].tile, tiles[0].done) == (0, 0, 0)
    assert [(e.index, e.tile) for e in tiles] == sorted((e.index, e.tile) for e in tiles)
    assert all(e.done == e.tile + (counts[0] if e.index else 0) and e.total == sum(counts) for e in tiles)
    assert (tiles[-1].index, tiles[-1].tile, tiles[-1].done) == (1, counts[1], sum(counts))
    assert [e.tile for e in tiles if e.index == 0][-1] == counts[0] - 1  # then image 2 starts at its tile 0
    # The prompt: every token not cached, from 0 to the end.
    assert prefill[0].done == 0 and prefill[-1].done == prefill[-1].total == done.stats.prompt_tokens


def test_a_later_turn_counts_only_the_images_it_reads(session, tmp_path):
    first, second = tmp_path / "first.png", tmp_path / "second.png"
    Image.new("RGB", (512, 512), (200, 90, 40)).save(first)
    Image.new("RGB", (512, 300), (20, 90, 240)).save(second)
    answer(session, "What is this?", [first])
    events, done = answer(session, "And this one?", [second])
    tiles = [e for e in events if e.stage == "image"]
    assert {(e.index, e.count) for e in tiles} == {(0, 1)}  # the first photo is in the cache
    assert tiles[-1].tile == tiles[-1].tiles == session.turns[2].images[0].num_tiles
    prefill = [e for e in events if e.stage == "prefill"]
    assert prefill[-1].total == done.stats.prompt_tokens - done.stats.cached_tokens


def test_a_text_question_reports_only_its_prompt(session):
    events, done = answer(session, "Hello there", [])
    assert {e.stage for e in events} == {"prefill"}
    assert events[-1].done == events[-1].total == done.stats.prompt_tokens
