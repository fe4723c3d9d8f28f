"""Helpers for the server tests: free ports, a server subprocess, an in-process uvicorn thread, images."""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.signals import sigint_from_a_background_job, sigint_from_a_terminal

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def data_uri(path: Path | str, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(Path(path).read_bytes()).decode()}"


def png_bytes(size=(32, 24), color=(200, 30, 30), fmt="PNG", noise: bool = False) -> bytes:
    """A small image file; ``noise`` makes it incompressible (a cut lands inside the pixel data)."""
    from PIL import Image

    img = Image.effect_noise((64, 64), 80).convert("RGB") if noise else Image.new("RGB", size, color)
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def animation_bytes(frames: int = 6, fmt: str = "GIF", size=(48, 32), duration_ms: int = 250) -> bytes:
    """An animated image file (``frames`` frames of different colours, ``duration_ms`` each; one
    frame: a still image) made with Pillow."""
    from PIL import Image

    pictures = [Image.new("RGB", size, (40 * i % 256, 255 - 40 * i % 256, 90)) for i in range(frames)]
    buf = io.BytesIO()
    pictures[0].save(buf, fmt, save_all=frames > 1, append_images=pictures[1:], duration=duration_ms, loop=0)
    return buf.getvalue()


def wait_ready(url: str, timeout: float = 90.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout} s")


#: ``smolchat serve`` (the program's entry point ``app.launch``: ``app.main`` hands ``serve`` to ``server.cli``).
SMOLCHAT_SERVE = ("-c", "import sys; from app.launch import main; sys.exit(main())", "serve")


class ServerProcess:
    """``python -m engine serve`` (or ``entry``: the arguments after the interpreter that start a
    server, e.g. :data:`SMOLCHAT_SERVE`) in a subprocess on a free loopback port."""

    def __init__(self, model: Path, *args: str, env: dict | None = None, entry: tuple = ("-m", "engine", "serve"),
                 sigint: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # A file, not a pipe: a pipe nobody reads would block the server once it fills.
        self.log = tempfile.NamedTemporaryFile("w+", prefix="smolchat-server-", suffix=".log")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, *entry, "--model", str(model), "--port", str(self.port),
             "--log-level", "warning", *args],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            # A process started from a background job inherits SIGINT ignored; a terminal's does not.
            # sigint "default" gives the server a terminal's, "ignored" a background job's, whatever
            # started the tests (None: as inherited).
            preexec_fn={"default": sigint_from_a_terminal, "ignored": sigint_from_a_background_job, None: None}[sigint])

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


class ThreadServer:
    """An ASGI app served by uvicorn on a thread of this process (fake engines, in-process checks)."""

    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
