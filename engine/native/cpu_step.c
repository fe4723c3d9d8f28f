/* One batch-1 decode step of a Llama decoder on the CPU, in one call (engine/native/step.py).
 *
 * Why: eager PyTorch spends ~11 ms of a ~38 ms step in ~6,300 ATen calls (docs/BENCHMARKS.md), and
 * every matmul is a fork/join of the thread pool. Here the whole step is one OpenMP parallel region:
 * the threads split each GEMV's output rows (and attention's heads) and meet at a barrier between
 * dependent ops, as ggml-cpu does. Weights are read in place through raw pointers (float32, int8
 * per-row, or 4-bit blocks: gemv.h), so nothing is copied or converted per token.
 *
 * Plain C with no torch headers: it builds in a second with the system compiler, and does not tie
 * the build to a torch version. The structs mirror ctypes.Structure classes in step.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gemv.h"
#include "gemv_vnni.h"
#include "gemv_avx2.h"
#include "gemm_avx2.h"

#define SMOL_ABI 3

enum { W_F32 = 0, W_I8 = 1, W_Q4 = 2 };

typedef struct {
    int32_t kind, rows, cols, pad;
    const void *w;       /* f32 [rows, cols] | int8 [rows, cols] | uint8 [rows, cols / 2] */
    const uint16_t *scale; /* i8: bf16 [rows]; q4: f16 [rows, cols / 32] */
    const uint16_t *mins;  /* q4: f16 [rows, cols / 32] */
    const float *bias;   /* NULL or float32 [rows] */
} Lin;

typedef struct {
    const float *in_norm, *post_norm;
    Lin qkv, o, gate_up, down;
} Layer;

typedef struct {
    int32_t n_layers, hidden, n_heads, n_kv, head_dim, inter, vocab, pad;
    float eps, pad2;
    const float *final_norm;
    const Layer *layers;
    Lin lm_head;
} Model;

/* Where keys and values of position p, KV head g, layer l live:
 *   k + l * layer_stride + row(p) * pos_stride + g * head_stride   (v likewise)
 * with row(p) = p for the contiguous cache [L, B, H_kv, T, D] and
 *      row(p) = block_table[p / block_size] * block_size + p % block_size for the paged arena
 *      [2, L, num_blocks, block_size, H_kv, D] (vLLM's slot mapping). */
typedef struct {
    float *k, *v;
    int64_t layer_stride, pos_stride, head_stride;
    const int64_t *block_table; /* NULL: contiguous */
    int64_t block_size;
} KV;

int smol_abi(void) { return SMOL_ABI; }

/* 2 = AVX-512 kernels, 1 = AVX2+FMA clones, 0 = baseline. */
int smol_isa(void) {
    if (smol_use_avx512 < 0) {
        smol_use_avx512 = detect_avx512();
#ifdef SMOL_X86
        smol_use_avx2i = !smol_use_vnni && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
#endif
    }
    if (smol_use_avx512) return 2;
#ifdef SMOL_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

/* Integer-dot kernels for int8/4-bit on (1) or off (0): AVX512-VNNI where the CPU has it, else
 * AVX2's vpmaddubsw (gemv_avx2.h). Tests compare them with the float32-activation kernels.
 * Returns 2 (VNNI on), 1 (AVX2 on) or 0 (off, or a CPU with neither). */
int smol_set_intdot(int on) {
    smol_isa();
    int vnni = 0, avx2 = 0;
#ifdef SMOL_X86
    vnni = __builtin_cpu_supports("avx512vnni") && smol_use_avx512;
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
    smol_use_vnni = on && vnni;
    smol_use_avx2i = on && avx2 && !vnni;
    return smol_use_vnni ? 2 : smol_use_avx2i ? 1 : 0;
}

/* y[M, N] = act(the vision tower's int8 GEMM) (gemm_avx2.h) with nthreads OpenMP threads; u (M * K bytes)
 * and d (M floats) are scratch. Returns 0, or -1 on a CPU without AVX2 + FMA (the caller's
 * float32 path runs instead). */
int smol_gemm_q8(const float *x, int64_t M, int64_t K, const int8_t *wq, const float *wscale,
                 const int32_t *wsum, const float *bias, int64_t N, float *y, uint8_t *u, float *d, int act,
                 int nthreads) {
#ifdef SMOL_X86
    if (smol_isa() >= 1) { /* AVX2 + FMA (AVX-512 CPUs have both) */
        q8_gemm_avx2(x, M, K, wq, wscale, wsum, bias, N, y, u, d, act, nthreads);
        return 0;
    }
#endif
    (void)x, (void)M, (void)K, (void)wq, (void)wscale, (void)wsum, (void)bias, (void)N, (void)y, (void)u,
        (void)d, (void)act, (void)nthreads;
    return -1;
}

/* out[r, :] = the float32 weights of 4-bit rows [0, rows) (engine.layers.q4's layout: per block of
 * 32, 16 bytes with q[j] in the low nibble of byte j and q[j + 16] in the high one, and float16
 * scale and min; w = q * scale + min, multiplied then added, no fused multiply-add, as the eager
 * dequantize does). nthreads OpenMP threads split the rows. The eager dequantize (nibble masks, a
 * concatenation, float copies) made 4-bit prefill ~40% slower than float32's; this is one pass
 * that writes each float once. Returns 0. */
__attribute__((optimize("fp-contract=off")))
SMOL_CLONES
static void dequant_q4_rows(const uint8_t *qw, const uint16_t *scales, const uint16_t *mins, int64_t r0, int64_t r1,
                            int64_t cols, float *out) {
    int64_t nb = cols / 32;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *q = qw + r * (cols / 2) + b * 16;
            float s = f16_to_f32(scales[r * nb + b]), mn = f16_to_f32(mins[r * nb + b]);
            float *o = out + r * cols + b * 32;
#pragma omp simd
            for (int j = 0; j < 16; j++) {
                float lo = (float)(q[j] & 15) * s, hi = (float)(q[j] >> 4) * s;
                o[j] = lo + mn;
                o[j + 16] = hi + mn;
            }
        }
}

int smol_dequant_q4(const uint8_t *qw, const uint16_t *scales, const uint16_t *mins, int64_t rows, int64_t cols,
                    float *out, int nthreads) {
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads > 0 ? nthreads : 1)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        dequant_q4_rows(qw, scales, mins, rows * t / nt, rows * (t + 1) / nt, cols, out);
    }
#else
    (void)nthreads;
    dequant_q4_rows(qw, scales, mins, 0, rows, cols, out);
#endif
    return 0;
}

int smol_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* ---- scratch ------------------------------------------------------------------------------- */
/* Shared buffers (floats): x, qkv, attn, act, xsum;  per thread: xn, rows (GEMV partials), scores. */
typedef struct {
    float *x, *qkv, *attn, *act, *xsum;
    float *xn, *rows, *scores;
    int64_t per_thread;
} Scratch;

#define CHUNK 16 /* rows per grab: one grab is ~37 KB of float32 weights at hidden 576 */

static int64_t round16(int64_t n) { return (n + 15) & ~(int64_t)15; }

static int64_t widest(const Model *m) {
    int64_t w = m->hidden;
    if (m->inter > w) w = m->inter;
    if ((int64_t)m->n_heads * m->head_dim > w) w = (int64_t)m->n_heads * m->head_dim;
    return w;
}

/* Per thread: xn, GEMV partials, attention scores, and the quantized GEMV input (QX: 2K bytes of
 * int8, K/4 lane scales, K/32 block sums, rounded up). */
static int64_t per_thread_floats(const Model *m, int64_t max_pos) {
    int64_t w = round16(widest(m) + 128);
    return w + 2 * CHUNK + round16(max_pos) + w / 2 + w / 2 + w / 8 + 64;
}

/* Floats of scratch smol_step needs for up to max_pos positions and max_threads threads. */
int64_t smol_scratch_floats(const Model *m, int64_t max_pos, int64_t max_threads) {
    int64_t qkv = (int64_t)(m->n_heads + 2 * m->n_kv) * m->head_dim;
    int64_t shared = 2 * round16(m->hidden) + round16(qkv) + round16(widest(m)) + round16(m->inter) +
                     round16(widest(m) / 32 + 1);
    return shared + max_threads * per_thread_floats(m, max_pos) + 64;
}

static void carve(float *base, const Model *m, int64_t max_pos, Scratch *s) {
    int64_t qkv = (int64_t)(m->n_heads + 2 * m->n_kv) * m->head_dim;
    s->x = base;
    s->qkv = s->x + 2 * round16(m->hidden);
    s->attn = s->qkv + round16(qkv);
    s->act = s->attn + round16(widest(m));
    s->xsum = s->act + round16(m->inter);
    s->xn = s->xsum + round16(widest(m) / 32 + 1);
    s->per_thread = per_thread_floats(m, max_pos);
    s->rows = s->xn + round16(widest(m));
    s->scores = s->rows + 2 * CHUNK;
}

/* ---- ops run by every thread inside the parallel region ------------------------------------ */
/* Guided hand-out of rows [*r0, *r1): big ranges first (half the remainder split between the
 * threads), CHUNK at the end. A thread then streams one long contiguous range, which the hardware
 * prefetcher follows, instead of jumping to a new 16-row chunk every few KB; the small tail
 * ranges still let a thread that got a core late catch up. Returns 0 when no rows are left. */
static inline int grab(int *counter, int rows, int nt, int *r0, int *r1) {
    int c = __atomic_load_n(counter, __ATOMIC_RELAXED);
    for (;;) {
        if (c >= rows) return 0;
        int size = (rows - c) / (2 * nt);
        size = size < CHUNK ? CHUNK : (size + CHUNK - 1) / CHUNK * CHUNK;
        int end = c + size < rows ? c + size : rows;
        if (__atomic_compare_exchange_n(counter, &c, end, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            *r0 = c;
            *r1 = end;
            return 1;
        }
    }
}

static inline void barrier(int nt) {
    if (nt == 1) return;
#ifdef _OPENMP
#pragma omp barrier
#endif
}

static void rmsnorm(const float *x, const float *w, int n, float eps, float *out) {
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
#pragma omp simd
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

/* A thread's working buffers: GEMV partials and the GEMV input as the weight kernels want it. */
typedef struct {
    float *tmp;  /* 2 * CHUNK partial results */
    QX qx;       /* quantized input (integer-dot kernels) and, for 4-bit, the float block sums */
    int vnni;    /* this GEMV runs the AVX512-VNNI integer-dot kernels */
    int avx2i;   /* this GEMV runs the AVX2 integer-dot kernels */
    int nt;      /* threads in the step */
} Work;

/* Prepare x for L's kernel (each thread its own copy: K floats of work, no barrier needed). */
static void prepare(const Lin *L, const float *x, Work *wk) {
    wk->vnni = smol_use_vnni && L->kind != W_F32 && L->cols % 32 == 0;
    wk->avx2i = !wk->vnni && smol_use_avx2i && L->kind != W_F32 && L->cols % 32 == 0 && L->cols <= 16384;
    if (wk->vnni) {
        if (L->kind == W_I8) qx_prepare_i8(x, L->cols, &wk->qx);
        else qx_prepare_q4(x, L->cols, &wk->qx);
#ifdef SMOL_X86
    } else if (wk->avx2i) {
        if (L->kind == W_I8) qx_prepare_i8_avx2(x, L->cols, &wk->qx);
        else qx_prepare_q4_avx2(x, L->cols, &wk->qx);
#endif
    } else if (L->kind == W_Q4) {
        for (int b = 0; b < L->cols / 32; b++) {
            float s = 0.f;
            for (int j = 0; j < 32; j++) s += x[b * 32 + j];
            wk->qx.xsum[b] = s;
        }
    }
}

static void dot_rows(const Lin *L, const float *x, const Work *wk, int r0, int r1, float *out) {
    if (L->kind == W_F32) f32_rows((const float *)L->w, L->cols, x, r0, r1, out);
#ifdef SMOL_X86
    else if (wk->vnni && L->kind == W_I8) i8_rows_vnni((const int8_t *)L->w, L->scale, L->cols, &wk->qx, r0, r1, out);
    else if (wk->vnni) q4_rows_vnni((const uint8_t *)L->w, L->scale, L->mins, L->cols, &wk->qx, r0, r1, out);
    else if (wk->avx2i && L->kind == W_I8) i8_rows_avx2((const int8_t *)L->w, L->scale, L->cols, &wk->qx, r0, r1, out);
    else if (wk->avx2i) q4_rows_avx2((const uint8_t *)L->w, L->scale, L->mins, L->cols, &wk->qx, r0, r1, out);
#endif
    else if (L->kind == W_I8) i8_rows((const int8_t *)L->w, L->scale, L->cols, x, r0, r1, out);
    else q4_rows((const uint8_t *)L->w, L->scale, L->mins, L->cols, x, wk->qx.xsum, r0, r1, out);
    if (L->bias)
        for (int r = r0; r < r1; r++) out[r - r0] += L->bias[r];
}

/* y[r] = (accumulate ? y[r] : 0) + W[r] . x for all rows, rows handed out CHUNK at a time. */
static void gemv(const Lin *L, const float *x, Work *wk, float *y, int accumulate, int *counter) {
    prepare(L, x, wk);
    float *tmp = wk->tmp;
    int g0, g1;
    while (grab(counter, L->rows, wk->nt, &g0, &g1))
        for (int r0 = g0; r0 < g1; r0 += CHUNK) {
            int r1 = r0 + CHUNK < g1 ? r0 + CHUNK : g1;
            dot_rows(L, x, wk, r0, r1, tmp);
            if (accumulate)
                for (int r = r0; r < r1; r++) y[r] += tmp[r - r0];
            else
                for (int r = r0; r < r1; r++) y[r] = tmp[r - r0];
        }
}

/* act[i] = silu(gate[i]) * up[i] with gate = rows [0, I) and up = rows [I, 2I) of gate_up. */
static void gate_up_silu(const Lin *L, const float *x, Work *wk, int inter, float *act, int *counter) {
    prepare(L, x, wk);
    float *tmp = wk->tmp;
    int g0, g1;
    while (grab(counter, inter, wk->nt, &g0, &g1))
        for (int r0 = g0; r0 < g1; r0 += CHUNK) {
            int r1 = r0 + CHUNK < g1 ? r0 + CHUNK : g1;
            dot_rows(L, x, wk, r0, r1, tmp);
            dot_rows(L, x, wk, inter + r0, inter + r1, tmp + CHUNK);
            for (int r = r0; r < r1; r++) {
                float g = tmp[r - r0];
                act[r] = g / (1.0f + expf(-g)) * tmp[CHUNK + r - r0];
            }
        }
}

/* Rotate-half RoPE with the model's table: out = x * cos + roll(x, D/2) * signed_sin. */
static void rope(float *x, const float *cos, const float *ssin, int d) {
    float tmp[512];
    int half = d / 2;
    for (int i = 0; i < d; i++) tmp[i] = x[i] * cos[i] + x[(i + half) % d] * ssin[i];
    memcpy(x, tmp, sizeof(float) * d);
}

static inline int64_t kv_row(const KV *kv, int64_t p) {
    if (!kv->block_table) return p;
    return kv->block_table[p / kv->block_size] * kv->block_size + p % kv->block_size;
}

/* Positions [t0, t0 + run) sit in consecutive cache rows starting at the returned row: a paged
 * cache's block holds block_size of them. Looking the row up once per run instead of once per
 * position keeps a division out of attention's inner loops (profiled at ~4% of a step). */
static inline int64_t kv_run(const KV *kv, int64_t t0, int64_t T, int64_t *run) {
    if (!kv->block_table) {
        *run = T - t0;
        return t0;
    }
    int64_t in_block = t0 % kv->block_size, n = kv->block_size - in_block;
    *run = n < T - t0 ? n : T - t0;
    return kv->block_table[t0 / kv->block_size] * kv->block_size + in_block;
}

/* One query head over positions [0, T): float32 softmax of q.k / sqrt(D), then the weighted sum of v. */
/* The newest position (T - 1) is read from k_new / v_new, this step's own vectors, so attention
 * need not wait for the thread that writes them into the cache. Cloned like the GEMV kernels: the
 * baseline build is SSE, 4 floats an instruction. */
SMOL_CLONES
static void attend(const float *q, const float *kb, const float *vb, const KV *kv, int64_t T, int d,
                   const float *k_new, const float *v_new, float *scores, float *out) {
    float scale = 1.0f / sqrtf((float)d), mx = -INFINITY;
    for (int64_t t0 = 0, run; t0 < T; t0 += run) {
        const float *k = kb + kv_run(kv, t0, T, &run) * kv->pos_stride;
        for (int64_t j = 0; j < run; j++, k += kv->pos_stride) {
            const float *kr = t0 + j == T - 1 ? k_new : k;
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < d; i++) s += q[i] * kr[i];
            s *= scale;
            scores[t0 + j] = s;
            if (s > mx) mx = s;
        }
    }
    float sum = 0.f;
    for (int64_t t = 0; t < T; t++) {
        scores[t] = expf(scores[t] - mx);
        sum += scores[t];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < d; i++) out[i] = 0.f;
    for (int64_t t0 = 0, run; t0 < T; t0 += run) {
        const float *v = vb + kv_run(kv, t0, T, &run) * kv->pos_stride;
        for (int64_t j = 0; j < run; j++, v += kv->pos_stride) {
            const float *vr = t0 + j == T - 1 ? v_new : v;
            float p = scores[t0 + j] * inv;
#pragma omp simd
            for (int i = 0; i < d; i++) out[i] += p * vr[i];
        }
    }
}

#ifdef SMOL_X86
#define AVX512F __attribute__((target("avx512f,avx512dq,fma")))

/* e^x in 16 lanes for x <= 0 (softmax after the max is subtracted): x = n ln2 + r with |r| <= ln2/2
 * (Cody-Waite, ln2 split in two), e^r by its Taylor series to r^6 (truncation < 2e-7 relative),
 * then the exponent by vscalefps. Below -87.3 (e^x under float's normal range) it returns ~0. A NaN
 * stays NaN (vmaxps returns its second operand when either is NaN), as libm's expf keeps it. */
AVX512F static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-87.3f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.f / 720.f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

/* attend() for head_dim a multiple of 16 up to 256, 16 floats an instruction: q (pre-scaled) and the
 * output are vectors held across positions (in registers at head_dim 64, the usual size), and the
 * softmax's exponentials run 16 at a time. The compiler's version reduced and stored per 16 floats
 * and called libm's expf per position: ~7% of an int8 decode step at 58-186 positions (perf). */
AVX512F static void attend_avx512(const float *q, const float *kb, const float *vb, const KV *kv, int64_t T,
                                  int d, const float *k_new, const float *v_new, float *scores, float *out) {
    int nv = d / 16;
    __m512 qv[16], ov[16];
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf((float)d));
    for (int i = 0; i < nv; i++) {
        qv[i] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * i), scale);
        ov[i] = _mm512_setzero_ps();
    }
    float mx = -INFINITY;
    for (int64_t t0 = 0, run; t0 < T; t0 += run) {
        const float *k = kb + kv_run(kv, t0, T, &run) * kv->pos_stride;
        for (int64_t j = 0; j < run; j++, k += kv->pos_stride) {
            const float *kr = t0 + j == T - 1 ? k_new : k;
            __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kr));
            for (int i = 1; i < nv; i++) acc = _mm512_fmadd_ps(qv[i], _mm512_loadu_ps(kr + 16 * i), acc);
            float s = _mm512_reduce_add_ps(acc);
            scores[t0 + j] = s;
            mx = s > mx ? s : mx;
        }
    }
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 vsum = _mm512_setzero_ps();
    int64_t t = 0;
    for (; t + 16 <= T; t += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(scores + t), vmx));
        _mm512_storeu_ps(scores + t, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (t < T) {
        __mmask16 m = (__mmask16)((1u << (T - t)) - 1);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + t), vmx));
        _mm512_mask_storeu_ps(scores + t, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    const float inv = 1.0f / _mm512_reduce_add_ps(vsum);
    for (int64_t t0 = 0, run; t0 < T; t0 += run) {
        const float *v = vb + kv_run(kv, t0, T, &run) * kv->pos_stride;
        for (int64_t j = 0; j < run; j++, v += kv->pos_stride) {
            const float *vr = t0 + j == T - 1 ? v_new : v;
            __m512 p = _mm512_set1_ps(scores[t0 + j]);
            for (int i = 0; i < nv; i++) ov[i] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vr + 16 * i), ov[i]);
        }
    }
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int i = 0; i < nv; i++) _mm512_storeu_ps(out + 16 * i, _mm512_mul_ps(ov[i], vinv));
}
#endif

static int smol_use_attn512 = -1; /* -1: not decided yet (smol_set_attn) */

/* attend_avx512 on (nonzero, the default) or off (0) where the CPU has AVX-512; returns whether
 * it is on. Tests compare the two. */
int smol_set_attn(int on) {
    int have = smol_isa() == 2;
    smol_use_attn512 = have && on != 0;
    return smol_use_attn512;
}

static inline void attend_any(const float *q, const float *kb, const float *vb, const KV *kv, int64_t T, int d,
                              const float *k_new, const float *v_new, float *scores, float *out) {
#ifdef SMOL_X86
    if (smol_use_attn512 && d % 16 == 0 && d <= 256) {
        attend_avx512(q, kb, vb, kv, T, d, k_new, v_new, scores, out);
        return;
    }
#endif
    attend(q, kb, vb, kv, T, d, k_new, v_new, scores, out);
}

/* Ops per layer that hand out work through a counter; one counter per op per step. */
#define OPS_PER_LAYER 5

/* Layer l at position pos: x += attn(norm(x)); x += mlp(norm(x)). */
static void layer_step(const Model *m, int l, const KV *kv, int64_t pos, const float *cos, const float *ssin,
                       Scratch *s, float *xn, Work *wk, float *scores, int *ctr, int tid, int nt) {
    const Layer *L = &m->layers[l];
    int H = m->n_heads, G = m->n_kv, D = m->head_dim;
    rmsnorm(s->x, L->in_norm, m->hidden, m->eps, xn);
    gemv(&L->qkv, xn, wk, s->qkv, 0, &ctr[0]);
    barrier(nt);
    /* Every thread rotates every new key into its own buffer (xn is free again: the qkv GEMV has
     * read it); KV head g's owner stores key and value in the cache. Attention reads the new
     * position from these vectors and older ones from the cache, so no barrier sits between the
     * cache write and attention (one fewer per layer). */
    float *k_rot = xn;
    for (int g = 0; g < G; g++) {
        float *k = k_rot + (int64_t)g * D, *v = s->qkv + (int64_t)(H + G + g) * D;
        memcpy(k, s->qkv + (int64_t)(H + g) * D, sizeof(float) * D);
        rope(k, cos, ssin, D);
        if (g % nt == tid) {
            int64_t off = l * kv->layer_stride + kv_row(kv, pos) * kv->pos_stride + g * kv->head_stride;
            memcpy(kv->k + off, k, sizeof(float) * D);
            memcpy(kv->v + off, v, sizeof(float) * D);
        }
    }
    for (int h = tid; h < H; h += nt) {
        int g = h / (H / G);
        float *q = s->qkv + (int64_t)h * D;
        rope(q, cos, ssin, D);
        int64_t base = l * kv->layer_stride + g * kv->head_stride;
        attend_any(q, kv->k + base, kv->v + base, kv, pos + 1, D, k_rot + (int64_t)g * D,
               s->qkv + (int64_t)(H + G + g) * D, scores, s->attn + (int64_t)h * D);
    }
    barrier(nt);
    gemv(&L->o, s->attn, wk, s->x, 1, &ctr[1]);
    barrier(nt);
    rmsnorm(s->x, L->post_norm, m->hidden, m->eps, xn);
    gate_up_silu(&L->gate_up, xn, wk, m->inter, s->act, &ctr[2]);
    barrier(nt);
    gemv(&L->down, s->act, wk, s->x, 1, &ctr[3]);
    barrier(nt);
}

/* Everything one thread does in a step (thread tid of nt); barriers separate dependent ops. */
static void run_thread(const Model *m, const KV *kv, int64_t pos, const float *cos, const float *ssin,
                       float *logits, Scratch *s, int *ctr, int n_ops, int64_t max_pos, int tid, int nt) {
    float *mine = s->xn + tid * s->per_thread;
    int64_t w = round16(widest(m) + 128);
    Work wk;
    wk.nt = nt;
    wk.tmp = mine + w;
    float *scores = wk.tmp + 2 * CHUNK;
    wk.qx.q = (int8_t *)(scores + round16(max_pos)); /* 2w bytes = w/2 floats */
    wk.qx.dv = scores + round16(max_pos) + w / 2;
    wk.qx.xsum = wk.qx.dv + w / 2;
    for (int l = 0; l < m->n_layers; l++)
        layer_step(m, l, kv, pos, cos, ssin, s, mine, &wk, scores, ctr + l * OPS_PER_LAYER, tid, nt);
    rmsnorm(s->x, m->final_norm, m->hidden, m->eps, mine);
    gemv(&m->lm_head, mine, &wk, logits, 0, &ctr[n_ops - 1]);
}

/* The decode step: x_in [hidden] at position pos -> logits [vocab]; writes every layer's key and
 * value at pos. cos/ssin are the RoPE table rows of pos. scratch holds smol_scratch_floats(m,
 * pos + 1, nthreads) floats. Returns 0, or -1 for arguments this build cannot run. */
int smol_step(const Model *m, const KV *kv, const float *x_in, int64_t pos, const float *cos, const float *ssin,
              float *logits, int nthreads, float *scratch, int64_t max_pos) {
    if (smol_use_avx512 < 0) smol_isa();
    if (smol_use_attn512 < 0) smol_set_attn(1);
    if (m->head_dim > 512 || m->hidden > 32768 || pos >= max_pos || nthreads < 1) return -1;
    Scratch s;
    carve(scratch, m, max_pos, &s);
    memcpy(s.x, x_in, sizeof(float) * m->hidden);
    int n_ops = m->n_layers * OPS_PER_LAYER + 1;
    int *ctr = (int *)calloc((size_t)n_ops, sizeof(int));
    if (!ctr) return -1;
    if (nthreads == 1) {
        /* No parallel region at all: entering one of size 1 after torch ran a team of 2 re-docks
         * torch's idle pool thread, and on a busy machine the master then spins until that
         * thread gets a core (profiled: as much time in libgomp's spin loop as in the kernels). */
        run_thread(m, kv, pos, cos, ssin, logits, &s, ctr, n_ops, max_pos, 0, 1);
    } else {
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
        run_thread(m, kv, pos, cos, ssin, logits, &s, ctr, n_ops, max_pos, omp_get_thread_num(),
                   omp_get_num_threads());
#else
        run_thread(m, kv, pos, cos, ssin, logits, &s, ctr, n_ops, max_pos, 0, 1);
#endif
    }
    free(ctr);
    return 0;
}
