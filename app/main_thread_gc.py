"""Python's cyclic garbage collection on the UI thread only.

CPython collects cycles on whichever thread happens to allocate past the threshold. When that is the
engine thread and the garbage holds a Qt object (a closed dialog or window caught in a reference
cycle), the object's C++ destructor runs there: it takes Qt's connection lock and then waits for the
GIL (shiboken looks for a Python override), while the UI thread, holding the GIL, waits for that lock
in a ``connect``. Both stop for good: the window froze (seen as a test run hung for 30 minutes in
tests/app/test_real_model.py, the engine thread inside ``gc_collect_main`` under ``QObject::~QObject``,
the UI thread in ``QObjectPrivate::connectImpl``).

:class:`MainThreadCollector` turns automatic collection off and runs it from a timer on the UI thread,
with CPython's own thresholds, so cycles are still freed within a fraction of a second, and only ever
where Qt objects may be destroyed.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer


class MainThreadCollector(QObject):
    """Collect garbage on the thread that made this object (the UI thread) every ``interval_ms``, the
    generation CPython would have collected by now (``gc.get_count()`` against ``gc.get_threshold()``).

    :meth:`stop` gives automatic collection back (tests; a shut application)."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = 500):
        super().__init__(parent)
        self.threshold = gc.get_threshold()
        self.collections = 0  # collections run (tests)
        self._full_due = False  # a full collection asked for from another thread (request_full)
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.check)
        self._timer.start()

    def request_full(self) -> None:
        """Any thread: a full collection at the next :meth:`check`, then the C library's freed memory
        back to the system (the engine service after a stopped load: its half-built model sits in
        reference cycles, possibly GBs that a generation's threshold would leave for minutes)."""
        self._full_due = True  # (a plain store: read on the UI thread within one interval)

    def check(self) -> None:
        """Collect the oldest generation whose count passed its threshold, as CPython's allocator would
        (all of them after :meth:`request_full`)."""
        if self._full_due:
            from engine.host_memory import release_free_host_memory  # torch-free

            self._full_due = False
            gc.collect()
            self.collections += 1
            release_free_host_memory()
            return
        counts = gc.get_count()
        if counts[0] <= self.threshold[0]:
            return
        generation = 0
        if counts[1] > self.threshold[1]:
            generation = 2 if counts[2] > self.threshold[2] else 1
        gc.collect(generation)
        self.collections += 1

    def stop(self) -> None:
        self._timer.stop()
        gc.enable()


def full_collection_request() -> Callable[[], None] | None:
    """The installed collector's :meth:`MainThreadCollector.request_full` (for
    ``engine.service.EngineService(collect_garbage=...)``), or None where none is installed: automatic
    collection is on and the engine thread may collect itself."""
    from PySide6.QtCore import QCoreApplication

    collector = getattr(QCoreApplication.instance(), "_main_thread_collector", None)
    return collector.request_full if collector is not None and not gc.isenabled() else None


def install(app: QObject) -> MainThreadCollector:
    """One collector for ``app`` (kept on it; a second call returns the first)."""
    existing = getattr(app, "_main_thread_collector", None)
    if existing is not None:
        return existing
    collector = MainThreadCollector(app)
    app._main_thread_collector = collector
    return collector
