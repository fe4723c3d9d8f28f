"""Load (32 clients x 3 requests, bounded) and prefix caching across the turns of an image conversation."""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time

import httpx
import openai

from tests.server.helpers import data_uri

MODEL = "tiny-f32"
CLIENTS, REQUESTS = 32, 3


def kv(url: str) -> dict[str, float]:
    """The KV gauges of /metrics once they have settled (they are read on the engine thread)."""
    last, deadline = None, time.monotonic() + 10
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics").text
        now = {k: float(v) for k, v in re.findall(r"^smolchat_(kv_\w+) ([\d.e+]+)$", text, re.M)}
        if now == last and "smolchat_queue_length 0.0" in text:
            return now
        last = now
        time.sleep(0.2)
    raise TimeoutError(f"KV gauges did not settle: {last}")


def ask(url: str, text: str) -> dict:
    response = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4, "temperature": 0})
    assert response.status_code == 200, response.text
    return response.json()


async def client(url: str, index: int, statuses: list[int]) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        for turn in range(REQUESTS):
            body = {"model": MODEL, "max_tokens": 3, "stream": (index + turn) % 2 == 0,
                    "messages": [{"role": "user", "content": f"Client {index} asks question {turn}"}]}
            response = await http.post(f"{url}/v1/chat/completions", json=body)
            statuses.append(response.status_code)
            if response.status_code == 200 and body["stream"]:
                assert response.text.rstrip().endswith("data: [DONE]")


def test_32_concurrent_clients_complete_or_get_429_and_no_block_leaks(url):
    ask(url, "The reference question")
    before = kv(url)
    statuses: list[int] = []

    async def run() -> None:
        await asyncio.wait_for(asyncio.gather(*(client(url, i, statuses) for i in range(CLIENTS))), 120)
    asyncio.run(run())
    assert len(statuses) == CLIENTS * REQUESTS and set(statuses) <= {200, 429}, sorted(set(statuses))
    assert statuses.count(200) >= 8  # at least the queue's 8 places are served
    ask(url, "The reference question")  # the same conversation again: the same blocks in use
    after = kv(url)
    # Blocks in use are the kept conversation's plus those only the prefix cache holds (evictable).
    used = lambda s: s["kv_blocks_total"] - s["kv_blocks_free"] - s["kv_blocks_evictable"]  # noqa: E731
    assert used(after) == used(before) == math.ceil(after["kv_tokens"] / 16), (before, after)
    assert 0 < after["kv_blocks_evictable"] <= after["kv_blocks_cached"]  # the other clients' prompts
    assert httpx.get(f"{url}/health").status_code == 200


def test_the_follow_up_about_the_same_photo_reuses_the_image_prefill(url, images_dir):
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    photo = {"type": "image_url", "image_url": {"url": data_uri(images_dir / "rocket.jpg", "image/jpeg"),
                                                "detail": "low"}}
    messages = [{"role": "user", "content": [photo, {"type": "text", "text": "What is this?"}]}]
    first = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    messages += [first.choices[0].message.model_dump(include={"role", "content"}),
                 {"role": "user", "content": "And what colour is it?"}]
    second = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    # The whole first turn (its 64 image tokens included) and the answer come from the cache.
    assert cached >= first.usage.prompt_tokens > 64, (cached, first.usage)
    assert second.usage.prompt_tokens - cached < 20


def test_interleaved_conversations_each_find_their_photo_in_the_prefix_cache(url, images_dir, server):
    """Two clients alternate: each one's follow-up reuses its own image prefill though the other
    conversation ran in between (the session's own cache then holds the other chat)."""
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    chats, firsts = [], []
    for name in ("rocket.jpg", "coffee.png"):
        mime = "image/jpeg" if name.endswith("jpg") else "image/png"
        photo = {"type": "image_url", "image_url": {"url": data_uri(images_dir / name, mime), "detail": "low"}}
        messages = [{"role": "user", "content": [photo, {"type": "text", "text": "What is this?"}]}]
        first = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
        messages.append(first.choices[0].message.model_dump(include={"role", "content"}))
        chats.append(messages)
        firsts.append(first)
    for messages, first in zip(chats, firsts):
        messages.append({"role": "user", "content": "And what colour is it?"})
        second = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert cached > 64 and cached >= first.usage.prompt_tokens - 16, (cached, first.usage, server.output()[-3000:])


class RecordingEvent(threading.Event):
    """A threading.Event that records each ``wait``: ``(timeout, whether it was set)``."""

    def __init__(self):
        super().__init__()
        self.waits: list[tuple[float | None, bool]] = []

    def wait(self, timeout=None):
        result = super().wait(timeout)
        self.waits.append((timeout, result))
        return result


def test_the_engine_thread_waits_for_the_first_chunk_once_and_never_past_its_bound():
    """After an answer's first event the engine thread waits (without the GIL) until the request
    says its first chunk is sent, at most FIRST_EVENT_HOLD_S; later tokens, answers whose request
    is not waiting, and ended ones do not wait for anything."""
    from engine.api import TokenEvent
    from server import bridge

    def answer(waiting: bool = True) -> bridge.Answer:
        a = bridge.Answer(bridge.EngineBridge(service=None, max_queue=1), loop)
        a._first_sent = RecordingEvent()
        if waiting:
            a._waiter = loop.create_future()  # a request awaiting its first event
        return a

    loop = asyncio.new_event_loop()
    try:
        sent = answer()
        threading.Timer(0.001, sent.first_sent).start()  # the request sends its first chunk
        for i in range(3):
            sent.sink(TokenEvent("x", i))
        assert sent._first_sent.waits == [(bridge.FIRST_EVENT_HOLD_S, True)] and sent.ready == 3

        stuck = answer()  # nobody says the chunk went out: the bound ends the wait, once
        for i in range(3):
            stuck.sink(TokenEvent("x", i))
        assert stuck._first_sent.waits == [(bridge.FIRST_EVENT_HOLD_S, False)] and stuck.ready == 3

        gone = answer()  # a request that has ended: the event is set, nothing is waited for
        gone.bridge.in_flight = 1
        gone.release()
        gone.sink(TokenEvent("x", 0))
        assert gone._first_sent.waits == [(bridge.FIRST_EVENT_HOLD_S, True)]

        idle = answer(waiting=False)  # the request is not waiting yet: no wake-up, no hold
        idle.sink(TokenEvent("x", 0))
        assert idle._first_sent.waits == [] and idle.ready == 1
    finally:
        loop.close()


def test_text_between_photos_keeps_its_place_and_its_follow_up_is_cached(url, images_dir):
    """An OpenAI content list with text before, between and after two photos: the prompt keeps that
    order (the same parts with the photos first is another prompt, sharing only its start), and the
    follow-up, which re-sends the message, finds all of it in the prefix cache."""
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)

    def photo(name: str, mime: str) -> dict:
        return {"type": "image_url", "image_url": {"url": data_uri(images_dir / name, mime), "detail": "low"}}

    def text(value: str) -> dict:
        return {"type": "text", "text": value}

    a, b = photo("rocket.jpg", "image/jpeg"), photo("coffee.png", "image/png")
    interleaved = [text("Image A:"), a, text("Image B:"), b, text("Which one is a drink?")]
    messages = [{"role": "user", "content": interleaved}]
    first = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    messages += [first.choices[0].message.model_dump(include={"role", "content"}),
                 {"role": "user", "content": "Why?"}]
    ask(url, "Another conversation in between: the follow-up's history is rebuilt from its messages.")
    second = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    # Every full block of the first prompt (photos and text between them) from the prefix cache.
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 16
    assert first.usage.prompt_tokens > 128
    photos_first = [a, b, text("Image A:"), text("Image B:"), text("Which one is a drink?")]
    other = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": photos_first}],
                                        max_tokens=4, temperature=0)
    # The same parts in another order: only the prompt's start ("<|im_start|>User:") is shared.
    assert other.usage.prompt_tokens_details.cached_tokens < 16, other.usage


def test_text_parts_follow_the_message_and_are_left_out_where_the_engine_layout_is_the_same():
    from engine.api import Attachment
    from server.conversation import _text_parts

    image, video = Attachment("a.png"), Attachment("v.mp4", "video")
    assert _text_parts([["Image A:"], ["Image B:"], ["Which?"]], [image, image]) == ("Image A:", "Image B:", "Which?")
    assert _text_parts([["a", "b"], []], [image]) == ("a\nb", "")  # text parts in a row join as the text does
    assert _text_parts([[], ["What is this?"]], [image]) is None  # the media first: the engine's own layout
    assert _text_parts([["A clip:"], ["a photo:"], ["same place?"]], [video, image]) == (
        "A clip:", "a photo:", "same place?")
    assert _text_parts([["A photo:"], ["a clip:"], ["same place?"]], [image, video]) is None  # videos go first
