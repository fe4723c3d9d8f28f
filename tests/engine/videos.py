"""Small synthetic videos for tests, written with PyAV (FFmpeg's wheels): odd inputs the shared clips
do not cover (long, huge, rotated, variable frame rate, audio only, truncated)."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np


def write_video(path: Path, frames, rate: int = 10, codec: str = "libx264", rotation: int | None = None,
                gop: int | None = None, pts: list[int] | None = None, time_base: Fraction | None = None,
                options: dict | None = None, container_options: dict | None = None) -> Path:
    """Encode ``frames`` (an iterable of ``uint8 [H, W, 3]`` arrays, all one size) into ``path``.

    ``pts`` (in ``time_base`` units) gives each frame its own time: a variable frame rate.
    """
    import av

    frames = iter(frames)
    first = next(frames)
    h, w = first.shape[:2]
    out = av.open(str(path), "w", options=container_options or {})
    stream = out.add_stream(codec, rate=rate)
    stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
    stream.options = {"preset": "ultrafast", **(options or {})} if codec == "libx264" else (options or {})
    if gop is not None:
        stream.codec_context.gop_size = gop
    if time_base is not None:
        stream.codec_context.time_base = time_base
        stream.time_base = time_base
    if rotation is not None:
        stream.set_display_rotation(rotation)
    for i, array in enumerate(itertools.chain([first], frames)):
        frame = av.VideoFrame.from_ndarray(array, format="rgb24")
        if pts is not None:
            frame.pts = pts[i]
            frame.time_base = time_base
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    return path


def solid(h: int, w: int, value: int = 0) -> np.ndarray:
    return np.full((h, w, 3), value, dtype=np.uint8)


def write_audio_only(path: Path) -> Path:
    import av

    out = av.open(str(path), "w")
    stream = out.add_stream("aac", rate=8000)
    for i in range(10):
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate, frame.pts = 8000, i * 1024
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    return path
