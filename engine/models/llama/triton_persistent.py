"""The whole batch-1 token step of the Llama text decoder as one persistent Triton kernel.

:mod:`engine.models.llama.triton_decode` runs the step as six kernels a layer (146 for a 24-layer
decoder). On the H200 each kernel boundary costs ~1.1 us even for empty kernels, and the GEMVs
that run more than one wave of programs leave most of the GPU idle in their last one; at the 2.2B's
width the step streams its 3.42 GB of weights at ~3.0 TB/s (bench/results/h200-session23). Here
one program per streaming multiprocessor (``grid = (programs,)``, all resident at once) walks
every phase of every layer, and the phases are separated by grid-wide barriers (an atomic counter
in global memory, the software grid barrier of cooperative groups) instead of kernel boundaries:

1. RMSNorm + fused q/k/v GEMV + RoPE + the new key/value written into the cache (tiles of
   ``QKV_R`` rotate-half pairs of one head);
2. single-query attention, one (query head, chunk of positions) item at a time, with a lane-wise
   online softmax (each of ``BLOCK_T`` lanes keeps its own running max, sum and output row, merged
   at the end of the chunk: no reduction inside the position loop); with several chunks,
3. their merge, one head at a time;
4. o_proj GEMV + residual; 5. RMSNorm + fused gate/up GEMV + SwiGLU; 6. down GEMV + residual;

then the final norm, ``lm_head`` and the argmax (each program keeps the maximum of its rows; the
last program to arrive reduces them). Work within a phase is dealt round-robin (tile ``pid + i *
programs``), so no phase has a partial last wave. The GEMV phases read their weights one tile ahead
(``PREFETCH``): a program issues the loads of its next tile before it reduces the current one, and
the first tile of the next phase's weights before it waits at the barrier, so the memory system
keeps streaming weights, which do not depend on the barrier, while the programs synchronize
(the "megakernel" design: Spector et al., "Look Ma, No Bubbles!", Hazy Research 2025).

Every read of data another program wrote in this kernel (the residual, queries, attention partials
and output, the MLP activation, the new key/value) bypasses L1 (``.cg``): the barrier orders the
writes at L2, not in another SM's L1. The barrier's counter only grows within a step (barrier ``j``
waits for ``(j + 1) * programs`` arrivals); the last program of the step puts it back to 0.

Rounding follows :mod:`~engine.models.llama.triton_decode` (and the eager path): linear outputs,
the normed input, the attention output and the SwiGLU product are rounded to the activation dtype.

Under the Triton interpreter (the CPU tests) the grid is one program: it does every tile itself,
and each barrier is passed at once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from engine.models.llama.triton_decode import _dot_rows, _emit_argmax, _load_rows, _load_vec

# The weight table's columns (int64 addresses, one row a layer).
W_NORM1, W_QKV, W_O, W_NORM2, W_GATE_UP, W_DOWN = (tl.constexpr(i) for i in range(6))


@triton.jit
def _now(x):
    """The GPU's global nanosecond timer (``%globaltimer``); ``x`` only gives the result a shape."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _fence(x):
    """``fence.acq_rel.gpu`` in every thread: its later reads see what was ordered before the
    releases it synchronized with."""
    return tl.inline_asm_elementwise("fence.acq_rel.gpu;\n mov.u32 $0, $1;", "=r,r", [x], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _sleep(x, NS: tl.constexpr):
    """``nanosleep`` (about ``NS`` ns) in every thread: a poll's back-off."""
    return tl.inline_asm_elementwise(f"nanosleep.u32 {NS};\n mov.u32 $0, $1;", "=r,r", [x], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _grid_sync(bar_ptr, target, trace_ptr, slot, BARRIER: tl.constexpr, TRACE: tl.constexpr,
               SLEEP: tl.constexpr = 0):
    """Wait until ``target`` programs in all have arrived at barriers of this step. Every thread's
    stores before it are visible (at L2) to every program after it: the block barrier, then one
    thread's release increment; its acquire reads of the counter, then the block barrier again
    (Triton broadcasts the scalar atomic's result through shared memory). ``BARRIER == 1``: the
    increment's result is not waited for, and every thread polls with volatile loads, then fences.
    ``SLEEP``: ns between polls. ``TRACE == 1``: program 0 stores the time it passed into
    ``trace[slot]``; ``TRACE == 2``: every program stores when it arrived and when it passed into
    ``trace[slot, pid, 0:2]``."""
    pid = tl.program_id(0)
    if TRACE == 2:
        tl.store(trace_ptr + (slot * tl.num_programs(0) + pid) * 2, _now(pid))
    tl.debug_barrier()
    if BARRIER == 1:
        tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
        seen = tl.load(bar_ptr, volatile=True)
        while seen < target:
            if SLEEP > 0:
                _sleep(seen, SLEEP)
            seen = tl.load(bar_ptr, volatile=True)
        _fence(seen)
    else:
        seen = tl.atomic_add(bar_ptr, 1, sem="acq_rel", scope="gpu") + 1
        while seen < target:
            if SLEEP > 0:
                _sleep(seen, SLEEP)
            seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    if TRACE == 1:
        if pid == 0:
            tl.store(trace_ptr + slot, _now(seen))
    if TRACE == 2:
        tl.store(trace_ptr + (slot * tl.num_programs(0) + pid) * 2 + 1, _now(seen))


@triton.jit
def _ptr(tab_ptr, layer, col, dt):
    """The weight table's entry (an address) as a pointer to ``dt``."""
    return tl.load(tab_ptr + layer * 6 + col).to(tl.pointer_type(dt))


@triton.jit
def _rms_cg(x_ptr, nw_ptr, eps, K: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr):
    """:func:`~engine.models.llama.triton_decode._rms_normed` of ``x [K]`` read through L2 (another
    program wrote it in this kernel): RMSNorm in fp32, rounded to the activation dtype."""
    dt = nw_ptr.dtype.element_ty
    xa = tl.load(x_ptr + tl.arange(0, KM), cache_modifier=".cg").to(tl.float32)
    ss = tl.sum(xa * xa, axis=0)
    if KT > 0:
        t = KM + tl.arange(0, KT)
        xb = tl.load(x_ptr + t, mask=t < K, other=0.0, cache_modifier=".cg").to(tl.float32)
        ss += tl.sum(xb * xb, axis=0)
    else:
        xb = xa
    nwa, nwb = _load_vec(nw_ptr, K, KM, KT)
    rstd = 1.0 / tl.sqrt(ss / K + eps)
    return (xa * rstd * nwa).to(dt).to(tl.float32), (xb * rstd * nwb).to(dt).to(tl.float32)


@triton.jit
def _vec_cg(ptr, K: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr):
    """``ptr[0:K]`` in fp32 as :func:`_load_vec`'s two parts, read through L2."""
    a = tl.load(ptr + tl.arange(0, KM), cache_modifier=".cg").to(tl.float32)
    if KT > 0:
        t = KM + tl.arange(0, KT)
        b = tl.load(ptr + t, mask=t < K, other=0.0, cache_modifier=".cg").to(tl.float32)
    else:
        b = a
    return a, b


@triton.jit
def _qkv_rows(t, R: tl.constexpr, D: tl.constexpr, TILES):
    """Tile ``t`` of the qkv phase: the head, the rotary rows ``r`` (``[R]``) of its low half, and
    the mask (``t`` past the last tile: nothing)."""
    PARTS: tl.constexpr = D // 2 // R
    head = t // PARTS
    r = (t % PARTS) * R + tl.arange(0, R)
    return head, r, r < tl.where(t < TILES, D // 2, 0)


@triton.jit
def _tile_rows(t, BLOCK: tl.constexpr, N):
    n = t * BLOCK + tl.arange(0, BLOCK)
    return n, n < N


@triton.jit
def token_step_kernel(
        token_ptr, emb_ptr, pos_ptr, gather_ptr, slot_out_ptr, tab_ptr, cos_ptr, sin_ptr,
        k_ptr, v_ptr, stride_layer, stride_kv_pos, stride_kv_head, idx_ptr,
        res_ptr, q_ptr, o_ptr, m_ptr, l_ptr, acc_ptr, mlp_ptr,
        normw_ptr, head_w_ptr, logits_ptr, pm_ptr, pi_ptr, bar_ptr,
        argmax_ptr, reported_ptr, host_ptr, trace_ptr,
        chunk, num_splits, bars, scale, eps, final_eps,
        L: tl.constexpr, HIDDEN: tl.constexpr, INTER: tl.constexpr, KM: tl.constexpr, KT: tl.constexpr,
        IM: tl.constexpr, IT: tl.constexpr, OM: tl.constexpr, OT: tl.constexpr,
        H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, V: tl.constexpr,
        QKV_R: tl.constexpr, O_N: tl.constexpr, GU_N: tl.constexpr, DOWN_N: tl.constexpr, HEAD_N: tl.constexpr,
        BLOCK_T: tl.constexpr, SP: tl.constexpr, PP: tl.constexpr, PAGED: tl.constexpr,
        INVALID: tl.constexpr, HOST: tl.constexpr, PREFETCH: tl.constexpr,
        BARRIER: tl.constexpr = 0, TRACE: tl.constexpr = 0, WORK: tl.constexpr = True, SLEEP: tl.constexpr = 0):
    """One greedy token step: ``token`` at ``pos`` -> keys/values at ``pos`` in every layer, logits
    ``[V]``, their argmax into ``token`` and ``argmax``, the argmax or ``INVALID`` into ``reported``
    (and ``host[pos % 2]`` with ``HOST``), ``pos += 1``. Grid ``(P,)``, every program resident.

    Args:
        token_ptr: int64 ``[1]`` the input id (overwritten with the argmax); emb_ptr: ``[vocab,
            HIDDEN]`` embeddings (activation dtype, which every weight shares).
        pos_ptr: int64 ``[1]`` position; gather_ptr: int64 arena slot of every position (``PAGED``);
            slot_out_ptr: int64 ``[1]`` where the write slot is also stored (``PAGED``).
        tab_ptr: int64 ``[L, 6]`` addresses of each layer's input_layernorm, qkv_proj, o_proj,
            post_attention_layernorm, gate_up and down_proj weights (row-major, contiguous).
        cos_ptr, sin_ptr: rotary tables ``[max_pos, D]`` (``sin``'s first half negated).
        k_ptr, v_ptr: layer 0's key/value cache; layer ``i``'s is ``i * stride_layer`` elements on;
            the row of head ``h`` at slot ``s`` starts ``s * stride_kv_pos + h * stride_kv_head`` on.
        idx_ptr: int64 cache row of each position (``arange``, or the paged gather index).
        res_ptr ``[HIDDEN]``, q_ptr/o_ptr ``[H*D]``, mlp_ptr ``[INTER]`` (activation dtype);
            m_ptr/l_ptr ``[SP, H]``, acc_ptr ``[SP, H, D]`` (fp32): scratch.
        normw_ptr, head_w_ptr: the final norm's weight ``[HIDDEN]`` and ``lm_head.weight [V, HIDDEN]``.
        logits_ptr: ``[V]`` output; pm_ptr/pi_ptr: fp32/int32 ``[P]`` each program's maximum and its
            first index; bar_ptr: int32 ``[1]``, 0 at the start and the end of a step.
        chunk, num_splits: the attention's chunks of positions (``num_splits <= SP``); bars: barriers
            a layer (6 with the chunks' merge, else 5).
        KM/KT, IM/IT, OM/OT: ``HIDDEN``, ``INTER`` and ``H*D`` split as :func:`split_k` does.
        QKV_R, O_N, GU_N, DOWN_N, HEAD_N: rows a tile in each GEMV phase (``QKV_R`` rotary pairs).
        PP: a power of two >= P.
        BARRIER, TRACE, WORK (measurements): the barrier's kind (see :func:`_grid_sync`); program 0's
            time after each barrier into ``trace [L * bars + 1]`` (int64 ns); ``WORK=False`` skips
            every phase's work (only the barriers run).
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    dt = emb_ptr.dtype.element_ty
    HALF: tl.constexpr = D // 2
    QKV_TILES: tl.constexpr = (H + 2 * HKV) * (HALF // QKV_R) * WORK
    O_TILES: tl.constexpr = (HIDDEN + O_N - 1) // O_N * WORK
    GU_TILES: tl.constexpr = (INTER + GU_N - 1) // GU_N * WORK
    DOWN_TILES: tl.constexpr = (HIDDEN + DOWN_N - 1) // DOWN_N * WORK
    HEAD_TILES: tl.constexpr = (V + HEAD_N - 1) // HEAD_N * WORK
    G: tl.constexpr = H // HKV
    d = tl.arange(0, D)
    p = tl.load(pos_ptr)
    if PAGED:
        slot = tl.load(gather_ptr + p)
        if pid == 0:
            tl.store(slot_out_ptr, slot)
    else:
        slot = p
    x0_ptr = emb_ptr + tl.load(token_ptr) * HIDDEN
    if TRACE == 1:
        if pid == 0:
            tl.store(trace_ptr, _now(pid))
    if TRACE == 2:
        tl.store(trace_ptr + pid * 2 + 1, _now(pid))
    end_all = p.to(tl.int32) + 1
    # The residual starts as the token's embedding: each program copies the rows its o_proj tiles
    # add to (read back by the same program), while the first norm reads the embedding itself.
    for t in range(pid, O_TILES, nprog):
        n, nm = _tile_rows(t, O_N, HIDDEN)
        tl.store(res_ptr + n, tl.load(x0_ptr + n, mask=nm, other=0.0), mask=nm)

    # The first layer's first qkv tile, read before anything.
    head, r, rm = _qkv_rows(pid, QKV_R, D, QKV_TILES)
    w_qkv = _ptr(tab_ptr, 0, W_QKV, dt)
    wla, wlb = _load_rows(w_qkv, head * D + r, rm, HIDDEN, KM, KT)
    wha, whb = _load_rows(w_qkv, head * D + HALF + r, rm, HIDDEN, KM, KT)
    for layer in range(L):
        b0 = layer * bars
        lay = tl.cast(layer, tl.int64)
        kbase = k_ptr + lay * stride_layer
        vbase = v_ptr + lay * stride_layer
        w_qkv = _ptr(tab_ptr, layer, W_QKV, dt)
        # 1. qkv + RoPE + cache write
        nw1 = _ptr(tab_ptr, layer, W_NORM1, dt)
        if layer == 0:
            xa, xb = _rms_cg(x0_ptr, nw1, eps, HIDDEN, KM, KT)
        else:
            xa, xb = _rms_cg(res_ptr, nw1, eps, HIDDEN, KM, KT)
        for t in range(pid, QKV_TILES, nprog):
            head, r, rm = _qkv_rows(t, QKV_R, D, QKV_TILES)
            if PREFETCH:
                nh, nr, nm = _qkv_rows(t + nprog, QKV_R, D, QKV_TILES)
                nla, nlb = _load_rows(w_qkv, nh * D + nr, nm, HIDDEN, KM, KT)
                nha, nhb = _load_rows(w_qkv, nh * D + HALF + nr, nm, HIDDEN, KM, KT)
            else:
                wla, wlb = _load_rows(w_qkv, head * D + r, rm, HIDDEN, KM, KT)
                wha, whb = _load_rows(w_qkv, head * D + HALF + r, rm, HIDDEN, KM, KT)
            lo = _dot_rows(wla, wlb, xa, xb, KT).to(dt).to(tl.float32)
            hi = _dot_rows(wha, whb, xa, xb, KT).to(dt).to(tl.float32)
            if head < H + HKV:  # queries and keys are rotated: x*cos + rotate_half(x)*sin
                c_lo = tl.load(cos_ptr + p * D + r).to(tl.float32)
                c_hi = tl.load(cos_ptr + p * D + HALF + r).to(tl.float32)
                s_lo = tl.load(sin_ptr + p * D + r).to(tl.float32)
                s_hi = tl.load(sin_ptr + p * D + HALF + r).to(tl.float32)
                lo, hi = lo * c_lo + hi * s_lo, hi * c_hi + lo * s_hi
            if head < H:
                tl.store(q_ptr + head * D + r, lo.to(dt))
                tl.store(q_ptr + head * D + HALF + r, hi.to(dt))
            else:
                if head < H + HKV:
                    base = kbase + slot * stride_kv_pos + (head - H) * stride_kv_head
                else:
                    base = vbase + slot * stride_kv_pos + (head - H - HKV) * stride_kv_head
                tl.store(base + r, lo.to(dt))
                tl.store(base + HALF + r, hi.to(dt))
            if PREFETCH:
                wla, wlb, wha, whb = nla, nlb, nha, nhb
        w_o = _ptr(tab_ptr, layer, W_O, dt)
        if PREFETCH:  # o_proj's first tile streams in through the barrier and the attention
            n, nm = _tile_rows(pid, O_N, HIDDEN)
            woa, wob = _load_rows(w_o, n, nm, H * D, OM, OT)
        _grid_sync(bar_ptr, (b0 + 1) * nprog, trace_ptr, (b0 + 1), BARRIER, TRACE, SLEEP)
        # 2. attention: item = (query head, chunk)
        for item in range(pid, H * num_splits * WORK, nprog):
            qh = item // num_splits
            split = item % num_splits
            kvh = qh // G
            q = tl.load(q_ptr + qh * D + d, cache_modifier=".cg").to(tl.float32)
            start = split * chunk
            end = tl.minimum(start + chunk, end_all)
            mm = tl.full([BLOCK_T], float("-inf"), tl.float32)
            ll = tl.zeros([BLOCK_T], tl.float32)
            aa = tl.zeros([BLOCK_T, D], tl.float32)
            kh = kbase + kvh * stride_kv_head
            vh = vbase + kvh * stride_kv_head
            for t0 in range(start, end, BLOCK_T):
                tt = t0 + tl.arange(0, BLOCK_T)
                tm = tt < end
                rows = tl.load(idx_ptr + tt, mask=tm, other=0)
                off = rows[:, None] * stride_kv_pos + d[None, :]
                k = tl.load(kh + off, mask=tm[:, None], other=0.0, cache_modifier=".cg").to(tl.float32)
                v = tl.load(vh + off, mask=tm[:, None], other=0.0, cache_modifier=".cg").to(tl.float32)
                s = tl.where(tm, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
                m_new = tl.maximum(mm, s)
                m_ok = tl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = tl.exp(mm - m_ok)
                pr = tl.exp(s - m_ok)
                ll = ll * alpha + pr
                aa = aa * alpha[:, None] + pr[:, None] * v
                mm = m_new
            mx = tl.max(mm, axis=0)
            mx_ok = tl.where(mx == float("-inf"), 0.0, mx)  # a chunk wholly past pos: nothing here
            w = tl.exp(mm - mx_ok)
            lsum = tl.sum(ll * w, axis=0)
            acc = tl.sum(aa * w[:, None], axis=0)
            if num_splits == 1:
                tl.store(o_ptr + qh * D + d, (acc / lsum).to(dt))
            else:
                tl.store(m_ptr + split * H + qh, mx)
                tl.store(l_ptr + split * H + qh, lsum)
                tl.store(acc_ptr + (split * H + qh) * D + d, acc)
        if num_splits > 1:  # 3. the chunks' merge, a head at a time
            _grid_sync(bar_ptr, (b0 + 2) * nprog, trace_ptr, (b0 + 2), BARRIER, TRACE, SLEEP)
            sp = tl.arange(0, SP)
            spm = sp < num_splits
            for qh in range(pid, H * WORK, nprog):
                ms = tl.load(m_ptr + sp * H + qh, mask=spm, other=float("-inf"), cache_modifier=".cg")
                w = tl.exp(ms - tl.max(ms, axis=0))  # chunk 0 holds position 0: the maximum is finite
                lsum = tl.sum(tl.load(l_ptr + sp * H + qh, mask=spm, other=0.0, cache_modifier=".cg") * w, axis=0)
                part = tl.load(acc_ptr + (sp * H + qh)[:, None] * D + d[None, :], mask=spm[:, None], other=0.0,
                               cache_modifier=".cg")
                tl.store(o_ptr + qh * D + d, (tl.sum(part * w[:, None], axis=0) / lsum).to(dt))
        _grid_sync(bar_ptr, (b0 + bars - 3) * nprog, trace_ptr, (b0 + bars - 3), BARRIER, TRACE, SLEEP)
        # 4. o_proj + residual
        va, vb = _vec_cg(o_ptr, H * D, OM, OT)
        for t in range(pid, O_TILES, nprog):
            n, nm = _tile_rows(t, O_N, HIDDEN)
            if PREFETCH:
                n2, nm2 = _tile_rows(t + nprog, O_N, HIDDEN)
                na, nb = _load_rows(w_o, n2, nm2, H * D, OM, OT)
            else:
                woa, wob = _load_rows(w_o, n, nm, H * D, OM, OT)
            rr = tl.load(res_ptr + n, mask=nm, other=0.0, cache_modifier=".cg").to(tl.float32)
            y = _dot_rows(woa, wob, va, vb, OT).to(dt).to(tl.float32)
            tl.store(res_ptr + n, (rr + y).to(dt), mask=nm)
            if PREFETCH:
                woa, wob = na, nb
        w_gu = _ptr(tab_ptr, layer, W_GATE_UP, dt)
        if PREFETCH:
            n, nm = _tile_rows(pid, GU_N, INTER)
            wga, wgb = _load_rows(w_gu, n, nm, HIDDEN, KM, KT)
            wua, wub = _load_rows(w_gu, n + INTER, nm, HIDDEN, KM, KT)
        _grid_sync(bar_ptr, (b0 + bars - 2) * nprog, trace_ptr, (b0 + bars - 2), BARRIER, TRACE, SLEEP)
        # 5. norm + gate/up + SwiGLU
        xa, xb = _rms_cg(res_ptr, _ptr(tab_ptr, layer, W_NORM2, dt), eps, HIDDEN, KM, KT)
        for t in range(pid, GU_TILES, nprog):
            n, nm = _tile_rows(t, GU_N, INTER)
            if PREFETCH:
                n2, nm2 = _tile_rows(t + nprog, GU_N, INTER)
                nga, ngb = _load_rows(w_gu, n2, nm2, HIDDEN, KM, KT)
                nua, nub = _load_rows(w_gu, n2 + INTER, nm2, HIDDEN, KM, KT)
            else:
                wga, wgb = _load_rows(w_gu, n, nm, HIDDEN, KM, KT)
                wua, wub = _load_rows(w_gu, n + INTER, nm, HIDDEN, KM, KT)
            gate = _dot_rows(wga, wgb, xa, xb, KT).to(dt).to(tl.float32)
            up = _dot_rows(wua, wub, xa, xb, KT).to(dt).to(tl.float32)
            act = (gate / (1.0 + tl.exp(-gate))).to(dt).to(tl.float32)
            tl.store(mlp_ptr + n, (act * up).to(dt), mask=nm)
            if PREFETCH:
                wga, wgb, wua, wub = nga, ngb, nua, nub
        w_down = _ptr(tab_ptr, layer, W_DOWN, dt)
        if PREFETCH:
            n, nm = _tile_rows(pid, DOWN_N, HIDDEN)
            wda, wdb = _load_rows(w_down, n, nm, INTER, IM, IT)
        _grid_sync(bar_ptr, (b0 + bars - 1) * nprog, trace_ptr, (b0 + bars - 1), BARRIER, TRACE, SLEEP)
        # 6. down + residual
        va, vb = _vec_cg(mlp_ptr, INTER, IM, IT)
        for t in range(pid, DOWN_TILES, nprog):
            n, nm = _tile_rows(t, DOWN_N, HIDDEN)
            if PREFETCH:
                n2, nm2 = _tile_rows(t + nprog, DOWN_N, HIDDEN)
                na, nb = _load_rows(w_down, n2, nm2, INTER, IM, IT)
            else:
                wda, wdb = _load_rows(w_down, n, nm, INTER, IM, IT)
            rr = tl.load(res_ptr + n, mask=nm, other=0.0, cache_modifier=".cg").to(tl.float32)
            y = _dot_rows(wda, wdb, va, vb, IT).to(dt).to(tl.float32)
            tl.store(res_ptr + n, (rr + y).to(dt), mask=nm)
            if PREFETCH:
                wda, wdb = na, nb
        if PREFETCH:  # the next layer's first qkv tile, or the head's
            if layer + 1 < L:
                head, r, rm = _qkv_rows(pid, QKV_R, D, QKV_TILES)
                w_qkv = _ptr(tab_ptr, layer + 1, W_QKV, dt)
                wla, wlb = _load_rows(w_qkv, head * D + r, rm, HIDDEN, KM, KT)
                wha, whb = _load_rows(w_qkv, head * D + HALF + r, rm, HIDDEN, KM, KT)
        _grid_sync(bar_ptr, (b0 + bars) * nprog, trace_ptr, (b0 + bars), BARRIER, TRACE, SLEEP)

    # The final norm, lm_head and each program's first maximum; the last program reduces them.
    xa, xb = _rms_cg(res_ptr, normw_ptr, final_eps, HIDDEN, KM, KT)
    best = tl.full([HEAD_N], float("-inf"), tl.float32)
    best_i = tl.full([HEAD_N], V, tl.int32)
    if PREFETCH:
        n, nm = _tile_rows(pid, HEAD_N, V)
        wa, wb = _load_rows(head_w_ptr, n, nm, HIDDEN, KM, KT)
    for t in range(pid, HEAD_TILES, nprog):
        n, nm = _tile_rows(t, HEAD_N, V)
        if PREFETCH:
            n2, nm2 = _tile_rows(t + nprog, HEAD_N, V)
            na, nb = _load_rows(head_w_ptr, n2, nm2, HIDDEN, KM, KT)
        else:
            wa, wb = _load_rows(head_w_ptr, n, nm, HIDDEN, KM, KT)
        y = _dot_rows(wa, wb, xa, xb, KT).to(dt)
        tl.store(logits_ptr + n, y, mask=nm)
        yf = y.to(tl.float32)
        yf = tl.where(yf != yf, float("inf"), yf)  # NaN wins an argmax, as in torch.max
        yf = tl.where(nm, yf, float("-inf"))
        take = yf > best  # strictly: this lane's earlier tile keeps its lower index
        best_i = tl.where(take, n, best_i)
        best = tl.where(take, yf, best)
        if PREFETCH:
            wa, wb = na, nb
    bm = tl.max(best, axis=0)
    bi = tl.min(tl.where(best == bm, best_i, V), axis=0)
    tl.store(pm_ptr + pid, bm)
    tl.store(pi_ptr + pid, tl.where(bi == V, 0, bi))
    if TRACE == 1:
        if pid == 0:
            tl.store(trace_ptr + L * bars + 1, _now(pid))
    if TRACE == 2:
        tl.store(trace_ptr + ((L * bars + 1) * nprog + pid) * 2, _now(pid))
    tl.debug_barrier()
    total = (L * bars + 1) * nprog
    done = tl.atomic_add(bar_ptr, 1, sem="acq_rel", scope="gpu")
    if done == total - 1:  # every program has arrived: all passed every barrier, so reset it
        j = tl.arange(0, PP)
        jm = j < nprog
        ms = tl.load(pm_ptr + j, mask=jm, other=float("-inf"), cache_modifier=".cg")
        ids = tl.load(pi_ptr + j, mask=jm, other=V, cache_modifier=".cg")
        _emit_argmax(ms, ids, jm, token_ptr, argmax_ptr, reported_ptr, pos_ptr, host_ptr, V, INVALID, HOST)
        tl.atomic_xchg(bar_ptr, 0)
