"""Against a real third-party server: llama.cpp's ``llama-server`` serving the tiny random SmolVLM
checkpoint converted to GGUF + mmproj by llama.cpp's own converter. The capabilities are read from
``/props`` and an image question streams back through RemoteBackend and through the window.

Marked ``llama_server`` (``.ci/run`` runs it). It needs the llama.cpp build that ``tools/build_llama_cpp.py``
caches under ``$SMOLCHAT_BENCH_CACHE`` (default ``~/.cache/smolchat-bench``); building it takes 10-20
minutes on two cores, so without a cached build the test skips and says why instead of failing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from app import remote_settings
from app.backends.remote import RemoteBackend, remote_spec
from app.backends.remote_http import Server, probe_capabilities
from engine.api import Attachment, DoneEvent, GenerationParams, TokenEvent
from tests.app.remote_fakes import wait_done
from tests.engine.conftest import _cache_root, tiny_checkpoint  # noqa: F401  (fixture)
from tests.server.helpers import free_port

pytestmark = pytest.mark.llama_server
LLAMA_VERSION = "0.3.36"  # tools/build_llama_cpp.py's llama-cpp-python version


def _bench_cache() -> Path:
    return Path(os.environ.get("SMOLCHAT_BENCH_CACHE", Path.home() / ".cache" / "smolchat-bench"))


def _binary() -> Path:
    return _bench_cache() / "llama.cpp" / "build" / "bin" / "llama-server"


def _converter() -> Path:
    tree = _bench_cache() / "src" / f"llama_cpp_python-{LLAMA_VERSION}" / "vendor" / "llama.cpp"
    return tree / "convert_hf_to_gguf.py"


@pytest.fixture(scope="module")
def gguf_pair(tmp_path_factory, tiny_checkpoint) -> tuple[Path, Path]:  # noqa: F811
    if not _binary().is_file():
        pytest.skip(f"llama-server is not built at {_binary()} (python -m tools.build_llama_cpp builds and caches "
                    "it in 10-20 minutes)")
    if not _converter().is_file():
        pytest.skip(f"llama.cpp's convert_hf_to_gguf.py is not at {_converter()}")
    pytest.importorskip("sentencepiece", reason="llama.cpp's converter imports sentencepiece")
    out = _cache_root(tmp_path_factory) / "tiny-f32-gguf-remote"
    text, mmproj = out / "SmolVLM-tiny-F32.gguf", out / "mmproj-SmolVLM-tiny-F32.gguf"
    out.mkdir(parents=True, exist_ok=True)
    for target, extra in ((text, []), (mmproj, ["--mmproj"])):
        if not target.is_file():
            cmd = [sys.executable, str(_converter()), str(tiny_checkpoint), "--outtype", "f32", "--outfile",
                   str(target), *extra]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr[-2000:]
    return text, mmproj


@pytest.fixture(scope="module")
def llama_server(gguf_pair):
    text, mmproj = gguf_pair
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log")  # noqa: SIM115
    proc = subprocess.Popen([str(_binary()), "-m", str(text), "--mmproj", str(mmproj), "--host", "127.0.0.1",
                             "--port", str(port), "-c", "2048", "-t", "2", "--no-webui"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "llama-server not ready after 120 s"
            time.sleep(0.3)
        model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        yield url, model
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def test_capabilities_from_props_and_an_image_answer_streams(llama_server, images_dir):
    url, model = llama_server
    caps, sources = probe_capabilities(Server("llama", url), model)
    assert caps.vision is True and sources["vision"] == "/props"
    assert caps.max_context == 2048 and sources["context"] == "/props"  # -c 2048, never a guessed 4096

    backend = RemoteBackend(Server("llama", url), stall_timeout=60)
    loaded = []
    backend.load(model, {}, lambda info, err: loaded.append((info, err)))
    deadline = time.monotonic() + 30
    while not loaded:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert loaded[0][1] is None and loaded[0][0].capabilities.vision is True
    events = []
    backend.send("What is in the cup?", [Attachment(str(images_dir / "coffee.png"))],
                 GenerationParams(max_new_tokens=8, ignore_eos=True, image_detail="fast"), events.append)
    wait_done(events, 120)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "length", done
    assert done.stats.generated_tokens == 8 and sum(isinstance(e, TokenEvent) for e in events) >= 1
    assert done.stats.prompt_tokens > 64  # the image's tokens are part of the prompt: it was not dropped
    assert backend.close()


def test_window_through_llama_server(qtbot, make_window, fake_session, llama_server, png):
    url, model = llama_server
    remote_settings.save_servers([{"name": "llama", "url": url}])
    win = make_window(fake_session)
    win.load_model(remote_spec("llama", model))
    qtbot.waitUntil(lambda: win.model_info.get("backend") == "remote:llama" and win.controller.ready, timeout=30_000)
    win.generation_params = {"max_new_tokens": 4, "ignore_eos": True}
    win.composer.setPlainText("Describe the image.")
    win.attachments.add(str(png))
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        win.send_message()
    assert finished.args[0]["finish_reason"] == "length" and finished.args[0]["generated_tokens"] == 4
    footer = win.transcript.widgets()[-1].footer()
    assert footer.startswith("stopped at the token limit (length) · TTFT ") and " / 4 generated tokens" in footer
    assert finished.args[0]["prompt_tokens"] > 64  # usage from llama-server, the image's tokens included
