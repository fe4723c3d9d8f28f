"""Cyclic garbage is collected on the UI thread only (app/main_thread_gc.py)."""

from __future__ import annotations

import gc
import threading

from PySide6.QtCore import QObject


class _Cycle:
    def __init__(self):
        self.me = self
        self.qt = QObject()  # a Qt object in the cycle: what must not be destroyed on another thread


def test_an_engine_threads_garbage_is_collected_on_the_ui_thread(qtbot, _main_thread_gc):
    assert not gc.isenabled()
    collected_on = []

    def note(phase, info):
        if phase == "start":
            collected_on.append(threading.get_ident())

    gc.callbacks.append(note)
    try:
        def make_garbage():  # far past the first generation's threshold (700 allocations by default)
            for _ in range(20 * _main_thread_gc.threshold[0]):
                _Cycle()
        worker = threading.Thread(target=make_garbage)
        worker.start()
        worker.join()
        assert collected_on == []  # none ran on the worker, though it allocated past every threshold
        before = _main_thread_gc.collections
        qtbot.waitUntil(lambda: _main_thread_gc.collections > before, timeout=5000)
    finally:
        gc.callbacks.remove(note)
    assert set(collected_on) == {threading.main_thread().ident}


def test_install_keeps_one_collector_and_stop_gives_automatic_collection_back(qapp, _main_thread_gc):
    from app.application import create_app
    from app.main_thread_gc import MainThreadCollector

    assert create_app([]) is qapp and qapp._main_thread_collector is _main_thread_gc
    other = MainThreadCollector()
    other.stop()
    assert gc.isenabled()
    gc.disable()  # (the package's collector is still the one in charge)


def test_a_stopped_loads_garbage_is_collected_on_the_ui_thread(qtbot, _main_thread_gc):
    """A stopped load leaves its half-built model in reference cycles: the local backend's engine
    asks the UI thread's collector for a full collection (engine.service: collect_garbage) instead
    of collecting on the engine thread (trial 72 F1: 16 full collections there in 400 actions)."""
    import weakref

    from app.backends.local import LocalBackend
    from engine.api import LOAD_CANCELLED, LoadCancelled

    collected_on, made, results = [], [], []

    def note(phase, info):
        if phase == "start":
            collected_on.append(threading.get_ident())

    def loader(model, options):
        garbage = _Cycle()  # a Qt object in the stopped load's cycles
        made.append(weakref.ref(garbage))
        raise LoadCancelled("the load was stopped")

    backend = LocalBackend(loader)
    gc.callbacks.append(note)
    try:
        before = _main_thread_gc.collections
        backend.load("/stopped", {}, lambda info, message: results.append(message))
        qtbot.waitUntil(lambda: results == [LOAD_CANCELLED], timeout=5000)
        qtbot.waitUntil(lambda: _main_thread_gc.collections > before, timeout=5000)
        assert made[0]() is None  # freed by that collection: a full one, whatever the counts
    finally:
        gc.callbacks.remove(note)
        assert backend.close()
    assert set(collected_on) == {threading.main_thread().ident}
