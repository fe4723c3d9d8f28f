"""Checkpoint checks shared by loading and by the app's model manager: config, tokenizer, processor,
and every tensor's name and shape, read from file headers without loading weights.

``load`` raises the first problems as a :class:`~engine.api.errors.ModelLoadError`;
:func:`check_checkpoint` collects all of them into a report for a person to read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.api.errors import ModelLoadError


def expected_shapes(model_cls, meta) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor ``model_cls(meta)`` loads (built on the meta device: no memory)."""
    with torch.device("meta"):
        model = model_cls(meta)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def tensor_problems(expected: Mapping[str, tuple[int, ...]], found: Mapping[str, tuple[int, ...]],
                    limit: int = 10) -> list[str]:
    """One line per kind of mismatch: missing tensors, unknown tensors, wrong shapes (names listed,
    up to ``limit`` each)."""
    problems = []
    missing = sorted(set(expected) - set(found))
    if missing:
        more = f" (+{len(missing) - limit} more)" if len(missing) > limit else ""
        problems.append(f"{len(missing)} tensor(s) missing from the checkpoint: {', '.join(missing[:limit])}{more}")
    unknown = sorted(set(found) - set(expected))
    if unknown:
        more = f" (+{len(unknown) - limit} more)" if len(unknown) > limit else ""
        problems.append(f"checkpoint has {len(unknown)} unknown tensor(s): {', '.join(unknown[:limit])}{more}")
    for name in sorted(set(expected) & set(found)):
        if tuple(found[name]) != tuple(expected[name]):
            problems.append(f"tensor {name} has shape {tuple(found[name])}, expected {tuple(expected[name])}")
    return problems


def check_state(expected: Mapping[str, tuple[int, ...]], state: Mapping[str, torch.Tensor], where: str) -> None:
    """Raise :class:`ModelLoadError` (``where: problem``) unless ``state`` has exactly the expected
    float tensors with the expected shapes."""
    problems = tensor_problems(expected, {k: tuple(v.shape) for k, v in state.items()})
    if problems:
        raise ModelLoadError(f"{where}: {problems[0]}" + (f" (and {len(problems) - 1} more problem(s))"
                                                          if len(problems) > 1 else ""))
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise ModelLoadError(f"{where}: tensor {name} has non-float dtype {tensor.dtype}")


@dataclass
class CheckReport:
    """What :func:`check_checkpoint` found. ``ok`` when ``problems`` is empty."""

    path: str
    name: str = ""
    summary: str = ""
    problems: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"ok": self.ok, "path": self.path, "name": self.name, "summary": self.summary,
                "problems": list(self.problems), "info": dict(self.info)}


def _cpu_decode_step() -> str:
    from engine.native import describe

    return describe(wait=True)


def model_info(path_or_repo_id: str | Path) -> dict:
    """Metadata and capabilities of a checkpoint, read from its headers (no weights loaded).

    Raises:
        ModelLoadError: (and subclasses) the folder or config is unusable, or a weights file unreadable.
    """
    from engine.sources import resolve_source

    source = resolve_source(path_or_repo_id)
    return _describe(source, source.metadata(), source.tensor_shapes())


def _describe(source, meta, shapes: Mapping[str, tuple[int, ...]] | None) -> dict:
    """:func:`model_info`'s dict; ``parameters`` and ``tensors`` are None where ``shapes`` is (the
    weights could not be read)."""
    from engine.device import describe_vision
    from engine.registry import model_class

    cls = model_class(meta.model_type)
    with torch.device("meta"):
        probe = cls(meta)
    t = meta.text
    info = {
        "name": meta.name, "folder": str(source.folder), "model_type": meta.model_type,
        "parameters": None if shapes is None else sum(math.prod(s) for s in shapes.values()),
        "tensors": None if shapes is None else len(shapes),
        "text": {"hidden_size": t.hidden_size, "layers": t.num_hidden_layers, "heads": t.num_attention_heads,
                 "kv_heads": t.num_key_value_heads, "head_dim": t.head_dim, "vocab_size": t.vocab_size,
                 "rope_theta": t.rope_theta},
        "eos_token_ids": list(meta.eos_token_ids),
        "capabilities": probe.capabilities().to_dict(),
        # Which batch-1 decode step a float32 / int8 / int4 model runs on this machine's CPU (finds
        # or builds the native library once per machine: engine/native/build.py).
        "cpu_decode_step": _cpu_decode_step(),
    }
    vision = getattr(meta, "vision", None)
    if vision is not None:
        info["vision"] = {"hidden_size": vision.hidden_size, "layers": vision.num_hidden_layers,
                          "image_size": vision.image_size, "patch_size": vision.patch_size,
                          "image_tokens_per_tile": meta.image_seq_len,
                          # what a float32 model's vision tower runs as on this machine's CPU
                          "cpu_precision": describe_vision(torch.device("cpu"), torch.float32)}
    return info


def _not_usable(path: str | Path) -> str:
    """The report's summary for a model that cannot be used: a file (a GGUF) is no folder."""
    return "Not a usable model file." if Path(path).is_file() else "Not a usable model folder."


def check_checkpoint(path: str) -> CheckReport:
    """Check a checkpoint folder (or Hub id in the local cache) before it is used; never raises.

    Reads config.json, generation_config.json, the tokenizer and processor files and the tensor
    headers, and compares every tensor with the model built on the meta device.
    """
    from engine.api.errors import EngineError
    from engine.registry import model_class, model_package
    from engine.sources import LocalDirSource, MissingWeightsError, resolve_source
    from engine.tokenizer import Tokenizer

    report = CheckReport(path=str(path))
    try:
        try:
            source = resolve_source(path)
        except MissingWeightsError:  # the rest of the folder is still checked, its weights listed as missing
            source = LocalDirSource(Path(path).expanduser(), weights_required=False)
        meta = source.metadata()
        try:
            shapes, unreadable = source.tensor_shapes(), None
        except ModelLoadError as exc:  # a weights file cut short or damaged: one more problem to list
            shapes, unreadable = None, str(exc)
        info = _describe(source, meta, shapes)
    except EngineError as exc:
        report.problems.append(str(exc))
        report.summary = _not_usable(path)
        return report
    except Exception as exc:  # noqa: BLE001 - the report says what is wrong
        report.problems.append(f"{type(exc).__name__}: {exc}")
        report.summary = _not_usable(path)
        return report
    report.info, report.name = info, info["name"]
    if unreadable is not None:
        report.problems.append(unreadable)
    try:
        tokenizer = Tokenizer.from_pretrained(source.folder)
        if tokenizer.vocab_size > meta.text.vocab_size:
            report.problems.append(f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary is "
                                   f"{meta.text.vocab_size}")
    except Exception as exc:  # noqa: BLE001
        report.problems.append(f"tokenizer: {exc}")
    try:
        model_package(meta.model_type).load_processor(source.folder, meta)
    except Exception as exc:  # noqa: BLE001
        report.problems.append(f"processor: {exc}")
    if shapes is None:
        report.summary = f"{info['name']}: its weights cannot be read — {len(report.problems)} problem(s)."
        return report
    cls = model_class(meta.model_type)
    found = cls.map_checkpoint(shapes.items(), meta)
    report.problems += tensor_problems(expected_shapes(cls, meta), found, limit=5)
    parts = [f"{info['text']['layers']} text layers"]
    if "vision" in info:
        parts.append(f"{info['vision']['layers']} vision layers")
    report.summary = (f"{info['name']}: {info['parameters'] / 1e6:.0f}M parameters in {info['tensors']} tensors, "
                      + ", ".join(parts)
                      + (" — all present with the right shapes." if report.ok else f" — {len(report.problems)} problem(s)."))
    return report
