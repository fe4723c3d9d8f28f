/* Int8 GEMM for the vision tower's linears on CPUs with AVX2 (engine.layers.vision_int8):
 *
 *   y[M, N] = d_m * s_n * (xq[m] . wq[n]) + bias[n]
 *
 * xq: each row of x quantized on the fly to int8, d_m = max|x_m| / 127 (per token, 8 bits);
 * wq: weights quantized once at load to 7 bits per output channel, s_n = max|w_n| / 63.
 *
 * Why 7-bit weights: AVX2's only byte multiply, vpmaddubsw, multiplies unsigned by signed bytes and
 * adds adjacent pairs into a saturating int16. With the activation offset to unsigned (u = xq + 128,
 * 0..255) and |wq| <= 63 a pair is at most 255 * 63 * 2 = 32130, so nothing saturates, and one
 * vpmaddubsw + vpmaddwd + vpaddd does 32 multiply-adds. The offset comes back out exactly:
 * xq . wq = u . wq - 128 * sum_k wq[n, k] (wsum, computed at load). Keeping 8-bit weights instead
 * needs the sign trick (vpsignb / vpabsb per pair, as gemv_avx2.h does for batch 1): measured on
 * this project's AVX2 EPYC, 51 against 88 GMAC/s a core for this register-blocked kernel, where
 * MKL's float32 sgemm does ~37 (docs/BENCHMARKS.md). fbgemm's dynamic quantization makes the
 * opposite trade (7-bit activations, one scale per tensor); activations carry the outliers, so
 * they keep the 8 bits and a scale per token here.
 *
 * Layout of wq (engine/layers/vision_int8.py packs it): panels of 16 output channels; in a panel,
 * K / 4 groups of 64 bytes, group g holding wq[n0 + c, 4g .. 4g + 3] for c = 0..15 (4 bytes per
 * channel, channels in order). A 4 x 16 tile of y keeps 8 accumulators in registers while a panel
 * (K * 16 bytes: 12 KB at K = 768, 48 KB at K = 3072) stays in L1 / L2.
 *
 * act: 0 none, 1 GELU (tanh form) applied to y.
 *
 * Requires K % 4 == 0 and N % 16 == 0 (the caller checks); any M.
 */
#ifdef SMOL_X86
#define AVX2G __attribute__((target("avx2,fma")))

/* Row m of x -> u8 (xq + 128) into u[0..K), its scale d into *d. An all-zero row gets d = 0. */
AVX2G static void q8_row(const float *x, int64_t K, uint8_t *u, float *d) {
    __m256 mx = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    float lanes[8], amax = 0.f;
    _mm256_storeu_ps(lanes, mx);
    for (int j = 0; j < 8; j++) amax = lanes[j] > amax ? lanes[j] : amax;
    for (; k < K; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
    float dd = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
    *d = dd;
    const __m256 vi = _mm256_set1_ps(inv);
    const __m256i off = _mm256_set1_epi32(128);
    for (k = 0; k + 8 <= K; k += 8) {
        /* round to nearest even, as torch.round does; |x * inv| <= 127 so the sum is 1..255 */
        __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vi)), off);
        __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        __m128i w16 = _mm_packus_epi32(lo, hi);
        _mm_storel_epi64((__m128i *)(u + k), _mm_packus_epi16(w16, w16));
    }
    for (; k < K; k++) u[k] = (uint8_t)(nearbyintf(x[k] * inv) + 128.f);
}

/* acc[4][16] for rows u0..u3 (each K bytes) against one packed panel. */
AVX2G static inline void q8_tile(const uint8_t *u0, const uint8_t *u1, const uint8_t *u2, const uint8_t *u3,
                                 const int8_t *panel, int64_t K, __m256i acc[8]) {
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
            c31 = c00;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t k = 0; k < K; k += 4) {
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)(panel + k * 16));
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(panel + k * 16 + 32));
        int32_t a;
        __m256i av;
#define SMOL_Q8_ROW(src, x0, x1)                                                           \
    memcpy(&a, (src) + k, 4);                                                               \
    av = _mm256_set1_epi32(a);                                                              \
    x0 = _mm256_add_epi32(x0, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones));      \
    x1 = _mm256_add_epi32(x1, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones));
        SMOL_Q8_ROW(u0, c00, c01)
        SMOL_Q8_ROW(u1, c10, c11)
        SMOL_Q8_ROW(u2, c20, c21)
        SMOL_Q8_ROW(u3, c30, c31)
#undef SMOL_Q8_ROW
    }
    acc[0] = c00, acc[1] = c01, acc[2] = c10, acc[3] = c11;
    acc[4] = c20, acc[5] = c21, acc[6] = c30, acc[7] = c31;
}

/* e^x for float32 lanes: Cephes' expf (range reduction by ln 2 in two parts, degree-5 polynomial),
 * as in avx_mathfun.h; relative error ~1e-7 over [-88, 88], inputs clamped to it. */
AVX2G static inline __m256 q8_exp(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-88.3762626647949f));
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* GELU, tanh form (torch's approximate="tanh", SigLIP's gelu_pytorch_tanh):
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with tanh(u) = 1 - 2 / (1 + e^(2u)). */
AVX2G static inline __m256 q8_gelu_tanh(__m256 x) {
    const __m256 k = _mm256_set1_ps(0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    __m256 u = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(c, x), _mm256_mul_ps(x, x), x));
    __m256 e = q8_exp(_mm256_add_ps(u, u));
    __m256 t = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                             _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), t));
}

enum { Q8_ACT_NONE = 0, Q8_ACT_GELU_TANH = 1 };

/* y rows [m0, m0 + rows) (rows <= 4), channels [n0, n0 + 16) from the tile's accumulators, through
 * the activation ``act`` (the MLP's GELU, while the tile is in registers: one pass less over y). */
AVX2G static inline void q8_store(const __m256i acc[8], const float *d, int64_t m0, int rows, int64_t n0,
                                  const float *wscale, const int32_t *wsum, const float *bias, float *y,
                                  int64_t N, int act) {
    const __m256i off = _mm256_set1_epi32(128);
    for (int h = 0; h < 2; h++) {
        const int64_t n = n0 + 8 * h;
        const __m256i corr = _mm256_mullo_epi32(off, _mm256_loadu_si256((const __m256i *)(wsum + n)));
        const __m256 s = _mm256_loadu_ps(wscale + n);
        const __m256 b = bias ? _mm256_loadu_ps(bias + n) : _mm256_setzero_ps();
        for (int r = 0; r < rows; r++) {
            __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[2 * r + h], corr));
            v = _mm256_fmadd_ps(_mm256_mul_ps(v, _mm256_set1_ps(d[m0 + r])), s, b);
            if (act == Q8_ACT_GELU_TANH) v = q8_gelu_tanh(v);
            _mm256_storeu_ps(y + (m0 + r) * N + n, v);
        }
    }
}

#define Q8_ROWS_PER_TASK 64 /* rows of x per task: 64 * K bytes of u (192 KB at K = 3072) stay in L2 */

AVX2G static void q8_gemm_avx2(const float *x, int64_t M, int64_t K, const int8_t *wq, const float *wscale,
                               const int32_t *wsum, const float *bias, int64_t N, float *y, uint8_t *u,
                               float *d, int act, int nthreads) {
    const int64_t panels = N / 16, mtasks = (M + Q8_ROWS_PER_TASK - 1) / Q8_ROWS_PER_TASK;
#pragma omp parallel num_threads(nthreads)
    {
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) q8_row(x + m * K, K, u + m * K, d + m);
        /* (implicit barrier: every row is quantized before any tile reads it) */
#pragma omp for schedule(static) collapse(2)
        for (int64_t t = 0; t < mtasks; t++) {
            for (int64_t p = 0; p < panels; p++) {
                const int8_t *panel = wq + p * 16 * K;
                const int64_t m_end = (t + 1) * Q8_ROWS_PER_TASK < M ? (t + 1) * Q8_ROWS_PER_TASK : M;
                for (int64_t m = t * Q8_ROWS_PER_TASK; m < m_end; m += 4) {
                    const int rows = m_end - m < 4 ? (int)(m_end - m) : 4;
                    /* a short last block reuses its first row for the missing ones (results dropped) */
                    const uint8_t *r0 = u + m * K, *r1 = rows > 1 ? r0 + K : r0, *r2 = rows > 2 ? r0 + 2 * K : r0,
                                  *r3 = rows > 3 ? r0 + 3 * K : r0;
                    __m256i acc[8];
                    q8_tile(r0, r1, r2, r3, panel, K, acc);
                    q8_store(acc, d, m, rows, p * 16, wscale, wsum, bias, y, N, act);
                }
            }
        }
    }
}
#endif
