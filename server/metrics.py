"""Prometheus metrics (``GET /metrics``): requests, tokens, time to first token, decode speed, KV blocks.

One registry per app (not prometheus_client's global one), so several servers in one process (tests,
the app's switch turned off and on) never collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.api import GenerationStats

#: Where a streamed response that ended in an error event (after its 200 header) puts that error's
#: status in the ASGI scope, for the request count (server.app's guard counts every response).
STATUS_KEY = "smolchat.status"


class Metrics:
    """The server's counters; :meth:`record` takes one finished answer's stats."""

    def __init__(self, bridge) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("smolchat_requests", "HTTP requests by endpoint and status", ["endpoint", "status"],
                                registry=r)
        self.prompt_tokens = Counter("smolchat_prompt_tokens", "Prompt tokens of finished answers", registry=r)
        self.cached_tokens = Counter("smolchat_cached_prompt_tokens", "Prompt tokens reused from the KV cache",
                                     registry=r)
        self.generated_tokens = Counter("smolchat_generated_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram("smolchat_time_to_first_token_seconds", "Time to first token (queue excluded)",
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.decode_speed = Histogram("smolchat_decode_tokens_per_second", "Decode speed of an answer",
                                      buckets=(1, 5, 10, 25, 50, 100, 200, 400, 800, 1600, 3200), registry=r)
        queue = Gauge("smolchat_queue_length", "Answers waiting or running", registry=r)
        queue.set_function(lambda: bridge.in_flight)
        blocks_free = Gauge("smolchat_kv_blocks_free", "Free blocks of the paged KV arena", registry=r)
        blocks_free.set_function(lambda: bridge.kv.get("blocks_free", 0))
        blocks = Gauge("smolchat_kv_blocks_total", "Blocks of the paged KV arena", registry=r)
        blocks.set_function(lambda: bridge.kv.get("blocks_total", 0))
        cached = Gauge("smolchat_kv_blocks_cached", "Blocks kept by the prefix cache for later prompts", registry=r)
        cached.set_function(lambda: bridge.kv.get("blocks_cached", 0))
        evictable = Gauge("smolchat_kv_blocks_evictable",
                          "Blocks only the prefix cache holds (given back when the arena runs out)", registry=r)
        evictable.set_function(lambda: bridge.kv.get("blocks_evictable", 0))
        tokens = Gauge("smolchat_kv_tokens", "Tokens the KV cache holds (the kept conversation)", registry=r)
        tokens.set_function(lambda: bridge.kv.get("tokens", 0))

    def record(self, stats: GenerationStats) -> None:
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.cached_tokens.inc(stats.cached_tokens)
        self.generated_tokens.inc(stats.generated_tokens)
        if stats.generated_tokens:
            self.ttft.observe(stats.ttft_s)
        if stats.decode_tokens_per_s:
            self.decode_speed.observe(stats.decode_tokens_per_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
