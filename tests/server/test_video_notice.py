"""A video the server could read only part of: the answer comes, with a ``notice`` that says so
(beside ``usage``, in the whole answer and in a stream's finish chunk), and the app's remote backend
shows it as the local engine's notice."""

from __future__ import annotations

import base64
import json
import re
import time

import httpx
import pytest

from tests.engine.conftest import family_checkpoint  # noqa: F401 - fixture
from tests.engine.videos import solid, write_video
from tests.server.helpers import ThreadServer, data_uri

pytest.importorskip("av")

NOTICE = re.compile(r"Only ([1-5]) of the 6 frames of the video could be read \(the file ends early: truncated or "
                    r"damaged\); the answer is about those\.")


@pytest.fixture(scope="module")
def video_server(family_checkpoint, tmp_path_factory):  # noqa: F811
    from engine.chat import ChatSession
    from server import ServerConfig, create_app

    folder = family_checkpoint("SmolVLM2-256M-Video-Instruct")
    session = ChatSession.load(str(folder), device="cpu", dtype="float32")
    srv = ThreadServer(create_app(ServerConfig(model=str(folder)), loader=lambda model, options: session))
    clips = tmp_path_factory.mktemp("clips")
    whole = write_video(clips / "whole.mp4", [solid(64, 48, 4 * i) for i in range(60)], rate=10,
                        container_options={"movflags": "faststart"})  # 6 s: 6 frames at 1 fps
    cut = clips / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    try:
        model = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["data"][0]["id"]
        yield srv.url, model, whole, cut
    finally:
        srv.stop()


def _body(model: str, clip, stream: bool = False) -> dict:
    return {"model": model, "max_tokens": 2, "stream": stream, "messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": data_uri(clip, "video/mp4")}}, {"type": "text", "text": "What happens?"}]}]}


def test_a_truncated_video_is_answered_with_a_notice_and_a_whole_one_without(video_server):
    url, model, whole, cut = video_server
    r = httpx.post(f"{url}/v1/chat/completions", json=_body(model, cut), timeout=120)
    assert r.status_code == 200, r.text
    assert NOTICE.fullmatch(r.json()["notice"]), r.json()["notice"]  # no stored file name in it
    r = httpx.post(f"{url}/v1/chat/completions", json=_body(model, whole), timeout=120)
    assert r.status_code == 200 and "notice" not in r.json(), r.text
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=_body(model, cut, stream=True), timeout=120) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and NOTICE.fullmatch(finish[0]["notice"]), chunks
    assert all("notice" not in c for c in chunks if c is not finish[0])


def test_the_apps_remote_backend_shows_the_servers_notice(video_server):
    from app.backends.remote import RemoteBackend, remote_spec
    from app.backends.remote_http import Server
    from engine.api import Attachment, DoneEvent, GenerationParams

    url, model, whole, cut = video_server
    backend = RemoteBackend(Server("local", url, ""))
    loaded = []
    backend.load(remote_spec("local", model), {}, lambda info, err: loaded.append((info, err)))
    deadline = time.monotonic() + 30
    while not loaded and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loaded and loaded[0][1] is None, loaded
    events = []
    backend.send("What happens?", [Attachment(str(cut), "video")], GenerationParams(max_new_tokens=2), events.append)
    while not (events and isinstance(events[-1], DoneEvent)) and time.monotonic() < deadline + 90:
        time.sleep(0.01)
    done = events[-1]
    assert done.error is None and NOTICE.fullmatch(done.stats.notice), (done.error, done.stats.notice)
    backend.close()


def test_with_several_videos_the_notice_says_which_and_once(video_server):
    """Found by a re-check trial: "the video" for one of two, and the same sentence twice for a file sent twice."""
    url, model, whole, cut = video_server
    body = _body(model, whole)
    video = body["messages"][0]["content"][0]
    cut_part = {"type": "video_url", "video_url": {"url": data_uri(cut, "video/mp4")}}
    body["messages"][0]["content"] = [video, cut_part, cut_part, {"type": "text", "text": "What happens?"}]
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert re.fullmatch(r"Only [1-5] of the 6 frames of video 2 of 3 could be read \(the file ends early: truncated "
                        r"or damaged\); the answer is about those\.", r.json()["notice"]), r.json()["notice"]


@pytest.mark.parametrize("fmt, mime", [("GIF", "image/gif"), ("WEBP", "image/webp")])
def test_an_animated_gif_or_webp_sent_as_a_video_is_answered(video_server, fmt, mime):
    """Found by a trial: the app's local engine reads an animated GIF or WebP as a video for a SmolVLM2
    model, and its remote backend sends one as a video_url with the file's own type, which the server
    refused ("unsupported video type 'image/gif'"). Its frames are the prompt's, as a video's are; a
    still or broken one is a 400 as a broken video is."""
    from tests.server.helpers import animation_bytes

    url, model, whole, _ = video_server

    def body(data: bytes | None) -> dict:
        clip = f"data:{mime};base64," + base64.b64encode(data).decode() if data else data_uri(whole, "video/mp4")
        return {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": clip}}, {"type": "text", "text": "What happens?"}]}]}

    animated = body(animation_bytes(12, fmt, duration_ms=500))  # 6 s: 6 frames sampled at 1 fps
    r = httpx.post(f"{url}/v1/chat/completions", json=animated, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2 and "notice" not in r.json()
    # the prompt of a 6-second video of 6 sampled frames, as the MP4 of that length (and frame size) has
    mp4 = httpx.post(f"{url}/tokenize", json={"messages": body(None)["messages"]}, timeout=120).json()["count"]
    assert r.json()["usage"]["prompt_tokens"] == mp4
    still = body(animation_bytes(1, fmt))
    with_a_still = httpx.post(f"{url}/v1/chat/completions", json=still, timeout=120).json()["error"]
    assert (with_a_still["code"], with_a_still["param"]) == ("invalid_video", "messages[0].content[0]")
    assert "one frame, a still image" in with_a_still["message"]
    broken = httpx.post(f"{url}/v1/chat/completions", json=body(animation_bytes(12, fmt)[:60]), timeout=120)
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_video", broken.text
