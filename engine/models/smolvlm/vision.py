"""SigLIP vision tower of Idefics3 / SmolVLM (transformers ``modeling_idefics3.py`` L104-318, L466-512).

Submodule names follow the checkpoint keys under ``model.vision_model``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers import fuse_linears
from engine.layers.attention import attention
from engine.models.smolvlm.config import VisionConfig


class VisionEmbeddings(nn.Module):
    """Non-overlapping ``P x P`` patches (a stride-P convolution) plus learned position embeddings.

    Every tile the processor produces is a full ``image_size`` square, so position ids are
    ``arange(num_patches)`` (reference §0.1: the bucketize path only matters for partial masks).

    The convolution runs as what it is, one matmul of the flattened patches with the kernel
    flattened ``[D, C*P*P]`` (the ``(c, i, j)`` order of both matches ``Conv2d``'s weight layout).
    A convolution's first call on CUDA loads and initialises cuDNN, a one-time cost inside the
    load's warm-up, and on the CPU the matmul is ~2x faster than the convolution (13 tiles of 512 x 512:
    86 against 174 ms in float32, 23 against 54 in bfloat16, on this project's 2-core machine).
    The ``patch_embedding`` module stays a ``Conv2d`` so the checkpoint's keys and shapes load as they are.
    """

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.patch_size = cfg.patch_size
        self.patch_embedding = nn.Conv2d(cfg.num_channels, cfg.hidden_size, kernel_size=cfg.patch_size,
                                         stride=cfg.patch_size, padding="valid")
        self.position_embedding = nn.Embedding(cfg.num_patches, cfg.hidden_size,  # no random init
                                               _weight=torch.empty(cfg.num_patches, cfg.hidden_size))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``pixel_values [N, C, M, M]`` -> ``[N, (M//P)**2, D]``, patches in row-major order, position
        embeddings added. Pixels past the last whole patch are dropped, as the stride-P convolution
        drops them (SmolVLM2-2.2B: 384-pixel tiles, 14-pixel patches, 27 x 27 of them)."""
        n, c, h, w = pixel_values.shape
        p = self.patch_size
        if h % p or w % p:
            pixel_values = pixel_values[:, :, :h - h % p, :w - w % p]
        # [N, C, H/P, P, W/P, P] -> [N, H/P, W/P, C, P, P]: one row of C*P*P values per patch. The
        # reshape copies once into the contiguous layout the matmul and every later op want.
        patches = pixel_values.reshape(n, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        patches = patches.reshape(n, (h // p) * (w // p), c * p * p)
        weight = self.patch_embedding.weight
        x = F.linear(patches, weight.reshape(weight.shape[0], -1), self.patch_embedding.bias)
        return x + self.position_embedding.weight[None, : x.shape[1]]


class VisionAttention(nn.Module):
    """Bidirectional multi-head attention, scale ``head_dim**-0.5``, all projections biased."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        d = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        self.qkv_proj: nn.Linear | None = None

    def fuse(self, dtype: torch.dtype | None = None) -> None:
        """One ``qkv_proj`` matmul instead of three (after loading; the checkpoint keeps three)."""
        self.qkv_proj = fuse_linears(self.q_proj, self.k_proj, self.v_proj, dtype=dtype)
        del self.q_proj, self.k_proj, self.v_proj

    def quantize_int8(self) -> None:
        """Projections as dynamic int8 GEMMs (``engine.layers.int8_gemm``; after :meth:`fuse`)."""
        from engine.layers.int8_gemm import Int8GemmLinear, supported

        for name in ("qkv_proj", "out_proj"):
            lin = getattr(self, name)
            if isinstance(lin, nn.Linear) and supported(lin):
                setattr(self, name, Int8GemmLinear(lin))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        if self.qkv_proj is not None:
            q, k, v = self.qkv_proj(x).view(n, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            out = attention(q, k, v)
            return self.out_proj(out.transpose(1, 2).reshape(n, t, d))
        q = self.q_proj(x).view(n, t, self.num_heads, self.head_dim).transpose(1, 2)  # [N, h, T, hd]
        k = self.k_proj(x).view(n, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(n, t, self.num_heads, self.head_dim).transpose(1, 2)
        out = attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(n, t, d))


# Tokens per MLP call while a cancel is possible (a tile has 1024 patches: 4 calls of ~0.07 s on 2 cores).
MLP_CHUNK_TOKENS = 256


class VisionMLP(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        if cfg.hidden_act not in ("gelu_pytorch_tanh", "gelu"):
            raise ValueError(f"vision hidden_act {cfg.hidden_act!r} is not supported")
        self.approximate = "tanh" if cfg.hidden_act == "gelu_pytorch_tanh" else "none"
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.fc1_applies_gelu = False

    def quantize_int8(self) -> None:
        """``fc1`` and ``fc2`` as dynamic int8 GEMMs (``engine.layers.int8_gemm``), the tanh GELU
        computed inside ``fc1``'s kernel while its output tile is in registers."""
        from engine.layers.int8_gemm import Int8GemmLinear, supported

        if supported(self.fc1):
            fused = self.approximate == "tanh"
            self.fc1 = Int8GemmLinear(self.fc1, activation="gelu_tanh" if fused else None)
            self.fc1_applies_gelu = fused
        if supported(self.fc2):
            self.fc2 = Int8GemmLinear(self.fc2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(h if self.fc1_applies_gelu else F.gelu(h, approximate=self.approximate))


class VisionEncoderLayer(nn.Module):
    """Pre-LN block: ``x += attn(LN1(x)); x += mlp(LN2(x))``."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.self_attn = VisionAttention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = VisionMLP(cfg)

    def forward(self, x: torch.Tensor, check: Callable[[], None] | None = None) -> torch.Tensor:
        """``check`` (a cancellation point, may raise) runs after the attention and between MLP chunks."""
        x = x + self.self_attn(self.layer_norm1(x))
        if check is None:
            return x + self.mlp(self.layer_norm2(x))
        check()
        # The MLP is ~70% of a layer's work (0.3 s for one tile on a busy 2-core CPU) and works per
        # token: run it in token chunks with a check between, so a cancel never waits for all of it.
        parts = []
        for part in self.layer_norm2(x).split(MLP_CHUNK_TOKENS, dim=1):
            parts.append(self.mlp(part))
            check()
        return x + torch.cat(parts, dim=1)


class VisionEncoder(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.layers = nn.ModuleList(VisionEncoderLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor, check: Callable[[], None] | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, check)
        return x


class VisionTransformer(nn.Module):
    """``pixel_values [N, 3, image_size, image_size]`` -> ``[N, num_patches, D]`` after ``post_layernorm``."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = VisionEmbeddings(cfg)
        self.encoder = VisionEncoder(cfg)
        self.post_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, pixel_values: torch.Tensor, check: Callable[[], None] | None = None) -> torch.Tensor:
        """``check`` is called inside each encoder layer, several times (it may raise to stop the tower)."""
        return self.post_layernorm(self.encoder(self.embeddings(pixel_values), check))

    def fuse(self, dtype: torch.dtype | None = None) -> None:
        for layer in self.encoder.layers:
            layer.self_attn.fuse(dtype)

    def quantize_int8(self) -> None:
        """The encoder's linears as dynamic int8 GEMMs for AVX2 CPUs (``engine.device.choose_vision_int8``;
        float32 activations in and out). The patch embedding stays float32."""
        for layer in self.encoder.layers:
            layer.self_attn.quantize_int8()
            layer.mlp.quantize_int8()
