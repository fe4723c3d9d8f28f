"""Triton's kernel-cache key, kept on disk between processes.

Before a process can use a single kernel from Triton's disk cache, Triton computes ``triton_key()``:
the SHA-256 of its compiler's and language's Python sources and of ``libtriton`` itself (~500 MB),
once per process: 0.48-0.50 s on the H200's host, 1.0 s on this project's 2-core CPU machine, on a
thread beside the weights' load (:func:`engine.models.llama.static_decode.start_triton_key`).

The key only changes when those files change, so it is stored with a signature of the very files
Triton hashes (path, size, modification time and inode of each: a reinstall or upgrade changes them)
and reused while the signature matches. The stored key is Triton's own ``triton_key()`` value, so
kernels compiled with and without this cache share Triton's disk cache.
``SMOLCHAT_TRITON_KEY_CACHE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

TRITON_KEY_CACHE_ENV = "SMOLCHAT_TRITON_KEY_CACHE"
#: The folders under Triton's package whose Python modules ``triton_key()`` hashes.
HASHED_FOLDERS = ("compiler", "backends", "language")


def key_cache_enabled() -> bool:
    return os.environ.get(TRITON_KEY_CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def default_cache_dir() -> Path:
    """``<user cache>/Smolchat/triton-key`` (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("Smolchat", appauthor=False)) / "triton-key"


def hashed_files(triton_dir: Path) -> list[Path]:
    """What ``triton_key()`` reads: ``runtime/cache.py``, every module file under
    :data:`HASHED_FOLDERS` (any import suffix; folders followed through symlinks, as its
    ``pkgutil.walk_packages`` does: an editable Triton links ``backends/nvidia``; ``__pycache__``
    left out) and ``_C/libtriton.*``, in a fixed order."""
    suffixes = tuple(importlib.machinery.all_suffixes())
    files = [triton_dir / "runtime" / "cache.py"]
    for sub in HASHED_FOLDERS:
        for root, dirs, names in os.walk(triton_dir / sub, followlinks=True):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [Path(root) / n for n in sorted(names) if n.endswith(suffixes)]
    files += sorted((triton_dir / "_C").glob("libtriton.*"))
    return files


def signature(triton_dir: Path, version: str) -> str:
    """Hex SHA-256 over Triton's version and each hashed file's path, size, mtime (ns) and inode.

    Raises:
        OSError: a file vanished while it was listed (the caller computes the key instead).
    """
    h = hashlib.sha256(f"{version}\n{sys.implementation.cache_tag}\n".encode())
    for path in hashed_files(triton_dir):
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()


def cached_key(triton_dir: Path, version: str, compute: Callable[[], str], cache_dir: Path) -> tuple[str, bool]:
    """Triton's key from ``cache_dir`` when the stored signature matches, else ``compute()`` stored there.

    Returns ``(key, hit)``. A missing, unreadable or corrupt entry is recomputed and rewritten; a
    cache folder that cannot be written (read-only home, full disk) only costs the hashing. Raises
    what ``compute`` raises.
    """
    try:
        sig = signature(triton_dir, version)
    except OSError:
        return compute(), False
    # One entry per Triton install (a second virtual environment keeps its own).
    entry = cache_dir / f"{version}-{hashlib.sha256(str(triton_dir).encode()).hexdigest()[:16]}.json"
    try:
        stored = json.loads(entry.read_text(encoding="utf-8"))
        if isinstance(stored, dict) and stored.get("signature") == sig and isinstance(stored.get("key"), str) \
                and stored["key"]:
            return stored["key"], True
    except (OSError, ValueError):
        pass
    key = compute()
    _write_entry(entry, {"signature": sig, "key": key})
    return key, False


def _write_entry(entry: Path, value: dict) -> None:
    """Write ``entry`` whole, then rename it into place (two processes starting at once never read
    half an entry); any OSError leaves the cache as it was."""
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".key-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f)
        os.replace(tmp, entry)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def install(key: str) -> None:
    """Make every loaded ``triton`` module's ``triton_key`` return ``key`` (what Triton's own compile
    workers do with the parent's key), replacing only Triton's original function."""
    import triton.runtime.cache as cache

    original = cache.triton_key

    def triton_key() -> str:
        return key

    triton_key.__wrapped__ = original  # type: ignore[attr-defined]  (inspect.unwrap finds Triton's own)

    for name, module in list(sys.modules.items()):
        if (name == "triton" or name.startswith("triton.")) and getattr(module, "triton_key", None) is original:
            module.triton_key = triton_key


def prepare(cache_dir: Path | None = None) -> bool:
    """Compute or load Triton's key for this process and install it (:func:`cached_key`, :func:`install`).

    Returns whether the key came from the cache. Without the cache (``SMOLCHAT_TRITON_KEY_CACHE=0``)
    it is Triton's own ``triton_key()``, computed now. Raises ImportError without Triton.
    """
    import triton
    import triton.runtime.cache as cache

    if not key_cache_enabled():
        cache.triton_key()
        return False
    triton_dir = Path(triton.__file__).resolve().parent
    key, hit = cached_key(triton_dir, triton.__version__, cache.triton_key, cache_dir or default_cache_dir())
    install(key)
    return hit


#: Modules Triton's native argument specialization imports at the first kernel launch of a process
#: (``native_specialize_impl``: tensor descriptors, Gluon's layouts), where they exist.
SPECIALIZATION_IMPORTS = ("triton.tools.tensor_descriptor", "triton.experimental.gluon.nvidia.hopper")


def warm_backend(device: int | None = None) -> None:
    """Create Triton's CUDA driver (its ``cuda_utils`` module, from Triton's cache), its compiler
    backend's hash (one ``ptxas --version`` a process) and the modules its argument specialization
    imports: per-process set-up that the first fused kernel's launch otherwise does on the loading
    thread (on the H200 that launch took 121-175 ms without this and 5-6 ms with it; the thread's
    imports hold the GIL, so the weights' load beside it takes some of that back). ``device``: the
    CUDA device index the model runs on (default: the current one). Raises what Triton raises (no
    CUDA device, no ``ptxas``)."""
    import torch
    from triton.compiler.compiler import make_backend
    from triton.runtime.driver import driver

    # torch.cuda.device(None) raises on torch 2.13: no device given, the current one stays.
    with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
        make_backend(driver.active.get_current_target()).hash()
    for name in SPECIALIZATION_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
