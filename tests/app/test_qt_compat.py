"""Streaming thousands of tokens must not drain CPython's reference count of True (PySide6 6.12.0 on
CPython 3.11 did: its emit() returned True without a new reference; the pin excludes it)."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal


class Source(QObject):
    token = Signal(str)


def test_many_emits_keep_true_alive():
    source = Source()
    received = []
    source.token.connect(received.append)
    before = sys.getrefcount(True)
    for _ in range(5000):
        source.token.emit("x")
    after = sys.getrefcount(True)
    assert len(received) == 5000
    assert abs(after - before) <= 2  # unchanged, up to the references this frame holds
