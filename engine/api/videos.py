"""Reading videos the one way the engine does (torch-free, Qt-free, so the app probes, checks and
previews attachments with it): PyAV (FFmpeg's Python binding), Pillow for animated WebP/APNG.

How frames are sampled follows transformers' ``SmolVLMVideoProcessor`` (transformers 5.24):

- metadata: ``video_utils.read_video_pyav``: ``total_num_frames = stream.frames``,
  ``fps = stream.average_rate``, ``duration = total_num_frames / fps``;
- frame indices: ``video_processing_smolvlm.SmolVLMVideoProcessor.sample_frames`` (:func:`sample_indices`):
  ``round(fps * duration)`` frames capped at ``max_frames``, 1 s skipped at each end when the video
  is long enough, ``np.linspace(start, end, n, dtype=int)`` then ``np.unique``;
- timestamps: ``VideoMetadata.timestamps`` = ``index / fps`` (what the prompt says).

Where we differ from transformers on purpose:

- transformers decodes every frame from the start up to the last index; we seek to each sampled
  frame's time (the keyframe before it, then decode forward), and keep decoding forward instead
  when the next frame is close, so a 3-hour file costs ~64 short decodes, not 650,000 frames;
- a frame is "the frame shown at ``start + index / fps``" (for constant frame rate exactly frame
  ``index``; for variable frame rate the frame the prompt's timestamp names, not the index-th frame);
- the display rotation of phone videos is applied (frames come out upright, as players show them,
  like EXIF orientation for photos);
- files whose container lacks a frame count get one from the stream or container duration;
- animated WebP and APNG, which FFmpeg's demuxers do not decode as a stream of pictures, are read
  with Pillow (:func:`_read_animation`): each frame lasts its own ``duration``, and the file counts
  as a video of ``n_frames`` frames at ``n_frames / total duration`` fps (a GIF goes through PyAV);
- ``check(done, total)``, when given, is called before every decoded frame with the sampled frames
  read so far and the number to read: the engine's cancellation point, and its progress.

Every failure is a one-line :class:`~engine.api.errors.VideoError`.
"""

from __future__ import annotations

import math
import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
from PIL import Image

from engine.api.errors import VideoError

MAX_FRAME_PIXELS = 8192 * 8192
"""Frames larger than this are refused before decoding (an 8K frame is 7680 x 4320)."""

SEEK_AHEAD_S = 2.0
"""Decode forward instead of seeking when the next sampled frame is at most this far ahead."""

TIME_TOLERANCE_S = 0.005
"""A frame whose time is at most this much (or half a frame period, if less) after a sampled time
counts as shown at that time: pts are rounded to the stream's time base (1 ms in Matroska)."""

NOT_A_VIDEO = "is not a video Smolchat can read (damaged, or not a video)"
"""The end of the message for a file FFmpeg cannot open, after the file's name: FFmpeg's own words
("[Errno 1094995529] Invalid data found when processing input: '...'") say no more and name it again."""

END_TOLERANCE_S = 1.0
"""At the end of a stream (a truncated file), a sampled time this close after the last decoded
frame still takes that frame; later times are dropped."""


@dataclass(frozen=True)
class VideoInfo:
    """What the container says, as transformers reads it (``read_video_pyav``).

    Attributes:
        total_frames: ``stream.frames`` (or ``round(duration_s * fps)`` when the container has no count).
        fps: ``stream.average_rate`` as a float.
        duration: ``total_frames / fps`` seconds (transformers' ``VideoMetadata.duration``).
        width, height: coded size of the stream (before rotation).
        start: time of the first frame in seconds (``stream.start_time``), 0 when unknown.
    """

    total_frames: int
    fps: float
    duration: float
    width: int
    height: int
    start: float = 0.0


@dataclass(frozen=True, eq=False)
class VideoFrames:
    """Frames sampled from one video.

    Attributes:
        frames: RGB ``uint8 [H, W, 3]`` arrays (resized when a ``resize`` was given), in time order.
        indices: the frame index of each frame (transformers' ``frames_indices``).
        timestamps: ``index / fps`` seconds of each frame (transformers' ``VideoMetadata.timestamps``).
        info: the container's metadata.
        decoded_frames: how many frames were decoded to get these (the cost of seeking).
        planned_frames: how many frames the sampling asked for (more than ``frames`` when the file
            ended early: truncated or damaged).
    """

    frames: list[np.ndarray]
    indices: list[int]
    timestamps: list[float]
    info: VideoInfo
    decoded_frames: int = 0
    frame_times: list[float] = field(default_factory=list)  # the decoded frames' own times (seconds)
    planned_frames: int = 0

    @property
    def duration(self) -> float:
        return self.info.duration


def sample_indices(total_frames: int, video_fps: float, duration: float, fps: float = 1.0,
                   max_frames: int = 64, skip_secs: float = 1.0) -> np.ndarray:
    """Frame indices to sample: ``SmolVLMVideoProcessor.sample_frames``, line for line."""
    estimated = int(round(fps * duration))
    desired = max(1, min(estimated, max_frames))
    start, end = 0, total_frames - 1
    if skip_secs > 0 and (duration - 2 * skip_secs) > (max_frames * fps):
        start = int(skip_secs * video_fps)
        end = int(total_frames - skip_secs * video_fps)
    start = max(0, start)
    end = min(end, total_frames - 1)
    if start >= end:
        start, end = 0, total_frames - 1
    return np.unique(np.linspace(start, end, desired, dtype=int))


def _open(path: str | os.PathLike):
    import av

    p = Path(path)
    if not p.is_file():
        raise VideoError(f"Video file not found: {p}")
    if p.stat().st_size == 0:
        raise VideoError(f"{p.name} is empty (0 bytes)")
    try:
        return av.open(str(p), metadata_errors="ignore")
    except OSError as exc:  # the file, not its contents: permission denied, an I/O error
        raise VideoError(f"{p.name} cannot be opened: {exc.strerror or _short(exc)}") from None
    except (av.FFmpegError, UnicodeDecodeError, ValueError):
        raise VideoError(f"{p.name} {NOT_A_VIDEO}") from None


def _name(path: str | os.PathLike) -> str:
    """How a message names a video: its file name (the user knows where they put it; the CLI was
    given the path, the app shows the chip), once, at the start of the sentence."""
    return Path(path).name


def _short(exc: BaseException) -> str:
    """An error's words for a user: one line, without FFmpeg's error number and function name
    ("[Errno 1094995529] Invalid data found when processing input: 'avcodec_receive_frame()'" reads
    "its data is damaged or cut short"; trial 53)."""
    try:
        import av

        if isinstance(exc, av.InvalidDataError):
            return "its data is damaged or cut short"
    except ImportError:  # (PyAV is a dependency; an animation's Pillow errors come without it too)
        pass
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", " ".join(str(exc).split()))
    text = re.sub(r":\s*'[\w.]+\(\)'$", "", text)
    return text[:200] or type(exc).__name__


ANIMATION_SUFFIXES = (".webp", ".png", ".apng")
"""Animated images read with Pillow, not PyAV (FFmpeg reads no animated WebP/APNG as a video stream)."""


def _animation(path: str | os.PathLike) -> list[float] | None:
    """The start time (seconds) of each frame of an animated WebP/APNG, plus its end as the last
    item; ``None`` for any other file (PyAV reads it)."""
    if Path(path).suffix.lower() not in ANIMATION_SUFFIXES or not Path(path).is_file():
        return None
    try:
        with Image.open(path) as image:
            n = int(getattr(image, "n_frames", 1))
            if n < 2:
                return None
            times = [0.0]
            for i in range(n):
                image.seek(i)
                image.load()  # WebP sets this frame's duration when it decodes it
                # Browsers show a 0 ms (or missing) frame duration as 100 ms.
                ms = float(image.info.get("duration") or 0) or 100.0
                times.append(times[-1] + ms / 1000.0)
            return times
    except (OSError, SyntaxError, ValueError):
        return None


def _animation_info(times: list[float], path) -> VideoInfo:
    with Image.open(path) as image:
        width, height = image.size
    if width * height > MAX_FRAME_PIXELS:
        raise VideoError(f"{_name(path)} has frames too large to decode safely ({width}x{height})")
    total = len(times) - 1
    return VideoInfo(total_frames=total, fps=total / times[-1], duration=times[-1], width=width, height=height)


def _read_animation(path, times: list[float], indices: list[int], resize, check) -> tuple[list, list, list, int]:
    """Frames of an animated image at the sampled indices' times (the frame shown then)."""
    from engine.api.images import to_rgb

    info = _animation_info(times, path)
    out, kept, shown, decoded = [], [], [], 0
    try:
        with Image.open(path) as image:
            for index in indices:
                if check is not None:
                    check(len(out), len(indices))
                target = index / info.fps
                frame = max(i for i in range(info.total_frames) if times[i] <= target + 1e-9)
                image.seek(frame)
                decoded += 1
                picture = to_rgb(image.convert("RGBA"))
                out.append(resize(picture) if resize is not None else np.asarray(picture))
                kept.append(index)
                shown.append(times[frame])
    except (OSError, SyntaxError, ValueError) as exc:
        if not out:
            raise VideoError(f"{_name(path)} cannot be decoded: {_short(exc)}") from None
    return out, kept, shown, decoded


def probe(path: str | os.PathLike) -> VideoInfo:
    """Read a video's metadata from its headers (no decoding).

    Raises:
        VideoError: the file is missing, empty, not a video, has no video stream, or no frame rate.
    """
    times = _animation(path)
    if times is not None:
        return _animation_info(times, path)
    container = _open(path)
    try:
        return _info(container, path)
    finally:
        container.close()


def _info(container, path) -> VideoInfo:
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams})
        raise VideoError(f"{_name(path)} has no video in it, only {' and '.join(kinds)}" if kinds
                         else f"{_name(path)} has no video in it (no streams at all)")
    stream = container.streams.video[0]
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    if not rate or rate <= 0:
        raise VideoError(f"{_name(path)} has no frame rate (damaged, or not a video)")
    fps = float(rate)
    width, height = int(stream.codec_context.width or 0), int(stream.codec_context.height or 0)
    if width < 1 or height < 1:
        raise VideoError(f"{_name(path)} has no picture size (damaged, or not a video)")
    if width * height > MAX_FRAME_PIXELS:
        raise VideoError(f"{_name(path)} has frames too large to decode safely ({width}x{height})")
    tb = stream.time_base or Fraction(1, 1)
    start = float(stream.start_time * tb) if stream.start_time is not None else 0.0
    total = int(stream.frames or 0)
    if total <= 0:  # e.g. Matroska/WebM: no frame count in the headers
        if stream.duration:
            seconds = float(stream.duration * tb)
        elif container.duration:
            seconds = container.duration / 1_000_000 - start
        else:
            seconds = 0.0
        total = int(round(seconds * fps))
    if total <= 0:  # e.g. a raw H.264 stream: no duration either; count its packets (no decoding)
        total = sum(1 for packet in container.demux(stream) if packet.size)
    if total <= 0:
        raise VideoError(f"{_name(path)} has no frames (zero length)")
    return VideoInfo(total_frames=total, fps=fps, duration=total / fps, width=width, height=height, start=start)


def _upright(image: Image.Image, rotation: float) -> Image.Image:
    """Apply a display rotation (degrees counter-clockwise, PyAV's ``VideoFrame.rotation``)."""
    rotation = int(round(rotation / 90.0)) % 4 * 90
    if rotation == 90:
        return image.transpose(Image.Transpose.ROTATE_90)
    if rotation == 180:
        return image.transpose(Image.Transpose.ROTATE_180)
    if rotation == 270:
        return image.transpose(Image.Transpose.ROTATE_270)
    return image


def read_video(path: str | os.PathLike, fps: float = 1.0, max_frames: int = 64,
               resize=None, check=None) -> VideoFrames:
    """Sample frames from a video file as transformers' SmolVLM video processor does.

    Args:
        fps: frames per second to sample (``video_sampling.fps``); > 0.
        max_frames: at most this many frames (``video_sampling.max_frames``); >= 1.
        resize: ``PIL.Image -> np.ndarray`` applied to each upright RGB frame as soon as it is
            decoded (so a 64-frame 8K video never sits in memory at full size); default: keep the
            frame as a ``uint8 [H, W, 3]`` array.
        check: called before every decoded frame; raise from it to stop (the engine's cancel).

    Raises:
        ValueError: ``fps`` or ``max_frames`` out of range.
        VideoError: the file cannot be read (one line naming it), or no frame could be decoded.
    """
    import av

    if not (fps > 0 and math.isfinite(fps)):
        raise ValueError(f"fps must be a positive number, got {fps}")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    times = _animation(path)
    if times is not None:
        info = _animation_info(times, path)
        indices = [int(i) for i in sample_indices(info.total_frames, info.fps, info.duration, fps, max_frames)]
        frames, kept, shown, decoded = _read_animation(path, times, indices, resize, check)
        return VideoFrames(frames=frames, indices=kept, timestamps=[i / info.fps for i in kept], info=info,
                           decoded_frames=decoded, frame_times=shown, planned_frames=len(indices))
    container = _open(path)
    try:
        info = _info(container, path)
        indices = [int(i) for i in sample_indices(info.total_frames, info.fps, info.duration, fps, max_frames)]
        try:
            container.seek(0)
            seekable = True
        except (av.FFmpegError, OSError):  # a raw elementary stream: decode it from the start
            container.close()
            container = _open(path)
            seekable = False
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        frames, kept, times, decoded = _decode_at(container, stream, info, indices, resize, seekable, check)
    except av.FFmpegError as exc:
        raise VideoError(f"{_name(path)} cannot be decoded: {_short(exc)}") from None
    except MemoryError:
        raise VideoError(f"Not enough memory to decode {_name(path)}") from None
    finally:
        container.close()
    if not frames:
        raise VideoError(f"No frame could be decoded from {_name(path)} (truncated or damaged)")
    return VideoFrames(frames=frames, indices=kept, timestamps=[i / info.fps for i in kept], info=info,
                       decoded_frames=decoded, frame_times=times, planned_frames=len(indices))


def tolerance(fps: float) -> float:
    """How late a frame may start and still count as shown at a sampled time (seconds)."""
    return min(TIME_TOLERANCE_S, 0.5 / fps)


# Frames converted (RGB, upright, resized) at once on worker threads: Pillow's resize releases the
# GIL, and two LANCZOS resizes per frame were 70% of a 64-frame clip's preparation on one thread.
CONVERT_THREADS = max(1, min(8, os.cpu_count() or 1))


def _decode_at(container, stream, info: VideoInfo, indices: list[int], resize, seekable: bool = True, check=None):
    """Decode the frame shown at ``info.start + index / fps`` for each index (sorted ascending):
    the last frame whose time is at most :func:`tolerance` after it. Decoding is sequential;
    each chosen frame is converted on a worker thread while the next is decoded, with at most
    ``2 * CONVERT_THREADS`` full-size frames waiting (an 8K clip never piles up in memory)."""
    out: list[Future] = []
    with ThreadPoolExecutor(CONVERT_THREADS, thread_name_prefix="video-frames") as pool:
        try:
            kept, times, decoded = _decode_frames(container, stream, info, indices, resize, seekable, check, pool, out)
        except BaseException:
            for f in out:  # a cancel or an error: frames not converted yet are not worth waiting for
                f.cancel()
            raise
        return [f.result() for f in out], kept, times, decoded


def _decode_frames(container, stream, info: VideoInfo, indices: list[int], resize, seekable: bool, check,
                   pool: ThreadPoolExecutor, out: list[Future]) -> tuple[list[int], list[float], int]:
    tb = stream.time_base or Fraction(1, 1)
    period = 1.0 / info.fps
    half = tolerance(info.fps)
    kept, times = [], []
    decoded = 0
    it = None  # the running decoder
    prev = None  # (time, frame): the last decoded frame at or before the current target
    pending = None  # (time, frame): a decoded frame past the previous target, not used yet
    last_time = None  # time of the last decoded frame

    def convert(frame):
        image = _upright(frame.to_image(), getattr(frame, "rotation", 0) or 0)
        return resize(image) if resize is not None else np.asarray(image)

    for index in indices:
        target = info.start + index * period
        if it is None and not seekable:
            it = container.decode(stream)
        elif it is None or (seekable and target - last_time > SEEK_AHEAD_S):
            offset = int((target - info.start) / tb) + (stream.start_time or 0)
            container.seek(max(0, offset), stream=stream, backward=True, any_frame=False)
            it = container.decode(stream)
            prev = pending = last_time = None
        chosen = None
        eof = False
        if pending is not None:
            if pending[0] <= target + half:
                prev, pending = pending, None
            else:
                chosen = prev
        while chosen is None:
            if check is not None:
                check(len(out), len(indices))  # between frames: a cancel never waits for a seek-and-decode run
            try:
                frame = next(it)
            except StopIteration:
                eof = True
                if prev is not None and target - prev[0] <= END_TOLERANCE_S:
                    chosen = prev
                break
            decoded += 1
            t = float(frame.pts * tb) if frame.pts is not None else (
                last_time + period if last_time is not None else target)
            last_time = t
            if t <= target + half:
                prev = (t, frame)
            elif prev is None:  # a seek that landed past the target: the nearest frame there is
                prev = chosen = (t, frame)
            else:
                pending = (t, frame)
                chosen = prev
        if chosen is not None:
            out.append(pool.submit(convert, chosen[1]))
            waiting = [f for f in out[-4 * CONVERT_THREADS:] if not f.done()]
            if len(waiting) > 2 * CONVERT_THREADS:
                waiting[0].result()  # back-pressure; also raises a worker's error here
            kept.append(index)
            times.append(chosen[0] - info.start)
        if eof:
            break  # a truncated file: later frames cannot be reached either
    return kept, times, decoded
