/* specviz's decode step in C: Llama decoder layers and the LM head, for one query row or many.
 *
 * Why: a decode step reads every weight once, so it can run no faster than the weights stream from memory.
 * PyTorch reaches that for large products but spends a step's other half on ~1,500 small operations
 * (norms in pieces, RoPE, residual adds, SiLU·mul, cache writes, casts), each a dispatch of a few µs.
 * Here one call runs a range of layers: every stage is a loop inside one OpenMP parallel region, the
 * small operations are folded into the products' loops, and threads meet at a barrier between stages
 * (llama.cpp's ggml-cpu does the same).
 *
 * Row invariance by construction: every output element of a product is one vector lane summing its k in
 * ascending order (the weights are packed so that a lane is an output: see "products" below), or on a CPU with
 * AMX one row of a tile summing blocks of 32 k in ascending order (see "AMX tiles"), one thread computes it
 * whole, and attention visits a query's keys in cache order, skips the ones it may not see and reduces each
 * score by one fixed tree. So a row's bits never depend on how many rows share the call or on which thread
 * took it: a chunk or a tree verified in one forward gets what one-token steps would get.
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
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define SPECVIZ_DPBF16 1
/* GCC spells the AMX macros __AMX_TILE__ and __AMX_BF16__, clang __AMXTILE__ and __AMXBF16__ (a clang build
 * that looked for GCC's alone kept the vector products on a CPU with tiles) */
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_BF16__) || defined(__AMXBF16__)) &&            \
    defined(__linux__)
#define SPECVIZ_AMX 1 /* built for a CPU with AMX tiles (a Xeon since Sapphire Rapids): used where the kernel allows */
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(__AVX512F__)
#define SPECVIZ_QUANTIZED_AVX2 1 /* the AVX2 build (16-output panels): quantized panels widened 8 lanes at a time */
#endif

/* ---- the register tile of each instruction set -------------------------------------------------------
 * VL: fp32 lanes of one vector register. A product's tile is RM input rows × RN vectors of outputs (a panel of
 * P = RN·VL outputs): RM·RN accumulators, RN weight vectors and the broadcast input (folded into the multiply
 * where the instruction set takes a broadcast operand) fit the register file with none to spare for spills
 * (scripts/check_native_asm.py counts stack moves in the built library's products). Measured on a 2-core Zen 4
 * (bf16, interleaved A/B of whole forwards): 6 × 4 beat 24 × 1 and 8 × 2 by 5–15% at 8–24 rows.
 *   AVX-512 (32 zmm): 6 × 4 → 24 + 4 + 1;  AVX2 (16 ymm): 5 × 2 → 10 + 2 + 1 (+ the bf16 widening's temporary);
 *   NEON (32 q): 5 × 4 → 20 + 4 + the rows' inputs (its multiply takes a lane of a register, not memory: 6 × 4
 *   spilled inside the loop with GCC 12, 5 × 4 does not with GCC 12 or clang 14; scripts/arm_check.py);
 *   anything else (SSE2's 16 xmm): 5 × 2. */
#if defined(__AVX512F__)
#define VL 16
#define RM_DEFAULT 6
#define RN_DEFAULT 4
#define SPECVIZ_ISA "avx512"
#elif defined(__AVX2__) || defined(__AVX__)
#define VL 8
#define RM_DEFAULT 5
#define RN_DEFAULT 2
#define SPECVIZ_ISA "avx2"
#elif defined(__aarch64__) || defined(__ARM_NEON)
#define VL 4
#define RM_DEFAULT 5
#define RN_DEFAULT 4
#define SPECVIZ_ISA "neon"
#else
#define VL 4
#define RM_DEFAULT 5
#define RN_DEFAULT 2
#define SPECVIZ_ISA "generic"
#endif
#ifndef RM /* -DRM=… -DRN=… try other tiles (scripts/check_native_asm.py, the A/B in docs/verify-cost.md) */
#define RM RM_DEFAULT
#endif
#ifndef RN
#define RN RN_DEFAULT
#endif
#define P (RN * VL)
#if defined(SPECVIZ_AMX) && RN != 4 /* the AMX products take a panel's four 16-output groups (a -DRN=… A/B build) */
#undef SPECVIZ_AMX
#endif

/* Loops over a tile's rows, vectors and lanes unrolled whole (their counts are constants at every call), so the
 * accumulators are registers: GCC's pragma, or clang's (which GCC 11 does not know). */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#define ROLLED _Pragma("clang loop unroll(disable)")
#else
#define UNROLL _Pragma("GCC unroll 32")
#define ROLLED _Pragma("GCC unroll 1") /* a loop kept rolled: unrolled, its values outnumber the registers */
#endif /* outputs of one packed panel: the unit a product is split in between threads */

typedef float vf __attribute__((vector_size(VL * 4)));
typedef uint32_t vu __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));
typedef uint16_t vh __attribute__((vector_size(VL * 2)));
typedef uint8_t vb8 __attribute__((vector_size(VL)));

typedef struct {
    const void *q, *k, *v, *o, *gate_up, *down; /* packed (specviz_pack) from [out, in], in the model's dtype;
                                                 * gate_up: gate's and up's panels interleaved (gate 0, up 0,
                                                 * gate 1, …), so stage D reads one stream */
    const void *norm1, *norm2;                   /* [d] */
    /* gate_up, down and norm2 all NULL: an attention-only block, h + attention(norm1(h)) (CATS's adapter), whose
     * residual is rounded to the model's dtype after the output projection */
    void *keys, *values;                         /* the cache: [kv_heads, capacity, head_dim] */
    /* k and v both NULL: cross-attention (MoA's CA block). keys and values are then a memory computed elsewhere,
     * of which every row reads the call's first `prefix` entries; q is not rotated and nothing is written. */
    int formats; /* each product weight's format, 4 bits each from the lowest: q, k, v, o, gate_up, down
                  * (PLAIN: specviz_pack's panels; Q4_1, Q8_0: specviz_pack_quantized's) */
    const void *plain[6]; /* where a weight is quantized, its plain panels too (or NULL): products of more than
                           * BLOCK_ROWS rows read those (chosen_layer) */
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
    SPECVIZ_BAD_CACHE = -5,    /* prefix < 0, or prefix + M past the cache's capacity (a cross layer: prefix not in
                                * 1..capacity) */
    SPECVIZ_BAD_POSITION = -6, /* a negative position */
    SPECVIZ_NO_MEMORY = -7,
    SPECVIZ_BAD_FORMAT = -8,   /* a weight's format code unknown, or one this build cannot read (quantized panels
                                * need panels of a multiple of 16 outputs, and K a multiple of 32) */
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

/* The same rounding on a vector of lanes: the upper 16 bits of each lane's result (lane for lane the bits
 * f32_to_bf16 gives). */
static inline vu vbf16_bits(vf v) {
    vu u;
    memcpy(&u, &v, sizeof u);
    vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
    vu rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (nan & ((u & 0xffff0000u) | 0x400000u)) | (~nan & rounded);
}

/* ---- one vector of weights or inputs as fp32 lanes ------------------------------------------------ */
static inline vf load_f32(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
#if defined(__aarch64__) || defined(__ARM_NEON)
/* memcpy of a generic vector made GCC 12 for AArch64 store each accumulator to the stack and copy it out through
 * general registers; a store of a vector type that may sit at any float's address is one instruction */
typedef float vf_unaligned __attribute__((vector_size(VL * 4), aligned(4), may_alias));
static inline void store_f32(float *p, vf v) { *(vf_unaligned *)p = v; }
#else
static inline void store_f32(float *p, vf v) { memcpy(p, &v, sizeof v); }
#endif
static inline vf load_bf16(const uint16_t *p) { /* one widening load: generic vectors make GCC split it in two */
#if VL == 16 && defined(__AVX512F__)
    return (vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16);
#elif VL == 8 && defined(__AVX2__)
    return (vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16);
#else
    vh h;
    memcpy(&h, p, sizeof h);
    vu u = __builtin_convertvector(h, vu) << 16;
    vf v;
    memcpy(&v, &u, sizeof v);
    return v;
#endif
}
/* x in every lane. Not (vf){0} + x: 0 + x is not x for x = -0, so the compiler must add before it broadcasts, an
 * FP add and a shuffle per input element in the products' inner loop on the ports the multiply-adds need, where a
 * broadcast from memory is one load (AVX2 build, bf16: 8 rows 22.2 → 18.5 ms, 16 rows 39.4 → 31.7). */
static inline vf splat(float x) {
#if VL == 16 && defined(__AVX512F__)
    return (vf)_mm512_set1_ps(x);
#elif VL == 8 && defined(__AVX__)
    return (vf)_mm256_set1_ps(x);
#else
    vf v;
    for (int i = 0; i < VL; i++) v[i] = x;
    return v;
#endif
}

/* Lane for lane b > a ? b : a, the scalar running maximum's own comparison (a NaN in b never wins): a maximum is
 * exact, so taking it VL lanes at a time and then across the lanes gives the same value as one lane at a time in
 * key order (a ±0 tie can only change the sign of a zero, which subtracting it from a score cannot see). */
static inline vf keep_larger(vf a, vf b) {
    vi larger = (vi)(b > a);
    return (vf)(((vi)b & larger) | ((vi)a & ~larger));
}
static inline float largest_lane(vf v) {
    float top = v[0];
    for (int l = 1; l < VL; l++) top = v[l] > top ? v[l] : top;
    return top;
}

/* The lanes summed in one fixed tree (halves added, then halves of the sum, ...): the same for every sum,
 * whatever the row count. Each step adds the vector to itself with its halves swapped, so lane 0 ends with the
 * tree's sum (and no value goes through memory). GCC's shuffle builtin, or clang's (GCC 12 has both; 11 only
 * its own). */
#if defined(__clang__)
#define SWAP_LANES(v, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
#define SWAP_LANES(v, ...) __builtin_shuffle(v, (vi){__VA_ARGS__})
#endif
static inline float reduce(vf v) {
#if VL == 16
    v += SWAP_LANES(v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    v += SWAP_LANES(v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    v += SWAP_LANES(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    v += SWAP_LANES(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
#elif VL == 8
    v += SWAP_LANES(v, 4, 5, 6, 7, 0, 1, 2, 3);
    v += SWAP_LANES(v, 2, 3, 0, 1, 6, 7, 4, 5);
    v += SWAP_LANES(v, 1, 0, 3, 2, 5, 4, 7, 6);
#else
    v += SWAP_LANES(v, 2, 3, 0, 1);
    v += SWAP_LANES(v, 1, 0, 3, 2);
#endif
    return v[0];
}


/* VL sums at once, lane l holding reduce(a[l]): the same halving tree for each (so a score's bits do not depend on
 * whether its key fell in a block or among the last few), with two-vector shuffles between the steps instead
 * of a reduction per key. */
#if defined(__clang__)
#define PAIR_LANES(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define PAIR_LANES(x, y, ...) __builtin_shuffle(x, y, (vi){__VA_ARGS__})
#endif
#if VL == 16
static inline vf reduce_each(const vf *a) { /* lane l: reduce(a[l]) */
    vf s0_0 = PAIR_LANES(a[0], a[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[0], a[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s0_1 = PAIR_LANES(a[2], a[3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[2], a[3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s0_2 = PAIR_LANES(a[4], a[5], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[4], a[5], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s0_3 = PAIR_LANES(a[6], a[7], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[6], a[7], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s0_4 = PAIR_LANES(a[8], a[9], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[8], a[9], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s0_5 = PAIR_LANES(a[10], a[11], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[10], a[11], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s0_6 = PAIR_LANES(a[12], a[13], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[12], a[13], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s0_7 = PAIR_LANES(a[14], a[15], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + PAIR_LANES(a[14], a[15], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    vf s1_0 = PAIR_LANES(s0_0, s0_1, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) + PAIR_LANES(s0_0, s0_1, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    vf s1_1 = PAIR_LANES(s0_2, s0_3, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) + PAIR_LANES(s0_2, s0_3, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    vf s1_2 = PAIR_LANES(s0_4, s0_5, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) + PAIR_LANES(s0_4, s0_5, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    vf s1_3 = PAIR_LANES(s0_6, s0_7, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) + PAIR_LANES(s0_6, s0_7, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    vf s2_0 = PAIR_LANES(s1_0, s1_1, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) + PAIR_LANES(s1_0, s1_1, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    vf s2_1 = PAIR_LANES(s1_2, s1_3, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) + PAIR_LANES(s1_2, s1_3, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    vf s3_0 = PAIR_LANES(s2_0, s2_1, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) + PAIR_LANES(s2_0, s2_1, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return s3_0;
}
#elif VL == 8
static inline vf reduce_each(const vf *a) { /* lane l: reduce(a[l]) */
    vf s0_0 = PAIR_LANES(a[0], a[1], 0, 1, 2, 3, 8, 9, 10, 11) + PAIR_LANES(a[0], a[1], 4, 5, 6, 7, 12, 13, 14, 15);
    vf s0_1 = PAIR_LANES(a[2], a[3], 0, 1, 2, 3, 8, 9, 10, 11) + PAIR_LANES(a[2], a[3], 4, 5, 6, 7, 12, 13, 14, 15);
    vf s0_2 = PAIR_LANES(a[4], a[5], 0, 1, 2, 3, 8, 9, 10, 11) + PAIR_LANES(a[4], a[5], 4, 5, 6, 7, 12, 13, 14, 15);
    vf s0_3 = PAIR_LANES(a[6], a[7], 0, 1, 2, 3, 8, 9, 10, 11) + PAIR_LANES(a[6], a[7], 4, 5, 6, 7, 12, 13, 14, 15);
    vf s1_0 = PAIR_LANES(s0_0, s0_1, 0, 1, 4, 5, 8, 9, 12, 13) + PAIR_LANES(s0_0, s0_1, 2, 3, 6, 7, 10, 11, 14, 15);
    vf s1_1 = PAIR_LANES(s0_2, s0_3, 0, 1, 4, 5, 8, 9, 12, 13) + PAIR_LANES(s0_2, s0_3, 2, 3, 6, 7, 10, 11, 14, 15);
    vf s2_0 = PAIR_LANES(s1_0, s1_1, 0, 2, 4, 6, 8, 10, 12, 14) + PAIR_LANES(s1_0, s1_1, 1, 3, 5, 7, 9, 11, 13, 15);
    return s2_0;
}
#elif VL == 4
static inline vf reduce_each(const vf *a) { /* lane l: reduce(a[l]) */
    vf s0_0 = PAIR_LANES(a[0], a[1], 0, 1, 4, 5) + PAIR_LANES(a[0], a[1], 2, 3, 6, 7);
    vf s0_1 = PAIR_LANES(a[2], a[3], 0, 1, 4, 5) + PAIR_LANES(a[2], a[3], 2, 3, 6, 7);
    vf s1_0 = PAIR_LANES(s0_0, s0_1, 0, 2, 4, 6) + PAIR_LANES(s0_0, s0_1, 1, 3, 5, 7);
    return s1_0;
}
#endif

/* ---- products: y[m, n] = sum_k x[m, k] w[n, k] over packed weights --------------------------------
 * Why packed: a product over the row-major [out, in] weight sums each output lane-wise over k and then across
 * its lanes: a horizontal reduction per output, and either several weight rows streamed at once (which the
 * hardware prefetcher follows badly: 20 GB/s against 30 for one stream on a 2-core Zen 4) or the inputs
 * reloaded per row. Packed once at load into panels of P outputs with k outermost ([k][RN][VL], or with AVX-512
 * BF16 [k/2][RN][VL][2] pairs), one panel is one sequential stream, each input element is broadcast against RN
 * vectors of P outputs, and an output's lane is its whole sum: k ascending, one step per k (or per pair of k),
 * the same order for every tile shape and row count. Row invariance holds by construction, with no reduction.
 * The memory it costs: one more copy of the weights (the model's own tensors stay for PyTorch's path). */
#ifdef SPECVIZ_DPBF16
#define PAIRS(bf16) (bf16)
#else
#define PAIRS(bf16) 0
#endif

/* elements (of the model's dtype) of one panel of a [N, K] weight */
static inline int64_t panel_elems(int64_t K, int bf16) { return PAIRS(bf16) ? (K + 1) / 2 * 2 * P : K * P; }

/* The packed layout's name (its panel width, and whether k comes in pairs): packed copies are kept per layout. */
int specviz_panel_layout(int bf16) { return P * 2 + PAIRS(bf16); }

int64_t specviz_panel_elems(int64_t K, int bf16) { return K < 1 ? 0 : panel_elems(K, bf16); }

int64_t specviz_packed_elems(int64_t N, int64_t K, int bf16) {
    if (N < 1 || K < 1) return 0;
    return (N + P - 1) / P * panel_elems(K, bf16);
}

/* Pack w [N, K] (row-major) into panels; rows past N and k past K are zeros. */
int specviz_pack(const void *w, int64_t N, int64_t K, int bf16, void *out) {
    if (!w || !out) return SPECVIZ_BAD_POINTER;
    if (N < 1 || K < 1) return SPECVIZ_BAD_SHAPE;
    const int64_t panels = (N + P - 1) / P, pe = panel_elems(K, bf16);
    const int group = PAIRS(bf16) ? 2 : 1; /* k per step: [k/2][P][2] with pairs, else [k][P] */
    const int64_t steps = (K + group - 1) / group;
#pragma omp parallel for schedule(static) /* panels apart: packing at load took ~0.3 s a process on one core */
    for (int64_t p = 0; p < panels; p++) {
        int64_t i = p * pe; /* walks the panel in memory order */
        for (int64_t s = 0; s < steps; s++)
            for (int64_t lane = 0; lane < P; lane++)
                for (int j = 0; j < group; j++, i++) {
                    int64_t n = p * P + lane, k = s * group + j;
                    int inside = n < N && k < K;
                    if (bf16) ((uint16_t *)out)[i] = inside ? ((const uint16_t *)w)[n * K + k] : 0;
                    else ((float *)out)[i] = inside ? ((const float *)w)[n * K + k] : 0.0f;
                }
    }
    return SPECVIZ_OK;
}

/* ---- quantized panels: the GGUF's own blocks, widened to bf16 pairs in registers as the products run -------
 * Why: one decode step reads every weight once, so its time is the weights' bytes over the memory's read rate.
 * The default model's weights come from a GGUF whose layers are Q4_1 (32 weights share an fp16 scale d and
 * offset m: w = d·q + m, q in 0..15; 5 bits a weight) and whose head is Q8_0 (w = d·q, q an int8; 9 bits here):
 * the bf16 weights the model holds are those values rounded once to bf16. Read as blocks, a step reads about
 * 100 MB where bf16 panels take 269. A panel's blocks are widened to the very bf16 pairs specviz_pack's panel
 * holds, and the dot products run on those, k ascending as ever: the products' bits, and row invariance, are
 * the plain panels' by construction. step.py checks that identity for every weight when it packs it
 * (specviz_unpack_quantized against specviz_pack) and keeps the plain panels wherever it fails.
 *
 * Widening without a conversion instruction: a q placed in the mantissa of 1.0 is the float f = 1 + q/16 (Q4_1)
 * or 1 + u/256 (Q8_0, u = q + 128), exactly, by a shift and a mask. Then w = fma(f, 16d, m − 16d) (Q4_1) or
 * fma(f, 256d, −384d) (Q8_0): the fused product is exact, so the one rounding is that of d·q + m (d·q is exact in
 * fp32), as numpy's dequantization rounds it, provided m − 16d is exact in fp32 (it is unless m's exponent is far
 * from d's; the check at packing finds any weight where it is not). Then 32 such values go to bf16 pairs by one
 * round-to-nearest-even conversion, as torch's cast does.
 *
 * Layout: a panel of P outputs is P/16 groups of 16 outputs, each group's blocks in turn (so one group is one
 * sequential read). A group's block of 32 k: Q4_1 (320 bytes): 16 fp16 d, 16 fp16 m, then 4 chunks of 64 bytes
 * whose 32-bit lane l holds 8 nibbles: nibble v of chunk c is the q of output 8·(v % 2) + l / 2 at
 * k = 2·(4c + v / 2) + l % 2 (lanes in the order the bf16 panel stores a pair's outputs: vector v % 2 == 0 holds
 * outputs 0-7's pairs, v % 2 == 1 outputs 8-15's). Q8_0 (576 bytes): 16 fp16 d, 32 bytes of padding (chunks stay
 * line-aligned), then 8 chunks whose lane l holds 4 bytes u = q + 128: byte v of chunk c for output
 * 8·(v % 2) + l / 2 at k = 2·(2c + v / 2) + l % 2. */
enum { PLAIN = 0, Q4_1 = 1, Q8_0 = 2, Q4_1_I8 = 3, Q8_0_I8 = 4 };
#define QBLOCK 32
#define QGROUP 16
/* Q4_1_I8, Q8_0_I8: the same blocks laid out for integer dot products against inputs quantized to int8 (the int8
 * products below); their bytes are the format's own. */
static inline int is_int8(int fmt) { return fmt == Q4_1_I8 || fmt == Q8_0_I8; }
static inline int base_format(int fmt) { return is_int8(fmt) ? fmt - 2 : fmt; }
static inline int64_t quantized_group_bytes(int fmt) { return base_format(fmt) == Q4_1 ? 320 : 576; }
static inline int64_t quantized_panel_bytes(int64_t K, int fmt) {
    return K / QBLOCK * (P / QGROUP) * quantized_group_bytes(fmt);
}
static inline int quantized_shape_ok(int64_t K, int fmt) {
    return fmt >= Q4_1 && fmt <= Q8_0_I8 && P % QGROUP == 0 && K >= QBLOCK && K % QBLOCK == 0;
}

/* bytes of one panel as stored: a quantized panel's, or a plain panel's in the model's dtype */
static inline int64_t stored_panel_bytes(int64_t K, int fmt, int bf16) {
    return fmt ? quantized_panel_bytes(K, fmt) : panel_elems(K, bf16) * (bf16 ? 2 : 4);
}

/* The formats this build widens with vector instructions for a model of this dtype (bit f: format f): where it
 * has none, step.py keeps plain panels. The others still widen correctly, one weight at a time. */
int specviz_quantized_formats(int bf16) {
#if defined(SPECVIZ_DPBF16)
    return bf16 ? (1 << Q4_1) | (1 << Q8_0) : 0;
#elif defined(SPECVIZ_QUANTIZED_AVX2)
    (void)bf16; /* both dtypes: fp32 takes the widened weight as it is, bf16 rounds it first */
    return (1 << Q4_1) | (1 << Q8_0);
#else
    (void)bf16;
    return 0;
#endif
}

int64_t specviz_quantized_bytes(int64_t N, int64_t K, int fmt) {
    if (N < 1 || !quantized_shape_ok(K, fmt)) return 0;
    return (N + P - 1) / P * quantized_panel_bytes(K, fmt);
}

static inline float half_to_f32(uint16_t h) { /* IEEE binary16, subnormals included */
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0x1f) bits = sign | 0x7f800000u | mantissa << 13;
    else if (exponent) bits = sign | (exponent + 112) << 23 | mantissa << 13;
    else if (!mantissa) bits = sign;
    else {
        float f = (float)mantissa * (1.0f / 16777216.0f); /* 2^-24: exact */
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Block b of a GGUF row (K / 32 blocks of 20 bytes (Q4_1) or 34 (Q8_0)): its d's (and m's) fp16 bits and its
 * 32 q. */
static inline void gguf_block(const uint8_t *row, int fmt, int64_t b, uint16_t *d, uint16_t *m, int q[QBLOCK]) {
    const uint8_t *block = row + b * (fmt == Q4_1 ? 20 : 34);
    memcpy(d, block, 2);
    *m = 0;
    if (fmt == Q4_1) {
        memcpy(m, block + 2, 2);
        for (int j = 0; j < 16; j++) {
            q[j] = block[4 + j] & 15;
            q[j + 16] = block[4 + j] >> 4;
        }
    } else {
        for (int j = 0; j < QBLOCK; j++) q[j] = (int8_t)block[2 + j];
    }
}

/* Group g's block b of a quantized panel; the same bytes of the next panel are asked for as this one is read. */
static inline const uint8_t *group_block(const uint8_t *panel, int fmt, int64_t K, int g, int64_t b, const char *next) {
    const int64_t record = quantized_group_bytes(fmt), at = (g * (K / QBLOCK) + b) * record;
    if (next)
        for (int64_t line = 0; line < record; line += 64) __builtin_prefetch(next + at + line, 0, 2);
    return panel + at;
}

/* Which output of its group (o) and which k of its block value v of lane l of chunk c holds. With AVX-512 BF16
 * (pairs): lanes in the order a bf16 panel stores a pair's outputs, as above. Elsewhere (the AVX2 build's 16-output
 * panels of fp32 lanes): lane l is output l, and value v of chunk c is k = 8c + v (Q4_1) or 4c + v (Q8_0), so a
 * chunk's two 8-lane halves widen to outputs 0-7 and 8-15 at one k, the plain panel's two vectors there. */
#ifdef SPECVIZ_DPBF16
#define QPAIRS 1
#else
#define QPAIRS 0
#endif
static inline void chunk_place(int fmt, int c, int l, int v, int *o, int *k) {
    if (is_int8(fmt)) { /* lane l is output l; a lane's four bytes are four k in a row (the int8 products' layout) */
        *o = l;
        *k = fmt == Q4_1_I8 ? 16 * (v / 4) + 4 * c + v % 4 : 4 * c + v;
    } else if (QPAIRS) {
        *o = 8 * (v % 2) + l / 2;
        *k = 2 * (fmt == Q4_1 ? 4 * c + v / 2 : 2 * c + v / 2) + l % 2;
    } else {
        *o = l;
        *k = (fmt == Q4_1 ? 8 : 4) * c + v;
    }
}

/* Where value v of a chunk's lane sits in its 32 bits: Q4_1's nibbles in turn, Q8_0's bytes; Q4_1_I8's values 0-3 in
 * the low nibbles of the four bytes, 4-7 in the high ones (one mask gives four k in a row, a shift the next four). */
static inline int value_shift(int fmt, int v) {
    switch (fmt) {
    case Q4_1: return 4 * v;
    case Q4_1_I8: return 8 * (v % 4) + 4 * (v / 4);
    default: return 8 * v;
    }
}

/* Pack GGUF blocks [N rows][K / 32 blocks] (rows in the model's order) into quantized panels; rows past N are
 * zeros (d = m = 0: weights 0, as specviz_pack pads). */
int specviz_pack_quantized(const uint8_t *blocks, int fmt, int64_t N, int64_t K, uint8_t *out) {
    if (!blocks || !out) return SPECVIZ_BAD_POINTER;
    if (N < 1 || K < 1) return SPECVIZ_BAD_SHAPE;
    if (!quantized_shape_ok(K, fmt)) return SPECVIZ_BAD_FORMAT;
    const int base = base_format(fmt);
    const int64_t row_bytes = K / QBLOCK * (base == Q4_1 ? 20 : 34), groups = P / QGROUP;
    const int chunks = base == Q4_1 ? 4 : 8, values = base == Q4_1 ? 8 : 4;
    memset(out, 0, (size_t)specviz_quantized_bytes(N, K, fmt));
    const int64_t panels = (N + P - 1) / P;
#pragma omp parallel for schedule(static) /* panels apart, as specviz_pack */
    for (int64_t p = 0; p < panels; p++) {
        uint8_t *at = out + p * quantized_panel_bytes(K, fmt);
        for (int64_t g = 0; g < groups; g++)
            for (int64_t b = 0; b < K / QBLOCK; b++, at += quantized_group_bytes(fmt)) {
                uint16_t d[QGROUP] = {0}, m[QGROUP] = {0};
                int q[QGROUP][QBLOCK] = {{0}}; /* rows past N: d = m = 0 and q = 0, weights 0 as specviz_pack pads */
                for (int o = 0; o < QGROUP; o++) {
                    const int64_t n = p * P + g * QGROUP + o;
                    if (n < N) gguf_block(blocks + n * row_bytes, base, b, &d[o], &m[o], q[o]);
                }
                memcpy(at, d, sizeof d);
                if (base == Q4_1) memcpy(at + 32, m, sizeof m);
                for (int c = 0; c < chunks; c++)
                    for (int l = 0; l < 16; l++) {
                        uint32_t lane = 0;
                        for (int v = 0; v < values; v++) {
                            int o, k;
                            chunk_place(fmt, c, l, v, &o, &k);
                            lane |= (base == Q4_1 ? (uint32_t)q[o][k] : (uint32_t)(uint8_t)(q[o][k] + 128))
                                    << value_shift(fmt, v);
                        }
                        memcpy(at + 64 + 64 * c + 4 * l, &lane, 4);
                    }
            }
    }
    return SPECVIZ_OK;
}

/* One panel widened, weight by weight, into the build's plain panel layout: the reference, and the path of
 * builds without a vector one. */
static void unpack_panel_scalar(const uint8_t *panel, int fmt, int64_t K, int bf16, void *out) {
    const int base = base_format(fmt), chunks = base == Q4_1 ? 4 : 8, values = base == Q4_1 ? 8 : 4;
    for (int64_t g = 0; g < P / QGROUP; g++)
        for (int64_t b = 0; b < K / QBLOCK; b++) {
            const uint8_t *block = panel + (g * (K / QBLOCK) + b) * quantized_group_bytes(fmt);
            for (int c = 0; c < chunks; c++)
                for (int l = 0; l < 16; l++) {
                    uint32_t lane;
                    memcpy(&lane, block + 64 + 64 * c + 4 * l, 4);
                    for (int v = 0; v < values; v++) {
                        int o, kb;
                        chunk_place(fmt, c, l, v, &o, &kb);
                        uint16_t dh, mh = 0;
                        memcpy(&dh, block + 2 * o, 2);
                        float w;
                        if (base == Q4_1) {
                            memcpy(&mh, block + 32 + 2 * o, 2);
                            w = half_to_f32(dh) * (float)(lane >> value_shift(fmt, v) & 15) + half_to_f32(mh); /* d·q exact */
                        } else {
                            w = half_to_f32(dh) * (float)((int)(lane >> value_shift(fmt, v) & 255) - 128);
                        }
                        const int64_t n = g * QGROUP + o, k = b * QBLOCK + kb;
                        const int64_t at = PAIRS(bf16) ? (k / 2 * P + n) * 2 + k % 2 : k * P + n;
                        if (bf16) ((uint16_t *)out)[at] = f32_to_bf16(w);
                        else ((float *)out)[at] = w;
                    }
                }
        }
}

#ifdef SPECVIZ_DPBF16
/* A group block's scales, each output's duplicated across its pair's two lanes: first (outputs 0-7) and last
 * (8-15), the multiplier 16d (256d) and the addend m − 16d (−384d). */
typedef struct {
    __m512 mul[2], add[2];
} GroupScales;

static inline GroupScales group_scales(const uint8_t *block, int fmt) {
    const __m512i first8 = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i halves[2] = {first8, _mm512_add_epi32(first8, _mm512_set1_epi32(8))};
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)block));
    const __m512 m =
        fmt == Q4_1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(block + 32))) : _mm512_setzero_ps();
    const __m512 mul = _mm512_mul_ps(d, _mm512_set1_ps(fmt == Q4_1 ? 16.0f : 256.0f)); /* exact */
    const __m512 add =
        fmt == Q4_1 ? _mm512_fnmadd_ps(d, _mm512_set1_ps(16.0f), m) : _mm512_mul_ps(d, _mm512_set1_ps(-384.0f));
    GroupScales s;
    for (int h = 0; h < 2; h++) {
        s.mul[h] = _mm512_permutexvar_ps(halves[h], mul);
        s.add[h] = _mm512_permutexvar_ps(halves[h], add);
    }
    return s;
}

/* Value v of every lane of a chunk as the float 1 + q/16 (Q4_1) or 1 + u/256 (Q8_0), then the weight. */
static inline __attribute__((always_inline)) __m512 widen(__m512i chunk, int fmt, int v, const GroupScales *s) {
    const int bits = fmt == Q4_1 ? 4 : 8, shift = 23 - bits - bits * v; /* value v's lowest bit to bit 23 - bits */
    const __m512i placed =
        shift >= 0 ? _mm512_slli_epi32(chunk, (unsigned)shift) : _mm512_srli_epi32(chunk, (unsigned)-shift);
    const __m512i mask = _mm512_set1_epi32((int)(((1u << bits) - 1) << (23 - bits)));
    const __m512i one = _mm512_set1_epi32(0x3f800000);
    const __m512 f = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(placed, mask, one, 0xea)); /* placed & mask | one */
    return _mm512_fmadd_ps(f, s->mul[v % 2], s->add[v % 2]);
}

/* The bf16 pairs of pair p of a chunk: values 2p (outputs 0-7) and 2p + 1 (8-15). */
static inline __attribute__((always_inline)) __m512bh widened_pair(__m512i chunk, int fmt, int p,
                                                                   const GroupScales *s) {
    return _mm512_cvtne2ps_pbh(widen(chunk, fmt, 2 * p + 1, s), widen(chunk, fmt, 2 * p, s));
}

/* A whole panel widened into out (a plain bf16 panel): for a product of many rows, whose tiles then read it from
 * cache. The next panel's blocks are asked for at the pace this one's are read. */
static void unpack_panel_bf16(const uint8_t *panel, int fmt, int64_t K, uint16_t *out, const char *next) {
    const int64_t blocks = K / QBLOCK;
    for (int g = 0; g < P / QGROUP; g++)
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *block = group_block(panel, fmt, K, g, b, next);
            const GroupScales s = group_scales(block, fmt);
            uint16_t *o = out + (b * (QBLOCK / 2) * RN + g) * 32;
            if (fmt == Q4_1)
                for (int c = 0; c < 4; c++) {
                    const __m512i chunk = _mm512_loadu_si512(block + 64 + 64 * c);
UNROLL
                    for (int p = 0; p < 4; p++)
                        _mm512_storeu_si512(o + (4 * c + p) * RN * 32, (__m512i)widened_pair(chunk, Q4_1, p, &s));
                }
            else
                for (int c = 0; c < 8; c++) {
                    const __m512i chunk = _mm512_loadu_si512(block + 64 + 64 * c);
UNROLL
                    for (int p = 0; p < 2; p++)
                        _mm512_storeu_si512(o + (2 * c + p) * RN * 32, (__m512i)widened_pair(chunk, Q8_0, p, &s));
                }
        }
}
#endif

#ifdef SPECVIZ_QUANTIZED_AVX2
/* The AVX2 build's widening (16-output panels, fp32 lanes): a group block's scales for outputs 0-7 and 8-15, then
 * value v of a chunk half as the weight, exactly as the AVX-512 widening makes it; for a bf16 model rounded to
 * bf16 by the integer form of round-to-nearest-even (f32_to_bf16's), kept in fp32 lanes as the bf16 panel's
 * widened load gives them. */
typedef struct {
    __m256 mul[2], add[2];
} GroupScales8;

static inline GroupScales8 group_scales8(const uint8_t *block, int fmt) {
    GroupScales8 s;
    for (int h = 0; h < 2; h++) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(block + 16 * h)));
        s.mul[h] = _mm256_mul_ps(d, _mm256_set1_ps(fmt == Q4_1 ? 16.0f : 256.0f)); /* exact */
        const __m256 m = fmt == Q4_1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(block + 32 + 16 * h)))
                                     : _mm256_setzero_ps();
        s.add[h] =
            fmt == Q4_1 ? _mm256_fnmadd_ps(d, _mm256_set1_ps(16.0f), m) : _mm256_mul_ps(d, _mm256_set1_ps(-384.0f));
    }
    return s;
}

static inline __attribute__((always_inline)) __m256 widen8(__m256i half, int fmt, int v, int h, const GroupScales8 *s,
                                                           int bf16) {
    const int bits = fmt == Q4_1 ? 4 : 8, shift = 23 - bits - bits * v;
    const __m256i placed = shift >= 0 ? _mm256_slli_epi32(half, shift) : _mm256_srli_epi32(half, -shift);
    const __m256i mask = _mm256_set1_epi32((int)(((1u << bits) - 1) << (23 - bits)));
    const __m256i one = _mm256_set1_epi32(0x3f800000);
    const __m256 f = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(placed, mask), one));
    const __m256 w = _mm256_fmadd_ps(f, s->mul[h], s->add[h]);
    if (!bf16) return w;
    /* shifts where masks would be: two constants fewer, so the 16 registers hold the tile without a spill */
    const __m256i x = _mm256_castps_si256(w), odd = _mm256_srli_epi32(_mm256_slli_epi32(x, 15), 31);
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(rounded, 16), 16));
}

/* A whole panel widened into a plain panel ([k][16]). For products of a few rows, fp32 (narrow 0) whatever the
 * model's dtype: a bf16 model's weights rounded to bf16, which the fp32 tile multiplies exactly as the bf16 tile
 * multiplies the bf16 panel's widened loads (the same bits, with no narrowing and widening again). For packing's
 * check of a bf16 model (narrow 1), the bf16 panel itself. */
static inline __attribute__((always_inline)) void unpack_panel_avx2(const uint8_t *panel, const int fmt, int64_t K,
                                                                    const int bf16, void *out, const char *next,
                                                                    const int narrow) {
    const int64_t blocks = K / QBLOCK;
    const int chunks = fmt == Q4_1 ? 4 : 8, values = fmt == Q4_1 ? 8 : 4;
    for (int g = 0; g < P / QGROUP; g++)
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *block = group_block(panel, fmt, K, g, b, next);
            const GroupScales8 s = group_scales8(block, fmt);
            for (int c = 0; c < chunks; c++) {
                const __m256i lo = _mm256_loadu_si256((const __m256i *)(block + 64 + 64 * c));
                const __m256i hi = _mm256_loadu_si256((const __m256i *)(block + 96 + 64 * c));
                for (int v = 0; v < values; v++) {
                    const int64_t k = b * QBLOCK + (fmt == Q4_1 ? 8 : 4) * c + v, at = k * P + g * QGROUP;
                    const __m256 w0 = widen8(lo, fmt, v, 0, &s, bf16), w1 = widen8(hi, fmt, v, 1, &s, bf16);
                    if (narrow) { /* the high halves, in output order (packus interleaves 128-bit lanes: undone) */
                        const __m256i words = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(w0), 16),
                                                                  _mm256_srli_epi32(_mm256_castps_si256(w1), 16));
                        _mm256_storeu_si256((__m256i *)((uint16_t *)out + at), _mm256_permute4x64_epi64(words, 0xd8));
                    } else {
                        _mm256_storeu_ps((float *)out + at, w0);
                        _mm256_storeu_ps((float *)out + at + 8, w1);
                    }
                }
            }
        }
}

/* RMC rows against one quantized panel, widened in registers (the AVX2 build's tile_quantized): each k's two
 * vectors of weights are what the plain tile would load, and each row's step is its multiply-add. */
#define QRM8 1
static inline __attribute__((always_inline)) void tile_quantized8(const uint8_t *panel, const int fmt, int64_t K,
                                                                  const float *x, int64_t ld, const int RMC,
                                                                  const int bf16, float *out, int64_t ostride,
                                                                  const char *next) {
    const int64_t blocks = K / QBLOCK;
    const int chunks = fmt == Q4_1 ? 4 : 8, values = fmt == Q4_1 ? 8 : 4;
    for (int g = 0; g < P / QGROUP; g++) {
        __m256 acc[QRM8][2];
UNROLL
        for (int r = 0; r < RMC; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *block = group_block(panel, fmt, K, g, b, next);
            const GroupScales8 s = group_scales8(block, fmt);
            for (int c = 0; c < chunks; c++) {
                const __m256i lo = _mm256_loadu_si256((const __m256i *)(block + 64 + 64 * c));
                const __m256i hi = _mm256_loadu_si256((const __m256i *)(block + 96 + 64 * c));
UNROLL
                for (int v = 0; v < values; v++) {
                    const float *xk = x + (b * QBLOCK + (fmt == Q4_1 ? 8 : 4) * c + v) * ld;
                    const __m256 w0 = widen8(lo, fmt, v, 0, &s, bf16), w1 = widen8(hi, fmt, v, 1, &s, bf16);
UNROLL
                    for (int r = 0; r < RMC; r++) {
                        const __m256 xb = _mm256_broadcast_ss(xk + r);
                        acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
                        acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
                    }
                }
            }
        }
UNROLL
        for (int r = 0; r < RMC; r++) {
            _mm256_storeu_ps(out + r * ostride + g * QGROUP, acc[r][0]);
            _mm256_storeu_ps(out + r * ostride + g * QGROUP + 8, acc[r][1]);
        }
    }
}
#endif

/* One stored quantized panel widened into out (a plain panel of the model's dtype). */
static inline void unpack_panel(const uint8_t *panel, int fmt, int64_t K, int bf16, void *out, const char *next) {
    if (is_int8(fmt)) { /* weight by weight: the layout's reference (products never widen these; step.py checks a
                         * weight's blocks in its format's own layout before laying them out for int8) */
        unpack_panel_scalar(panel, fmt, K, bf16, out);
        return;
    }
#ifdef SPECVIZ_DPBF16
    if (bf16) {
        unpack_panel_bf16(panel, fmt, K, (uint16_t *)out, next);
        return;
    }
#endif
#ifdef SPECVIZ_QUANTIZED_AVX2 /* the vector path, into the model's own panel (the weight by weight one took ~0.8 s
                               * for the default model at each load) */
    unpack_panel_avx2(panel, fmt, K, bf16, out, next, bf16);
    return;
#endif
    (void)next;
    unpack_panel_scalar(panel, fmt, K, bf16, out);
}

/* Quantized panels widened into the plain panels specviz_pack would make of the same weights (out:
 * specviz_packed_elems(N, K, bf16) elements): how step.py checks, once per weight, that they are the same. */
int specviz_unpack_quantized(const uint8_t *packed, int fmt, int64_t N, int64_t K, int bf16, void *out) {
    if (!packed || !out) return SPECVIZ_BAD_POINTER;
    if (N < 1 || K < 1) return SPECVIZ_BAD_SHAPE;
    if (!quantized_shape_ok(K, fmt)) return SPECVIZ_BAD_FORMAT;
    const int64_t es = bf16 ? 2 : 4;
    for (int64_t p = 0; p * P < N; p++)
        unpack_panel(packed + p * quantized_panel_bytes(K, fmt), fmt, K, bf16,
                     (char *)out + p * panel_elems(K, bf16) * es, NULL);
    return SPECVIZ_OK;
}

/* A product's input, as the product reads it: rounded to bf16 for a bf16 model, zero-padded to Kp columns, and
 * stored k-major (element (m, k) at f[k * ld + m]; with AVX-512 BF16 also as bf16 pairs, (m, 2i + j) at
 * h[(i * ld + m) * 2 + j]): a tile's RM rows at one k are then one pointer and RM constant offsets, where
 * row-major inputs would need RM row pointers and more registers than there are. */
typedef struct {
    float *f;    /* [Kp, ld] fp32 */
    uint16_t *h; /* [Kp / 2, ld, 2] bf16 (dpbf16 only) */
    /* The int8 products' form of the same rows (quantize_rows), each block of 32 k of a row apart: q8 [Kp / 4, ld]
     * four int8 of k in a row, then in the same allocation [Kp / 32, ld] each of the block's scale (float), its q's
     * sum as a float and as an int (input_scale, input_qsum, input_isum: one pointer, so that the struct stays
     * small enough to be copied in registers). */
    uint32_t *q8;
    int64_t K, Kp, ld; /* the products' K, padded to Kp */
    /* [ld, Kp] bf16, row-major: the rows as AMX tiles load them (dpbf16 builds only). Last, apart from the other
     * pointers: beside them GCC offset all four as one vector stored to the stack (which the spill check counts). */
    uint16_t *r;
} Input;

static inline float *input_scale(const Input *in) { return (float *)(void *)(in->q8 + in->Kp / 4 * in->ld); }
static inline float *input_qsum(const Input *in) { return input_scale(in) + in->Kp / 32 * in->ld; }
static inline int32_t *input_isum(const Input *in) { return (int32_t *)(void *)(input_qsum(in) + in->Kp / 32 * in->ld); }
/* 4-byte elements of an input's int8 form */
static inline int64_t int8_elems(int64_t M, int64_t Kp) { return M * Kp / 4 + 3 * M * Kp / 32; }

#define STEP 32
static inline int64_t padded(int64_t K) { return (K + STEP - 1) / STEP * STEP; }

/* The same input from row m0 on. */
static inline Input rows_from(const Input *in, int64_t m0) {
    Input at = *in;
    at.f += m0;
    at.h += 2 * m0;
    at.r += m0 * in->Kp;
    at.q8 += m0; /* and so the scales and sums after it, all 4-byte elements [·, ld] */
    return at;
}

/* One tile: RMC input rows (from x's first) against one panel, into out[r * ostride + j] for j < P. RMC is a
 * constant at every call (the switch in product_panel), so the accumulators live in registers. fp32 lanes:
 * weights fp32, or bf16 widened on load (a bf16 model where the CPU has no bf16 dot product: inputs are
 * bf16-rounded fp32, so each x·w is exact and only the sum rounds, as with the dot-product instruction). */
/* The next panel's weights, asked for while this panel's tiles run so that its first tile finds them in cache:
 * each of a panel's T tiles asks for its 1/T share of the next panel's lines, spread evenly over its k-loop (one
 * line whenever T lines' worth of this panel have been read), so the requests trickle out at the pace the
 * products consume weights instead of in a burst that fills the memory queue. at == end: nothing to ask for. */
typedef struct {
    const char *at, *end;
    int64_t budget, per_line; /* bytes of this panel read since the last request; 64 · T */
} Ahead;

static inline Ahead no_ahead(void) { return (Ahead){NULL, NULL, 0, 64}; }

static inline void warm(Ahead *a, int64_t bytes) {
    if (a->at == a->end) return;
    for (a->budget += bytes; a->budget >= a->per_line && a->at < a->end; a->budget -= a->per_line, a->at += 64)
        __builtin_prefetch(a->at, 0, 2);
}

static inline __attribute__((always_inline)) void tile_f32(const void *panel, const int WB, int64_t K, const float *x,
                                                           int64_t ld, const int RMC, float *out, int64_t ostride,
                                                           Ahead ahead) {
    const int step_bytes = RN * VL * (WB ? 2 : 4);
    vf acc[RM][RN];
UNROLL
    for (int r = 0; r < RMC; r++)
UNROLL
        for (int c = 0; c < RN; c++) acc[r][c] = (vf){0};
    for (int64_t k = 0; k < K; k++) {
        warm(&ahead, step_bytes);
        vf wv[RN];
UNROLL
        for (int c = 0; c < RN; c++)
            wv[c] = WB ? load_bf16((const uint16_t *)panel + (k * RN + c) * VL)
                       : load_f32((const float *)panel + (k * RN + c) * VL);
UNROLL
        for (int r = 0; r < RMC; r++) {
            vf xb = splat(x[k * ld + r]);
UNROLL
            for (int c = 0; c < RN; c++) acc[r][c] += xb * wv[c];
        }
    }
UNROLL
    for (int r = 0; r < RMC; r++)
UNROLL
        for (int c = 0; c < RN; c++) store_f32(out + r * ostride + c * VL, acc[r][c]);
}

#ifdef SPECVIZ_DPBF16
/* The same tile with AVX-512 BF16 dot products: each step adds x[2i]·w[2i] + x[2i+1]·w[2i+1] to every lane. */
static inline __attribute__((always_inline)) void tile_dpbf16(const uint16_t *panel, int64_t K, const uint16_t *x,
                                                              int64_t ld, const int RMC, float *out, int64_t ostride,
                                                              Ahead ahead) {
    __m512 acc[RM][RN];
UNROLL
    for (int r = 0; r < RMC; r++)
UNROLL
        for (int c = 0; c < RN; c++) acc[r][c] = _mm512_setzero_ps();
    const int64_t halves = (K + 1) / 2;
    const uint32_t *pairs = (const uint32_t *)(const void *)x;
    for (int64_t i = 0; i < halves; i++) {
        __m512i wv[RN];
        warm(&ahead, RN * 64);
UNROLL
        for (int c = 0; c < RN; c++) wv[c] = _mm512_loadu_si512(panel + (i * RN + c) * 32);
UNROLL
        for (int r = 0; r < RMC; r++) {
            __m512bh xb = (__m512bh)_mm512_set1_epi32((int)pairs[i * ld + r]);
UNROLL
            for (int c = 0; c < RN; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)wv[c], xb);
        }
    }
UNROLL
    for (int r = 0; r < RMC; r++)
UNROLL
        for (int c = 0; c < RN; c++) _mm512_storeu_ps(out + r * ostride + c * 16, acc[r][c]);
}
#endif

/* RMC rows of one panel into out (ostride floats apart). */
static inline __attribute__((always_inline)) void tile(const void *panel, int bf16, const Input *in, int64_t K,
                                                       const int RMC, float *out, int64_t ostride, Ahead ahead) {
#ifdef SPECVIZ_DPBF16
    if (bf16) {
        tile_dpbf16((const uint16_t *)panel, K, in->h, in->ld, RMC, out, ostride, ahead);
        return;
    }
#endif
    if (bf16) tile_f32(panel, 1, K, in->f, in->ld, RMC, out, ostride, ahead);
    else tile_f32(panel, 0, K, in->f, in->ld, RMC, out, ostride, ahead);
}

#ifdef SPECVIZ_AMX
/* ---- AMX tiles: the bf16 products of a Xeon with AMX -------------------------------------------------------
 * Why: a bf16 dot product (vdpbf16ps) does 32 multiply-adds; one tile product (tdpbf16ps) does up to 16 rows ×
 * 16 outputs × 32 k = 8,192 in about 16 cycles. So rows cost the vector tiles one dot product each, and
 * verifying 16 rows cost ~3× one (the curve in docs/verify-cost.md), while a tile product costs the same for 1
 * row as for 16: what a verification pays over a step is then the weights' stream, once, as a step's.
 *
 * Row invariance by construction, as everywhere here: a tile's rows never meet (row m of C depends on row m of
 * A alone), and every output sums its k in one order, the same at every row count: C starts at zero and takes
 * each block of 32 k ascending (one tdpbf16ps a block, whose own order inside a block is the instruction's,
 * fixed). So where AMX is on, it computes every bf16 product whose K is a multiple of 32 (every product of the
 * default model), for 1 row as for 64, from plain panels and from GGUF blocks alike: both hand the tile the same
 * bf16 pairs. Its bits are not the vector tiles' (another order of the same sums), so a process uses one or the
 * other throughout: on wherever the CPU and OS allow it (Linux asks the kernel for the tile state once), off
 * with SPECVIZ_AMX=0 (step.py), the A/B switch.
 *
 * Layout: nothing is repacked. A plain panel stores pair i of its 16-output group c at ((i · RN + c) · 64) bytes:
 * 16 pairs of one group, RN · 64 bytes apart, are one B tile (16 rows of 16 outputs × 2 k). A GGUF block of one
 * group is widened into a 1 KiB buffer in that same form (widened_pair, the vector tiles' own widening). The
 * inputs' row-major bf16 form (Input.r) gives the A tile: rows × 32 k, Kp · 2 bytes apart. Which tile holds
 * what: amx_configure. Linux only: elsewhere the kernel's permission is asked otherwise, untried here. */
#define AMX_ROWS 16
/* GCC 12's own forms of these two tell the compiler less than they read: _tile_loadconfig reads 8 of the config's
 * 64 bytes (so its stores to the rest were dropped as dead: a fault), and _tile_loadd reads no memory at all (so
 * the widened pairs' stores could sink past the load that reads them). These say all of it. */
#define AMX_LOAD(tile, base, stride)                                                                                  \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #tile ::"r"((const void *)(base)), "r"((long)(stride)) : "memory")

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

static int amx_on = 0;            /* the products use the tiles (specviz_use_amx) */
/* This thread's configuration and its key (rows | rows1 << 8; 0: none loaded yet in this parallel region). Kept
 * per thread and not on the stack, as the widened pairs live in the thread's scratch (`unpacked`): the spill check
 * (scripts/check_native_asm.py) counts every vector store to the stack in a product. */
static __thread TileConfig amx_config __attribute__((tls_model("initial-exec"), aligned(64)));
static __thread int amx_rows __attribute__((tls_model("initial-exec"))) = 0;

/* Whether this CPU has the tiles and the OS lets this process use them: CPUID (AMX-TILE, AMX-BF16), the OS's
 * XCR0 (tile state saved on a switch) and, on Linux, the kernel's permission, asked for once. */
static int amx_allowed(void) {
    static int allowed = -1;
    if (allowed >= 0) return allowed;
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    unsigned low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    allowed = (d >> 22 & 1) && (d >> 24 & 1) && (low >> 17 & 3) == 3;
#if defined(__linux__)
    if (allowed) allowed = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
    return allowed;
}

/* Each parallel region's threads start with no configuration of theirs (a library between two calls, oneDNN's
 * products in PyTorch, may load its own on the same thread) and hand the tile state back as they leave. */
static inline void amx_begin(void) { amx_rows = 0; }
static inline void amx_end(void) {
    if (amx_rows) _tile_release();
    amx_rows = 0;
}

/* The configuration called key in this thread's tiles (loaded unless it already is): each tile's rows and bytes a
 * row (0 and 0: unused). */
static inline void amx_load_config(int key, const uint8_t rows[8], const uint16_t colsb[8]) {
    if (amx_rows == key) return;
    TileConfig *config = &amx_config;
    memset(config, 0, sizeof *config);
    config->palette = 1;
    for (int t = 0; t < 8; t++) {
        config->rows[t] = rows[t];
        config->colsb[t] = colsb[t];
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(*config));
    amx_rows = key;
}

/* One tile of rows (rows1 = 0): C0, C1 and A in 2, 3 rows × 64 bytes, B in 4-7. Two (rows1 > 0): C0, C1 and A in 4
 * the first rows, C2, C3 and A in 5 the next rows1, B in 6-7. B: 16 pairs of k × 16 outputs. */
static inline void amx_configure(int rows, int rows1) {
    const int key = rows | rows1 << 8;
    if (amx_rows == key) return; /* before the arrays: every panel's tile call asks */
    const uint8_t one[8] = {(uint8_t)rows, (uint8_t)rows, (uint8_t)rows, (uint8_t)rows, 16, 16, 16, 16};
    const uint8_t two[8] = {(uint8_t)rows, (uint8_t)rows, (uint8_t)rows1, (uint8_t)rows1, (uint8_t)rows, (uint8_t)rows1,
                            16, 16};
    const uint16_t bytes[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    amx_load_config(key, rows1 ? two : one, bytes);
}

/* Group g's block b widened into a B tile's form: pair p of the block, its 16 outputs' two k, 64 bytes a pair. */
static inline __attribute__((always_inline)) void amx_widen(const uint8_t *panel, const int fmt, int64_t K, int g,
                                                            int64_t b, const char *next, uint16_t *into) {
    const uint8_t *block = group_block(panel, fmt, K, g, b, next);
    const GroupScales s = group_scales(block, fmt);
    const int chunks = fmt == Q4_1 ? 4 : 8, per_chunk = fmt == Q4_1 ? 4 : 2;
UNROLL
    for (int c = 0; c < chunks; c++) {
        const __m512i chunk = _mm512_loadu_si512(block + 64 + 64 * c);
UNROLL
        for (int p = 0; p < per_chunk; p++)
            _mm512_storeu_si512(into + (per_chunk * c + p) * 32, (__m512i)widened_pair(chunk, fmt, p, &s));
    }
}

/* rows (≤ AMX_ROWS) against one panel, plain (fmt 0) or quantized (each group's block widened as it is read: the
 * widening is paid once for all the rows, where the vector tiles paid it once per QRM rows and a dot product per
 * row besides). The panel's groups two at a time, C0 and C1, the blocks alternating between two sets of A and B
 * tiles (2, 4, 5 and 3, 6, 7), so that no load waits for a product still reading its tile (tile registers are not
 * renamed). A quantized block is widened AMX_AHEAD blocks ahead of the products that read it, into the thread's
 * scratch: a tile load waits for the stores of the bytes it reads to reach the cache.
 * One row costs 1.06-1.16× the vector tiles' step here (2-core Xeon), and none of these orders changed that:
 * four groups at once in C0-C3 with one A tile, the widening one or two blocks ahead or interleaved group by
 * group. Without the tile products (the rest unchanged, for timing only) the step took 0.87 of the vector one:
 * each tile product costs about its latency and overlaps little with the widening around it. */
#ifndef AMX_AHEAD
#define AMX_AHEAD 2
#endif
static inline __attribute__((always_inline)) void amx_one_tile(const void *panel, const int fmt, int64_t K,
                                                               const uint16_t *a, int64_t Kp, int rows, float *out,
                                                               int64_t ostride, const char *next, uint16_t *scratch) {
    amx_configure(rows, 0);
    const int64_t blocks = K / 32;
    uint16_t(*widened)[2 * 512] = (uint16_t(*)[2 * 512])scratch; /* AMX_AHEAD + 1 slots, no more than blocks */
    const uint8_t *q = (const uint8_t *)panel;
    for (int g = 0; g < RN; g += 2) {
        _tile_zero(0);
        _tile_zero(1);
        if (fmt)
            for (int64_t b = 0; b < AMX_AHEAD && b < blocks; b++) {
                amx_widen(q, fmt, K, g, b, next, widened[b]);
                amx_widen(q, fmt, K, g + 1, b, next, widened[b] + 512);
            }
        for (int64_t b = 0, slot = 0; b < blocks; b++, slot = slot == AMX_AHEAD ? 0 : slot + 1) {
            const uint16_t *w = fmt ? widened[slot] : (const uint16_t *)panel + (b * 16 * RN + g) * 32;
            const int64_t stride = fmt ? 64 : RN * 64, second = fmt ? 512 : 32;
            if (b & 1) {
                AMX_LOAD(3, a + 32 * b, Kp * 2);
                AMX_LOAD(6, w, stride);
                _tile_dpbf16ps(0, 3, 6);
                AMX_LOAD(7, w + second, stride);
                _tile_dpbf16ps(1, 3, 7);
            } else {
                AMX_LOAD(2, a + 32 * b, Kp * 2);
                AMX_LOAD(4, w, stride);
                _tile_dpbf16ps(0, 2, 4);
                AMX_LOAD(5, w + second, stride);
                _tile_dpbf16ps(1, 2, 5);
            }
            if (fmt && b + AMX_AHEAD < blocks) {
                uint16_t *into = widened[slot == 0 ? AMX_AHEAD : slot - 1];
                amx_widen(q, fmt, K, g, b + AMX_AHEAD, next, into);
                amx_widen(q, fmt, K, g + 1, b + AMX_AHEAD, next, into + 512);
            }
        }
        _tile_stored(0, out + g * 16, ostride * 4);
        _tile_stored(1, out + g * 16 + 16, ostride * 4);
    }
}

/* 17-32 rows against one panel, plain (fmt 0) or quantized: two row tiles (rows, rows1), the panel's groups two
 * at a time (C0, C1 the first tile's, C2, C3 the second's), so that each group's block is widened (or loaded)
 * once for both tiles. Why not two passes of the one-tile kernel: those widened every block twice, or read a
 * plain panel (3.5× a block's bytes) twice; 24 rows then cost 1.8× what 16 did. */
static inline __attribute__((always_inline)) void amx_two_tiles(const void *panel, const int fmt, int64_t K,
                                                                const uint16_t *a, int64_t Kp, int rows, int rows1,
                                                                float *out, int64_t ostride, const char *next,
                                                                uint16_t *scratch) {
    amx_configure(rows, rows1);
    const uint16_t *a1 = a + rows * Kp;
    const int64_t blocks = K / 32;
    uint16_t(*widened)[2 * 512] = (uint16_t(*)[2 * 512])scratch; /* a quantized panel's two slots */
    for (int g = 0; g < RN; g += 2) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        if (fmt) {
            amx_widen((const uint8_t *)panel, fmt, K, g, 0, next, widened[0]);
            amx_widen((const uint8_t *)panel, fmt, K, g + 1, 0, next, widened[0] + 512);
        }
        for (int64_t b = 0; b < blocks; b++) {
            const uint16_t *w = fmt ? widened[b & 1] : (const uint16_t *)panel + (b * 16 * RN + g) * 32;
            const int64_t stride = fmt ? 64 : RN * 64, second = fmt ? 512 : 32;
            AMX_LOAD(4, a + 32 * b, Kp * 2);
            AMX_LOAD(5, a1 + 32 * b, Kp * 2);
            AMX_LOAD(6, w, stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(2, 5, 6);
            AMX_LOAD(7, w + second, stride);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(3, 5, 7);
            if (fmt && b + 1 < blocks) {
                amx_widen((const uint8_t *)panel, fmt, K, g, b + 1, next, widened[(b + 1) & 1]);
                amx_widen((const uint8_t *)panel, fmt, K, g + 1, b + 1, next, widened[(b + 1) & 1] + 512);
            }
        }
        _tile_stored(0, out + g * 16, ostride * 4);
        _tile_stored(1, out + g * 16 + 16, ostride * 4);
        _tile_stored(2, out + rows * ostride + g * 16, ostride * 4);
        _tile_stored(3, out + rows * ostride + g * 16 + 16, ostride * 4);
    }
}

/* Every row of one plain panel: one tile up to AMX_ROWS rows, else pieces of up to 2 · AMX_ROWS rows (near-equal,
 * as product_panel's tiles), each in two tiles. */
static void amx_product_panel(const uint16_t *panel, const Input *in, int64_t M, int64_t K, float *out,
                              int64_t ostride) {
    if (M <= AMX_ROWS) {
        amx_one_tile(panel, 0, K, in->r, in->Kp, (int)M, out, ostride, NULL, NULL);
        return;
    }
    const int64_t pieces = (M + 2 * AMX_ROWS - 1) / (2 * AMX_ROWS), base = M / pieces, longer = M % pieces;
    for (int64_t t = 0, m = 0; t < pieces; m += base + (t < longer), t++) {
        const int rows = (int)(base + (t < longer));
        amx_two_tiles(panel, 0, K, in->r + m * in->Kp, in->Kp, (rows + 1) / 2, rows / 2, out + m * ostride, ostride,
                      NULL, NULL);
    }
}

static inline int amx_takes(int bf16, int64_t K) { return bf16 && amx_on && K % 32 == 0; }
#else
static inline void amx_begin(void) {}
static inline void amx_end(void) {}
#endif

/* Whether the bf16 products run on AMX tiles: wanted (0: no) and allowed here. Returns what holds now. */
int specviz_use_amx(int wanted) {
#ifdef SPECVIZ_AMX
    amx_on = wanted && amx_allowed();
    return amx_on;
#else
    (void)wanted;
    return 0;
#endif
}

/* Every row of one panel: ceil(M / RM) tiles of near-equal rows (8 rows: 4 + 4, not 6 + 2). Where there are
 * several, each asks for its share of the next panel (ahead, NULL for none): without that, the first tile of a
 * panel waited on memory and the later ones ran from cache while the memory bus idled (16 rows: ~2 ms of 21).
 * Built with -DSPECVIZ_NO_AHEAD (SPECVIZ_NATIVE_CFLAGS), it asks for nothing: the A/B switch. */
static void product_panel(const void *panel, int bf16, const Input *in, int64_t M, int64_t K, float *out,
                          int64_t ostride, const char *ahead) {
#ifdef SPECVIZ_AMX
    if (amx_takes(bf16, K)) {
        amx_product_panel((const uint16_t *)panel, in, M, K, out, ostride);
        return;
    }
#endif
    const int64_t tiles = (M + RM - 1) / RM, base = M / tiles, longer = M % tiles;
    const int64_t bytes = panel_elems(K, bf16) * (bf16 ? 2 : 4), lines = (bytes + 63) / 64;
    for (int64_t t = 0, m = 0; t < tiles; m += base + (t < longer), t++) {
        float *o = out + m * ostride;
        Input at = rows_from(in, m);
        Ahead pf = no_ahead();
#ifndef SPECVIZ_NO_AHEAD
        if (ahead && tiles > 1)
            pf = (Ahead){ahead + lines * t / tiles * 64, ahead + lines * (t + 1) / tiles * 64, 0, 64 * tiles};
#endif
        switch ((int)(base + (t < longer))) {
#define TILE_CASE(n)                                                                                                  \
    case n: tile(panel, bf16, &at, K, n < RM ? n : RM, o, ostride, pf); break;
            TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) TILE_CASE(6) TILE_CASE(7) TILE_CASE(8)
#if RM > 8
            TILE_CASE(9) TILE_CASE(10) TILE_CASE(11) TILE_CASE(12)
#endif
#if RM > 12
            TILE_CASE(13) TILE_CASE(14) TILE_CASE(15) TILE_CASE(16)
#endif
#if RM > 16
            TILE_CASE(17) TILE_CASE(18) TILE_CASE(19) TILE_CASE(20)
#endif
#if RM > 20
            TILE_CASE(21) TILE_CASE(22) TILE_CASE(23) TILE_CASE(24)
#endif
#undef TILE_CASE
        default: tile(panel, bf16, &at, K, RM, o, ostride, pf);
        }
    }
}

#ifdef SPECVIZ_DPBF16
/* RMC rows against one quantized panel, each block widened in registers as it is read (nothing stored): the
 * tile of a step or a verification, where the widening costs about what one row's dot products do and a
 * widened panel written out and read back would cost more. Group by group (16 outputs: RMC accumulators), k
 * ascending, each pair's dot product the plain tile's: the same bits. The next panel's lines are asked for as
 * this one's are read. Up to QRM_TWO rows, two groups are widened side by side: each accumulator still sums its
 * own k in the same order (the same bits), but a row then has two chains of dot products in flight, not one, and
 * the widenings of two groups interleave (a 1-row tile from L2 ran 9-13% faster so, on a Zen 4). */
#ifndef QRM
#define QRM 12
#endif
#ifndef QRM_TWO
#define QRM_TWO 6
#endif
static inline __attribute__((always_inline)) void tile_quantized(const uint8_t *panel, const int fmt, int64_t K,
                                                                 const uint16_t *x, int64_t ld, const int RMC,
                                                                 float *out, int64_t ostride, const char *next) {
    const int64_t blocks = K / QBLOCK;
    const uint32_t *pairs = (const uint32_t *)(const void *)x;
    const int together = RMC <= QRM_TWO && (P / QGROUP) % 2 == 0 ? 2 : 1;
    for (int g = 0; g < P / QGROUP; g += together) {
        __m512 acc[2][QRM];
UNROLL
        for (int t = 0; t < together; t++)
UNROLL
            for (int r = 0; r < RMC; r++) acc[t][r] = _mm512_setzero_ps();
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *block[2];
            GroupScales s[2];
UNROLL
            for (int t = 0; t < together; t++) {
                block[t] = group_block(panel, fmt, K, g + t, b, next);
                s[t] = group_scales(block[t], fmt);
            }
            const uint32_t *xb = pairs + b * (QBLOCK / 2) * ld;
            const int chunks = fmt == Q4_1 ? 4 : 8, per_chunk = fmt == Q4_1 ? 4 : 2;
            for (int c = 0; c < chunks; c++) {
                __m512i chunk[2];
UNROLL
                for (int t = 0; t < together; t++) chunk[t] = _mm512_loadu_si512(block[t] + 64 + 64 * c);
UNROLL
                for (int p = 0; p < per_chunk; p++) {
                    const uint32_t *xi = xb + (per_chunk * c + p) * ld;
UNROLL
                    for (int t = 0; t < together; t++) {
                        const __m512bh w = widened_pair(chunk[t], fmt, p, &s[t]);
UNROLL
                        for (int r = 0; r < RMC; r++)
                            acc[t][r] = _mm512_dpbf16_ps(acc[t][r], w, (__m512bh)_mm512_set1_epi32((int)xi[r]));
                    }
                }
            }
        }
UNROLL
        for (int t = 0; t < together; t++)
UNROLL
            for (int r = 0; r < RMC; r++) _mm512_storeu_ps(out + r * ostride + (g + t) * QGROUP, acc[t][r]);
    }
}
#endif

/* ---- int8 products: GGUF blocks against inputs quantized to int8 (SPECVIZ_PRODUCTS=int8, llama.cpp's numerics) ----
 * Why: widening a block to bf16 costs about five rows' dot products and a bf16 dot product does two multiply-adds a
 * lane; an integer dot product (AVX-512 VNNI's vpdpbusd) does four a lane on the block's own bytes, with nothing
 * widened. The price is the numbers: each input block is rounded to int8 (quantize_block), so logits differ from
 * the exact products' (as llama.cpp's do from a bf16 model's), and every method computes with these same
 * numbers: greedy output still equals `ar`'s under them.
 *
 * Per output o and input row, for each block b (k ascending): dot = sum_k q_w·q_x as an integer (exact, in any
 * order), then for Q4_1 t = fma(dot, d, m · qsum) and for Q8_0 (u = q + 128 stored) t = (dot − 128·isum) · d, and
 * acc = fma(t, scale, acc). Integers sum exactly, so how a tile splits a block's sum changes no bit; the float
 * steps are the same instructions in the vector and scalar forms. Row invariance holds by construction.
 *
 * Layout (the format's own bytes; Q4_1_I8, Q8_0_I8): a group block is the 16 fp16 d (and m) as before, then
 * chunks whose 32-bit lane l belongs to output l: Q8_0_I8 8 chunks, chunk c's four bytes the u of k = 4c..4c+3;
 * Q4_1_I8 4 chunks, chunk c's four low nibbles the q of k = 4c..4c+3 and its high nibbles those of k = 16 + 4c…. */
/* The scalar form: every build's reference, and the products of builds without VNNI. Kept out of line, and named
 * apart from the vector tiles that scripts/check_native_asm.py holds to zero spills: its 16 sums live in memory. */
static __attribute__((noinline)) void int8_scalar_rows(const uint8_t *panel, int fmt, const Input *in, int64_t M,
                                                       int64_t K, float *out, int64_t ostride) {
    const int64_t blocks = K / QBLOCK, ld = in->ld;
    const int base = base_format(fmt), chunks = base == Q4_1 ? 4 : 8, values = base == Q4_1 ? 8 : 4;
    const uint32_t mask = base == Q4_1 ? 15 : 255;
    for (int g = 0; g < P / QGROUP; g++)
        for (int64_t m = 0; m < M; m++) {
            float acc[QGROUP] = {0};
            for (int64_t b = 0; b < blocks; b++) {
                const uint8_t *block = panel + (g * blocks + b) * quantized_group_bytes(fmt);
                const int64_t at = b * ld + m;
                for (int o = 0; o < QGROUP; o++) {
                    int32_t dot = 0;
                    for (int c = 0; c < chunks; c++) {
                        uint32_t lane;
                        memcpy(&lane, block + 64 + 64 * c + 4 * o, 4);
                        for (int v = 0; v < values; v++) {
                            int output, k;
                            chunk_place(fmt, c, o, v, &output, &k);
                            uint32_t x4 = in->q8[(b * (QBLOCK / 4) + k / 4) * ld + m];
                            const int8_t x = (int8_t)(x4 >> 8 * (k % 4) & 255);
                            dot += (int32_t)(lane >> value_shift(fmt, v) & mask) * x;
                        }
                    }
                    uint16_t dh, mh = 0;
                    memcpy(&dh, block + 2 * o, 2);
                    float term;
                    if (base == Q4_1) {
                        memcpy(&mh, block + 32 + 2 * o, 2);
                        term = fmaf((float)dot, half_to_f32(dh), half_to_f32(mh) * input_qsum(in)[at]);
                    } else {
                        term = (float)(dot - 128 * input_isum(in)[at]) * half_to_f32(dh);
                    }
                    acc[o] = fmaf(term, input_scale(in)[at], acc[o]);
                }
            }
            for (int o = 0; o < QGROUP; o++) out[m * ostride + g * QGROUP + o] = acc[o];
        }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#define SPECVIZ_VNNI 1
/* RMC rows against one int8-format panel: each group of 16 outputs (two side by side up to I8_TWO rows, as
 * tile_quantized does), a block's four chunks read once for all rows. A row's block sum runs in two integer chains
 * (low and high chunks) where registers allow, joined before the float steps. */
#ifndef I8RM
#define I8RM 8
#endif
#ifndef I8_TWO
#define I8_TWO 2
#endif
static inline __attribute__((always_inline)) void tile_int8(const uint8_t *panel, const int fmt, int64_t K,
                                                            const Input *in, const int RMC, float *out,
                                                            int64_t ostride, const char *next) {
    const int64_t blocks = K / QBLOCK, ld = in->ld;
    const float *scale = input_scale(in), *qsum = input_qsum(in);
    const int32_t *isum = input_isum(in);
    const int together = RMC <= I8_TWO && (P / QGROUP) % 2 == 0 ? 2 : 1, split = together * RMC <= 4;
    const __m512i nibble = _mm512_set1_epi8(15);
    for (int g = 0; g < P / QGROUP; g += together) {
        __m512 acc[2][I8RM];
UNROLL
        for (int t = 0; t < together; t++)
UNROLL
            for (int r = 0; r < RMC; r++) acc[t][r] = _mm512_setzero_ps();
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *block[2];
            __m512 dw[2], mw[2];
UNROLL
            for (int t = 0; t < together; t++) {
                block[t] = group_block(panel, fmt, K, g + t, b, next);
                dw[t] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)block[t]));
                mw[t] = fmt == Q4_1_I8 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(block[t] + 32)))
                                       : _mm512_setzero_ps();
            }
            const uint32_t *xq = in->q8 + b * (QBLOCK / 4) * ld;
            __m512i lo[2][I8RM], hi[2][I8RM];
UNROLL
            for (int t = 0; t < together; t++)
UNROLL
                for (int r = 0; r < RMC; r++) lo[t][r] = hi[t][r] = _mm512_setzero_si512();
UNROLL
            for (int c = 0; c < 4; c++) {
UNROLL
                for (int t = 0; t < together; t++) {
                    __m512i low, high;
                    if (fmt == Q4_1_I8) {
                        const __m512i chunk = _mm512_loadu_si512(block[t] + 64 + 64 * c);
                        low = _mm512_and_si512(chunk, nibble);
                        high = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), nibble);
                    } else {
                        low = _mm512_loadu_si512(block[t] + 64 + 64 * c);
                        high = _mm512_loadu_si512(block[t] + 64 + 64 * (c + 4));
                    }
UNROLL
                    for (int r = 0; r < RMC; r++) {
                        lo[t][r] = _mm512_dpbusd_epi32(lo[t][r], low, _mm512_set1_epi32((int)xq[c * ld + r]));
                        if (split)
                            hi[t][r] = _mm512_dpbusd_epi32(hi[t][r], high, _mm512_set1_epi32((int)xq[(c + 4) * ld + r]));
                        else
                            lo[t][r] = _mm512_dpbusd_epi32(lo[t][r], high, _mm512_set1_epi32((int)xq[(c + 4) * ld + r]));
                    }
                }
            }
UNROLL
            for (int t = 0; t < together; t++)
UNROLL
                for (int r = 0; r < RMC; r++) {
                    const int64_t at = b * ld + r;
                    __m512i dot = split ? _mm512_add_epi32(lo[t][r], hi[t][r]) : lo[t][r];
                    __m512 term;
                    if (fmt == Q4_1_I8) {
                        term = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), dw[t],
                                               _mm512_mul_ps(mw[t], _mm512_set1_ps(qsum[at])));
                    } else {
                        dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(128 * isum[at]));
                        term = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), dw[t]);
                    }
                    acc[t][r] = _mm512_fmadd_ps(term, _mm512_set1_ps(scale[at]), acc[t][r]);
                }
        }
UNROLL
        for (int t = 0; t < together; t++)
UNROLL
            for (int r = 0; r < RMC; r++) _mm512_storeu_ps(out + r * ostride + (g + t) * QGROUP, acc[t][r]);
    }
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SPECVIZ_INT8_AVX2 1
/* One row against one int8-format panel without VNNI (Zen 3, Haswell to Ice Lake's clients, AVX-512 without VNNI):
 * vpmaddubsw multiplies unsigned by signed bytes into 16-bit pair sums, vpmaddwd adds pairs into the 32-bit lanes.
 * Q4_1: a pair is at most 2·15·127, so a block's eight products add up in 16 bits (30,480 at most) before one
 * vpmaddwd. Q8_0: 2·255·127 would saturate, so the stored u = q + 128 goes back to q (one xor), x's sign moves onto
 * it (vpsignb) and |x| is the unsigned side, each pair at most 2·127·127 (step.py keeps exact products for a weight
 * whose blocks hold q = −128, which vpsignb cannot negate); that sum is Σ q·x, the integer the other forms reach as
 * Σ u·x − 128·Σ x. The float steps are theirs, so the bits are the scalar form's. Tiles of up to I8RM_AVX2 = 3
 * rows share each unpacked chunk; 16 ymm registers hold that for one half of a group at a time, with the chunks'
 * loop kept rolled (unrolled, GCC hoists every row's broadcasts and spills: 4 rows spilled even rolled). */
#ifndef I8RM_AVX2
#define I8RM_AVX2 3
#endif
static inline __attribute__((always_inline)) void tile_int8_avx2(const uint8_t *panel, const int fmt, int64_t K,
                                                                 const Input *in, const int RMC, float *out,
                                                                 int64_t ostride, const char *next) {
    const int64_t blocks = K / QBLOCK, ld = in->ld;
    const float *scale = input_scale(in), *qsum = input_qsum(in);
    const __m256i nibble = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    for (int g = 0; g < P / QGROUP; g++)
        /* outputs 0-7, then 8-15, each over all the group's blocks (the second pass reads them from L1): a tile's
         * rows share each unpacked chunk, and one half's sums at a time keep it within 16 registers */
ROLLED
        for (int h = 0; h < 2; h++) {
            __m256 acc[I8RM_AVX2];
UNROLL
            for (int r = 0; r < RMC; r++) acc[r] = _mm256_setzero_ps();
            for (int64_t b = 0; b < blocks; b++) {
                const uint8_t *block = group_block(panel, fmt, K, g, b, h == 0 ? next : NULL);
                const uint32_t *xq = in->q8 + b * (QBLOCK / 4) * ld;
                __m256i dot[I8RM_AVX2];
                if (fmt == Q4_1_I8) {
UNROLL
                    for (int r = 0; r < RMC; r++) dot[r] = _mm256_setzero_si256(); /* 16-bit pair sums, then dot */
ROLLED
                    for (int c = 0; c < 4; c++) {
                        const __m256i chunk = _mm256_loadu_si256((const __m256i *)(block + 64 + 64 * c + 32 * h));
                        const __m256i low = _mm256_and_si256(chunk, nibble);
                        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), nibble);
UNROLL
                        for (int r = 0; r < RMC; r++) {
                            dot[r] = _mm256_add_epi16(dot[r], _mm256_maddubs_epi16(low, _mm256_set1_epi32((int)xq[c * ld + r])));
                            dot[r] = _mm256_add_epi16(dot[r],
                                                      _mm256_maddubs_epi16(high, _mm256_set1_epi32((int)xq[(c + 4) * ld + r])));
                        }
                    }
UNROLL
                    for (int r = 0; r < RMC; r++) dot[r] = _mm256_madd_epi16(dot[r], ones);
                } else {
UNROLL
                    for (int r = 0; r < RMC; r++) dot[r] = _mm256_setzero_si256();
ROLLED
                    for (int c = 0; c < 8; c++) {
                        const __m256i q =
                            _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(block + 64 + 64 * c + 32 * h)), flip);
UNROLL
                        for (int r = 0; r < RMC; r++) {
                            const __m256i x = _mm256_set1_epi32((int)xq[c * ld + r]);
                            dot[r] = _mm256_add_epi32(
                                dot[r], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(q, x)), ones));
                        }
                    }
                }
                const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(block + 16 * h)));
                const __m256 m = fmt == Q4_1_I8 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(block + 32 + 16 * h)))
                                                : _mm256_setzero_ps();
UNROLL
                for (int r = 0; r < RMC; r++) {
                    const __m256 term = fmt == Q4_1_I8
                        ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r]), d, _mm256_mul_ps(m, _mm256_set1_ps(qsum[b * ld + r])))
                        : _mm256_mul_ps(_mm256_cvtepi32_ps(dot[r]), d);
                    acc[r] = _mm256_fmadd_ps(term, _mm256_set1_ps(scale[b * ld + r]), acc[r]);
                }
            }
UNROLL
            for (int r = 0; r < RMC; r++) _mm256_storeu_ps(out + r * ostride + g * QGROUP + 8 * h, acc[r]);
        }
}
#endif


/* Every row of one int8-format panel, in tiles of near-equal rows (at most I8RM with VNNI, I8RM_AVX2 with AVX2),
 * the first asking for the next panel as it reads this one. Elsewhere (NEON, builds without AVX2) the scalar
 * form: correct, slow, unmeasured. */
int specviz_int8_scalar = 0; /* set (by the test that compares the two forms): the scalar form everywhere */
#if defined(SPECVIZ_VNNI)
#define INT8_TILE tile_int8
#define INT8_ROWS I8RM
#elif defined(SPECVIZ_INT8_AVX2)
#define INT8_TILE tile_int8_avx2
#define INT8_ROWS I8RM_AVX2
#endif

static void product_int8(const uint8_t *panel, int fmt, const Input *in, int64_t M, int64_t K, float *out,
                         int64_t ostride, const char *next) {
    if (specviz_int8_scalar) {
        int8_scalar_rows(panel, fmt, in, M, K, out, ostride);
        return;
    }
#if defined(INT8_TILE)
    const int64_t tiles = (M + INT8_ROWS - 1) / INT8_ROWS, base = M / tiles, longer = M % tiles;
    for (int64_t t = 0, m = 0; t < tiles; m += base + (t < longer), t++) {
        const Input at = rows_from(in, m);
        float *o = out + m * ostride;
        const char *ahead = t == 0 ? next : NULL;
        switch ((int)(base + (t < longer))) {
#define INT8_CASE(n)                                                                                                  \
    case n:                                                                                                           \
        if (fmt == Q4_1_I8) INT8_TILE(panel, Q4_1_I8, K, &at, n, o, ostride, ahead);                                 \
        else INT8_TILE(panel, Q8_0_I8, K, &at, n, o, ostride, ahead);                                                 \
        break;
            INT8_CASE(1) INT8_CASE(2) INT8_CASE(3)
#if INT8_ROWS >= 4
            INT8_CASE(4)
#endif
#if INT8_ROWS >= 5
            INT8_CASE(5)
#endif
#if INT8_ROWS >= 6
            INT8_CASE(6)
#endif
#if INT8_ROWS >= 7
            INT8_CASE(7)
#endif
#if INT8_ROWS >= 8
            INT8_CASE(8)
#endif
#if INT8_ROWS > 8
#error "int8 tiles of more than 8 rows spill (and have no case here)"
#endif
#undef INT8_CASE
        default: break; /* tiles never hold more than INT8_ROWS rows */
        }
    }
#else
    (void)next;
    int8_scalar_rows(panel, fmt, in, M, K, out, ostride);
#endif
}

/* How this build runs the int8 products: 1 AVX-512 VNNI, 2 AVX2 (vpmaddubsw), 0 the scalar form. */
int specviz_int8_vector(void) {
#if defined(SPECVIZ_VNNI)
    return 1;
#elif defined(SPECVIZ_INT8_AVX2)
    return 2;
#else
    return 0;
#endif
}

/* Every row of one stored panel, plain or quantized: a quantized one in registers where its rows fit one
 * widening tile (tile_quantized: up to QRM rows with AVX-512 BF16; tile_quantized8: one row on the AVX2 build),
 * else widened once into unpacked (one plain panel, fp32 on the AVX2 build), which the plain tiles then read from
 * cache. */
static void product_stored_panel(const void *stored, int fmt, int bf16, const Input *in, int64_t M, int64_t K,
                                 float *out, int64_t ostride, const char *next, void *unpacked) {
    if (!fmt) {
        product_panel(stored, bf16, in, M, K, out, ostride, next);
        return;
    }
    if (is_int8(fmt)) {
        product_int8((const uint8_t *)stored, fmt, in, M, K, out, ostride, next);
        return;
    }
#ifdef SPECVIZ_AMX
    if (amx_takes(bf16, K) && M <= AMX_ROWS) {
        const uint8_t *panel = (const uint8_t *)stored;
        if (fmt == Q4_1) amx_one_tile(panel, Q4_1, K, in->r, in->Kp, (int)M, out, ostride, next, unpacked);
        else amx_one_tile(panel, Q8_0, K, in->r, in->Kp, (int)M, out, ostride, next, unpacked);
        return;
    }
    if (amx_takes(bf16, K) && M <= 2 * AMX_ROWS) {
        const int rows = (int)(M + 1) / 2, rows1 = (int)M / 2;
        if (fmt == Q4_1) amx_two_tiles(stored, Q4_1, K, in->r, in->Kp, rows, rows1, out, ostride, next, unpacked);
        else amx_two_tiles(stored, Q8_0, K, in->r, in->Kp, rows, rows1, out, ostride, next, unpacked);
        return;
    }
#endif
#ifdef SPECVIZ_DPBF16
    if (bf16 && M <= QRM) {
        const uint8_t *panel = (const uint8_t *)stored;
        switch ((int)M) {
#define QUANTIZED_CASE(n)                                                                                             \
    case n:                                                                                                           \
        if (fmt == Q4_1) tile_quantized(panel, Q4_1, K, in->h, in->ld, n, out, ostride, next);                       \
        else tile_quantized(panel, Q8_0, K, in->h, in->ld, n, out, ostride, next);                                    \
        return;
            QUANTIZED_CASE(1) QUANTIZED_CASE(2) QUANTIZED_CASE(3) QUANTIZED_CASE(4) QUANTIZED_CASE(5)
            QUANTIZED_CASE(6) QUANTIZED_CASE(7) QUANTIZED_CASE(8) QUANTIZED_CASE(9) QUANTIZED_CASE(10)
            QUANTIZED_CASE(11) QUANTIZED_CASE(12)
#if QRM > 12
            QUANTIZED_CASE(13) QUANTIZED_CASE(14) QUANTIZED_CASE(15) QUANTIZED_CASE(16)
#endif
#undef QUANTIZED_CASE
        default: break;
        }
    }
#endif
#ifdef SPECVIZ_QUANTIZED_AVX2
    if (M <= QRM8) {
        const uint8_t *panel = (const uint8_t *)stored;
#define QUANTIZED8_CASE(rows, format, is_bf16) \
    tile_quantized8(panel, format, K, in->f, in->ld, rows, is_bf16, out, ostride, next)
        if (fmt == Q4_1) bf16 ? QUANTIZED8_CASE(1, Q4_1, 1) : QUANTIZED8_CASE(1, Q4_1, 0);
        else bf16 ? QUANTIZED8_CASE(1, Q8_0, 1) : QUANTIZED8_CASE(1, Q8_0, 0);
#undef QUANTIZED8_CASE
        return;
    }
    /* an fp32 panel either way (the fp32 tile reads a bf16 model's rounded weights); constant formats and dtype,
     * so each widening's shifts and masks are immediates, never spilled */
    const uint8_t *panel = (const uint8_t *)stored;
    if (fmt == Q4_1) bf16 ? unpack_panel_avx2(panel, Q4_1, K, 1, unpacked, next, 0)
                          : unpack_panel_avx2(panel, Q4_1, K, 0, unpacked, next, 0);
    else bf16 ? unpack_panel_avx2(panel, Q8_0, K, 1, unpacked, next, 0)
              : unpack_panel_avx2(panel, Q8_0, K, 0, unpacked, next, 0);
    product_panel(unpacked, 0, in, M, K, out, ostride, NULL);
    return;
#endif
    unpack_panel((const uint8_t *)stored, fmt, K, bf16, unpacked, next);
    product_panel(unpacked, bf16, in, M, K, out, ostride, NULL);
}

/* y[m * ystride + n] for m < M, n in [n0, n1): the panels that cover them. A panel wholly inside is written
 * in place; one cut by n0 or n1 (a head narrower than a panel, the last rows) goes through a buffer. fmt: the
 * panels' format (product_stored_panel); unpacked: one plain panel of scratch for a quantized one. */
static void product(const void *packed, int fmt, int bf16, const Input *in, int64_t M, int64_t K, int64_t n0,
                    int64_t n1, float *y, int64_t ystride, const char *ahead, void *unpacked) {
    const int64_t bytes = stored_panel_bytes(K, fmt, bf16);
    for (int64_t p = n0 / P; p * P < n1; p++) {
        const char *panel = (const char *)packed + p * bytes;
        const int64_t first = p * P > n0 ? p * P : n0, last = p * P + P < n1 ? p * P + P : n1;
        const char *next = (p + 1) * P < n1 ? panel + bytes : ahead;
        if (first == p * P && last == p * P + P) {
            product_stored_panel(panel, fmt, bf16, in, M, K, y + first, ystride, next, unpacked);
            continue;
        }
        float part[RM * P];
        for (int64_t m0 = 0; m0 < M; m0 += RM) {
            int64_t rows = M - m0 < RM ? M - m0 : RM;
            Input at = rows_from(in, m0);
            product_stored_panel(panel, fmt, bf16, &at, rows, K, part, P, NULL, unpacked);
            for (int64_t m = 0; m < rows; m++)
                for (int64_t n = first; n < last; n++) y[(m0 + m) * ystride + n] = part[m * P + n - p * P];
        }
    }
}

static inline void input_set(Input *in, int bf16, int64_t m, int64_t k, float value) {
    if (bf16) value = round_bf16(value);
    in->f[k * in->ld + m] = value;
#ifdef SPECVIZ_DPBF16
    if (bf16) in->h[((k >> 1) * in->ld + m) * 2 + (k & 1)] = in->r[m * in->Kp + k] = f32_to_bf16(value);
#endif
}

/* ---- inputs quantized to int8, for the int8 products ----------------------------------------------------------
 * Each row's block of 32 k (as the product reads it: rounded to bf16 for a bf16 model) gets the scale
 * s = max|x| / 127 and q = x / s rounded to nearest even (times 1 / s, as llama.cpp's Q8 inputs): a row's q depend
 * on that row alone, so row invariance holds. The vector and scalar forms give the same q bit for bit (one
 * multiplication and one round-to-nearest-even conversion each). */
static inline void quantize_block(const float *x, Input *in, int64_t m, int64_t b) {
    const int64_t ld = in->ld;
    int8_t q[QBLOCK];
    int32_t total = 0;
#if defined(__AVX512F__)
    const __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
    const float largest = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
    const float scale = largest / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    const __m512i top = _mm512_set1_epi32(127), bottom = _mm512_set1_epi32(-127);
    const __m512i qa = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inverse))), top), bottom);
    const __m512i qc = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(c, _mm512_set1_ps(inverse))), top), bottom);
    total = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc));
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(qc));
#else
    float largest = 0.0f;
    for (int i = 0; i < QBLOCK; i++) largest = fabsf(x[i]) > largest ? fabsf(x[i]) : largest;
    const float scale = largest / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int i = 0; i < QBLOCK; i++) {
        long v = lrintf(x[i] * inverse); /* round to nearest even, as the vector conversion */
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        q[i] = (int8_t)v;
        total += (int32_t)v;
    }
#endif
    for (int j = 0; j < QBLOCK / 4; j++) memcpy(&in->q8[(b * (QBLOCK / 4) + j) * ld + m], q + 4 * j, 4);
    input_scale(in)[b * ld + m] = scale;
    input_qsum(in)[b * ld + m] = (float)total;
    input_isum(in)[b * ld + m] = total;
}

/* Rows [m0, m0 + rows) × columns [k0, k0 + cols) of an input, k0 a multiple of 32, quantized from its fp32 form
 * (the columns past cols up to the block's end are the input's zero padding or another call's: callers cut at
 * blocks, step.py's formats make sure of it). */
static void quantize_rows(Input *in, int64_t m0, int64_t rows, int64_t k0, int64_t cols) {
    for (int64_t b = k0 / QBLOCK; b * QBLOCK < k0 + cols; b++)
        for (int64_t r = 0; r < rows; r++) {
            float x[QBLOCK];
            for (int i = 0; i < QBLOCK; i++) x[i] = in->f[(b * QBLOCK + i) * in->ld + m0 + r];
            quantize_block(x, in, m0 + r, b);
        }
}

int specviz_input_scalar = 0; /* set (by the test that compares the two): the column-by-column form everywhere */

/* Rows [m0, m0 + rows) × columns [k0, k0 + cols) of a product's input from src (row-major, src_stride floats
 * apart), k0 even; with quantize, those rows' int8 blocks too. Column by column (pairs of columns with bf16
 * pairs), each column's rows contiguous in the k-major input: the stores run along memory, where writing a row at
 * a time would scatter them ld apart; a bf16 model's whole blocks 32 columns at a time where AVX-512 allows. */
static void input_set_block(Input *in, int bf16, int64_t m0, int64_t rows, int64_t k0, int64_t cols, const float *src,
                            int64_t src_stride, int quantize) {
#ifdef SPECVIZ_AMX
    /* where every product of this input takes AMX tiles (amx_takes: its K a multiple of 32) and no int8 form is
     * wanted, the tiles' row-major form is all that is read: written alone, a row at a time along memory, where
     * the k-major forms' scatters (or past 8 rows their column loop, ~10 cycles an element) cost a 16-row
     * verification ~0.3 of its time on a 2-core Xeon */
    if (!quantize && amx_takes(bf16, in->K)) {
        for (int64_t r = 0; r < rows; r++) {
            uint16_t *row = in->r + (m0 + r) * in->Kp + k0;
            const float *from = src + r * src_stride;
            int64_t c = 0;
            for (; c + 16 <= cols; c += 16) {
                const vu bits = vbf16_bits(load_f32(from + c));
                __m512i wide;
                memcpy(&wide, &bits, sizeof wide);
                _mm256_storeu_si256((__m256i *)(void *)(row + c), _mm512_cvtepi32_epi16(_mm512_srli_epi32(wide, 16)));
            }
            for (; c < cols; c++) row[c] = f32_to_bf16(from[c]);
        }
        return;
    }
#endif
#if defined(__AVX512F__) && defined(__AVX512VL__)
    /* a bf16 model's rows 32 columns at a time (k0 even, as every caller's is): each 16 rounded in one vector,
     * the same bits as f32_to_bf16, scattered to the k-major input (fp32 and bf16 pairs) and quantized from
     * registers, where a column at a time took ~10 cycles an element. In one process, alternating (2-core Zen 4):
     * 0.96, 0.97 and 0.98 of the step's time at 1, 4 and 8 rows with exact products, 0.93, 0.88, 0.94 and 0.94 at
     * 1, 4, 8 and 16 with int8 ones; 1.03 at 16 rows with exact products, which keep the columns' loop there */
    if (bf16 && cols % QBLOCK == 0 && (rows <= 8 || quantize) && !specviz_input_scalar) {
        const int64_t ld = in->ld;
        const __m512i lanes = _mm512_mullo_epi32(_mm512_set1_epi32((int)ld),
                                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
#ifdef SPECVIZ_DPBF16
        const __m256i pairs = _mm512_castsi512_si256(lanes); /* pair j of 16 columns: ld · j dwords on */
#endif
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c += QBLOCK) {
                float block[QBLOCK];
                for (int half = 0; half < 2; half++) {
                    const int64_t k = k0 + c + 16 * half;
                    const vu bits = vbf16_bits(load_f32(src + r * src_stride + c + 16 * half));
                    __m512i wide;
                    memcpy(&wide, &bits, sizeof wide);
                    _mm512_storeu_si512(block + 16 * half, wide);
                    _mm512_i32scatter_ps(in->f + k * ld + m0 + r, lanes, _mm512_castsi512_ps(wide), 4);
#ifdef SPECVIZ_DPBF16
                    const __m256i halves = _mm512_cvtepi32_epi16(_mm512_srli_epi32(wide, 16));
                    _mm256_i32scatter_epi32((int *)(void *)(in->h + (k / 2 * ld + m0 + r) * 2), pairs, halves, 4);
                    _mm256_storeu_si256((__m256i *)(void *)(in->r + (m0 + r) * in->Kp + k), halves);
#endif
                }
                if (quantize) quantize_block(block, in, m0 + r, (k0 + c) / QBLOCK);
            }
        return;
    }
#endif
    for (int64_t c = 0; c < cols; c += 2) {
        const int two = c + 1 < cols;
        float *f0 = in->f + (k0 + c) * in->ld + m0, *f1 = f0 + in->ld;
        if (!bf16) {
            for (int64_t r = 0; r < rows; r++) {
                f0[r] = src[r * src_stride + c];
                if (two) f1[r] = src[r * src_stride + c + 1];
            }
            continue;
        }
        uint16_t *h = in->h + ((k0 + c) / 2 * in->ld + m0) * 2;
        for (int64_t r = 0; r < rows; r++) {
            uint16_t a = f32_to_bf16(src[r * src_stride + c]), b = two ? f32_to_bf16(src[r * src_stride + c + 1]) : 0;
            f0[r] = bf16_to_f32(a);
            if (two) f1[r] = bf16_to_f32(b);
#ifdef SPECVIZ_DPBF16
            h[2 * r] = a;
            if (two) h[2 * r + 1] = b;
            uint16_t *row = in->r + (m0 + r) * in->Kp + k0 + c;
            row[0] = a;
            if (two) row[1] = b;
#else
            (void)h;
#endif
        }
    }
    if (quantize) quantize_rows(in, m0, rows, k0, cols);
}

/* Outputs [n0, n1) of an N-wide product for one thread of the team: contiguous panels. */
static inline void share(int64_t N, int thread, int threads, int64_t *n0, int64_t *n1) {
    int64_t panels = (N + P - 1) / P;
    int64_t first = panels * thread / threads, last = panels * (thread + 1) / threads;
    *n0 = first * P < N ? first * P : N;
    *n1 = last * P < N ? last * P : N;
}

/* Work handed out one piece at a time: the next unclaimed piece of a stage (a head, a panel, an attention task).
 * Why not fixed shares: two cores sharing one memory bus do not finish equal shares together (a thread waited
 * at the barrier for ~10% of a step), and nine heads or panels do not split evenly in two. Which thread
 * computes a piece never changes its bits. */
static inline int64_t take(int64_t *ticket) { return __atomic_fetch_add(ticket, 1, __ATOMIC_RELAXED); }

/* A thread's next piece, claimed while it works on this one when its products take more than one tile (M > RM)
 * or read quantized panels (whose one widening tile asks for the next panel as it reads: a 1-row step gained
 * ~0.7 ms of ~8 in an in-process A/B, 2-core Zen 4): its tiles then ask for that piece's weights (prefetch), so
 * the next panel's first tile reads from cache where the memory bus would otherwise idle through the later tiles.
 * Not beyond AHEAD_ROWS rows: there a piece is long enough that one held by a busy thread while the other has
 * nothing left costs more than the warming saves (64 rows gained nothing, a 292-token prefill lost ~5%). -1: no
 * claim ahead. */
#define AHEAD_ROWS 32
static inline int64_t take_ahead(int64_t *ticket, int64_t M, int quantized) {
    return (M > RM || quantized) && M <= AHEAD_ROWS ? take(ticket) : -1;
}

/* the stored weights of the panel holding output n0 */
static inline const char *panel_at(const void *packed, int fmt, int bf16, int64_t K, int64_t n0) {
    return (const char *)packed + n0 / P * stored_panel_bytes(K, fmt, bf16);
}

static inline float weight_at(const void *w, int bf16, int64_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

/* RMSNorm of each row of h (fp32 [M, d]) times the norm's weight, into a product's input: a block of rows at a
 * time through a buffer, written column by column (input_set_block). */
#define NORM_BUFFER 16384
static void rms_norm_rows(const float *h, int64_t M, int64_t d, const void *weight, int bf16, float eps, Input *out,
                          int quantize) {
    float normed[NORM_BUFFER];
    const int64_t block = d >= NORM_BUFFER ? 1 : NORM_BUFFER / d;
    for (int64_t m0 = 0; m0 < M; m0 += block) {
        int64_t rows = M - m0 < block ? M - m0 : block;
        for (int64_t r = 0; r < rows; r++) {
            const float *row = h + (m0 + r) * d;
            vf acc = {0};
            int64_t k = 0;
            for (; k + VL <= d; k += VL) {
                vf v = load_f32(row + k);
                acc += v * v;
            }
            float sum = reduce(acc);
            for (; k < d; k++) sum += row[k] * row[k];
            float scale = 1.0f / sqrtf(sum / (float)d + eps);
            for (int64_t k0 = 0; k0 < d; k0 += NORM_BUFFER) { /* a row wider than the buffer: in pieces */
                int64_t n = d - k0 < NORM_BUFFER ? d - k0 : NORM_BUFFER;
                float *dst = d >= NORM_BUFFER ? normed : normed + r * d;
                for (k = 0; k < n; k++) dst[k] = weight_at(weight, bf16, k0 + k) * (row[k0 + k] * scale);
                if (d >= NORM_BUFFER) input_set_block(out, bf16, m0 + r, 1, k0, n, normed, n, quantize);
            }
        }
        if (d < NORM_BUFFER) input_set_block(out, bf16, m0, rows, 0, d, normed, d, quantize);
    }
}

/* exp on a vector of lanes: Cephes' expf (a degree-7 polynomial after splitting off a power of two), within
 * 2 ulp of expf. libm's expf is called once per value (a decode step makes ~10^5 of them in attention and SiLU,
 * 10^6 when verifying 16 tokens); this handles 16 at a time, each value the same bits wherever it sits. */
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
    float *attention; /* [threads, KEY_BLOCK·head_dim + GROUP_QUERIES·(capacity + head_dim)]: Scratch */
    float *unpacked; /* [threads, unpacked_floats]: each thread's widened quantized panel */
} Work;

static float *carve(float **at, int64_t n) {
    float *p = *at;
    *at += (n + 15) / 16 * 16;
    return p;
}

static void carve_input(float **at, Input *in, int64_t M, int64_t K) {
    in->K = K;
    in->Kp = padded(K);
    in->ld = M;
    in->f = carve(at, M * in->Kp);
    in->h = (uint16_t *)carve(at, (M * in->Kp + 1) / 2);
    in->r = (uint16_t *)carve(at, (M * in->Kp + 1) / 2);
    in->q8 = (uint32_t *)carve(at, int8_elems(M, in->Kp));
}

#define KEY_BLOCK 64
#define GROUP_QUERIES 16 /* queries in one attention task at most */
static inline int64_t attention_floats(const Shape *s) {
    return KEY_BLOCK * s->head_dim + GROUP_QUERIES * (s->capacity + s->head_dim);
}

/* floats of one plain panel of the widest K a product of this shape has (a multiple of 16: carve keeps them
 * aligned) */
static inline int64_t unpacked_floats(const Shape *s) {
    int64_t K = s->d > s->inter ? s->d : s->inter, q = s->heads * s->head_dim;
    K = K > q ? K : q;
    return (panel_elems(K, 0) + 15) / 16 * 16; /* fp32-sized: the AVX2 build widens a bf16 model's into fp32 */
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
    w->attention = carve(&at, (int64_t)threads * attention_floats(s));
    w->unpacked = carve(&at, (int64_t)threads * unpacked_floats(s));
    return at - base;
}

int64_t specviz_work_floats(const Shape *s, int64_t M, int threads) {
    Work w;
    return layout(s, M, threads, (float *)0, &w);
}

static void clear_input(Input *in, int64_t M) {
    memset(in->f, 0, sizeof(float) * M * in->Kp); /* the padding columns stay zero */
    memset(in->h, 0, 2 * M * in->Kp);
    memset(in->r, 0, 2 * M * in->Kp);
    memset(in->q8, 0, 4 * int8_elems(M, in->Kp)); /* and the padding blocks' scales: they add nothing */
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

/* An opt-in clock of the stages (build with -DSPECVIZ_STAGE_CLOCK, e.g. SPECVIZ_NATIVE_CFLAGS=-DSPECVIZ_STAGE_CLOCK;
 * scripts/stage_clock.py reads it): per stage, the seconds thread 0 waited for the team at its end, and the
 * wall time from stage start to the meeting. Costs nothing in a normal build. */
#ifdef SPECVIZ_STAGE_CLOCK
static double stage_wall[8], stage_wait[8];
static inline double clock_now(void) {
#ifdef _OPENMP
    return omp_get_wtime();
#else
    return 0.0;
#endif
}
#define CLOCK_START(thread) double clock_at = (thread) == 0 ? clock_now() : 0.0
#define CLOCK_MEET(thread, stage, barrier, team, sense)                                                              \
    do {                                                                                                             \
        double arrived = (thread) == 0 ? clock_now() : 0.0;                                                          \
        meet(barrier, team, sense);                                                                                  \
        if ((thread) == 0) {                                                                                         \
            double left = clock_now();                                                                               \
            stage_wait[stage] += left - arrived;                                                                     \
            stage_wall[stage] += left - clock_at;                                                                    \
            clock_at = left;                                                                                         \
        }                                                                                                            \
    } while (0)
int specviz_stage_clock(double *out, int reset) {
    for (int i = 0; i < 8; i++) {
        out[i] = stage_wall[i];
        out[8 + i] = stage_wait[i];
        if (reset) stage_wall[i] = stage_wait[i] = 0.0;
    }
    return 1;
}
#else
#define CLOCK_START(thread) (void)0
#define CLOCK_MEET(thread, stage, barrier, team, sense) meet(barrier, team, sense)
int specviz_stage_clock(double *out, int reset) {
    (void)out;
    (void)reset;
    return 0;
}
#endif

/* Attention for a group of queries that share one kv head (one query head over neighbouring rows): each
 * query q against the keys [0, end) of the kv head (cache rows from base) that it may see (seen: NULL for all
 * of them), out[hd] = softmax(q·k · scaling) · v. Why grouped: with bf16 keys and values, widening them to fp32
 * took most of attention's instructions, once per query; here a block of KEY_BLOCK keys (then values) is widened
 * once into the thread's scratch and read from L1 by every query of the group, so a verification of 16 rows
 * widens each key 16 times less often; a group of one reads the cache directly (widening in the load), since
 * a copy read once only adds stores. Each query's arithmetic is exactly the one-query loop's: keys in
 * cache order, VL-key groups from key 0 (KEY_BLOCK is a multiple of VL, so a block never splits a group), each
 * score's sum in one fixed order, the values summed in key order with the same fused multiply-adds, from the
 * same fp32 values (widening is exact): the same bits whatever else shares the call or the task. HV, the head's
 * vectors, is a constant where it can be (64 or 128 lanes of head), so q and the output stay in registers. */
typedef struct {
    const float *q[GROUP_QUERIES];
    const uint8_t *seen[GROUP_QUERIES];
    int64_t end[GROUP_QUERIES];
    int count;
} Queries;

typedef struct { /* one thread's attention scratch */
    float *block;  /* [KEY_BLOCK, head_dim]: keys or values widened to fp32 */
    float *scores; /* [GROUP_QUERIES, capacity] */
    float *out;    /* [GROUP_QUERIES, head_dim] */
} Scratch;

/* rows [j0, j0 + n) of one cache head as fp32: the cache itself (fp32) or the block widened into scratch (bf16) */
static inline const float *cache_rows(const int HV, const int bf16, const void *cache, int64_t at, int64_t n,
                                      float *block) {
    if (!bf16) return (const float *)cache + at;
    const uint16_t *h = (const uint16_t *)cache + at;
    for (int64_t r = 0; r < n; r++)
UNROLL
        for (int i = 0; i < HV; i++) store_f32(block + r * HV * VL + i * VL, load_bf16(h + r * HV * VL + i * VL));
    return block;
}

/* lanes [at, at + VL) of cache rows: widened into scratch, or (direct) read from the bf16 cache and widened in the
 * load; both exact, so both give the same fp32 lanes */
static inline vf cache_vector(const int direct, const float *widened, const uint16_t *raw, int64_t at) {
    return direct ? load_bf16(raw + at) : load_f32(widened + at);
}

#ifdef SPECVIZ_DPBF16
/* Scores with AVX-512 BF16 dot products (a bf16 cache, head_dim a multiple of 32): q rounded to bf16 once per
 * query (as a bf16 model's q is), in the cache's element order, so each key is HV/2 dot products read straight
 * from the cache; no key is widened to fp32. Lane l of a key's vector sums elements 2l and 2l + 1 of every
 * 32-element piece; reduce_each / reduce then sum the lanes in the same fixed order as the fp32 path. */
static inline void bf16_query(const int HV, const float *q, __m512bh *qh) {
    for (int i = 0; i < HV / 2; i++) qh[i] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + 32 * i + 16), _mm512_loadu_ps(q + 32 * i));
}
static inline vf bf16_key_dot(const int HV, const __m512bh *qh, const uint16_t *key) {
    __m512 acc = _mm512_setzero_ps();
UNROLL
    for (int i = 0; i < HV / 2; i++) acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(key + 32 * i), qh[i]);
    return (vf)acc;
}
#define DOT_SCORES(HV, bf16) ((bf16) && (HV) % 2 == 0)

/* The weighted sum by dot products: keys taken in pairs, in the order of the keys a query sees (its k-th and
 * k+1-th seen keys, k even), never by their places in the cache: a tree puts an accepted path's keys at scattered
 * places where a chain and `ar` put them side by side, and a pair sums its two products in one rounding, so
 * pairing neighbours in the cache made a row's bits depend on its tree (tried: `eagle` then parted from `ar`'s
 * output in 3 of 6 prompts). Vector k of a pair holds elements 16k..16k+15 of its two rows interleaved. */
static const uint16_t PAIR_FIRST[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
static const uint16_t PAIR_SECOND[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
static inline void interleave_rows(const int HV, const uint16_t *a, const uint16_t *b, __m512i *pair) {
    static const uint16_t zeros[512]; /* b NULL: a key with no partner, weighed against zeros */
    const __m512i first = _mm512_loadu_si512(PAIR_FIRST), second = _mm512_loadu_si512(PAIR_SECOND);
    if (!b) b = zeros;
UNROLL
    for (int i = 0; i < HV / 2; i++) {
        const __m512i va = _mm512_loadu_si512(a + 32 * i), vb = _mm512_loadu_si512(b + 32 * i);
        _mm512_storeu_si512(pair + 2 * i, _mm512_permutex2var_epi16(va, first, vb));
        _mm512_storeu_si512(pair + 2 * i + 1, _mm512_permutex2var_epi16(va, second, vb));
    }
}

/* o += p0·v0 + p1·v1 over one interleaved pair; weights: bf16(p0) in the low half, bf16(p1) in the high */
static inline void add_pair(const int HV, __m512 *o, const __m512i *pair, uint32_t weights) {
    const __m512bh both = (__m512bh)_mm512_set1_epi32((int)weights);
UNROLL
    for (int i = 0; i < HV; i++) o[i] = _mm512_dpbf16_ps(o[i], (__m512bh)_mm512_loadu_si512(pair + i), both);
}
static inline uint32_t weight_pair(float p0, float p1) {
    return (uint32_t)f32_to_bf16(p0) | (uint32_t)f32_to_bf16(p1) << 16;
}

/* Each query's weighted sum over rows [j0, j0 + n) of its kv head (`pairs`: those rows interleaved two by two from
 * j0, which is even). While a query has seen every key so far, its seen order is the cache's order and 32 keys at
 * a time go through `pairs`, the weights rounded 16 at a time; from its first unseen key on, each seen key waits
 * for the next one (`pending`) and the two are interleaved from the cache. Totals are summed lane by lane, lane
 * (seen index mod 16), in the same order both ways. */
typedef struct {
    int64_t seen_count, pending; /* keys seen so far; a seen key waiting for its partner, or -1 */
    float pending_p;
    float lanes[16];
} PairSums;

static inline __attribute__((always_inline)) void weighted_sum_pairs(const int HV, const uint16_t *values,
                                                                     int64_t j0, int64_t end, const uint8_t *seen,
                                                                     const float *scores, const __m512i *pairs,
                                                                     __m512 *o, PairSums *ps) {
    const int64_t hd = HV * 16;
    int64_t c = ps->seen_count;
    for (int64_t j = j0; j < end; j += 32) {
        const int64_t stop = j + 32 < end ? j + 32 : end;
        __mmask16 keep[2];
        int whole = c == j; /* every key before j seen, so pairs line up with the cache's */
        for (int half = 0; half < 2; half++) {
            const int64_t at = j + 16 * half;
            keep[half] = at >= end ? 0 : end - at >= 16 ? 0xFFFF : (__mmask16)((1u << (end - at)) - 1);
            if (seen && whole)
                whole = _mm_cmpneq_epi8_mask(_mm_maskz_loadu_epi8(keep[half], seen + at), _mm_setzero_si128()) == keep[half];
        }
        if (whole) {
            uint32_t weight_pairs[16];
            __m512 lanes = _mm512_loadu_ps(ps->lanes);
            for (int half = 0; half < 2; half++) {
                const __m512 p = _mm512_maskz_loadu_ps(keep[half], scores + j + 16 * half);
                lanes = _mm512_add_ps(lanes, p);
                const __m256bh rounded = _mm512_cvtneps_pbh(p);
                memcpy(weight_pairs + 8 * half, &rounded, sizeof rounded);
            }
            _mm512_storeu_ps(ps->lanes, lanes);
            const __m512i *v = pairs + (j - j0) / 2 * HV;
            for (int64_t r = 0; 2 * r < stop - j; r++, v += HV) add_pair(HV, o, v, weight_pairs[r]);
            c = stop; /* an odd last key went with a zero weight: what the pending key's flush adds */
            continue;
        }
        for (int64_t k = j; k < stop; k++) {
            if (seen && !seen[k]) continue;
            const float p = scores[k];
            ps->lanes[c % 16] += p;
            c++;
            if (ps->pending < 0) {
                ps->pending = k;
                ps->pending_p = p;
                continue;
            }
            __m512i pair[16];
            interleave_rows(HV, values + ps->pending * hd, values + k * hd, pair);
            add_pair(HV, o, pair, weight_pair(ps->pending_p, p));
            ps->pending = -1;
        }
    }
    ps->seen_count = c;
}

/* Scores by key lanes, for a group of LANES_FROM queries or more: the same bits as bf16_key_dot + reduce_each, with no
 * shuffle per query. Why: at 16 rows the scores took about 60% of attention's samples (perf, 2-core Zen 4), a third of
 * that in reduce_each's shuffles (about 30 per 16 keys per query) and most of the rest in each query's reload of every
 * key. Here a block of keys is turned once, for the whole group, so that a vector holds one lane's pair for 16 keys:
 * lane l's sum of key t, A_l(t) = dpbf16(dpbf16(0, key t's pair l of piece 0, q's), piece 1's, ...), becomes lane t of
 * A_l, built by the same instructions on the same operands, and reduce's halving tree ((A_l + A_l+8), then +4, +2, +1)
 * becomes 15 vertical adds in the same tree. A query's bits are the one-query path's whatever the group: the tests
 * compare every row of a chunk and of a tree with one-row steps, which go the other way. */
#ifndef LANES_FROM /* -DLANES_FROM=… for the A/B (scripts/step_ab.py) */
#define LANES_FROM 4
#endif

static inline void transpose16(__m512i r[16]) { /* r[t] lane l -> r[l] lane t, 32-bit lanes */
    __m512i t[16];
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_epi32(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_epi32(r[k], r[k + 1]);
    }
    for (int k = 0; k < 16; k += 4) {
        r[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]);
        r[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        r[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]);
        r[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    for (int k = 0; k < 16; k += 8)
        for (int c = 0; c < 4; c++) {
            t[k + c] = _mm512_shuffle_i32x4(r[k + c], r[k + c + 4], 0x88);
            t[k + c + 4] = _mm512_shuffle_i32x4(r[k + c], r[k + c + 4], 0xdd);
        }
    for (int c = 0; c < 8; c++) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[c + 8], 0x88);
        r[c + 8] = _mm512_shuffle_i32x4(t[c], t[c + 8], 0xdd);
    }
}

/* keys [0, n) of a block by key lanes: vector (v·HV/2 + i)·16 + l holds, in lane t, the pair of elements 32i + 2l and
 * 32i + 2l + 1 of key 16v + t (what lane l of that key's i-th dot product takes); keys past n are zeros. */
static inline void keys_by_lane(const int HV, const uint16_t *keys, int64_t n, __m512i *lanes) {
    const int64_t hd = HV * 16;
    for (int64_t v = 0; 16 * v < n; v++)
        for (int i = 0; i < HV / 2; i++) {
            __m512i r[16];
            for (int t = 0; t < 16; t++)
                r[t] = 16 * v + t < n ? _mm512_loadu_si512(keys + (16 * v + t) * hd + 32 * i) : _mm512_setzero_si512();
            transpose16(r);
            for (int l = 0; l < 16; l++) _mm512_storeu_si512(lanes + (v * (HV / 2) + i) * 16 + l, r[l]);
        }
}

/* acc + key · the pair q[at] (at a constant), broadcast from memory within the instruction: the same instruction on
 * the same operands as _mm512_dpbf16_ps(acc, key, set1(q[at])). Why asm: GCC 12 does not fold a set1 into
 * vdpbf16ps, and with a pointer per operand ("m") it kept 64 addresses on the stack; a base register and
 * constant offsets keep the loop's 32 products free of both. Clang gets the intrinsic (the same bits): it was not
 * installed where this was written, so neither its reading of the asm's %c and %{ nor its folding was checked. */
#if defined(__clang__)
#define DOT_BROADCAST(acc, key, q, at) ((acc) = _mm512_dpbf16_ps((acc), (key), (__m512bh)_mm512_set1_epi32((int)(q)[at])))
#else
#define DOT_BROADCAST(acc, key, q, at)                                                                             \
    __asm__("vdpbf16ps %c[off](%[base])%{1to16%}, %[k], %[a]"                                                     \
            : [a] "+v"(acc)                                                                                          \
            : [k] "v"(key), [base] "r"(q), [off] "i"(4 * (at)), "m"(*(const uint32_t(*)[64])(q)))
#endif

/* 16 keys' scores (before scaling) for one or two queries (qa, qb: their bf16 pairs as dwords, piece-major) */
static inline __attribute__((always_inline)) void lane_scores(const int HV, const int two, const __m512i *lanes,
                                                              const uint32_t *qa, const uint32_t *qb, __m512 *out) {
    __m512 a[8], b[8];
UNROLL
    for (int l = 0; l < 8; l++) {
        __m512 a_lo = _mm512_setzero_ps(), a_hi = a_lo, b_lo = a_lo, b_hi = a_lo;
UNROLL
        for (int i = 0; i < HV / 2; i++) {
            const __m512bh lo = (__m512bh)_mm512_loadu_si512(lanes + i * 16 + l);
            const __m512bh hi = (__m512bh)_mm512_loadu_si512(lanes + i * 16 + l + 8);
            DOT_BROADCAST(a_lo, lo, qa, i * 16 + l);
            DOT_BROADCAST(a_hi, hi, qa, i * 16 + l + 8);
            if (two) {
                DOT_BROADCAST(b_lo, lo, qb, i * 16 + l);
                DOT_BROADCAST(b_hi, hi, qb, i * 16 + l + 8);
            }
        }
        a[l] = _mm512_add_ps(a_lo, a_hi);
        if (two) b[l] = _mm512_add_ps(b_lo, b_hi);
    }
#define HALVING_TREE(x) _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x[0], x[4]), _mm512_add_ps(x[2], x[6])),           \
                                      _mm512_add_ps(_mm512_add_ps(x[1], x[5]), _mm512_add_ps(x[3], x[7])))
    out[0] = HALVING_TREE(a);
    if (two) out[1] = HALVING_TREE(b);
#undef HALVING_TREE
}

/* One query's 16 scores from key j on: scaled, stored where the query may look (keys before its end), and the
 * largest of the ones it sees kept lane by lane. */
static inline void keep_scores(__m512 score, __m512 scaling, int64_t j, int64_t end, const uint8_t *seen,
                               float *scores, __m512 *top) {
    const int64_t left = end - j;
    const __mmask16 valid = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    const __m512 scaled = _mm512_mul_ps(score, scaling);
    _mm512_mask_storeu_ps(scores + j, valid, scaled);
    const __mmask16 shown =
        seen ? _mm_cmpneq_epi8_mask(_mm_maskz_loadu_epi8(valid, seen + j), _mm_setzero_si128()) : valid;
    *top = _mm512_mask_max_ps(*top, shown, *top, scaled);
}

/* Every query's scores over its keys, into scratch, and each one's largest seen score (best). Queries go two by
 * two, so each key vector loaded serves two; a pair runs to the longer one's end, and the other stores nothing
 * past its own. */
static inline __attribute__((always_inline)) void scores_by_lanes(const int HV, const Shape *s, const uint16_t *keys,
                                                                  const Queries *g, int64_t longest, Scratch *x,
                                                                  float *best) {
    uint32_t q[GROUP_QUERIES][64]; /* HV/2 pieces of 16 pairs: HV ≤ 8 */
    __m512 tops[GROUP_QUERIES];
    for (int qi = 0; qi < g->count; qi++) {
        __m512bh qh[4];
        bf16_query(HV, g->q[qi], qh);
        memcpy(q[qi], qh, (size_t)HV / 2 * sizeof qh[0]);
        tops[qi] = _mm512_set1_ps(-INFINITY);
    }
    const __m512 scaling = _mm512_set1_ps(s->scaling);
    __m512i *lanes = (__m512i *)(void *)x->block;
    for (int64_t j0 = 0; j0 < longest; j0 += KEY_BLOCK) {
        const int64_t n = longest - j0 < KEY_BLOCK ? longest - j0 : KEY_BLOCK;
        keys_by_lane(HV, keys + j0 * HV * 16, n, lanes);
        for (int qi = 0; qi < g->count; qi += 2) {
            const int two = qi + 1 < g->count;
            const int64_t end_a = g->end[qi], end_b = two ? g->end[qi + 1] : 0;
            const int64_t stop = (end_a > end_b ? end_a : end_b) - j0;
            float *scores_a = x->scores + qi * s->capacity, *scores_b = scores_a + s->capacity;
            for (int64_t v = 0; 16 * v < n && 16 * v < stop; v++) {
                __m512 score[2];
                if (two) lane_scores(HV, 1, lanes + v * (HV / 2) * 16, q[qi], q[qi + 1], score);
                else lane_scores(HV, 0, lanes + v * (HV / 2) * 16, q[qi], q[qi], score);
                keep_scores(score[0], scaling, j0 + 16 * v, end_a, g->seen[qi], scores_a, &tops[qi]);
                if (two) keep_scores(score[1], scaling, j0 + 16 * v, end_b, g->seen[qi + 1], scores_b, &tops[qi + 1]);
            }
        }
    }
    for (int qi = 0; qi < g->count; qi++) best[qi] = _mm512_reduce_max_ps(tops[qi]);
}

#ifdef SPECVIZ_AMX
/* Every query's scores on AMX tiles, where the products take them (the same process-wide switch): each key's score
 * with a query is one element of a tile product, keys as A's rows (straight from the cache, head_dim · 2 bytes
 * apart), the group's queries as B's columns (their bf16 pairs, built once), summed over head_dim in pieces of 32
 * ascending. A score depends on its key and its query alone, never on how many queries share the tile or where the
 * key sits, so a query's bits are the one-query call's, as with the vector paths (whose bits these are not: another
 * order of the same sums). Why: the vector paths paid a dot product per key per query; a verification of 16 rows
 * spent ~4.8 of its ~21 ms in attention on a 2-core Xeon, against ~0.9 for one row. head_dim 64 or 128 here. */
static void amx_scores(const int HV, const Shape *s, const uint16_t *keys, const Queries *g, int64_t longest,
                       Scratch *x, float *best) {
    const int64_t hd = HV * 16, pieces = hd / 32;
    const int count = g->count;
    uint32_t columns[4][16][GROUP_QUERIES]; /* B: piece, pair of the piece, query */
    for (int qi = 0; qi < count; qi++) {
        __m512bh qh[4];
        bf16_query(HV, g->q[qi], qh);
        for (int64_t p = 0; p < pieces; p++) {
            uint32_t pairs[16];
            memcpy(pairs, &qh[p], sizeof pairs);
            for (int i = 0; i < 16; i++) columns[p][i][qi] = pairs[i];
        }
    }
    const int key = 1 << 16 | count; /* apart from every product's configuration */
    /* C: 16 keys × the queries; A: 16 keys × 32 elements; B (2-5): 16 pairs × queries */
    const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 0, 0};
    const uint16_t q = (uint16_t)(4 * count), bytes[8] = {q, 64, q, q, q, q, 0, 0};
    amx_load_config(key, rows, bytes);
    AMX_LOAD(2, columns[0], 4 * GROUP_QUERIES);
    AMX_LOAD(3, columns[1], 4 * GROUP_QUERIES);
    if (pieces == 4) {
        AMX_LOAD(4, columns[2], 4 * GROUP_QUERIES);
        AMX_LOAD(5, columns[3], 4 * GROUP_QUERIES);
    }
    __m512 tops[GROUP_QUERIES];
    for (int qi = 0; qi < count; qi++) tops[qi] = _mm512_set1_ps(-INFINITY);
    const __m512 scaling = _mm512_set1_ps(s->scaling);
    uint16_t *tail = (uint16_t *)(void *)x->block; /* the last keys, zero-padded to 16 */
    float table[16][16];                           /* C: key, query */
    for (int64_t j = 0; j < longest; j += 16) {
        const uint16_t *rows = keys + j * hd;
        if (j + 16 > longest) { /* past the cache's last key read nothing: the head's rows may end there */
            memset(tail, 0, (size_t)(16 * hd) * 2);
            memcpy(tail, rows, (size_t)((longest - j) * hd) * 2);
            rows = tail;
        }
        _tile_zero(0);
        AMX_LOAD(1, rows, hd * 2);
        _tile_dpbf16ps(0, 1, 2);
        AMX_LOAD(1, rows + 32, hd * 2);
        _tile_dpbf16ps(0, 1, 3);
        if (pieces == 4) {
            AMX_LOAD(1, rows + 64, hd * 2);
            _tile_dpbf16ps(0, 1, 4);
            AMX_LOAD(1, rows + 96, hd * 2);
            _tile_dpbf16ps(0, 1, 5);
        }
        _tile_stored(0, table, 64);
        __m512i by_query[16];
        for (int t = 0; t < 16; t++) by_query[t] = _mm512_loadu_si512(table[t]);
        transpose16(by_query);
        for (int qi = 0; qi < count; qi++)
            keep_scores(_mm512_castsi512_ps(by_query[qi]), scaling, j, g->end[qi], g->seen[qi],
                        x->scores + qi * s->capacity, &tops[qi]);
    }
    for (int qi = 0; qi < count; qi++) best[qi] = _mm512_reduce_max_ps(tops[qi]);
}
#endif
#else
#define DOT_SCORES(HV, bf16) 0
#endif

static inline __attribute__((always_inline)) void attend_vectors(const int HV, const int bf16, const int direct,
                                                                 const Shape *s,
                                                                 const void *keys, const void *values,
                                                                 const Queries *g, int64_t base, Scratch *x) {
    const int64_t hd = s->head_dim, capacity = s->capacity;
    int64_t longest = 0;
    float best[GROUP_QUERIES];
    for (int qi = 0; qi < g->count; qi++) {
        longest = g->end[qi] > longest ? g->end[qi] : longest;
        best[qi] = -INFINITY;
    }
    const int dot = DOT_SCORES(HV, bf16); /* scores by bf16 dot products straight from the cache */
#ifdef SPECVIZ_AMX
    if (dot && amx_on && (HV == 4 || HV == 8))
        amx_scores(HV, s, (const uint16_t *)keys + base * hd, g, longest, x, best);
    else
#endif
#ifdef SPECVIZ_DPBF16
    if (dot && HV <= 8 && g->count >= LANES_FROM)
        scores_by_lanes(HV, s, (const uint16_t *)keys + base * hd, g, longest, x, best);
    else
#endif
    for (int64_t j0 = 0; j0 < longest; j0 += KEY_BLOCK) {
        const int64_t n = longest - j0 < KEY_BLOCK ? longest - j0 : KEY_BLOCK;
        const float *kb = direct || dot ? NULL : cache_rows(HV, bf16, keys, (base + j0) * hd, n, x->block) - j0 * hd;
        const uint16_t *kh = direct || dot ? (const uint16_t *)keys + base * hd : NULL;
        for (int qi = 0; qi < g->count; qi++) {
            const int64_t end = g->end[qi] < j0 + n ? g->end[qi] : j0 + n;
            const uint8_t *seen = g->seen[qi];
            float *scores = x->scores + qi * capacity, top = best[qi];
            vf qv[16];
#ifdef SPECVIZ_DPBF16
            __m512bh qh[8];
            if (dot) bf16_query(HV, g->q[qi], qh);
            else
#endif
UNROLL
            for (int i = 0; i < HV; i++) qv[i] = load_f32(g->q[qi] + i * VL);
            int64_t j = j0;
            vf tops = splat(-INFINITY); /* the running maximum lane by lane: a scalar chain took a quarter of attention */
            for (; j + VL <= end; j += VL) { /* VL keys at a time, seen or not; only the seen ones count */
                vf acc[VL];
UNROLL
                for (int t = 0; t < VL; t++) {
#ifdef SPECVIZ_DPBF16
                    if (dot) {
                        acc[t] = bf16_key_dot(HV, qh, kh + (j + t) * hd);
                        continue;
                    }
#endif
                    vf a = {0};
UNROLL
                    for (int i = 0; i < HV; i++) a += qv[i] * cache_vector(direct, kb, kh, (j + t) * hd + i * VL);
                    acc[t] = a;
                }
                vf score = reduce_each(acc) * splat(s->scaling);
                store_f32(scores + j, score);
                if (seen) { /* an unseen key's lane offers -inf, which never wins */
                    vb8 bytes;
                    memcpy(&bytes, seen + j, sizeof bytes);
                    vi shown = (vi)(__builtin_convertvector(bytes, vi) != 0);
                    score = (vf)(((vi)score & shown) | ((vi)splat(-INFINITY) & ~shown));
                }
                tops = keep_larger(tops, score);
            }
            float lanes_top = largest_lane(tops);
            top = lanes_top > top ? lanes_top : top;
            for (; j < end; j++) {
                if (seen && !seen[j]) continue;
                vf a = {0};
#ifdef SPECVIZ_DPBF16
                if (dot) a = bf16_key_dot(HV, qh, kh + j * hd);
                else
#endif
UNROLL
                for (int i = 0; i < HV; i++) a += qv[i] * cache_vector(direct, kb, kh, j * hd + i * VL);
                float score = reduce(a) * s->scaling;
                scores[j] = score;
                top = score > top ? score : top;
            }
            best[qi] = top;
        }
    }
    float total[GROUP_QUERIES];
#ifdef SPECVIZ_DPBF16
    PairSums sums[GROUP_QUERIES];
#endif
    for (int qi = 0; qi < g->count; qi++) {
        exp_shifted(x->scores + qi * capacity, g->end[qi], best[qi]); /* unseen entries hold stale values */
        total[qi] = 0.0f;
#ifdef SPECVIZ_DPBF16
        sums[qi] = (PairSums){0, -1, 0.0f, {0}};
#endif
    }
    for (int64_t j0 = 0; j0 < longest; j0 += KEY_BLOCK) {
        const int64_t n = longest - j0 < KEY_BLOCK ? longest - j0 : KEY_BLOCK;
#ifdef SPECVIZ_DPBF16
        if (dot) {
            const uint16_t *head_values = (const uint16_t *)values + base * hd;
            __m512i *pairs = (__m512i *)(void *)x->block;
            for (int64_t r = 0; 2 * r < n; r++)
                interleave_rows(HV, head_values + (j0 + 2 * r) * hd, 2 * r + 1 < n ? head_values + (j0 + 2 * r + 1) * hd : NULL,
                                pairs + r * HV);
            for (int qi = 0; qi < g->count; qi++) {
                const int64_t end = g->end[qi] < j0 + n ? g->end[qi] : j0 + n;
                float *out = x->out + qi * hd;
                __m512 o[16];
UNROLL
                for (int i = 0; i < HV; i++) o[i] = j0 ? _mm512_loadu_ps(out + i * 16) : _mm512_setzero_ps();
                weighted_sum_pairs(HV, head_values, j0, end, g->seen[qi], x->scores + qi * capacity, pairs, o, &sums[qi]);
                if (j0 + n >= longest && sums[qi].pending >= 0) { /* the last seen key, against zeros */
                    __m512i pair[16];
                    interleave_rows(HV, head_values + sums[qi].pending * hd, NULL, pair);
                    add_pair(HV, o, pair, weight_pair(sums[qi].pending_p, 0.0f));
                }
UNROLL
                for (int i = 0; i < HV; i++) _mm512_storeu_ps(out + i * 16, o[i]);
            }
            continue;
        }
#endif
        const float *vb = direct ? NULL : cache_rows(HV, bf16, values, (base + j0) * hd, n, x->block) - j0 * hd;
        const uint16_t *vh16 = direct ? (const uint16_t *)values + base * hd : NULL;
        for (int qi = 0; qi < g->count; qi++) {
            const int64_t end = g->end[qi] < j0 + n ? g->end[qi] : j0 + n;
            const uint8_t *seen = g->seen[qi];
            const float *scores = x->scores + qi * capacity;
            float *out = x->out + qi * hd, sum = total[qi];
            vf o[16];
UNROLL
            for (int i = 0; i < HV; i++) o[i] = j0 ? load_f32(out + i * VL) : (vf){0};
            for (int64_t j = j0; j < end; j++) {
                if (seen && !seen[j]) continue;
                float p = scores[j];
                sum += p;
                vf pv = splat(p);
UNROLL
                for (int i = 0; i < HV; i++) o[i] += pv * cache_vector(direct, vb, vh16, j * hd + i * VL);
            }
UNROLL
            for (int i = 0; i < HV; i++) store_f32(out + i * VL, o[i]);
            total[qi] = sum;
        }
    }
    for (int qi = 0; qi < g->count; qi++) {
        float *out = x->out + qi * hd;
#ifdef SPECVIZ_DPBF16
        if (dot) total[qi] = reduce(load_f32(sums[qi].lanes));
#endif
UNROLL
        for (int i = 0; i < HV; i++) store_f32(out + i * VL, load_f32(out + i * VL) / splat(total[qi]));
    }
}

/* The same for any head_dim: scalar where it is not a multiple of the vector. */
static void attend_any(const Shape *s, const Layer *ly, const float *q, int64_t base, int64_t end,
                       const uint8_t *seen, float *scores, float *out) {
    const int64_t hd = s->head_dim;
    const int bf16 = s->bf16;
    float best = -INFINITY;
    for (int64_t j = 0; j < end; j++) {
        if (seen && !seen[j]) continue;
        int64_t at = (base + j) * hd;
        float score = 0.0f;
        for (int64_t i = 0; i < hd; i++) score += q[i] * load_hidden(ly->keys, bf16, at + i);
        score *= s->scaling;
        scores[j] = score;
        best = score > best ? score : best;
    }
    exp_shifted(scores, end, best);
    float total = 0.0f;
    for (int64_t i = 0; i < hd; i++) out[i] = 0.0f;
    for (int64_t j = 0; j < end; j++) {
        if (seen && !seen[j]) continue;
        float p = scores[j];
        total += p;
        int64_t at = (base + j) * hd;
        for (int64_t i = 0; i < hd; i++) out[i] += p * load_hidden(ly->values, bf16, at + i);
    }
    for (int64_t i = 0; i < hd; i++) out[i] /= total;
}

static void attend(const Shape *s, const Layer *ly, const Queries *g, int64_t base, Scratch *x) {
    const int bf16 = s->bf16;
    switch (s->head_dim % VL ? 0 : s->head_dim / VL) {
#define ATTEND(HV)                                                                                                   \
    case HV:                                                                                                         \
        if (bf16 && g->count == 1) attend_vectors(HV, 1, 1, s, ly->keys, ly->values, g, base, x);                     \
        else if (bf16) attend_vectors(HV, 1, 0, s, ly->keys, ly->values, g, base, x);                                 \
        else attend_vectors(HV, 0, 0, s, ly->keys, ly->values, g, base, x);                                          \
        break;
        ATTEND(2)
        ATTEND(4)
        ATTEND(8)
        ATTEND(16)
#undef ATTEND
    default:
        for (int qi = 0; qi < g->count; qi++)
            attend_any(s, ly, g->q[qi], base, g->end[qi], g->seen[qi], x->scores, x->out + qi * s->head_dim);
    }
}

/* Stage A's pieces are heads of q, then of k, then of v: piece u's weights and its head within them. */
static inline const void *unit_weight(const Shape *s, const Layer *ly, int64_t u) {
    return u < s->heads ? ly->q : u < s->heads + s->kv_heads ? ly->k : ly->v;
}
static inline int format_of(const Layer *ly, int weight) { return ly->formats >> 4 * weight & 15; }
static inline int unit_format(const Shape *s, const Layer *ly, int64_t u) {
    return format_of(ly, u < s->heads ? 0 : u < s->heads + s->kv_heads ? 1 : 2);
}
static inline int64_t unit_head(const Shape *s, int64_t u) {
    return u < s->heads ? u : u < s->heads + s->kv_heads ? u - s->heads : u - s->heads - s->kv_heads;
}

/* Rows up to which a product reads a weight's quantized panels where it also has plain ones. Why: widening
 * costs each panel about as much as five rows' dot products, which a step of one row hides behind reading a
 * third of the bytes, but many rows pay in full; on a 2-core Zen 4 (bf16, in-process A/B, scripts/blocks_ab.py)
 * the blocks took 0.67 of the plain panels' time at 1 row, 0.94 at 8, 1.07 at 12 and 1.09 at 16. Both give the
 * same bits, so the choice is free. */
#ifndef BLOCK_ROWS
#define BLOCK_ROWS 10
#endif
/* The AVX2 build (its own A/B, forced on the same Zen 4): fp32 0.38 of plain at 1 row, 0.60 at 4, 0.93 at 8;
 * bf16 (rounding each weight too) 0.86 at 1 row, 1.16-1.25 at 2-8. */
#ifndef BLOCK_ROWS_AMX /* AMX tiles widen a block once for all rows (up to AMX_ROWS) */
#define BLOCK_ROWS_AMX 32
#endif
#ifndef BLOCK_ROWS_AVX2_FP32
#define BLOCK_ROWS_AVX2_FP32 8
#endif
#ifndef BLOCK_ROWS_AVX2_BF16
#define BLOCK_ROWS_AVX2_BF16 1
#endif
static inline int64_t block_rows(int bf16) {
#ifdef SPECVIZ_AMX
    if (amx_takes(bf16, QBLOCK)) return BLOCK_ROWS_AMX;
#endif
#ifdef SPECVIZ_QUANTIZED_AVX2
    return bf16 ? BLOCK_ROWS_AVX2_BF16 : BLOCK_ROWS_AVX2_FP32;
#else
    (void)bf16;
    return BLOCK_ROWS;
#endif
}

/* The layer as a call of M rows reads it: past block_rows, plain panels wherever it has them. */
static Layer chosen_layer(const Layer *ly, int64_t M, int bf16) {
    Layer chosen = *ly;
    if (M <= block_rows(bf16)) return chosen;
    const void **weights[6] = {&chosen.q, &chosen.k, &chosen.v, &chosen.o, &chosen.gate_up, &chosen.down};
    for (int i = 0; i < 6; i++)
        if (ly->plain[i] && format_of(ly, i) && !is_int8(format_of(ly, i))) { /* int8 products' bits are their own */
            *weights[i] = ly->plain[i];
            chosen.formats &= ~(15 << 4 * i);
        }
    return chosen;
}

/* Layers in sequence on M rows of hidden states (in place, the model's dtype, [M, d]).
 * positions [M]; prefix: cache entries before these rows (the same for every layer given; a cross layer's memory
 * length); allowed: [M, prefix + M] bytes (1: row m may see cache entry j), or NULL for a causal chunk. */
int specviz_layers(const Shape *s, const Layer *layers, int n_layers, void *hidden, int64_t M,
                   const int64_t *positions, int64_t prefix, const uint8_t *allowed, const float *inv_freq,
                   float *work_base, int threads) {
    int bad = check_shape(s);
    if (bad) return bad;
    if (M < 1) return SPECVIZ_BAD_ROWS;
    if ((bad = check_threads(threads))) return bad;
    if (n_layers < 0 || (n_layers && !layers) || !hidden || !positions || !inv_freq || !work_base)
        return SPECVIZ_BAD_POINTER;
    if (prefix < 0) return SPECVIZ_BAD_CACHE;
    for (int64_t m = 0; m < M; m++)
        if (positions[m] < 0) return SPECVIZ_BAD_POSITION;
    for (int li = 0; li < n_layers; li++) {
        const Layer *ly = &layers[li];
        const int mlp = (ly->gate_up != NULL) + (ly->down != NULL) + (ly->norm2 != NULL);
        if (!ly->q || !ly->k != !ly->v || !ly->o || !ly->norm1 || !ly->keys || !ly->values || (mlp && mlp != 3))
            return SPECVIZ_BAD_POINTER;
        const int cross = ly->k == NULL;
        if (prefix < cross || prefix + (cross ? 0 : M) > s->capacity) return SPECVIZ_BAD_CACHE;
        const void *weights[6] = {ly->q, ly->k, ly->v, ly->o, ly->gate_up, ly->down};
        const int64_t ks[6] = {s->d, s->d, s->d, s->heads * s->head_dim, s->d, s->inter};
        if (ly->formats >> 24) return SPECVIZ_BAD_FORMAT;
        for (int i = 0; i < 6; i++)
            if (format_of(ly, i) && (!weights[i] || !quantized_shape_ok(ks[i], format_of(ly, i))))
                return SPECVIZ_BAD_FORMAT;
        if (is_int8(format_of(ly, 3)) && s->head_dim % QBLOCK) /* attention's output is quantized head by head */
            return SPECVIZ_BAD_FORMAT;
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
    const int64_t rows_per_task = M < GROUP_QUERIES ? M : GROUP_QUERIES, tasks_per_head = (M + rows_per_task - 1) / rows_per_task;
    Barrier barrier = {0, 0};
    int64_t (*tickets)[5] = calloc((size_t)n_layers + 1, sizeof *tickets); /* each stage's next piece */
    Layer *chosen = malloc(sizeof(Layer) * (size_t)(n_layers ? n_layers : 1));
    if (!tickets || !chosen) {
        free(tickets);
        free(chosen);
        return SPECVIZ_NO_MEMORY;
    }
    for (int li = 0; li < n_layers; li++) chosen[li] = chosen_layer(&layers[li], M, s->bf16);
    for (int64_t i = 0; i < M * d; i++) w.residual[i] = load_hidden(hidden, bf16, i);

#pragma omp parallel num_threads(threads)
    {
        int thread, team;
        team_position(&thread, &team);
        amx_begin();
        int sense = 0;
        CLOCK_START(thread);
        Input *mine = &w.mine[thread];
        void *unpacked = w.unpacked + thread * unpacked_floats(s);
        Scratch scratch;
        scratch.block = w.attention + thread * attention_floats(s);
        scratch.scores = scratch.block + KEY_BLOCK * hd;
        scratch.out = scratch.scores + GROUP_QUERIES * s->capacity;
        for (int li = 0; li < n_layers; li++) {
            const Layer *ly = &chosen[li];
            const int cross = ly->k == NULL;
            /* q ‖ k ‖ v in heads (a thread takes whole heads); a cross layer's q alone */
            const int64_t units = cross ? s->heads : s->heads + 2 * s->kv_heads;
            /* A: norm (each thread its own copy), q ‖ k ‖ v, RoPE, keys and values into the cache */
            rms_norm_rows(w.residual, M, d, ly->norm1, bf16, s->eps, mine,
                          is_int8(format_of(ly, 0)) || is_int8(format_of(ly, 1)) || is_int8(format_of(ly, 2)));
            int64_t ahead = -1;
            for (int64_t u = take(&tickets[li][0]); u < units; u = ahead >= 0 ? ahead : take(&tickets[li][0])) {
                ahead = take_ahead(&tickets[li][0], M, ly->formats & 0xfff);
                const void *weight = unit_weight(s, ly, u);
                int64_t first = unit_head(s, u);
                const char *next = ahead >= 0 && ahead < units
                    ? panel_at(unit_weight(s, ly, ahead), unit_format(s, ly, ahead), bf16, d, unit_head(s, ahead) * hd)
                    : NULL;
                product(weight, unit_format(s, ly, u), bf16, mine, M, d, first * hd, (first + 1) * hd,
                        w.qkv + (u - first) * hd, qkv_size, next, unpacked);
                for (int64_t m = 0; m < M; m++) {
                    float *head = w.qkv + m * qkv_size + u * hd;
                    if (!cross && u < s->heads + s->kv_heads) rotate(head, hd, w.rope + m * hd);
                    if (u >= s->heads) {
                        void *cache = u < s->heads + s->kv_heads ? ly->keys : ly->values;
                        int64_t at = (first * s->capacity + prefix + m) * hd;
                        for (int64_t i = 0; i < hd; i++) store_hidden(cache, bf16, at + i, head[i]);
                    }
                }
            }
            CLOCK_MEET(thread, 0, &barrier, team, &sense);
            /* B: attention, one task per query head and run of up to GROUP_QUERIES rows (they share the kv head's
             * widened keys). Why by head and not by row: the output goes into a k-major input, where one cache line
             * holds several rows of a column; tasks that split a head's rows between threads wrote the same lines
             * from both cores, and that false sharing cost a verification of 16 rows about 1 ms (stage clock). A
             * task owning a head's columns for all its rows owns their lines. */
            for (int64_t task = take(&tickets[li][1]); task < s->heads * tasks_per_head; task = take(&tickets[li][1])) {
                const int64_t h = task / tasks_per_head, first = task % tasks_per_head * rows_per_task;
                const int64_t last = first + rows_per_task < M ? first + rows_per_task : M;
                Queries g;
                g.count = (int)(last - first);
                for (int64_t m = first; m < last; m++) {
                    g.q[m - first] = w.qkv + m * qkv_size + h * hd;
                    g.end[m - first] = cross ? prefix : allowed ? L : prefix + m + 1;
                    g.seen[m - first] = allowed && !cross ? allowed + m * L : NULL;
                }
                attend(s, ly, &g, h / groups * s->capacity, &scratch);
                input_set_block(&w.attended, bf16, first, last - first, h * hd, hd, scratch.out, hd,
                                is_int8(format_of(ly, 3)));
            }
            CLOCK_MEET(thread, 1, &barrier, team, &sense);
            /* C: output projection, added to the residual (each thread its own columns); an attention-only
             * block ends here, rounded to the model's dtype as a layer's end is */
            const int attention_only = ly->gate_up == NULL;
            ahead = -1;
            for (int64_t p = take(&tickets[li][2]); p * P < d; p = ahead >= 0 ? ahead : take(&tickets[li][2])) {
                ahead = take_ahead(&tickets[li][2], M, format_of(ly, 3));
                int64_t n0 = p * P, n1 = n0 + P < d ? n0 + P : d;
                product(ly->o, format_of(ly, 3), bf16, &w.attended, M, q_size, n0, n1, w.qkv, d,
                        ahead >= 0 && ahead * P < d ? panel_at(ly->o, format_of(ly, 3), bf16, q_size, ahead * P) : NULL,
                        unpacked);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = n0; n < n1; n++) {
                        float value = w.residual[m * d + n] + w.qkv[m * d + n];
                        w.residual[m * d + n] = attention_only && bf16 ? round_bf16(value) : value;
                    }
            }
            CLOCK_MEET(thread, 2, &barrier, team, &sense);
            if (attention_only) continue; /* every thread skips D and E of this layer alike */
            /* D: norm (own copy), gate and up panel by panel together, into SiLU(gate) * up */
            rms_norm_rows(w.residual, M, d, ly->norm2, bf16, s->eps, mine, is_int8(format_of(ly, 4)));
            ahead = -1;
            const int pair_format = format_of(ly, 4);
            const int64_t panel_bytes = stored_panel_bytes(d, pair_format, bf16);
            /* a piece is one panel, or with int8 down products on panels narrower than a block (the AVX2 build's
             * 16 outputs) the panels of one block of the down projection's input, which is quantized whole */
            const int quantize_act = is_int8(format_of(ly, 5));
            const int64_t span = quantize_act && P < QBLOCK ? QBLOCK / P : 1, pieces = (s->inter + span * P - 1) / (span * P);
            for (int64_t piece = take(&tickets[li][3]); piece < pieces; piece = ahead >= 0 ? ahead : take(&tickets[li][3])) {
                ahead = take_ahead(&tickets[li][3], M, format_of(ly, 4));
                for (int64_t p = piece * span; p < (piece + 1) * span && p * P < s->inter; p++) {
                    int64_t n = p * P, e = n + P < s->inter ? n + P : s->inter;
                    float gate[64 * P], up[64 * P];
                    const char *pair = (const char *)ly->gate_up + 2 * p * panel_bytes;
                    const int64_t next_p = p + 1 < (piece + 1) * span ? p + 1 : ahead >= 0 ? ahead * span : -1;
                    const char *next_pair =
                        next_p >= 0 && next_p * P < s->inter ? (const char *)ly->gate_up + 2 * next_p * panel_bytes : NULL;
                    for (int64_t m0 = 0; m0 < M; m0 += 64) {
                        int64_t mc = M - m0 < 64 ? M - m0 : 64;
                        Input part = rows_from(mine, m0);
                        /* all P lanes: the buffer holds them */
                        product_stored_panel(pair, pair_format, bf16, &part, mc, d, gate, P, pair + panel_bytes, unpacked);
                        product_stored_panel(pair + panel_bytes, pair_format, bf16, &part, mc, d, up, P, next_pair,
                                             unpacked);
                        for (int64_t m = 0; m < mc; m++) silu_times(gate + m * P, up + m * P, e - n);
                        input_set_block(&w.act, bf16, m0, mc, n, e - n, gate, P, quantize_act && span == 1);
                    }
                }
                if (span > 1) {
                    const int64_t k0 = piece * span * P;
                    quantize_rows(&w.act, 0, M, k0, s->inter - k0 < span * P ? s->inter - k0 : span * P);
                }
            }
            CLOCK_MEET(thread, 3, &barrier, team, &sense);
            /* E: down projection, added to the residual, rounded to the model's dtype at the layer's end */
            ahead = -1;
            for (int64_t p = take(&tickets[li][4]); p * P < d; p = ahead >= 0 ? ahead : take(&tickets[li][4])) {
                ahead = take_ahead(&tickets[li][4], M, format_of(ly, 5));
                int64_t n0 = p * P, n1 = n0 + P < d ? n0 + P : d;
                product(ly->down, format_of(ly, 5), bf16, &w.act, M, s->inter, n0, n1, w.qkv, d,
                        ahead >= 0 && ahead * P < d ? panel_at(ly->down, format_of(ly, 5), bf16, s->inter, ahead * P)
                                                    : NULL,
                        unpacked);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = n0; n < n1; n++) {
                        float value = w.residual[m * d + n] + w.qkv[m * d + n];
                        w.residual[m * d + n] = bf16 ? round_bf16(value) : value;
                    }
            }
            CLOCK_MEET(thread, 4, &barrier, team, &sense);
        }
        amx_end();
    }
    free(tickets);
    free(chosen);
    for (int64_t i = 0; i < M * d; i++) store_hidden(hidden, bf16, i, w.residual[i]);
    return SPECVIZ_OK;
}

/* Final norm and LM head: logits [M, vocab] fp32 from hidden [M, d] in the model's dtype. */
int specviz_head(const Shape *s, const void *hidden, int64_t M, const void *norm, const void *head, int head_format,
                 const void *head_plain, int64_t vocab, float *logits, float *work_base, int threads) {
    int bad = check_shape(s);
    if (bad) return bad;
    if (M < 1) return SPECVIZ_BAD_ROWS;
    if ((bad = check_threads(threads))) return bad;
    if (!hidden || !norm || !head || !logits || !work_base || vocab < 1) return SPECVIZ_BAD_POINTER;
    if (head_format && !quantized_shape_ok(s->d, head_format)) return SPECVIZ_BAD_FORMAT;
    if (head_format && !is_int8(head_format) && head_plain && M > block_rows(s->bf16)) { /* as chosen_layer does */
        head = head_plain;
        head_format = PLAIN;
    }
    const int bf16 = s->bf16;
    Work w;
    layout(s, M, threads, work_base, &w);
    for (int64_t i = 0; i < M * s->d; i++) w.residual[i] = load_hidden(hidden, bf16, i);
    clear_input(&w.normed, M);
    rms_norm_rows(w.residual, M, s->d, norm, bf16, s->eps, &w.normed, is_int8(head_format));
    int64_t next = 0;
#ifdef SPECVIZ_STAGE_CLOCK
    double started = clock_now();
#endif
#pragma omp parallel num_threads(threads)
    {
        int thread, team;
        team_position(&thread, &team);
        amx_begin();
        void *unpacked = w.unpacked + thread * unpacked_floats(s);
        int64_t ahead = -1;
        for (int64_t p = take(&next); p * P < vocab; p = ahead >= 0 ? ahead : take(&next)) {
            ahead = take_ahead(&next, M, head_format);
            product(head, head_format, bf16, &w.normed, M, s->d, p * P, p * P + P < vocab ? p * P + P : vocab,
                    logits, vocab,
                    ahead >= 0 && ahead * P < vocab ? panel_at(head, head_format, bf16, s->d, ahead * P) : NULL,
                    unpacked);
        }
        amx_end();
    }
#ifdef SPECVIZ_STAGE_CLOCK
    stage_wall[5] += clock_now() - started;
#endif
    return SPECVIZ_OK;
}

/* A plain product for the drafters' own linear maps: y [M, N] fp32 = x [M, K] w [N, K]^T (+ bias [N]), x, w and
 * bias in the model's dtype (bf16 != 0: bf16), summed as every product here is: row-invariant. */
int specviz_linear(const void *x, int64_t M, int64_t K, const void *w, int w_format, int64_t N, const void *bias,
                   int bf16, float *y, int threads) {
    if (M < 1) return SPECVIZ_BAD_ROWS;
    if (K < 1 || N < 1) return SPECVIZ_BAD_SHAPE;
    int bad = check_threads(threads);
    if (bad) return bad;
    if (!x || !w || !y) return SPECVIZ_BAD_POINTER;
    if (w_format && !quantized_shape_ok(K, w_format)) return SPECVIZ_BAD_FORMAT;
    Input in;
    in.K = K;
    in.Kp = padded(K);
    in.ld = M;
    in.f = (float *)calloc((size_t)(M * in.Kp), sizeof(float));
    in.h = (uint16_t *)calloc((size_t)(M * in.Kp), sizeof(uint16_t));
    in.r = (uint16_t *)calloc((size_t)(M * in.Kp), sizeof(uint16_t));
    in.q8 = (uint32_t *)calloc((size_t)int8_elems(M, in.Kp), sizeof(uint32_t));
    const int64_t widened = panel_elems(K, 0) * 4; /* bytes of one thread's widened panel (fp32-sized, as above) */
    char *unpacked = w_format ? (char *)calloc((size_t)threads, (size_t)widened) : NULL;
    if (!in.f || !in.h || !in.r || !in.q8 || (w_format && !unpacked)) {
        free(in.f);
        free(in.h);
        free(in.r);
        free(in.q8);
        free(unpacked);
        return SPECVIZ_NO_MEMORY;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) input_set(&in, bf16, m, k, load_hidden(x, bf16, m * K + k));
    if (is_int8(w_format)) quantize_rows(&in, 0, M, 0, K);
#pragma omp parallel num_threads(threads)
    {
        int thread, team;
        team_position(&thread, &team);
        amx_begin();
        int64_t n0, n1;
        share(N, thread, team, &n0, &n1);
        product(w, w_format, bf16, &in, M, K, n0, n1, y, N, NULL, unpacked ? unpacked + thread * widened : NULL);
        if (bias)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = n0; n < n1; n++) y[m * N + n] += load_hidden(bias, bf16, n);
        amx_end();
    }
    free(in.f);
    free(in.h);
    free(in.r);
    free(in.q8);
    free(unpacked);
    return SPECVIZ_OK;
}
