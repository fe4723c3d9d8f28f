"""SmolVLM / Idefics3 (one concept per file: vision, connector, text, model)."""

from engine.models.smolvlm.model import SmolVlmModel

__all__ = ["SmolVlmModel"]
