"""``JobThread``: the one worker thread of a backend whose answers run off the UI thread, in order.

The fake and the remote backend queue their loads, history changes and answers here. An answer is
queued with a cancel flag of its own, so a Stop pressed before it starts still stops it (it then
ends with ``DoneEvent("cancelled")`` and never runs).

A job that raises never ends the thread (it is the backend's only one: every later load and answer
would wait on it for good, the window "generating…" with Stop doing nothing). The traceback is logged;
an answer that raised before its ``DoneEvent`` ends with ``DoneEvent("error")`` as the local engine's
service ends one (:func:`engine.api.errors.describe_error`), so the window leaves its busy state.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from engine.api import DoneEvent, GenerationStats
from engine.api.backend import EventSink
from engine.api.errors import describe_error

log = logging.getLogger(__name__)


class JobThread:
    """Runs queued callables on a daemon thread named ``name``, one at a time, in order.

    ``cancelled`` is the running answer's flag: set by :meth:`cancel`, cleared as each answer starts;
    the answer's code polls it."""

    def __init__(self, name: str) -> None:
        self.cancelled = threading.Event()
        self._queued: list[threading.Event] = []  # the flags of answers not started yet
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def put(self, job: Callable[[], None]) -> None:
        """Run ``job`` after everything queued before it (if it raises: logged, and the next job runs)."""
        self._queue.put(job)

    def put_answer(self, run: Callable[[EventSink], None], sink: EventSink) -> None:
        """Queue an answer: ``run(events)`` unless :meth:`cancel` came first, then ``sink(DoneEvent("cancelled"))``.

        ``run`` sends its events to the sink it is given (``sink``, watched): if it raises before its
        ``DoneEvent``, the answer ends with ``DoneEvent("error")`` naming the exception."""
        flag = threading.Event()
        self._queued.append(flag)

        def job() -> None:
            self._queued.remove(flag)
            if flag.is_set():
                sink(DoneEvent("cancelled"))
                return
            self.cancelled.clear()
            ended = False

            def watched(event) -> None:
                nonlocal ended
                ended = ended or isinstance(event, DoneEvent)
                sink(event)
            try:
                run(watched)
            except Exception as exc:  # noqa: BLE001 - a bug in one answer must end it, not the thread
                log.error("%s: the answer failed", self.thread.name, exc_info=exc)
                if not ended:
                    sink(DoneEvent("error", GenerationStats(), describe_error(exc), type(exc).__name__))
        self._queue.put(job)

    def cancel(self) -> None:
        """Stop the running answer and every queued one."""
        for flag in list(self._queued):
            flag.set()
        self.cancelled.set()

    def close(self, timeout: float = 1.0) -> bool:
        """Cancel, let the queued jobs drain and end the thread; False if it still runs after ``timeout`` s."""
        self.cancel()
        self._queue.put(None)
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                job()
            except Exception:  # noqa: BLE001 - a bug in one job must not stop the thread
                log.exception("%s: a queued job failed", self.thread.name)
