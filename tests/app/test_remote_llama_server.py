"""Against a real third-party server: llama.cpp's ``llama-server`` serving the tiny random SmolVLM
checkpoint converted to GGUF + mmproj by llama.cpp's own converter. The capabilities are read from
``/props`` and an image question streams back through RemoteBackend and through the window.

Marked ``llama_server`` (``.ci/run`` runs it). It needs the llama.cpp build that ``tools/build_llama_cpp.py``
caches under ``$SMOLCHAT_BENCH_CACHE`` (default ``~/.cache/smolchat-bench``); building it takes 10-20
minutes on two cores, so without a cached build the test skips and says why instead of failing.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from app import remote_settings
from app.backends.remote import RemoteBackend, remote_spec
from app.backends.remote_http import Server, probe_capabilities
from engine.api import Attachment, DoneEvent, GenerationParams, HistoryMessage, TokenEvent, answer_room
from tests.app.remote_fakes import wait_done
from tests.engine.conftest import llama_cpp_source, smolvlm_gguf_pair, tiny_checkpoint  # noqa: F401  (fixtures)
from tests.server.helpers import free_port
from tools.build_llama_cpp import cache_root

pytestmark = pytest.mark.llama_server


@pytest.fixture(scope="module")
def llama_binary() -> Path:
    """The cached llama-server build, else a skip that says how to get one."""
    binary = cache_root() / "llama.cpp" / "build" / "bin" / "llama-server"
    if not binary.is_file():
        pytest.skip(f"llama-server is not built at {binary} (python -m tools.build_llama_cpp builds and caches "
                    "it in 10-20 minutes)")
    return binary


@pytest.fixture(scope="module")
def llama_server(llama_binary, smolvlm_gguf_pair):  # noqa: F811 - the binary first: no conversion without it
    text = smolvlm_gguf_pair / "SmolVLM-tiny-F32.gguf"
    mmproj = smolvlm_gguf_pair / "mmproj-SmolVLM-tiny-F32.gguf"
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log")  # noqa: SIM115
    proc = subprocess.Popen([str(llama_binary), "-m", str(text), "--mmproj", str(mmproj), "--host", "127.0.0.1",
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


def _loaded(url: str, model: str):
    """A RemoteBackend on the llama-server at ``url`` with ``model`` loaded: (backend, info, error)."""
    backend = RemoteBackend(Server("llama", url), stall_timeout=60)
    loaded = []
    backend.load(model, {}, lambda info, err: loaded.append((info, err)))
    deadline = time.monotonic() + 30
    while not loaded:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return backend, *loaded[0]


def test_capabilities_from_props_and_an_image_answer_streams(llama_server, images_dir):
    url, model = llama_server
    caps, sources = probe_capabilities(Server("llama", url), model)
    assert caps.vision is True and sources["vision"] == "/props"
    assert caps.max_context == 2048 and sources["context"] == "/props"  # -c 2048, never a guessed 4096

    backend, info, error = _loaded(url, model)
    assert error is None and info.capabilities.vision is True
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


def test_a_long_chat_keeps_the_recent_exchanges_that_fit_llama_servers_context(llama_server):
    """Trial 55: against llama-server (-c 2048) a 150-exchange chat was sent with none of its history
    (doubling the exchanges left out at each refusal overshot to all of them). The refusal's numbers
    (``n_prompt_tokens``, ``n_ctx``) say how many to leave out: the prompt sent fills most of the
    context less the answer's room."""
    url, model = llama_server
    backend, _, _ = _loaded(url, model)
    history = []
    for i in range(150):
        history += [HistoryMessage("user", f"Question {i}: what does the note on page {i} of the report say?"),
                    HistoryMessage("assistant", f"Page {i} says the figures for week {i} were checked twice "
                                                "and the totals agree with the ledger.")]
    backend.set_history(history)
    events = []
    params = GenerationParams(max_new_tokens=64, ignore_eos=True)
    backend.send("Summarize our chat in one sentence.", [], params, events.append)
    wait_done(events, 180)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "length", done
    room = answer_room(64, 2048)
    assert 0 < done.stats.dropped_turns < len(history)
    assert 0.85 * (2048 - room) < done.stats.prompt_tokens <= 2048 - room, done.stats
    assert backend.close()


def test_a_typed_text_is_counted_by_llama_servers_tokenizer(llama_server):
    """Trial 56: llama-server answers vLLM's /tokenize shape (``prompt``) with ``{"tokens": []}``, read as
    0 tokens, so a paste past the context was never said to be too long before Send."""
    from app.backends.remote_http import count_text_tokens

    url, model = llama_server
    text = "Smolchat counts a long paste before it is sent. " * 40
    own = httpx.post(f"{url}/tokenize", json={"content": text}, timeout=30).json()["tokens"]
    assert len(own) > 100
    assert count_text_tokens(Server("llama", url), model, text) == len(own)
