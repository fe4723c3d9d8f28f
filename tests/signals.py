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


def ctrl_c_once_ready(args: list[str], ready: str, timeout: float = 30, *, signum: int = signal.SIGINT,
                      not_ready: tuple[str, ...] = (), settle: float = 0.0,
                      **popen) -> tuple[int, str, str | None]:
    """Start ``args`` as from a terminal, wait for the line ``ready`` on its stdout (earlier lines are
    skipped), wait ``settle`` s, send ``signum`` (Ctrl-C's SIGINT unless told) and wait for the exit:
    ``(returncode, the rest of stdout, stderr)``; stderr is None when ``popen`` sends it to stdout.

    Raises:
        AssertionError: the output ended, or a line in ``not_ready`` came, before ``ready``.
        subprocess.TimeoutExpired: no ``ready`` within 120 s, or the process runs on ``timeout`` s
            after the signal (it is killed either way).
    """
    import os
    import select
    import subprocess
    import time

    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True,
               "preexec_fn": sigint_from_a_terminal, **popen}
    proc = subprocess.Popen(args, **options)
    try:
        # Raw reads: a line buffered by the file object would be invisible to select.
        fd, pending, seen = proc.stdout.fileno(), b"", []
        deadline = time.monotonic() + 120  # a process that hangs before its ready line fails, not blocks the run
        while not seen or seen[-1] not in (ready, *not_ready, None):
            if b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                seen.append(line.decode(errors="replace"))
                continue
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise subprocess.TimeoutExpired(args, 120)
            chunk = os.read(fd, 65536)
            pending += chunk
            if not chunk:
                seen.append(None)
        if seen[-1] != ready:
            stderr = proc.stderr.read() if proc.stderr is not None and proc.poll() is not None else ""
            raise AssertionError(f"no {ready!r} line: {seen[-20:]} {stderr[-2000:]}")
        time.sleep(settle)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=timeout)
        out = pending.decode(errors="replace") + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err
