"""End to end against our own server (``python -m engine serve`` on the tiny model, in a subprocess,
with an API key): the window asks about an image, streams, stops and regenerates; the CLI does the same
with ``generate --server``. Capabilities come from ``/v1/model/info``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from app import remote_settings
from app.backends.remote import remote_spec
from app.backends.remote_http import Server, probe_capabilities
from tests.engine.conftest import tiny_checkpoint  # noqa: F401  (fixture)
from tests.server.helpers import REPO, ServerProcess, wait_ready

KEY = "own-server-key"


@pytest.fixture(scope="module")
def own_server(tiny_checkpoint):  # noqa: F811
    proc = ServerProcess(tiny_checkpoint, "--api-key", KEY, "--max-queue", "4")
    try:
        wait_ready(proc.url, proc=proc.proc)
        models = httpx.get(f"{proc.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()
        proc.model_id = models["data"][0]["id"]
        yield proc
    finally:
        proc.stop()


def test_capabilities_come_from_model_info(own_server):
    caps, sources = probe_capabilities(Server("own", own_server.url, KEY), own_server.model_id)
    assert caps.vision is True and caps.max_context > 0
    assert sources == {"vision": "/v1/model/info", "context": "/v1/model/info"}


def test_window_image_question_streams_stops_and_regenerates(qtbot, make_window, fake_session, own_server, images_dir):
    remote_settings.save_servers([{"name": "own", "url": own_server.url}])
    remote_settings.KEYS.set("own", KEY)  # no keyring on the test machine: kept for the session
    win = make_window(fake_session)
    win.load_model(remote_spec("own", own_server.model_id))
    qtbot.waitUntil(lambda: win.model_info.get("backend") == "remote:own" and win.controller.ready, timeout=20_000)
    assert win.model_info["capabilities"]["vision"] is True

    win.generation_params = {"max_new_tokens": 6, "ignore_eos": True}
    win.composer.setPlainText("What is in the cup?")
    win.attachments.add(str(images_dir / "coffee.png"))
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        win.send_message()
    result = finished.args[0]
    assert result["finish_reason"] == "length" and result["generated_tokens"] == 6, result
    assert result["prompt_tokens"] > 64 and result["engine"] == "remote:own"  # the image's tokens included
    first = win.transcript.widgets()[-1].text
    assert first

    # A long answer, stopped after its first tokens: kept, marked cancelled.
    win.generation_params = {"max_new_tokens": 2000, "ignore_eos": True}
    win.composer.setPlainText("Describe it at length.")
    win.send_message()
    qtbot.waitUntil(lambda: len(win.transcript.last_assistant().text) > 0, timeout=60_000)
    with qtbot.waitSignal(win.answer_finished, timeout=5000) as stopped:
        win.stop()
    assert stopped.args[0]["finish_reason"] == "cancelled"
    assert win.store.messages(win.keeper.current_id)[-1].status == "cancelled"

    # Regenerate the first answer: greedy, so the same text comes back from the same history.
    win.generation_params = {"max_new_tokens": 6, "ignore_eos": True}
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as again:
        win._on_message_action("regenerate", 1)
    assert again.args[0]["finish_reason"] == "length"
    assert [m.role for m in win.store.messages(win.keeper.current_id)] == ["user", "assistant"]
    assert win.transcript.widgets()[-1].text == first


def test_cli_generate_against_the_server(own_server, images_dir):
    cmd = [sys.executable, "-m", "engine", "generate", "--server", own_server.url, "--model", own_server.model_id,
           "--image", str(images_dir / "coffee.png"), "--prompt", "What is in the cup?", "--max-new-tokens", "5",
           "--ignore-eos", "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "SMOLCHAT_API_KEY": KEY}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    tokens, done = lines[:-1], lines[-1]
    assert all(t["type"] == "token" and t["id"] is None for t in tokens) and len(tokens) >= 1
    assert done["type"] == "done" and done["finish_reason"] == "length" and done["generated_tokens"] == 5
    assert done["prompt_tokens"] > 64 and done["ttft_s"] > 0

    bad = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**env, "SMOLCHAT_API_KEY": "wrong"})
    assert bad.returncode == 2 and "401 Unauthorized: the API key is missing or wrong" in bad.stderr
    assert bad.stderr.count("\n") == 1  # one line, as for every bad input


def test_the_servers_tokenize_counts_text_as_its_tokenizer(own_server, tiny_checkpoint):  # noqa: F811
    """Smolchat's own server answers the window's count (vLLM's /tokenize shape): the model's tokens."""
    from app.backends.remote_http import count_text_tokens
    from engine.tokenizer import Tokenizer

    text = "The quick brown fox jumps over the lazy dog. " * 50 + "日本語 too"
    expected = len(Tokenizer.from_pretrained(tiny_checkpoint).encode_aside(text))
    assert expected > 400
    assert count_text_tokens(Server("own", own_server.url, KEY), own_server.model_id, text) == expected
    assert count_text_tokens(Server("own", own_server.url, "wrong key"), own_server.model_id, text) == -1
