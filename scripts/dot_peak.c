/* The vector units' peak on this CPU, as a product's inner loop could reach it: twelve independent accumulators
 * (more than any unit's latency × throughput), each updated by the instruction the native step's products use,
 * operands in registers. Prints GFLOP/s for 1 and for `threads` threads. Built and run by scripts/dot_peak.py. */
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <time.h>

#define TWELVE(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define HAS_DPBF16 1
#endif
#if defined(__AVX512F__)
#define FMA_NAME "vfmadd231ps zmm (fp32, 16 lanes)"
#define FMA_FLOPS 32.0
#define FMA_REG "v"
typedef float lanes __attribute__((vector_size(64)));
#elif defined(__AVX2__) && defined(__FMA__)
#define FMA_NAME "vfmadd231ps ymm (fp32, 8 lanes)"
#define FMA_FLOPS 16.0
#define FMA_REG "x"
typedef float lanes __attribute__((vector_size(32)));
#endif

/* flops per second of `kind` (0: fused multiply-add, 1: bf16 pair dot product) over iters rounds on one thread */
static double one_thread(int kind, long iters) {
#ifdef FMA_NAME
    lanes x = {0}, y = {0};
#define DECLARE(c) lanes a##c = {0};
    TWELVE(DECLARE)
    __asm__ volatile("" : "+" FMA_REG(x), "+" FMA_REG(y));
    double start = now();
    if (kind == 0) {
        for (long i = 0; i < iters; i++) {
#define FMA(c) __asm__("vfmadd231ps %1, %2, %0" : "+" FMA_REG(a##c) : FMA_REG(x), FMA_REG(y));
            TWELVE(FMA)
        }
    }
#ifdef HAS_DPBF16
    else {
        for (long i = 0; i < iters; i++) {
#define DOT(c) __asm__("vdpbf16ps %1, %2, %0" : "+v"(a##c) : "v"(x), "v"(y));
            TWELVE(DOT)
        }
    }
#endif
    double seconds = now() - start;
#define KEEP(c) __asm__ volatile("" ::FMA_REG(a##c));
    TWELVE(KEEP)
    return iters * 12.0 * (kind == 0 ? FMA_FLOPS : 64.0) / seconds;
#else
    (void)kind;
    (void)iters;
    return 0.0;
#endif
}

static double all_threads(int kind, long iters, int threads) {
    double total = 0.0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : total)
#endif
    total += one_thread(kind, iters);
    (void)threads;
    return total;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 50000000;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
#ifndef FMA_NAME
    printf("no AVX2+FMA or AVX-512 here: nothing to measure\n");
    return 2;
#else
    const char *names[2] = {FMA_NAME, "vdpbf16ps zmm (bf16 pairs, 16 lanes)"};
#ifdef HAS_DPBF16
    const int kinds = 2;
#else
    const int kinds = 1;
#endif
    for (int kind = 0; kind < kinds; kind++) {
        double best1 = 0.0, best_all = 0.0;
        for (int round = 0; round < 3; round++) {
            double one = one_thread(kind, iters), many = all_threads(kind, iters, threads);
            best1 = one > best1 ? one : best1;
            best_all = many > best_all ? many : best_all;
        }
        printf("%s\t%.1f\t%.1f\n", names[kind], best1 / 1e9, best_all / 1e9);
    }
    return 0;
#endif
}
