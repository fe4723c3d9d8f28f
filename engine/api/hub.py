"""Telling a Hugging Face Hub repository id from a local path (torch-free: the app uses it too)."""

from __future__ import annotations

from pathlib import Path

#: What ``--model`` takes, in every command's --help (``python -m engine generate``, ``info``, ``embed``,
#: ``perplexity`` and ``serve``): engine.sources.resolve_source reads all three.
MODEL_HELP = "checkpoint folder, Hub repository id or GGUF file"


def looks_like_repo_id(text: str) -> bool:
    """``owner/name`` that is not a local path: exactly one ``/``, not starting with ``.``, ``/`` or ``~``,
    and ``owner`` is not an existing local folder (``checkpoints/nope`` is a mistyped local path)."""
    text = str(text)
    if text.count("/") != 1 or text.startswith((".", "/", "~")) or Path(text).exists():
        return False
    owner, name = text.split("/")
    if not name:  # "missing-folder/": a folder typed with its slash, never a repo id
        return False
    return not Path(owner).is_dir()
