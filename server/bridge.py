"""The engine thread seen from asyncio: load state, the queue limit, and one answer as an async stream.

:class:`EngineService` runs requests one at a time in order; here each HTTP request takes a place
(429 beyond ``max_queue``), and its events come back from the engine thread through
``loop.call_soon_threadsafe``. A request that goes away (client disconnected, stop string reached)
cancels only its own answer, which frees the blocks it would have written.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from engine.api import Capabilities, DoneEvent, GenerationStats, ProgressEvent, PromptLogprobsEvent, TokenEvent
from engine.service import EngineService
from server.errors import APIError

DISCONNECT_POLL_S = 0.25  # how often a waiting request checks whether its client is still there
FIRST_EVENT_HOLD_S = 0.005  # the longest the engine thread waits for a stream's first chunk (see Answer.sink)


def shutting_down(cut: bool) -> APIError:
    """503 for an answer the server's stop cancelled: cut off (``cut``) or never started."""
    what = "before this answer was finished" if cut else "before this request was answered"
    return APIError(503, f"the server is shutting down: it stopped {what}", "server_shutting_down")


#: Seconds a client is asked to wait before asking again while the model loads (``Retry-After``: the
#: ``openai`` package honours it, and gave up after 1.4 s of its own back-off without it; trial 66).
LOADING_RETRY_S = 5


def model_loading() -> APIError:
    """503 ``model_loading`` with a ``Retry-After``."""
    return APIError(503, "the model is still loading", "model_loading", headers={"Retry-After": str(LOADING_RETRY_S)})


class ClientDisconnected(Exception):
    """The client went away while its answer was queued or running (the answer is cancelled)."""


class Answer:
    """One queued generation: ``await next()`` gives its TokenEvents, then its DoneEvent.

    The engine thread appends events to a deque and wakes the event loop only when the request is
    waiting for one (one ``call_soon_threadsafe`` per wait, not per token): at 1,800 tok/s on a GPU,
    a wake-up, a timer and a task per token cost the engine thread a fifth of its speed in GIL time.
    Tokens that arrived meanwhile are taken without waiting (:meth:`ready` tells a stream to send
    them as one chunk).
    """

    def __init__(self, bridge: EngineBridge, loop: asyncio.AbstractEventLoop):
        self.bridge, self.loop = bridge, loop
        self.events: deque = deque()
        self.shut_down = False  # cancelled because the server is stopping (EngineBridge.cancel_all)
        self.stopped = threading.Event()  # cancel() ran: for work on the engine thread that is no answer
        self._waiter: asyncio.Future | None = None
        self.handle: Any = None
        self.finished = False
        self.released = False
        self._held = False
        # Set by the request once its first chunk is on the wire (or it needs no hurry, or it ended).
        self._first_sent = threading.Event()
        self.started = time.perf_counter()
        # The engine has read this answer's prompt: its last ProgressEvent, sent when the engine
        # thread is about to wait for the first token (see :meth:`sink`). No refusal with an HTTP
        # status can follow.
        self.prompt_read = False
        self._asked_at = time.monotonic()  # when the client was last checked for (_client_left)

    def sink(self, event: Any) -> None:
        """Engine thread: forward tokens, a scored prompt and the end; of the progress events (not part of the API),
        only note the prompt's last (:meth:`wait_prompt_read`).

        Why the last and not the first: a stream's response starts when the prompt is read, and
        the event loop's work for that start (holding the GIL) runs beside the engine thread. At
        the first event the engine thread is launching the vision tower's and the prefill's
        kernels, host-bound work that each GIL hand-over delays (H200, a new 13-tile photo: the
        vision tower and prefill took 0.5 ms longer through HTTP than in process); the last comes
        when everything up to the first token is launched and the engine thread waits for the GPU
        without the GIL (ChatSession, ``token_stream``'s ``on_wait``): 0.0 ms longer (session 30)."""
        if isinstance(event, ProgressEvent):
            if not self.prompt_read and event.stage == "prefill" and event.done >= event.total:
                self.prompt_read = True
                if self._waiter is not None:
                    self._wake_soon()
            return
        if isinstance(event, (TokenEvent, DoneEvent, PromptLogprobsEvent)):
            if isinstance(event, DoneEvent) and self.bridge.on_done is not None and (
                    event.finish_reason != "error" or event.stats.generated_tokens):
                # Here, not where the request reads it: a request whose client left no longer does.
                # (A refusal generated nothing and gets its own status: no answer to count.)
                self.bridge.on_done(event.stats)
            self.events.append(event)
            if self._waiter is not None:
                if not self._wake_soon():
                    return
                if not self._held:
                    # The request waits for this first event to send its first chunk (a stream's
                    # headers went out once its prompt was read), but the engine thread goes
                    # on decoding with the GIL. Whenever the event loop lets the GIL go on its way
                    # (a socket write) it then waits up to Python's 5 ms switch interval to get it
                    # back: a follow-up's time to the first token through HTTP was 8-20 ms for ~4 ms of
                    # engine work (traced). So the engine thread waits, without the GIL, until the
                    # first chunk is sent (about 0.3 ms), delaying the second token by as much.
                    self._held = True
                    self._first_sent.wait(FIRST_EVENT_HOLD_S)

    def _wake_soon(self) -> bool:
        """Engine thread: wake the waiting request on the event loop; False when the loop has closed
        (server shutdown)."""
        try:
            self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:
            return False
        return True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def ready(self) -> int:
        """Events that have arrived and not been taken yet."""
        return len(self.events)

    async def _wait(self, ready: Callable[[], bool], is_disconnected: Callable[[], Any] | None) -> None:
        """Until ``ready()``; raises :class:`ClientDisconnected` (after cancelling) when the client left."""
        while not ready():
            self._waiter = self.loop.create_future()
            if ready():  # came between the check and the waiter: the sink saw no waiter
                self._waiter = None
                break
            try:
                await asyncio.wait_for(self._waiter, DISCONNECT_POLL_S)
            except TimeoutError:  # asyncio.TimeoutError is the builtin from Python 3.11
                self._waiter = None
                await self._client_left(is_disconnected, now=True)
            finally:
                self._waiter = None

    async def _client_left(self, is_disconnected: Callable[[], Any] | None, now: bool = False) -> None:
        """Raise :class:`ClientDisconnected` (after cancelling) if the client has gone; asks at most
        every ``DISCONNECT_POLL_S`` unless ``now``. Also asked while tokens keep arriving: a request
        that is not streamed writes nothing until its answer ends, so nothing else would notice its
        client leaving, and the abandoned answer would hold the engine up to its ``max_tokens``."""
        if is_disconnected is None or (not now and time.monotonic() - self._asked_at < DISCONNECT_POLL_S):
            return
        self._asked_at = time.monotonic()
        if await is_disconnected():
            self.cancel()
            raise ClientDisconnected()

    async def wait_prompt_read(self, is_disconnected: Callable[[], Any] | None = None) -> None:
        """Until the engine has read the prompt (:attr:`prompt_read`: its vision tower and prefill
        ran, the first token is on its way) or an event has arrived (an answer that reports no
        progress, or one that failed: its DoneEvent)."""
        await self._wait(lambda: self.prompt_read or bool(self.events), is_disconnected)

    async def next(self, is_disconnected: Callable[[], Any] | None = None) -> TokenEvent | DoneEvent:
        """The next event; raises :class:`ClientDisconnected` (after cancelling) when the client left."""
        if not self.events:
            await self._wait(lambda: bool(self.events), is_disconnected)
        await self._client_left(is_disconnected)
        event = self.events.popleft()
        if isinstance(event, DoneEvent):
            self.finished = True
            self.release()
        return event

    def first_sent(self) -> None:
        """The request has sent its first chunk (or will send nothing soon): the engine thread,
        held after the first event (:meth:`sink`), goes on. Idempotent and cheap."""
        self._first_sent.set()

    def cancel(self) -> None:
        """Stop this answer (a no-op once it has finished); its place in the queue is given back."""
        self.stopped.set()
        if not self.finished and self.handle is not None:
            self.bridge.service.cancel_request(self.handle)
        self.release()

    def release(self) -> None:
        self._first_sent.set()
        self.bridge.answers.discard(self)
        if not self.released:
            self.released = True
            self.bridge.in_flight -= 1


class EngineBridge:
    """Owns (or shares) an EngineService, loads the model, and admits requests."""

    def __init__(self, service: EngineService, max_queue: int):
        self.service, self.max_queue = service, max_queue
        self.state, self.message = "loading", ""
        self.in_flight = 0
        self.answers: set[Answer] = set()  # admitted and not yet released
        self.capacity = 0
        self.kv: dict[str, int] = {}
        self.stopping = False  # cancel_all ran: the server is shutting down
        self.model_path = ""
        # Called on the engine thread with every answer's final stats (the metrics), cancelled ones too.
        self.on_done: Callable[[GenerationStats], None] | None = None

    @property
    def capabilities(self) -> Capabilities:
        return self.service.capabilities

    def load(self, model: str, options: dict, on_ready: Callable[[], None] | None = None) -> None:
        """Start loading ``model`` on the engine thread; :attr:`state` becomes "ready" or "failed"."""
        self.model_path = model

        def done(info, message) -> None:
            if info is None:
                self.state, self.message = "failed", message or "loading failed"  # the service logs it
                return
            self.refresh_kv()
            self.state = "ready"
            if on_ready is not None:
                on_ready()
        self.service.load(model, options, done)

    def adopt(self) -> None:
        """Use the model the shared service already has loaded (the app's local server)."""
        self.model_path = self.service.info.path if self.service.info else ""
        self.state = "ready" if self.service.info else "loading"
        self.refresh_kv()

    def require_ready(self) -> None:
        if self.state == "failed":
            raise APIError(503, f"the model failed to load: {self.message}", "model_load_failed")
        if self.state != "ready" or self.service.info is None:
            raise model_loading()

    def admit(self) -> Answer:
        """A place in the queue, or APIError 429 when ``max_queue`` answers are waiting or running, 503
        ``server_shutting_down`` once the server is stopping (a keep-alive connection's next request
        can still arrive before uvicorn closes it: run, it would be cut at uvicorn's grace period
        and could end as if finished)."""
        if self.stopping:
            raise shutting_down(cut=False)
        self.require_ready()
        if self.in_flight >= self.max_queue:
            raise APIError(429, f"the server is busy: {self.in_flight} of its {self.max_queue} places for "
                                "requests waiting or running are taken; try again shortly", "queue_full",
                           headers={"Retry-After": "1"})
        self.in_flight += 1
        answer = Answer(self, asyncio.get_running_loop())
        self.answers.add(answer)
        return answer

    def cancel_all(self) -> None:
        """Cancel every admitted answer (the server is stopping): queued ones never start, running
        ones stop at their next token. Each is marked :attr:`Answer.shut_down`, so its request ends
        with a 503 ``server_shutting_down`` error (as the response, or as a stream's last event)
        rather than as an answer that looks finished; requests after this are refused (:meth:`admit`)."""
        self.stopping = True
        for answer in list(self.answers):
            answer.shut_down = True
            answer.cancel()

    def refresh_kv(self) -> None:
        """Read the KV cache's size and free blocks on the engine thread (for /metrics and the context)."""
        def read(session: Any) -> dict[str, int]:
            cache = session.cache
            stats = {"capacity": int(cache.capacity), "tokens": int(cache.seq_len)}
            model = getattr(session, "model", None)  # (a test's scripted session has none)
            if model is not None:  # the model's own context: --context-size sets the cache's
                stats["trained"] = int(model.capabilities().max_context or 0)
            allocator = getattr(cache, "allocator", None)
            if allocator is not None:
                stats.update(blocks_total=allocator.num_blocks, blocks_free=allocator.num_free,
                             blocks_cached=len(cache.prefix), blocks_evictable=cache.prefix.num_evictable)
            return stats

        def done(result, error) -> None:
            if result is not None:
                self.kv = result
                self.capacity = result["capacity"]
        self.service.call(read, done)

    async def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(session)`` on the engine thread in queue order and await its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def done(result, error) -> None:
            def settle() -> None:
                if not future.done():
                    future.set_exception(error) if error is not None else future.set_result(result)
            loop.call_soon_threadsafe(settle)
        self.service.call(fn, done)
        return await future
