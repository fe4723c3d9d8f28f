"""Fused Triton kernels for the batch-1 decode step of the Llama text decoder (6 kernels a layer).

Imported only by :class:`~engine.models.llama.static_decode.StaticDecoder` when Triton is wanted
and importable (``SMOLCHAT_TRITON=0`` turns it off); nothing else in the engine imports Triton.

Why: at batch 1 the SmolVLM-256M decode step is bound by the latency of its chain of dependent
kernels, not bandwidth (the weights are ~0.33 GB a token, ~70 us on an H200, but the CUDA-graph
step of ~518 small kernels took 1520 us). A layer here is six kernels instead of ~17:

1. :func:`qkv_rope_kernel`: RMSNorm of the residual (each program recomputes the row's rms of the
   ``hidden``-vector), the fused q/k/v GEMV, RoPE in the epilogue, and the new key/value written
   straight into the cache (contiguous ``[L, B, H_kv, T, D]`` or paged arena
   ``[2, L, num_blocks, block_size, H_kv, D]``, addressed by a slot index and two strides).
2. :func:`attn_kernel`: single-query grouped attention, split along the sequence (FlashDecoding,
   Dao et al. 2023; vLLM ``paged_attention_v2`` and its Triton ``decode_attention``): each program
   reads one chunk of one KV head's keys/values through a position -> row index (``arange`` for
   contiguous, the paged cache's gather index for paged), masked to ``pos``, with an fp32 online
   softmax (Milakov & Gimelshein 2018). The ``G = H/H_kv`` query heads of the KV head are the rows
   of two ``tl.dot`` (padded to 16 rows, tensor cores). Each chunk writes its partial result.
2b. :func:`rows_attn_merge_kernel` merges the chunks, one program a head. (``attn_merge_kernel=
   False``: the last program of a KV head to finish merges them instead, found by an atomic
   counter, the split-K "serial reduction" pattern. One kernel fewer, but on the H200 the
   counter's fence, atomic and re-read of the partials on the step's critical path cost ~3.7 us a
   layer against ~1.5 us for the extra kernel: 396 against 324-334 us a step for the 256M.)
3. :func:`gemv_residual_kernel` for o_proj: GEMV plus the residual add.
4. :func:`norm_gate_up_kernel`: RMSNorm, the fused gate/up GEMV and ``silu(gate) * up``.
5. :func:`gemv_residual_kernel` for down: GEMV plus the residual add.

The GEMVs follow gpt-fast / vLLM's batch-1 recipe: one program per block of output rows, fp32
accumulation. Each program loads its whole weight rows as two register tiles (``K`` split into a
power-of-two part and a power-of-two-padded tail, e.g. 576 = 512 + 64) before anything that depends
on the previous kernel. With programmatic dependent launch (PDL, Hopper; ``launch_pdl=True``,
``gdc_launch_dependents``/``gdc_wait``, as in SGLang/vLLM Triton kernels) the next kernel is
launched while the current one runs and streams its weights in while it waits, hiding most of the
per-kernel launch latency. Everything that reads another kernel's output, and every store, comes
after ``gdc_wait``, which waits for the previous kernel to complete (and so, transitively, for all
earlier ones). With ``early_loads`` (the default) the kernels also read before the wait what no
kernel of the step writes: the position and write slot (set before the step, or by the previous
step's last kernel, which completed before this step's first kernel, launched without PDL, began),
the rotary rows, and the attention chunk's first tile of keys/values before the position (written
by earlier steps); after the wait only the previous kernel's outputs remain to be read, together
(the GEMV's input and its residual). Each dependent read after the wait is a memory round trip on
the step's critical path: 396 against 435 us a step on the H200 (256M, before the merge kernel).
Intermediate results are rounded to the activation dtype where the eager path rounds them (linear
outputs, the normed input, the attention output), so bf16 results stay within rounding of the eager
step. The token step (greedy, its argmax fed back on the device) ends with
:func:`head_argmax_kernel`: final norm, ``lm_head`` GEMV (57 MB in bf16, its rows read before the
wait) and argmax in one kernel instead of three (``fused_head``; 392 against 396 us, 2.2B 1,132 against
1,154). A step whose logits are sampled on the host keeps PyTorch's norm and cuBLAS's ``lm_head``.

All kernels read ``pos`` (and the write slot) from device tensors, so one CUDA graph per KV bucket
replays every step. The kernels also run under the Triton interpreter (``TRITON_INTERPRET=1``) on
CPU tensors, which is how the tests check them against the eager decode.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from engine.layers.linear import Int8Linear

try:  # Programmatic dependent launch intrinsics (Triton >= 3.5, NVIDIA Hopper and later).
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_PDL = True
except Exception:  # noqa: BLE001
    HAS_PDL = False

    @triton.jit
    def gdc_wait():
        pass

    @triton.jit
    def gdc_launch_dependents():
        pass


@triton.jit
def _load_rows(w_ptr, rows, rmask, K: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr):
    """Rows ``rows`` of a row-major ``[*, K]`` weight as two tiles: columns ``[0, KM)`` and
    ``[KM, KM + KT)`` (masked to ``K``; with ``KT == 0`` the second is the first, unused)."""
    a = tl.load(w_ptr + rows[:, None] * K + tl.arange(0, KM)[None, :], mask=rmask[:, None], other=0.0)
    if KT > 0:
        t = KM + tl.arange(0, KT)
        b = tl.load(w_ptr + rows[:, None] * K + t[None, :], mask=rmask[:, None] & (t < K)[None, :], other=0.0)
    else:
        b = a
    return a, b


@triton.jit
def _load_vec(ptr, K: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr):
    """``ptr[0:K]`` in fp32 as the two parts matching :func:`_load_rows`."""
    a = tl.load(ptr + tl.arange(0, KM)).to(tl.float32)
    if KT > 0:
        t = KM + tl.arange(0, KT)
        b = tl.load(ptr + t, mask=t < K, other=0.0).to(tl.float32)
    else:
        b = a
    return a, b


@triton.jit
def _dot_rows(wa, wb, xa, xb, KT: tl.constexpr):
    """``W @ x`` in fp32 from the tiles of :func:`_load_rows` and :func:`_load_vec`."""
    y = tl.sum(wa.to(tl.float32) * xa[None, :], axis=1)
    if KT > 0:
        y += tl.sum(wb.to(tl.float32) * xb[None, :], axis=1)
    return y


@triton.jit
def _row_scales(s_ptr, rows, rmask):
    """The int8 weights' per-row scales ``s[rows]`` (``[len(rows)]`` fp32; 0 on masked rows)."""
    return tl.load(s_ptr + rows, mask=rmask, other=0.0).to(tl.float32)


@triton.jit
def _rms_normed(x_ptr, nwa, nwb, eps, K: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr):
    """RMSNorm (Zhang & Sennrich 2019) of ``x [K]``: ``x * rsqrt(mean(x**2) + eps) * weight`` in fp32,
    rounded to ``x``'s dtype like ``F.rms_norm``'s output; returned as two fp32 parts."""
    dt = x_ptr.dtype.element_ty
    xa, xb = _load_vec(x_ptr, K, KM, KT)
    ss = tl.sum(xa * xa, axis=0)
    if KT > 0:
        ss += tl.sum(xb * xb, axis=0)
    rstd = 1.0 / tl.sqrt(ss / K + eps)
    return (xa * rstd * nwa).to(dt).to(tl.float32), (xb * rstd * nwb).to(dt).to(tl.float32)


@triton.jit
def _rotary_rows(cos_ptr, sin_ptr, pos_ptr, r, D: tl.constexpr):
    """Columns ``r`` and ``r + D/2`` of the rotary tables' row at the position: ``(cos_lo, cos_hi,
    sin_lo, sin_hi)`` in fp32."""
    p = tl.load(pos_ptr)
    HALF: tl.constexpr = D // 2
    return (tl.load(cos_ptr + p * D + r).to(tl.float32), tl.load(cos_ptr + p * D + HALF + r).to(tl.float32),
            tl.load(sin_ptr + p * D + r).to(tl.float32), tl.load(sin_ptr + p * D + HALF + r).to(tl.float32))


@triton.jit
def qkv_rope_kernel(x_ptr, nw_ptr, w_ptr, s_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr,
                    q_ptr, k_ptr, v_ptr, stride_kv_pos, stride_kv_head, eps,
                    HIDDEN: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr,
                    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                    BLOCK_R: tl.constexpr, EARLY: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    """RMSNorm + qkv GEMV + RoPE + KV-cache write for one decode token.

    Grid ``(H + 2*H_kv, (D/2) / BLOCK_R)``: program ``(head, part)`` computes output rows
    ``head*D + part*BLOCK_R + [0, BLOCK_R)`` and the same rows ``+ D/2`` (the rotate-half partners,
    so RoPE needs no data from other programs).

    Args:
        x_ptr: residual ``[HIDDEN]`` (activation dtype); nw_ptr: input_layernorm weight ``[HIDDEN]``.
        w_ptr: fused ``qkv_proj.weight [(H + 2*H_kv) * D, HIDDEN]``, row-major.
        s_ptr: with ``SCALED``, ``w`` is int8 and ``s [(H + 2*H_kv) * D]`` its per-row scales
            (:class:`~engine.layers.linear.Int8Linear`); otherwise unused.
        cos_ptr, sin_ptr: rotary tables ``[max_pos, D]`` (``sin`` with its first half negated, see
            :class:`~engine.layers.RotaryEmbedding`).
        pos_ptr: int64 ``[1]`` position; slot_ptr: int64 ``[1]`` cache row of that position (the
            position for a contiguous cache, ``slot_mapping`` for a paged one).
        q_ptr: output ``[H * D]`` (activation dtype), rotated queries.
        k_ptr, v_ptr: this layer's key/value cache; the row of head ``h`` at slot ``s`` starts at
            ``s * stride_kv_pos + h * stride_kv_head``.
        KM, KT: ``HIDDEN`` split for :func:`_load_rows`.
        EARLY: read the position, its rotary rows and the write slot before ``gdc_wait`` (see the
            module docstring: no kernel of a step writes them), off the path after the wait.
    """
    head = tl.program_id(0)
    part = tl.program_id(1)
    if PDL:
        gdc_launch_dependents()
    HALF: tl.constexpr = D // 2
    dt = x_ptr.dtype.element_ty
    r = part * BLOCK_R + tl.arange(0, BLOCK_R)
    rm = r < HALF
    rows_lo = head * D + r
    wla, wlb = _load_rows(w_ptr, rows_lo, rm, HIDDEN, KM, KT)
    wha, whb = _load_rows(w_ptr, rows_lo + HALF, rm, HIDDEN, KM, KT)
    nwa, nwb = _load_vec(nw_ptr, HIDDEN, KM, KT)
    if SCALED:
        sl = _row_scales(s_ptr, rows_lo, rm)
        sh = _row_scales(s_ptr, rows_lo + HALF, rm)
    if EARLY:
        c_lo, c_hi, s_lo, s_hi = _rotary_rows(cos_ptr, sin_ptr, pos_ptr, r, D)
        slot = tl.load(slot_ptr)
    if PDL:
        gdc_wait()
    xa, xb = _rms_normed(x_ptr, nwa, nwb, eps, HIDDEN, KM, KT)
    lo = _dot_rows(wla, wlb, xa, xb, KT)
    hi = _dot_rows(wha, whb, xa, xb, KT)
    if SCALED:
        lo, hi = lo * sl, hi * sh
    lo = lo.to(dt).to(tl.float32)
    hi = hi.to(dt).to(tl.float32)
    if head < H + HKV:  # queries and keys are rotated: x*cos + rotate_half(x)*sin
        if not EARLY:
            c_lo, c_hi, s_lo, s_hi = _rotary_rows(cos_ptr, sin_ptr, pos_ptr, r, D)
        lo, hi = lo * c_lo + hi * s_lo, hi * c_hi + lo * s_hi
    if head < H:
        tl.store(q_ptr + head * D + r, lo.to(dt))
        tl.store(q_ptr + head * D + HALF + r, hi.to(dt))
    else:
        if not EARLY:
            slot = tl.load(slot_ptr)
        if head < H + HKV:
            base = k_ptr + slot * stride_kv_pos + (head - H) * stride_kv_head
        else:
            base = v_ptr + slot * stride_kv_pos + (head - H - HKV) * stride_kv_head
        tl.store(base + r, lo.to(dt))
        tl.store(base + HALF + r, hi.to(dt))


@triton.jit
def _kv_tile(kbase, vbase, idx_ptr, t0, end, stride_kv_pos, d, BLOCK_T: tl.constexpr):
    """One tile of a KV head's cache for the attention kernels: positions ``t = t0 + [0, BLOCK_T)``,
    the mask ``t < end``, and their keys and values ``[BLOCK_T, D]`` (zeros past ``end``), each
    position's row looked up in ``idx_ptr`` (contiguous or paged)."""
    t = t0 + tl.arange(0, BLOCK_T)
    tm = t < end
    rows = tl.load(idx_ptr + t, mask=tm, other=0)
    off = rows[:, None] * stride_kv_pos + d[None, :]
    k = tl.load(kbase + off, mask=tm[:, None], other=0.0)
    v = tl.load(vbase + off, mask=tm[:, None], other=0.0)
    return t, tm, k, v


@triton.jit
def attn_kernel(q_ptr, k_ptr, v_ptr, idx_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, cnt_ptr, o_ptr,
                stride_kv_pos, stride_kv_head, chunk, num_splits, scale,
                H: tl.constexpr, D: tl.constexpr, G: tl.constexpr, GP: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, SP: tl.constexpr,
                PREC: tl.constexpr, EARLY: tl.constexpr, PDL: tl.constexpr,
                MERGE: tl.constexpr = True):
    """Single-query attention of the ``G`` query heads of one KV head over one chunk of positions.
    With several chunks each writes its partial result; ``MERGE``: the last program of the KV head
    to finish merges them into ``o`` (else :func:`rows_attn_merge_kernel` does, as a kernel).

    Grid ``(H_kv, num_splits)``: program ``(kvh, s)`` covers positions ``[s*chunk, (s+1)*chunk)``
    clipped to ``<= pos`` (a chunk wholly past ``pos`` yields ``m = -inf, l = 0, acc = 0``).

    Args:
        q_ptr: rotated queries ``[H * D]``; query head ``kvh*G + g`` uses KV head ``kvh``.
        k_ptr, v_ptr: this layer's cache (see :func:`qkv_rope_kernel` for the strides).
        idx_ptr: int64 ``[>= pos+1]``, cache row of each position (``arange`` or the paged gather).
        m_ptr, l_ptr: fp32 ``[SP, H]`` scratch, each chunk's max score and softmax sum.
        acc_ptr: fp32 ``[SP, H, D]`` scratch, unnormalised ``sum(exp(score - m) * v)``.
        cnt_ptr: int32 ``[H_kv]`` zeros; counts finished chunks, put back to 0 by the last one
            (``MERGE`` only).
        o_ptr: output ``[H * D]`` (activation dtype), softmax(q.K * scale) V.
        BLOCK_H: rows of the ``tl.dot`` (>= 16 and >= G; rows past G are zero queries).
        GP: power of two >= G (the merge); SP: power of two >= num_splits.
        PREC: ``tl.dot`` input precision ("ieee" for fp32 models, exact like the eager path).
        EARLY: read the chunk's first tile of positions before ``pos`` (and their cache rows)
            before ``gdc_wait``: earlier steps wrote them, so they stream in while the qkv kernel
            that writes position ``pos`` finishes; ``pos``'s own row is read after the wait.
    """
    kvh = tl.program_id(0)
    split = tl.program_id(1)
    if PDL:
        gdc_launch_dependents()
    dt = o_ptr.dtype.element_ty
    g = tl.arange(0, BLOCK_H)
    gm = g < G
    d = tl.arange(0, D)
    heads = kvh * G + g
    m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D], dtype=tl.float32)
    kbase = k_ptr + kvh * stride_kv_head
    vbase = v_ptr + kvh * stride_kv_head
    start = split * chunk
    if EARLY:
        p = tl.load(pos_ptr).to(tl.int32)
        end = tl.minimum(start + chunk, p + 1)
        t = start + tl.arange(0, BLOCK_T)
        tm = t < end
        off = tl.load(idx_ptr + t, mask=tm, other=0)[:, None] * stride_kv_pos + d[None, :]
        old = (tm & (t < p))[:, None]
        k = tl.load(kbase + off, mask=old, other=0.0)
        v = tl.load(vbase + off, mask=old, other=0.0)
        if PDL:
            gdc_wait()
        q = tl.load(q_ptr + heads[:, None] * D + d[None, :], mask=gm[:, None], other=0.0)
        new = (tm & (t == p))[:, None]  # written by this step's qkv kernel: read after the wait
        k = tl.where(new, tl.load(kbase + off, mask=new, other=0.0), k)
        v = tl.where(new, tl.load(vbase + off, mask=new, other=0.0), v)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale
        s = tl.where(tm[None, :], s, float("-inf"))
        m = tl.max(s, axis=1)
        m_ok = tl.where(m == float("-inf"), 0.0, m)  # a chunk wholly past pos: nothing here
        pr = tl.exp(s - m_ok[:, None])
        l = tl.sum(pr, axis=1)
        acc = tl.dot(pr.to(v.dtype), v, input_precision=PREC)
        first = start + BLOCK_T
    else:
        if PDL:
            gdc_wait()
        p = tl.load(pos_ptr).to(tl.int32)
        end = tl.minimum(start + chunk, p + 1)
        q = tl.load(q_ptr + heads[:, None] * D + d[None, :], mask=gm[:, None], other=0.0)
        first = start
    for t0 in range(first, end, BLOCK_T):
        _, tm, k, v = _kv_tile(kbase, vbase, idx_ptr, t0, end, stride_kv_pos, d, BLOCK_T)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [BLOCK_H, BLOCK_T] fp32
        s = tl.where(tm[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: every tile visited holds a position <= pos
        alpha = tl.exp(m - m_new)
        pr = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(pr, axis=1)
        acc = acc * alpha[:, None] + tl.dot(pr.to(v.dtype), v, input_precision=PREC)
        m = m_new
    if num_splits == 1:
        tl.store(o_ptr + heads[:, None] * D + d[None, :], (acc / l[:, None]).to(dt), mask=gm[:, None])
    else:
        row = split * H + heads
        tl.store(m_ptr + row, m, mask=gm)
        tl.store(l_ptr + row, l, mask=gm)
        tl.store(acc_ptr + row[:, None] * D + d[None, :], acc, mask=gm[:, None])
        if MERGE:
            tl.debug_barrier()  # all threads' partials are stored before the (release) increment
            done = tl.atomic_add(cnt_ptr + kvh, 1)
        else:  # rows_attn_merge_kernel merges them
            done = -1
        if done == num_splits - 1:  # the last chunk of this KV head merges all of them
            sp = tl.arange(0, SP)
            gg = tl.arange(0, GP)
            ggm = gg < G
            hh = kvh * G + gg
            pm = (sp < num_splits)[:, None] & ggm[None, :]
            prow = sp[:, None] * H + hh[None, :]  # [SP, GP]
            ms = tl.load(m_ptr + prow, mask=pm, other=float("-inf"), cache_modifier=".cg")
            mx = tl.where(ggm, tl.max(ms, axis=0), 0.0)  # split 0 holds position 0: finite
            w = tl.exp(ms - mx[None, :])  # empty or masked chunks: exp(-inf) = 0
            lsum = tl.sum(tl.load(l_ptr + prow, mask=pm, other=0.0, cache_modifier=".cg") * w, axis=0)
            part = tl.load(acc_ptr + prow[:, :, None] * D + d[None, None, :], mask=pm[:, :, None], other=0.0,
                           cache_modifier=".cg")  # [SP, GP, D]
            o = tl.sum(part * w[:, :, None], axis=0) / tl.where(ggm, lsum, 1.0)[:, None]
            tl.store(o_ptr + hh[:, None] * D + d[None, :], o.to(dt), mask=ggm[:, None])
            tl.atomic_xchg(cnt_ptr + kvh, 0)


@triton.jit
def gemv_residual_kernel(v_ptr, w_ptr, s_ptr, res_ptr, out_ptr,
                         N: tl.constexpr, K: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr,
                         BLOCK_N: tl.constexpr, EARLY: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    """GEMV + residual: ``out[n] = res[n] + (W @ v)[n]`` (o_proj and down_proj).

    Grid ``(N / BLOCK_N,)``. ``v [K]``, ``W [N, K]`` row-major, ``res``/``out [N]`` (activation
    dtype). ``res`` and ``out`` may be the same buffer: a program reads and writes only its rows.
    ``SCALED``: ``W`` is int8 with per-row scales ``s [N]``.
    The linear output is rounded to the activation dtype before the add, like the eager path.
    ``EARLY``: the residual is read together with ``v`` after the wait (one memory round trip
    there, not two: it was read after the dot).
    """
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
    dt = out_ptr.dtype.element_ty
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = n < N
    wa, wb = _load_rows(w_ptr, n, nm, K, KM, KT)
    if SCALED:
        sc = _row_scales(s_ptr, n, nm)
    if PDL:
        gdc_wait()
    if EARLY:
        r = tl.load(res_ptr + n, mask=nm, other=0.0).to(tl.float32)
    va, vb = _load_vec(v_ptr, K, KM, KT)
    y = _dot_rows(wa, wb, va, vb, KT)
    if SCALED:
        y = y * sc
    y = y.to(dt).to(tl.float32)
    if not EARLY:
        r = tl.load(res_ptr + n, mask=nm, other=0.0).to(tl.float32)
    tl.store(out_ptr + n, (r + y).to(dt), mask=nm)


@triton.jit
def norm_gate_up_kernel(x_ptr, nw_ptr, w_ptr, s_ptr, out_ptr, eps,
                        HIDDEN: tl.constexpr, INTER: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr,
                        BLOCK_N: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    """RMSNorm + fused gate/up GEMV + ``silu(gate) * up`` (SwiGLU, Shazeer 2020).

    Grid ``(INTER / BLOCK_N,)``. ``x [HIDDEN]``, ``nw [HIDDEN]`` (post_attention_layernorm),
    ``w = gate_up.weight [2*INTER, HIDDEN]`` (gate rows first), ``out [INTER]`` (activation dtype);
    ``SCALED``: ``w`` is int8 with per-row scales ``s [2*INTER]``.
    """
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
    dt = x_ptr.dtype.element_ty
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = n < INTER
    wga, wgb = _load_rows(w_ptr, n, nm, HIDDEN, KM, KT)
    wua, wub = _load_rows(w_ptr, n + INTER, nm, HIDDEN, KM, KT)
    nwa, nwb = _load_vec(nw_ptr, HIDDEN, KM, KT)
    if SCALED:
        sg = _row_scales(s_ptr, n, nm)
        su = _row_scales(s_ptr, n + INTER, nm)
    if PDL:
        gdc_wait()
    xa, xb = _rms_normed(x_ptr, nwa, nwb, eps, HIDDEN, KM, KT)
    gate = _dot_rows(wga, wgb, xa, xb, KT)
    up = _dot_rows(wua, wub, xa, xb, KT)
    if SCALED:
        gate, up = gate * sg, up * su
    gate = gate.to(dt).to(tl.float32)
    up = up.to(dt).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(dt).to(tl.float32)
    tl.store(out_ptr + n, (act * up).to(dt), mask=nm)


@triton.jit
def _rows_x(x_ptr, nw_ptr, k0, NORM: tl.constexpr, K: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """Columns ``[k0, k0 + BLOCK_K)`` of ``x [ROWS, K]`` as the left ``tl.dot`` operand, times the
    RMSNorm weight ``nw`` when ``NORM`` (rounded to ``x``'s dtype), and the sum of their squares per
    row (fp32 ``[ROWS]``, 0 without ``NORM``). RMSNorm's ``rsqrt(mean(x**2) + eps)`` is one scalar
    per row, applied to the dot's result instead (:func:`_rows_rstd`): one pass over ``x``, not two."""
    dt = x_ptr.dtype.element_ty
    rr = tl.arange(0, ROWS)
    kk = k0 + tl.arange(0, BLOCK_K)
    km = kk < K
    x = tl.load(x_ptr + rr[:, None] * K + kk[None, :], mask=km[None, :], other=0.0)
    if NORM:
        xf = x.to(tl.float32)
        nw = tl.load(nw_ptr + kk, mask=km, other=0.0).to(tl.float32)
        return (xf * nw[None, :]).to(dt), tl.sum(xf * xf, axis=1)
    return x, tl.zeros([ROWS], dtype=tl.float32)


@triton.jit
def _rows_rstd(ss, eps, K: tl.constexpr):
    """RMSNorm's per-row scale ``rsqrt(mean(x**2) + eps)`` from the sums of squares (Zhang & Sennrich 2019)."""
    return 1.0 / tl.sqrt(ss / K + eps)


@triton.jit
def _rows_w(w_ptr, cols, k0, dt, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """Rows ``cols`` of a row-major ``[*, K]`` weight, columns ``[k0, k0 + BLOCK_K)``, transposed
    (``[BLOCK_K, len(cols)]``) and in the activation dtype ``dt``: the right ``tl.dot`` operand
    (int8 weights are widened, exactly: |q| <= 127 fits every float dtype's significand)."""
    kk = k0 + tl.arange(0, BLOCK_K)
    return tl.load(w_ptr + cols[None, :] * K + kk[:, None], mask=(kk < K)[:, None], other=0.0).to(dt)


@triton.jit
def rows_qkv_rope_kernel(x_ptr, nw_ptr, w_ptr, s_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr,
                         q_ptr, k_ptr, v_ptr, stride_kv_pos, stride_kv_head, eps,
                         HIDDEN: tl.constexpr, H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                         ROWS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                         PREC: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    """:func:`qkv_rope_kernel` for ``ROWS`` query positions at once (the short-prefill step): RMSNorm,
    the fused q/k/v projection as a ``[ROWS, HIDDEN] x [HIDDEN, BLOCK_R]`` ``tl.dot`` per output
    tile (tensor cores; the weights are read once for all rows), RoPE at each row's position, and
    each row's key/value written to its cache slot.

    Grid ``(H + 2*H_kv, (D/2) / BLOCK_R)`` as for :func:`qkv_rope_kernel`. ``x [ROWS, HIDDEN]``,
    ``pos``/``slot`` int64 ``[ROWS]``, ``q [ROWS, H*D]``; rows that repeat another row's position
    and slot write the same values there. ``SCALED``: int8 weights with per-row scales ``s``.
    """
    head = tl.program_id(0)
    part = tl.program_id(1)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    HALF: tl.constexpr = D // 2
    dt = x_ptr.dtype.element_ty
    r = part * BLOCK_R + tl.arange(0, BLOCK_R)
    rr = tl.arange(0, ROWS)
    lo = tl.zeros([ROWS, BLOCK_R], dtype=tl.float32)
    hi = tl.zeros([ROWS, BLOCK_R], dtype=tl.float32)
    ss = tl.zeros([ROWS], dtype=tl.float32)
    for k0 in range(0, HIDDEN, BLOCK_K):
        x, sq = _rows_x(x_ptr, nw_ptr, k0, True, HIDDEN, ROWS, BLOCK_K)
        ss += sq
        lo += tl.dot(x, _rows_w(w_ptr, head * D + r, k0, dt, HIDDEN, BLOCK_K), input_precision=PREC)
        hi += tl.dot(x, _rows_w(w_ptr, head * D + HALF + r, k0, dt, HIDDEN, BLOCK_K), input_precision=PREC)
    rstd = _rows_rstd(ss, eps, HIDDEN)[:, None]
    lo = lo * rstd
    hi = hi * rstd
    if SCALED:
        lo = lo * _row_scales(s_ptr, head * D + r, r < HALF)[None, :]
        hi = hi * _row_scales(s_ptr, head * D + HALF + r, r < HALF)[None, :]
    lo = lo.to(dt).to(tl.float32)
    hi = hi.to(dt).to(tl.float32)
    if head < H + HKV:  # queries and keys are rotated: x*cos + rotate_half(x)*sin
        p = tl.load(pos_ptr + rr)[:, None] * D
        c_lo = tl.load(cos_ptr + p + r[None, :]).to(tl.float32)
        c_hi = tl.load(cos_ptr + p + HALF + r[None, :]).to(tl.float32)
        s_lo = tl.load(sin_ptr + p + r[None, :]).to(tl.float32)
        s_hi = tl.load(sin_ptr + p + HALF + r[None, :]).to(tl.float32)
        lo, hi = lo * c_lo + hi * s_lo, hi * c_hi + lo * s_hi
    if head < H:
        base = q_ptr + rr[:, None] * (H * D) + head * D + r[None, :]
        tl.store(base, lo.to(dt))
        tl.store(base + HALF, hi.to(dt))
    else:
        slot = tl.load(slot_ptr + rr)[:, None] * stride_kv_pos
        if head < H + HKV:
            base = k_ptr + slot + (head - H) * stride_kv_head + r[None, :]
        else:
            base = v_ptr + slot + (head - H - HKV) * stride_kv_head + r[None, :]
        tl.store(base, lo.to(dt))
        tl.store(base + HALF, hi.to(dt))


@triton.jit
def rows_attn_kernel(q_ptr, k_ptr, v_ptr, idx_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, o_ptr,
                     stride_kv_pos, stride_kv_head, chunk, num_splits, scale,
                     H: tl.constexpr, D: tl.constexpr, G: tl.constexpr, ROWS: tl.constexpr,
                     BLOCK_Q: tl.constexpr, BLOCK_T: tl.constexpr, PREC: tl.constexpr, PDL: tl.constexpr):
    """Attention of ``ROWS`` query positions (the short-prefill step) over one chunk of the cache.

    Query row ``i = r*G + g`` is head ``kvh*G + g`` of position ``pos[r]`` and sees cache positions
    ``<= pos[r]``: causal within the rows, every cached one before them. Grid ``(H_kv, num_splits,
    ceil(ROWS*G / BLOCK_Q))``: program ``(kvh, s, b)`` reads chunk ``s`` of KV head ``kvh`` once for
    its ``BLOCK_Q`` query rows (the scores are one ``[BLOCK_Q, BLOCK_T]`` ``tl.dot`` a tile) and
    stores that chunk's partial softmax (FlashDecoding, as :func:`attn_kernel`) for
    :func:`rows_attn_merge_kernel`; with one split it writes the output itself.

    ``q``/``o [ROWS, H*D]``; scratch ``m``/``l [num_splits, ROWS*H]``, ``acc [num_splits, ROWS*H, D]``
    (fp32); ``pos`` int64 ``[ROWS]``, non-decreasing. A row with no position in a tile or a chunk
    keeps ``m = -inf, l = 0, acc = 0``: the online softmax guards its ``exp`` against ``-inf - -inf``.
    """
    kvh = tl.program_id(0)
    split = tl.program_id(1)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    dt = o_ptr.dtype.element_ty
    i = tl.program_id(2) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    im = i < ROWS * G
    r = tl.minimum(i // G, ROWS - 1)
    rh = r * H + kvh * G + i % G  # [BLOCK_Q] (position row, head) index
    d = tl.arange(0, D)
    q = tl.load(q_ptr + rh[:, None] * D + d[None, :], mask=im[:, None], other=0.0)
    p = tl.load(pos_ptr + r).to(tl.int32)
    last = tl.load(pos_ptr + ROWS - 1).to(tl.int32)
    m = tl.full([BLOCK_Q], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_Q], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q, D], dtype=tl.float32)
    start = split * chunk
    end = tl.minimum(start + chunk, last + 1)
    kbase = k_ptr + kvh * stride_kv_head
    vbase = v_ptr + kvh * stride_kv_head
    for t0 in range(start, end, BLOCK_T):
        t, tm, k, v = _kv_tile(kbase, vbase, idx_ptr, t0, end, stride_kv_pos, d, BLOCK_T)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [BLOCK_Q, BLOCK_T] fp32
        s = tl.where(tm[None, :] & (t[None, :] <= p[:, None]), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_ok = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing here yet
        alpha = tl.exp(m - m_ok)
        pr = tl.exp(s - m_ok[:, None])
        l = l * alpha + tl.sum(pr, axis=1)
        acc = acc * alpha[:, None] + tl.dot(pr.to(v.dtype), v, input_precision=PREC)
        m = m_new
    if num_splits == 1:  # one chunk holds every position: position 0 is in it, so l > 0
        tl.store(o_ptr + rh[:, None] * D + d[None, :], (acc / l[:, None]).to(dt), mask=im[:, None])
    else:
        at = split * (ROWS * H) + rh
        tl.store(m_ptr + at, m, mask=im)
        tl.store(l_ptr + at, l, mask=im)
        tl.store(acc_ptr + at[:, None] * D + d[None, :], acc, mask=im[:, None])


@triton.jit
def rows_attn_merge_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, num_splits,
                           RH: tl.constexpr, D: tl.constexpr, SP: tl.constexpr, PDL: tl.constexpr):
    """Combine :func:`rows_attn_kernel`'s chunks: ``o = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s``
    with ``M = max_s m_s``. Grid ``(RH,)`` = ``ROWS * H``, one (position, head) each; ``SP`` a power
    of two >= ``num_splits``. Chunk 0 holds position 0, so ``M`` is finite."""
    rh = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    dt = o_ptr.dtype.element_ty
    sp = tl.arange(0, SP)
    sm = sp < num_splits
    d = tl.arange(0, D)
    ms = tl.load(m_ptr + sp * RH + rh, mask=sm, other=float("-inf"))
    w = tl.exp(ms - tl.max(ms, axis=0))
    lsum = tl.sum(tl.load(l_ptr + sp * RH + rh, mask=sm, other=0.0) * w, axis=0)
    part = tl.load(acc_ptr + (sp * RH + rh)[:, None] * D + d[None, :], mask=sm[:, None], other=0.0)
    tl.store(o_ptr + rh * D + d, (tl.sum(part * w[:, None], axis=0) / lsum).to(dt))


@triton.jit
def rows_gemv_residual_kernel(v_ptr, w_ptr, s_ptr, res_ptr, out_ptr, N: tl.constexpr, K: tl.constexpr,
                              ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                              PREC: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    """:func:`gemv_residual_kernel` for ``ROWS`` rows: ``out[r, n] = res[r, n] + (v[r] @ W.T)[n]``.

    Grid ``(N / BLOCK_N,)``. ``v [ROWS, K]``, ``W [N, K]`` (``SCALED``: int8, per-row scales ``s [N]``),
    ``res``/``out [ROWS, N]`` (may alias)."""
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    dt = out_ptr.dtype.element_ty
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rr = tl.arange(0, ROWS)
    acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        v, _ = _rows_x(v_ptr, v_ptr, k0, False, K, ROWS, BLOCK_K)
        acc += tl.dot(v, _rows_w(w_ptr, n, k0, dt, K, BLOCK_K), input_precision=PREC)
    if SCALED:
        acc = acc * _row_scales(s_ptr, n, n < N)[None, :]
    y = acc.to(dt).to(tl.float32)
    at = rr[:, None] * N + n[None, :]
    r = tl.load(res_ptr + at).to(tl.float32)
    tl.store(out_ptr + at, (r + y).to(dt))


@triton.jit
def rows_norm_gate_up_kernel(x_ptr, nw_ptr, w_ptr, s_ptr, out_ptr, eps,
                             HIDDEN: tl.constexpr, INTER: tl.constexpr, ROWS: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             PREC: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    """:func:`norm_gate_up_kernel` for ``ROWS`` rows. Grid ``(INTER / BLOCK_N,)``; ``x [ROWS, HIDDEN]``,
    ``out [ROWS, INTER]``; ``SCALED``: int8 weights with per-row scales ``s [2*INTER]``."""
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    dt = x_ptr.dtype.element_ty
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rr = tl.arange(0, ROWS)
    gate = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    up = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    ss = tl.zeros([ROWS], dtype=tl.float32)
    for k0 in range(0, HIDDEN, BLOCK_K):
        x, sq = _rows_x(x_ptr, nw_ptr, k0, True, HIDDEN, ROWS, BLOCK_K)
        ss += sq
        gate += tl.dot(x, _rows_w(w_ptr, n, k0, dt, HIDDEN, BLOCK_K), input_precision=PREC)
        up += tl.dot(x, _rows_w(w_ptr, INTER + n, k0, dt, HIDDEN, BLOCK_K), input_precision=PREC)
    rstd = _rows_rstd(ss, eps, HIDDEN)[:, None]
    gate = gate * rstd
    up = up * rstd
    if SCALED:
        gate = gate * _row_scales(s_ptr, n, n < INTER)[None, :]
        up = up * _row_scales(s_ptr, INTER + n, n < INTER)[None, :]
    gate = gate.to(dt).to(tl.float32)
    up = up.to(dt).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(dt).to(tl.float32)
    tl.store(out_ptr + rr[:, None] * INTER + n[None, :], (act * up).to(dt))


@triton.jit
def embed_kernel(token_ptr, emb_ptr, x_ptr, pos_ptr, gather_ptr, slot_ptr,
                 HIDDEN: tl.constexpr, BLOCK: tl.constexpr, PAGED: tl.constexpr, PDL: tl.constexpr):
    """The token step's head: ``x = emb[token]`` (``[HIDDEN]``, activation dtype), and for a paged
    cache the arena slot of the position, ``slot = gather[pos]``. One program."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    tok = tl.load(token_ptr)
    for k0 in range(0, HIDDEN, BLOCK):
        k = k0 + tl.arange(0, BLOCK)
        tl.store(x_ptr + k, tl.load(emb_ptr + tok * HIDDEN + k, mask=k < HIDDEN), mask=k < HIDDEN)
    if PAGED:
        tl.store(slot_ptr, tl.load(gather_ptr + tl.load(pos_ptr)))


@triton.jit
def _emit_argmax(vals, ids, valid, token_ptr, argmax_ptr, reported_ptr, pos_ptr, host_ptr, V: tl.constexpr,
                 INVALID: tl.constexpr, HOST: tl.constexpr):
    """The token step's last stores, shared by both tails: of candidate maxima ``vals`` (fp32, NaN
    already +inf) at indices ``ids`` (``valid`` lanes only, each the first index of its value in
    its lane), the first of the overall maximum into ``token`` and ``argmax``, it or ``INVALID``
    (the maximum is NaN or +/-inf) into ``reported`` and, ``HOST``, into ``host[pos % 2]`` (pinned
    host memory: the store crosses the bus, so the host reads the token without a copy after the
    step), and ``pos += 1``. -inf everywhere (every token masked) still picks index 0, as
    ``torch.max`` does."""
    m = tl.max(vals, axis=0)
    idx = tl.min(tl.where((vals == m) & valid, ids, V), axis=0)
    idx = tl.where(idx == V, 0, idx).to(tl.int64)
    tl.store(token_ptr, idx)
    tl.store(argmax_ptr, idx)
    finite = (m < float("inf")) & (m > float("-inf"))
    reported = tl.where(finite, idx, INVALID)
    tl.store(reported_ptr, reported)
    p = tl.load(pos_ptr)
    if HOST:
        tl.store(host_ptr + p % 2, reported)
    tl.store(pos_ptr, p + 1)


@triton.jit
def argmax_kernel(logits_ptr, token_ptr, argmax_ptr, reported_ptr, pos_ptr, host_ptr, V: tl.constexpr,
                  BLOCK: tl.constexpr, INVALID: tl.constexpr, HOST: tl.constexpr, PDL: tl.constexpr):
    """The token step's tail: the argmax of ``logits [V]`` (the first of equal maxima, as
    ``torch.max``; NaN counts as +inf, so it wins as in torch) into ``token`` (the next step's input)
    and ``argmax``, the argmax or ``INVALID`` (the winner is NaN or +inf) into ``reported`` (and
    ``host[pos % 2]`` with ``HOST``: see :func:`_emit_argmax`), and ``pos += 1``. One program."""
    if PDL:
        gdc_wait()
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    best_i = tl.full([BLOCK], V, tl.int32)
    for v0 in range(0, V, BLOCK):
        i = v0 + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + i, mask=i < V, other=float("-inf")).to(tl.float32)
        x = tl.where(x != x, float("inf"), x)
        take = x > best  # strictly: an earlier block's equal maximum keeps its lower index
        best_i = tl.where(take, i, best_i)
        best = tl.where(take, x, best)
    _emit_argmax(best, best_i, best_i < V, token_ptr, argmax_ptr, reported_ptr, pos_ptr, host_ptr, V, INVALID,
                 HOST)


@triton.jit
def head_argmax_kernel(x_ptr, nw_ptr, w_ptr, s_ptr, logits_ptr, pm_ptr, pi_ptr, cnt_ptr,
                       token_ptr, argmax_ptr, reported_ptr, pos_ptr, host_ptr, eps,
                       V: tl.constexpr, HIDDEN: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr,
                       BLOCK_N: tl.constexpr, P: tl.constexpr, PP: tl.constexpr, INVALID: tl.constexpr,
                       HOST: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    """The token step's tail as one kernel: the final RMSNorm, the ``lm_head`` GEMV and the argmax.

    Grid ``(P,)``, ``P = cdiv(V, BLOCK_N)``. ``x [HIDDEN]`` (the last residual), ``nw [HIDDEN]``,
    ``w = lm_head.weight [V, HIDDEN]`` (``SCALED``: int8, per-row scales ``s [V]``), ``logits [V]``
    (activation dtype). Each program writes its
    rows' logits and their maximum and its first index into ``pm``/``pi [P]`` (fp32, int32); the
    last program to finish (``cnt [1]`` int32, put back to 0 by it: the attention merge's pattern)
    reduces them as :func:`argmax_kernel` does (the first of equal maxima of the rounded logits, NaN
    counting as +inf) into ``token``, ``argmax`` and ``reported`` (and ``host[pos % 2]`` with
    ``HOST``) and does ``pos += 1``. Its weight
    rows are read before ``gdc_wait``: the 57 MB of the 256M's head start streaming while the last
    layer's down projection runs.
    """
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
    dt = logits_ptr.dtype.element_ty
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = n < V
    wa, wb = _load_rows(w_ptr, n, nm, HIDDEN, KM, KT)
    nwa, nwb = _load_vec(nw_ptr, HIDDEN, KM, KT)
    if SCALED:
        sc = _row_scales(s_ptr, n, nm)
    if PDL:
        gdc_wait()
    xa, xb = _rms_normed(x_ptr, nwa, nwb, eps, HIDDEN, KM, KT)
    y = _dot_rows(wa, wb, xa, xb, KT)
    if SCALED:
        y = y * sc
    y = y.to(dt)
    tl.store(logits_ptr + n, y, mask=nm)
    yf = y.to(tl.float32)
    yf = tl.where(yf != yf, float("inf"), yf)
    yf = tl.where(nm, yf, float("-inf"))
    bm = tl.max(yf, axis=0)
    bi = tl.min(tl.where((yf == bm) & nm, n, V), axis=0)
    tl.store(pm_ptr + pid, bm)
    tl.store(pi_ptr + pid, tl.where(bi == V, pid * BLOCK_N, bi))
    tl.debug_barrier()  # this program's partial is stored before the (release) increment
    done = tl.atomic_add(cnt_ptr, 1)
    if done == P - 1:
        j = tl.arange(0, PP)
        jm = j < P
        ms = tl.load(pm_ptr + j, mask=jm, other=float("-inf"), cache_modifier=".cg")
        ids = tl.load(pi_ptr + j, mask=jm, other=V, cache_modifier=".cg")
        # Blocks are in index order and each holds its first maximum: the lowest index among the
        # blocks at the maximum is the first maximum overall.
        _emit_argmax(ms, ids, jm, token_ptr, argmax_ptr, reported_ptr, pos_ptr, host_ptr, V, INVALID, HOST)
        tl.atomic_xchg(cnt_ptr, 0)


def split_k(k: int) -> tuple[int, int]:
    """``k`` as ``(KM, KT)``: the largest power of two <= k, and the rest padded to a power of two
    (0 if none); e.g. 576 -> (512, 64), 1536 -> (1024, 512), 64 -> (64, 0)."""
    km = 1 << (k.bit_length() - 1)
    return km, (triton.next_power_of_2(k - km) if k > km else 0)


#: Most chunks the short-prefill step's attention splits the cache into (its merge reads them all).
#: The merges take the most chunks as their ``SP`` at every KV bucket, masking the unused ones: a
#: ``SP`` per bucket was a Triton specialization per bucket, each compiled at its first use, which on
#: a machine's first start fell inside answers (~0.2 s once each) instead of the load's warm-up.
ROWS_MAX_SPLITS = 64

#: Launch parameters; ``TritonStep(config=...)`` overrides them (the GPU bench sweeps a few).
#: ``pdl``: programmatic dependent launch, used only where Triton has it and the device is CUDA.
DEFAULT_CONFIG = {  # fastest in the H200 sweeps (bench/results/gpu-triton-run2.json, -run3.json)
    "qkv_block_r": 4, "qkv_warps": 4,
    # Chunks of 16 positions (one tile) up to the 512 bucket, 32 longer chunks beyond. Measured on the
    # H200 against tiles of 32 for every bucket: 324-330 against 334 us (256M, 58-token context),
    # against 353-358 us with chunks of 16 read as half-masked tiles of 32 (bench/results/h200-session20).
    "attn_block_t": 16, "attn_min_chunk": 16, "attn_max_splits": 32, "attn_warps": 4,
    # Merge the attention chunks in a kernel of their own (one program a head) instead of in the
    # attention kernel's last program to finish (an atomic counter): 324-334 against 396 us a step
    # (bench/results/h200-session20), the counter's fence, atomic and re-read cost more than a
    # kernel boundary under PDL.
    "attn_merge_kernel": True,
    "o_block_n": 8, "o_warps": 4,
    "gu_block_n": 4, "gu_warps": 4,
    "down_block_n": 4, "down_warps": 4,
    "pdl": True,
    # The token step's tail (final norm, lm_head, argmax) as one kernel of head_block_n rows a program.
    "fused_head": True, "head_block_n": 16, "head_warps": 4,
    # The token step's tail also stores the reported token into pinned host memory, so the loop
    # reads it without an 8-byte copy between replays: 322.7 us a replay against 332.6 with the copy
    # (bench/results/h200-session21, 256M).
    "host_report": True,
    # Read what no kernel of the step writes (position, rotary rows, write slot, the cached keys and
    # values before the position) before waiting on the previous kernel; the residual beside the input.
    "early_loads": True,
    # The short-prefill step (rows_* kernels): output columns per program and the K tile. A follow-up's
    # 16 new tokens (one 32-row step) after 898 cached on the 256M, the step's graph alone on the
    # H200: 16 columns with 2 warps 984 us against 1,116 us with 32 and 4 (twice the programs: 36
    # instead of 18 for a residual GEMM); the attention's tile, warps and query block moved nothing
    # beyond 1.5% (bench/results/h200-session27, runs 3-4).
    "rows_block_n": 16, "rows_block_k": 256, "rows_warps": 2, "rows_block_q": 64, "rows_attn_warps": 4,
    "rows_block_t": 32,
}


#: Overrides of :data:`DEFAULT_CONFIG` for decoders at least this ``hidden_size`` wide, whose GEMVs have
#: 3.6-6.4x the rows of the 256M's (which the defaults were tuned on). SmolVLM2-2.2B's shape on the H200,
#: each GEMV kind measured with every other kernel kind emptied, then the real step alternating with
#: the defaults (bench/results/h200-session23, runs 3-5): qkv_rope in rows of 2 (1,536 programs instead of
#: 768: 1.45 waves at 4 programs an SM left most SMs idle in the last one) and down_proj one row a
#: program with 8 warps (2,048 programs instead of 512), 1,116-1,122 against 1,141-1,178 us a step. The
#: same values on the 256M cost 324-330 -> 405-414 us, so they apply from this width only. The 2.2B's 32
#: KV heads' attention in chunks and tiles of 32 positions instead of 16: after 900 prompt tokens (a
#: photo question) 1,182-1,183 against 1,216-1,224 us a step, after 58 the same (1,112-1,120 against
#: 1,118-1,122), alternating (bench/results/h200-session31, run 9; session 22 measured the same
#: direction). The short-prefill step keeps the launch parameters it had before session 27's 256M
#: sweep (not measured on this width).
WIDE_CONFIG = (2048, {"qkv_block_r": 2, "down_block_n": 1, "down_warps": 8, "attn_block_t": 32, "attn_min_chunk": 32,
                      "rows_block_n": 32, "rows_warps": 4})


def default_config(hidden_size: int) -> dict:
    """The launch parameters :class:`TritonStep` uses for a decoder of ``hidden_size``: :data:`DEFAULT_CONFIG`
    with :data:`WIDE_CONFIG`'s overrides from its width on."""
    width, wide = WIDE_CONFIG
    return dict(DEFAULT_CONFIG, **(wide if hidden_size >= width else {}))


def kernel_weights(linear: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """A projection as the kernels' ``(w_ptr, s_ptr, SCALED)``: an :class:`Int8Linear`'s int8
    ``weight [out, in]`` and bf16 ``scale [out]``, or a float ``nn.Linear``'s weight twice (its
    ``s_ptr`` unused).

    Raises:
        ValueError: another kind of layer (int4), or a bias (the kernels add none).
    """
    if getattr(linear, "bias", None) is not None:
        raise ValueError("Triton decode needs bias-free projections")
    if isinstance(linear, Int8Linear):
        return linear.weight, linear.scale, True
    if isinstance(linear, torch.nn.Linear):
        return linear.weight, linear.weight, False
    raise ValueError(f"Triton decode needs float or int8 weights, not {type(linear).__name__}")


class TritonStep:
    """The decode step of :class:`StaticDecoder` as 6 Triton kernels a layer (+ final norm, lm_head:
    one more kernel, :meth:`head_argmax`, in the token step).

    Holds static scratch buffers (so the step can be captured in a CUDA graph): ``q``/``o [H*D]``
    (rotated queries, attention output), ``m, l [max_splits, H]`` and ``acc [max_splits, H, D]``
    (fp32 split-attention partials), ``cnt [H_kv]`` (int32 merge counters), ``mlp [I]``, and the
    residual ``res [hidden]``.
    """

    def __init__(self, decoder, config: dict | None = None):
        self.dec = decoder
        model = decoder.model
        text = model.decoder
        cfg = text.config
        dev, dt = model.device, model.dtype
        self.cfg = dict(default_config(cfg.hidden_size), **(config or {}))
        self.pdl = bool(self.cfg["pdl"]) and HAS_PDL and dev.type == "cuda"
        self.prec = "ieee" if dt == torch.float32 else "tf32"
        self.hidden, self.inter = cfg.hidden_size, cfg.intermediate_size
        self.h, self.hkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = float(cfg.rms_norm_eps)
        if self.d & (self.d - 1) or self.d < 16 or self.h % self.hkv:
            raise ValueError("Triton decode needs a power-of-two head_dim >= 16 and H divisible by H_kv")
        self.layers = []
        for layer in text.layers:
            attn, mlp = layer.self_attn, layer.mlp
            if attn.qkv_proj is None or mlp.gate_up is None:
                raise ValueError("Triton decode needs fused q/k/v and gate/up projections")
            self.layers.append((layer.input_layernorm.weight, kernel_weights(attn.qkv_proj),
                                kernel_weights(attn.o_proj), layer.post_attention_layernorm.weight,
                                kernel_weights(mlp.gate_up), kernel_weights(mlp.down_proj)))
        ms = self.cfg["attn_max_splits"]
        self.q = torch.zeros(self.h * self.d, device=dev, dtype=dt)
        self.o = torch.zeros(self.h * self.d, device=dev, dtype=dt)
        self.m = torch.zeros(ms, self.h, device=dev, dtype=torch.float32)
        self.l = torch.zeros(ms, self.h, device=dev, dtype=torch.float32)
        self.acc = torch.zeros(ms, self.h, self.d, device=dev, dtype=torch.float32)
        self.cnt = torch.zeros(self.hkv, device=dev, dtype=torch.int32)
        self.mlp = torch.zeros(self.inter, device=dev, dtype=dt)
        self.res = torch.zeros(self.hidden, device=dev, dtype=dt)
        self._rows: dict | None = None  # the short-prefill step's buffers, made at its first use
        head = model.lm_head
        self.fused_head = (bool(self.cfg["fused_head"]) and type(head) in (torch.nn.Linear, Int8Linear)
                           and head.bias is None)
        self._head: dict | None = None  # the fused tail's buffers, made at its first use

    def rows_supported(self) -> bool:
        """Whether the short-prefill kernels take this shape (``tl.dot`` tiles of 16: output columns
        in whole ``rows_block_n`` tiles, half a head in whole 16-column tiles)."""
        bn = self.cfg["rows_block_n"]
        return self.d >= 32 and (self.d // 2) % 16 == 0 and self.hidden % bn == 0 and self.inter % bn == 0

    def rows(self, kv: tuple[torch.Tensor, ...], bucket: int) -> torch.Tensor:
        """The short-prefill step: ``decoder.x_rows [1, R, hidden]`` at ``decoder.pos_rows`` -> logits
        ``[1, V]`` of row ``decoder.last_row``; writes every row's keys/values (see
        :meth:`StaticDecoder.prefill <engine.models.llama.static_decode.StaticDecoder.prefill>`).
        Five kernels a layer, like the decode step, with ``tl.dot`` over the R rows in the GEMVs' place.

        Raises:
            ValueError: a shape the kernels do not take (:meth:`rows_supported`).
        """
        if not self.rows_supported():
            raise ValueError("the short-prefill kernels need head_dim >= 32 and hidden/intermediate sizes "
                             "in whole 16-column tiles")
        dec, c = self.dec, self.cfg
        h, hkv, d, hidden, inter = self.h, self.hkv, self.d, self.hidden, self.inter
        r = dec.rows
        dev, dt = dec.x_rows.device, dec.x_rows.dtype
        if self._rows is None:
            self._rows = {"q": torch.zeros(r, h * d, device=dev, dtype=dt),
                          "o": torch.zeros(r, h * d, device=dev, dtype=dt),
                          "m": torch.zeros(ROWS_MAX_SPLITS, r * h, device=dev, dtype=torch.float32),
                          "l": torch.zeros(ROWS_MAX_SPLITS, r * h, device=dev, dtype=torch.float32),
                          "acc": torch.zeros(ROWS_MAX_SPLITS, r * h, d, device=dev, dtype=torch.float32),
                          "mlp": torch.zeros(r, inter, device=dev, dtype=dt),
                          "res": torch.zeros(r, hidden, device=dev, dtype=dt)}
        b = self._rows
        if len(kv) == 2:  # contiguous [L, B, H_kv, T, D]
            kc, vc = kv
            caches = [(kc[i, 0], vc[i, 0]) for i in range(len(self.layers))]
            stride_pos, stride_head = kc.stride(3), kc.stride(2)
            slot, idx = dec.pos_rows, dec.slots
        else:  # paged [2, L, num_blocks, block_size, H_kv, D]
            arena = kv[0]
            caches = [(arena[0, i], arena[1, i]) for i in range(len(self.layers))]
            stride_pos, stride_head = arena.stride(3), arena.stride(4)
            slot, idx = dec.slot_rows, dec.gather
        # Chunks of one tile, at most ROWS_MAX_SPLITS: each program already does R*G query rows.
        bt = c["rows_block_t"]
        chunk = max(bt, math.ceil(bucket / ROWS_MAX_SPLITS / bt) * bt)
        num_splits = math.ceil(bucket / chunk)
        g = h // hkv
        qb = max(16, min(c["rows_block_q"], triton.next_power_of_2(r * g)))
        bn, bk, warps = c["rows_block_n"], c["rows_block_k"], c["rows_warps"]
        # Without programmatic dependent launch: these kernels fill the GPU, and dependents launched
        # early only sit on its SMs waiting (measured: a 20-token step 2.2 ms without, 3.1 ms with).
        launch, pdl, prec = {}, False, self.prec
        x_in, res = dec.x_rows.view(r, hidden), b["res"]
        for i, (nw1, (w_qkv, s_qkv, q_qkv), (w_o, s_o, q_o), nw2, (w_gu, s_gu, q_gu),
                (w_down, s_down, q_down)) in enumerate(self.layers):
            kcache, vcache = caches[i]
            x = x_in if i == 0 else res
            rows_qkv_rope_kernel[(h + 2 * hkv, d // 2 // 16)](
                x, nw1, w_qkv, s_qkv, dec.cos, dec.sin, dec.pos_rows, slot, b["q"], kcache, vcache,
                stride_pos, stride_head, self.eps, HIDDEN=hidden, H=h, HKV=hkv, D=d, ROWS=r, BLOCK_R=16,
                BLOCK_K=bk, PREC=prec, SCALED=q_qkv, PDL=pdl, num_warps=warps, **launch)
            rows_attn_kernel[(hkv, num_splits, triton.cdiv(r * g, qb))](
                b["q"], kcache, vcache, idx, dec.pos_rows, b["m"], b["l"], b["acc"], b["o"],
                stride_pos, stride_head, chunk, num_splits, d ** -0.5, H=h, D=d, G=g, ROWS=r, BLOCK_Q=qb,
                BLOCK_T=bt, PREC=prec, PDL=pdl, num_warps=c["rows_attn_warps"], **launch)
            if num_splits > 1:
                rows_attn_merge_kernel[(r * h,)](
                    b["m"], b["l"], b["acc"], b["o"], num_splits, RH=r * h, D=d,
                    SP=ROWS_MAX_SPLITS, PDL=pdl, num_warps=1, **launch)
            rows_gemv_residual_kernel[(hidden // bn,)](
                b["o"], w_o, s_o, x, res, N=hidden, K=h * d, ROWS=r, BLOCK_N=bn, BLOCK_K=bk, PREC=prec,
                SCALED=q_o, PDL=pdl, num_warps=warps, **launch)
            rows_norm_gate_up_kernel[(inter // bn,)](
                res, nw2, w_gu, s_gu, b["mlp"], self.eps, HIDDEN=hidden, INTER=inter, ROWS=r, BLOCK_N=bn,
                BLOCK_K=bk, PREC=prec, SCALED=q_gu, PDL=pdl, num_warps=warps, **launch)
            rows_gemv_residual_kernel[(hidden // bn,)](
                b["mlp"], w_down, s_down, res, res, N=hidden, K=inter, ROWS=r, BLOCK_N=bn, BLOCK_K=bk, PREC=prec,
                SCALED=q_down, PDL=pdl, num_warps=warps, **launch)
        text = dec.model.decoder
        last = res.index_select(0, dec.last_row).view(1, 1, hidden)
        return dec.model.lm_head(text.norm(last)[:, -1])

    def embed_token(self, paged: bool) -> None:
        """``decoder.x = emb[decoder.token]`` and, ``paged``, ``decoder.write_slot =
        decoder.gather[decoder.pos]``: the token step's head as one kernel."""
        dec = self.dec
        emb = dec.model.decoder.embed_tokens.weight
        embed_kernel[(1,)](dec.token, emb, dec.x, dec.pos, dec.gather, dec.write_slot, HIDDEN=self.hidden,
                           BLOCK=min(1024, triton.next_power_of_2(self.hidden)), PAGED=paged, PDL=False,
                           num_warps=4)

    def argmax_token(self, logits: torch.Tensor) -> None:
        """The token step's tail as one kernel (:func:`argmax_kernel`): ``logits [1, V]``' argmax into
        ``decoder.token`` and ``decoder.argmax``, the argmax or ``INVALID_TOKEN`` into
        ``decoder.reported`` (and ``decoder.host_reported[pos % 2]`` when it is set), and
        ``decoder.pos += 1``."""
        from engine.sampling import INVALID_TOKEN

        dec = self.dec
        v = logits.shape[-1]
        host = dec.host_reported
        argmax_kernel[(1,)](logits, dec.token, dec.argmax, dec.reported, dec.pos,
                            dec.reported if host is None else host, V=v, BLOCK=4096, INVALID=INVALID_TOKEN,
                            HOST=host is not None, PDL=False, num_warps=16)

    def head_argmax(self) -> torch.Tensor:
        """The token step's tail as one kernel (:func:`head_argmax_kernel`, with ``fused_head``): the
        final norm and ``lm_head`` of the last layer's residual into logits ``[1, V]`` (returned; a
        buffer the next step overwrites), their argmax into ``decoder.token``/``decoder.argmax``,
        the argmax or ``INVALID_TOKEN`` into ``decoder.reported`` (and ``decoder.host_reported[pos % 2]``
        when it is set), and ``decoder.pos += 1``. Run it after ``self(kv, bucket, head=False)``."""
        from engine.sampling import INVALID_TOKEN

        dec, c = self.dec, self.cfg
        text = dec.model.decoder
        w, s, scaled = kernel_weights(dec.model.lm_head)
        v, bn = w.shape[0], c["head_block_n"]
        programs = triton.cdiv(v, bn)
        if self._head is None:
            dev = self.res.device
            self._head = {"logits": torch.zeros(1, v, device=dev, dtype=self.res.dtype),
                          "pm": torch.zeros(programs, device=dev, dtype=torch.float32),
                          "pi": torch.zeros(programs, device=dev, dtype=torch.int32),
                          "cnt": torch.zeros(1, device=dev, dtype=torch.int32)}
        b = self._head
        hm, ht = split_k(self.hidden)
        launch = {"launch_pdl": True} if self.pdl else {}
        host = dec.host_reported
        head_argmax_kernel[(programs,)](
            self.res, text.norm.weight, w, s, b["logits"], b["pm"], b["pi"], b["cnt"], dec.token, dec.argmax,
            dec.reported, dec.pos, dec.reported if host is None else host, float(text.norm.eps), V=v,
            HIDDEN=self.hidden, KM=hm, KT=ht, BLOCK_N=bn, P=programs, PP=triton.next_power_of_2(programs),
            INVALID=INVALID_TOKEN, HOST=host is not None, SCALED=scaled, PDL=self.pdl, num_warps=c["head_warps"],
            **launch)
        return b["logits"]

    def splits(self, bucket: int) -> tuple[int, int]:
        """``(num_splits, chunk)`` for a KV bucket: chunks of at least ``attn_min_chunk`` positions,
        a multiple of ``attn_block_t``, at most ``attn_max_splits`` of them."""
        c = self.cfg
        n = max(1, min(c["attn_max_splits"], math.ceil(bucket / c["attn_min_chunk"])))
        bt = c["attn_block_t"]
        chunk = math.ceil(math.ceil(bucket / n) / bt) * bt
        return math.ceil(bucket / chunk), chunk

    def __call__(self, kv: tuple[torch.Tensor, ...], bucket: int, head: bool = True) -> torch.Tensor | None:
        """``decoder.x [1, 1, hidden]`` at ``decoder.pos`` -> logits ``[1, V]``; writes k/v at ``pos``.
        ``head=False``: stops at the last layer's residual (``self.res``), for :meth:`head_argmax`."""
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
        hm, ht = split_k(hidden)
        im, it = split_k(inter)
        launch = {"launch_pdl": True} if self.pdl else {}
        pdl, early = self.pdl, bool(c["early_loads"])
        merge_kernel = bool(c["attn_merge_kernel"])
        grid_qkv = (h + 2 * hkv, triton.cdiv(d // 2, min(c["qkv_block_r"], d // 2)))
        grid_o = (triton.cdiv(hidden, c["o_block_n"]),)
        grid_gu = (triton.cdiv(inter, c["gu_block_n"]),)
        grid_down = (triton.cdiv(hidden, c["down_block_n"]),)
        x_in = dec.x.view(-1)
        res = self.res
        for i, (nw1, (w_qkv, s_qkv, q_qkv), (w_o, s_o, q_o), nw2, (w_gu, s_gu, q_gu),
                (w_down, s_down, q_down)) in enumerate(self.layers):
            kcache, vcache = caches[i]
            x = x_in if i == 0 else res
            qkv_rope_kernel[grid_qkv](
                x, nw1, w_qkv, s_qkv, dec.cos, dec.sin, dec.pos, slot, self.q, kcache, vcache,
                stride_pos, stride_head, self.eps,
                HIDDEN=hidden, KM=hm, KT=ht, H=h, HKV=hkv, D=d, BLOCK_R=min(c["qkv_block_r"], d // 2),
                EARLY=early, SCALED=q_qkv, PDL=pdl, num_warps=c["qkv_warps"], **launch)
            attn_kernel[(hkv, num_splits)](
                self.q, kcache, vcache, idx, dec.pos, self.m, self.l, self.acc, self.cnt, self.o,
                stride_pos, stride_head, chunk, num_splits, d ** -0.5,
                H=h, D=d, G=g, GP=triton.next_power_of_2(g), BLOCK_H=max(16, triton.next_power_of_2(g)),
                BLOCK_T=c["attn_block_t"], SP=triton.next_power_of_2(c["attn_max_splits"]), PREC=self.prec,
                EARLY=early, PDL=pdl, MERGE=not merge_kernel, num_warps=c["attn_warps"], **launch)
            if merge_kernel and num_splits > 1:
                rows_attn_merge_kernel[(h,)](self.m, self.l, self.acc, self.o, num_splits, RH=h, D=d,
                                             SP=triton.next_power_of_2(c["attn_max_splits"]), PDL=pdl,
                                             num_warps=1, **launch)
            gemv_residual_kernel[grid_o](
                self.o, w_o, s_o, x, res, N=hidden, K=h * d, KM=split_k(h * d)[0], KT=split_k(h * d)[1],
                BLOCK_N=c["o_block_n"], EARLY=early, SCALED=q_o, PDL=pdl, num_warps=c["o_warps"], **launch)
            norm_gate_up_kernel[grid_gu](
                res, nw2, w_gu, s_gu, self.mlp, self.eps, HIDDEN=hidden, INTER=inter, KM=hm, KT=ht,
                BLOCK_N=c["gu_block_n"], SCALED=q_gu, PDL=pdl, num_warps=c["gu_warps"], **launch)
            gemv_residual_kernel[grid_down](
                self.mlp, w_down, s_down, res, res, N=hidden, K=inter, KM=im, KT=it,
                BLOCK_N=c["down_block_n"], EARLY=early, SCALED=q_down, PDL=pdl, num_warps=c["down_warps"],
                **launch)
        if not head:
            return None
        text = dec.model.decoder
        return dec.model.lm_head(text.norm(res.view(1, 1, hidden))[:, -1])
