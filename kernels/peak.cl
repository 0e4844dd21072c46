// gemmtune peak: microbenchmarks of a device's two ceilings (gemmtune/peak.py).
//
// madd: each work-item runs CHAINS independent multiply-add chains c <- c * a + b, so the
// arithmetic units never wait for a result. The chain's value is a factor of each product, so
// no compiler can hoist the product out of the loop; and like the GEMM kernels' MULADD it is
// written as an expression that -cl-mad-enable may fuse (fma() itself ran 40 times slower on
// PoCL on an AMD EPYC, apparently as a library call). A complex multiply-add is four real ones,
// as in the GEMM kernels, and is counted as 8 flops. Every chain starts from a different value
// (so none can be merged with another) and the sum of all is stored (so none can be dropped).
// copy: out <- in, 16 bytes per work-item; bandwidth counts the bytes read and written.
#include "common.cl"

#ifndef CHAINS
#define CHAINS 16   // independent multiply-add chains per work-item
#endif

#if IS_COMPLEX
  // Two multiply-adds per part, in the order they fuse; "c0.x * a.x - c0.y * a.y + b.x" left
  // the NVIDIA compiler a separate multiply and add, and measured two thirds of the real rate.
  #define MADD(c, a, b) do { const real c0 = (c); \
                             (c).x = c0.x * (a).x + (b).x; (c).x -= c0.y * (a).y; \
                             (c).y = c0.x * (a).y + (b).y; (c).y += c0.y * (a).x; } while (0)
  #define START(v) ((real)((v), -(v)))
#else
  #define MADD(c, a, b) ((c) = (c) * (a) + (b))
  #define START(v) ((real)(v))
#endif

__kernel void madd(const int iterations, const real a, const real b, __global real* out) {
  const int gid = get_global_id(0);
  real acc[CHAINS];
  #pragma unroll
  for (int c = 0; c < CHAINS; c++) { acc[c] = START(gid + c); }
  for (int i = 0; i < iterations; i++) {
    #pragma unroll
    for (int c = 0; c < CHAINS; c++) { MADD(acc[c], a, b); }
  }
  real sum = ZERO;
  for (int c = 0; c < CHAINS; c++) { sum += acc[c]; }
  out[gid] = sum;
}

__kernel void copy(const ulong items, const __global float4* restrict in, __global float4* restrict out) {
  const size_t i = get_global_id(0);
  if (i < items) { out[i] = in[i]; }
}
