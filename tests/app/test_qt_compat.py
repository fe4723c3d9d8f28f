"""Streaming thousands of tokens must not drain CPython's reference count of True."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal

from app.qt_compat import emit


class Source(QObject):
    token = Signal(str)


def test_many_emits_keep_true_alive():
    source = Source()
    received = []
    source.token.connect(received.append)
    before = sys.getrefcount(True)
    for _ in range(5000):
        emit(source.token, "x")
    after = sys.getrefcount(True)
    assert len(received) == 5000
    assert abs(after - before) <= 2  # unchanged, up to the references this frame holds
