"""The gated (SwiGLU) MLP of Llama-family decoders."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.linear import fuse_linears


class GatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (Shazeer 2020, SwiGLU; transformers ``LlamaMLP``).

    After :meth:`fuse` the two input projections run as one ``gate_up`` matmul (the checkpoint keeps
    ``gate_proj``/``up_proj``; fusing happens after loading).
    """

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False):
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.gate_up: nn.Linear | None = None

    def fuse(self, dtype: torch.dtype | None = None) -> None:
        self.gate_up = fuse_linears(self.gate_proj, self.up_proj, dtype=dtype)
        del self.gate_proj, self.up_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., hidden]`` -> ``[..., hidden]`` (needs :meth:`fuse`)."""
        gate, up = self.gate_up(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate).mul_(up))
