"""Telling a Hugging Face Hub repository id from a local path (torch-free: the app uses it too)."""

from __future__ import annotations

from pathlib import Path


def looks_like_repo_id(text: str) -> bool:
    """``owner/name`` that is not a local path: exactly one ``/``, not starting with ``.``, ``/`` or ``~``,
    and ``owner`` is not an existing local folder (``checkpoints/nope`` is a mistyped local path)."""
    text = str(text)
    if text.count("/") != 1 or text.startswith((".", "/", "~")) or Path(text).exists():
        return False
    return not Path(text.split("/")[0]).is_dir()
