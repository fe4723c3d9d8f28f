"""Download llama.cpp's source (from the ``llama-cpp-python`` source package on PyPI) and build its tools.

llama.cpp is a bench/test-only peer: the benchmarks run its binaries side by side with ours, and
the GGUF tests use its ``convert_hf_to_gguf.py``. It is never a dependency of the app and nothing it
builds is committed. PyPI is the one registry every machine here reaches, and ``llama-cpp-python``'s
sdist vendors a whole llama.cpp tree, so that is where the source comes from.

    python -m tools.build_llama_cpp                 # download (cached) + build (cached)
    python -m tools.build_llama_cpp --source-only   # just the unpacked source tree, for the converter

Everything lives under ``$SMOLCHAT_BENCH_CACHE`` (default ``~/.cache/smolchat-bench``):
``src/`` (sdist + unpacked tree), ``llama.cpp`` -> the vendored tree, ``llama.cpp/build/bin/`` the
binaries. A second run with the same version does nothing but print the paths.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "0.3.36"
TARGETS = ("llama-bench", "llama-perplexity", "llama-quantize", "llama-server", "llama-mtmd-cli", "llama-cli")


def cache_root() -> Path:
    return Path(os.environ.get("SMOLCHAT_BENCH_CACHE", Path.home() / ".cache" / "smolchat-bench"))


def fetch_source(version: str = VERSION, root: Path | None = None) -> Path:
    """Return the llama.cpp source tree of ``llama-cpp-python==version``, downloading it once.

    Raises:
        RuntimeError: pip cannot download the sdist (offline registry) or it holds no llama.cpp tree.
    """
    root = root or cache_root()
    src = root / "src"
    tree = src / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (tree / "convert_hf_to_gguf.py").is_file():
        return _drop_git_pointer(tree)
    src.mkdir(parents=True, exist_ok=True)
    sdist = src / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"llama-cpp-python=={version}", "-d", str(src)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if proc.returncode != 0 or not sdist.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            err = RuntimeError(f"pip download llama-cpp-python=={version} failed: {tail[0]}")
            err.pip_output = proc.stdout + proc.stderr  # callers tell "offline" from "no such version"
            raise err
    # Unpack to a temporary folder first so an interrupted run never leaves a half tree that looks done.
    tmp = src / f".unpack-{version}"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    unpacked = tmp / f"llama_cpp_python-{version}"
    if not (unpacked / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py").is_file():
        raise RuntimeError(f"{sdist} holds no vendor/llama.cpp tree")
    shutil.rmtree(src / unpacked.name, ignore_errors=True)
    unpacked.rename(src / unpacked.name)
    shutil.rmtree(tmp, ignore_errors=True)
    return _drop_git_pointer(tree)


def _drop_git_pointer(tree: Path) -> Path:
    """Remove the sdist's leftover submodule ``.git`` file ("gitdir: ../../.git/modules/...").

    It points at a folder the sdist does not have; llama.cpp's cmake then makes build.ninja depend on
    that missing git index, and ninja regenerates forever ("build.ninja still dirty after 100 tries").
    """
    pointer = tree / ".git"
    if pointer.is_file():
        pointer.unlink()
    return tree


def build(version: str = VERSION, jobs: int = 2, root: Path | None = None) -> dict[str, Path]:
    """Configure and build :data:`TARGETS` (Release, native CPU, no network at build time).

    Returns target name -> binary path. ``root/llama.cpp`` becomes a symlink to the source tree, so
    the build folder is ``root/llama.cpp/build`` whatever the version.
    """
    root = root or cache_root()
    tree = fetch_source(version, root)
    link = root / "llama.cpp"
    if link.is_symlink() or not link.exists():
        if link.is_symlink():
            link.unlink()
        link.symlink_to(tree, target_is_directory=True)
    build_dir = link / "build"
    bins = {t: build_dir / "bin" / t for t in TARGETS}
    if all(p.is_file() for p in bins.values()):
        return bins
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: install cmake and a C++ compiler (apt-get install cmake g++)")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = [
        "cmake", "-S", str(link), "-B", str(build_dir), *generator,
        "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
        # No downloads at build time (the web UI comes from a bucket) and no TLS dependency.
        "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    ]
    subprocess.run(configure, check=True)
    subprocess.run(["cmake", "--build", str(build_dir), "--config", "Release", "-j", str(jobs),
                    "--target", *TARGETS], check=True)
    missing = [str(p) for p in bins.values() if not p.is_file()]
    if missing:
        raise RuntimeError(f"build finished without {', '.join(missing)}")
    return bins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=VERSION, help="llama-cpp-python version whose llama.cpp to use")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--source-only", action="store_true", help="download and unpack, do not build")
    args = parser.parse_args(argv)
    try:
        if args.source_only:
            print(fetch_source(args.version))
            return 0
        for name, path in build(args.version, args.jobs).items():
            print(f"{name}: {path}")
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"build_llama_cpp: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
