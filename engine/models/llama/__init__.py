"""The Llama decoder, its decode steps (eager, CUDA graph, fused Triton, CPU threads) and its config,
and the text-only Llama-family model (model_type ``llama``: SmolLM2 and the like).

The registry (:mod:`engine.registry`) reads ``Model``, ``parse_metadata`` and ``load_processor``.
Names are imported on first use, so reading a config (``engine.models.llama.config``) never imports torch.
"""

import importlib

_LAZY = {
    "LlamaConfig": "engine.models.llama.config",
    "LlamaDecoder": "engine.models.llama.decoder",
    "LlamaLM": "engine.models.llama.lm",
    "LlamaModel": "engine.models.llama.model",
    "parse_metadata": "engine.models.llama.metadata",
    "load_processor": "engine.models.llama.metadata",
}


def __getattr__(name: str):
    if name == "Model":
        name = "LlamaModel"
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [*_LAZY, "Model"]
