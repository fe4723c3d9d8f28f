"""The ``smolchat`` program (and ``python -m app``): :func:`app.main.main`, with a Ctrl-C before the
window exists ending it quietly.

:class:`app.main.SignalsClose` handles Ctrl-C once the window is being built. Before that (about a
second of importing Qt, the window's modules and, for ``serve``, the engine) Python's default
handler raised KeyboardInterrupt out of an import and printed its traceback. Nothing has been
started or written then, so the program just ends with 130, as a shell reports a Ctrl-C.
"""

from __future__ import annotations

import os
import sys


def _interrupted() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a normal exit: the interrupted import may have left an extension module half initialised,
    # and interpreter teardown then runs its finalizers.
    os._exit(130)


def main() -> int:
    """Run the app (or the ``serve`` / ``--self-test`` commands) on ``sys.argv``; its exit status."""
    try:
        from app.main import main as run
    except KeyboardInterrupt:
        _interrupted()
    try:
        return run()
    except KeyboardInterrupt:  # between the imports and the window's signal handling (QApplication's start)
        _interrupted()
