/* specviz's decode step in C: Llama decoder layers and the LM head, for one query row or many.
 *
 * Why: a decode step reads every weight once, so it can run no faster than the weights stream from memory.
 * PyTorch reaches that for large products but spends a step's other half on ~1,500 small operations
 * (norms in pieces, RoPE, residual adds, SiLU·mul, cache writes, casts), each a dispatch of a few µs.
 * Here one call runs a range of layers: every stage is a loop inside one OpenMP parallel region, the
 * small operations are folded into the products' loops, and threads meet at a barrier between stages
 * (llama.cpp's ggml-cpu does the same).
 *
 * Row invariance by construction: every output element is summed in one fixed order (lane-wise over k in
 * steps of one vector, then the lanes in a fixed tree), one thread computes it whole, and attention visits a
 * query's keys in cache order and skips the ones it may not see. So a row's bits never depend on how many
 * rows share the call: a chunk or a tree verified in one forward gets what one-token steps would get.
 *
 * Numerics of a 16-bit (bf16) model: the residual stream is fp32 inside a layer and rounded to bf16 at each
 * layer's end (as the Hugging Face layer returns it, so any split of the layers gives the same bits); a
 * product's input is rounded to bf16 and its sum kept in fp32; keys and values are stored in bf16.
 * An fp32 model computes everything in fp32.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <sched.h>
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define SPECVIZ_DPBF16 1
#endif

#define VL 16 /* lanes of one accumulator: a 512-bit register, or two 256-bit, or four 128-bit */
typedef float vf __attribute__((vector_size(VL * 4)));
typedef uint32_t vu __attribute__((vector_size(VL * 4)));
typedef uint16_t vh __attribute__((vector_size(VL * 2)));

typedef struct {
    const void *q, *k, *v, *o, *gate, *up, *down; /* [out, in], row-major, in the model's dtype */
    const void *norm1, *norm2;                   /* [d] */
    void *keys, *values;                         /* the cache: [kv_heads, capacity, head_dim] */
} Layer;

typedef struct {
    int64_t d, heads, kv_heads, head_dim, inter, capacity;
    float eps, scaling, rope_scaling;
    int bf16; /* weights, cache and hidden states in bf16 (else fp32) */
} Shape;

/* ---- what an entry point returns: 0, or which of its arguments it refused (step.py names them) ---------- */
enum {
    SPECVIZ_OK = 0,
    SPECVIZ_BAD_SHAPE = -1,    /* a size in Shape out of range (head_dim 2..512 and even, heads a multiple of kv_heads) */
    SPECVIZ_BAD_ROWS = -2,     /* M < 1 */
    SPECVIZ_BAD_THREADS = -3,  /* threads not in 1..1024 */
    SPECVIZ_BAD_POINTER = -4,  /* a NULL tensor */
    SPECVIZ_BAD_CACHE = -5,    /* prefix < 0, or prefix + M past the cache's capacity */
    SPECVIZ_BAD_POSITION = -6, /* a negative position */
    SPECVIZ_NO_MEMORY = -7,
};

static int check_shape(const Shape *s) {
    if (!s || s->d < 1 || s->heads < 1 || s->kv_heads < 1 || s->heads % s->kv_heads || s->head_dim < 2 ||
        s->head_dim > 512 || s->head_dim % 2 || s->inter < 1 || s->capacity < 1)
        return SPECVIZ_BAD_SHAPE;
    return SPECVIZ_OK;
}
static int check_threads(int threads) { return threads >= 1 && threads <= 1024 ? SPECVIZ_OK : SPECVIZ_BAD_THREADS; }

/* ---- bf16 ------------------------------------------------------------------------------------- */
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t f32_to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/* ---- one vector of weights or inputs as fp32 lanes ------------------------------------------------ */
static inline vf load_f32(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline vf load_bf16(const uint16_t *p) {
    vh h;
    memcpy(&h, p, sizeof h);
    vu u = __builtin_convertvector(h, vu) << 16;
    vf v;
    memcpy(&v, &u, sizeof v);
    return v;
}
/* The lanes summed in one fixed tree (halves added, then halves of the sum, ...): the same for every output,
 * whatever the row count, and a handful of vector instructions rather than fifteen scalar adds. */
typedef float vf8 __attribute__((vector_size(32)));
typedef float vf4 __attribute__((vector_size(16)));
static inline float reduce(vf v) {
    vf8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    vf4 c = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (c[0] + c[2]) + (c[1] + c[3]);
}

/* ---- products: y[m, n] (+)= sum_k x[m, k] w[n, k] for n in [n0, n1) ------------------------------
 * Inputs come padded to a multiple of VL (or 2 VL) columns with zeros, weights are read in full vectors
 * up to the last one, whose tail is copied into a zero-padded vector: a lane's sum runs over k ascending.
 * R weight rows and G input rows per block: each weight vector is loaded once for G rows, and R rows give
 * R independent streams. The block shape changes speed, never a sum's order. */
#define R 4
#define G 4

static inline vf weight_vec(const void *w, int bf16, int64_t n, int64_t K, int64_t k) {
    if (k + VL <= K) return bf16 ? load_bf16((const uint16_t *)w + n * K + k) : load_f32((const float *)w + n * K + k);
    vf v = {0};
    float t[VL] = {0};
    for (int64_t i = k; i < K; i++)
        t[i - k] = bf16 ? bf16_to_f32(((const uint16_t *)w)[n * K + i]) : ((const float *)w)[n * K + i];
    memcpy(&v, t, sizeof v);
    return v;
}

/* One block: R weight rows [n, n + r_count) against GC input rows from m. GC, r_count and WB (weights in
 * bf16) are constants at every call (see the switches below), so the compiler keeps exactly the accumulators
 * needed in registers and no branch in the loop over k; the last, partial vector of k comes after it. */
static inline __attribute__((always_inline)) vf weight_at_k(const void *w, const int WB, int64_t n, int64_t K,
                                                            int64_t k) {
    return WB ? load_bf16((const uint16_t *)w + n * K + k) : load_f32((const float *)w + n * K + k);
}

static inline __attribute__((always_inline)) void block_f32(const void *w, const int WB, const float *x, int64_t Kp,
                                                            int64_t K, int64_t n, const int r_count, int64_t m,
                                                            const int GC, float *y, int64_t ystride) {
    vf acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < GC; g++) acc[r][g] = (vf){0};
    const int64_t whole = K / VL * VL;
    for (int64_t k = 0; k < whole; k += VL) {
        vf xv[G];
        for (int g = 0; g < GC; g++) xv[g] = load_f32(x + (m + g) * Kp + k);
        for (int r = 0; r < r_count; r++) {
            vf wv = weight_at_k(w, WB, n + r, K, k);
            /* the next block's rows, asked for now: the hardware prefetcher alone fell behind these short rows
             * (a bf16 step took 16 ms without, 12 with, on a 2-core Xeon) */
            if (m == 0) /* later groups of rows read this block from the cache */
                __builtin_prefetch((const char *)w + ((n + r + R) * K + k) * (WB ? 2 : 4));
            for (int g = 0; g < GC; g++) acc[r][g] += wv * xv[g];
        }
    }
    if (whole < K)
        for (int r = 0; r < r_count; r++) {
            vf wv = weight_vec(w, WB, n + r, K, whole);
            for (int g = 0; g < GC; g++) acc[r][g] += wv * load_f32(x + (m + g) * Kp + whole);
        }
    for (int r = 0; r < r_count; r++)
        for (int g = 0; g < GC; g++) y[(m + g) * ystride + n + r] = reduce(acc[r][g]);
}

static inline __attribute__((always_inline)) void product_f32_of(const void *w, const int WB, const float *x,
                                                                 int64_t M, int64_t Kp, int64_t K, int64_t n0,
                                                                 int64_t n1, float *y, int64_t ystride) {
    for (int64_t n = n0; n < n1; n += R) {
        if (n + R > n1) { /* the last rows, one at a time */
            for (int64_t one = n; one < n1; one++)
                for (int64_t m = 0; m < M; m++) block_f32(w, WB, x, Kp, K, one, 1, m, 1, y, ystride);
            break;
        }
        for (int64_t m = 0; m < M; m += G) {
            switch (M - m < G ? (int)(M - m) : G) {
            case 1: block_f32(w, WB, x, Kp, K, n, R, m, 1, y, ystride); break;
            case 2: block_f32(w, WB, x, Kp, K, n, R, m, 2, y, ystride); break;
            case 3: block_f32(w, WB, x, Kp, K, n, R, m, 3, y, ystride); break;
            default: block_f32(w, WB, x, Kp, K, n, R, m, G, y, ystride);
            }
        }
    }
}

/* x: [M, Kp] fp32 (Kp = K rounded up to VL, zero-padded); weights fp32, or bf16 widened lane by lane */
static void product_f32(const void *w, int bf16, const float *x, int64_t M, int64_t Kp, int64_t K, int64_t n0,
                        int64_t n1, float *y, int64_t ystride) {
    if (bf16) product_f32_of(w, 1, x, M, Kp, K, n0, n1, y, ystride);
    else product_f32_of(w, 0, x, M, Kp, K, n0, n1, y, ystride);
}

#ifdef SPECVIZ_DPBF16
/* bf16 weights and bf16 inputs (x: [M, Kp] bf16, Kp a multiple of 32, zero-padded): AVX-512 BF16 dot
 * products, two k per lane per instruction, lanes summed by the same fixed tree. */
static inline __attribute__((always_inline)) void block_dpbf16(const uint16_t *w, const uint16_t *x, int64_t Kp,
                                                               int64_t K, int64_t n, const int r_count, int64_t m,
                                                               const int GC, float *y, int64_t ystride) {
    __m512 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < GC; g++) acc[r][g] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
        __mmask32 tail = k + 32 <= K ? 0xffffffffu : (__mmask32)((1ull << (K - k)) - 1);
        __m512i xv[G];
        for (int g = 0; g < GC; g++) xv[g] = _mm512_loadu_si512(x + (m + g) * Kp + k);
        for (int r = 0; r < r_count; r++) {
            __m512i wv = _mm512_maskz_loadu_epi16(tail, w + (n + r) * K + k);
            if (m == 0) _mm_prefetch((const char *)(w + (n + r + R) * K + k), _MM_HINT_T0); /* next block: see block_f32 */
            for (int g = 0; g < GC; g++) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)xv[g], (__m512bh)wv);
        }
    }
    for (int r = 0; r < r_count; r++)
        for (int g = 0; g < GC; g++) y[(m + g) * ystride + n + r] = reduce((vf)acc[r][g]);
}

static void product_dpbf16(const uint16_t *w, const uint16_t *x, int64_t M, int64_t Kp, int64_t K, int64_t n0,
                           int64_t n1, float *y, int64_t ystride) {
    for (int64_t n = n0; n < n1; n += R) {
        if (n + R > n1) { /* the last rows, one at a time */
            for (int64_t one = n; one < n1; one++)
                for (int64_t m = 0; m < M; m++) block_dpbf16(w, x, Kp, K, one, 1, m, 1, y, ystride);
            break;
        }
        for (int64_t m = 0; m < M; m += G) {
            switch (M - m < G ? (int)(M - m) : G) {
            case 1: block_dpbf16(w, x, Kp, K, n, R, m, 1, y, ystride); break;
            case 2: block_dpbf16(w, x, Kp, K, n, R, m, 2, y, ystride); break;
            case 3: block_dpbf16(w, x, Kp, K, n, R, m, 3, y, ystride); break;
            default: block_dpbf16(w, x, Kp, K, n, R, m, G, y, ystride);
            }
        }
    }
}
#define STEP 32
#else
#define STEP VL
#endif

/* A product's input, as the product reads it: rounded to bf16 for a bf16 model, zero-padded to Kp. */
typedef struct {
    float *f;    /* [M, Kp] fp32 */
    uint16_t *h; /* [M, Kp] bf16 (dpbf16 only) */
    int64_t Kp;
} Input;

static inline int64_t padded(int64_t K) { return (K + STEP - 1) / STEP * STEP; }

static inline void input_set(Input *in, int bf16, int64_t m, int64_t k, float value) {
    if (bf16) value = round_bf16(value);
    in->f[m * in->Kp + k] = value;
#ifdef SPECVIZ_DPBF16
    if (bf16) in->h[m * in->Kp + k] = f32_to_bf16(value);
#endif
}

static void product(const void *w, int bf16, const Input *in, int64_t M, int64_t K, int64_t n0, int64_t n1, float *y,
                    int64_t ystride) {
#ifdef SPECVIZ_DPBF16
    if (bf16) {
        product_dpbf16((const uint16_t *)w, in->h, M, in->Kp, K, n0, n1, y, ystride);
        return;
    }
#endif
    product_f32(w, bf16, in->f, M, in->Kp, K, n0, n1, y, ystride);
}

/* Rows [n0, n1) of a product split over the team: contiguous blocks of R rows, one per thread. */
static inline void share(int64_t N, int thread, int threads, int64_t *n0, int64_t *n1) {
    int64_t blocks = (N + R - 1) / R;
    int64_t first = blocks * thread / threads, last = blocks * (thread + 1) / threads;
    *n0 = first * R;
    *n1 = last * R < N ? last * R : N;
}

static inline float weight_at(const void *w, int bf16, int64_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

/* RMSNorm of each row of h (fp32 [M, d]) times the norm's weight, into a product's input. */
static void rms_norm_rows(const float *h, int64_t M, int64_t d, const void *weight, int bf16, float eps, Input *out) {
    for (int64_t m = 0; m < M; m++) {
        const float *row = h + m * d;
        vf acc = {0};
        int64_t k = 0;
        for (; k + VL <= d; k += VL) {
            vf v = load_f32(row + k);
            acc += v * v;
        }
        float sum = reduce(acc);
        for (; k < d; k++) sum += row[k] * row[k];
        float scale = 1.0f / sqrtf(sum / (float)d + eps);
        for (k = 0; k < d; k++) input_set(out, bf16, m, k, weight_at(weight, bf16, k) * (row[k] * scale));
    }
}

/* exp on a vector of lanes: Cephes' expf (a degree-7 polynomial after splitting off a power of two), within
 * 2 ulp of expf. libm's expf is called once per value (a decode step makes ~10^5 of them in attention and SiLU,
 * 10^6 when verifying 16 tokens); this handles 16 at a time, each value the same bits wherever it sits. */
typedef int32_t vi __attribute__((vector_size(VL * 4)));
static inline vf vexp(vf x) {
    const vf hi = (vf){0} + 88.3762626647949f, lo = (vf){0} - 87.3365447504f;
    vi over = (vi)(x > hi), under = (vi)(x < lo); /* comparisons give all-ones / zero lanes: select by bits */
    x = (vf)(((vi)hi & over) | ((vi)x & ~over));
    x = (vf)(((vi)lo & under) | ((vi)x & ~under));
    vf fx = x * 1.44269504088896341f + 0.5f;
    vf t = __builtin_convertvector(__builtin_convertvector(fx, vi), vf);
    fx = t - (vf)((vi)(t > fx) & (vi)((vf){0} + 1.0f)); /* floor */
    x = x - fx * 0.693359375f + fx * 2.12194440e-4f;
    vf z = x * x;
    vf y = (vf){0} + 1.9875691500E-4f;
    y = y * x + 1.3981999507E-3f;
    y = y * x + 8.3334519073E-3f;
    y = y * x + 4.1665795894E-2f;
    y = y * x + 1.6666665459E-1f;
    y = y * x + 5.0000001201E-1f;
    y = y * z + x + 1.0f;
    vi bits = (__builtin_convertvector(fx, vi) + 127) << 23;
    vf scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

/* v[j] = exp(v[j] - shift) for j < n: whole vectors, then the tail through a padded one (the same arithmetic). */
static void exp_shifted(float *v, int64_t n, float shift) {
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf e = vexp(load_f32(v + j) - shift);
        memcpy(v + j, &e, sizeof e);
    }
    if (j < n) {
        float t[VL] = {0};
        memcpy(t, v + j, sizeof(float) * (n - j));
        vf e = vexp(load_f32(t) - shift);
        memcpy(t, &e, sizeof e);
        memcpy(v + j, t, sizeof(float) * (n - j));
    }
}

/* g[i] = SiLU(g[i]) * u[i] for i < n. */
static void silu_times(float *g, const float *u, int64_t n) {
    float e[64 * 4];
    for (int64_t i0 = 0; i0 < n; i0 += 64 * 4) {
        int64_t c = n - i0 < 64 * 4 ? n - i0 : 64 * 4;
        for (int64_t i = 0; i < c; i++) e[i] = -g[i0 + i];
        exp_shifted(e, c, 0.0f);
        for (int64_t i = 0; i < c; i++) g[i0 + i] = g[i0 + i] / (1.0f + e[i]) * u[i0 + i];
    }
}

/* Work space the caller provides (specviz_work_floats says how much). */
typedef struct {
    float *residual; /* [M, d] */
    Input normed;    /* [M, Kp(d)]: the head's; layers use one per thread */
    Input *mine;     /* [threads]: each thread's own normed rows, so no thread waits for a norm */
    float *qkv;      /* [M, max(q + 2 kv, d)] */
    Input attended;  /* [M, Kp(q)] */
    Input act;       /* [M, Kp(inter)] */
    float *rope;     /* [M, head_dim]: cos then sin of each row's position */
    float *scores;   /* [threads, capacity] */
} Work;

static float *carve(float **at, int64_t n) {
    float *p = *at;
    *at += (n + 15) / 16 * 16;
    return p;
}

static void carve_input(float **at, Input *in, int64_t M, int64_t K) {
    in->Kp = padded(K);
    in->f = carve(at, M * in->Kp);
    in->h = (uint16_t *)carve(at, (M * in->Kp + 1) / 2);
}

/* The work space's parts, carved from base; returns the floats used. */
static int64_t layout(const Shape *s, int64_t M, int threads, float *base, Work *w) {
    float *at = base;
    int64_t q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    w->residual = carve(&at, M * s->d);
    carve_input(&at, &w->normed, M, s->d);
    w->mine = (Input *)carve(&at, (int64_t)threads * (sizeof(Input) + 3) / 4);
    for (int t = 0; t < threads; t++) {
        Input part;
        carve_input(&at, &part, M, s->d);
        if (base) w->mine[t] = part;
    }
    w->qkv = carve(&at, M * (q + 2 * kv > s->d ? q + 2 * kv : s->d));
    carve_input(&at, &w->attended, M, q);
    carve_input(&at, &w->act, M, s->inter);
    w->rope = carve(&at, M * s->head_dim);
    w->scores = carve(&at, (int64_t)threads * s->capacity);
    return at - base;
}

int64_t specviz_work_floats(const Shape *s, int64_t M, int threads) {
    Work w;
    return layout(s, M, threads, (float *)0, &w);
}

static void clear_input(Input *in, int64_t M) {
    memset(in->f, 0, sizeof(float) * M * in->Kp); /* the padding columns stay zero */
    memset(in->h, 0, 2 * M * in->Kp);
}

static inline void store_hidden(void *hidden, int bf16, int64_t i, float value) {
    if (bf16) ((uint16_t *)hidden)[i] = f32_to_bf16(value);
    else ((float *)hidden)[i] = value;
}
static inline float load_hidden(const void *hidden, int bf16, int64_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)hidden)[i]) : ((const float *)hidden)[i];
}

/* cos and sin of each row's rotary angles, once per call: [M, head_dim] (cos in the first half). */
static void rope_table(float *table, const int64_t *positions, int64_t M, int64_t head_dim, const float *inv_freq,
                       float rope_scaling) {
    int64_t half = head_dim / 2;
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < half; i++) {
            float angle = (float)positions[m] * inv_freq[i];
            table[m * head_dim + i] = cosf(angle) * rope_scaling;
            table[m * head_dim + half + i] = sinf(angle) * rope_scaling;
        }
}

/* Llama's rotary embedding (rotate-half form) on one head of fp32 values. */
static void rotate(float *x, int64_t head_dim, const float *cos_sin) {
    int64_t half = head_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        float c = cos_sin[i], s = cos_sin[half + i], a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

/* The team's meeting point between stages. Spinning alone (OpenMP's barrier) is fastest on an idle machine
 * but collapses when another process takes a core: a waiting thread spins through its time slice while the
 * one it waits for is not running (a step took 30x as long with one busy process beside it). So a waiting
 * thread spins briefly, then yields its core. */
typedef struct {
    int count, sense;
} Barrier;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* This thread's number in the team, and the team's size (one thread where OpenMP was not compiled in). */
static inline void team_position(int *thread, int *team) {
#ifdef _OPENMP
    *thread = omp_get_thread_num();
    *team = omp_get_num_threads();
#else
    *thread = 0;
    *team = 1;
#endif
}

static void meet(Barrier *b, int team, int *sense) {
    *sense = !*sense;
    if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == team) {
        __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->sense, *sense, __ATOMIC_RELEASE);
        return;
    }
    for (int spins = 0; __atomic_load_n(&b->sense, __ATOMIC_ACQUIRE) != *sense; spins++) {
        if (spins < 2000) relax();
        else sched_yield();
    }
}

/* Layers in sequence on M rows of hidden states (in place, the model's dtype, [M, d]).
 * positions [M]; prefix: cache entries before these rows (the same for every layer given);
 * allowed: [M, prefix + M] bytes (1: row m may see cache entry j), or NULL for a causal chunk. */
int specviz_layers(const Shape *s, const Layer *layers, int n_layers, void *hidden, int64_t M,
                   const int64_t *positions, int64_t prefix, const uint8_t *allowed, const float *inv_freq,
                   float *work_base, int threads) {
    int bad = check_shape(s);
    if (bad) return bad;
    if (M < 1) return SPECVIZ_BAD_ROWS;
    if ((bad = check_threads(threads))) return bad;
    if (n_layers < 0 || (n_layers && !layers) || !hidden || !positions || !inv_freq || !work_base)
        return SPECVIZ_BAD_POINTER;
    if (prefix < 0 || prefix + M > s->capacity) return SPECVIZ_BAD_CACHE;
    for (int64_t m = 0; m < M; m++)
        if (positions[m] < 0) return SPECVIZ_BAD_POSITION;
    for (int li = 0; li < n_layers; li++) {
        const Layer *ly = &layers[li];
        if (!ly->q || !ly->k || !ly->v || !ly->o || !ly->gate || !ly->up || !ly->down || !ly->norm1 || !ly->norm2 ||
            !ly->keys || !ly->values)
            return SPECVIZ_BAD_POINTER;
    }
    const int bf16 = s->bf16;
    const int64_t d = s->d, hd = s->head_dim, q_size = s->heads * hd, kv_size = s->kv_heads * hd;
    const int64_t qkv_size = q_size + 2 * kv_size, L = prefix + M, groups = s->heads / s->kv_heads;
    Work w;
    layout(s, M, threads, work_base, &w);
    for (int t = 0; t < threads; t++) clear_input(&w.mine[t], M);
    clear_input(&w.attended, M);
    clear_input(&w.act, M);
    rope_table(w.rope, positions, M, hd, inv_freq, s->rope_scaling);
    Barrier barrier = {0, 0};
    for (int64_t i = 0; i < M * d; i++) w.residual[i] = load_hidden(hidden, bf16, i);

#pragma omp parallel num_threads(threads)
    {
        int thread, team;
        team_position(&thread, &team);
        int sense = 0;
        Input *mine = &w.mine[thread];
        const int64_t units = s->heads + 2 * s->kv_heads; /* q ‖ k ‖ v in heads: a thread owns whole heads */
        const int64_t u0 = units * thread / team, u1 = units * (thread + 1) / team;
        for (int li = 0; li < n_layers; li++) {
            const Layer *ly = &layers[li];
            int64_t n0, n1;
            /* A: norm (each thread its own copy), q ‖ k ‖ v, RoPE, keys and values into the cache */
            rms_norm_rows(w.residual, M, d, ly->norm1, bf16, s->eps, mine);
            for (int64_t u = u0; u < u1; u++) {
                const void *weight = u < s->heads ? ly->q : u < s->heads + s->kv_heads ? ly->k : ly->v;
                int64_t first = u < s->heads ? u : u < s->heads + s->kv_heads ? u - s->heads : u - s->heads - s->kv_heads;
                product(weight, bf16, mine, M, d, first * hd, (first + 1) * hd, w.qkv + (u - first) * hd, qkv_size);
                for (int64_t m = 0; m < M; m++) {
                    float *head = w.qkv + m * qkv_size + u * hd;
                    if (u < s->heads + s->kv_heads) rotate(head, hd, w.rope + m * hd);
                    if (u >= s->heads) {
                        void *cache = u < s->heads + s->kv_heads ? ly->keys : ly->values;
                        int64_t at = (first * s->capacity + prefix + m) * hd;
                        for (int64_t i = 0; i < hd; i++) store_hidden(cache, bf16, at + i, head[i]);
                    }
                }
            }
            meet(&barrier, team, &sense);
            /* B: attention, one (row, head) per task, keys in cache order, the unseen ones skipped */
            for (int64_t task = M * s->heads * thread / team; task < M * s->heads * (thread + 1) / team; task++) {
                int64_t m = task / s->heads, h = task % s->heads, kvh = h / groups;
                const float *qv = w.qkv + m * qkv_size + h * hd;
                float *scores = w.scores + (int64_t)thread * s->capacity;
                float best = -INFINITY;
                for (int64_t j = 0; j < L; j++) {
                    int seen = allowed ? allowed[m * L + j] : (j <= prefix + m);
                    if (!seen) continue;
                    int64_t at = (kvh * s->capacity + j) * hd;
                    vf acc = {0};
                    float tail = 0.0f;
                    int64_t i = 0;
                    if (bf16)
                        for (; i + VL <= hd; i += VL) acc += load_f32(qv + i) * load_bf16((const uint16_t *)ly->keys + at + i);
                    else
                        for (; i + VL <= hd; i += VL) acc += load_f32(qv + i) * load_f32((const float *)ly->keys + at + i);
                    for (; i < hd; i++) tail += qv[i] * load_hidden(ly->keys, bf16, at + i);
                    float score = (reduce(acc) + tail) * s->scaling;
                    scores[j] = score;
                    if (score > best) best = score;
                }
                exp_shifted(scores, L, best); /* unseen entries hold stale values: never read below */
                float total = 0.0f;
                float out[512];
                for (int64_t i = 0; i < hd; i++) out[i] = 0.0f;
                for (int64_t j = 0; j < L; j++) {
                    int seen = allowed ? allowed[m * L + j] : (j <= prefix + m);
                    if (!seen) continue;
                    float p = scores[j];
                    total += p;
                    int64_t at = (kvh * s->capacity + j) * hd;
                    if (bf16)
                        for (int64_t i = 0; i < hd; i++) out[i] += p * bf16_to_f32(((const uint16_t *)ly->values)[at + i]);
                    else
                        for (int64_t i = 0; i < hd; i++) out[i] += p * ((const float *)ly->values)[at + i];
                }
                for (int64_t i = 0; i < hd; i++) input_set(&w.attended, bf16, m, h * hd + i, out[i] / total);
            }
            meet(&barrier, team, &sense);
            /* C: output projection, added to the residual (each thread its own columns) */
            share(d, thread, team, &n0, &n1);
            product(ly->o, bf16, &w.attended, M, q_size, n0, n1, w.qkv, d);
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = n0; n < n1; n++) w.residual[m * d + n] += w.qkv[m * d + n];
            meet(&barrier, team, &sense);
            /* D: norm (own copy), gate and up row by row together, into SiLU(gate) * up */
            rms_norm_rows(w.residual, M, d, ly->norm2, bf16, s->eps, mine);
            share(s->inter, thread, team, &n0, &n1);
            for (int64_t n = n0; n < n1; n += R) {
                int64_t e = n + R < n1 ? n + R : n1;
                float gate[64 * R], up[64 * R];
                for (int64_t m0 = 0; m0 < M; m0 += 64) {
                    int64_t mc = M - m0 < 64 ? M - m0 : 64;
                    Input part = *mine;
                    part.f += m0 * part.Kp;
                    part.h += m0 * part.Kp;
                    product(ly->gate, bf16, &part, mc, d, n, e, gate - n, R);
                    product(ly->up, bf16, &part, mc, d, n, e, up - n, R);
                    silu_times(gate, up, mc * R);
                    for (int64_t m = 0; m < mc; m++)
                        for (int64_t c = n; c < e; c++) input_set(&w.act, bf16, m0 + m, c, gate[m * R + c - n]);
                }
            }
            meet(&barrier, team, &sense);
            /* E: down projection, added to the residual, rounded to the model's dtype at the layer's end */
            share(d, thread, team, &n0, &n1);
            product(ly->down, bf16, &w.act, M, s->inter, n0, n1, w.qkv, d);
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = n0; n < n1; n++) {
                    float value = w.residual[m * d + n] + w.qkv[m * d + n];
                    w.residual[m * d + n] = bf16 ? round_bf16(value) : value;
                }
            meet(&barrier, team, &sense);
        }
    }
    for (int64_t i = 0; i < M * d; i++) store_hidden(hidden, bf16, i, w.residual[i]);
    return SPECVIZ_OK;
}

/* Final norm and LM head: logits [M, vocab] fp32 from hidden [M, d] in the model's dtype. */
int specviz_head(const Shape *s, const void *hidden, int64_t M, const void *norm, const void *head, int64_t vocab,
                 float *logits, float *work_base, int threads) {
    int bad = check_shape(s);
    if (bad) return bad;
    if (M < 1) return SPECVIZ_BAD_ROWS;
    if ((bad = check_threads(threads))) return bad;
    if (!hidden || !norm || !head || !logits || !work_base || vocab < 1) return SPECVIZ_BAD_POINTER;
    const int bf16 = s->bf16;
    Work w;
    layout(s, M, threads, work_base, &w);
    for (int64_t i = 0; i < M * s->d; i++) w.residual[i] = load_hidden(hidden, bf16, i);
    clear_input(&w.normed, M);
    rms_norm_rows(w.residual, M, s->d, norm, bf16, s->eps, &w.normed);
#pragma omp parallel num_threads(threads)
    {
        int thread, team;
        team_position(&thread, &team);
        int64_t n0, n1;
        share(vocab, thread, team, &n0, &n1);
        product(head, bf16, &w.normed, M, s->d, n0, n1, logits, vocab);
    }
    return SPECVIZ_OK;
}

/* A plain product for the drafters' own linear maps: y [M, N] fp32 = x [M, K] w [N, K]^T (+ bias [N]), x, w and
 * bias in the model's dtype (bf16 != 0: bf16), summed as every product here is: row-invariant. */
int specviz_linear(const void *x, int64_t M, int64_t K, const void *w, int64_t N, const void *bias, int bf16,
                   float *y, int threads) {
    if (M < 1) return SPECVIZ_BAD_ROWS;
    if (K < 1 || N < 1) return SPECVIZ_BAD_SHAPE;
    int bad = check_threads(threads);
    if (bad) return bad;
    if (!x || !w || !y) return SPECVIZ_BAD_POINTER;
    Input in;
    in.Kp = padded(K);
    in.f = (float *)calloc((size_t)(M * in.Kp), sizeof(float));
    in.h = (uint16_t *)calloc((size_t)(M * in.Kp), sizeof(uint16_t));
    if (!in.f || !in.h) {
        free(in.f);
        free(in.h);
        return SPECVIZ_NO_MEMORY;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) input_set(&in, bf16, m, k, load_hidden(x, bf16, m * K + k));
#pragma omp parallel num_threads(threads)
    {
        int thread, team;
        team_position(&thread, &team);
        int64_t n0, n1;
        share(N, thread, team, &n0, &n1);
        product(w, bf16, &in, M, K, n0, n1, y, N);
        if (bias)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = n0; n < n1; n++) y[m * N + n] += load_hidden(bias, bf16, n);
    }
    free(in.f);
    free(in.h);
    return SPECVIZ_OK;
}
