"""Device and dtype choice: CUDA > MPS > CPU; bfloat16 on GPUs, float32 on the CPU unless asked."""

from __future__ import annotations

import torch

from engine.errors import EngineError

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


def choose_device(preference: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"`` picks CUDA, then MPS, then CPU.

    Raises:
        EngineError: an explicit device was asked for and is not available here.
    """
    if isinstance(preference, torch.device):
        return preference
    if preference in (None, "", "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    kind = str(preference).split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise EngineError("device 'cuda' was requested but this PyTorch build sees no CUDA GPU")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise EngineError("device 'mps' was requested but the Apple GPU (MPS) is not available")
    if kind not in ("cuda", "mps", "cpu"):
        raise EngineError(f"unknown device {preference!r} (use auto, cuda, mps or cpu)")
    return torch.device(preference)


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


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
