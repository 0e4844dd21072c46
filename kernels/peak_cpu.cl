// gemmtune peak on a CPU: multiply-add throughput of the vector units.
//
// Why not peak.cl's madd as it is: that kernel gives each work-item scalar chains and relies on
// PoCL's work-group vectoriser to pack 256 work-items into vectors. The packed loop keeps its
// chains in memory between iterations of the work-item loop, and its vector width is whatever
// the vectoriser picked, so it measured a fraction of the vector units (12.7 GFLOP/s of FP32
// on a 2-core EPYC, below numpy's SGEMM). Here each work-item holds CHAINS explicit vectors of
// VECW elements in registers: enough independent chains to cover the multiply-add latency of
// every pipe (latency 4 x 2 pipes on AMD Zen 4/5 and Intel since Skylake: 8; 12 leaves slack),
// few enough to stay in the 16 (AVX2) or 32 (AVX-512) vector registers.
//
// c <- c * a + b, as peak.cl writes it (an expression -cl-mad-enable and the default FP
// contraction fuse into one FMA where the target has it). Complex precisions are measured as
// their real type: a complex multiply-add is four real ones, no faster per flop, and GEMM counts
// it as 8 flops.
#include "common.cl"

#ifndef VECW
#define VECW 16     // elements per vector: 16 floats or 8 doubles fill an AVX-512 register
#endif
#ifndef CHAINS
#define CHAINS 12   // independent vector chains per work-item
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if PRECISION == 32 || PRECISION == 3232
  #define BASE float
#else
  #define BASE double
#endif
typedef CAT(BASE, VECW) vec;

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void madd_vec(const int iterations, const BASE a, const BASE b, __global BASE* out) {
  const int gid = get_global_id(0);
  vec acc[CHAINS];
  // every lane of every chain starts apart, so none can be merged with another
  vec lanes;
  for (int l = 0; l < VECW; l++) { ((BASE*)&lanes)[l] = (BASE)l / VECW; }
  _Pragma("unroll") for (int c = 0; c < CHAINS; c++) { acc[c] = lanes + (BASE)(gid * CHAINS + c); }
  const vec va = (vec)(a), vb = (vec)(b);
  for (int i = 0; i < iterations; i++) {
    _Pragma("unroll") for (int c = 0; c < CHAINS; c++) { acc[c] = acc[c] * va + vb; }
  }
  vec sum = (vec)(0);
  _Pragma("unroll") for (int c = 0; c < CHAINS; c++) { sum += acc[c]; }
  // one value per work-item is stored, so no chain can be dropped
  BASE total = 0;
  for (int l = 0; l < VECW; l++) { total += ((BASE*)&sum)[l]; }
  out[gid] = total;
}
