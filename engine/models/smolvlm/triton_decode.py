"""Fused Triton kernels for the batch-1 decode step of the Llama text decoder (5 kernels a layer).

Imported only by :class:`~engine.models.smolvlm.static_decode.StaticDecoder` when Triton is wanted
and importable (``SMOLCHAT_TRITON=0`` turns it off); nothing else in the engine imports Triton.

Why: at batch 1 the SmolVLM-256M decode step is bound by kernel count, not bandwidth (the weights
are ~0.33 GB a token, ~70 us on an H200, but the CUDA-graph step of ~518 small kernels took
1520 us). A layer here is five kernels instead of ~17:

1. :func:`qkv_rope_kernel`: RMSNorm of the residual (each program recomputes the row's rms of the
   ``hidden``-vector), the fused q/k/v GEMV, RoPE in the epilogue, and the new key/value written
   straight into the cache (contiguous ``[L, B, H_kv, T, D]`` or paged arena
   ``[2, L, num_blocks, block_size, H_kv, D]``, addressed by a slot index and two strides).
2. :func:`attn_split_kernel`: single-query grouped attention, split along the sequence
   (FlashDecoding, Dao et al. 2023; vLLM ``paged_attention_v2``): each program reads one chunk of
   one KV head's keys/values through a position -> row index (``arange`` for contiguous, the paged
   cache's gather index for paged), masked to ``pos``, with an fp32 online softmax (Milakov &
   Gimelshein 2018), and writes an unnormalised partial result.
3. :func:`oproj_kernel`: combines the partial results (the FlashDecoding reduction, recomputed by
   every program: it is a few KB from L2) and runs the o_proj GEMV plus the residual add.
4. :func:`norm_gate_up_kernel`: RMSNorm, the fused gate/up GEMV and ``silu(gate) * up``.
5. :func:`down_kernel`: down GEMV plus the residual add.

The GEMVs follow gpt-fast / vLLM's batch-1 recipe: one program per block of output rows, a loop
over the input dimension in ``BLOCK_K`` chunks with fp32 accumulation. Intermediate results are
rounded to the activation dtype where the eager path rounds them (linear outputs, the normed
input, the attention output), so bf16 results stay within rounding of the eager step. The final
norm and the ``lm_head`` GEMV (57 MB in bf16, bandwidth-bound) stay with PyTorch/cuBLAS.

All kernels read ``pos`` (and the write slot) from device tensors, so one CUDA graph per KV bucket
replays every step. The kernels also run under the Triton interpreter (``TRITON_INTERPRET=1``) on
CPU tensors, which is how the tests check them against the eager decode.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _rstd(x_ptr, eps, HIDDEN: tl.constexpr, BLOCK_K: tl.constexpr):
    """``rsqrt(mean(x**2) + eps)`` of ``x [HIDDEN]`` in fp32 (RMSNorm, Zhang & Sennrich 2019)."""
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in tl.static_range(0, HIDDEN, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs, mask=offs < HIDDEN, other=0.0).to(tl.float32)
        acc += x * x
    return 1.0 / tl.sqrt(tl.sum(acc, axis=0) / HIDDEN + eps)


@triton.jit
def qkv_rope_kernel(x_ptr, nw_ptr, w_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr,
                    q_ptr, k_ptr, v_ptr, stride_kv_pos, stride_kv_head, eps,
                    HIDDEN: tl.constexpr, H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """RMSNorm + qkv GEMV + RoPE + KV-cache write for one decode token.

    Grid ``(H + 2*H_kv, (D/2) / BLOCK_R)``: program ``(head, part)`` computes output rows
    ``head*D + part*BLOCK_R + [0, BLOCK_R)`` and the same rows ``+ D/2`` (the rotate-half partners,
    so RoPE needs no data from other programs).

    Args:
        x_ptr: residual ``[HIDDEN]`` (activation dtype); nw_ptr: input_layernorm weight ``[HIDDEN]``.
        w_ptr: fused ``qkv_proj.weight [(H + 2*H_kv) * D, HIDDEN]``, row-major.
        cos_ptr, sin_ptr: rotary tables ``[max_pos, D]`` (``sin`` with its first half negated, see
            :class:`~engine.models.layers.RotaryEmbedding`).
        pos_ptr: int64 ``[1]`` position; slot_ptr: int64 ``[1]`` cache row of that position (the
            position for a contiguous cache, ``slot_mapping`` for a paged one).
        q_ptr: output ``[H * D]`` (activation dtype), rotated queries.
        k_ptr, v_ptr: this layer's key/value cache; the row of head ``h`` at slot ``s`` starts at
            ``s * stride_kv_pos + h * stride_kv_head``.
    """
    head = tl.program_id(0)
    part = tl.program_id(1)
    HALF: tl.constexpr = D // 2
    dt = x_ptr.dtype.element_ty
    rstd = _rstd(x_ptr, eps, HIDDEN, BLOCK_K)
    r = part * BLOCK_R + tl.arange(0, BLOCK_R)
    rows_lo = head * D + r
    rows_hi = rows_lo + HALF
    acc_lo = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float32)
    acc_hi = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float32)
    for k0 in tl.static_range(0, HIDDEN, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        km = offs < HIDDEN
        x = tl.load(x_ptr + offs, mask=km, other=0.0).to(tl.float32)
        nw = tl.load(nw_ptr + offs, mask=km, other=0.0).to(tl.float32)
        xn = (x * rstd * nw).to(dt).to(tl.float32)[None, :]
        w_lo = tl.load(w_ptr + rows_lo[:, None] * HIDDEN + offs[None, :], mask=km[None, :], other=0.0)
        w_hi = tl.load(w_ptr + rows_hi[:, None] * HIDDEN + offs[None, :], mask=km[None, :], other=0.0)
        acc_lo += w_lo.to(tl.float32) * xn
        acc_hi += w_hi.to(tl.float32) * xn
    lo = tl.sum(acc_lo, axis=1).to(dt).to(tl.float32)
    hi = tl.sum(acc_hi, axis=1).to(dt).to(tl.float32)
    if head < H + HKV:  # queries and keys are rotated: x*cos + rotate_half(x)*sin
        p = tl.load(pos_ptr)
        c_lo = tl.load(cos_ptr + p * D + r).to(tl.float32)
        c_hi = tl.load(cos_ptr + p * D + HALF + r).to(tl.float32)
        s_lo = tl.load(sin_ptr + p * D + r).to(tl.float32)
        s_hi = tl.load(sin_ptr + p * D + HALF + r).to(tl.float32)
        lo, hi = lo * c_lo + hi * s_lo, hi * c_hi + lo * s_hi
    if head < H:
        tl.store(q_ptr + head * D + r, lo.to(dt))
        tl.store(q_ptr + head * D + HALF + r, hi.to(dt))
    else:
        slot = tl.load(slot_ptr)
        if head < H + HKV:
            base = k_ptr + slot * stride_kv_pos + (head - H) * stride_kv_head
        else:
            base = v_ptr + slot * stride_kv_pos + (head - H - HKV) * stride_kv_head
        tl.store(base + r, lo.to(dt))
        tl.store(base + HALF + r, hi.to(dt))


@triton.jit
def attn_split_kernel(q_ptr, k_ptr, v_ptr, idx_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr,
                      stride_kv_pos, stride_kv_head, chunk, scale,
                      H: tl.constexpr, D: tl.constexpr, G: tl.constexpr, GP: tl.constexpr,
                      BLOCK_T: tl.constexpr):
    """One chunk of single-query attention for the ``G`` query heads of one KV head.

    Grid ``(H_kv, num_splits)``: program ``(kvh, s)`` covers positions ``[s*chunk, (s+1)*chunk)``
    clipped to ``<= pos`` (a chunk wholly past ``pos`` writes ``m = -inf, l = 0, acc = 0``).

    Args:
        q_ptr: rotated queries ``[H * D]``; query head ``kvh*G + g`` uses KV head ``kvh``.
        k_ptr, v_ptr: this layer's cache (see :func:`qkv_rope_kernel` for the strides).
        idx_ptr: int64 ``[>= pos+1]``, cache row of each position (``arange`` or the paged gather).
        m_ptr, l_ptr: fp32 ``[num_splits, H]`` running max (of ``q.k * scale``) and softmax sum.
        acc_ptr: fp32 ``[num_splits, H, D]`` unnormalised ``sum(exp(score - m) * v)``.
    """
    kvh = tl.program_id(0)
    split = tl.program_id(1)
    p = tl.load(pos_ptr).to(tl.int32)
    g = tl.arange(0, GP)
    gm = g < G
    d = tl.arange(0, D)
    heads = kvh * G + g
    q = tl.load(q_ptr + heads[:, None] * D + d[None, :], mask=gm[:, None], other=0.0).to(tl.float32)
    q = q * scale
    m = tl.full([GP], float("-inf"), dtype=tl.float32)
    l = tl.zeros([GP], dtype=tl.float32)
    acc = tl.zeros([GP, D], dtype=tl.float32)
    start = split * chunk
    end = tl.minimum(start + chunk, p + 1)
    kbase = k_ptr + kvh * stride_kv_head
    vbase = v_ptr + kvh * stride_kv_head
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        tm = t < end
        rows = tl.load(idx_ptr + t, mask=tm, other=0)
        off = rows[:, None] * stride_kv_pos + d[None, :]
        k = tl.load(kbase + off, mask=tm[:, None], other=0.0).to(tl.float32)  # [BLOCK_T, D]
        v = tl.load(vbase + off, mask=tm[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [GP, BLOCK_T]
        s = tl.where(tm[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: every tile visited holds a position <= pos
        alpha = tl.exp(m - m_new)
        pr = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(pr, axis=1)
        acc = acc * alpha[:, None] + tl.sum(pr[:, :, None] * v[None, :, :], axis=1)
        m = m_new
    o = split * H + heads
    tl.store(m_ptr + o, m, mask=gm)
    tl.store(l_ptr + o, l, mask=gm)
    tl.store(acc_ptr + o[:, None] * D + d[None, :], acc, mask=gm[:, None])


@triton.jit
def oproj_kernel(m_ptr, l_ptr, acc_ptr, num_splits, w_ptr, res_ptr, out_ptr,
                 HIDDEN: tl.constexpr, H: tl.constexpr, D: tl.constexpr, SP: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    """FlashDecoding combine + o_proj GEMV + residual: ``out = res + o_proj(attention)``.

    Grid ``(HIDDEN / BLOCK_N,)``. Every program merges the ``num_splits <= SP`` partial results of
    :func:`attn_split_kernel` for all ``H`` heads (one vector load a head, no loop-carried chain;
    split 0 always holds position 0, so the max is finite and empty splits get weight 0), rounds
    each head's output to the activation dtype, and multiplies it into its ``BLOCK_N`` rows of
    ``o_proj.weight [HIDDEN, H*D]``. ``res_ptr``/``out_ptr`` ``[HIDDEN]`` may be the same buffer:
    a program reads and writes only its own rows.
    """
    pid = tl.program_id(0)
    dt = out_ptr.dtype.element_ty
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = n < HIDDEN
    d = tl.arange(0, D)
    s = tl.arange(0, SP)
    sm = s < num_splits
    acc = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    for h in tl.static_range(H):
        ms = tl.load(m_ptr + s * H + h, mask=sm, other=float("-inf"))
        wts = tl.exp(ms - tl.max(ms, axis=0))
        lsum = tl.sum(tl.load(l_ptr + s * H + h, mask=sm, other=0.0) * wts, axis=0)
        part = tl.load(acc_ptr + (s * H + h)[:, None] * D + d[None, :], mask=sm[:, None], other=0.0)
        o = (tl.sum(part * wts[:, None], axis=0) / lsum).to(dt).to(tl.float32)
        w = tl.load(w_ptr + n[:, None] * (H * D) + h * D + d[None, :], mask=nm[:, None], other=0.0)
        acc += w.to(tl.float32) * o[None, :]
    y = tl.sum(acc, axis=1).to(dt).to(tl.float32)
    r = tl.load(res_ptr + n, mask=nm, other=0.0).to(tl.float32)
    tl.store(out_ptr + n, (r + y).to(dt), mask=nm)


@triton.jit
def norm_gate_up_kernel(x_ptr, nw_ptr, w_ptr, out_ptr, eps,
                        HIDDEN: tl.constexpr, INTER: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """RMSNorm + fused gate/up GEMV + ``silu(gate) * up`` (SwiGLU, Shazeer 2020).

    Grid ``(INTER / BLOCK_N,)``. ``x [HIDDEN]``, ``nw [HIDDEN]`` (post_attention_layernorm),
    ``w = gate_up.weight [2*INTER, HIDDEN]`` (gate rows first), ``out [INTER]`` (activation dtype).
    """
    pid = tl.program_id(0)
    dt = x_ptr.dtype.element_ty
    rstd = _rstd(x_ptr, eps, HIDDEN, BLOCK_K)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = n < INTER
    acc_g = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in tl.static_range(0, HIDDEN, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        km = offs < HIDDEN
        x = tl.load(x_ptr + offs, mask=km, other=0.0).to(tl.float32)
        nw = tl.load(nw_ptr + offs, mask=km, other=0.0).to(tl.float32)
        xn = (x * rstd * nw).to(dt).to(tl.float32)[None, :]
        mk = nm[:, None] & km[None, :]
        wg = tl.load(w_ptr + n[:, None] * HIDDEN + offs[None, :], mask=mk, other=0.0)
        wu = tl.load(w_ptr + (n + INTER)[:, None] * HIDDEN + offs[None, :], mask=mk, other=0.0)
        acc_g += wg.to(tl.float32) * xn
        acc_u += wu.to(tl.float32) * xn
    gate = tl.sum(acc_g, axis=1).to(dt).to(tl.float32)
    up = tl.sum(acc_u, axis=1).to(dt).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(dt).to(tl.float32)
    tl.store(out_ptr + n, (act * up).to(dt), mask=nm)


@triton.jit
def down_kernel(h_ptr, w_ptr, x_ptr, HIDDEN: tl.constexpr, INTER: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """down GEMV + residual, in place: ``x[n] += down_proj.weight[n] @ h``.

    Grid ``(HIDDEN / BLOCK_N,)``. ``h [INTER]``, ``w [HIDDEN, INTER]``, ``x [HIDDEN]`` (activation
    dtype; each program reads and writes only its own rows of ``x``).
    """
    pid = tl.program_id(0)
    dt = x_ptr.dtype.element_ty
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = n < HIDDEN
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in tl.static_range(0, INTER, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        km = offs < INTER
        hv = tl.load(h_ptr + offs, mask=km, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + n[:, None] * INTER + offs[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        acc += w.to(tl.float32) * hv[None, :]
    y = tl.sum(acc, axis=1).to(dt).to(tl.float32)
    r = tl.load(x_ptr + n, mask=nm, other=0.0).to(tl.float32)
    tl.store(x_ptr + n, (r + y).to(dt), mask=nm)


#: Launch parameters; :func:`TritonStep.configure` overrides them (the GPU bench sweeps a few).
DEFAULT_CONFIG = {
    "qkv_block_r": 16, "qkv_block_k": 64, "qkv_warps": 4,
    "attn_block_t": 32, "attn_min_chunk": 64, "attn_max_splits": 32, "attn_warps": 4,
    "o_block_n": 16, "o_warps": 4,
    "gu_block_n": 16, "gu_block_k": 64, "gu_warps": 4,
    "down_block_n": 8, "down_block_k": 256, "down_warps": 4,
}


class TritonStep:
    """The decode step of :class:`StaticDecoder` as 5 Triton kernels a layer (+ final norm, lm_head).

    Holds static scratch buffers (so the step can be captured in a CUDA graph): ``q [H*D]``,
    ``m, l [max_splits, H]`` and ``acc [max_splits, H, D]`` (fp32 split-attention partials),
    ``mlp [I]``, and the residual ``res [hidden]``.
    """

    def __init__(self, decoder, config: dict | None = None):
        self.dec = decoder
        model = decoder.model
        text = model.model.text_model
        cfg = text.config
        dev, dt = model.device, model.dtype
        self.cfg = dict(DEFAULT_CONFIG, **(config or {}))
        self.hidden, self.inter = cfg.hidden_size, cfg.intermediate_size
        self.h, self.hkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = float(cfg.rms_norm_eps)
        if self.d & (self.d - 1) or self.h % self.hkv:
            raise ValueError("Triton decode needs a power-of-two head_dim and H divisible by H_kv")
        self.layers = []
        for layer in text.layers:
            attn, mlp = layer.self_attn, layer.mlp
            if attn.qkv_proj is None or mlp.gate_up is None or attn.qkv_proj.bias is not None:
                raise ValueError("Triton decode needs fused, bias-free q/k/v and gate/up projections")
            self.layers.append((layer.input_layernorm.weight, attn.qkv_proj.weight, attn.o_proj.weight,
                                layer.post_attention_layernorm.weight, mlp.gate_up.weight,
                                mlp.down_proj.weight))
        ms = self.cfg["attn_max_splits"]
        self.q = torch.zeros(self.h * self.d, device=dev, dtype=dt)
        self.m = torch.zeros(ms, self.h, device=dev, dtype=torch.float32)
        self.l = torch.zeros(ms, self.h, device=dev, dtype=torch.float32)
        self.acc = torch.zeros(ms, self.h, self.d, device=dev, dtype=torch.float32)
        self.mlp = torch.zeros(self.inter, device=dev, dtype=dt)
        self.res = torch.zeros(self.hidden, device=dev, dtype=dt)

    def configure(self, **overrides) -> None:
        self.cfg.update(overrides)
        if self.cfg["attn_max_splits"] > self.m.shape[0]:
            ms, dev = self.cfg["attn_max_splits"], self.m.device
            self.m = torch.zeros(ms, self.h, device=dev, dtype=torch.float32)
            self.l = torch.zeros(ms, self.h, device=dev, dtype=torch.float32)
            self.acc = torch.zeros(ms, self.h, self.d, device=dev, dtype=torch.float32)

    def splits(self, bucket: int) -> tuple[int, int]:
        """``(num_splits, chunk)`` for a KV bucket: chunks of at least ``attn_min_chunk`` positions,
        a multiple of ``attn_block_t``, at most ``attn_max_splits`` of them."""
        c = self.cfg
        n = max(1, min(c["attn_max_splits"], math.ceil(bucket / c["attn_min_chunk"])))
        bt = c["attn_block_t"]
        chunk = math.ceil(math.ceil(bucket / n) / bt) * bt
        return math.ceil(bucket / chunk), chunk

    def __call__(self, kv: tuple[torch.Tensor, ...], bucket: int) -> torch.Tensor:
        """``decoder.x [1, 1, hidden]`` at ``decoder.pos`` -> logits ``[1, V]``; writes k/v at ``pos``."""
        dec, c = self.dec, self.cfg
        h, hkv, d, hidden, inter = self.h, self.hkv, self.d, self.hidden, self.inter
        if len(kv) == 2:  # contiguous [L, B, H_kv, T, D]
            kc, vc = kv
            caches = [(kc[i, 0], vc[i, 0]) for i in range(len(self.layers))]
            stride_pos, stride_head = kc.stride(3), kc.stride(2)
            slot, idx = dec.pos, dec.slots
        else:  # paged [2, L, num_blocks, block_size, H_kv, D]
            arena = kv[0]
            caches = [(arena[0, i], arena[1, i]) for i in range(len(self.layers))]
            stride_pos, stride_head = arena.stride(3), arena.stride(4)
            slot, idx = dec.write_slot, dec.gather
        num_splits, chunk = self.splits(bucket)
        g = h // hkv
        gp = triton.next_power_of_2(g)
        scale = d ** -0.5
        br = min(c["qkv_block_r"], d // 2)
        x_in = dec.x.view(-1)
        res = self.res
        for i, (nw1, w_qkv, w_o, nw2, w_gu, w_down) in enumerate(self.layers):
            kcache, vcache = caches[i]
            x = x_in if i == 0 else res
            qkv_rope_kernel[(h + 2 * hkv, (d // 2) // br)](
                x, nw1, w_qkv, dec.cos, dec.sin, dec.pos, slot, self.q, kcache, vcache,
                stride_pos, stride_head, self.eps,
                HIDDEN=hidden, H=h, HKV=hkv, D=d, BLOCK_R=br, BLOCK_K=c["qkv_block_k"], num_warps=c["qkv_warps"])
            attn_split_kernel[(hkv, num_splits)](
                self.q, kcache, vcache, idx, dec.pos, self.m, self.l, self.acc,
                stride_pos, stride_head, chunk, scale,
                H=h, D=d, G=g, GP=gp, BLOCK_T=c["attn_block_t"], num_warps=c["attn_warps"])
            bn = c["o_block_n"]
            oproj_kernel[(triton.cdiv(hidden, bn),)](
                self.m, self.l, self.acc, num_splits, w_o, x, res,
                HIDDEN=hidden, H=h, D=d, SP=triton.next_power_of_2(num_splits), BLOCK_N=bn, num_warps=c["o_warps"])
            bn = c["gu_block_n"]
            norm_gate_up_kernel[(triton.cdiv(inter, bn),)](
                res, nw2, w_gu, self.mlp, self.eps,
                HIDDEN=hidden, INTER=inter, BLOCK_N=bn, BLOCK_K=c["gu_block_k"], num_warps=c["gu_warps"])
            bn = c["down_block_n"]
            down_kernel[(triton.cdiv(hidden, bn),)](
                self.mlp, w_down, res,
                HIDDEN=hidden, INTER=inter, BLOCK_N=bn, BLOCK_K=c["down_block_k"], num_warps=c["down_warps"])
        text = dec.model.model.text_model
        return dec.model.lm_head(text.norm(res.view(1, 1, hidden))[:, -1])
