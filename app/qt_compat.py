"""Work around a reference-count bug in ``SignalInstance.emit`` (seen with PySide6 6.12.0 on
CPython 3.11).

There ``emit()`` returns ``True`` without a new reference, so every emit from Python takes one
reference from ``True``. After a few thousand streamed tokens CPython aborts with
"bool_dealloc: deallocating True or False". (Since CPython 3.12 ``True`` is immortal and the bug
is harmless.) :func:`emit` detects the bug once, with a probe signal, and gives the reference
back; on a fixed PySide it is a plain ``emit``. Emit every Python-side signal through it.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal


class _Probe(QObject):
    ping = Signal()


def _emit_steals_bool_reference() -> bool:
    probe = _Probe()
    before = sys.getrefcount(True), sys.getrefcount(False)
    results = [probe.ping.emit() for _ in range(8)]
    after = sys.getrefcount(True), sys.getrefcount(False)
    stolen = (before[0] + results.count(True) - after[0]) + (before[1] + results.count(False) - after[1])
    del results  # each dropped result releases the reference emit() should have given us
    if stolen > 0:
        for _ in range(8):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(True))
        return True
    return False


EMIT_STEALS_BOOL_REFERENCE = _emit_steals_bool_reference()


def emit(signal, *args) -> None:
    """``signal.emit(*args)``, minus PySide's lost reference where it loses one."""
    result = signal.emit(*args)
    if EMIT_STEALS_BOOL_REFERENCE and isinstance(result, bool):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(result))
