"""The ``smolchat`` program (and ``python -m app``): :func:`app.main.main`, with a Ctrl-C before the
window exists ending it quietly.

:class:`app.main.SignalsClose` handles Ctrl-C once the window is being built. Before that (about a
second of importing Qt and the window's modules; ``serve`` and ``--self-test`` import theirs after,
and handle Ctrl-C themselves) Python's default
handler raised KeyboardInterrupt inside an import: it printed a traceback, or it was lost (caught
somewhere in the imports: in 6 of 60 Ctrl-Cs at random moments of a start on the dev VM the window
came up anyway and the app ran on). Nothing has been started or written then, so the program ends
with 130, as a shell reports a Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted(*_) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a normal exit: the interrupted import may have left an extension module half initialised,
    # and interpreter teardown then runs its finalizers.
    os._exit(130)


def main() -> int:
    """Run the app (or the ``serve`` / ``--self-test`` commands) on ``sys.argv``; its exit status."""
    # A handler that exits from wherever Python is (a raised KeyboardInterrupt can be caught and
    # dropped), only while importing: the commands and the window install their own after (they look
    # for the default handler), and a SIGINT ignored from the start (a background job) stays ignored.
    early = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if early:
        signal.signal(signal.SIGINT, _interrupted)
    try:
        from app.main import main as run
    finally:
        if early:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run()
    except KeyboardInterrupt:  # between the imports and the window's own handling (QApplication's start)
        _interrupted()
