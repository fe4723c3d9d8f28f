"""Load (32 clients x 3 requests, bounded) and prefix caching across the turns of an image conversation."""

from __future__ import annotations

import asyncio
import math
import re
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


def test_the_engine_thread_waits_for_the_first_chunk_once_and_never_past_its_bound():
    """After an answer's first event the engine thread waits (without the GIL) until the request
    says its first chunk is sent, at most FIRST_EVENT_HOLD_S; later tokens, and answers whose
    request is not waiting, do not wait."""
    import threading
    import time

    from engine.api import TokenEvent
    from server import bridge

    loop = asyncio.new_event_loop()
    try:
        answer = bridge.Answer(bridge.EngineBridge(service=None, max_queue=1), loop)
        answer._waiter = loop.create_future()  # a request awaiting its first event
        threading.Timer(0.001, answer.first_sent).start()  # the request sends its first chunk
        t = time.perf_counter()
        answer.sink(TokenEvent("x", 0))
        waited = time.perf_counter() - t
        assert 0.0005 < waited < bridge.FIRST_EVENT_HOLD_S * 4, waited

        # Nobody says the chunk went out (a stuck loop): the bound holds, once; the next tokens
        # would each wait the whole bound again if they waited at all.
        held = bridge.Answer(bridge.EngineBridge(service=None, max_queue=1), loop)
        held._waiter = loop.create_future()
        t = time.perf_counter()
        held.sink(TokenEvent("x", 0))
        assert bridge.FIRST_EVENT_HOLD_S * 0.9 < time.perf_counter() - t < bridge.FIRST_EVENT_HOLD_S * 10
        t = time.perf_counter()
        for i in range(1, 3):
            held.sink(TokenEvent("x", i))
        assert time.perf_counter() - t < bridge.FIRST_EVENT_HOLD_S and held.ready == 3

        # A request that has ended (released) never holds the engine thread.
        gone = bridge.Answer(bridge.EngineBridge(service=None, max_queue=1), loop)
        gone.bridge.in_flight = 1
        gone.release()
        gone._waiter = loop.create_future()
        t = time.perf_counter()
        gone.sink(TokenEvent("x", 0))
        assert time.perf_counter() - t < bridge.FIRST_EVENT_HOLD_S * 0.5
    finally:
        loop.close()
