"""The checkpoints the model manager offers, what each can do, and what the user typed instead (no Qt).

Download sizes are data (the Hub's bfloat16 safetensors; checked against the parameter count of each
config in tests). What a checkpoint can do comes from its files once they are on disk
(:func:`folder_abilities`: ``vision_config`` in config.json means images, ``video_sampling`` in
preprocessor_config.json means video, as :mod:`engine.models.smolvlm` reads them); before a download
it comes from the entry's ``model_type`` (:data:`TYPE_ABILITIES`, checked against the same configs).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from engine.api import looks_like_repo_id

TEXT_ONLY, IMAGES, IMAGES_VIDEO = "text only", "images", "images, video"

#: What each ``model_type`` of :data:`engine.registry.ARCHITECTURES` can do (for checkpoints not
#: downloaded yet; a downloaded one says it through its files).
TYPE_ABILITIES = {"idefics3": IMAGES, "smolvlm": IMAGES_VIDEO, "llama": TEXT_ONLY}


@dataclass(frozen=True)
class CatalogEntry:
    """One downloadable checkpoint.

    Attributes:
        size_gb: download size in GB (bfloat16 safetensors + tokenizer), approximate; 0: unknown.
        model_type: its config.json ``model_type`` ("" when unknown: a repo id the user typed).
    """

    repo_id: str
    label: str
    size_gb: float
    note: str
    model_type: str = ""

    @property
    def abilities(self) -> str:
        """``"images"``, ``"images, video"``, ``"text only"``, or "" when unknown."""
        return TYPE_ABILITIES.get(self.model_type, "")

    @property
    def video(self) -> bool:
        return self.abilities == IMAGES_VIDEO


CATALOG = [
    CatalogEntry("HuggingFaceTB/SmolVLM-256M-Instruct", "SmolVLM 256M", 0.5, "Smallest and fastest; fine on a CPU",
                 "idefics3"),
    CatalogEntry("HuggingFaceTB/SmolVLM-500M-Instruct", "SmolVLM 500M", 1.0, "Better answers, still light", "idefics3"),
    CatalogEntry("HuggingFaceTB/SmolVLM-Instruct", "SmolVLM 2.2B", 4.5, "Best SmolVLM quality; wants a GPU",
                 "idefics3"),
    CatalogEntry("HuggingFaceTB/SmolVLM2-256M-Video-Instruct", "SmolVLM2 256M (video)", 0.5,
                 "SmolVLM2, smallest: asks about videos on a laptop CPU", "smolvlm"),
    CatalogEntry("HuggingFaceTB/SmolVLM2-500M-Video-Instruct", "SmolVLM2 500M (video)", 1.0,
                 "SmolVLM2, balanced", "smolvlm"),
    CatalogEntry("HuggingFaceTB/SmolVLM2-2.2B-Instruct", "SmolVLM2 2.2B", 4.5, "SmolVLM2, largest; wants a GPU",
                 "smolvlm"),
    CatalogEntry("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2 135M (text)", 0.27,
                 "A tiny text-only chat model: no images", "llama"),
]


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def folder_abilities(folder: str | Path) -> str:
    """What the checkpoint in ``folder`` can do, from its config files; "" when it has no config."""
    folder = Path(folder)
    config = _json(folder / "config.json")
    if not config:
        return ""
    if "vision_config" not in config:
        return TEXT_ONLY
    video = bool(_json(folder / "preprocessor_config.json").get("video_sampling"))
    return IMAGES_VIDEO if video else IMAGES


def cached_snapshot(repo_id: str) -> str:
    """The folder of ``repo_id`` in the Hugging Face cache when its config and weights are there
    (downloaded, maybe by another program); "" otherwise. Reads the disk only."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return ""
    found = try_to_load_from_cache(repo_id, "config.json")
    if not isinstance(found, str):
        return ""
    folder = Path(found).parent
    return str(folder) if any(folder.glob("*.safetensors")) else ""


#: A Hub page of a model: ``https://huggingface.co/OWNER/NAME``, maybe ``/tree/BRANCH/...``, a query or anchor.
_HUB_URL = re.compile(r"(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/([^/?#]+)/([^/?#]+)(?:/tree/([^/?#]+)[^?#]*)?"
                      r"/?(?:[?#].*)?", re.IGNORECASE)
#: One part of a Hub repo id, as the Hub allows it.
_REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
_SHOWN = 120  # characters of what was typed, quoted in a reason (the report box is one line)


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[:_SHOWN - 1] + "…"


def classify(text: str) -> tuple[str, str]:
    """What the user typed into "Add a model": ``("folder" | "gguf" | "repo", value)``, or
    ``("invalid", one-line reason)``; never raises (a name too long for the disk is a reason too)."""
    text = text.strip().strip('"').strip("'")
    if not text:
        return "invalid", "Type a Hugging Face repo id (owner/name), a model folder or a .gguf file."
    url = _HUB_URL.fullmatch(text)
    if url:  # a pasted model page: its repo id
        if url.group(1).lower() in ("datasets", "spaces"):
            return "invalid", f"That is a Hugging Face {url.group(1)[:-1].lower()}, not a model: {_shown(text)}"
        text = f"{url.group(1)}/{url.group(2)}" + (f"@{url.group(3)}" if url.group(3) not in (None, "main") else "")
    elif "://" in text:
        return "invalid", f"Not a Hugging Face model page (https://huggingface.co/owner/name): {_shown(text)}"
    try:
        path = Path(os.path.expanduser(text))
        if path.is_dir():
            return "folder", str(path.resolve())
        if path.is_file():
            if path.suffix.lower() == ".gguf":
                return "gguf", str(path.resolve())
            return "invalid", (f"{_shown(path.name)} is a file but not a GGUF model: choose its folder, or a .gguf "
                               "file.")
        repo = looks_like_repo_id(text)
    except (OSError, ValueError) as exc:  # a name too long for the file system, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return "invalid", f"Not a model folder, a .gguf file or a Hugging Face repo id ({reason}): {_shown(text)}"
    if repo:
        owner, name = text.split("/")
        if "@" in name:  # the download takes the newest revision of the main branch only
            return "invalid", (f"A revision (@{_shown(name.partition('@')[2])}) cannot be chosen here: type the repo "
                               f"id alone, {_shown(owner)}/{_shown(name.partition('@')[0])}, to download its main branch.")
        if not all(_REPO_PART.fullmatch(part) and ".." not in part and "--" not in part for part in (owner, name)):
            return "invalid", ("Not a Hugging Face repo id: owner and name are at most 96 letters, digits, '-', '_' "
                               f"or '.' each: {_shown(text)}")
        return "repo", text
    if text.lower().endswith(".gguf") or os.sep in text or text.startswith((".", "~")):
        return "invalid", f"No such file or folder: {_shown(text)}"
    return "invalid", f"Not a Hugging Face repo id (owner/name), a model folder or a .gguf file: {_shown(text)}"
