/* The step's product on one weight, one thread: the exact products on Q4_1 blocks (widened to bf16 pairs in
 * registers) against the int8 products (the same blocks against inputs quantized to int8), for 1-16 rows, with the
 * weight in L2 (1,024 outputs) or streamed from memory (65,536). docs/verify-cost.md ("Int8 products") uses the
 * figures. It compiles step.c itself, so it times exactly the engine's tiles.
 *
 *     gcc -O3 -march=native -ffp-contract=fast -fopenmp scripts/int8_tile_bench.c -o /tmp/int8_tile_bench -lm
 *     /tmp/int8_tile_bench            # both formats, rows 1, 2, 4, 8, 16, in L2 and from memory
 *
 * Prints ns per group block (16 outputs × 32 inputs) and per group block and row, and the weight's bytes per
 * second. The blocks are random (d and m plausible fp16 values); the inputs a fixed pattern. */
#include "../engines/model/native/step.c"

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void run(int fmt, int M, int64_t N, int reps) {
    const int64_t K = 576, row_bytes = K / 32 * 20;
    uint8_t *blocks = malloc((size_t)(N * row_bytes));
    srand(1);
    for (int64_t i = 0; i < N * row_bytes; i++) blocks[i] = (uint8_t)rand();
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / 32; b++) {
            const uint16_t d = 0x2000, m = 0xa000; /* about 0.008 and -0.012 */
            memcpy(blocks + n * row_bytes + b * 20, &d, 2);
            memcpy(blocks + n * row_bytes + b * 20 + 2, &m, 2);
        }
    const int64_t bytes = specviz_quantized_bytes(N, K, fmt);
    uint8_t *packed = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64));
    specviz_pack_quantized(blocks, fmt, N, K, packed);
    Input in;
    in.Kp = padded(K);
    in.ld = M;
    in.f = calloc((size_t)(M * in.Kp), 4);
    in.h = calloc((size_t)(M * in.Kp), 2);
    in.q8 = calloc((size_t)int8_elems(M, in.Kp), 4);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) input_set(&in, 1, m, k, (float)((m * 7 + k * 13) % 17 - 8) * 0.1f);
    quantize_rows(&in, 0, M, 0, K);
    float *y = malloc((size_t)(M * N) * 4);
    void *unpacked = aligned_alloc(64, 64 * 576 * 4 * 2);
    product(packed, fmt, 1, &in, M, K, 0, N, y, N, NULL, unpacked); /* warm */
    const double start = now();
    for (int r = 0; r < reps; r++) product(packed, fmt, 1, &in, M, K, 0, N, y, N, NULL, unpacked);
    const double seconds = (now() - start) / reps, groups = (double)N / 16 * (K / 32);
    printf("%-8s %-6s rows %2d: %8.1f us, %6.2f ns a group block, %5.2f ns a group block and row, %5.1f GB/s\n",
           fmt == Q4_1 ? "exact" : "int8", N > 4096 ? "memory" : "L2", M, seconds * 1e6, seconds * 1e9 / groups,
           seconds * 1e9 / groups / M, bytes / seconds / 1e9);
    free(blocks), free(packed), free(in.f), free(in.h), free(in.q8), free(y), free(unpacked);
}

int main(void) {
    const int rows[] = {1, 2, 4, 8, 16};
    for (int where = 0; where < 2; where++)
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < 5; i++) run(f ? Q4_1_I8 : Q4_1, rows[i], where ? 65536 : 1024, where ? 50 : 2000);
    return 0;
}
