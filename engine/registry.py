"""The one list of supported architectures: config.json's ``model_type`` -> model package (mlx-lm's pattern).

A model package (``engine.models.<arch>``) exports ``Model`` (a :class:`GenerativeModel`),
``parse_metadata(config, generation, name, where) -> ModelMetadata`` and
``load_processor(folder, metadata)`` (its image/video processor, or ``None`` for text-only models).
Adding an architecture is one folder under ``engine/models/`` and one line in :data:`ARCHITECTURES`.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from engine.api.errors import ConfigError, EngineError, ModelLoadError, UnsupportedModelError
from engine.api.events import WEIGHT_FORMATS

if TYPE_CHECKING:
    import torch

    from engine.models.base import GenerativeModel
    from engine.models.config import ModelMetadata
    from engine.sources import ModelSource

ARCHITECTURES: dict[str, str] = {
    "idefics3": "engine.models.smolvlm",  # SmolVLM-256M/500M/2.2B-Instruct
    "smolvlm": "engine.models.smolvlm",  # SmolVLM2 (images and video)
    "llama": "engine.models.llama",  # text-only LlamaForCausalLM: SmolLM2-135M/360M/1.7B-Instruct
}


def supported_model_types() -> tuple[str, ...]:
    return tuple(ARCHITECTURES)


def model_package(model_type: str) -> ModuleType:
    """The package implementing ``model_type``.

    Raises:
        UnsupportedModelError: ``model_type`` is not in :data:`ARCHITECTURES` (the supported ones named).
    """
    module = ARCHITECTURES.get(model_type)
    if module is None:
        raise UnsupportedModelError(
            f"model_type {model_type!r} is not supported (supported: {', '.join(supported_model_types())})")
    return importlib.import_module(module)


def model_class(model_type: str) -> type[GenerativeModel]:
    return model_package(model_type).Model


def parse_metadata(config: dict, generation: dict | None = None, name: str = "",
                   where: str = "config.json") -> ModelMetadata:
    """Metadata of a checkpoint from its loaded config.json / generation_config.json objects.

    Raises:
        ConfigError: ``model_type`` or another required key is missing, or a value is inconsistent.
        UnsupportedModelError: ``model_type`` is not supported (the supported ones named).
    """
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"{where}: required key 'model_type' is missing")
    try:
        package = model_package(model_type)
    except UnsupportedModelError as exc:
        raise UnsupportedModelError(f"{where}: {exc}") from None
    return package.parse_metadata(config, generation, name=name, where=where)


def read_metadata(folder: str | Path) -> ModelMetadata:
    """Read ``config.json`` (required) and ``generation_config.json`` (optional) from ``folder``."""
    from engine.models.config import read_json

    folder = Path(folder)
    config = read_json(folder / "config.json")
    gen_path = folder / "generation_config.json"
    generation = read_json(gen_path) if gen_path.exists() else None
    return parse_metadata(config, generation, name=folder.name, where=str(folder / "config.json"))


WEIGHTS_ENV = "SMOLCHAT_WEIGHTS"
WEIGHTS = WEIGHT_FORMATS


def resolve_weights(weights: str | None) -> str:
    """``weights`` or ``$SMOLCHAT_WEIGHTS`` normalised to one of :data:`WEIGHTS`.

    Raises:
        EngineError: an unknown value (naming where it came from and the valid ones).
    """
    from_env = not weights and bool(os.environ.get(WEIGHTS_ENV, "").strip())
    value = (weights or os.environ.get(WEIGHTS_ENV, "")).strip().lower() or "auto"
    if value not in WEIGHTS:
        where = f"${WEIGHTS_ENV}" if from_env else "weights"
        raise EngineError(f"{where}: unknown value {value!r} (use {', '.join(WEIGHTS)})")
    return value


def load_model(path_or_repo_id: str | Path | ModelSource, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None, weights: str | None = None) -> GenerativeModel:
    """Load a checkpoint folder or Hub repository id on ``device`` (auto: CUDA > MPS > CPU).

    ``weights`` (default ``$SMOLCHAT_WEIGHTS``, else ``auto``): ``auto`` keeps the weights in
    ``dtype``; ``int8`` quantizes the text decoder's projections and lm_head to int8 weight-only
    (:mod:`engine.layers.linear`) when the model runs on the CPU or CUDA (half of bf16's and a quarter
    of float32's weight bytes a token: faster decode, slightly different logits); ``int4`` to 4 bits
    in groups of 32 (an eighth of float32's weight bytes). Both are ignored on MPS (no kernel reads
    them there), and applied layer by layer as the model is built (``GenerativeModel.load``).

    Raises:
        ModelLoadError: (and subclasses) the folder, config or tensors are unusable.
        EngineError: the device, dtype or weights option is not available.
    """
    import torch

    from engine.device import choose_dtype
    from engine.sources import ModelSource, resolve_source

    weights = resolve_weights(weights)
    source = path_or_repo_id if isinstance(path_or_repo_id, ModelSource) else resolve_source(path_or_repo_id)
    meta = source.metadata()
    if dtype not in (None, "", "auto"):
        dtype = choose_dtype(torch.device("cpu"), dtype)  # a named dtype is the same on every device
    device_chosen = _choose_device_in_background(device)
    try:
        model = model_class(meta.model_type).load(source, device_chosen.result, dtype, weights=weights)
    except (MemoryError, RuntimeError) as exc:
        if not out_of_memory(exc):
            raise
        smaller = {"auto": "int8 or 4-bit weights (Settings ▸ Weights in the app, --weights on the command line), or ",
                   "int8": "4-bit weights, or "}.get(weights, "")
        raise ModelLoadError(f"Not enough memory to load {getattr(source, 'folder', path_or_repo_id)}: "
                             f"{_first_line(exc)}. Close other programs, or use {smaller}a smaller model") from exc
    from engine.device import release_free_host_memory

    release_free_host_memory()
    return model


#: What PyTorch says when memory runs out: the CPU allocator ("DefaultCPUAllocator: not enough memory"),
#: a memory map of the weights ("unable to mmap N bytes ... Cannot allocate memory (12)"), CUDA and MPS
#: ("out of memory").
_OUT_OF_MEMORY = ("not enough memory", "cannot allocate memory", "out of memory")


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is memory running out (``MemoryError``, ``torch.OutOfMemoryError``, or a
    ``RuntimeError`` in PyTorch's words for it, :data:`_OUT_OF_MEMORY`)."""
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(words in str(exc).lower() for words in _OUT_OF_MEMORY)


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, without PyTorch's "[enforce fail at ...]" prefix."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return re.sub(r"^\[enforce fail at [^\]]*\][^.]*\.\s*", "", text).rstrip(".") or type(exc).__name__


def _choose_device_in_background(preference: str | torch.device | None) -> Future[torch.device]:
    """:func:`engine.device.choose_device` on a thread, which then starts what that device does beside
    the weights' load; the future gives the device (or choose_device's EngineError).

    Asking for CUDA starts the driver (``cuInit``: 0.18-0.34 s on the H200's host; here through
    :func:`engine.device.start_cuda_driver`, so that nothing else waits for it), and the model's
    construction on the meta device needs no device: it runs meanwhile."""
    import engine.device

    chosen: Future[torch.device] = Future()

    def run() -> None:
        try:
            engine.device.start_cuda_driver(preference)
            dev = engine.device.choose_device(preference)
            if dev.type == "cpu":
                # Find or build the native CPU decode step while the weights load (a first-ever build
                # takes a second or two on a background thread; decoding stays eager until it is ready).
                from engine.native import start

                start()
            elif dev.type == "cuda":  # likewise the CUDA context, and Triton's key, which the first fused kernel needs
                from engine.models.llama.static_decode import start_triton_key

                engine.device.start_device_init(dev)
                start_triton_key(dev)
        except BaseException as exc:  # noqa: BLE001 - raised on the loading thread by result()
            chosen.set_exception(exc)
        else:
            chosen.set_result(dev)

    threading.Thread(target=run, name="smolchat-device", daemon=True).start()
    return chosen


def load_components(path_or_repo_id: str | Path, device: str | torch.device | None = None,
                    dtype: str | torch.dtype | None = None, weights: str | None = None):
    """Model, tokenizer and processor (``None`` for text-only models) of one checkpoint folder or Hub
    id: what a chat or an embedder needs. Raises as :func:`load_model`, plus ConfigError for missing
    tokenizer files."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.cancellation import load_cancel_point
    from engine.sources import resolve_source
    from engine.tokenizer import Tokenizer

    source = resolve_source(path_or_repo_id)
    # The tokenizer loads on a thread while the weights are read and copied to the device. A model
    # that fails to load is reported first, as before.
    with ThreadPoolExecutor(1, thread_name_prefix="smolchat-tokenizer") as pool:
        tokenizer = pool.submit(Tokenizer.from_pretrained, source.folder)
        model = load_model(source, device, dtype, weights)
        load_cancel_point()
        processor = model_package(model.metadata.model_type).load_processor(source.folder, model.metadata)
        if processor is not None and model.device.type == "cuda" and hasattr(processor, "resize_device"):
            # Pillow resizes a photo on one host thread in ~0.15 s; the same bytes take milliseconds there.
            processor.resize_device = model.device
        return model, tokenizer.result(), processor
