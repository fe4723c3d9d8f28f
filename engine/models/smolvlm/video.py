"""Videos -> the model's frames: sampled frames (:mod:`engine.api.videos`, PyAV) resized and
stacked as transformers' ``SmolVLMVideoProcessor`` does, and the prompt that goes with them.

Pillow, numpy and PyAV only (no torch). Decoding, sampling (:func:`sample_indices`) and every bad
input case live in :mod:`engine.api.videos` (torch-free, so the app probes and previews with the
same code); they are re-exported here.

Resizing (:func:`resize_frame`) follows ``SmolVLMVideoProcessor.resize``: longest edge to
``video_sampling.video_size.longest_edge`` (short edge ``int()``-truncated and rounded up to even,
``get_resize_output_image_size``), then a square ``max_image_size`` frame; with Pillow's filter of the
checkpoint (LANCZOS), as the image processor does (transformers' torchvision path uses torchvision's
LANCZOS, or BICUBIC + antialias before torchvision 0.27).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from PIL import Image

from engine.api.errors import VideoError
from engine.api.videos import (  # noqa: F401  (re-exported: the engine's one video reader)
    ANIMATION_SUFFIXES,
    END_TOLERANCE_S,
    MAX_FRAME_PIXELS,
    SEEK_AHEAD_S,
    TIME_TOLERANCE_S,
    VideoFrames,
    VideoInfo,
    probe,
    read_video,
    sample_indices,
    tolerance,
)
from engine.models.smolvlm.processing import ProcessedImage
from engine.models.smolvlm.prompt import VIDEO_TOKEN, video_prompt

if TYPE_CHECKING:
    from engine.models.smolvlm.processing import ImageProcessor

MAX_IMAGE_SIZE = 4096
"""Cap on the first resize's longest edge (``video_processing_smolvlm.MAX_IMAGE_SIZE``)."""


def resize_output_size(width: int, height: int, longest_edge: int) -> tuple[int, int]:
    """``(width, height)`` after the first resize (``get_resize_output_image_size``)."""
    side = min(MAX_IMAGE_SIZE, longest_edge)
    aspect = width / height
    if width >= height:
        width = side
        height = int(width / aspect)
        height += height % 2
    else:
        height = side
        width = int(height * aspect)
        width += width % 2
    return max(width, 1), max(height, 1)


def resize_frame(image: Image.Image, longest_edge: int, square: int,
                 resample: int = Image.Resampling.LANCZOS) -> np.ndarray:
    """One RGB frame -> ``uint8 [square, square, 3]``: longest edge to ``longest_edge``, then to the
    ``square x square`` frame the model takes (``SmolVLMVideoProcessor.resize``; no tiling)."""
    size = resize_output_size(image.width, image.height, longest_edge)
    if image.size != size:
        image = image.resize(size, resample=resample)
    if image.size != (square, square):
        image = image.resize((square, square), resample=resample)
    return np.asarray(image)


@dataclass(frozen=True, eq=False)
class ProcessedVideo(ProcessedImage):
    """The frames of one video as single global tiles (``pixels uint8 [N, 3, M, M]``, one per
    frame, in time order) plus what the prompt says about them. To the model and the KV cache a
    video is an image of N tiles; only its prompt differs (:func:`~engine.models.smolvlm.prompt.video_prompt`)."""

    timestamps: tuple[float, ...] = ()
    duration: float | None = None
    indices: tuple[int, ...] = ()
    planned_frames: int = 0  # what the sampling asked for; more than num_frames for a truncated file
    name: str = ""  # the file's name, for messages
    #: What the chat template writes for a video part, and :attr:`prompt` replaces.
    video_token: ClassVar[str] = VIDEO_TOKEN

    @property
    def num_frames(self) -> int:
        return self.num_tiles

    @property
    def prompt(self) -> str:
        return video_prompt(self.timestamps, self.duration, self.image_seq_len)


def _sampling(processor: ImageProcessor, fps: float | None, max_frames: int | None) -> tuple[float, int]:
    sampling = processor.video_sampling
    if sampling is None:
        raise VideoError("This model takes no videos (its preprocessor_config.json has no video_sampling)")
    fps = float(sampling.get("fps", 1) if fps is None else fps)
    max_frames = int(sampling.get("max_frames", 64) if max_frames is None else max_frames)
    return fps, max_frames


def planned_prompt(processor: ImageProcessor, source: str | os.PathLike, fps: float | None = None,
                   max_frames: int | None = None) -> str:
    """The prompt a video will get, from its headers alone (no decoding): for counting its tokens
    before sending. Exact unless the file turns out truncated (fewer frames decode)."""
    fps, max_frames = _sampling(processor, fps, max_frames)
    info = probe(source)
    indices = sample_indices(info.total_frames, info.fps, info.duration, fps, max_frames)
    return video_prompt([int(i) / info.fps for i in indices], info.duration, processor.image_seq_len)


def preprocess_video(processor: ImageProcessor, source: str | os.PathLike, fps: float | None = None,
                     max_frames: int | None = None, check=None) -> ProcessedVideo:
    """:meth:`ImageProcessor.preprocess_video`."""
    fps, max_frames = _sampling(processor, fps, max_frames)
    sampling = processor.video_sampling
    square = processor.max_image_size
    edge = int((sampling.get("video_size") or {}).get("longest_edge", square))
    frame = functools.partial(resize_frame, longest_edge=edge, square=square, resample=processor.resample)

    def resize(image: Image.Image) -> np.ndarray:  # channels first on the worker thread: [3, M, M]
        return np.ascontiguousarray(frame(image).transpose(2, 0, 1))

    video = read_video(source, fps=fps, max_frames=max_frames, resize=resize, check=check)
    pixels = np.stack(video.frames)  # [N, 3, M, M]
    out = ProcessedVideo(pixels=pixels, lut=processor.lut(pixels.shape[1]), rows=0, cols=0,
                         image_seq_len=processor.image_seq_len, timestamps=tuple(video.timestamps),
                         duration=video.duration, indices=tuple(video.indices),
                         planned_frames=video.planned_frames, name=Path(source).name)
    out.hash_tiles()
    return out
