"""The prompt text of images and videos for SmolVLM / SmolVLM2: what replaces ``<image>`` and ``<video>``.

String building only (no Pillow, no torch). Sources: transformers 5.24 ``processing_smolvlm.py``
(``_prompt_split_image``, ``_prompt_single_image``, ``SmolVLMProcessor.replace_video_token``) and
``processing_idefics3.py`` (``Idefics3Processor.replace_image_token``), which build the same image text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

IMAGE_PLACEHOLDER = "\ue000smolchat-image\ue001"
"""Private-use sentinel that :func:`expand_prompt` replaces; never typed by users, never a token."""

FAKE_IMAGE_TOKEN = "<fake_token_around_image>"
IMAGE_TOKEN = "<image>"
GLOBAL_IMAGE_TOKEN = "<global-img>"
VIDEO_TOKEN = "<video>"
"""What the SmolVLM2 chat template writes for a video part (plain text, not a special token)."""

# processing_smolvlm.py: DEFAULT_VIDEO_INTRO, FRAME_TIMESTAMP_MESSAGE, DEFAULT_MEDIA_OUTTRO
VIDEO_INTRO = "You are provided the following series of {frame_count} frames from a {video_duration} [H:MM:SS] video.\n"
FRAME_TIMESTAMP = "\nFrame from {timestamp}:"
MEDIA_OUTTRO = "\n\n"


class HasPrompt(Protocol):
    @property
    def prompt(self) -> str: ...


def image_prompt(rows: int, cols: int, image_seq_len: int) -> str:
    """The text that replaces one image placeholder.

    Source: ``Idefics3Processor.replace_image_token`` (``processing_idefics3.py``; transformers 4's
    ``_prompt_split_image`` / ``_prompt_single_image``). With F = ``<fake_token_around_image>``,
    I = ``<image>`` and S = ``image_seq_len``:

    - split (rows, cols > 0): for each row r, for each column c: ``F<row_r_col_c>`` + ``I * S``; a
      ``"\\n"`` after each row; then ``"\\nF<global-img>" + I * S + F``.
    - single (rows = cols = 0): ``F<global-img>`` + ``I * S`` + ``F``.
    """
    image_run = IMAGE_TOKEN * image_seq_len
    global_block = f"{FAKE_IMAGE_TOKEN}{GLOBAL_IMAGE_TOKEN}{image_run}{FAKE_IMAGE_TOKEN}"
    if rows == 0 and cols == 0:
        return global_block
    parts = []
    for r in range(1, rows + 1):
        parts.extend(f"{FAKE_IMAGE_TOKEN}<row_{r}_col_{c}>{image_run}" for c in range(1, cols + 1))
        parts.append("\n")
    parts.append("\n" + global_block)
    return "".join(parts)


def expand_prompt(prompt: str, images: Sequence[HasPrompt]) -> str:
    """Replace each :data:`IMAGE_PLACEHOLDER` in ``prompt`` with the next image's prompt, in order.

    Only the private sentinel is replaced; ``"<image>"`` typed by a user is left alone. Use this on
    trusted strings only (``Tokenizer.encode_chat`` keeps user text out of the way for you).

    Raises:
        ValueError: the number of placeholders differs from ``len(images)`` (both numbers named).
    """
    pieces = prompt.split(IMAGE_PLACEHOLDER)
    if len(pieces) - 1 != len(images):
        raise ValueError(
            f"prompt has {len(pieces) - 1} image placeholders but {len(images)} images were given"
        )
    out = [pieces[0]]
    for image, piece in zip(images, pieces[1:]):
        out.append(image.prompt)
        out.append(piece)
    return "".join(out)


def frame_count_words(n: int) -> str:
    """``num2words(n)`` (English), as transformers writes the frame count: 12 -> ``"twelve"``,
    64 -> ``"sixty-four"``."""
    from num2words import num2words

    return num2words(n)


def video_prompt(timestamps: Sequence[float], duration: float | None, image_seq_len: int) -> str:
    """The text that replaces one ``<video>``: ``SmolVLMProcessor.replace_video_token``.

    The intro line with the frame count in words and the duration as ``H:MM:SS``
    (``str(timedelta(seconds=int(duration)))``; without a duration, the last timestamp's), then for
    each frame ``"\nFrame from MM:SS:"`` (``int(s // 60)``, ``int(s % 60)``) and one global image
    block, then ``"\n\n"``.
    """
    if not timestamps:
        raise ValueError("a video prompt needs at least one frame")
    seconds = int(duration) if duration is not None else int(timestamps[-1])
    parts = [VIDEO_INTRO.format(frame_count=frame_count_words(len(timestamps)),
                                video_duration=str(timedelta(seconds=seconds)))]
    block = image_prompt(0, 0, image_seq_len)
    for second in timestamps:
        stamp = f"{int(second // 60):02d}:{int(second % 60):02d}"
        parts.append(FRAME_TIMESTAMP.format(timestamp=stamp) + block)
    parts.append(MEDIA_OUTTRO)
    return "".join(parts)
