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


def ctrl_c_once_ready(args: list[str], ready: str, timeout: float = 30, **popen) -> tuple[int, str, str]:
    """Start ``args`` as from a terminal, wait for the line ``ready`` on its stdout, send SIGINT and
    wait for the exit: ``(returncode, rest of stdout, stderr)``.

    Raises:
        AssertionError: the first line is not ``ready`` (the process failed before it).
        subprocess.TimeoutExpired: it runs on ``timeout`` s after the signal (the process is killed).
    """
    import select
    import subprocess

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_from_a_terminal, **popen)
    try:
        # A process that hangs before its ready line fails the test instead of blocking the run.
        if not select.select([proc.stdout], [], [], 120)[0]:
            raise subprocess.TimeoutExpired(args, 120)
        line = proc.stdout.readline()
        assert line == ready + "\n", (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err
