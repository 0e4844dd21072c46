// gemmtune kernel family "xgemm_thin": GEMM where C is thin (a vector, or a few rows or columns),
// computed as matrix-vector products that stream the wide operand from memory once per RB rows.
//
// The host (gemmtune.families.thin) maps C (M x N) <- alpha * op(A) * op(B) + beta * C onto
//   Y[r][l] <- alpha * sum_k V[r][k] * X[l][k] + beta * Y[r][l],   r < R (thin), l < L (wide),
// with R the smaller of M and N: X is the wide operand, V the thin one, Y is C. Each is read in
// place at an element offset through strides, so any op(), leading dimension and view works and
// nothing is copied first. X is either k-fastest in memory (DOT = 1: a work-group reduces each
// result across its work-items, each reading consecutive elements along K) or l-fastest (DOT = 0:
// each work-item owns results along L and walks K, consecutive work-items reading consecutive
// elements). Both read X coalesced; V is small and read through the cache.
//
// The host may cut K into parts (dimension 2 of the grid) when the results alone give too few
// work-groups: each part's sums go to `work`, and xgemm_thin_sum adds them up in order.
#include "common.cl"

#ifndef WGS
#define WGS 128     // work-items per work-group
#endif
#ifndef WPT
#define WPT 2       // results along L per work-item (DOT = 0) or per work-group (DOT = 1)
#endif
#ifndef KU
#define KU 1        // steps along K each work-item takes at once (loads in flight)
#endif
#ifndef RB
#define RB 1        // rows of the thin side computed together: X is read once for RB of them
#endif
#ifndef KSPLIT
#define KSPLIT 1    // most parts K may be cut into, each summed by work-groups of its own
#endif
#if !defined(DOT)   // set by the host for each problem: X k-fastest (1) or l-fastest (0)
#define DOT 0
#endif
#if !defined(CONJX) // set by the host: X (and V, CONJV) enters conjugated (op C)
#define CONJX 0
#endif
#if !defined(CONJV)
#define CONJV 0
#endif

// gemmtune.families.thin states the constraints; these are the ones the code below relies on.
#if WGS & (WGS - 1)
#error "xgemm_thin: WGS must be a power of two (the results are reduced by halving)"
#endif
#if RB * WPT > 32
#error "xgemm_thin: at most 32 sums per work-item (RB * WPT)"
#endif

#if CONJX
  #define XV(v) CONJ(v)
#else
  #define XV(v) (v)
#endif
#if CONJV
  #define VV(v) CONJ(v)
#else
  #define VV(v) (v)
#endif

// One part's sums go to C, or to `work` (parts x R x L, packed) for xgemm_thin_sum.
inline void put(const real sum, const int r, const int l, const int R, const int L, const real alpha,
                const real beta, __global real* Y, const int yr, const int yl, __global real* work) {
  if (get_num_groups(2) == 1) { STORE_AXPBY(Y[r * yr + l * yl], sum, alpha, beta); }
  else { work[(get_group_id(2) * R + r) * L + l] = sum; }
}

#if PART < 2   // common.cl: the kernels a build holds
__kernel __attribute__((reqd_work_group_size(WGS, 1, 1)))
void xgemm_thin(const int L, const int R, const int K, const real alpha, const real beta,
                const __global real* restrict X, const int offset_x, const int ldx,
                const __global real* restrict V, const int offset_v, const int vr, const int vk,
                __global real* Y, const int offset_y, const int yr, const int yl,
                const int k_part, __global real* restrict work) {
  const int t = get_local_id(0);
  const int r0 = get_group_id(1) * RB;
  const int k_begin = get_group_id(2) * k_part;
  const int k_end = min(K, k_begin + k_part);
  X += offset_x;
  V += offset_v;
  Y += offset_y;
  real acc[RB][WPT];
  #pragma unroll
  for (int r = 0; r < RB; r++) {
    #pragma unroll
    for (int w = 0; w < WPT; w++) { acc[r][w] = ZERO; }
  }

#if DOT
  // Work-group: WPT results along L (rows of X, each contiguous along K) for RB rows of V. The
  // work-items take consecutive k's, KU rounds of them at once; then the work-group adds up.
  const int l0 = get_group_id(0) * WPT;
  for (int k0 = k_begin + t; k0 < k_end; k0 += WGS * KU) {
    #pragma unroll
    for (int u = 0; u < KU; u++) {
      const int k = k0 + u * WGS;
      if (KU == 1 || k < k_end) {
        real v[RB];
        #pragma unroll
        for (int r = 0; r < RB; r++) { v[r] = r0 + r < R ? VV(V[(r0 + r) * vr + k * vk]) : ZERO; }
        #pragma unroll
        for (int w = 0; w < WPT; w++) {
          const real x = l0 + w < L ? XV(X[(l0 + w) * ldx + k]) : ZERO;
          #pragma unroll
          for (int r = 0; r < RB; r++) { MULADD(acc[r][w], v[r], x); }
        }
      }
    }
  }
  __local real sums[RB * WPT][WGS];
  #pragma unroll
  for (int q = 0; q < RB * WPT; q++) { sums[q][t] = acc[q / WPT][q % WPT]; }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = WGS / 2; step > 0; step /= 2) {
    if (t < step) {
      #pragma unroll
      for (int q = 0; q < RB * WPT; q++) { sums[q][t] += sums[q][t + step]; }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int q = t; q < RB * WPT; q += WGS) {
    const int r = r0 + q / WPT, l = l0 + q % WPT;
    if (r < R && l < L) { put(sums[q][0], r, l, R, L, alpha, beta, Y, yr, yl, work); }
  }
#else
  // Work-item: WPT results along L, WGS apart (consecutive work-items, consecutive addresses),
  // for RB rows of V, walking K in steps of KU; a work-group inside L reads X unchecked.
  const int l0 = get_group_id(0) * WGS * WPT + t;
  const int inside = get_group_id(0) * WGS * WPT + WGS * WPT <= L;
  int k = k_begin;
  for (; k + KU <= k_end; k += KU) {
    #pragma unroll
    for (int u = 0; u < KU; u++) {
      real v[RB];
      #pragma unroll
      for (int r = 0; r < RB; r++) { v[r] = r0 + r < R ? VV(V[(r0 + r) * vr + (k + u) * vk]) : ZERO; }
      #pragma unroll
      for (int w = 0; w < WPT; w++) {
        const int l = l0 + w * WGS;
        const real x = inside || l < L ? XV(X[(k + u) * ldx + l]) : ZERO;
        #pragma unroll
        for (int r = 0; r < RB; r++) { MULADD(acc[r][w], v[r], x); }
      }
    }
  }
  for (; k < k_end; k++) {
    #pragma unroll
    for (int w = 0; w < WPT; w++) {
      const int l = l0 + w * WGS;
      const real x = l < L ? XV(X[k * ldx + l]) : ZERO;
      #pragma unroll
      for (int r = 0; r < RB; r++) {
        const real v = r0 + r < R ? VV(V[(r0 + r) * vr + k * vk]) : ZERO;
        MULADD(acc[r][w], v, x);
      }
    }
  }
  #pragma unroll
  for (int w = 0; w < WPT; w++) {
    const int l = l0 + w * WGS;
    #pragma unroll
    for (int r = 0; r < RB; r++) {
      if (r0 + r < R && l < L) { put(acc[r][w], r0 + r, l, R, L, alpha, beta, Y, yr, yl, work); }
    }
  }
#endif
}
#endif

#if PART == 0 || PART == 3
// Y <- alpha * (the parts' sums, added in order) + beta * Y; a work-item per result.
__kernel void xgemm_thin_sum(const int L, const int R, const int parts, const real alpha, const real beta,
                             __global real* Y, const int offset_y, const int yr, const int yl,
                             const __global real* restrict work) {
  const int i = get_global_id(0);
  if (i >= L * R) { return; }
  const int r = i / L, l = i % L;
  real sum = ZERO;
  for (int z = 0; z < parts; z++) { sum += work[(z * R + r) * L + l]; }
  Y += offset_y;
  STORE_AXPBY(Y[r * yr + l * yl], sum, alpha, beta);
}
#endif
