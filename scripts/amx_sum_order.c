/* Does an AMX tile product (tdpbf16ps) sum its products in an order the vector path could copy?
 *
 * Why: on a Xeon with AMX the step runs every bf16 product on tiles, at every row count, so that a row's bits never
 * depend on how many rows share the call; a one-row product pays about 6-16% more on tiles than on the vector dot
 * products (docs/verify-cost.md). If some order of vector multiply-adds gave the tile's bits, a one-row product
 * could take the vector path and keep the tiles' bits. This compares one output row of tile products (K = 576, 16
 * outputs, 2,000 random draws) against eight candidate orders and prints how often each differs, in bits, from the
 * tile.
 *
 *     gcc -O2 -march=native scripts/amx_sum_order.c -o /tmp/amx_sum_order -lm && /tmp/amx_sum_order
 *
 * Linux on a CPU with AMX-BF16 only (it asks the kernel for the tile state). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define K 576
#define CANDIDATES 8

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float draw(int wide) { return ((float)rand() / RAND_MAX - 0.5f) * (wide ? ldexpf(1.f, rand() % 40 - 20) : 1.f); }

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */)) {
        puts("no AMX tile state here");
        return 1;
    }
    static TileConfig config __attribute__((aligned(64)));
    config.palette = 1;
    config.rows[0] = 1, config.colsb[0] = 64;  /* C: one row of 16 fp32 */
    config.rows[1] = 1, config.colsb[1] = 64;  /* A: one row of 32 bf16 */
    config.rows[2] = 16, config.colsb[2] = 64; /* B: 16 pairs of k × 16 outputs */
    __asm__ volatile("ldtilecfg %0" ::"m"(config));
    static const char *names[CANDIDATES] = {
        "vdpbf16ps, pair by pair (odd k, then even: one rounding each)",
        "fp32 multiply-adds, even k then odd",
        "fp32 multiply-adds, odd k then even",
        "each pair's two products summed exactly, one rounding a pair",
        "each block of 32 k summed exactly, one rounding a block",
        "each block summed exactly and rounded, then added (two roundings)",
        "a block's even and odd halves each summed exactly, one rounding at the end",
        "a block's even and odd products each summed as a pairwise fp32 tree, the two added, then added"};
    static uint16_t a[K] __attribute__((aligned(64)));
    static uint16_t b[K / 2][32] __attribute__((aligned(64)));
    srand(1);
    for (int wide = 0; wide < 2; wide++) {
        long differ[CANDIDATES] = {0}, outputs = 0;
        for (int trial = 0; trial < 2000; trial++) {
            for (int k = 0; k < K; k++) a[k] = to_bf16(draw(wide));
            for (int i = 0; i < K / 2; i++)
                for (int j = 0; j < 32; j++) b[i][j] = to_bf16(draw(wide));
            float tile[16] __attribute__((aligned(64)));
            _tile_zero(0);
            for (int block = 0; block < K / 32; block++) {
                __asm__ volatile("tileloadd (%0,%1,1), %%tmm1" ::"r"(a + 32 * block), "r"(64L) : "memory");
                __asm__ volatile("tileloadd (%0,%1,1), %%tmm2" ::"r"(&b[16 * block][0]), "r"(64L) : "memory");
                _tile_dpbf16ps(0, 1, 2);
            }
            _tile_stored(0, tile, 64);
            __m512 acc = _mm512_setzero_ps();
            for (int i = 0; i < K / 2; i++) {
                uint32_t pair;
                memcpy(&pair, a + 2 * i, 4);
                acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(&b[i][0]), (__m512bh)_mm512_set1_epi32(pair));
            }
            float vector[16];
            _mm512_storeu_ps(vector, acc);
            for (int n = 0; n < 16; n++) {
                float c[CANDIDATES] = {vector[n]};
                for (int i = 0; i < K / 2; i++) {
                    const float a0 = from_bf16(a[2 * i]), a1 = from_bf16(a[2 * i + 1]);
                    const float b0 = from_bf16(b[i][2 * n]), b1 = from_bf16(b[i][2 * n + 1]);
                    c[1] = fmaf(a1, b1, fmaf(a0, b0, c[1]));
                    c[2] = fmaf(a0, b0, fmaf(a1, b1, c[2]));
                    c[3] = (float)((double)c[3] + ((double)a0 * b0 + (double)a1 * b1));
                }
                for (int block = 0; block < K / 32; block++) {
                    double sum = 0, even = 0, odd = 0;
                    float tree_even[16], tree_odd[16];
                    for (int i = 16 * block; i < 16 * block + 16; i++) {
                        const double e = (double)from_bf16(a[2 * i]) * from_bf16(b[i][2 * n]);
                        const double o = (double)from_bf16(a[2 * i + 1]) * from_bf16(b[i][2 * n + 1]);
                        sum += e + o, even += e, odd += o;
                        tree_even[i - 16 * block] = (float)e, tree_odd[i - 16 * block] = (float)o; /* exact */
                    }
                    for (int width = 16; width > 1; width /= 2)
                        for (int i = 0; i < width / 2; i++)
                            tree_even[i] = tree_even[2 * i] + tree_even[2 * i + 1],
                            tree_odd[i] = tree_odd[2 * i] + tree_odd[2 * i + 1];
                    c[4] = (float)((double)c[4] + sum);
                    c[5] = c[5] + (float)sum;
                    c[6] = (float)((double)c[6] + even + odd);
                    c[7] = c[7] + (tree_even[0] + tree_odd[0]);
                }
                for (int j = 0; j < CANDIDATES; j++) differ[j] += memcmp(&c[j], &tile[n], 4) != 0;
                outputs++;
            }
        }
        printf("%s: %ld outputs\n", wide ? "values over 2^-20..2^20" : "values in (-0.5, 0.5)", outputs);
        for (int j = 0; j < CANDIDATES; j++)
            printf("  %5.1f%% differ from the tile: %s\n", 100.0 * differ[j] / outputs, names[j]);
    }
    _tile_release();
    return 0;
}
