"""MediaStore's new-photo path: checked while it is hashed and written, no temporary file left behind,
the folder listed only when it may hold too many files, and a chat request queued for the engine
while its new photo is still decoded."""

from __future__ import annotations

import asyncio
import base64
import errno
import os
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from engine.api.images import load_image
from server import create_app
from server.config import ServerConfig
from server.errors import APIError
from server.media import MediaStore
from tests.server.fakes import FakeSession, fake_loader
from tests.server.helpers import ThreadServer, animation_bytes, png_bytes


def uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def test_a_broken_image_is_refused_and_leaves_no_file(tmp_path):
    store = MediaStore(ServerConfig(), tmp_path / "media")
    noisy = png_bytes(noise=True)
    with pytest.raises(APIError) as refused:
        asyncio.run(store.image(uri(noisy[:len(noisy) // 2]), "messages[0].content[0]"))
    assert (refused.value.status, refused.value.code) == (400, "invalid_image")
    assert refused.value.param == "messages[0].content[0]"
    assert list((tmp_path / "media").iterdir()) == []  # its bytes were written meanwhile, and deleted


def test_a_request_that_goes_away_while_its_photo_is_written_leaves_no_file(tmp_path, monkeypatch):
    store = MediaStore(ServerConfig(), tmp_path / "media")
    release, written = threading.Event(), threading.Event()
    real = store._write_part

    def slow_write(data: bytes, digest: str, param: str) -> Path:
        release.wait(10)
        out = real(data, digest, param)
        written.set()
        return out
    monkeypatch.setattr(store, "_write_part", slow_write)

    async def go() -> None:
        task = asyncio.ensure_future(store.image(uri(png_bytes(color=(3, 4, 5))), "x"))
        await asyncio.sleep(0.05)  # on its way: decoding, and writing (held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        assert await asyncio.to_thread(written.wait, 10)
        await asyncio.sleep(0.05)  # the clean-up runs as the write's callback
    asyncio.run(go())
    assert list((tmp_path / "media").iterdir()) == []


def test_the_folder_is_listed_only_when_it_may_be_too_full_and_trimmed_below_the_limit(tmp_path, monkeypatch):
    folder = tmp_path / "media"
    store = MediaStore(ServerConfig(max_stored_media=16), folder)
    listings = []
    real = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: listings.append(self) or real(self))
    paths = [asyncio.run(store.image(uri(png_bytes(color=(i, 0, 0))), "x")) for i in range(16)]
    assert listings == [] and len(list(real(folder))) == 16  # at the limit: never listed
    newest = asyncio.run(store.image(uri(png_bytes(color=(99, 0, 0))), "x"))
    assert listings == [folder]  # over it: listed once, and trimmed an eighth below it
    kept = {str(p) for p in real(folder)}
    assert len(kept) == 14 and newest in kept and not kept & set(paths[:3])
    for i in range(2):
        asyncio.run(store.image(uri(png_bytes(color=(i, 9, 0))), "x"))
    assert listings == [folder] and len(list(real(folder))) == 16  # back at the limit, not listed again


def test_the_same_bytes_under_another_url_find_the_stored_file(tmp_path):
    store = MediaStore(ServerConfig(), tmp_path / "media")
    data = png_bytes(color=(7, 7, 7))
    first = asyncio.run(store.image(uri(data), "x"))
    raw = base64.b64encode(data).decode()  # raw base64: another string, the same bytes
    assert asyncio.run(store.image(raw, "x")) == first
    assert [p.name for p in (tmp_path / "media").iterdir()] == [Path(first).name]


def test_a_broken_image_gets_its_400_even_when_the_write_fails(tmp_path, monkeypatch):
    store = MediaStore(ServerConfig(), tmp_path / "media")

    def full_disk(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(Path, "write_bytes", full_disk)
    noisy = png_bytes(noise=True)
    with pytest.raises(APIError) as refused:
        asyncio.run(store.image(uri(noisy[:len(noisy) // 2]), "x"))
    assert (refused.value.status, refused.value.code) == (400, "invalid_image")
    with pytest.raises(APIError) as full:  # a good image: the disk's error, said as such
        asyncio.run(store.image(uri(png_bytes()), "messages[0].content[0]"))
    assert (full.value.status, full.value.code, full.value.param) == (
        507, "insufficient_storage", "messages[0].content[0]")
    assert "disk is full" in full.value.message and str(tmp_path) not in full.value.message
    assert list((tmp_path / "media").iterdir()) == []  # no part left behind


def test_a_full_disk_is_a_507_and_the_server_keeps_serving(tmp_path, monkeypatch):
    """Through HTTP: the request gets a JSON 507 naming the part, nothing reaches the engine, and once
    the disk has room the same request is answered."""
    import httpx

    from server import create_app
    from tests.server.fakes import FakeSession, fake_loader
    from tests.server.helpers import ThreadServer

    session = FakeSession()
    srv = ThreadServer(create_app(ServerConfig(model="fake"), loader=fake_loader(session)))
    real_write = Path.write_bytes
    try:
        body = {"model": "fake", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": uri(png_bytes())}}]}]}

        def full_disk(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(Path, "write_bytes", full_disk)
        refused = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=30)
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"]["code"] == "insufficient_storage"
        assert refused.json()["error"]["param"] == "messages[0].content[1]"
        assert session.sent == []
        monkeypatch.setattr(Path, "write_bytes", real_write)
        assert httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=30).status_code == 200
    finally:
        srv.stop()


def test_bytes_stored_as_a_video_are_still_checked_as_an_image(tmp_path, shared_dir):
    """Found by a trial: bytes first sent as a video and then as an image were taken as a known
    image, and the engine failed on the .mp4 path (its message naming the server's temporary
    folder). They are checked as an image: a 400 from the server."""
    store = MediaStore(ServerConfig(), tmp_path / "media")
    data = (shared_dir / "videos" / "moving_square.mp4").read_bytes()
    video = asyncio.run(store.video("data:video/mp4;base64," + base64.b64encode(data).decode(), "v"))
    assert video.endswith(".mp4")
    with pytest.raises(APIError) as refused:
        asyncio.run(store.image(uri(data), "input[0].image_url"))
    assert refused.value.status == 400 and refused.value.code in ("invalid_image", "unsupported_image_format")
    assert "smolchat" not in refused.value.message and ".mp4" not in refused.value.message


@pytest.mark.parametrize("data", [bytes(range(256)) * 20, b"\x00" * 1000], ids=["random bytes", "zeros"])
def test_a_video_that_cannot_be_read_is_a_400_that_names_no_server_path(tmp_path, data):
    """Found by a trial: a broken video was stored unread, and the engine's failure became a 500
    naming the server's media folder. Its headers are now read when it arrives; nothing is kept."""
    store = MediaStore(ServerConfig(), tmp_path / "media")
    with pytest.raises(APIError) as refused:
        asyncio.run(store.video("data:video/mp4;base64," + base64.b64encode(data).decode(), "messages[0].content[0]"))
    err = refused.value
    assert (err.status, err.code, err.param) == (400, "invalid_video", "messages[0].content[0]")
    assert err.message == ("the video cannot be read: the data is not a video this server reads (MP4, WebM, MOV, "
                           "MKV, or an animated GIF, WebP or PNG), or it is cut short or damaged")  # (an MP4 cut before
    # its index reads as no video)
    assert list((tmp_path / "media").iterdir()) == []
    with pytest.raises(APIError) as empty:
        asyncio.run(store.video("data:video/mp4;base64,", "v"))
    assert (empty.value.status, empty.value.code) == (400, "invalid_video")


@pytest.mark.parametrize("fmt, mime, suffix", [("GIF", "image/gif", ".gif"), ("WEBP", "image/webp", ".webp"),
                                               ("PNG", "image/png", ".png"), ("PNG", "image/apng", ".apng")])
def test_an_animated_gif_or_webp_is_taken_as_a_video_probed_as_the_engine_probes_it(tmp_path, fmt, mime, suffix):
    """Found by a trial: an animated GIF or WebP sent as a video_url (as the app's remote backend sends
    one for a SmolVLM2 model, with its own type) was a 400 "unsupported video type 'image/gif'". It is
    stored under its own suffix, which the engine reads it by, and its headers probed as the app's are."""
    from engine.api.videos import probe

    store = MediaStore(ServerConfig(), tmp_path / "media")
    data = animation_bytes(6, fmt, duration_ms=250)
    path = asyncio.run(store.video(f"data:{mime};base64," + base64.b64encode(data).decode(), "v"))
    assert Path(path).suffix == suffix and Path(path).read_bytes() == data  # (an APNG too: review of trial 77)
    info = probe(path)
    assert (info.total_frames, info.fps, info.duration, info.width, info.height) == (6, 4.0, 1.5, 48, 32)
    assert [p.name for p in (tmp_path / "media").iterdir()] == [Path(path).name]  # no .part left
    # sent again: the stored file
    assert asyncio.run(store.video(f"data:{mime};base64," + base64.b64encode(data).decode(), "v")) == path


@pytest.mark.parametrize("data, mime, message", [
    (animation_bytes(1, "GIF"), "image/gif",
     "the video cannot be read: the GIF has one frame, a still image: send it as an image_url part"),
    (animation_bytes(1, "WEBP"), "image/webp",
     "the video cannot be read: the WebP has one frame, a still image: send it as an image_url part"),
    (animation_bytes(6, "GIF")[:40], "image/gif",
     "the video cannot be read: the data is not an animated GIF this server reads, or it is cut short or damaged"),
    (b"GIF89a" + bytes(range(256)) * 4, "image/gif",
     "the video cannot be read: the data is not an animated GIF this server reads, or it is cut short or damaged"),
    (animation_bytes(6, "GIF"), "image/webp",
     "the video cannot be read: the data is not an animated WebP this server reads, or it is cut short or damaged"),
    (animation_bytes(1, "PNG"), "image/png",
     "the video cannot be read: the PNG has one frame, a still image: send it as an image_url part"),
    (animation_bytes(6, "GIF"), "image/apng",
     "the video cannot be read: the data is not an animated PNG this server reads, or it is cut short or damaged"),
], ids=["still GIF", "still WebP", "GIF cut short", "broken GIF", "GIF labelled WebP", "still PNG", "GIF labelled APNG"])
def test_a_still_or_broken_animation_sent_as_a_video_is_a_400(tmp_path, data, mime, message):
    store = MediaStore(ServerConfig(), tmp_path / "media")
    with pytest.raises(APIError) as refused:
        asyncio.run(store.video(f"data:{mime};base64," + base64.b64encode(data).decode(), "messages[0].content[0]"))
    err = refused.value
    assert (err.status, err.code, err.param, err.message) == (400, "invalid_video", "messages[0].content[0]", message)
    assert list((tmp_path / "media").iterdir()) == []


@pytest.mark.parametrize("fmt, mime", [("GIF", "image/gif"), ("WEBP", "image/webp")])
def test_an_animation_cut_anywhere_is_taken_or_a_400(tmp_path, fmt, mime):
    """Found while fixing the above: Pillow's frame count of a GIF cut inside a frame raised
    IndexError or struct.error (a 500), not the OSError it raises for other damage."""
    store = MediaStore(ServerConfig(), tmp_path / "media")
    data = animation_bytes(8, fmt)
    outcomes = set()
    for n in range(1, len(data), 7):
        try:
            asyncio.run(store.video(f"data:{mime};base64," + base64.b64encode(data[:n]).decode(), "v"))
            outcomes.add("taken")
        except APIError as exc:
            assert (exc.status, exc.code) == (400, "invalid_video"), exc.message
            outcomes.add(exc.code)
    assert "invalid_video" in outcomes


def test_another_video_type_is_a_400_that_lists_the_types_taken(tmp_path):
    store = MediaStore(ServerConfig(), tmp_path / "media")
    with pytest.raises(APIError) as refused:
        asyncio.run(store.video("data:image/jpeg;base64," + base64.b64encode(png_bytes()).decode(), "v"))
    assert (refused.value.status, refused.value.code) == (400, "unsupported_video_format")
    assert refused.value.message == ("unsupported video type 'image/jpeg': send video/mp4, video/webm, video/quicktime, "
                                     "video/x-matroska, or an animated image/gif, image/webp, image/png, image/apng "
                                     "(e.g. data:video/mp4;base64,...)")


def test_media_urls_are_read_without_the_spaces_around_them(tmp_path):
    """Found by a trial: " data:image/png;base64,..." was "unsupported URL scheme '  data'"."""
    store = MediaStore(ServerConfig(), tmp_path / "media")
    path = asyncio.run(store.image("  " + uri(png_bytes()) + "\n", "v"))
    assert Path(path).read_bytes() == png_bytes()
    video = asyncio.run(store.video(" \tdata:image/gif;base64," + base64.b64encode(animation_bytes()).decode() + " ", "v"))
    assert Path(video).suffix == ".gif"


@pytest.mark.parametrize("mime", ["application/octet-stream", "", "APPLICATION/OCTET-STREAM"])
def test_an_image_labelled_octet_stream_is_read_by_its_bytes(tmp_path, mime):
    """Found by a trial: data:application/octet-stream;base64,<PNG> was refused while data:;base64,<PNG>
    was taken: a type that says nothing of the bytes is read as no type."""
    store = MediaStore(ServerConfig(), tmp_path / "media")
    path = asyncio.run(store.image(f"data:{mime};base64," + base64.b64encode(png_bytes()).decode(), "v"))
    assert path.endswith(".png") and Path(path).read_bytes() == png_bytes()
    with pytest.raises(APIError) as refused:  # the bytes still have to be an image
        asyncio.run(store.image(f"data:{mime};base64," + base64.b64encode(b"not an image").decode(), "v"))
    assert (refused.value.status, refused.value.code) == (400, "unsupported_image_format")


def _clips(tmp_path) -> dict[str, bytes]:
    from tests.engine.videos import solid, write_video

    made = {suffix: write_video(tmp_path / f"clip{suffix}", (solid(32, 48, 8 * i) for i in range(6)), rate=2,
                                codec=codec).read_bytes()
            for suffix, codec in ((".mp4", "libx264"), (".webm", "libvpx-vp9"), (".mkv", "libx264"))}
    made |= {".gif": animation_bytes(4, "GIF"), ".webp": animation_bytes(4, "WEBP"), ".png": animation_bytes(4, "PNG")}
    return made


@pytest.mark.parametrize("mime", ["application/octet-stream", ""])
def test_a_video_labelled_octet_stream_or_untyped_is_read_by_its_bytes(tmp_path, mime):
    """Found by a trial: data:application/octet-stream;base64,<MP4> (an uploader's label for any file)
    was "unsupported video type", as an untyped GIF was; the bytes say what each is."""
    store = MediaStore(ServerConfig(), tmp_path / "media")
    for suffix, data in _clips(tmp_path).items():
        path = asyncio.run(store.video(f"data:{mime};base64," + base64.b64encode(data).decode(), "v"))
        assert Path(path).suffix == suffix and Path(path).read_bytes() == data
    for data, code, message in (  # text, and a still PNG (an image, not a video)
            (b"not a video at all", "unsupported_video_format", "the data is not a video this server reads: send "),
            (png_bytes(), "invalid_video", "the video cannot be read: the PNG has one frame, a still image")):
        with pytest.raises(APIError) as refused:
            asyncio.run(store.video(f"data:{mime};base64," + base64.b64encode(data).decode(), "v"))
        assert (refused.value.status, refused.value.code) == (400, code)
        assert refused.value.message.startswith(message)


@pytest.mark.parametrize("mime, suffix", [("video/x-m4v", ".mp4"), ("video/gif", ".gif")])
def test_the_other_labels_clients_use_for_a_video_are_taken(tmp_path, mime, suffix):
    store = MediaStore(ServerConfig(), tmp_path / "media")
    data = _clips(tmp_path)[suffix]
    path = asyncio.run(store.video(f"data:{mime};base64," + base64.b64encode(data).decode(), "v"))
    assert Path(path).suffix == suffix and Path(path).read_bytes() == data


def test_a_huge_media_type_is_quoted_cut_short(tmp_path):
    """Trial 80: a 200,000-character type came back whole in the error (a 200 KB reply)."""
    store = MediaStore(ServerConfig(), tmp_path / "media")
    kind = "video/" + "x" * 200_000
    with pytest.raises(APIError) as refused:
        asyncio.run(store.video(f"data:{kind};base64," + base64.b64encode(animation_bytes()).decode(), "v"))
    assert refused.value.message.startswith("unsupported video type 'video/" + "x" * 93 + "…': send video/mp4")
    assert len(refused.value.message) < 300


def test_empty_video_data_is_said_to_be_empty(tmp_path):
    store = MediaStore(ServerConfig(), tmp_path / "media")
    for mime in ("application/octet-stream", "video/mp4"):
        with pytest.raises(APIError) as refused:
            asyncio.run(store.video(f"data:{mime};base64,", "v"))
        assert (refused.value.status, refused.value.code, refused.value.message) == (
            400, "invalid_video", "the media data is empty")


def test_a_video_without_pictures_is_a_400_that_says_so_without_the_stored_name(tmp_path):
    from tests.engine.videos import write_audio_only

    data = write_audio_only(tmp_path / "voice.mp4").read_bytes()
    store = MediaStore(ServerConfig(), tmp_path / "media")
    with pytest.raises(APIError) as refused:
        asyncio.run(store.video("data:video/mp4;base64," + base64.b64encode(data).decode(), "v"))
    assert (refused.value.status, refused.value.code) == (400, "invalid_video")
    assert refused.value.message == "the video cannot be read: the data has no video in it, only audio"
    assert list((tmp_path / "media").iterdir()) == []


def test_engine_messages_never_name_the_media_folder():
    from server.errors import from_engine

    err = from_engine("VideoError", "Not a recognised video file: /tmp/smolchat-media-5yyqrzb8/3407e1.mp4 (bad)")
    assert (err.status, err.code) == (400, "invalid_video")
    assert err.message == "Not a recognised video file: the uploaded media (bad)"
    # Video messages name only the file, which the server names by its content's hash.
    err = from_engine("VideoError", "No frame could be decoded from 3407e1c2b5a4f6d8e9a0b1c2d3e4f5a6b7c8d9e0.webm "
                      "(truncated or damaged)")
    assert err.message == "No frame could be decoded from the uploaded media (truncated or damaged)"


class DecodingSession(FakeSession):
    """A fake engine that reads its images as ChatSession does (``load_image`` of each path, which
    takes the pixels the server handed over), noting when the answer reached it."""

    def __init__(self):
        super().__init__()
        self.reached = threading.Event()
        self.pixels: list = []

    def send(self, text, images=(), params=None):
        self.reached.set()
        self.pixels = [load_image(path) for path in images]
        return super().send(text, images, params)


def chat(url: str, content: list, stream: bool = False) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
        "model": "fake", "stream": stream, "messages": [{"role": "user", "content": content}]})


def test_a_new_photo_reaches_the_engine_while_it_is_decoded(monkeypatch):
    """The chat request is queued for the engine before its photo's decode ends: the decode here
    finishes only once the engine has the answer; the engine then waits for those pixels (not
    decoding the file again), and the response starts after them."""
    session = DecodingSession()
    decoded = []
    real = MediaStore._decode

    def decode_after_the_engine_has_it(self, data, param):
        assert session.reached.wait(10), "the answer reached the engine only after the photo's decode"
        image = real(self, data, param)
        decoded.append(image)
        return image
    monkeypatch.setattr(MediaStore, "_decode", decode_after_the_engine_has_it)
    srv = ThreadServer(create_app(ServerConfig(model="fake"), loader=fake_loader(session)))
    try:
        for stream in (False, True):
            session.reached.clear()
            reply = chat(srv.url, [{"type": "image_url", "image_url": uri(png_bytes(color=(stream, 2, 3)))},
                                   {"type": "text", "text": "What is it?"}], stream)
            assert reply.status_code == 200, reply.text
            assert len(session.pixels) == 1 and session.pixels[0] is decoded[-1]  # the server's decode, taken
            assert session.pixels[0].getpixel((0, 0)) == (int(stream), 2, 3)
    finally:
        srv.stop()


def test_a_photo_broken_inside_its_pixels_is_refused_by_the_request_and_leaves_nothing():
    """Its header reads, so the request is queued while it is decoded; the decode's refusal is still
    the request's own 400 (param and wording as before), its answer is cancelled, no file stays,
    and the same photo sent again is refused again, not found as stored."""
    session = DecodingSession()
    app = create_app(ServerConfig(model="fake"), loader=fake_loader(session))
    srv = ThreadServer(app)
    noisy = png_bytes(size=(320, 240), noise=True)
    broken = uri(noisy[:len(noisy) // 2])
    try:
        for stream in (False, True, False):
            reply = chat(srv.url, [{"type": "text", "text": "What is it?"},
                                   {"type": "image_url", "image_url": broken}], stream)
            error = reply.json()["error"]
            assert reply.status_code == 400 and (error["code"], error["param"]) == ("invalid_image",
                                                                                      "messages[0].content[1]")
            assert error["message"] == "the image cannot be decoded: its data is truncated or corrupt"
            assert list(app.state.smolchat.media.folder.iterdir()) == []
        good = chat(srv.url, [{"type": "image_url", "image_url": uri(png_bytes())}, {"type": "text", "text": "And?"}])
        assert good.status_code == 200 and session.running == 0  # the refused answers were not left running
    finally:
        srv.stop()


def held_decodes(monkeypatch, release: threading.Event) -> None:
    """New photos' decodes wait for ``release`` (so they are still running when their request is
    refused for something else, or when another request sends the same photo)."""
    real = MediaStore._decode

    def held(self, data, param):
        assert release.wait(10), "the decode was never released"
        return real(self, data, param)
    monkeypatch.setattr(MediaStore, "_decode", held)


def settled(folder: Path, left: int = 0) -> bool:
    deadline = time.monotonic() + 5
    while len(list(folder.iterdir())) != left and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(list(folder.iterdir())) == left


BROKEN = png_bytes(size=(320, 240), noise=True)[:3000]  # its header reads; its pixels end early
PLAIN = "the image cannot be decoded: its data is truncated or corrupt"


@pytest.mark.parametrize("refusal", ["a later part", "a field checked after the messages"])
def test_a_request_refused_while_its_new_photo_is_decoded_keeps_no_broken_file(monkeypatch, refusal):
    """Found by a trial: a broken photo stored before its decode ended stayed stored (and remembered)
    when its request was refused for something else; sent again, it failed inside the engine with
    no param and the engine's wording, or was silently left out of an earlier message."""
    release = threading.Event()
    held_decodes(monkeypatch, release)
    session = DecodingSession()
    app = create_app(ServerConfig(model="fake"), loader=fake_loader(session))
    srv = ThreadServer(app)
    folder = app.state.smolchat.media.folder
    photo = {"type": "image_url", "image_url": uri(BROKEN)}
    body = {"model": "fake", "messages": [{"role": "user", "content": [photo, {"type": "text", "text": "Hi"}]}]}
    if refusal == "a later part":
        body["messages"][0]["content"].append({"type": "image_url", "image_url": "file:///etc/passwd"})
    else:
        body["top_logprobs"] = 2
    try:
        reply = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=30)
        assert reply.status_code == 400
        assert reply.json()["error"]["code"] == ("invalid_url" if refusal == "a later part" else "invalid_value")
        assert len(list(folder.iterdir())) == 1  # stored while its decode still runs
        release.set()
        assert settled(folder)  # the decode failed: deleted, without a request waiting for it
        again = chat(srv.url, [{"type": "text", "text": "Hi"}, photo])
        error = again.json()["error"]
        assert again.status_code == 400 and (error["code"], error["param"], error["message"]) == (
            "invalid_image", "messages[0].content[1]", PLAIN)
        assert not session.sent  # no answer was started for any of them
    finally:
        release.set()
        srv.stop()


def test_the_same_new_broken_photo_sent_twice_at_once_is_refused_plainly_for_both(monkeypatch):
    """Found by a trial: the second request found the first one's stored file, skipped the check,
    and its answer failed in the engine ("Image file not found", no param) once the first request
    deleted the file. It now confirms the same decode."""
    release = threading.Event()
    held_decodes(monkeypatch, release)
    begun = []
    real_begin = MediaStore.begin_image

    async def counted(self, url, param):
        out = await real_begin(self, url, param)
        begun.append(param)
        if len(begun) == 2:
            release.set()  # both requests have their path: now the decode may fail
        return out
    monkeypatch.setattr(MediaStore, "begin_image", counted)
    session = DecodingSession()
    app = create_app(ServerConfig(model="fake"), loader=fake_loader(session))
    srv = ThreadServer(app)
    replies = {}
    try:
        def send(stream: bool) -> None:
            replies[stream] = chat(srv.url, [{"type": "image_url", "image_url": uri(BROKEN)},
                                             {"type": "text", "text": "Hi"}], stream)
        threads = [threading.Thread(target=send, args=(stream,)) for stream in (False, True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert len(begun) == 2
        for reply in replies.values():
            error = reply.json()["error"]
            assert reply.status_code == 400 and (error["code"], error["param"], error["message"]) == (
                "invalid_image", "messages[0].content[0]", PLAIN)
        assert settled(app.state.smolchat.media.folder)
    finally:
        release.set()
        srv.stop()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process ids are asked after (see sweep_media_folders)")
def test_media_folders_of_servers_that_are_gone_are_removed(tmp_path):
    """Trial 66 F11: a server killed with kill -9 left its folder of photos in the temporary folder,
    and later starts never removed it."""
    import subprocess

    from server.media import MEDIA_PREFIX, UNNAMED_STALE_S, sweep_media_folders

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)  # (a process that has ended: its id is free)
    folders = {name: tmp_path / f"{MEDIA_PREFIX}{name}" for name in (
        f"{dead}-abcd1234", f"{os.getpid()}-abcd1234", f"{os.getppid()}-abcd1234", "oldname1", "newname1")}
    for folder in folders.values():
        folder.mkdir()
        (folder / "photo.png").write_bytes(b"x")
    long_ago = time.time() - UNNAMED_STALE_S - 60
    os.utime(folders["oldname1"], (long_ago, long_ago))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    (tmp_path / f"{MEDIA_PREFIX}{dead}-link0000").symlink_to(elsewhere)
    (tmp_path / f"{MEDIA_PREFIX}{dead}-file0000").write_text("not a folder")

    assert sweep_media_folders(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{MEDIA_PREFIX}{n}" for n in (f"{os.getpid()}-abcd1234", f"{os.getppid()}-abcd1234", "newname1")]
        + ["elsewhere", f"{MEDIA_PREFIX}{dead}-link0000", f"{MEDIA_PREFIX}{dead}-file0000"])
    assert (elsewhere / "keep.txt").read_text() == "mine"
