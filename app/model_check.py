"""Checking a model folder before it is used: config, tokenizer, image processor, every tensor with
the right shape. Imports torch; call it from a worker thread only (the UI never imports torch)."""

from __future__ import annotations

import sys


def validate_model(path: str) -> dict:
    """``{"ok", "path", "name", "summary", "problems": [...], "info": {...}}``; never raises."""
    report: dict = {"ok": False, "path": path, "name": "", "summary": "", "problems": [], "info": {}}
    problems = report["problems"]
    try:
        from engine.__main__ import model_info
        from engine.loader import model_class
        from engine.sources import resolve_source

        info = model_info(path)  # config.json, generation_config.json, safetensors headers, meta build
        report["info"] = info
        report["name"] = info["name"]
        source = resolve_source(path)
        folder = source.folder
    except Exception as exc:  # noqa: BLE001 - the report says what is wrong
        from app.worker import describe_error

        problems.append(describe_error(exc))
        report["summary"] = "Not a usable model folder."
        return report
    try:
        from engine.tokenizer import Tokenizer

        tokenizer = Tokenizer.from_pretrained(folder)
        vocab = getattr(tokenizer, "vocab_size", None)
        if vocab is not None and vocab > info["text"]["vocab_size"]:
            problems.append(f"tokenizer has {vocab} tokens but the model's vocabulary is {info['text']['vocab_size']}")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"tokenizer: {exc}")
    try:
        from engine.processing import ImageProcessor

        ImageProcessor.from_pretrained(folder)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"image processor: {exc}")
    problems += _shape_problems(source, model_class)
    report["ok"] = not problems
    params = info["parameters"] / 1e6
    report["summary"] = (f"{info['name']}: {params:.0f}M parameters in {info['tensors']} tensors, "
                         f"{info['text']['layers']} text layers, {info['vision']['layers']} vision layers"
                         + (" — all present with the right shapes." if not problems else f" — {len(problems)} problem(s)."))
    return report


def _shape_problems(source, model_class) -> list[str]:
    """Compare the checkpoint's tensor shapes (headers only) with the model built on the meta device."""
    import torch

    meta = source.metadata()
    cls = model_class(meta.model_type)
    with torch.device("meta"):
        model = cls(meta)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    shapes = source.tensor_shapes()
    sanitize = getattr(sys.modules[cls.__module__], "sanitize", None)
    if sanitize is not None:  # same renames and drops as loading
        shapes = sanitize(shapes.items())
    if "lm_head.weight" not in shapes and getattr(meta, "tie_word_embeddings", False):
        tied = shapes.get("model.text_model.embed_tokens.weight")
        if tied is not None:
            shapes["lm_head.weight"] = tied
    problems = []
    missing = sorted(set(expected) - set(shapes))
    if missing:
        problems.append(f"{len(missing)} tensor(s) missing: " + ", ".join(missing[:5]) + (" …" if len(missing) > 5 else ""))
    unknown = sorted(set(shapes) - set(expected))
    if unknown:
        problems.append(f"{len(unknown)} unknown tensor(s): " + ", ".join(unknown[:5]))
    for name in sorted(set(expected) & set(shapes)):
        if tuple(shapes[name]) != expected[name]:
            problems.append(f"tensor {name} has shape {tuple(shapes[name])}, expected {expected[name]}")
    return problems
