"""``smolchat serve`` (the app's entry point) and ``python -m engine serve``: settings the server
cannot use end with one ``error:`` line and exit 2, Ctrl-C with exit 130; never a traceback."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from tests.server.helpers import REPO, SMOLCHAT_SERVE, ServerProcess, wait_ready

ENTRIES = {"smolchat serve": SMOLCHAT_SERVE, "python -m engine serve": ("-m", "engine", "serve")}


@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
@pytest.mark.parametrize("args,message", [
    (["--port", "99999"], "a port is 0-65535, got 99999"),
    (["--port", "http"], "not a port number: 'http'"),
    (["--host", "0.0.0.0"], "--host 0.0.0.0 lets other machines in"),
], ids=["port out of range", "port not a number", "open host without a key"])
def test_unusable_settings_are_one_error_line(tiny_checkpoint, entry, args, message):
    proc = subprocess.run([sys.executable, *entry, "--model", str(tiny_checkpoint), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("args,message", [
    (["--max-body-mb", "-1"], "argument --max-body-mb: must be a size in MB above 0, got '-1'"),
    (["--max-body-mb", "nan"], "argument --max-body-mb: must be a size in MB above 0, got 'nan'"),
    (["--max-images", "-1"], "argument --max-images: must be 0 or more, got -1"),
    (["--max-queue", "0"], "argument --max-queue: must be 1 or more, got 0"),
    (["--context-size", "-5"], "argument --context-size: must be from 256 to 131072 tokens, or 0 for the model's "
                               "own, got -5"),
    (["--dtype", "int3"], "argument --dtype: unknown dtype 'int3' (use auto, float32, bfloat16, float16, fp32, "
                          "bf16, fp16)"),
    (["--weights", "int2"], "argument --weights: unknown weights 'int2' (use auto, int8, int4)"),
    (["--device", "tpu"], "error: --device: unknown device 'tpu' (use auto, cuda, cuda:N, mps or cpu)"),
    (["--host", "nonexistent.invalid", "--api-key", "k"], "error: --host nonexistent.invalid is not a name or "
                                                          "address this machine can listen on ("),
    (["--host", "192.0.2.1", "--api-key", "k"], "error: --host 192.0.2.1 is not an address of this machine"),
    # Said first, not "give --api-key" (which, given, led to this line: trial 73 F3).
    (["--host", "192.0.2.1"], "error: --host 192.0.2.1 is not an address of this machine"),
    (["--host", "nonexistent.invalid"], "error: --host nonexistent.invalid is not a name or address this machine"),
], ids=["negative body limit", "nan body limit", "negative image limit", "no queue", "negative context",
        "unknown dtype", "unknown weights", "unknown device", "host not found", "host not here",
        "host not here, no key", "host not found, no key"])
def test_limits_and_names_are_refused_before_an_address(tiny_checkpoint, capsys, args, message):
    """Trial 39: --max-body-mb -1 or --max-images -1 started a server that refused every request
    (even a text-only chat), --context-size -5 a traceback about ``max_tokens`` after the address,
    --dtype/--weights/--device typos only once the model loaded."""
    from server.cli import main

    try:
        code = main(["--model", str(tiny_checkpoint), "--port", "0", *args])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and message in err, err
    assert "Smolchat server:" not in out and "Traceback" not in err


def test_an_unknown_weights_value_in_the_environment_is_refused_before_an_address(tiny_checkpoint, capsys,
                                                                               monkeypatch):
    """Trial 57: ``SMOLCHAT_WEIGHTS=int3 smolchat serve`` printed its address and started serving before
    the load failed on it; ``--weights int3`` was refused up front."""
    from server.cli import main

    monkeypatch.setenv("SMOLCHAT_WEIGHTS", "int3")
    code = main(["--model", str(tiny_checkpoint), "--port", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and "error: $SMOLCHAT_WEIGHTS: unknown value 'int3' (use auto, int8, int4)" in err, err
    assert "Smolchat server:" not in out and "Traceback" not in err


def test_the_printed_address_and_the_context_note():
    from server.cli import _context_note, base_url

    assert base_url("::1", 8090) == "http://[::1]:8090/v1"  # "http://::1:8090/v1" is no URL
    assert base_url("127.0.0.1", 8090) == "http://127.0.0.1:8090/v1"
    # --context-size above the model's own was used as the model's own without a word.
    assert _context_note(100_000, 8192) == (" (a context of 8,192 tokens, the model's own: --context-size 100,000 "
                                            "is more than it holds)")
    assert _context_note(4096, 4096) == "" and _context_note(None, 8192) == ""


@pytest.mark.parametrize("sigint", ["default", "ignored"], ids=["from a terminal", "a background job"])
@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
def test_ctrl_c_exits_130_without_a_traceback(tiny_checkpoint, entry, sigint):
    """Ctrl-C stops the server with 130 also when it was started with SIGINT ignored (uvicorn still
    handles the signal, but its re-raise of it afterwards is then ignored: the exit was 0)."""
    server = ServerProcess(tiny_checkpoint, entry=entry, sigint=sigint)
    try:
        wait_ready(server.url, proc=server.proc)
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(20) == 130
        assert "Traceback" not in server.output(), server.output()[-2000:]
    finally:
        server.stop()


@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
def test_a_missing_model_folder_is_said_before_any_address(tmp_path, entry):
    """A folder that is not there fails before the server prints an address it would not serve."""
    proc = subprocess.run([sys.executable, *entry, "--model", str(tmp_path / "no-such-model"), "--port", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-2000:])
    assert proc.stderr.strip() == f"error: model folder not found: {tmp_path / 'no-such-model'}"
    assert "Smolchat server:" not in proc.stdout


@pytest.mark.parametrize("model,message", [
    ("", "error: --model is empty: give a model folder, a .gguf file or a Hub id"),
    ("missing.gguf", "error: model file not found: {tmp}/missing.gguf"),
], ids=["empty", "missing gguf file"])
def test_models_that_cannot_be_there_are_said_before_any_address(tmp_path, model, message):
    proc = subprocess.run([sys.executable, "-m", "engine", "serve", "--model", str(tmp_path / model) if model else "",
                           "--port", "0"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-2000:])
    assert proc.stderr.strip() == message.format(tmp=tmp_path) and "Smolchat server:" not in proc.stdout


def test_a_port_in_use_is_said_before_any_address(tiny_checkpoint):
    """uvicorn's own failure came after the address line, exit 3, without an ``error:`` line."""
    import socket

    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "engine", "serve", "--model", str(tiny_checkpoint),
                               "--port", str(port)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-2000:])
    assert proc.stderr.strip() == (f"error: port {port} on 127.0.0.1 is in use by another program: choose another "
                                   "with --port (0 picks a free one)")
    assert "Smolchat server:" not in proc.stdout


@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
def test_a_model_that_cannot_load_stops_the_server(tmp_path, entry):
    """A folder that exists but holds no model: the address says "loading", then one error line
    naming the failure and exit 2, instead of serving 503s forever."""
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    proc = subprocess.run([sys.executable, *entry, "--model", str(folder), "--port", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-2000:])
    assert f"; loading {folder}" in proc.stdout and "Model ready" not in proc.stdout
    assert f"error: the model failed to load: no safetensors weights in {folder}" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_the_address_then_ready_once_loaded(tiny_checkpoint):
    server = ServerProcess(tiny_checkpoint)
    try:
        wait_ready(server.url, proc=server.proc)
        lines = [line for line in server.output().splitlines() if line.startswith(("Smolchat server:", "Model ready"))]
        for _ in range(20):  # the ready line is printed on the server's next tick after /health says 200
            if len(lines) == 2:
                break
            time.sleep(0.1)
            lines = [line for line in server.output().splitlines()
                     if line.startswith(("Smolchat server:", "Model ready"))]
        assert lines[0] == f"Smolchat server: {server.url}/v1 (docs at /docs); loading {tiny_checkpoint}"
        assert re.fullmatch(r"Model ready \(\d+\.\d s\): requests are served now", lines[1]), lines
        assert len(lines) == 2
    finally:
        server.stop()


def page_faults(script: str, mode: str) -> float:
    """What ``script`` (formatted with the repository's path) prints, run as ``python -c script mode``
    in a fresh process: a mean count of page faults."""
    out = subprocess.run([sys.executable, "-c", script.format(repo=str(REPO)), mode],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


GROWING_BODIES = """
import resource, sys
sys.path.insert(0, {repo!r})
if sys.argv[1] == "tuned":
    from server.cli import SWITCH_INTERVAL_S, tune_process
    tune_process()
    assert sys.getswitchinterval() == SWITCH_INTERVAL_S
faults = []
for i in range(12):  # a conversation's request bodies: each a little larger than the last
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    body = bytearray(600_000 + 10_000 * i)
    faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    del body
print(sum(faults[2:]) / len(faults[2:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_the_server_process_reuses_freed_memory_for_a_growing_conversation():
    """``tune_process`` (what ``smolchat serve`` runs before serving): a 0.6 MB body a little larger
    than every one before gets memory freed by the last, not fresh pages (146 page faults each,
    measured as 0.4-0.9 ms of a follow-up's JSON parse), and the GIL's switch interval is set."""
    if page_faults(GROWING_BODIES, "as started") < 100:
        pytest.skip("this C library reuses the memory by itself")
    assert page_faults(GROWING_BODIES, "tuned") < 10


NEW_PHOTO_CONVERSATIONS = """
import asyncio, base64, io, json, os, resource, sys, tempfile
from pathlib import Path
sys.path.insert(0, {repo!r})
from PIL import Image
from pydantic_core import from_json
import server.media
from server.cli import tune_process
from server.config import ServerConfig
from server.media import MediaStore
tune_process()
if sys.argv[1] == "keeps the request's string":
    server.media._memo_copy = lambda url, fetched: url


def body(photo, turns):  # an OpenAI client's request: the whole conversation, the photo as a data URI
    url = "data:image/png;base64," + base64.b64encode(photo).decode()
    messages = [{{"role": "user", "content": [{{"type": "text", "text": "What is this?"}},
                                            {{"type": "image_url", "image_url": {{"url": url}}}}]}}]
    for _ in range(turns - 1):
        messages += [{{"role": "assistant", "content": "An answer. " * 30}}, {{"role": "user", "content": "Why?"}}]
    return json.dumps({{"model": "m", "messages": messages}}).encode()


def photo():  # noise: a PNG as large as its pixels (~0.35 MB)
    image = Image.frombytes("RGB", (340, 340), os.urandom(340 * 340 * 3))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


async def main():
    store = MediaStore(ServerConfig(), Path(tempfile.mkdtemp()))
    conversations = [(body(p, 1), body(p, 2)) for p in (photo() for _ in range(16))]
    faults = []
    for first, follow_up in conversations:  # a new conversation each time: two turns about a new photo
        for raw in (first, follow_up):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            chunks = [raw[i:i + 65536] for i in range(0, len(raw), 65536)]  # as the socket gives it
            value = from_json(b"".join(chunks))  # what the server's route does with the body
            del chunks
            url = value["messages"][0]["content"][1]["image_url"]["url"]
            path, pending = await store.begin_image(url, "messages[0].content[1]")
            if pending is not None:
                await store.confirm([pending])
            if raw is follow_up:
                assert pending is None  # the photo was found by its URL
                faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
            del value, url
    print(sum(faults[4:]) / len(faults[4:]))

asyncio.run(main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas: Linux only")
def test_a_follow_up_about_a_new_photo_gets_freed_memory_not_fresh_pages():
    """The store remembers each new photo's data URI (a follow-up re-sends it), as a copy made on its
    worker thread: the request's own string, kept on the event loop's heap, made the next larger body
    (each conversation's follow-up) take fresh pages, ~150 page faults (0.65 ms of a follow-up)."""
    if page_faults(NEW_PHOTO_CONVERSATIONS, "keeps the request's string") < 50:
        pytest.skip("this C library gives the larger body freed memory by itself")
    assert page_faults(NEW_PHOTO_CONVERSATIONS, "as shipped") < 10


def test_ctrl_c_twice_during_an_answer_still_stops_cleanly(tiny_checkpoint, tmp_path):
    """An impatient second Ctrl-C: exit 130, no traceback, and the server's temporary media folder
    removed (uvicorn's force exit, which the second Ctrl-C asked for, skipped the app's shutdown)."""
    import threading

    import httpx

    server = ServerProcess(tiny_checkpoint, env={"TMPDIR": str(tmp_path)}, sigint="default")
    try:
        wait_ready(server.url, proc=server.proc)
        assert [p.name.startswith("smolchat-media-") for p in tmp_path.iterdir()] == [True]
        body = {"model": "tiny-f32", "stream": True, "max_tokens": 4000, "ignore_eos": True,
                "messages": [{"role": "user", "content": "Count."}]}
        started = threading.Event()

        def stream() -> None:
            try:
                with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=30) as response:
                    for _ in response.iter_lines():
                        started.set()
            except httpx.HTTPError:
                pass
        client = threading.Thread(target=stream, daemon=True)
        client.start()
        assert started.wait(30)
        server.proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(20) == 130
        assert "Traceback" not in server.output(), server.output()[-3000:]
        assert list(tmp_path.iterdir()) == []
    finally:
        server.stop()


#: ``python -m engine serve`` whose model load blocks (as a large checkpoint's does), with a marker
#: printed by the interpreter's teardown (``atexit``).
SLOW_LOAD_SERVE = ("-c", """
import atexit, sys, time
import engine.service
from engine.__main__ import main

def slow_loader(model, options):
    print("load started", flush=True)
    time.sleep(60)

engine.service.default_loader = slow_loader
atexit.register(lambda: print("interpreter teardown", flush=True))
sys.exit(main(["serve", *sys.argv[1:]]))
""")


@pytest.mark.parametrize("sigint", ["default", "ignored"], ids=["from a terminal", "a background job"])
def test_ctrl_c_during_the_model_load_ends_the_process_at_once(tiny_checkpoint, tmp_path, sigint):
    """Ctrl-C while the engine thread is still inside the load: exit 130 after the app's shutdown
    (media folder removed), without the interpreter's teardown, which aborted the process on CUDA
    (SIGABRT, "terminate called without an active exception": 5 of 9 Ctrl-Cs in the first 0.7 s of
    a load on the H200, docs/BENCHMARKS.md session 35). The abort itself needs CUDA; here the
    teardown's own ``atexit`` marker shows whether it ran."""
    server = ServerProcess(tiny_checkpoint, env={"TMPDIR": str(tmp_path)}, entry=SLOW_LOAD_SERVE, sigint=sigint)
    try:
        deadline = time.monotonic() + 60
        while "load started" not in server.output() and time.monotonic() < deadline:
            assert server.proc.poll() is None, server.output()[-2000:]
            time.sleep(0.05)
        assert [p.name.startswith("smolchat-media-") for p in tmp_path.iterdir()] == [True]
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(20) == 130, server.output()[-2000:]
        out = server.output()
        assert "WARNING" not in out  # a stopped load still ending is no warning (trial 58): nothing is lost
        assert "interpreter teardown" not in out and "Traceback" not in out, out[-2000:]
        assert list(tmp_path.iterdir()) == []
    finally:
        server.stop()


def test_ctrl_c_after_the_load_tears_the_interpreter_down_as_usual(tiny_checkpoint):
    """The other side of the test above: with the engine thread idle the process ends normally
    (``atexit`` handlers run), so only a stop during a load skips the teardown."""
    entry = (SLOW_LOAD_SERVE[0], SLOW_LOAD_SERVE[1].replace("engine.service.default_loader = slow_loader", ""))
    server = ServerProcess(tiny_checkpoint, entry=entry, sigint="default")
    try:
        wait_ready(server.url, proc=server.proc)
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(20) == 130
        assert "interpreter teardown" in server.output()
    finally:
        server.stop()


def test_ctrl_c_before_uvicorn_handles_signals_leaves_no_media_folder(tiny_checkpoint, tmp_path):
    """A Ctrl-C in the moment between the "loading" line and uvicorn's own signal handlers stops the
    server before the app's lifespan, which removes the media folder: ``serve`` removes it then."""
    entry = ("-c", """
import sys
import server.runner
from engine.__main__ import main

def interrupted(self, *args, **kwargs):
    raise KeyboardInterrupt

server.runner.Server.run = interrupted
sys.exit(main(["serve", *sys.argv[1:]]))
""")
    server = ServerProcess(tiny_checkpoint, env={"TMPDIR": str(tmp_path)}, entry=entry)
    try:
        assert server.proc.wait(60) == 130, server.output()[-2000:]
        assert "loading" in server.output() and "Traceback" not in server.output(), server.output()[-2000:]
        assert list(tmp_path.iterdir()) == []
    finally:
        server.stop()


def test_the_port_listens_before_the_engine_is_imported(tiny_checkpoint, monkeypatch):  # noqa: F811
    """Trial 67 N3: an OpenAI client started with the server spent its retries on refused connections
    in the ~2 s of imports and checks before uvicorn listened: the socket listens from the start, the
    connection waits in its backlog, and it is the socket uvicorn serves."""
    import argparse
    import socket

    import server.cli

    seen = {}

    def instead(args, config, listener):
        with socket.create_connection(("127.0.0.1", config.port), timeout=5):  # accepted by the backlog
            seen["port"], seen["listener"] = config.port, listener.getsockname()[1]
        return 0
    monkeypatch.setattr(server.cli, "_serve", instead)
    parser = argparse.ArgumentParser()
    server.cli.add_arguments(parser)
    args = parser.parse_args(["--model", str(tiny_checkpoint), "--port", "0"])
    assert server.cli.serve(args) == 0
    assert seen["port"] == seen["listener"] > 0
