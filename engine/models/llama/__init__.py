"""The Llama decoder, its decode steps (eager, CUDA graph, fused Triton, CPU threads) and its config.

Names are imported on first use, so reading a config (``engine.models.llama.config``) never imports torch.
"""

import importlib

_LAZY = {
    "LlamaConfig": "engine.models.llama.config",
    "LlamaDecoder": "engine.models.llama.decoder",
    "LlamaLM": "engine.models.llama.lm",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
