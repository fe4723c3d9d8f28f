"""Triton's kernel-cache key kept on disk (``engine.models.llama.triton_key``): reused only while the
files Triton hashes are unchanged, and installed where Triton's compiler reads it."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
from pathlib import Path

import pytest

from engine.models.llama import triton_key as tk


def fake_triton(root: Path) -> Path:
    """A package laid out as Triton's: what triton_key() hashes, plus a file it does not."""
    d = root / "triton"
    for rel, text in [("runtime/cache.py", "cache"), ("compiler/compiler.py", "compile"),
                      ("backends/nvidia/compiler.py", "nv"), ("language/core.py", "core"),
                      ("tools/other.py", "not hashed")]:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    (d / "_C").mkdir()
    (d / "_C" / "libtriton.so").write_bytes(b"\0" * 1000)
    return d


class Counter:
    def __init__(self, key="KEY-1"):
        self.key, self.calls = key, 0

    def __call__(self):
        self.calls += 1
        return self.key


def test_key_is_reused_until_a_hashed_file_changes(tmp_path):
    d, cache = fake_triton(tmp_path), tmp_path / "cache"
    compute = Counter()
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-1", False)
    assert compute.calls == 1
    [entry] = cache.iterdir()
    assert json.loads(entry.read_text())["key"] == "KEY-1"
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-1", True)
    assert compute.calls == 1

    # A rebuilt libtriton of the same size (only its mtime moves) is a new key.
    lib = d / "_C" / "libtriton.so"
    st = lib.stat()
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    compute.key = "KEY-2"
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-2", False)
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-2", True)
    # So is an edited compiler module, a new backend module, and another version.
    (d / "backends" / "nvidia" / "compiler.py").write_text("nv, edited")
    compute.key = "KEY-3"
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-3", False)
    (d / "backends" / "nvidia" / "driver.py").write_text("new")
    compute.key = "KEY-4"
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-4", False)
    compute.key = "KEY-5"
    assert tk.cached_key(d, "3.7.0", compute, cache) == ("KEY-5", False)
    assert compute.calls == 5
    # A file triton_key() does not read changes nothing.
    (d / "tools" / "other.py").write_text("edited, longer")
    assert tk.cached_key(d, "3.7.0", compute, cache) == ("KEY-5", True)


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs symlinks")
def test_a_linked_backend_folder_is_followed(tmp_path):
    """An editable Triton links ``backends/nvidia`` to its source tree: its modules are still in the
    signature (triton_key() finds them through pkgutil), and so is an extension module; bytecode
    caches are not."""
    d = fake_triton(tmp_path / "install")
    src = tmp_path / "src" / "nvidia"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "compiler.py").write_text("nv compiler")
    (src / "_fast.abi3.so").write_bytes(b"so")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "compiler.cpython-311.pyc").write_bytes(b"pyc")
    (d / "backends" / "nvidia").rename(tmp_path / "old-nvidia")
    (d / "backends" / "nvidia").symlink_to(src, target_is_directory=True)
    names = {p.name for p in tk.hashed_files(d)}
    assert {"compiler.py", "_fast.abi3.so"} <= names and "compiler.cpython-311.pyc" not in names
    cache, compute = tmp_path / "cache", Counter()
    tk.cached_key(d, "3.6.0", compute, cache)
    (src / "compiler.py").write_text("nv compiler, edited")
    compute.key = "KEY-2"
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-2", False)
    (src / "__pycache__" / "compiler.cpython-311.pyc").write_bytes(b"rewritten bytecode")
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("KEY-2", True)


def test_two_installs_keep_their_own_entries(tmp_path):
    a, b, cache = fake_triton(tmp_path / "a"), fake_triton(tmp_path / "b"), tmp_path / "cache"
    assert tk.cached_key(a, "3.6.0", Counter("A"), cache) == ("A", False)
    assert tk.cached_key(b, "3.6.0", Counter("B"), cache) == ("B", False)
    assert tk.cached_key(a, "3.6.0", Counter("X"), cache) == ("A", True)
    assert tk.cached_key(b, "3.6.0", Counter("X"), cache) == ("B", True)


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", '{"signature": 1}', '{"key": "K"}'])
def test_a_corrupt_entry_is_recomputed_and_rewritten(tmp_path, content):
    d, cache = fake_triton(tmp_path), tmp_path / "cache"
    tk.cached_key(d, "3.6.0", Counter(), cache)
    [entry] = cache.iterdir()
    entry.write_text(content)
    compute = Counter("FRESH")
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("FRESH", False)
    assert compute.calls == 1
    assert tk.cached_key(d, "3.6.0", compute, cache) == ("FRESH", True)
    assert [p.name for p in cache.iterdir()] == [entry.name]  # no temporary file left behind


def test_an_unwritable_cache_only_costs_the_hashing(tmp_path):
    d = fake_triton(tmp_path)
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    compute = Counter()
    assert tk.cached_key(d, "3.6.0", compute, blocked / "cache") == ("KEY-1", False)
    assert tk.cached_key(d, "3.6.0", compute, blocked / "cache") == ("KEY-1", False)
    assert compute.calls == 2


def test_missing_triton_files_fall_back_to_computing(tmp_path):
    compute = Counter()
    assert tk.cached_key(tmp_path / "nowhere", "3.6.0", compute, tmp_path / "cache") == ("KEY-1", False)
    assert compute.calls == 1


needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


@pytest.fixture
def restore_triton_key():
    """Put back every triton module's ``triton_key`` after the test."""
    saved = {name: m.triton_key for name, m in list(sys.modules.items())
             if (name == "triton" or name.startswith("triton.")) and hasattr(m, "triton_key")}
    yield
    for name, fn in saved.items():
        sys.modules[name].triton_key = fn


@needs_triton
def test_signature_covers_every_file_triton_key_reads(monkeypatch):
    """Run the installed Triton's own triton_key() with its file opens recorded: each one must be
    in :func:`hashed_files` (else a change to it would not invalidate the stored key)."""
    import triton
    import triton.runtime.cache as cache

    opened = []

    def recording_open(path, *args, **kwargs):
        opened.append(Path(path).resolve())
        return open(path, *args, **kwargs)

    monkeypatch.setattr(cache, "open", recording_open, raising=False)
    key = inspect.unwrap(cache.triton_key)()  # Triton's own, past its lru_cache (and an installed key)
    assert key.startswith(triton.__version__)
    listed = set(p.resolve() for p in tk.hashed_files(Path(triton.__file__).resolve().parent))
    assert len(opened) > 10 and any(p.name.startswith("libtriton") for p in opened)
    assert set(opened) <= listed, sorted(set(opened) - listed)[:5]


@needs_triton
def test_prepare_installs_tritons_own_key_where_the_compiler_reads_it(tmp_path, restore_triton_key, monkeypatch):
    import triton.runtime.cache as cache

    monkeypatch.delenv(tk.TRITON_KEY_CACHE_ENV, raising=False)
    real = cache.triton_key()
    assert tk.prepare(tmp_path) is False  # first process: computed and stored
    installed = [m.triton_key for n, m in sys.modules.items() if n.startswith("triton") and hasattr(m, "triton_key")]
    assert installed and all(fn() == real for fn in installed)
    # The compiler's cache key, built from it, is the one Triton computes itself.
    assert cache.get_cache_key.__globals__["triton_key"]() == real

    # A later process: Triton's own hashing never runs.
    for name, module in sys.modules.items():
        if name.startswith("triton") and hasattr(module, "triton_key"):
            monkeypatch.setattr(module, "triton_key", lambda: pytest.fail("Triton hashed its files again"))
    monkeypatch.setattr(cache, "triton_key", lambda: pytest.fail("Triton hashed its files again"))
    assert tk.prepare(tmp_path) is True
    assert cache.triton_key() == real


@needs_triton
def test_prepare_without_the_cache_leaves_tritons_key_alone(tmp_path, restore_triton_key, monkeypatch):
    import triton.runtime.cache as cache

    monkeypatch.setenv(tk.TRITON_KEY_CACHE_ENV, "0")
    original = cache.triton_key
    assert tk.prepare(tmp_path) is False
    assert cache.triton_key is original and not any(tmp_path.iterdir())


@needs_triton
def test_the_key_thread_makes_every_import_of_the_first_kernels_specialization():
    """The first kernel launch's argument specialization (Triton's native ``specialize_impl``) imports
    Gluon's and the tensor descriptors' modules on the loading thread unless
    :data:`SPECIALIZATION_IMPORTS` were imported first: in a fresh interpreter, with them imported,
    specializing a tensor imports nothing more; without, it imports them."""
    import subprocess

    code = """
import importlib, sys, torch, triton.runtime.jit as jit
from engine.models.llama.triton_key import SPECIALIZATION_IMPORTS
if sys.argv[1] == "warm":
    for name in SPECIALIZATION_IMPORTS:
        importlib.import_module(name)
before = set(sys.modules)
jit.mangle_type(torch.empty(4))
print(len([m for m in set(sys.modules) - before if m.startswith("triton")]))
"""
    if not hasattr(__import__("triton.runtime.jit").runtime.jit, "mangle_type"):
        pytest.skip("this Triton has no jit.mangle_type")
    root = Path(__file__).resolve().parents[2]
    counts = {how: int(subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True, cwd=root,
                                      check=True, timeout=120).stdout.strip()) for how in ("warm", "cold")}
    assert counts["warm"] == 0 and counts["cold"] > 5, counts


@needs_triton
def test_warm_backend_hashes_the_current_devices_backend_and_imports(monkeypatch):
    """Without a device index (a model on plain ``cuda``) the current device's target is used; the
    backend's hash and the specialization imports are made. (Triton's driver and backend are fakes:
    no GPU here.)"""
    import importlib

    import triton.compiler.compiler as compiler
    from triton.runtime.driver import driver

    calls = []

    class Backend:
        def hash(self):
            calls.append("hash")

    class Active:
        def get_current_target(self):
            calls.append("target")
            return "sm_90"

    monkeypatch.setattr(driver, "_active", Active())
    monkeypatch.setattr(compiler, "make_backend", lambda target: calls.append(target) or Backend())
    imported = []
    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name) or real_import(name))
    tk.warm_backend(None)
    assert calls == ["target", "sm_90", "hash"]
    assert imported == list(tk.SPECIALIZATION_IMPORTS)
