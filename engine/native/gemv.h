/* Row dot products of batch-1 decode (GEMV) for three weight formats, with an AVX-512 path and a
 * portable path that gcc clones for AVX2+FMA and baseline x86-64 (chosen at run time, never
 * -march=native: the library is built once and shipped).
 *
 *   f32:  W float32 [rows, K]
 *   i8:   W int8 [rows, K], scale bf16 [rows]  (engine.layers.linear.Int8Linear: y = scale * (Wq . x))
 *   q4:   W uint8 [rows, K/2], scale and min float16 [rows, K/32]  (engine.layers.q4.Q4Linear):
 *         block b of 32 weights is 16 bytes; byte j holds q[j] (low nibble) and q[j+16] (high);
 *         w = q * scale + min, so a row is sum_b scale_b * (q_b . x_b) + min_b * sum(x_b).
 *
 * Activations stay float32: weights are widened in registers, so each result equals the dot with
 * the dequantized weights up to float32 summation order. Batch-1 decode is bound by the bytes of
 * weights streamed from memory; the arithmetic only has to keep up with it.
 *
 * Every kernel computes out[r - r0] for rows r in [r0, r1).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SMOL_X86 1
#endif

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000 | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- portable kernels (auto-vectorised; cloned per ISA on x86-64) -------------------------- */
#if defined(SMOL_X86) && !defined(SMOL_NO_CLONES)
#define SMOL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SMOL_CLONES
#endif

SMOL_CLONES
static void f32_rows_generic(const float *W, int K, const float *x, int r0, int r1, float *out) {
    for (int r = r0; r < r1; r++) {
        const float *w = W + (size_t)r * K;
        float acc = 0.f;
#pragma omp simd reduction(+ : acc)
        for (int k = 0; k < K; k++) acc += w[k] * x[k];
        out[r - r0] = acc;
    }
}

SMOL_CLONES
static void i8_rows_generic(const int8_t *W, const uint16_t *scale, int K, const float *x, int r0, int r1,
                            float *out) {
    for (int r = r0; r < r1; r++) {
        const int8_t *w = W + (size_t)r * K;
        float acc = 0.f;
#pragma omp simd reduction(+ : acc)
        for (int k = 0; k < K; k++) acc += (float)w[k] * x[k];
        out[r - r0] = acc * bf16_to_f32(scale[r]);
    }
}

SMOL_CLONES
static void q4_rows_generic(const uint8_t *W, const uint16_t *scale, const uint16_t *mins, int K,
                            const float *x, const float *xsum, int r0, int r1, float *out) {
    int nb = K / 32;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = W + (size_t)r * (K / 2);
        float total = 0.f;
        for (int b = 0; b < nb; b++) {
            const uint8_t *q = w + b * 16;
            const float *xb = x + b * 32;
            float acc = 0.f;
#pragma omp simd reduction(+ : acc)
            for (int j = 0; j < 16; j++) acc += (float)(q[j] & 15) * xb[j] + (float)(q[j] >> 4) * xb[j + 16];
            total += acc * f16_to_f32(scale[(size_t)r * nb + b]) + f16_to_f32(mins[(size_t)r * nb + b]) * xsum[b];
        }
        out[r - r0] = total;
    }
}

/* ---- AVX-512 kernels ----------------------------------------------------------------------- */
#ifdef SMOL_X86
/* The integer-dot kernels touch a weight row's bytes (~0.3-1.5 KB) in a few dozen instructions,
 * and the hardware prefetchers, which start afresh at each row and each thread's range, left them
 * stalled on loads: on a 2-core Xeon (AVX-512, AMX) int8 decode read its weights at ~17 GB/s
 * against the machine's ~24. Asking for each cache line 4 KB ahead of the one being read took int8
 * decode from ~116 to ~147 tok/s and 4-bit from ~150 to ~265 (the AVX2 kernels, forced there, from
 * ~94 to ~135 and ~130 to ~214); float32 kernels, at the memory's rate already, gained nothing. A
 * prefetch past the end of the weights is harmless: prefetches never fault. */
#define SMOL_PREFETCH_AHEAD 4096
#define smol_prefetch(p) _mm_prefetch((const char *)(p) + SMOL_PREFETCH_AHEAD, _MM_HINT_T0)

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* Four rows at a time: four independent FMA chains and four weight streams in flight, one load of
 * x per 16 columns. The K % 16 tail uses masked loads. */
AVX512 static void f32_rows_avx512(const float *W, int K, const float *x, int r0, int r1, float *out) {
    int r = r0;
    int tail = K & 15;
    __mmask16 m = (__mmask16)((1u << tail) - 1);
    for (; r + 4 <= r1; r += 4) {
        const float *w0 = W + (size_t)r * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int k = 0;
        for (; k + 16 <= K; k += 16) {
            __m512 xv = _mm512_loadu_ps(x + k);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + k), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + k), xv, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + k), xv, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + k), xv, a3);
        }
        if (tail) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w0 + k), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w1 + k), xv, a1);
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w2 + k), xv, a2);
            a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w3 + k), xv, a3);
        }
        out[r - r0] = _mm512_reduce_add_ps(a0);
        out[r - r0 + 1] = _mm512_reduce_add_ps(a1);
        out[r - r0 + 2] = _mm512_reduce_add_ps(a2);
        out[r - r0 + 3] = _mm512_reduce_add_ps(a3);
    }
    for (; r < r1; r++) {
        const float *w0 = W + (size_t)r * K;
        __m512 a0 = _mm512_setzero_ps();
        int k = 0;
        for (; k + 16 <= K; k += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + k), _mm512_loadu_ps(x + k), a0);
        if (tail) a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w0 + k), _mm512_maskz_loadu_ps(m, x + k), a0);
        out[r - r0] = _mm512_reduce_add_ps(a0);
    }
}

AVX512 static inline __m512 i8x16_ps(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

AVX512 static inline __m512 i8x16_ps_mask(const int8_t *p, __mmask16 m) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

AVX512 static void i8_rows_avx512(const int8_t *W, const uint16_t *scale, int K, const float *x, int r0, int r1,
                                  float *out) {
    int tail = K & 15;
    __mmask16 m = (__mmask16)((1u << tail) - 1);
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
        const int8_t *w0 = W + (size_t)r * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int k = 0;
        for (; k + 16 <= K; k += 16) {
            __m512 xv = _mm512_loadu_ps(x + k);
            a0 = _mm512_fmadd_ps(i8x16_ps(w0 + k), xv, a0);
            a1 = _mm512_fmadd_ps(i8x16_ps(w1 + k), xv, a1);
            a2 = _mm512_fmadd_ps(i8x16_ps(w2 + k), xv, a2);
            a3 = _mm512_fmadd_ps(i8x16_ps(w3 + k), xv, a3);
        }
        if (tail) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
            a0 = _mm512_fmadd_ps(i8x16_ps_mask(w0 + k, m), xv, a0);
            a1 = _mm512_fmadd_ps(i8x16_ps_mask(w1 + k, m), xv, a1);
            a2 = _mm512_fmadd_ps(i8x16_ps_mask(w2 + k, m), xv, a2);
            a3 = _mm512_fmadd_ps(i8x16_ps_mask(w3 + k, m), xv, a3);
        }
        out[r - r0] = _mm512_reduce_add_ps(a0) * bf16_to_f32(scale[r]);
        out[r - r0 + 1] = _mm512_reduce_add_ps(a1) * bf16_to_f32(scale[r + 1]);
        out[r - r0 + 2] = _mm512_reduce_add_ps(a2) * bf16_to_f32(scale[r + 2]);
        out[r - r0 + 3] = _mm512_reduce_add_ps(a3) * bf16_to_f32(scale[r + 3]);
    }
    for (; r < r1; r++) {
        const int8_t *w0 = W + (size_t)r * K;
        __m512 a0 = _mm512_setzero_ps();
        int k = 0;
        for (; k + 16 <= K; k += 16) a0 = _mm512_fmadd_ps(i8x16_ps(w0 + k), _mm512_loadu_ps(x + k), a0);
        if (tail) a0 = _mm512_fmadd_ps(i8x16_ps_mask(w0 + k, m), _mm512_maskz_loadu_ps(m, x + k), a0);
        out[r - r0] = _mm512_reduce_add_ps(a0) * bf16_to_f32(scale[r]);
    }
}

/* One 32-weight block against x[0:32): (q_lo . x_lo) + (q_hi . x_hi) as 16 partial sums. */
AVX512 static inline __m512 q4_block(const uint8_t *q, const float *xb) {
    __m128i b = _mm_loadu_si128((const __m128i *)q);
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), _mm512_loadu_ps(xb));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), _mm512_loadu_ps(xb + 16), t);
}

/* Two rows at a time; a row's float16 scales and mins are widened 16 at a time into a small
 * buffer first (rows are at most 16384 columns = 512 blocks here; longer rows take the generic
 * kernel, see q4_rows). */
AVX512 static void q4_rows_avx512(const uint8_t *W, const uint16_t *scale, const uint16_t *mins, int K,
                                  const float *x, const float *xsum, int r0, int r1, float *out) {
    int nb = K / 32;
    float s[2][512], mn[2][512];
    for (int r = r0; r < r1; r += 2) {
        int rows = r + 1 < r1 ? 2 : 1;
        float msum[2] = {0.f, 0.f};
        for (int i = 0; i < rows; i++) {
            const uint16_t *sc = scale + (size_t)(r + i) * nb, *mi = mins + (size_t)(r + i) * nb;
            int b = 0;
            for (; b + 16 <= nb; b += 16) {
                _mm512_storeu_ps(s[i] + b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + b))));
                _mm512_storeu_ps(mn[i] + b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mi + b))));
            }
            for (; b < nb; b++) { s[i][b] = _cvtsh_ss(sc[b]); mn[i][b] = _cvtsh_ss(mi[b]); }
            for (b = 0; b < nb; b++) msum[i] += mn[i][b] * xsum[b];
        }
        const uint8_t *w0 = W + (size_t)r * (K / 2), *w1 = w0 + K / 2;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        if (rows == 2) {
            for (int b = 0; b < nb; b++) {
                a0 = _mm512_fmadd_ps(q4_block(w0 + b * 16, x + b * 32), _mm512_set1_ps(s[0][b]), a0);
                a1 = _mm512_fmadd_ps(q4_block(w1 + b * 16, x + b * 32), _mm512_set1_ps(s[1][b]), a1);
            }
            out[r - r0] = _mm512_reduce_add_ps(a0) + msum[0];
            out[r - r0 + 1] = _mm512_reduce_add_ps(a1) + msum[1];
        } else {
            for (int b = 0; b < nb; b++)
                a0 = _mm512_fmadd_ps(q4_block(w0 + b * 16, x + b * 32), _mm512_set1_ps(s[0][b]), a0);
            out[r - r0] = _mm512_reduce_add_ps(a0) + msum[0];
        }
    }
}
#endif /* SMOL_X86 */

/* ---- dispatch ------------------------------------------------------------------------------ */
static int smol_use_avx512 = -1; /* set once by smol_isa() */
static int smol_use_vnni = 0;     /* AVX512-VNNI: the integer-dot kernels of gemv_vnni.h */
static int smol_use_avx2i = 0;    /* AVX2 without VNNI: the integer-dot kernels of gemv_avx2.h */

static int detect_avx512(void) {
#ifdef SMOL_X86
    __builtin_cpu_init();
    smol_use_vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vnni");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

static void f32_rows(const float *W, int K, const float *x, int r0, int r1, float *out) {
#ifdef SMOL_X86
    if (smol_use_avx512) { f32_rows_avx512(W, K, x, r0, r1, out); return; }
#endif
    f32_rows_generic(W, K, x, r0, r1, out);
}

static void i8_rows(const int8_t *W, const uint16_t *scale, int K, const float *x, int r0, int r1, float *out) {
#ifdef SMOL_X86
    if (smol_use_avx512) { i8_rows_avx512(W, scale, K, x, r0, r1, out); return; }
#endif
    i8_rows_generic(W, scale, K, x, r0, r1, out);
}

static void q4_rows(const uint8_t *W, const uint16_t *scale, const uint16_t *mins, int K, const float *x,
                    const float *xsum, int r0, int r1, float *out) {
#ifdef SMOL_X86
    if (smol_use_avx512 && K <= 16384) { q4_rows_avx512(W, scale, mins, K, x, xsum, r0, r1, out); return; }
#endif
    q4_rows_generic(W, scale, mins, K, x, xsum, r0, r1, out);
}
