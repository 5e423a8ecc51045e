/* The native step's checks in C alone, for a machine Python and torch cannot reach: the ARM (NEON) build run
 * under QEMU on an x86 host (scripts/arm_check.py). It includes step.c itself (STEP_C names the path), so it
 * tests the very source the engine builds.
 *
 * For fp32 and bf16 it checks, bit for bit, what the engine's tests check on the host: a product, the layers and
 * the head give each row the same bits whether it is computed with others or alone (one row at a time, through
 * the cache for the layers) and on one thread or two; a product also stays within 1e-5 (relative to the
 * magnitude summed) of a double-precision sum. It writes every output to OUT so that the ARM build's values can
 * be compared with the host build's (their summation orders differ with the vector width, so only closely).
 * Exit status: 0 when every check holds, 1 otherwise (each failure is printed). */
#include STEP_C

#include <math.h>
#include <stdio.h>

static uint64_t state = 0x9e3779b97f4a7c15ull;
static float uniform(void) { /* in [-1, 1), the same sequence on every machine */
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static int failures = 0;
static void expect(int ok, const char *what, int bf16) {
    if (!ok) {
        printf("FAIL %s (%s)\n", what, bf16 ? "bf16" : "fp32");
        failures++;
    }
}

/* n values of scale `scale` in the test's dtype (bf16 rounded, or fp32) */
static void *values(int64_t n, int bf16, float scale) {
    void *out = malloc((size_t)n * (bf16 ? 2 : 4));
    for (int64_t i = 0; i < n; i++) {
        float v = uniform() * scale;
        if (bf16) ((uint16_t *)out)[i] = f32_to_bf16(v);
        else ((float *)out)[i] = v;
    }
    return out;
}

static void *packed(const void *w, int64_t N, int64_t K, int bf16) {
    void *out = calloc((size_t)specviz_packed_elems(N, K, bf16), bf16 ? 2 : 4);
    if (specviz_pack(w, N, K, bf16, out)) {
        printf("FAIL pack\n");
        exit(1);
    }
    return out;
}

/* gate's and up's packed panels interleaved (gate 0, up 0, gate 1, …), as NativeStep.packed_pair lays them */
static void *packed_pair(const void *gate, const void *up, int64_t N, int64_t K, int bf16) {
    size_t size = bf16 ? 2 : 4, panel = (size_t)specviz_panel_elems(K, bf16) * size;
    int64_t panels = specviz_packed_elems(N, K, bf16) / specviz_panel_elems(K, bf16);
    char *a = packed(gate, N, K, bf16), *b = packed(up, N, K, bf16), *out = malloc(2 * panels * panel);
    for (int64_t p = 0; p < panels; p++) {
        memcpy(out + (2 * p) * panel, a + p * panel, panel);
        memcpy(out + (2 * p + 1) * panel, b + p * panel, panel);
    }
    free(a);
    free(b);
    return out;
}

static void check_linear(int bf16, FILE *out) {
    const int64_t M = 9, K = 70, N = 37; /* neither a multiple of a panel nor of a vector */
    void *x = values(M * K, bf16, 1.0f), *w = values(N * K, bf16, 0.5f), *bias = values(N, bf16, 0.1f);
    void *pw = packed(w, N, K, bf16);
    float *all = malloc(M * N * 4), *one = malloc(N * 4), *single = malloc(M * N * 4);
    expect(!specviz_linear(x, M, K, pw, PLAIN, N, bias, bf16, all, 2), "linear runs", bf16);
    expect(!specviz_linear(x, M, K, pw, PLAIN, N, bias, bf16, single, 1), "linear runs on one thread", bf16);
    expect(!memcmp(all, single, M * N * 4), "linear: one thread gives two threads' bits", bf16);
    size_t size = bf16 ? 2 : 4;
    double worst = 0;
    for (int64_t m = 0; m < M; m++) {
        expect(!specviz_linear((char *)x + m * K * size, 1, K, pw, PLAIN, N, bias, bf16, one, 2), "linear, one row",
               bf16);
        expect(!memcmp(one, all + m * N, N * 4), "linear: a row alone gives its bits among 9", bf16);
        for (int64_t n = 0; n < N; n++) {
            double sum = load_hidden(bias, bf16, n), magnitude = fabs(sum);
            for (int64_t k = 0; k < K; k++) {
                double term = (double)load_hidden(x, bf16, m * K + k) * load_hidden(w, bf16, n * K + k);
                sum += term;
                magnitude += fabs(term);
            }
            double error = fabs(all[m * N + n] - sum) / magnitude;
            worst = error > worst ? error : worst;
        }
    }
    expect(worst < 1e-5, "linear: within 1e-5 of a double sum", bf16);
    printf("linear (%s): largest error %.2g of the magnitude summed\n", bf16 ? "bf16" : "fp32", worst);
    fwrite(all, 4, M * N, out);
    free(x), free(w), free(bias), free(pw), free(all), free(one), free(single);
}

static void check_layers_and_head(int bf16, FILE *out) {
    const int64_t d = 32, heads = 4, kv_heads = 2, head_dim = 8, inter = 48, capacity = 16, M = 7, vocab = 50;
    const int n_layers = 2;
    Shape s = {d, heads, kv_heads, head_dim, inter, capacity, 1e-5f, 1.0f / sqrtf((float)head_dim), 1.0f, bf16};
    size_t size = bf16 ? 2 : 4;
    Layer layers[2];
    memset(layers, 0, sizeof layers); /* plain panels only: formats PLAIN, no quantized twins */
    for (int i = 0; i < n_layers; i++) {
        void *q = values(heads * head_dim * d, bf16, 0.3f), *k = values(kv_heads * head_dim * d, bf16, 0.3f);
        void *v = values(kv_heads * head_dim * d, bf16, 0.3f), *o = values(d * heads * head_dim, bf16, 0.3f);
        void *gate = values(inter * d, bf16, 0.3f), *up = values(inter * d, bf16, 0.3f);
        void *down = values(d * inter, bf16, 0.3f);
        layers[i].q = packed(q, heads * head_dim, d, bf16);
        layers[i].k = packed(k, kv_heads * head_dim, d, bf16);
        layers[i].v = packed(v, kv_heads * head_dim, d, bf16);
        layers[i].o = packed(o, d, heads * head_dim, bf16);
        layers[i].gate_up = packed_pair(gate, up, inter, d, bf16);
        layers[i].down = packed(down, d, inter, bf16);
        layers[i].norm1 = values(d, bf16, 1.0f);
        layers[i].norm2 = values(d, bf16, 1.0f);
        free(q), free(k), free(v), free(o), free(gate), free(up), free(down);
    }
    float inv_freq[4];
    for (int i = 0; i < head_dim / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / head_dim);
    int64_t positions[7];
    for (int m = 0; m < M; m++) positions[m] = m;
    void *input = values(M * d, bf16, 1.0f);
    float *work = malloc((size_t)specviz_work_floats(&s, M, 2) * 4);
    void *result[3]; /* M rows at once on two threads, on one thread, and one row at a time */
    for (int run = 0; run < 3; run++) {
        size_t cache_bytes = (size_t)(kv_heads * capacity * head_dim) * size;
        for (int i = 0; i < n_layers; i++) {
            layers[i].keys = calloc(1, cache_bytes);
            layers[i].values = calloc(1, cache_bytes);
        }
        result[run] = malloc(M * d * size);
        memcpy(result[run], input, M * d * size);
        if (run < 2) {
            expect(!specviz_layers(&s, layers, n_layers, result[run], M, positions, 0, NULL, inv_freq, work,
                                   run == 0 ? 2 : 1), "layers run", bf16);
        } else {
            for (int64_t m = 0; m < M; m++)
                expect(!specviz_layers(&s, layers, n_layers, (char *)result[run] + m * d * size, 1, positions + m,
                                       m, NULL, inv_freq, work, 2), "layers, one row after the cached ones", bf16);
        }
        for (int i = 0; i < n_layers; i++) free(layers[i].keys), free(layers[i].values);
    }
    expect(!memcmp(result[0], result[1], M * d * size), "layers: one thread gives two threads' bits", bf16);
    expect(!memcmp(result[0], result[2], M * d * size), "layers: one row at a time gives the 7-row pass's bits",
           bf16);
    void *norm = values(d, bf16, 1.0f), *head = values(vocab * d, bf16, 0.5f), *ph = packed(head, vocab, d, bf16);
    float *logits = malloc(M * vocab * 4), *row = malloc(vocab * 4);
    expect(!specviz_head(&s, result[0], M, norm, ph, PLAIN, NULL, vocab, logits, work, 2), "head runs", bf16);
    for (int64_t m = 0; m < M; m++) {
        expect(!specviz_head(&s, (char *)result[0] + m * d * size, 1, norm, ph, PLAIN, NULL, vocab, row, work, 1),
               "head, one row", bf16);
        expect(!memcmp(row, logits + m * vocab, vocab * 4), "head: a row alone gives its bits among 7", bf16);
    }
    for (int64_t i = 0; i < M * d; i++) {
        float v = load_hidden(result[0], bf16, i);
        fwrite(&v, 4, 1, out);
    }
    fwrite(logits, 4, M * vocab, out);
    printf("layers and head (%s): checked\n", bf16 ? "bf16" : "fp32");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT\n", argv[0]);
        return 2;
    }
    FILE *out = fopen(argv[1], "wb");
    if (!out) return 2;
    printf("ISA %s, tile %d x %d, %d lanes\n", SPECVIZ_ISA, RM, RN, VL);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        check_linear(bf16, out);
        check_layers_and_head(bf16, out);
    }
    fclose(out);
    printf(failures ? "%d checks failed\n" : "every check held\n", failures);
    return failures != 0;
}
