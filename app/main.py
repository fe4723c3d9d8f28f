"""Entry point: ``smolchat [--model DIR_OR_REPO] [--device ...] [--dtype ...] [FILE ...]``; ``smolchat
serve ...`` runs the local OpenAI-compatible server instead of the window (``server.cli``). Files (a
file manager's "Open with Smolchat": the desktop entry's ``%F``) are attached to the message box, or
handed to the window already open on the data folder (:mod:`app.single_instance`)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QSocketNotifier, QTimer, Slot
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from app import safe_files
from app.application import create_app
from app.main_window import MainWindow
from app.paths import data_dir
from app.single_instance import InstanceListener, already_open_text, hand_over, take_lock
from engine.api import smolchat_version


def model_argument(value: str) -> str:
    """A local model folder as an absolute path (it is remembered for the next start, which may run
    from another folder); anything else (a Hub id) as given."""
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def file_argument(value: str) -> str:
    """A file to attach as an absolute path (the running window may have another working folder); a
    ``file://`` URL (what some desktops pass) as its path."""
    if value.startswith("file://"):
        from urllib.parse import unquote, urlparse

        value = unquote(urlparse(value).path)
    return os.path.abspath(Path(value).expanduser())  # "../x.png" as /folder/x.png, a link's own name kept


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="smolchat", description="Private, local multimodal chat.",
                                     epilog="smolchat serve --model DIR_OR_REPO_OR_GGUF [...] runs the local "
                                            "OpenAI-compatible server instead of the window (smolchat serve --help).")
    parser.add_argument("--model", metavar="DIR_OR_REPO", type=model_argument,
                        help="model folder, GGUF file or Hugging Face repo id")
    parser.add_argument("--version", action="version", version=f"smolchat {smolchat_version()}")
    parser.add_argument("--device", choices=["auto", "cuda", "mps", "cpu"],
                        help="auto (default: the best available), cuda, mps or cpu")
    # Checked here, as --device is: a dtype the engine refuses would open the window only to fail there.
    parser.add_argument("--dtype", type=str.lower, choices=["auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16"],
                        metavar="{auto,float32,bfloat16,float16}",
                        help="auto (default: chosen for the device), float32, bfloat16 or float16")
    parser.add_argument("--self-test", action="store_true",
                        help="headless check: answer one built-in image question, print JSON, exit "
                             "(see smolchat --self-test --help)")
    parser.add_argument("files", nargs="*", metavar="FILE", type=file_argument,
                        help="photos, videos, PDFs or folders to attach to the message box (given to the "
                             "window already open, if one is)")
    return parser.parse_intermixed_args(argv)  # files before and after the options alike


class FileOpenEvents(QObject):
    """macOS hands a file to an app that is open, or that it opens for the file (Finder's Open With, a
    file dropped on the Dock icon), as Qt's FileOpen event instead of the command line: each is
    attached as a command line's files are (``open_files``)."""

    def __init__(self, open_files, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.open_files = open_files

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.FileOpen:
            path = event.file() or event.url().toLocalFile()
            if path:
                self.open_files([file_argument(path)])
                return True
        return False


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
        safe_files.write_text(self.out, json.dumps(self.times))
        self.app.quit()


class SignalsClose:
    """Within this block, Ctrl-C in the terminal that started the app (SIGINT) and SIGTERM (``kill``,
    a session ending) close the attached window as its close button does (an answer is kept, marked
    interrupted; the conversation store closed; an open modal dialog closed first), and the event loop
    ends with 128 + the signal's number (130, 143). A signal before the window is attached closes it
    as soon as it is; later signals change nothing while it closes.

    Python runs a signal's handler only between bytecodes, and Qt's event loop runs none while it
    waits: the C-level handler's byte on :func:`signal.set_wakeup_fd`'s socket wakes it through a
    QSocketNotifier. Without this, a Ctrl-C raised KeyboardInterrupt inside whichever slot ran next
    (a traceback, that slot's work left half done) and the app went on running, and SIGTERM ended it
    without closing the store. A signal ignored when the process started (a shell's background job)
    stays ignored. The handlers and the wake-up socket are put back as they were on leaving."""

    def __init__(self, app: QApplication):
        self.app = app
        self.window: QWidget | None = None
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._wakeup: tuple | None = None

    def __enter__(self) -> SignalsClose:
        for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
            if signal.getsignal(sig) is default:
                self._previous[sig] = signal.signal(sig, self._handle)
        if self._previous:
            try:
                wake_read, wake_write = socket.socketpair()
                for end in (wake_read, wake_write):
                    end.setblocking(False)
                previous_fd = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
            except (OSError, ValueError):  # no socket pair here: the handlers still run at the next slot
                return self
            notifier = QSocketNotifier(wake_read.fileno(), QSocketNotifier.Type.Read, self.app)
            notifier.activated.connect(lambda *_: self._drain(wake_read))
            self._wakeup = (wake_read, wake_write, notifier, previous_fd)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self._wakeup is not None:
            wake_read, wake_write, notifier, previous_fd = self._wakeup
            signal.set_wakeup_fd(previous_fd)
            notifier.setEnabled(False)
            notifier.deleteLater()
            wake_read.close()
            wake_write.close()

    def attach(self, window: QWidget) -> None:
        self.window = window
        if self.signum is not None:
            QTimer.singleShot(0, self._close)

    @staticmethod
    def _drain(wake_read: socket.socket) -> None:
        with contextlib.suppress(OSError):
            wake_read.recv(64)

    def _handle(self, signum: int, frame) -> None:
        # Runs inside whatever Python code was running: only note it and schedule the close.
        if self.signum is None:
            self.signum = signum
            if self.window is not None:
                QTimer.singleShot(0, self._close)

    def _close(self) -> None:
        modal = QApplication.activeModalWidget()
        if modal is not None and modal is not self.window:
            modal.close()
        self.window.close()
        self.app.exit(128 + self.signum)


#: Modules the window's first use of a dialog imports, imported on a thread of their own a moment after
#: the window shows: on the UI thread the first model manager took 0.2 s to open on an idle machine,
#: 0.5-1.2 s while an answer streamed (trial 72 F3), mostly huggingface_hub's file_download.
WARM_IMPORTS = ("huggingface_hub.file_download",)
WARM_AFTER_MS = 3_000  # after the window's first paint and the model load's start


def warm_imports() -> threading.Thread:
    """Import :data:`WARM_IMPORTS` on a daemon thread (one not installed is skipped); returns it."""
    def run() -> None:
        for name in WARM_IMPORTS:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
    thread = threading.Thread(target=run, name="WarmImports", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # run as the program, not by a test or another program in process
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # headless: the HTTP server, no window
        from server.cli import main as serve_main

        return serve_main(argv[1:])
    if "--self-test" in argv:  # headless: no QApplication, no display needed
        from app.self_test import main as self_test_main
        from engine.service import ctrl_c_exits_process

        # It runs torch on this thread: as the command line, Ctrl-C ends it at once with 130.
        with ctrl_c_exits_process(restore=False) if program else contextlib.nullcontext():
            return self_test_main([a for a in argv if a != "--self-test"])
    args = parse_args(argv)
    app = create_app(sys.argv[:1])
    lock, already_open = take_lock(data_dir())
    if already_open:
        taken = hand_over(data_dir(), args.files, model=args.model)
        if taken is not None:
            given = ("its window was brought to the front." if not args.files else
                     "its window was given the files (it says there what it attached)." if taken == len(args.files)
                     else f"its window was given the first {taken:,} of the {len(args.files):,} files, as many as "
                          "one hand-over takes.")
            if args.model:  # (trial 60: the model given was not loaded, without a word)
                given += f" It loads {args.model} unless that model is already in use (it says there if it cannot)."
            print(f"Smolchat is already open with the conversations in {data_dir()}: {given}", file=sys.stderr)
            return 0
        said = already_open_text(data_dir())
        print(said, file=sys.stderr)
        QMessageBox.information(None, "Smolchat", said)
        return 0
    with SignalsClose(app) as signals:
        window = MainWindow(model_path=args.model, device=None if args.device == "auto" else args.device,
                            dtype=None if args.dtype == "auto" else args.dtype)
        window.show()  # before the model is loaded: loading runs in the engine thread
        QTimer.singleShot(WARM_AFTER_MS, warm_imports)
        signals.attach(window)
        if lock is not None:  # (a folder that cannot be written has no lock, and so no hand-over)
            window.instance_listener = InstanceListener(data_dir(), window.open_files, window, on_model=window.open_model)
        window.file_open_events = FileOpenEvents(window.open_files, window)
        app.installEventFilter(window.file_open_events)
        if args.files:
            QTimer.singleShot(0, lambda: window.open_files(args.files))
        report = os.environ.get("SMOLCHAT_STARTUP_REPORT")
        if report:
            window._startup_report = StartupReport(app, window, Path(report))
        code = app.exec()
        if not window.shutdown():
            # The engine thread is still inside a torch call (e.g. a model load) after ~1 s: interpreter
            # teardown beside it can abort the process. Everything is saved and closed by now.
            from engine.service import exit_process

            exit_process(code)
    if lock is not None:
        lock.unlock()
    return code


if __name__ == "__main__":
    sys.exit(main())
