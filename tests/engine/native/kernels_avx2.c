/* Harness of tests/engine/test_native_kernels.py: the AVX2 integer-dot GEMV kernels of
 * engine/native/gemv_avx2.h against the exact integer arithmetic they implement (the same int8
 * activations and scales, summed in double). Prints one line per case: "kind K rows maxrel". */
#include <stdio.h>
#define SMOL_NO_CLONES 1
#include "gemv.h"
#include "gemv_vnni.h"
#include "gemv_avx2.h"

static float frand(void) { return rand() / (float)RAND_MAX - 0.5f; }

AVX2I static uint16_t to_f16(float f) { return (uint16_t)_cvtss_sh(f, 0); }

static int case_i8(int K, int R) {
    float *x = malloc(sizeof(float) * K), out[64];
    int8_t *W = malloc((size_t)R * K);
    uint16_t *s = malloc(2 * R);
    for (int i = 0; i < K; i++) x[i] = 3.f * frand();
    for (int i = 0; i < R * K; i++) W[i] = (int8_t)(rand() % 256 - 128); /* -128 included */
    for (int r = 0; r < R; r++) { float f = 0.01f * (r + 1); uint32_t u; memcpy(&u, &f, 4); s[r] = (uint16_t)(u >> 16); }
    QX qx = {malloc(2 * K + 64), malloc(4 * K), malloc(4 * K), 0.f};
    qx_prepare_i8_avx2(x, K, &qx);
    i8_rows_avx2(W, s, K, &qx, 0, R, out);
    double worst = 0;
    for (int r = 0; r < R; r++) {
        double acc = 0;
        for (int b = 0; b < K / 32; b++) {
            long is = 0;
            for (int j = 0; j < 32; j++) is += (long)W[r * K + b * 32 + j] * qx.q[b * 32 + j];
            acc += (double)qx.dv[b] * is;
        }
        acc *= bf16_to_f32(s[r]);
        double rel = fabs(out[r] - acc) / (fabs(acc) + 1e-3);
        if (rel > worst) worst = rel;
    }
    printf("i8 %d %d %.3g\n", K, R, worst);
    return 0;
}

static int case_q4(int K, int R) {
    int nb = K / 32;
    float *x = malloc(sizeof(float) * K), out[64];
    uint8_t *W = malloc((size_t)R * K / 2);
    uint16_t *sc = malloc(2 * (size_t)R * nb), *mn = malloc(2 * (size_t)R * nb);
    for (int i = 0; i < K; i++) x[i] = 3.f * frand();
    for (int i = 0; i < R * K / 2; i++) W[i] = (uint8_t)rand();
    for (int i = 0; i < R * nb; i++) { sc[i] = to_f16(0.01f + 0.1f * (frand() + 0.5f)); mn[i] = to_f16(frand()); }
    QX qx = {malloc(2 * K + 64), malloc(4 * K), malloc(4 * K), 0.f};
    qx_prepare_q4_avx2(x, K, &qx);
    q4_rows_avx2(W, sc, mn, K, &qx, 0, R, out);
    double worst = 0;
    for (int r = 0; r < R; r++) {
        double acc = 0;
        for (int b = 0; b < nb; b++) {
            const uint8_t *q = W + (size_t)r * K / 2 + b * 16;
            const int8_t *xlo = qx.q + (b / 2) * 64 + (b % 2) * 16, *xhi = xlo + 32;
            long is = 0;
            for (int j = 0; j < 16; j++) is += (long)(q[j] & 15) * xlo[j] + (long)(q[j] >> 4) * xhi[j];
            /* The kernel rounds scale * d to float first, as sd[] holds it. */
            acc += (double)(f16_to_f32(sc[r * nb + b]) * qx.dv[b]) * is + (double)f16_to_f32(mn[r * nb + b]) * qx.xsum[b];
        }
        double rel = fabs(out[r] - acc) / (fabs(acc) + 1e-3);
        if (rel > worst) worst = rel;
    }
    printf("q4 %d %d %.3g\n", K, R, worst);
    return 0;
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
        printf("no-avx2\n");
        return 0;
    }
    srand(7);
    int ks[] = {32, 96, 576, 1536, 2048};
    for (int i = 0; i < 5; i++) {
        case_i8(ks[i], 37);
        case_q4(ks[i], 37);
    }
    return 0;
}
