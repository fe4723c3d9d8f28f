"""Optional weight-only int8 for CPU decode (``SMOLCHAT_WEIGHTS=int8``).

Batch-1 decode on the CPU streams every weight from memory once per token (~540 MB in float32 for
SmolVLM-256M's text model and lm_head), so it runs at memory speed. Int8 weights with a float scale
per output channel move a quarter of the bytes. The matmul is FBGEMM's dynamic-quantized linear
(activations quantized per call, int32 accumulation, float output), which is shipped with every x86
PyTorch build. Greedy agreement with float32 is reported by ``bench/compare.py --sections int8``.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class Int8Linear(nn.Module):
    """``y = x @ dequant(W_int8)^T + b`` with per-output-channel symmetric int8 weights."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-8).double()
        qw = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
        bias = linear.bias.detach().float() if linear.bias is not None else None
        self._packed = torch.ops.quantized.linear_prepack(qw, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.quantized.linear_dynamic(x.reshape(-1, shape[-1]).float(), self._packed, True)
        return y.view(*shape[:-1], self.out_features).to(x.dtype)


def quantize_int8(model: nn.Module, inplace: bool = False) -> nn.Module:
    """The text decoder's projections and the lm_head of ``model`` as :class:`Int8Linear` (CPU only).

    The vision tower and connector (compute-bound, run once per image) stay in floating point.
    """
    if model.device.type != "cpu":
        raise ValueError("int8 weight-only quantization is a CPU option")
    if not inplace:
        model = copy.deepcopy(model)
    text = model.model.text_model
    for layer in text.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, Int8Linear(child))
    model.lm_head = Int8Linear(model.lm_head)
    model._static = None
    return model
