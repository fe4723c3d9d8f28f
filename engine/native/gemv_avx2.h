/* Integer-dot GEMV kernels for int8 and 4-bit weights on CPUs with AVX2 but no AVX512-VNNI
 * (most laptops: AMD Zen 2/3, Intel client cores).
 *
 * Why: there the float-widening kernels of gemv.h ran int8 decode at 0.55x and 4-bit at 0.23x of
 * llama.cpp's Q8_0 / Q4_K_M on this project's 2-core AVX2 EPYC (bench/cpu_llamacpp.py): 4-bit
 * converted each block's float16 scale in software and widened every weight to float32. As
 * gemv_vnni.h does with vpdpbusd, and as ggml-cpu does on AVX2 (mul_sum_i8_pairs_float), the GEMV
 * input is quantized once per GEMV to int8 in blocks of 32 (d_b = max|x_b| / 127) and each block
 * of 32 weights is one vpmaddubsw + vpmaddwd:
 *
 *   int8:  vpmaddubsw multiplies unsigned by signed bytes, so the weight's sign moves onto the
 *          activation (|w| . sign(x, w), vpsignb): |w| <= 128 and |xq| <= 127 keep every pair sum
 *          within int16 (<= 32512). y = s_w * sum_b d_b * isum_b.
 *   4-bit: the nibbles are unsigned (<= 15) and go in as they are, low nibbles against x[0:16) of
 *          the block and high ones against x[16:32). y = sum_b scale_b * d_b * isum_b +
 *          sum_b min_b * sum(x_b) (the float block sums, as in gemv.h).
 *
 * The result differs from the float32-activation product by the activation rounding, as with
 * VNNI; tests/engine/test_cpu_step.py bounds it, and tests/engine/test_native_kernels.py checks
 * each kernel against the exact integer arithmetic.
 */
#ifdef SMOL_X86
#define AVX2I __attribute__((target("avx2,fma,f16c")))

/* int8 layout: q in input order, dv[b] = d of block b. */
static void qx_prepare_i8_avx2(const float *x, int K, QX *qx) {
    for (int b = 0; b < K / 32; b++) qx->dv[b] = block_quant(x + b * 32, qx->q + b * 32, 16);
}

/* 4-bit layout, per pair of blocks g: 64 bytes [x_2g[0:16) | x_2g+1[0:16) | x_2g[16:32) |
 * x_2g+1[16:32)] (zeros for the missing partner of an odd last block); dv[b] = d of block b;
 * xsum[b] = the float sum of block b. */
static void qx_prepare_q4_avx2(const float *x, int K, QX *qx) {
    int nb = K / 32;
    if (nb % 2) memset(qx->q + (nb / 2) * 64, 0, 64);
    for (int b = 0; b < nb; b++) {
        qx->dv[b] = block_quant(x + b * 32, qx->q + (b / 2) * 64 + (b % 2) * 16, 32);
        float s = 0.f;
        for (int j = 0; j < 32; j++) s += x[b * 32 + j];
        qx->xsum[b] = s;
    }
}

AVX2I static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 int32 partial sums of w . xq over one block of 32 signed bytes, as floats. */
AVX2I static inline __m256 i8_dot32(__m256i w, __m256i xq) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* One row at a time, two accumulators: a single sequential weight stream. Interleaving four rows
 * (as the AVX-512 kernels do) ran at 6-8 GB/s from memory on the 2-core AVX2 EPYC against 17-19
 * GB/s for this (microbenchmark of 115 MB of int8 rows, K = 576 and 1536): its prefetcher did not
 * follow four short interleaved streams. */
AVX2I static void i8_rows_avx2(const int8_t *W, const uint16_t *scale, int K, const QX *qx, int r0, int r1,
                               float *out) {
    int nb = K / 32;
    for (int r = r0; r < r1; r++) {
        const int8_t *w = W + (size_t)r * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        int b = 0;
        for (; b + 2 <= nb; b += 2) {
            smol_prefetch(w + b * 32);
            a0 = _mm256_fmadd_ps(i8_dot32(_mm256_loadu_si256((const __m256i *)(w + b * 32)),
                                          _mm256_loadu_si256((const __m256i *)(qx->q + b * 32))),
                                 _mm256_broadcast_ss(qx->dv + b), a0);
            a1 = _mm256_fmadd_ps(i8_dot32(_mm256_loadu_si256((const __m256i *)(w + b * 32 + 32)),
                                          _mm256_loadu_si256((const __m256i *)(qx->q + b * 32 + 32))),
                                 _mm256_broadcast_ss(qx->dv + b + 1), a1);
        }
        if (b < nb)
            a0 = _mm256_fmadd_ps(i8_dot32(_mm256_loadu_si256((const __m256i *)(w + b * 32)),
                                          _mm256_loadu_si256((const __m256i *)(qx->q + b * 32))),
                                 _mm256_broadcast_ss(qx->dv + b), a0);
        out[r - r0] = bf16_to_f32(scale[r]) * hsum256(_mm256_add_ps(a0, a1));
    }
}

/* The min term sum_b min_b * xsum_b of one row, eight float16 mins at a time. */
AVX2I static inline float q4_min_term(const uint16_t *mn, const float *xsum, int nb) {
    __m256 acc = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8)
        acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mn + b))), _mm256_loadu_ps(xsum + b), acc);
    float total = hsum256(acc);
    for (; b < nb; b++) total += _cvtsh_ss(mn[b]) * xsum[b];
    return total;
}

/* Two blocks (32 packed bytes, 64 weights) per step: the low nibbles of both blocks against
 * x[0:16) of each, the high nibbles against x[16:32) (the activation layout of qx_prepare_q4_avx2),
 * so int32 lanes 0-3 sum block 2g and lanes 4-7 block 2g+1. A row's scales times the activation
 * scales d_b are widened into sd[] first (rows of at most 16384 columns; longer ones take the
 * float kernel). One row at a time: a single weight stream, see i8_rows_avx2. */
AVX2I static void q4_rows_avx2(const uint8_t *W, const uint16_t *scale, const uint16_t *mins, int K, const QX *qx,
                               int r0, int r1, float *out) {
    int nb = K / 32, np = nb / 2;
    const __m256i m15 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    float sd[512 + 8];
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = W + (size_t)r * (K / 2);
        const uint16_t *sc = scale + (size_t)r * nb;
        int b = 0;
        for (; b + 8 <= nb; b += 8)
            _mm256_storeu_ps(sd + b, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + b))),
                                                   _mm256_loadu_ps(qx->dv + b)));
        for (; b < nb; b++) sd[b] = _cvtsh_ss(sc[b]) * qx->dv[b];
        sd[nb] = 0.f; /* the missing partner of an odd last block */
        __m256 acc = _mm256_setzero_ps();
        for (int g = 0; g <= np; g++) {
            if (!(g & 1)) smol_prefetch(w + g * 32);  /* one per 64-byte line */
            __m256i p;
            if (g < np) p = _mm256_loadu_si256((const __m256i *)(w + g * 32));
            else if (nb % 2) p = _mm256_inserti128_si256(_mm256_setzero_si256(), _mm_loadu_si128((const __m128i *)(w + g * 32)), 0);
            else break;
            /* p's 128-bit halves are blocks 2g and 2g+1; lo/hi take each one's low/high nibbles. */
            __m256i lo = _mm256_and_si256(p, m15), hi = _mm256_and_si256(_mm256_srli_epi16(p, 4), m15);
            __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(qx->q + g * 64))),
                                           _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(qx->q + g * 64 + 32))));
            __m256 sv = _mm256_set_m128(_mm_broadcast_ss(sd + 2 * g + 1), _mm_broadcast_ss(sd + 2 * g));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones)), sv, acc);
        }
        out[r - r0] = hsum256(acc) + q4_min_term(mins + (size_t)r * nb, qx->xsum, nb);
    }
}
#endif /* SMOL_X86 */
