/* How fast can a core widen the GGUF's Q4_1 blocks to bf16 pairs and take one row's dot products, with the data
 * in L2 (so no memory limit)? And would another layout do it with fewer instructions? docs/verify-cost.md uses the
 * figures; the step's own tile is engines/model/native/step.c's tile_quantized.
 *
 *     gcc -O3 -march=native -ffp-contract=fast scripts/widening_bench.c -o /tmp/widening_bench && /tmp/widening_bench
 *
 * Needs AVX-512 BF16 (Zen 4 and later, Sapphire Rapids and later). One thread; ns per 32 weights, best of 5 × 200
 * passes over 1,024 outputs × 576 inputs (about 370 KB of blocks). Variants:
 *   pairs, 1 group      the pair layout: each 16-output group's blocks widened by shift, mask and fma, two
 *                       fp32 vectors to one of bf16 pairs, then one vdpbf16ps a row (one accumulator chain a row)
 *   pairs, 2 or 4 groups the same widening for 2 or 4 groups side by side (2 or 4 chains a row): the same
 *                       bits; the step takes 2 for up to 6 rows (QRM_TWO)
 *   row-dot lookup      one output's 32 weights a vector: its block's 16 possible values made once (fma, one
 *                       conversion), the 32 picked by vpermw, dot products against 32 inputs, one horizontal sum
 *                       an output at the end (another summation order, so another set of bits); 1 or 4 outputs
 *                       side by side. The data's d and m are plausible fp16 values; the q are random.
 * Then the pair layout at 1-8 rows (one or two groups side by side): what each more row costs. */
#if !defined(__AVX512BF16__)
#error "needs AVX-512 BF16: build with -march=native on a CPU that has it"
#endif
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
#define K 576
#define NOUT 1024           /* outputs: 16 panels of 64, about 340 KB of blocks: L2-resident */
#define NB (K/32)
typedef struct { __m512 mul[2], add[2]; } GS;
static inline GS gscales(const uint8_t *block){
  const __m512i first8=_mm512_set_epi32(7,7,6,6,5,5,4,4,3,3,2,2,1,1,0,0);
  const __m512i halves[2]={first8,_mm512_add_epi32(first8,_mm512_set1_epi32(8))};
  const __m512 d=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)block));
  const __m512 m=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(block+32)));
  const __m512 mul=_mm512_mul_ps(d,_mm512_set1_ps(16.f));
  const __m512 add=_mm512_fnmadd_ps(d,_mm512_set1_ps(16.f),m);
  GS s; for(int h=0;h<2;h++){s.mul[h]=_mm512_permutexvar_ps(halves[h],mul);s.add[h]=_mm512_permutexvar_ps(halves[h],add);} return s;}
static inline __m512 widen(__m512i chunk,int v,const GS*s){
  const int shift=23-4-4*v;
  const __m512i placed= shift>=0?_mm512_slli_epi32(chunk,shift):_mm512_srli_epi32(chunk,-shift);
  const __m512 f=_mm512_castsi512_ps(_mm512_ternarylogic_epi32(placed,_mm512_set1_epi32(15<<19),_mm512_set1_epi32(0x3f800000),0xea));
  return _mm512_fmadd_ps(f,s->mul[v%2],s->add[v%2]);}
static inline __m512bh wpair(__m512i chunk,int p,const GS*s){return _mm512_cvtne2ps_pbh(widen(chunk,2*p+1,s),widen(chunk,2*p,s));}
/* current: panel = NOUT/16 groups; each group NB blocks of 320 bytes */
__attribute__((noinline)) void cur(const uint8_t *q, const uint16_t *x, float *out){
  const uint32_t *pairs=(const uint32_t*)x;
  for(int g=0; g<NOUT/16; g++){
    __m512 acc=_mm512_setzero_ps();
    for(int b=0;b<NB;b++){
      const uint8_t *block=q+((int64_t)g*NB+b)*320; GS s=gscales(block);
      const uint32_t *xb=pairs+b*16;
      for(int c=0;c<4;c++){ const __m512i chunk=_mm512_loadu_si512(block+64+64*c);
#pragma GCC unroll 4
        for(int p=0;p<4;p++) acc=_mm512_dpbf16_ps(acc,wpair(chunk,p,&s),(__m512bh)_mm512_set1_epi32((int)xb[4*c+p])); }
    }
    _mm512_storeu_ps(out+16*g,acc);
  }
}
/* the same, two groups at once (two accumulator chains) */
__attribute__((noinline)) void cur2(const uint8_t *q, const uint16_t *x, float *out){
  const uint32_t *pairs=(const uint32_t*)x;
  for(int g=0; g<NOUT/16; g+=2){
    __m512 acc0=_mm512_setzero_ps(), acc1=_mm512_setzero_ps();
    for(int b=0;b<NB;b++){
      const uint8_t *b0=q+((int64_t)g*NB+b)*320, *b1=q+((int64_t)(g+1)*NB+b)*320; GS s0=gscales(b0), s1=gscales(b1);
      const uint32_t *xb=pairs+b*16;
      for(int c=0;c<4;c++){ const __m512i c0=_mm512_loadu_si512(b0+64+64*c), c1=_mm512_loadu_si512(b1+64+64*c);
#pragma GCC unroll 4
        for(int p=0;p<4;p++){ __m512bh xv=(__m512bh)_mm512_set1_epi32((int)xb[4*c+p]);
          acc0=_mm512_dpbf16_ps(acc0,wpair(c0,p,&s0),xv); acc1=_mm512_dpbf16_ps(acc1,wpair(c1,p,&s1),xv);} }
    }
    _mm512_storeu_ps(out+16*g,acc0); _mm512_storeu_ps(out+16*g+16,acc1);
  }
}
/* row-dot lookup: each output's blocks in GGUF form (d, m fp16; 16 bytes of nibbles: lo = k 0-15, hi = 16-31) */
__attribute__((noinline)) void tab(const uint8_t *q, const uint16_t *x, float *out){
  const __m512 iota=_mm512_set_ps(15,14,13,12,11,10,9,8,7,6,5,4,3,2,1,0);
  for(int o=0;o<NOUT;o++){
    __m512 acc=_mm512_setzero_ps();
    const uint8_t *row=q+(int64_t)o*NB*20;
    for(int b=0;b<NB;b++){
      const uint8_t *blk=row+b*20;
      uint16_t dh, mh; memcpy(&dh,blk,2); memcpy(&mh,blk+2,2);
      const __m512 d=_mm512_cvtph_ps(_mm256_set1_epi16((short)dh)), m=_mm512_cvtph_ps(_mm256_set1_epi16((short)mh));
      const __m256i table=(__m256i)_mm512_cvtneps_pbh(_mm512_fmadd_ps(iota,d,m)); /* 16 bf16 */
      const __m256i bytes=_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(blk+4)));
      const __m256i lo=_mm256_permutexvar_epi16(bytes,table);              /* uses idx bits 3:0 */
      const __m256i hi=_mm256_permutexvar_epi16(_mm256_srli_epi16(bytes,4),table);
      const __m512i w=_mm512_inserti64x4(_mm512_castsi256_si512(lo),hi,1);
      acc=_mm512_dpbf16_ps(acc,(__m512bh)w,(__m512bh)_mm512_loadu_si512(x+32*b));
    }
    out[o]=_mm512_reduce_add_ps(acc);
  }
}
/* row-dot lookup, 4 outputs interleaved (independent chains) */
__attribute__((noinline)) void tab4(const uint8_t *q, const uint16_t *x, float *out){
  const __m512 iota=_mm512_set_ps(15,14,13,12,11,10,9,8,7,6,5,4,3,2,1,0);
  for(int o=0;o<NOUT;o+=4){
    __m512 acc[4]={_mm512_setzero_ps(),_mm512_setzero_ps(),_mm512_setzero_ps(),_mm512_setzero_ps()};
    for(int b=0;b<NB;b++){
      const __m512i xv=_mm512_loadu_si512(x+32*b);
#pragma GCC unroll 4
      for(int j=0;j<4;j++){
      const uint8_t *blk=q+(int64_t)(o+j)*NB*20+b*20;
      uint16_t dh, mh; memcpy(&dh,blk,2); memcpy(&mh,blk+2,2);
      const __m512 d=_mm512_cvtph_ps(_mm256_set1_epi16((short)dh)), m=_mm512_cvtph_ps(_mm256_set1_epi16((short)mh));
      const __m256i table=(__m256i)_mm512_cvtneps_pbh(_mm512_fmadd_ps(iota,d,m));
      const __m256i bytes=_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(blk+4)));
      const __m256i lo=_mm256_permutexvar_epi16(bytes,table);
      const __m256i hi=_mm256_permutexvar_epi16(_mm256_srli_epi16(bytes,4),table);
      const __m512i w=_mm512_inserti64x4(_mm512_castsi256_si512(lo),hi,1);
      acc[j]=_mm512_dpbf16_ps(acc[j],(__m512bh)w,(__m512bh)xv);}
    }
    for(int j=0;j<4;j++) out[o+j]=_mm512_reduce_add_ps(acc[j]);
  }
}

__attribute__((noinline)) void cur4(const uint8_t *q, const uint16_t *x, float *out){
  const uint32_t *pairs=(const uint32_t*)x;
  for(int g=0; g<NOUT/16; g+=4){
    __m512 acc[4]; for(int i=0;i<4;i++) acc[i]=_mm512_setzero_ps();
    for(int b=0;b<NB;b++){
      const uint8_t *bl[4]; GS s[4];
#pragma GCC unroll 4
      for(int i=0;i<4;i++){ bl[i]=q+((int64_t)(g+i)*NB+b)*320; s[i]=gscales(bl[i]); }
      const uint32_t *xb=pairs+b*16;
      for(int c=0;c<4;c++){
#pragma GCC unroll 4
        for(int p=0;p<4;p++){ __m512bh xv=(__m512bh)_mm512_set1_epi32((int)xb[4*c+p]);
#pragma GCC unroll 4
          for(int i=0;i<4;i++) acc[i]=_mm512_dpbf16_ps(acc[i],wpair(_mm512_loadu_si512(bl[i]+64+64*c),p,&s[i]),xv);} }
    }
    for(int i=0;i<4;i++) _mm512_storeu_ps(out+16*(g+i),acc[i]);
  }
}
/* The pair layout at R rows, T groups side by side (the step's tile_quantized): what each more row costs. */
static inline __attribute__((always_inline)) void tile_rows(const uint8_t *q, const uint32_t *pairs, int ld, float *out, const int R, const int T){
  for(int g=0; g<NOUT/16; g+=T){
    __m512 acc[2][8];
    for(int t=0;t<T;t++) for(int r=0;r<R;r++) acc[t][r]=_mm512_setzero_ps();
    for(int b=0;b<NB;b++){
      const uint8_t *bl[2]; GS s[2];
      for(int t=0;t<T;t++){ bl[t]=q+((int64_t)(g+t)*NB+b)*320; s[t]=gscales(bl[t]); }
      const uint32_t *xb=pairs+b*16*ld;
      for(int c=0;c<4;c++){ __m512i ch[2]; for(int t=0;t<T;t++) ch[t]=_mm512_loadu_si512(bl[t]+64+64*c);
#pragma GCC unroll 4
        for(int p=0;p<4;p++){ const uint32_t *xi=xb+(4*c+p)*ld;
#pragma GCC unroll 2
          for(int t=0;t<T;t++){ __m512bh w=wpair(ch[t],p,&s[t]);
#pragma GCC unroll 8
            for(int r=0;r<R;r++) acc[t][r]=_mm512_dpbf16_ps(acc[t][r],w,(__m512bh)_mm512_set1_epi32((int)xi[r]));}}}
    }
    for(int t=0;t<T;t++) for(int r=0;r<R;r++) _mm512_storeu_ps(out+r*NOUT+16*(g+t),acc[t][r]);
  }
}
#define V(R,T) __attribute__((noinline)) void t##R##_##T(const uint8_t*q,const uint32_t*x,float*o){tile_rows(q,x,8,o,R,T);}
V(1,1) V(2,1) V(4,1) V(6,1) V(8,1) V(1,2) V(2,2) V(4,2) V(6,2)
int main(void){
  size_t qbytes=(size_t)NOUT*NB*20*2; uint8_t *q=aligned_alloc(64,qbytes); uint16_t *x=aligned_alloc(64,K*2); float *out=aligned_alloc(64,NOUT*4);
  srand(1); for(size_t i=0;i<qbytes;i++) q[i]=rand();
  for(int g=0; g<NOUT*NB; g++){ /* plausible fp16 d, m in both layouts */
    uint16_t d=0x1400+(rand()&0xff), m=0x9800+(rand()&0xff);
    memcpy(q+(size_t)g*20,&d,2); memcpy(q+(size_t)g*20+2,&m,2); }
  for(int g=0; g<NOUT*NB/16; g++) for(int i=0;i<16;i++){ uint16_t d=0x1400+(rand()&0xff), m=0x9800+(rand()&0xff);
    memcpy(q+(size_t)g*320+2*i,&d,2); memcpy(q+(size_t)g*320+32+2*i,&m,2);}
  for(int i=0;i<K;i++) x[i]=0x3f80+(rand()&0x7f);
  void (*fs[5])(const uint8_t*,const uint16_t*,float*)={cur,cur2,tab,tab4,cur4}; const char *names[5]={"pairs, 1 group","pairs, 2 groups","row-dot lookup","row-dot lookup, 4 outputs","pairs, 4 groups"};
  for(int f=0;f<5;f++){ double best=1e9; for(int r=0;r<5;r++){ double t=now(); for(int it=0;it<200;it++) fs[f](q,x,out); t=(now()-t)/200; if(t<best)best=t; }
    double units=(double)NOUT*K/32; printf("%-28s %.3f ns per 32 weights (%.2f G weights/s, one thread)\n",names[f],best/units*1e9, NOUT*(double)K/best/1e9); }
  uint32_t *xr=aligned_alloc(64,K/2*8*4);
  for(int i=0;i<K/2*8;i++) xr[i]=0x3f803f80;
  void (*rs[])(const uint8_t*,const uint32_t*,float*)={t1_1,t2_1,t4_1,t6_1,t8_1,t1_2,t2_2,t4_2,t6_2};
  const char *rn[]={"1 row, 1 group","2 rows, 1 group","4 rows, 1 group","6 rows, 1 group","8 rows, 1 group",
                    "1 row, 2 groups","2 rows, 2 groups","4 rows, 2 groups","6 rows, 2 groups"};
  float *rout=aligned_alloc(64,NOUT*4*8);
  for(int f=0;f<9;f++){ double best=1e9; for(int r=0;r<5;r++){ double t=now(); for(int it=0;it<200;it++) rs[f](q,xr,rout); t=(now()-t)/200; if(t<best)best=t;}
    printf("%-28s %.3f ns per 32 weights\n", rn[f], best/((double)NOUT*K/32)*1e9);}
  return 0;
}
