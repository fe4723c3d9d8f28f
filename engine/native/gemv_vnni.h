/* Integer-dot GEMV kernels for int8 and 4-bit weights on CPUs with AVX512-VNNI (vpdpbusd).
 *
 * Why: widening each weight to float32 (gemv.h) costs ~3 instructions per 16 weights, and at
 * 1-2 bytes per weight that arithmetic, not memory, limited int8 and 4-bit decode. As llama.cpp
 * does for Q8_0 and Q4_1, the GEMV input x is quantized once per GEMV to int8 in blocks of 32
 * (d_b = max|x_b| / 127), and one vpdpbusd multiplies 64 weight bytes by 64 activation bytes.
 * The result differs from the float32-activation product by the activation rounding (~0.3% of a
 * row's dot product); tests/engine/test_cpu_step.py bounds it.
 *
 *   int8:  vpdpbusd takes unsigned x signed bytes, so weights go in as w ^ 0x80 = w + 128 (u8) and
 *          the extra 128 * sum(xq_b) per block, the same for every row, is subtracted once:
 *          y = s_w * (sum_b d_b * isum_b - C),  C = 128 * sum_b d_b * sum(xq_b).
 *   4-bit: the nibbles are already unsigned. 64 packed bytes are 4 blocks; their low nibbles are
 *          x[0:16) of each block and the high ones x[16:32), so x is stored in that order
 *          (per 4 blocks: 64 "low" bytes, then 64 "high" bytes), and int32 lanes 4k..4k+3 hold
 *          block k's sum: y = sum_b scale_b * d_b * isum_b + sum_b min_b * sum(x_b).
 */
#ifdef SMOL_X86
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

/* Quantized GEMV input, prepared once per GEMV by each thread. */
typedef struct {
    int8_t *q;     /* int8 activations (layout per kernel) */
    float *dv;     /* per-lane block scales, 16 per 64 (int8) or per 128 (4-bit) inputs */
    float *xsum;   /* float sum of each block of 32 (4-bit min term) */
    float c;       /* int8: 128 * sum_b d_b * sum(xq_b) */
} QX;

static inline float block_quant(const float *x, int8_t *q, int qstride_half) {
    /* Quantize 32 floats; values j < 16 go to q[j], j >= 16 to q[qstride_half + j - 16]. */
    float amax = 0.f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
    for (int j = 0; j < 16; j++) q[j] = (int8_t)lrintf(x[j] * id);
    for (int j = 16; j < 32; j++) q[qstride_half + j - 16] = (int8_t)lrintf(x[j] * id);
    return d;
}

/* int8 layout: q in input order; dv lanes 0-7 = d of block 2c, lanes 8-15 = d of block 2c+1. */
static void qx_prepare_i8(const float *x, int K, QX *qx) {
    int nb = K / 32;
    float c = 0.f;
    for (int b = 0; b < nb; b++) {
        float d = block_quant(x + b * 32, qx->q + b * 32, 16);
        int s = 0;
        for (int j = 0; j < 32; j++) s += qx->q[b * 32 + j];
        c += 128.f * d * (float)s;
        for (int l = 0; l < 8; l++) qx->dv[(b / 2) * 16 + (b % 2) * 8 + l] = d;
    }
    if (nb % 2) {
        for (int l = 0; l < 8; l++) qx->dv[(nb / 2) * 16 + 8 + l] = 0.f;
        memset(qx->q + nb * 32, 0, 32);
    }
    qx->c = c;
}

/* 4-bit layout: per group of 4 blocks, 64 bytes of x[0:16) of each block, then 64 of x[16:32);
 * dv lanes 4k..4k+3 = d of block 4g+k. Missing blocks of the last group are zero. */
static void qx_prepare_q4(const float *x, int K, QX *qx) {
    int nb = K / 32, ng = (nb + 3) / 4;
    memset(qx->q, 0, (size_t)ng * 128);
    memset(qx->dv, 0, sizeof(float) * ng * 16);
    for (int b = 0; b < nb; b++) {
        int g = b / 4, k = b % 4;
        float d = block_quant(x + b * 32, qx->q + g * 128 + k * 16, 64);
        for (int l = 0; l < 4; l++) qx->dv[g * 16 + k * 4 + l] = d;
        float s = 0.f;
        for (int j = 0; j < 32; j++) s += x[b * 32 + j];
        qx->xsum[b] = s;
    }
}

/* Block partial sums of one 64-byte chunk of a row, scaled by the activation blocks' d. */
#define I8_CHUNK(w, a) a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), \
                           _mm512_xor_si512(_mm512_loadu_si512(w), flip), xq)), dv, a)

VNNI static void i8_rows_vnni(const int8_t *W, const uint16_t *scale, int K, const QX *qx, int r0, int r1,
                              float *out) {
    int nc = K / 64, tail = (K / 32) % 2;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int r = r0;
    if (!tail) /* four rows share each chunk's activation loads */
        for (; r + 4 <= r1; r += 4) {
            const int8_t *w0 = W + (size_t)r * K;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < nc; c++) {
                smol_prefetch(w0 + c * 64);
                smol_prefetch(w0 + K + c * 64);
                smol_prefetch(w0 + 2 * K + c * 64);
                smol_prefetch(w0 + 3 * K + c * 64);
                __m512i xq = _mm512_loadu_si512(qx->q + c * 64);
                __m512 dv = _mm512_loadu_ps(qx->dv + c * 16);
                I8_CHUNK(w0 + c * 64, a0);
                I8_CHUNK(w0 + K + c * 64, a1);
                I8_CHUNK(w0 + 2 * K + c * 64, a2);
                I8_CHUNK(w0 + 3 * K + c * 64, a3);
            }
            out[r - r0] = bf16_to_f32(scale[r]) * (_mm512_reduce_add_ps(a0) - qx->c);
            out[r - r0 + 1] = bf16_to_f32(scale[r + 1]) * (_mm512_reduce_add_ps(a1) - qx->c);
            out[r - r0 + 2] = bf16_to_f32(scale[r + 2]) * (_mm512_reduce_add_ps(a2) - qx->c);
            out[r - r0 + 3] = bf16_to_f32(scale[r + 3]) * (_mm512_reduce_add_ps(a3) - qx->c);
        }
    for (; r < r1; r += 2) {
        int two = r + 1 < r1;
        const int8_t *w0 = W + (size_t)r * K, *w1 = two ? w0 + K : w0;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int c = 0; c < nc; c++) {
            smol_prefetch(w0 + c * 64);
            smol_prefetch(w1 + c * 64);
            __m512i xq = _mm512_loadu_si512(qx->q + c * 64);
            __m512 dv = _mm512_loadu_ps(qx->dv + c * 16);
            __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                             _mm512_xor_si512(_mm512_loadu_si512(w0 + c * 64), flip), xq);
            __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                             _mm512_xor_si512(_mm512_loadu_si512(w1 + c * 64), flip), xq);
            a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), dv, a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), dv, a1);
        }
        if (tail) { /* one last block of 32: the upper lanes' dv are 0 and xq bytes are 0 */
            __mmask64 m = 0xffffffffULL;
            __m512i xq = _mm512_loadu_si512(qx->q + nc * 64);
            __m512 dv = _mm512_loadu_ps(qx->dv + nc * 16);
            __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                             _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w0 + nc * 64), flip), xq);
            __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                             _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w1 + nc * 64), flip), xq);
            a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), dv, a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), dv, a1);
        }
        out[r - r0] = bf16_to_f32(scale[r]) * (_mm512_reduce_add_ps(a0) - qx->c);
        if (two) out[r - r0 + 1] = bf16_to_f32(scale[r + 1]) * (_mm512_reduce_add_ps(a1) - qx->c);
    }
}

VNNI static inline __m512 q4_group(__m512 acc, const uint8_t *w, const uint16_t *sc, const int8_t *xq,
                                   const float *dv, __mmask64 m, __mmask8 ms) {
    static const int idx[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    __m512i p = _mm512_maskz_loadu_epi8(m, w);
    __m512i lo = _mm512_and_si512(p, _mm512_set1_epi8(15));
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), _mm512_set1_epi8(15));
    __m512i is = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xq));
    is = _mm512_dpbusd_epi32(is, hi, _mm512_loadu_si512(xq + 64));
    __m128 s4 = _mm_cvtph_ps(_mm_maskz_loadu_epi16(ms, sc));
    __m512 sv = _mm512_permutexvar_ps(_mm512_loadu_si512(idx), _mm512_castps128_ps512(s4));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(sv, _mm512_loadu_ps(dv)), acc);
}

VNNI static void q4_rows_vnni(const uint8_t *W, const uint16_t *scale, const uint16_t *mins, int K, const QX *qx,
                              int r0, int r1, float *out) {
    int nb = K / 32, ng = nb / 4, rem = nb % 4;
    __mmask64 mt = rem ? (((__mmask64)1 << (16 * rem)) - 1) : 0;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = W + (size_t)r * (K / 2);
        const uint16_t *sc = scale + (size_t)r * nb, *mn = mins + (size_t)r * nb;
        __m512 acc = _mm512_setzero_ps();
        for (int g = 0; g < ng; g++) {
            smol_prefetch(w + g * 64);
            acc = q4_group(acc, w + g * 64, sc + g * 4, qx->q + g * 128, qx->dv + g * 16, ~(__mmask64)0, 0xf);
        }
        if (rem)
            acc = q4_group(acc, w + ng * 64, sc + ng * 4, qx->q + ng * 128, qx->dv + ng * 16, mt,
                           (__mmask8)((1u << rem) - 1));
        __m512 ms = _mm512_setzero_ps();
        int b = 0;
        for (; b + 16 <= nb; b += 16)
            ms = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mn + b))),
                                 _mm512_loadu_ps(qx->xsum + b), ms);
        float total = _mm512_reduce_add_ps(acc) + _mm512_reduce_add_ps(ms);
        for (; b < nb; b++) total += _cvtsh_ss(mn[b]) * qx->xsum[b];
        out[r - r0] = total;
    }
}
#endif /* SMOL_X86 */
