"""``preexec_fn`` values for test subprocesses that receive signals.

A process started from a background job (``cmd &`` in a non-interactive shell, as CI may run the
tests) inherits SIGINT ignored; one started from a terminal gets the default. A test that sends
Ctrl-C gives its subprocess the state it means to test, whatever started the tests.
"""

from __future__ import annotations

import signal


def sigint_from_a_terminal() -> None:
    """SIGINT at its default, as in a process started from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sigint_from_a_background_job() -> None:
    """SIGINT ignored, as in a process a non-interactive shell started in the background."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
