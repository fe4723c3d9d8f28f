"""Where a checkpoint's files come from: a local folder or the Hugging Face Hub.

A :class:`ModelSource` hands out the folder with config/tokenizer files and the tensors of the
safetensors checkpoint, memory-mapped and read lazily (``safetensors.safe_open``), from a single
``model.safetensors`` or from shards listed in ``model.safetensors.index.json``.
"""

from __future__ import annotations

import abc
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open

from engine.api.errors import DownloadCancelled, DownloadError, ModelLoadError
from engine.api.hub import looks_like_repo_id

if TYPE_CHECKING:
    from engine.models.config import ModelMetadata

SAFETENSORS_SINGLE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# What a chat needs from a Hub repository; weights in other formats are skipped.
HUB_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]


class ModelSource(abc.ABC):
    """A checkpoint: a folder of config/tokenizer files plus named tensors."""

    @property
    @abc.abstractmethod
    def folder(self) -> Path:
        """Local folder holding config.json, tokenizer.json, chat_template.json, ..."""

    def metadata(self) -> ModelMetadata:
        from engine.registry import read_metadata

        return read_metadata(self.folder)

    @abc.abstractmethod
    def tensor_names(self) -> list[str]:
        """Names of all tensors in the checkpoint."""

    @abc.abstractmethod
    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, tensor)`` pairs on the CPU, in the checkpoint's own dtype."""


#: safetensors' own bound on a header's length: a larger one is damage, not a header.
_MAX_HEADER_BYTES = 100_000_000


def unreadable_weights(path: Path, error: Exception, file_format: str, shortfall: str | None,
                       reason: str = "") -> str:
    """Why ``path``, a weights file in ``file_format`` ("safetensors", "GGUF") that its reader refused
    with ``error``, cannot be used, in one line naming it: unreadable (an OSError), cut short
    (``shortfall`` says how: shorter than its own header says, an interrupted download or copy), else
    damaged (``reason``, where there are words for it)."""
    if isinstance(error, OSError):
        return f"{path}: the file cannot be read ({error})"
    if shortfall is not None:
        return f"{path}: the {file_format} file is cut short ({shortfall}): download or copy it again"
    return f"{path}: the file is damaged: not a readable {file_format} file" + (f" ({reason})" if reason else "")


def _safetensors_shortfall(path: Path) -> str | None:
    """How much of a safetensors file is missing, in words ("12981912 of the 25963824 bytes its
    header describes"), where it is shorter than its header says (the file: an 8-byte little-endian
    header length, the JSON header, then the tensors' data, up to the largest end offset in the
    header); None where it is not short, or its header is no safetensors header."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                return f"{size} bytes, not even its header's length"
            header_end = 8 + int.from_bytes(prefix, "little")
            if header_end - 8 > _MAX_HEADER_BYTES:
                return None
            if size < header_end:
                return f"{size} bytes, less than its {header_end}-byte header"
            header = json.loads(f.read(header_end - 8))
        data_end = max((int(t["data_offsets"][1]) for name, t in header.items() if name != "__metadata__"), default=0)
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    needed = header_end + data_end
    return f"{size} of the {needed} bytes its header describes" if size < needed else None


class MissingWeightsError(ModelLoadError):
    """A model folder without its safetensors weights, or without a shard its index names."""


class LocalDirSource(ModelSource):
    """A checkpoint folder on disk.

    Raises:
        ModelLoadError: the folder does not exist, has no config.json or holds no safetensors weights
            (naming the folder), the index names a missing shard, or a file is not valid safetensors.
    """

    def __init__(self, folder: str | Path, weights_required: bool = True):
        """``weights_required=False``: a folder without its weights files is taken (its config, tokenizer
        and processor can still be read and checked); reading its tensors raises the
        :class:`MissingWeightsError` instead."""
        self._folder = Path(folder).expanduser()
        if not self._folder.is_dir():
            raise ModelLoadError(f"model folder not found: {self._folder}")
        if not (self._folder / "config.json").is_file():  # checked first: it says what the folder is not
            raise ModelLoadError(f"{self._folder} is not a model folder: it has no config.json (a Hugging Face "
                                 "model folder holds config.json, tokenizer files and *.safetensors weights)")
        self._missing: MissingWeightsError | None = None
        try:
            self._shards = self._find_shards()
        except MissingWeightsError as exc:
            if weights_required:
                raise
            self._shards, self._missing = [], exc

    @property
    def folder(self) -> Path:
        return self._folder

    def _find_shards(self) -> list[Path]:
        index = self._folder / SAFETENSORS_INDEX
        if index.exists():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (OSError, ValueError, KeyError) as exc:
                raise ModelLoadError(f"{index}: cannot read weight_map ({exc})") from exc
            shards = [self._folder / name for name in sorted(set(weight_map.values()))]
            missing = [s.name for s in shards if not s.exists()]
            if missing:
                raise MissingWeightsError(f"{index} names shard(s) that are missing: {', '.join(missing)}")
            return shards
        single = self._folder / SAFETENSORS_SINGLE
        if single.exists():
            return [single]
        found = sorted(self._folder.glob("*.safetensors"))
        if found:
            return found
        raise MissingWeightsError(f"no safetensors weights in {self._folder} (expected {SAFETENSORS_SINGLE})")

    def _open_all(self, stack: ExitStack) -> list:
        if self._missing is not None:
            raise self._missing
        handles = []
        for shard in self._shards:
            try:
                handles.append(stack.enter_context(safe_open(str(shard), framework="pt", device="cpu")))
            except (SafetensorError, OSError) as exc:
                raise ModelLoadError(unreadable_weights(shard, exc, "safetensors", _safetensors_shortfall(shard),
                                                        str(exc))) from exc
        return handles

    def tensor_names(self) -> list[str]:
        with ExitStack() as stack:
            return [name for h in self._open_all(stack) for name in h.keys()]

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape from the safetensors headers, without reading tensor data."""
        with ExitStack() as stack:
            return {name: tuple(h.get_slice(name).get_shape()) for h in self._open_all(stack) for name in h.keys()}

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        with ExitStack() as stack:
            for handle in self._open_all(stack):
                for name in handle.keys():
                    try:
                        yield name, handle.get_tensor(name)
                    except (SafetensorError, OSError) as exc:
                        raise ModelLoadError(f"tensor {name!r} cannot be read ({exc})") from exc


ProgressCallback = Callable[[int, int], None]
"""Called with (bytes_done, bytes_total) while downloading."""


class HubSource(LocalDirSource):
    """A Hub repository, downloaded (or found) in the standard Hugging Face cache.

    ``progress(done_bytes, total_bytes)`` is called as files arrive; setting ``cancel`` (a
    ``threading.Event``) stops the download with :class:`DownloadCancelled`. Partial files stay in
    huggingface_hub's ``.incomplete`` files, so a later call resumes, and a cancelled or failed
    download never yields a folder that would be used.

    Raises:
        DownloadError: offline, repository not found, or any other Hub failure (message says which).
        DownloadCancelled: ``cancel`` was set.
    """

    def __init__(self, repo_id: str, revision: str | None = None, cache_dir: str | Path | None = None,
                 progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
                 local_files_only: bool = False):
        self.repo_id = repo_id
        folder = download_snapshot(repo_id, revision=revision, cache_dir=cache_dir, progress=progress,
                                   cancel=cancel, local_files_only=local_files_only)
        super().__init__(folder)


def download_snapshot(repo_id: str, revision: str | None = None, cache_dir: str | Path | None = None,
                      progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
                      local_files_only: bool = False) -> Path:
    """Download the files a chat needs from ``repo_id`` with ``huggingface_hub.snapshot_download``.

    Returns the snapshot folder. See :class:`HubSource` for progress, cancel and errors.
    """
    import huggingface_hub
    from huggingface_hub import errors as hf_errors
    from tqdm.auto import tqdm as base_tqdm

    totals: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()
    counter = iter(range(1 << 62))

    class _ProgressBar(base_tqdm):  # huggingface_hub reports bytes through tqdm
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            kwargs.setdefault("file", _NullFile())
            super().__init__(*args, **kwargs)
            with lock:
                self._key = next(counter)  # one entry per file bar, kept after the bar closes

        def update(self, n=1):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(f"download of {repo_id} cancelled")
            out = super().update(n)
            if self.unit == "B" and progress is not None:
                with lock:
                    totals[self._key] = (int(self.n), int(self.total or 0))
                    done = sum(d for d, _ in totals.values())
                    total = sum(t for _, t in totals.values())
                progress(done, total)
            return out

    if cancel is not None and cancel.is_set():
        raise DownloadCancelled(f"download of {repo_id} cancelled")
    try:
        folder = huggingface_hub.snapshot_download(
            repo_id, revision=revision, cache_dir=str(cache_dir) if cache_dir else None,
            allow_patterns=HUB_ALLOW_PATTERNS, tqdm_class=_ProgressBar, local_files_only=local_files_only,
        )
    except DownloadCancelled:
        raise
    except hf_errors.RepositoryNotFoundError as exc:
        raise DownloadError(f"{repo_id}: repository not found on the Hub (or it is private)") from exc
    except hf_errors.RevisionNotFoundError as exc:
        raise DownloadError(f"{repo_id}: revision {revision!r} not found") from exc
    except hf_errors.LocalEntryNotFoundError as exc:
        raise DownloadError(
            f"{repo_id}: not in the local cache and the Hub cannot be reached (offline?)"
        ) from exc
    except (hf_errors.HfHubHTTPError, OSError, ValueError) as exc:
        raise DownloadError(f"{repo_id}: download failed ({exc})") from exc
    return Path(folder)


class _NullFile:
    def write(self, _s: str) -> None:
        pass

    def flush(self) -> None:
        pass


def source_kind(path_or_repo_id: str | Path) -> str:
    """What :func:`resolve_source` would make of ``path_or_repo_id``, without reading or downloading
    anything: ``"gguf"``, ``"folder"`` or ``"hub"``. ``smolchat serve`` checks its ``--model`` with it
    before it prints an address that would then serve nothing.

    ``owner/name`` whose ``owner`` is an existing local folder (``checkpoints/nope``) is taken as a
    mistyped local path, not a Hub id, so the error says the folder is missing instead of "offline".

    Raises:
        ModelLoadError: a local path (a folder or a ``.gguf`` file) that does not exist, or a file
            that is not a ``.gguf``.
    """
    path = Path(path_or_repo_id).expanduser()
    if path.suffix.lower() == ".gguf" and not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if path.suffix.lower() == ".gguf" or (path.is_dir() and not any(path.glob("*.safetensors"))
                                          and any(path.glob("*.gguf"))):
        return "gguf"
    if path.is_dir():
        return "folder"
    if path.exists():
        raise ModelLoadError(f"{path} is a file; --model takes a model folder (with config.json), a .gguf file or a Hub id")
    if looks_like_repo_id(str(path_or_repo_id)):
        return "hub"
    raise ModelLoadError(f"model folder not found: {path}")


def resolve_source(path_or_repo_id: str | Path, **hub_kwargs) -> ModelSource:
    """A local folder if ``path_or_repo_id`` exists on disk, else a Hub repository id ("owner/name")
    (see :func:`source_kind`). A ``.gguf`` file, or a folder with no safetensors but a ``.gguf``, is
    a :class:`engine.gguf.GGUFSource`.

    Raises:
        ModelLoadError: a local path that does not exist, or is a file rather than a folder.
        DownloadError: the Hub id cannot be downloaded.
    """
    kind = source_kind(path_or_repo_id)
    if kind == "gguf":
        from engine.gguf import GGUFSource  # llama.cpp checkpoints: a .gguf file or a folder of them

        return GGUFSource(Path(path_or_repo_id).expanduser())
    if kind == "folder":
        return LocalDirSource(Path(path_or_repo_id).expanduser())
    return HubSource(str(path_or_repo_id), **hub_kwargs)
