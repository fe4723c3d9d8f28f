"""What a loaded model can do: one dataclass read by ``info``, the app and the HTTP server.

Torch-free. A model builds it from its own methods (:meth:`GenerativeModel.capabilities`), so no
front end keeps a hard-coded copy of what a checkpoint supports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Capabilities of one model.

    Attributes:
        vision: takes images in user messages.
        video: takes videos (sampled frames) in user messages.
        embeddings: ``prefill_hidden`` works (``engine embed``, ``/v1/embeddings``).
        all_logits: ``decode_all_logits`` works (speculative verification).
        speculative: prompt-lookup speculative decoding is available (needs ``all_logits``).
        max_context: tokens one conversation can hold (prompt + answer).
        image_tokens_per_tile: prompt tokens one image tile takes (0 without vision).
    """

    vision: bool = False
    video: bool = False
    embeddings: bool = False
    all_logits: bool = False
    speculative: bool = False
    max_context: int = 0
    image_tokens_per_tile: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Capabilities:
        """Build from a dict (a server's answer), ignoring unknown keys."""
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})
