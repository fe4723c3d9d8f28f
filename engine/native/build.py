"""Find or build the native CPU decode library (``cpu_step.c``), once per machine, off the answer path.

Where the library comes from, first hit wins:

1. a prebuilt ``libsmolcpu.so`` / ``.dylib`` / ``.dll`` next to this module, if it was built from
   these exact sources (installers carry one: ``packaging/build.py`` compiles it at build time, so a
   user's machine needs no compiler);
2. the per-machine cache, ``<user cache dir>/Smolchat/native/<key>/`` where the key hashes the
   sources, the compiler's version line, the flags and the CPU's features (``SMOLCHAT_NATIVE_CACHE``
   overrides the folder);
3. the system C compiler (``$SMOLCHAT_CC``, else ``$CC``, else ``cc``): ``-O3 -fopenmp -shared
   -fPIC``, retried without OpenMP (one thread) where the compiler lacks it. Never
   ``-march=native``: the library picks its AVX-512 / AVX2 / baseline kernels at run time.

:func:`start` does this on a daemon thread at model load; :func:`library` returns the loaded
library or ``None`` (not ready, failed, or ``SMOLCHAT_NATIVE=0``) without ever waiting, so the
first answer runs eagerly while a first-ever build is under way. A failure is one log line, and
decoding stays eager.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SOURCES = ("cpu_step.c", "gemv.h", "gemv_vnni.h", "gemv_avx2.h", "gemm_avx2.h")
ABI = 3
FLAGS = ["-O3", "-shared", "-fPIC", "-std=gnu11", "-fno-math-errno"]
LIBNAME = "libsmolcpu" + {"win32": ".dll", "darwin": ".dylib"}.get(sys.platform, ".so")
ENV_SWITCH = "SMOLCHAT_NATIVE"
ISA_NAMES = {2: "native-avx512", 1: "native-avx2", 0: "native-generic"}

_lock = threading.Lock()
_thread: threading.Thread | None = None
_lib: ctypes.CDLL | None = None
_error: str | None = None


def enabled() -> bool:
    """False when ``SMOLCHAT_NATIVE=0`` (or ``false``/``no``/``off``)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def source_hash() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return h.hexdigest()[:16]


def compiler() -> str:
    return os.environ.get("SMOLCHAT_CC") or os.environ.get("CC") or "cc"


def _cpu_features() -> str:
    """The CPU flags line (Linux) or the machine name: part of the cache key, so a home folder
    shared between machines never hands one machine another's build."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line for line in fh if line.startswith(("flags", "Features"))), "")
        prefixes = ("avx", "fma", "sse", "f16", "neon", "asimd")
        return " ".join(sorted(f for f in flags.split(":", 1)[-1].split() if f.startswith(prefixes)))
    except OSError:
        return platform.machine()


def cache_dir() -> Path:
    env = os.environ.get("SMOLCHAT_NATIVE_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("Smolchat", appauthor=False)) / "native"


def _compiler_version(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=True)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else cc


def _key(cc_version: str) -> str:
    h = hashlib.sha256("\n".join([source_hash(), cc_version, " ".join(FLAGS), _cpu_features(),
                                  platform.machine(), str(ABI)]).encode())
    return h.hexdigest()[:20]


def compile_library(out: Path, cc: str | None = None) -> Path:
    """Compile the sources into ``out`` (written atomically). Tries OpenMP first, then without.

    Raises:
        RuntimeError: the compiler is missing or both attempts failed (its last error lines).
    """
    cc = cc or compiler()
    out.parent.mkdir(parents=True, exist_ok=True)
    src = HERE / "cpu_step.c"
    errors = []
    for extra in (["-fopenmp"], []):
        fd, tmp = tempfile.mkstemp(suffix=LIBNAME[LIBNAME.rindex("."):], dir=out.parent)
        os.close(fd)
        cmd = [cc, *FLAGS, *extra, f"-I{HERE}", str(src), "-o", tmp, "-lm"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            os.unlink(tmp)
            raise RuntimeError(f"cannot run the C compiler {cc!r}: {exc}") from None
        if proc.returncode == 0:
            os.replace(tmp, out)
            return out
        os.unlink(tmp)
        errors.append(" | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:]))
    raise RuntimeError(f"{cc} failed: {errors[-1] if errors else 'no output'}")


def _load(path: Path) -> ctypes.CDLL:
    # torch is imported first, so the OpenMP runtime it loaded (libgomp.so.1) is the one this
    # library binds to: one thread pool for both, no second set of spinning threads.
    import torch  # noqa: F401

    lib = ctypes.CDLL(str(path))
    if lib.smol_abi() != ABI:
        raise RuntimeError(f"{path} has ABI {lib.smol_abi()}, expected {ABI}")
    lib.smol_isa.restype = ctypes.c_int
    lib.smol_scratch_floats.restype = ctypes.c_int64
    lib.smol_scratch_floats.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    lib.smol_gemm_q8.restype = ctypes.c_int
    lib.smol_gemm_q8.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.smol_dequant_q4.restype = ctypes.c_int
    lib.smol_dequant_q4.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    lib.smol_step.restype = ctypes.c_int
    lib.smol_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                              ctypes.c_void_p, ctypes.c_int64]
    return lib


def prebuilt_path() -> Path:
    """Where an installer puts the library built at package time (see :func:`build_prebuilt`)."""
    return HERE / LIBNAME


def build_prebuilt(out: Path | None = None) -> Path:
    """Compile the library next to this module (or to ``out``) with a stamp of its source hash.
    Used by ``packaging/build.py`` so installed apps need no compiler."""
    out = out or prebuilt_path()
    compile_library(out)
    out.with_name(out.name + ".src").write_text(source_hash())
    return out


def find_or_build() -> ctypes.CDLL:
    """The loaded library: prebuilt, cached, or compiled now into the cache (blocking).

    Raises:
        RuntimeError: no prebuilt or cached library and no working compiler.
    """
    pre = prebuilt_path()
    stamp = pre.with_name(pre.name + ".src")
    if pre.is_file() and stamp.is_file():
        # An installed app ships the library without its sources: the stamp is all there is to check.
        if not (HERE / SOURCES[0]).is_file() or stamp.read_text().strip() == source_hash():
            return _load(pre)
    cc = compiler()
    if shutil.which(cc) is None and not Path(cc).is_file():
        raise RuntimeError(f"no C compiler ({cc!r} not found)")
    path = cache_dir() / _key(_compiler_version(cc)) / LIBNAME
    if not path.is_file():
        log.info("building the native CPU decode step with %s into %s", cc, path.parent)
        compile_library(path, cc)
    return _load(path)


def _worker() -> None:
    global _lib, _error
    try:
        lib = find_or_build()
    except Exception as exc:  # noqa: BLE001  (any failure means: stay eager)
        _error = str(exc)
        log.warning("native CPU decode step unavailable, decoding eagerly: %s", exc)
        return
    _lib = lib


def start() -> None:
    """Begin finding/building the library on a daemon thread (no-op if begun, or if disabled)."""
    global _thread
    if not enabled():
        return
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_worker, name="smolchat-native-build", daemon=True)
            _thread.start()


def library(wait: bool = False) -> ctypes.CDLL | None:
    """The loaded library, or ``None`` if disabled, failed, or (unless ``wait``) not ready yet."""
    if not enabled():
        return None
    start()
    if wait and _thread is not None:
        _thread.join()
    return _lib


def describe(wait: bool = True) -> str:
    """Which CPU decode step runs here: ``native-avx512`` / ``native-avx2`` / ``native-generic`` / ``eager``."""
    lib = library(wait=wait)
    return ISA_NAMES.get(lib.smol_isa(), "native") if lib is not None else "eager"


def last_error() -> str | None:
    return _error


def reset() -> None:
    """Forget the loaded library and any failure (tests: rebuild under another environment)."""
    global _thread, _lib, _error
    with _lock:
        if _thread is not None:
            _thread.join()
        _thread, _lib, _error = None, None, None
