"""Linear variants: fused projections (:func:`fuse_linears`) and optional weight-only int8 for CPU
and CUDA decode (``weights="int8"``, or ``SMOLCHAT_WEIGHTS=int8``).

Batch-1 decode on the CPU streams every weight from memory once per token (~540 MB in float32 for
SmolVLM-256M's text model and lm_head), so it runs at memory speed. Int8 weights with one scale per
output channel move a quarter of the bytes ("W8A16": LLM.int8() / gpt-fast ``int8`` weight-only
quantization, without outlier handling). The matmul is ATen's ``_weight_int8pack_mm`` (the kernel
gpt-fast and torchao use on CPU): activations are cast to bfloat16, weights are dequantized in
registers, the output is cast back.

Measured on the project's 2-core Sapphire Rapids box (random weights at the real shape; median time
of a whole eager decode step; top-1 agreement and relative logit error against float32 over a
96-token teacher-forced text; bench/compare.py ``--sections int8`` has the end-to-end decode figures):

=============================================  ==========  =============  ===========
text projections + lm_head as                  step ms     top-1 agrees   rel. error
=============================================  ==========  =============  ===========
float32 (reference)                            39-41       100%           0
FBGEMM dynamic int8, ``reduce_range=True``     22.0        71.9%          12.1%
FBGEMM dynamic int8, ``reduce_range=False``    22.8        84.4%          7.0%
``_weight_int8pack_mm``, bf16 activations      25.5        90.6%          3.7%
=============================================  ==========  =============  ===========

FBGEMM's dynamic linear quantizes the activation row to 8 (or 7) bits per call: faster, but the
error doubles; it also rests on quantized tensors that PyTorch has deprecated. Random weights have
close top logits (median top-1/top-2 gap 1.2 against a logit std of 8), so the agreement with a
trained checkpoint is higher; the figure is reported, not assumed.

On CUDA the same int8 weights and scales are read by the Triton decode step's GEMVs
(:mod:`engine.models.llama.triton_decode`: int8 rows widened in registers, the fp32 dot product
times the row's scale), half of bf16's weight bytes a token; a prefill of many rows converts each
weight to the activation dtype (exact: |q| <= 127 fits bf16's 8-bit significand) for cuBLAS.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def fuse_linears(*linears: nn.Linear, dtype: torch.dtype | None = None) -> nn.Linear:
    """One ``nn.Linear`` whose output is the concatenation of ``linears``' outputs (same input).

    Decode runs at batch 1, where a projection costs its weight's trip through memory plus a fixed
    per-call overhead; one wider matmul replaces several calls (vLLM ``QKVParallelLinear`` /
    ``MergedColumnParallelLinear``, gpt-fast ``wqkv``). The fused weight is written once, already in
    ``dtype`` (default: the first weight's): at load time the parts are the checkpoint's memory-mapped
    bf16 tensors, and converting while copying avoids a second pass over ~85% of the text weights.
    """
    dtype = dtype or linears[0].weight.dtype
    rows = sum(lin.weight.shape[0] for lin in linears)
    w = torch.empty(rows, linears[0].weight.shape[1], dtype=dtype, device=linears[0].weight.device)
    b = torch.empty(rows, dtype=dtype, device=w.device) if linears[0].bias is not None else None
    start = 0
    for lin in linears:
        end = start + lin.weight.shape[0]
        w[start:end].copy_(lin.weight)
        if b is not None:
            b[start:end].copy_(lin.bias)
        start = end
    with torch.device("meta"):
        fused = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
    fused.weight = nn.Parameter(w, requires_grad=False)
    if b is not None:
        fused.bias = nn.Parameter(b, requires_grad=False)
    return fused


class Int8Linear(nn.Module):
    """``y = (x @ W_int8^T) * scale`` with per-output-channel symmetric int8 weights.

    ``weight`` is ``int8 [out, in]``, ``scale`` ``bfloat16 [out]`` with ``scale = max|W_row| / 127``;
    ``x [..., in]`` of any float dtype, returned in ``x.dtype``. On the CPU a few rows go through
    ATen's ``_weight_int8pack_mm`` (bf16 activations); elsewhere, and for many rows, the weight is
    widened to the activation dtype (float32 on the CPU) for an ordinary matmul.
    """

    #: Rows quantized at a time: each row's scale and values depend on that row alone, and in chunks
    #: the float32 temporaries stay ~32 MB instead of three copies of the whole weight (1.2 GB for the
    #: 2.2B shape's lm_head, the peak of its int8 load).
    QUANTIZE_ROWS = 4096

    def __init__(self, linear: nn.Linear):
        super().__init__()
        source = linear.weight.detach()
        self.out_features, self.in_features = source.shape
        weight = torch.empty(source.shape, dtype=torch.int8, device=source.device)
        scale = torch.empty(self.out_features, dtype=torch.bfloat16, device=source.device)
        for start in range(0, self.out_features, self.QUANTIZE_ROWS):
            rows = slice(start, start + self.QUANTIZE_ROWS)
            w = source[rows].float()
            exact = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-8)
            # The kernel multiplies by the bfloat16 scale, so round with that one: quantizing against
            # the float32 scale left every row off by up to 2**-9 of itself, a systematic error that
            # cost 0.2% of perplexity on SmolLM2's real weights (+1.02% against +0.83% over float32,
            # Apache licence). Rounding the scale up keeps |w / scale| <= 127.
            s = exact.to(torch.bfloat16)
            s = torch.where(s.float() < exact, torch.nextafter(s, torch.full_like(s, float("inf"))), s)
            scale[rows] = s
            weight[rows] = torch.round(w / s.float()[:, None]).clamp_(-127, 127)
        self.register_buffer("weight", weight)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", linear.bias.detach().float() if linear.bias is not None else None)

    #: From this many rows on (a prefill chunk), the CPU dequantizes the weight and runs a float32
    #: matmul: ``_weight_int8pack_mm`` is a GEMV kernel, and a 512-token prefill through it ran at
    #: half the speed of float32 weights (bench/cpu_llamacpp.py), while the dequantized copy is one
    #: layer's weight, made once per call, small next to a 512-row matmul.
    DEQUANT_ROWS = 16

    def forward_widened(self, x: torch.Tensor) -> torch.Tensor:
        """The forward off the CPU: ``(x @ W_int8.to(x.dtype)^T) * scale`` in ``x.dtype``. ATen's CUDA
        ``_weight_int8pack_mm`` is a float32-only loop of one thread an output; the decode step's GEMVs
        read these weights in Triton instead. Integers up to 127 are exact in every float dtype, so
        only the matmul's output and the scaling round."""
        y = torch.nn.functional.linear(x, self.weight.to(x.dtype)) * self.scale.to(x.dtype)
        return y + self.bias.to(x.dtype) if self.bias is not None else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        if x.device.type != "cpu":
            return self.forward_widened(x)
        if x.numel() >= self.DEQUANT_ROWS * shape[-1]:
            w = self.weight.float().mul_(self.scale.float()[:, None])
            return torch.nn.functional.linear(x.float(), w, self.bias).to(x.dtype)
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, shape[-1]).to(torch.bfloat16), self.weight,
                                                self.scale)
        y = y.view(*shape[:-1], self.out_features).to(x.dtype)
        return y + self.bias if self.bias is not None else y


class Int4Linear(nn.Module):
    """``y = x @ dequant(W_int4)^T`` with 4-bit weights in groups of ``group_size`` input channels,
    each group with its own scale and zero (asymmetric; gpt-fast / torchao ``int4wo``, like llama.cpp's
    Q4_1): ``W = (q - 8) * scale + zero`` for ``q`` in 0..15.

    The matmul is ATen's ``_weight_int4pack_mm`` on CUDA (``_weight_int4pack_mm_for_cpu`` if built
    on the CPU), which unpack the weights in registers: an eighth of float32's weight bytes move
    through memory. :func:`quantize_weights` uses :class:`~engine.layers.q4.Q4Linear` on the CPU
    instead (the native decode step's format; the int4pack CPU kernel was slower than int8).
    ``x [..., in]`` of any float dtype (computed in bfloat16),
    returned in ``x.dtype``.

    Raises:
        ValueError: ``in_features`` is not a multiple of ``group_size``.
    """

    INNER_K_TILES = 2

    #: Rows quantized at a time (as :attr:`Int8Linear.QUANTIZE_ROWS`): each row's groups depend on that
    #: row alone, and the float32 temporaries of a whole lm_head were ~4 copies of it (1.6 GB for the
    #: 2.2B shape's).
    QUANTIZE_ROWS = 4096

    def __init__(self, linear: nn.Linear, group_size: int = 32):
        super().__init__()
        source = linear.weight.detach()
        n, k = source.shape
        if k % group_size:
            raise ValueError(f"int4 needs in_features ({k}) divisible by the group size {group_size}")
        self.in_features, self.out_features, self.group_size = k, n, group_size
        device = source.device
        q = torch.empty(n, k, dtype=torch.uint8, device=device)
        scale = torch.empty(n, k // group_size, 1, dtype=torch.float32, device=device)
        lo = torch.empty_like(scale)
        for start in range(0, n, self.QUANTIZE_ROWS):
            rows = slice(start, start + self.QUANTIZE_ROWS)
            groups = source[rows].float().reshape(-1, k // group_size, group_size)
            lo[rows], hi = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
            scale[rows] = ((hi - lo[rows]) / 15).clamp(min=1e-8)
            q[rows] = ((groups - lo[rows]) / scale[rows]).round_().clamp_(0, 15).reshape(-1, k)
        zero = lo + scale * 8
        # [k / group, n, 2]: the layout both int4pack kernels read.
        self.register_buffer("scales_and_zeros", torch.cat([scale, zero], -1).permute(1, 0, 2).contiguous()
                             .to(torch.bfloat16))
        if device.type == "cuda":  # (values 0..15: a nibble shifted by 4 still fits a byte)
            packed = torch.ops.aten._convert_weight_to_int4pack(q[:, ::2] << 4 | q[:, 1::2], self.INNER_K_TILES)
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), self.INNER_K_TILES)
        self.register_buffer("weight", packed)
        self.register_buffer("bias", linear.bias.detach().float() if linear.bias is not None else None)

    def dequantized(self) -> torch.Tensor:
        """The float32 ``[out, in]`` weights this layer multiplies by (for tests and quality checks)."""
        eye = torch.eye(self.in_features, dtype=torch.bfloat16, device=self.weight.device)
        return self._mm(eye).float().T.contiguous()

    def _mm(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.device.type == "cuda":
            return torch.ops.aten._weight_int4pack_mm(x, self.weight, self.group_size, self.scales_and_zeros)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.weight, self.group_size, self.scales_and_zeros)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = self._mm(x.reshape(-1, shape[-1]).to(torch.bfloat16))
        y = y.view(*shape[:-1], self.out_features).to(x.dtype)
        return y + self.bias if self.bias is not None else y


#: ``weights=`` values: ``auto`` keeps the run dtype; the others quantize the text decoder's projections
#: and the lm_head weight-only.
QUANTIZED = {"int8": Int8Linear, "int4": Int4Linear}

#: Devices with kernels that read quantized weights: the CPU (ATen, the native step) and CUDA (Triton
#: for int8, ATen's int4pack for 4-bit). Int4Linear packs for one of these two layouts only.
QUANTIZED_DEVICES = ("cpu", "cuda")


def quantized_class(kind: str, device: torch.device) -> type[nn.Module]:
    """The layer class that holds ``kind`` (``int8`` / ``int4``) weights on ``device``.

    Raises:
        ValueError: an unknown ``kind``, or a device other than the CPU and CUDA (no kernel reads
            quantized weights there).
    """
    if kind not in QUANTIZED:
        raise ValueError(f"unknown weight format {kind!r} (use {' or '.join(QUANTIZED)})")
    if device.type not in QUANTIZED_DEVICES:
        raise ValueError(f"{kind} weight-only quantization runs on {' and '.join(QUANTIZED_DEVICES)}, not {device.type}")
    if kind == "int4" and device.type == "cpu":
        # Our own 4-bit blocks: the native CPU decode step streams them (ATen's int4pack CPU kernel
        # was slower than int8 here).
        from engine.layers.q4 import Q4Linear

        return Q4Linear
    return QUANTIZED[kind]


def load_class(weights: str | None, device: torch.device) -> type[nn.Module] | None:
    """The layer class a load with ``weights=`` gives the text projections on ``device``
    (:func:`quantized_class`), or ``None`` where they keep the float dtype: ``None``/``auto``, and a
    device no quantized kernel runs on (MPS: ignored, as ``engine.registry.load_model`` says).

    Raises:
        ValueError: an unknown ``weights`` value.
    """
    if weights in (None, "auto") or (weights in QUANTIZED and device.type not in QUANTIZED_DEVICES):
        return None
    return quantized_class(weights, device)


def head_class(layer_cls: type[nn.Module]) -> type[nn.Module]:
    """The class the lm_head gets beside decoder projections of ``layer_cls``: int8 under 4-bit
    projections (the CPU's blocks, CUDA's int4pack), else the same. The head decides every token among
    the whole vocabulary, and 4 bits there cost most of 4-bit's error: on the real SmolLM2-135M
    weights (perplexity, windows of 1024) int4 cost +5.6% on the CPU and +5.2% on CUDA with a 4-bit
    head, +0.24% / +0.12% with an int8 one, and a 4-bit head answered "What is the capital of France?"
    with "L'Étoile" where an int8 one says Paris (trial 71). llama.cpp's quantizer keeps
    ``output.weight`` above 4 bits for its 4-bit types the same way (Q6_K, ``llama_tensor_get_type``
    in ``src/llama-quant.cpp``)."""
    from engine.layers.q4 import Q4Linear

    return Int8Linear if layer_cls in (Q4Linear, Int4Linear) else layer_cls


def quantize_layer(layer: nn.Module, layer_cls: type[nn.Module]) -> None:
    """Replace, in place, the ``nn.Linear`` projections of one decoder ``layer`` (its ``self_attn`` and
    ``mlp``) by ``layer_cls`` layers made from them (:func:`quantized_class`); norms stay float."""
    for parent in (layer.self_attn, layer.mlp):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, layer_cls(child))


def quantize_weights(model: nn.Module, kind: str, inplace: bool = False) -> nn.Module:
    """The text decoder's projections and the lm_head of ``model`` (a model with ``decoder`` and
    ``lm_head``, :class:`~engine.models.llama.lm.LlamaLM`) as ``kind`` (``int8`` / ``int4``) layers.

    The vision tower and connector (compute-bound, run once per image) and the embedding table stay
    in floating point. With tied embeddings the lm_head gets its own quantized copy. A load quantizes
    layer by layer instead (``GenerativeModel.load(..., weights=)``), never holding the whole float
    decoder; this converts a model already loaded.

    Raises:
        ValueError: an unknown ``kind``, or a device other than the CPU and CUDA (no kernel reads
            quantized weights there).
    """
    layer_cls = quantized_class(kind, model.device)
    if not inplace:
        model = copy.deepcopy(model)
    for layer in model.decoder.layers:
        quantize_layer(layer, layer_cls)
    model.lm_head = head_class(layer_cls)(model.lm_head)
    model._static = None
    model._native = None
    if getattr(model, "_vision_graphs", None) is not None:
        model._vision_graphs = None  # its steps call the tower of the model it was made for
    return model


def quantize_int8(model: nn.Module, inplace: bool = False) -> nn.Module:
    """:func:`quantize_weights` with ``int8`` (CPU and CUDA)."""
    return quantize_weights(model, "int8", inplace)


def weight_format(model: nn.Module) -> str | None:
    """``int8`` / ``int4`` when :func:`quantize_weights` was applied to ``model``, else ``None``: the
    format of its decoder's projections (the lm_head may hold more bits: :func:`head_class`)."""
    from engine.layers.q4 import Q4Linear

    layers = getattr(getattr(model, "decoder", None), "layers", None)
    probe = getattr(layers[0].self_attn, "o_proj", None) if layers else getattr(model, "lm_head", None)
    if isinstance(probe, Q4Linear):
        return "int4"
    return next((kind for kind, cls in QUANTIZED.items() if isinstance(probe, cls)), None)


def is_quantized(model: nn.Module) -> bool:
    """Whether :func:`quantize_weights` was applied to ``model``."""
    return weight_format(model) is not None
