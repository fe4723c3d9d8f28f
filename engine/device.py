"""Device and dtype choice: CUDA > MPS > CPU; bfloat16 on GPUs, float32 on the CPU unless asked."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading

import torch

from engine.api.errors import EngineError
from engine.host_memory import release_free_host_memory  # noqa: F401 - (its callers import it from here)

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


def choose_device(preference: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"`` picks CUDA, then MPS, then CPU; a name (``"cuda:1"``) or a ``torch.device``
    is checked against this machine and this PyTorch build (a CUDA index against the GPUs present;
    MPS is one device, ``mps`` or ``mps:0``).

    Raises:
        EngineError: an explicit device was asked for and is not available here (no CUDA GPU, a
            CUDA index beyond the GPUs present, no Apple GPU), or the name is not a device.
    """
    if preference in (None, "", "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(preference)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cuda", "mps", "cpu"):
        raise EngineError(f"unknown device {str(preference)!r} (use auto, cuda, cuda:N, mps or cpu)")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EngineError("device 'cuda' was requested but this PyTorch build sees no CUDA GPU")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            present = "1 CUDA GPU (cuda:0)" if count == 1 else f"{count} CUDA GPUs (cuda:0 to cuda:{count - 1})"
            raise EngineError(f"device {str(device)!r} was requested but this machine has {present}")
    if device.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise EngineError("device 'mps' was requested but the Apple GPU (MPS) is not available")
        if device.index not in (None, 0):
            raise EngineError(f"device {str(device)!r} was requested but the Apple GPU is one device: mps (mps:0)")
    return device


#: The CUDA driver's library, by platform (what the CUDA runtime itself opens).
CUDA_DRIVER_LIBRARY = {"linux": "libcuda.so.1", "win32": "nvcuda.dll"}


def present_devices() -> tuple[str, ...]:
    """The device kinds this machine and this PyTorch build can run on, in :func:`choose_device`'s
    order of preference: a subset of ``("cuda", "mps", "cpu")``, ``"cpu"`` always (front ends offer
    only these: a device picked that is not here failed the reload after the fact)."""
    mps = getattr(torch.backends, "mps", None)
    return tuple(kind for kind, present in (("cuda", torch.cuda.is_available()),
                                            ("mps", mps is not None and mps.is_available()),
                                            ("cpu", True)) if present)


def start_cuda_driver(preference: str | torch.device | None = None) -> bool:
    """Start the CUDA driver (``cuInit``) through ctypes when ``preference`` may choose CUDA
    (``None``/``"auto"``/a CUDA device) and this PyTorch build has CUDA.

    torch's first CUDA query (``torch.cuda.is_available``, in :func:`choose_device`) starts the driver
    itself, 0.18-0.34 s on the H200's host, and the model's construction on the meta device on
    another thread did not get past its first torch calls until that query returned (measured:
    docs/BENCHMARKS.md, session 34). Through ctypes (which releases the GIL and holds none of torch's
    locks) the construction runs beside it, and torch's query afterwards returns at once. Returns
    whether ``cuInit`` succeeded; never raises (no driver: torch's query finds that out itself)."""
    kind = preference.type if isinstance(preference, torch.device) else str(preference or "auto").split(":")[0]
    if kind not in ("auto", "cuda") or torch.version.cuda is None or torch.cuda.is_initialized():
        return False
    name = CUDA_DRIVER_LIBRARY.get(sys.platform)
    if name is None:
        return False
    try:
        return ctypes.CDLL(name).cuInit(0) == 0
    except (OSError, AttributeError):
        return False


def start_device_init(device: torch.device) -> None:
    """Create the CUDA context on a background thread, so it overlaps the load's host work (the
    checkpoint's headers, the model's construction, the tokenizer) instead of starting at the first
    weight's copy: ~0.6 s on the H200. torch's lazy initialisation is guarded, so the first CUDA call
    of the loading thread waits for this one. Does nothing off CUDA; a failure is left to that call."""
    if device.type != "cuda":
        return

    def run() -> None:
        try:
            torch.empty(0, device=device)
        except Exception:  # noqa: BLE001 - reported by the load's own first CUDA call
            pass

    threading.Thread(target=run, name="smolchat-cuda-init", daemon=True).start()


def host_staged(values: torch.Tensor | list[int], device: torch.device) -> torch.Tensor:
    """``values`` as a CPU tensor (a list becomes int64) that ``dst.copy_(t, non_blocking=True)``
    can send to ``device`` without stalling the host: in pinned memory for CUDA, where a copy from
    pageable memory synchronizes the stream (PyTorch waits for it: the host then waits for every
    queued kernel). PyTorch keeps a pinned block in use until its copy has run, so the caller may
    drop the tensor at once."""
    t = torch.tensor(values, dtype=torch.long) if isinstance(values, list) else values
    return t.pin_memory() if device.type == "cuda" else t


def choose_dtype(device: torch.device, preference: str | torch.dtype | None = None) -> torch.dtype:
    """``None``/``"auto"``: bfloat16 on CUDA and MPS, float32 on the CPU.

    Raises:
        EngineError: the dtype name is unknown.
    """
    if isinstance(preference, torch.dtype):
        return preference
    if preference in (None, "", "auto"):
        return torch.bfloat16 if device.type in ("cuda", "mps") else torch.float32
    try:
        return DTYPES[str(preference).lower()]
    except KeyError:
        raise EngineError(f"unknown dtype {preference!r} (use float32, bfloat16 or float16)") from None


VISION_DTYPE_ENV = "SMOLCHAT_VISION_DTYPE"


def cpu_has_amx() -> bool:
    """Intel AMX tiles (Sapphire Rapids and later): bf16 matmuls run on the tile unit."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe and probe())


#: ``SMOLCHAT_VISION_DTYPE`` values beyond the dtype names: float32 activations through int8 GEMMs.
VISION_INT8 = "int8"


def _vision_preference(preference: str | None) -> tuple[str, str]:
    """(normalized preference, where it came from for error messages)."""
    from_env = not preference and bool(os.environ.get(VISION_DTYPE_ENV, "").strip())
    preference = (preference or os.environ.get(VISION_DTYPE_ENV, "")).strip().lower() or "auto"
    where = f"${VISION_DTYPE_ENV}" if from_env else "vision dtype"
    if preference not in ("auto", VISION_INT8) and preference not in DTYPES:
        raise EngineError(f"{where}: unknown value {preference!r} (use auto, float32, bfloat16, float16 or int8)")
    return preference, where


def cpu_capability() -> str:
    """ATen's CPU kernel level here: ``AVX512``, ``AVX2``, ``DEFAULT`` (or another arch's name)."""
    return str(torch.backends.cpu.get_cpu_capability())


def choose_vision_dtype(device: torch.device, dtype: torch.dtype, preference: str | None = None) -> torch.dtype:
    """dtype of the vision tower's activations and connector; the text model keeps ``dtype``.

    ``preference`` (default: ``$SMOLCHAT_VISION_DTYPE``, else ``auto``) is ``auto``, a dtype name or
    ``int8`` (float32 activations: see :func:`choose_vision_int8`). ``auto`` is bfloat16 for a
    float32 model on a CPU with AMX, else ``dtype``. The vision tower is compute-bound (a 17-tile
    photo is ~3 TFLOP through 12 SigLIP layers): on this project's Sapphire Rapids box bf16 matmuls
    at the vision MLP shape ran at 728 GFLOP/s against 126 in float32, and a 17-tile photo reaches
    its first token in 6.3 s against 23.4 s for transformers in float32 (docs/BENCHMARKS.md). The
    checkpoint's weights are bf16, so nothing is rounded that the model was not trained with;
    activations are. Without AMX, bf16 on the CPU is emulated: no gain.

    Raises:
        EngineError: the name is unknown.
    """
    preference, _ = _vision_preference(preference)
    if preference == VISION_INT8:
        return torch.float32
    if preference != "auto":
        return DTYPES[preference]
    if device.type == "cpu" and dtype == torch.float32 and cpu_has_amx():
        return torch.bfloat16
    return dtype


def choose_vision_int8(device: torch.device, dtype: torch.dtype, preference: str | None = None) -> bool:
    """Whether the vision encoder's linears run as dynamic int8 GEMMs (``engine.layers.int8_gemm``).

    ``auto``: yes for a float32 model on a CPU whose best kernels are AVX2 (no AVX-512, no AMX), with
    the native library allowed (``SMOLCHAT_NATIVE``): there float32 sgemm is the ceiling and the
    int8 kernel runs the vision linears ~2.1x faster (docs/BENCHMARKS.md). AMX CPUs get bf16
    (:func:`choose_vision_dtype`); AVX-512 CPUs keep float32, where the AVX2 kernel was not measured
    to win. ``int8`` asks for it on any CPU; other names turn it off.

    Raises:
        EngineError: the name is unknown, or ``int8`` was asked for on a GPU (a CPU kernel).
    """
    from engine.native import build as native_build

    preference, where = _vision_preference(preference)
    if preference == VISION_INT8:
        if device.type != "cpu":
            raise EngineError(f"{where}: int8 is for the CPU; on {device.type} use auto, bfloat16 or float16")
        return True
    if preference != "auto":
        return False
    return (device.type == "cpu" and dtype == torch.float32 and not cpu_has_amx()
            and cpu_capability() == "AVX2" and native_build.enabled())


def describe_vision(device: torch.device, dtype: torch.dtype) -> str:
    """What the vision tower runs as on ``device`` for a ``dtype`` model, for ``info``:
    ``int8 GEMM (AVX2)``, ``bfloat16 (AMX)``, or the dtype's name (int8 with the native library
    off says that its matmuls run in float32)."""
    if choose_vision_int8(device, dtype):
        from engine.native import build as native_build

        if not native_build.enabled():  # asked for int8 with the native library off: the float32 fallback
            return "int8 weights, float32 matmuls (SMOLCHAT_NATIVE=0)"
        return f"int8 GEMM ({cpu_capability()})"
    vision = choose_vision_dtype(device, dtype)
    name = str(vision).removeprefix("torch.")
    return f"{name} (AMX)" if vision == torch.bfloat16 and device.type == "cpu" and cpu_has_amx() else name


@contextlib.contextmanager
def single_thread():
    """Run the block with one intra-op thread, then restore the previous count.

    For memory-bound bulk copies (the bf16 -> float32 conversion at load time): with two OpenMP
    threads on the 2-core CI box, converting 30 [1536, 576] bf16 weights took 0.23-0.35 s whenever
    another process held a core (each parallel region waits for a descheduled thread), against
    0.02-0.05 s with one thread. Same wake-up cost as :class:`DecodeThreads` describes.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class DecodeThreads:
    """Chooses torch's intra-op thread count for CPU decode steps by timing them.

    A batch-1 decode step is ~200 small matmuls, each a fork/join of the thread pool. On an idle
    machine two threads stream weights ~1.7x faster than one; when another process holds a core,
    every join waits for a descheduled thread and the same step runs >10x slower than on one thread
    (measured on this project's 2-core CI box: 0.4 vs 4.6 tok/s). So the tuner times ``probe`` steps
    at each candidate count and keeps the fastest (its best step, which ignores one-off stalls).
    ``SMOLCHAT_DECODE_THREADS=N`` pins the count instead.

    A probe's steps on fewer threads are slower on an idle machine: probing every 32 steps (3 of them
    on one thread, ~2x as long) cost ~4.5% of float32 decode on the 2-core Xeon. So the
    period doubles after each probe that keeps the choice, up to ``max_period`` steps, and falls back
    to ``period`` when the choice changes; and two steps in a row of the chosen count slower than
    ``slowdown`` times its probed best (another process took a core) start a probe at once.
    """

    def __init__(self, max_threads: int | None = None, probe: int = 3, period: int = 32, max_period: int = 256,
                 slowdown: float = 2.0):
        pinned = os.environ.get("SMOLCHAT_DECODE_THREADS", "auto").strip()
        self.max = max_threads or torch.get_num_threads()
        valid = pinned.isdigit() and int(pinned) >= 1  # 0 would make every decode step fail
        if not valid and pinned.lower() not in ("", "auto"):
            logging.getLogger(__name__).warning(
                "$SMOLCHAT_DECODE_THREADS: ignored %r (use auto or a number of threads >= 1); tuning instead",
                pinned[:40])
        self.choices = [int(pinned)] if valid else sorted({1, self.max})
        self.probe = probe
        self.min_period = max(period, probe * len(self.choices) + 1)
        self.period, self.max_period = self.min_period, max(max_period, self.min_period)
        self.slowdown = slowdown
        self.best = self.choices[-1]
        self.baseline: float | None = None  # the best count's fastest probed step (s)
        self.samples: dict[int, list[float]] = {c: [] for c in self.choices}
        self.phase = 0  # steps since the last probe began
        self.slow = 0  # consecutive steps over slowdown x baseline
        self.step = 0

    def _probing(self) -> bool:
        return len(self.choices) > 1 and self.phase < self.probe * len(self.choices)

    def pick(self) -> int:
        return self.choices[self.phase // self.probe] if self._probing() else self.best

    def record(self, threads: int, seconds: float) -> None:
        if self._probing():
            if self.phase % self.probe == 0:
                self.samples[threads] = []
            self.samples[threads].append(seconds)
            if self.phase == self.probe * len(self.choices) - 1:
                best = min(self.choices, key=lambda c: min(self.samples[c]))
                self.period = min(self.period * 2, self.max_period) if best == self.best else self.min_period
                self.best, self.baseline, self.slow = best, min(self.samples[best]), 0
        elif self.baseline is not None and threads == self.best:
            self.slow = self.slow + 1 if seconds > self.slowdown * self.baseline else 0
            if self.slow >= 2:  # probe from the next step on
                self.phase, self.period, self.slow = -1, self.min_period, 0
        self.phase += 1
        if self.phase >= self.period:
            self.phase = 0
        self.step += 1
