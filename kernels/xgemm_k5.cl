// gemmtune kernel family "xgemm_k5": the tiled GEMM of the SGEMM tutorial's kernel 5.
//
// C (M x N, column-major, leading dimension ldc) <- alpha * A * B^T + beta * C, where
//   A is Mp x Kp column-major (lda = Mp) and B is Np x Kp column-major (ldb = Np): the second
//   operand arrives transposed (pad.cl does that), so both tiles are read along M or N, coalesced.
// Mp, Np, Kp are multiples of TSM, TSN, TSK; the padding is zeros, so only the store is guarded.
//
// A work-group of TSM x RTSN work-items computes one TSM x TSN tile of C. Each work-item owns
// one row of the tile and WPTN columns spaced RTSN apart. K is walked in steps of TSK, with the
// TSK x TSM slice of A and the TSN x TSK slice of B staged in local memory. B's slice is stored
// [n][k] so the inner loop reads consecutive k; PAD extra columns keep the work-items of a warp
// off the same bank when they store it.
#include "common.cl"

#ifndef TSM
#define TSM 64      // tile size along M: rows of C per work-group (= work-items in dimension 0)
#endif
#ifndef TSN
#define TSN 64      // tile size along N: columns of C per work-group
#endif
#ifndef TSK
#define TSK 32      // tile size along K: depth of the slices staged in local memory
#endif
#ifndef WPTN
#define WPTN 8      // work per thread along N: results per work-item
#endif
#ifndef PAD
#define PAD 2       // padding of the B slice in local memory, in elements
#endif

#include "pad.cl"   // the operand preparation kernels, and their TRANSPOSEX/TRANSPOSEY

#define RTSN (TSN / WPTN)              // work-items in dimension 1
#define WGS (TSM * RTSN)               // work-items per work-group
#define LPTA ((TSK * TSM) / WGS)       // loads per work-item for the A slice
#define LPTB ((TSK * TSN) / WGS)       // loads per work-item for the B slice

// Constraints, checked by gemmtune.space before any build:
//   1. TSN % WPTN == 0
//   2. TSM <= max work-item size[0], RTSN <= max work-item size[1], WGS <= max work-group size
//   3. (TSK * TSM) % WGS == 0 and (TSK * TSN) % WGS == 0: LPTA and LPTB are integers
//   4. (TSK * TSM + TSN * (TSK + PAD)) * sizeof(real) <= local memory size
#if TSN % WPTN != 0 || (TSK * TSM) % WGS != 0 || (TSK * TSN) % WGS != 0
#error "xgemm_k5: WPTN must divide TSN, and both slices must split evenly over the work-items"
#endif

#if PART < 2   // common.cl: the kernels a build holds
__kernel __attribute__((reqd_work_group_size(TSM, RTSN, 1)))
void xgemm(const int M, const int N, const int Kp, const real alpha, const real beta,
           const __global real* restrict A, const int lda,
           const __global real* restrict B, const int ldb,
           __global real* C, const int ldc) {
  __local real Asub[TSK][TSM];
  __local real Bsub[TSN][TSK + PAD];

  const int row = get_local_id(0);
  const int col = get_local_id(1);
  const int tid = col * TSM + row;          // consecutive tid -> consecutive M or N: coalesced loads
  const int m0 = get_group_id(0) * TSM;
  const int n0 = get_group_id(1) * TSN;

  real acc[WPTN];
  for (int w = 0; w < WPTN; w++) { acc[w] = ZERO; }

  for (int k0 = 0; k0 < Kp; k0 += TSK) {
    // Each slice is dealt over all WGS work-items by flat index, so TSM != TSN is fine.
    for (int l = 0; l < LPTA; l++) {
      const int f = tid + l * WGS;
      const int m = f % TSM;
      const int k = f / TSM;
      Asub[k][m] = A[(k0 + k) * lda + m0 + m];
    }
    for (int l = 0; l < LPTB; l++) {
      const int f = tid + l * WGS;
      const int n = f % TSN;
      const int k = f / TSN;
      Bsub[n][k] = B[(k0 + k) * ldb + n0 + n];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int k = 0; k < TSK; k++) {
      const real a = Asub[k][row];
      for (int w = 0; w < WPTN; w++) {
        MULADD(acc[w], a, Bsub[col + w * RTSN][k]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  const int m = m0 + row;
  if (m < M) {
    for (int w = 0; w < WPTN; w++) {
      const int n = n0 + col + w * RTSN;
      if (n < N) { STORE_AXPBY(C[n * ldc + m], acc[w], alpha, beta); }
    }
  }
}
#endif
