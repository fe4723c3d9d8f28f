"""Entry point: ``smolchat [--model DIR_OR_REPO] [--device ...] [--dtype ...]``; ``smolchat serve ...`` runs
the local OpenAI-compatible server instead of the window (``server.cli``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from PySide6.QtCore import QObject, QSocketNotifier, QTimer, Slot
from PySide6.QtWidgets import QApplication

from app.application import create_app
from app.main_window import MainWindow


def model_argument(value: str) -> str:
    """A local model folder as an absolute path (it is remembered for the next start, which may run
    from another folder); anything else (a Hub id) as given."""
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="smolchat", description="Private, local multimodal chat.",
                                     epilog="smolchat serve --model DIR_OR_REPO_OR_GGUF [...] runs the local "
                                            "OpenAI-compatible server instead of the window (smolchat serve --help).")
    parser.add_argument("--model", metavar="DIR_OR_REPO", type=model_argument,
                        help="model folder or Hugging Face repo id")
    parser.add_argument("--device", choices=["cuda", "mps", "cpu"], help="default: the best available")
    parser.add_argument("--dtype", help="e.g. float32 or bfloat16 (default: chosen for the device)")
    parser.add_argument("--self-test", action="store_true",
                        help="headless check: answer one built-in image question, print JSON, exit "
                             "(see smolchat --self-test --help)")
    return parser.parse_args(argv)


class StartupReport(QObject):
    """Writes startup times to ``out`` (JSON) and quits once the model is ready (or failed): used by
    ``bench/startup.py``. Times are wall seconds (``time.time()``) since ``SMOLCHAT_STARTUP_T0``, which
    the launching process sets just before it starts this one (else: since this object was made).

    ``window_shown_s``: the window was shown and the event loop ran once (it takes input);
    ``model_ready_s``: the backend reported the model loaded (the slots run in the GUI thread).
    """

    def __init__(self, app: QApplication, window: MainWindow, out: Path):
        super().__init__(window)
        self.app, self.out = app, out
        try:
            self.t0 = float(os.environ.get("SMOLCHAT_STARTUP_T0") or time.time())
        except ValueError:  # not a time: measure from now rather than fail to start
            self.t0 = time.time()
        self.times: dict = {"window_shown_s": None}
        QTimer.singleShot(0, self._window_shown)
        window.controller.model_loaded.connect(self._ready)
        window.controller.model_load_failed.connect(self._failed)

    @Slot()
    def _window_shown(self) -> None:
        self.times["window_shown_s"] = time.time() - self.t0

    @Slot(dict)
    def _ready(self, info: dict) -> None:
        self._finish({"model_ready_s": time.time() - self.t0, "device": info.get("device"),
                      "dtype": info.get("dtype")})

    @Slot(str)
    def _failed(self, message: str) -> None:
        self._finish({"error": message})

    def _finish(self, fields: dict) -> None:
        if self.times["window_shown_s"] is None:
            # A fast backend can report before the zero-delay timer ran; we are in the event loop now.
            self._window_shown()
        self.times.update(fields)
        self.out.write_text(json.dumps(self.times), encoding="utf-8")
        self.app.quit()


def close_on_signals(app: QApplication, window: MainWindow) -> None:
    """Ctrl-C in the terminal that started the app (SIGINT) and SIGTERM (``kill``, a session ending)
    close the window as its close button does (an answer is kept, marked cancelled; the conversation
    store closed); the app then exits with 128 + the signal's number (130, 143).

    Python runs a signal's handler only between bytecodes, and Qt's event loop runs none while it
    waits: the C-level handler's byte on :func:`signal.set_wakeup_fd`'s socket wakes it through a
    QSocketNotifier. Without this, a Ctrl-C raised KeyboardInterrupt inside whichever slot ran next
    (a traceback, that slot's work left half done) and the app went on running. A signal that was
    ignored when the process started (a shell's background job) stays ignored."""
    def close(signum: int, frame) -> None:
        # Only scheduled here: the handler runs inside whatever Python code was running.
        QTimer.singleShot(0, lambda: (window.close(), app.exit(128 + signum)))

    handled = [sig for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))
               if signal.getsignal(sig) is default]
    if not handled:
        return
    try:
        wake_read, wake_write = socket.socketpair()
        for end in (wake_read, wake_write):
            end.setblocking(False)
        signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
    except (OSError, ValueError):  # no socket pair here: the handlers still run at the next slot
        wake_read = wake_write = None
    if wake_read is not None:
        notifier = QSocketNotifier(wake_read.fileno(), QSocketNotifier.Type.Read, app)

        def drain() -> None:
            with contextlib.suppress(OSError):
                wake_read.recv(64)

        notifier.activated.connect(drain)
        app._signal_wakeup = (wake_read, wake_write, notifier)  # kept alive with the app
    for sig in handled:
        signal.signal(sig, close)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # headless: the HTTP server, no window
        from server.cli import main as serve_main

        return serve_main(argv[1:])
    if "--self-test" in argv:  # headless: no QApplication, no display needed
        from app.self_test import main as self_test_main

        return self_test_main([a for a in argv if a != "--self-test"])
    args = parse_args(argv)
    app = create_app(sys.argv[:1])
    window = MainWindow(model_path=args.model, device=args.device, dtype=args.dtype)
    window.show()  # before the model is loaded: loading runs in the engine thread
    close_on_signals(app, window)
    report = os.environ.get("SMOLCHAT_STARTUP_REPORT")
    if report:
        window._startup_report = StartupReport(app, window, Path(report))
    code = app.exec()
    if not window.shutdown():
        # The engine thread is still inside a torch call (e.g. a model load) after ~1 s: interpreter
        # teardown beside it can abort the process. Everything is saved and closed by now.
        from engine.service import exit_process

        exit_process(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
