"""Checking a model folder before it is used (the model manager's "Check" and "Add folder").

The checks themselves are the engine's (:func:`engine.validate.check_checkpoint`: config,
tokenizer, processor, every tensor's name and shape). They import torch: call this from a background
thread only (the UI never imports torch).
"""

from __future__ import annotations


def validate_model(path: str) -> dict:
    """``{"ok", "path", "name", "summary", "problems": [...], "info": {...}}``; never raises."""
    from engine.validate import check_checkpoint

    return check_checkpoint(path).to_dict()
