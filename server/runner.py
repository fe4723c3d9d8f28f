"""uvicorn's server with a shutdown that ends the answers being streamed first.

uvicorn's own shutdown waits up to its graceful timeout for open responses to finish, then cancels
their tasks: a client streaming a long answer when the server stops got neither a finish chunk nor
``data: [DONE]``, and the log two ``CancelledError`` tracebacks. Here an exit first cancels every
admitted answer on the event loop; each stream then ends with one 503 ``server_shutting_down``
error event, a request still queued gets that 503 as its response (so no client takes a cut answer
for a finished one), and the shutdown takes as long as one decode step.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from typing import Any

import uvicorn

from server.bridge import EngineBridge


class Server(uvicorn.Server):
    """``uvicorn.Server`` for an app whose answers go through ``bridge``."""

    def __init__(self, config: uvicorn.Config, bridge: EngineBridge, exit_if_load_fails: bool = False,
                 on_ready: Callable[[float], None] | None = None):
        """``on_ready(seconds)`` is called once, on the event loop, when the model is loaded (seconds
        since this server was made): ``smolchat serve`` says so, after its address and "loading"."""
        super().__init__(config)
        self.bridge = bridge
        self._loop: asyncio.AbstractEventLoop | None = None
        # ``smolchat serve``: a model that cannot load stops the server (load_error says why) rather
        # than serving 503s forever; the app's switch shares a model the window already loaded.
        self.exit_if_load_fails = exit_if_load_fails
        self.load_error: str | None = None
        self.on_ready = on_ready
        self._made = time.monotonic()
        self.stopped_by: int | None = None  # the signal that stopped it, if one did

    async def on_tick(self, counter: int) -> bool:
        if self.exit_if_load_fails and self.bridge.state == "failed":
            self.load_error = self.bridge.message
            return True
        if self.on_ready is not None and self.bridge.state == "ready":
            on_ready, self.on_ready = self.on_ready, None
            on_ready(time.monotonic() - self._made)
        return await super().on_tick(counter)

    async def startup(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def end_answers(self) -> None:
        """Cancel every admitted answer, from any thread (a signal handler included: the work runs
        on the event loop, never inside a lock the interrupted code may hold)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self.bridge.cancel_all)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.should_exit and sig == signal.SIGINT:
            # A second Ctrl-C: the stop under way already ends every answer within one decode step.
            # uvicorn's force exit would skip the app's lifespan shutdown (its temporary media folder
            # left behind, a CancelledError traceback in the log).
            return
        self.stopped_by = sig
        self.end_answers()
        super().handle_exit(sig, frame)
