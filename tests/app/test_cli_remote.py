"""``python -m engine generate --server``: what the command line sends a server and how it ends (trial 71)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.app.remote_fakes import FakeOpenAI

REPO = Path(__file__).resolve().parents[2]
VIDEO_MODEL = {"data": [{"model_name": "ok", "model_info": {"supports_vision": True, "supports_video": True}}]}


def _cli(url: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "engine", "generate", "--server", url, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture
def clip(tmp_path):
    pytest.importorskip("av")
    from tests.engine.videos import solid, write_video

    return write_video(tmp_path / "walk.mp4", (solid(32, 32, 8 * i) for i in range(8)), rate=2)


def test_videos_and_images_go_to_the_server_and_local_options_are_said_to_be_ignored(tmp_path, clip):
    """Trial 71 F1: ``--video`` was never sent (the answer described a video nobody sent, exit 0); F5:
    ``--device`` and the other options for a local model were taken without a word."""
    photo = tmp_path / "red.png"
    Image.new("RGB", (40, 30), (200, 0, 0)).save(photo)
    with FakeOpenAI(model_info=VIDEO_MODEL) as fake:
        proc = _cli(fake.url, "--model", "ok", "--video", str(clip), "--image", str(photo), "--prompt", "What happens?",
                    "--device", "cpu", "--max-frames", "4")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "The cat is orange.\n"
        assert proc.stderr.splitlines()[0] == (
            "note: --device, --max-frames apply to a model on this computer, not to --server: ignored (the server "
            "runs its model on its own device; the server samples videos itself)")
        parts = fake.requests[-1]["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["video_url", "image_url", "text"]
    assert parts[0]["video_url"]["url"] == "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()
    assert parts[2]["text"] == "What happens?"


def test_a_video_for_a_server_model_without_video_is_bad_input(clip):
    """Refused before anything is sent, exit 2 as the same refusal of a local model (trial 71 F6)."""
    with FakeOpenAI() as fake:
        proc = _cli(fake.url, "--model", "ok", "--video", str(clip), "--prompt", "What happens?")
        assert fake.requests == []
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"error: ok on {fake.url} cannot take videos, as far as Smolchat knows: remove the "
                           "video, or ask a SmolVLM2 model.\n")


def test_a_key_refused_at_the_answer_is_bad_input():
    """A server that lists its models to anyone but wants the key for answers (llama-server's public
    /v1/models): the 401 comes at the answer, and is exit 2 as the README says of a wrong key (trial 71 F3)."""
    with FakeOpenAI(models=[{"id": "status:401", "object": "model"}]) as fake:
        proc = _cli(fake.url, "--model", "status:401", "--prompt", "Hi")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: ") and "401 Unauthorized" in proc.stderr


def test_a_server_error_is_still_a_failed_answer():
    with FakeOpenAI() as fake:
        proc = _cli(fake.url, "--model", "status:500", "--prompt", "Hi")
    assert proc.returncode == 1 and "500 Server error" in proc.stderr, proc.stderr


def test_two_tokens_are_no_decode_rate_and_an_unsaid_prompt_count_is_not_zero():
    """Trial 71 F9: "prompt 0 tokens" of a server that never said its usage, "decode 20283.2 tok/s" of two
    tokens that came in one packet."""
    with FakeOpenAI() as fake:
        proc = _cli(fake.url, "--model", "close", "--prompt", "Hi")
    stats = next(line for line in proc.stderr.splitlines() if line.startswith("["))
    assert stats.startswith("[error] prompt tokens not reported, generated 2, TTFT "), proc.stderr
    assert stats.endswith(", decode rate not measured (too few tokens)")
