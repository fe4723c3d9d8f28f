"""Pixel-shuffle connector: vision patches -> text-width image tokens (TF4 ``modeling_idefics3.py`` L390-410)."""

from __future__ import annotations

import torch
from torch import nn


def pixel_shuffle(x: torch.Tensor, scale: int) -> torch.Tensor:
    """Fold each ``scale x scale`` block of patches into one token (space-to-depth).

    ``x [N, seq, D]`` with ``seq`` a square grid -> ``[N, seq / scale**2, D * scale**2]``. Output row
    ``r*(h/s)+c`` concatenates patches at rows ``s*r+dh`` and columns ``s*c+dw``, channel offset
    ``dh*(s*D) + dw*D`` (dh-major, dw-minor), exactly as ``Idefics3Connector.pixel_shuffle``.
    """
    n, seq, d = x.shape
    h = w = int(seq**0.5)
    if h * w != seq or h % scale:
        raise ValueError(f"pixel_shuffle needs a square grid divisible by {scale}, got {seq} patches")
    x = x.view(n, h, w, d).view(n, h, w // scale, d * scale).permute(0, 2, 1, 3)
    x = x.reshape(n, w // scale, h // scale, d * scale * scale).permute(0, 2, 1, 3)
    return x.reshape(n, seq // (scale * scale), d * scale * scale)


class ModalityProjection(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Connector(nn.Module):
    """``[N, num_patches, D_vision]`` -> ``[N, image_seq_len, D_text]`` (``Idefics3Connector``, no bias)."""

    def __init__(self, vision_hidden: int, text_hidden: int, scale_factor: int):
        super().__init__()
        self.scale_factor = scale_factor
        self.modality_projection = ModalityProjection(vision_hidden * scale_factor**2, text_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.modality_projection(pixel_shuffle(x, self.scale_factor))
