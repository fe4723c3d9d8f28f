"""Video attachments without Qt: which files are videos, what the engine will sample from them, and
how that reads in the composer ("0:12 · 12 frames", "1 video · 12 frames · 768 image tokens").

A file is a video by its suffix (mp4, webm, mov, mkv, m4v); an animated GIF, WebP or APNG is a
video only to a model whose capabilities say ``video`` (SmolVLM2); to an image-only model it stays an
image whose first frame is used. Probing reads headers only (:func:`engine.api.videos.probe`), so it
is cheap enough for the UI thread; decoding frames (the filmstrip) runs elsewhere (:mod:`app.filmstrip`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.api import Attachment, VideoError
from engine.api.images import frame_count

VIDEO_SUFFIXES = (".mp4", ".webm", ".mov", ".mkv", ".m4v")
ANIMATED_SUFFIXES = (".gif", ".webp", ".png", ".apng")
VIDEO_FILTER = "Videos (*.mp4 *.webm *.mov *.mkv *.m4v *.gif *.webp)"

DEFAULT_MAX_FRAMES = 64
"""SmolVLM2's ``video_sampling.max_frames``; also the largest value the settings accept."""
MAX_FRAMES_LIMIT = 64
DEFAULT_FPS = 1.0
"""SmolVLM2's ``video_sampling.fps``: frames sampled per second of video."""
FPS_RANGE = (0.1, 8.0)


class InvalidVideoError(ValueError):
    """A file the user attached as a video cannot be read (the engine's one-line message)."""


@dataclass(frozen=True)
class VideoPlan:
    """What the engine will take from a video, from its headers.

    Attributes:
        duration: seconds (the engine's ``VideoInfo.duration``).
        frames: frames it will sample at the given fps / max frames.
        width, height: the stored picture size (before rotation).
    """

    duration: float
    frames: int
    width: int
    height: int

    @property
    def caption(self) -> str:
        """``"0:12 · 12 frames"``."""
        return f"{format_duration(self.duration)} · {self.frames} frame{'s' if self.frames != 1 else ''}"


def is_video_file(path: str | Path) -> bool:
    """True for a video container by its suffix (mp4, webm, mov, mkv, m4v)."""
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def is_animated_image(path: str | Path) -> bool:
    """True for a GIF, WebP or APNG with more than one frame (headers only)."""
    return Path(path).suffix.lower() in ANIMATED_SUFFIXES and frame_count(path) > 1


def attachment_kind(path: str | Path, takes_video: bool) -> str:
    """``"video"`` for a video file, and for an animated image when the model ``takes_video``;
    else ``"image"``."""
    if is_video_file(path) or (takes_video and is_animated_image(path)):
        return "video"
    return "image"


def attachments_for(paths: list[str], takes_video: bool, detail: str | None = None) -> list[Attachment]:
    """The backend's attachments for stored or pending ``paths`` (:func:`attachment_kind`); images of
    an earlier message carry the ``detail`` they are read at (``Attachment.detail``)."""
    kinds = [(p, attachment_kind(p, takes_video)) for p in paths]
    return [Attachment(p, kind, detail if kind == "image" else None) for p, kind in kinds]


def clamp_max_frames(value) -> int:
    """``value`` as a max-frames setting: an int in 1..64 (64 when it is not a number)."""
    try:
        return max(1, min(MAX_FRAMES_LIMIT, int(value)))
    except (TypeError, ValueError):
        return DEFAULT_MAX_FRAMES


def clamp_fps(value) -> float:
    """``value`` as a frames-per-second setting within :data:`FPS_RANGE` (1.0 when not a number)."""
    try:
        fps = float(value)
    except (TypeError, ValueError):
        return DEFAULT_FPS
    if fps != fps:  # NaN
        return DEFAULT_FPS
    return max(FPS_RANGE[0], min(FPS_RANGE[1], fps))


def plan_video(path: str | Path, fps: float = DEFAULT_FPS, max_frames: int = DEFAULT_MAX_FRAMES) -> VideoPlan:
    """Duration and the frames the engine will sample (exact unless the file turns out truncated).

    Raises:
        InvalidVideoError: missing, empty, not a video, audio only, no frames, frames too large.
    """
    from engine.api.videos import probe, sample_indices

    try:
        info = probe(path)
    except VideoError as exc:
        raise InvalidVideoError(str(exc)) from None
    frames = len(sample_indices(info.total_frames, info.fps, info.duration, fps, max_frames))
    return VideoPlan(duration=info.duration, frames=frames, width=info.width, height=info.height)


def format_duration(seconds: float) -> str:
    """``"0:12"``, ``"12:05"``, ``"3:00:00"`` (whole seconds, rounded; under a second shows 0:01)."""
    total = max(1, round(seconds)) if seconds > 0 else 0
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def pending_media_summary(image_counts: list[int | None], plans: list[VideoPlan | None], tokens_per_frame: int,
                          takes_video: bool = True, video_counts: list[int] | None = None) -> str:
    """The composer's budget line: ``"1 video · 12 frames · 954 tokens"`` (each video's whole prompt
    counted by the engine: intro, time stamps, frames), ``"1 video · 12 frames · 768 image tokens"``
    (frames x tokens per frame, where no count came), ``"1 image · 1 video · 12 frames · 1,238 tokens"``,
    ``"1 video · this model takes no videos"``, ``"2 videos · 12 frames · 1 unreadable"``.

    ``image_counts``: tokens of each image (None: not counted yet, -1: unknown); ``plans``: each
    video's plan (None: unreadable); ``tokens_per_frame``: the model's tokens per frame (0: unknown);
    ``video_counts``: each video's prompt tokens from the engine (-1: unknown).
    """
    if plans and not takes_video:
        label = "1 video" if len(plans) == 1 else f"{len(plans)} videos"
        return f"{label} · this model takes no videos"
    parts = []
    if image_counts:
        parts.append("1 image" if len(image_counts) == 1 else f"{len(image_counts)} images")
    if plans:
        parts.append("1 video" if len(plans) == 1 else f"{len(plans)} videos")
        frames, unreadable = sum(p.frames for p in plans if p is not None), plans.count(None)
        if unreadable < len(plans):
            parts.append(f"{frames} frame{'s' if frames != 1 else ''}")
        if unreadable:  # (moved or deleted since it was attached: its chip says which and why)
            parts.append(f"{unreadable} unreadable" if len(plans) > 1 else "unreadable")
    if not parts:
        return ""
    if any(c is None for c in image_counts):
        return " · ".join(parts) + " · counting image tokens…"
    known = [c for c in image_counts if c >= 0]
    if plans and video_counts and len(video_counts) == len(plans) and min(video_counts) >= 0:
        if len(known) < len(image_counts):
            return " · ".join(parts)
        return " · ".join(parts) + f" · {sum(known) + sum(video_counts):,} tokens"
    if len(known) < len(image_counts) or (plans and (tokens_per_frame <= 0 or None in plans)):
        return " · ".join(parts)
    total = sum(known) + sum(p.frames for p in plans) * tokens_per_frame
    return " · ".join(parts) + f" · {total:,} image tokens"
