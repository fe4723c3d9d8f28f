"""Videos as the app attaches them: Stop between frames, and animated WebP read as a video."""

from __future__ import annotations

import json
import re
import threading

import numpy as np
import pytest
from PIL import Image

from engine.api.events import DoneEvent, GenerationParams
from engine.models.smolvlm import video as video_module
from engine.models.smolvlm.video import probe, read_video, sample_indices
from tests.engine.videos import solid, write_video

pytest.importorskip("av")


class Stop(Exception):
    pass


def test_check_runs_before_every_decoded_frame_and_stops_the_sampling(tmp_path):
    path = write_video(tmp_path / "clip.mp4", [solid(32, 32, 10 * i) for i in range(20)], rate=10)
    calls = []

    def check(done, total):
        calls.append((done, total))
        if len(calls) == 4:
            raise Stop()

    with pytest.raises(Stop):
        read_video(path, fps=10, max_frames=20, check=check)
    assert len(calls) == 4 and all(total == 20 for _, total in calls)  # it stopped at the fourth frame

    counted = []
    video = read_video(path, fps=10, max_frames=20, check=lambda done, total: counted.append(done))
    assert video.decoded_frames <= len(counted) <= video.decoded_frames + 1  # one per frame (+1: end of stream)
    # The sampled frames read so far, before each decode: the sampling's progress, 0 to 19 in order.
    assert counted == sorted(counted) and set(counted) == set(range(20))


def test_cancel_while_sampling_ends_the_answer_and_keeps_the_conversation(family_checkpoint, tmp_path, monkeypatch):
    """Stop pressed while the frames are decoded: the sampling stops between two frames, the answer
    ends "cancelled" and no turn is added."""
    from engine.chat import ChatSession

    session = ChatSession.load(family_checkpoint("SmolVLM2-256M-Video-Instruct"), device="cpu", dtype="float32")
    path = write_video(tmp_path / "clip.mp4", [solid(32, 32, 5 * i) for i in range(40)], rate=1)
    resized = []
    real_resize = video_module.resize_frame

    def resize_then_stop(image, **kwargs):
        resized.append(1)
        if len(resized) == 2:
            session.cancel()  # the Stop button, pressed while the second frame is being resized
        return real_resize(image, **kwargs)

    monkeypatch.setattr(video_module, "resize_frame", resize_then_stop)
    events = list(session.send("What happens?", params=GenerationParams(max_new_tokens=3), videos=[path]))
    assert len(events) == 1 and isinstance(events[0], DoneEvent) and events[0].finish_reason == "cancelled"
    # Conversions already handed to the worker threads may finish; the other ~35 frames are never decoded.
    from engine.api.videos import CONVERT_THREADS
    assert 2 <= len(resized) <= 2 + 2 * CONVERT_THREADS < 40
    assert session.turns == []

    # The next answer is not stopped by that old cancel.
    monkeypatch.setattr(video_module, "resize_frame", real_resize)
    done = list(session.send("What happens?", params=GenerationParams(max_new_tokens=2, ignore_eos=True,
                                                                        video_max_frames=4), videos=[path]))[-1]
    assert done.finish_reason == "length" and done.stats.video_frames == 4


def _load(service, family_checkpoint) -> None:
    """Load the tiny SmolVLM2 into ``service`` and wait for it."""
    loaded = threading.Event()
    service.load(str(family_checkpoint("SmolVLM2-256M-Video-Instruct")), {"device": "cpu", "dtype": "float32"},
                 lambda info, message: loaded.set())
    assert loaded.wait(60)


def _done_sink():
    """``(sink, done, results)``: a service sink that keeps each DoneEvent in ``results`` and sets ``done``."""
    done, results = threading.Event(), []

    def sink(event):
        if isinstance(event, DoneEvent):
            results.append(event)
            done.set()
    return sink, done, results


def _animated_webp(path, durations_ms):
    frames = [Image.new("RGB", (48, 32), (40 * i, 255 - 40 * i, 0)) for i in range(len(durations_ms))]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=durations_ms, loop=0, lossless=True)
    return path


def test_animated_webp_is_a_video_of_its_frames(tmp_path):
    """FFmpeg reads no animated WebP as frames; Pillow does: each frame lasts its own duration."""
    path = _animated_webp(tmp_path / "anim.webp", [500, 500, 1000, 1000, 500])  # 3.5 s, 5 frames
    info = probe(path)
    assert (info.total_frames, info.duration, info.width, info.height) == (5, 3.5, 48, 32)
    video = read_video(path)
    assert video.indices == sample_indices(5, 5 / 3.5, 3.5).tolist() == [0, 1, 2, 4]
    # index i is shown at i / fps = 0, 0.7, 1.4, 2.8 s: frames 0, 1, 2 and 3 (1.0-2.0 s is 2, 2.0-3.0 s is 3)
    shown = [int(round(f[0, 0, 0] / 40)) for f in video.frames]
    assert shown == [0, 1, 2, 3]
    assert video.frame_times == [0.0, 0.5, 1.0, 2.0]
    assert all(f.shape == (32, 48, 3) and f.dtype == np.uint8 for f in video.frames)



def test_service_after_a_cancel_during_sampling_keeps_the_synced_history(family_checkpoint, tmp_path, monkeypatch):
    """The next answer after a Stop during sampling reuses the conversation: no earlier video is
    decoded again (before, the service lost track and rebuilt every turn)."""


    from engine.api import Attachment, HistoryMessage
    from engine.service import EngineService

    service = EngineService()
    _load(service, family_checkpoint)
    first = Attachment(str(write_video(tmp_path / "a.mp4", [solid(32, 32, 9 * i) for i in range(3)], rate=1)),
                       "video")
    second = Attachment(str(write_video(tmp_path / "b.mp4", [solid(32, 32, 5 * i) for i in range(30)], rate=1)),
                        "video")
    params = GenerationParams(max_new_tokens=2, ignore_eos=True)
    sink, done, results = _done_sink()

    service.send("What is it?", [first], params, sink)
    assert done.wait(60) and results[-1].finish_reason == "length"
    answer = service._session.turns[-1].text
    decoded = []
    real_resize = video_module.resize_frame

    def resize_then_stop(image, **kwargs):
        decoded.append(1)
        if len(decoded) == 1:
            service.cancel()
        return real_resize(image, **kwargs)

    monkeypatch.setattr(video_module, "resize_frame", resize_then_stop)
    done.clear()
    service.send("And this one?", [second], params, sink)
    from engine.api.videos import CONVERT_THREADS
    assert done.wait(60) and results[-1].finish_reason == "cancelled"
    assert 1 <= len(decoded) <= 1 + 2 * CONVERT_THREADS < 30  # only frames already handed to the workers
    monkeypatch.setattr(video_module, "resize_frame", real_resize)
    rebuilt = []
    real_pre = service._session.preprocess_videos

    def counting(videos, params=None, cancellable=False):
        rebuilt.extend([] if cancellable else videos)  # history rebuilds are not cancellable
        return real_pre(videos, params, cancellable)

    monkeypatch.setattr(service._session, "preprocess_videos", counting)
    done.clear()
    service.set_history([HistoryMessage("user", "What is it?", (first,)), HistoryMessage("assistant", answer)])
    service.send("Once more?", [], params, sink)
    assert done.wait(60) and results[-1].finish_reason == "length"
    assert rebuilt == []  # the first video was not decoded again
    assert service.shutdown()


def test_rebuilt_history_samples_videos_with_the_last_answers_settings(family_checkpoint, tmp_path):


    from engine.api import Attachment, HistoryMessage
    from engine.service import EngineService

    service = EngineService()
    _load(service, family_checkpoint)
    clip = Attachment(str(write_video(tmp_path / "c.mp4", [solid(32, 32, 5 * i) for i in range(20)], rate=1)), "video")
    sink, done, results = _done_sink()

    params = GenerationParams(max_new_tokens=2, ignore_eos=True, video_max_frames=3)
    service.send("What is it?", [clip], params, sink)
    assert done.wait(60) and results[-1].stats.video_frames == 3
    done.clear()
    # Another chat that holds the same video (a reopened conversation): rebuilt, at 3 frames still.
    service.set_history([HistoryMessage("user", "Tell me about it", (clip,)), HistoryMessage("assistant", "Grey.")])
    service.send("More?", [], params, sink)
    assert done.wait(60) and results[-1].stats.video_frames == 3
    assert service._session.turns[0].videos[0].num_frames == 3
    assert service.shutdown()


def test_the_command_line_says_a_video_was_read_in_part(family_checkpoint, tmp_path, capsys):
    """Trial 53: the app and the server said "Only 4 of the 12 frames ..."; the command line did not."""
    from engine.__main__ import main

    frames = [solid(64, 48, 4 * i) for i in range(60)]
    whole = write_video(tmp_path / "fast.mp4", frames, rate=10, container_options={"movflags": "faststart"})
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    model = family_checkpoint("SmolVLM2-256M-Video-Instruct")
    common = ["generate", "--model", str(model), "--device", "cpu", "--video", str(cut), "--prompt", "What happens?",
              "--max-new-tokens", "2", "--ignore-eos"]
    assert main([*common, "--json"]) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert done["type"] == "done" and 1 <= done["frames"] < 6
    said = (f"Only {done['frames']} of the 6 frames of cut.mp4 could be read (the file ends early: truncated or "
            "damaged); the answer is about those.")
    assert done["notice"] == said
    assert main(common) == 0
    assert f"note: {said}" in capsys.readouterr().err.splitlines()


def test_a_truncated_video_answers_with_a_notice_of_the_frames_it_lost(family_checkpoint, tmp_path):
    """The chip promised the frames the headers plan; a file cut short gives fewer: the answer says so."""
    from engine.chat import ChatSession

    frames = [solid(64, 48, 4 * i) for i in range(60)]
    whole = write_video(tmp_path / "fast.mp4", frames, rate=10, container_options={"movflags": "faststart"})
    data = whole.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    session = ChatSession.load(family_checkpoint("SmolVLM2-256M-Video-Instruct"), device="cpu", dtype="float32")
    done = list(session.send("What happens?", params=GenerationParams(max_new_tokens=2, ignore_eos=True),
                             videos=[cut]))[-1]
    assert done.finish_reason == "length", done.error
    assert 1 <= done.stats.video_frames < 6
    assert done.stats.notice == (f"Only {done.stats.video_frames} of the 6 frames of cut.mp4 could be read (the file "
                                 "ends early: truncated or damaged); the answer is about those.")
    whole_done = list(session.send("And this?", params=GenerationParams(max_new_tokens=2, ignore_eos=True),
                                   videos=[whole]))[-1]
    assert whole_done.stats.notice is None or "frames" not in (whole_done.stats.notice or "")


def test_an_image_too_large_to_open_is_not_an_animation(tmp_path):
    """A decompression-bomb PNG: the animation probe says "not animated" (load_image gives the error)."""
    from engine.api.images import frame_count

    path = tmp_path / "huge.png"
    Image.new("1", (20000, 20000)).save(path)
    assert frame_count(path) == 1


def test_a_video_too_long_for_the_context_says_its_frames_are_what_does_not_fit(family_checkpoint, tmp_path,
                                                                                 images_dir):
    """The refusal names the media's share where the rest fits (the front ends then suggest fewer
    or shorter videos), and says nothing of it where the text alone is too long."""
    from engine.api.errors import PromptTooLongError
    from engine.cache import CacheConfig
    from engine.chat import ChatSession, Turn

    clip = write_video(tmp_path / "clip.mp4", [solid(64, 48, 4 * i) for i in range(60)], rate=10)  # 6 frames at 1 fps
    session = ChatSession.load(family_checkpoint("SmolVLM2-256M-Video-Instruct"), device="cpu", dtype="float32",
                               cache_config=CacheConfig(kind="contiguous", max_tokens=256))
    params = GenerationParams(max_new_tokens=2, image_detail="fast")

    def text_alone(text: str) -> int:
        return len(session.prompt_ids([Turn("user", text)], None))

    # A text that fits alone but not with the frames' time stamps and wrappers (found by a trial:
    # those were counted as text, and the share left out).
    words = next(n for n in range(150, 300) if text_alone("word " * n) >= 230)
    for text, videos, images, kind in [("What happens?", [clip], [], "video frames"),
                                       ("What happens?", [clip], [images_dir / "chelsea.png"], "images and video frames"),
                                       ("word " * words, [clip], [], "video frames")]:
        with pytest.raises(PromptTooLongError) as info:
            list(session.send(text, images=images, videos=videos, params=params))
        match = re.fullmatch(rf"the prompt has (\d+) tokens \((\d+) of them for {kind}\) but the context holds 256",
                             str(info.value))
        assert match, str(info.value)
        total, media = int(match[1]), int(match[2])
        # Everything the media bring: 64 tokens a frame or "fast" image, and their time stamps and wrappers.
        assert total - media == text_alone(text) < 256 and media > 64 * (6 + len(images)), str(info.value)
    with pytest.raises(PromptTooLongError, match=r"^the prompt has \d+ tokens but the context holds 256$"):
        list(session.send("word " * 300, videos=[clip], params=params))
    assert session.turns == []


def test_the_sampling_of_a_video_is_reported_frame_by_frame(family_checkpoint, tmp_path):
    """Trial 52: a 4K video's seeking took 14 s of the first answer with nothing but "Waiting for the
    first word…" on screen. The answer's progress says each sampled frame ("frames"), then the tiles."""
    from engine.api import ProgressEvent
    from engine.chat import ChatSession

    session = ChatSession.load(family_checkpoint("SmolVLM2-256M-Video-Instruct"), device="cpu", dtype="float32")
    path = write_video(tmp_path / "clip.mp4", [solid(32, 32, 20 * i) for i in range(8)], rate=1)
    seen: list[ProgressEvent] = []
    session.progress = seen.append
    done = list(session.send("What happens?", params=GenerationParams(max_new_tokens=2, ignore_eos=True,
                                                                        video_fps=1.0), videos=[path]))[-1]
    assert done.finish_reason == "length"
    frames = [(e.done, e.total, e.index, e.count, e.media) for e in seen if e.stage == "frames"]
    assert frames == [(i, 8, 0, 1, "video") for i in range(8)]
    assert [e.stage for e in seen].index("image") > [e.stage for e in seen].index("frames")
