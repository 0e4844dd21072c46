// gemmtune kernel family "xgemm_direct": GEMM on the caller's operands as they are, in one launch.
//
// C (M x N, column-major, leading dimension ldc) <- alpha * op(A) * op(B) + beta * C, where A and
// B are column-major with any leading dimension and start at element offsets, op() is chosen by
// TRANSA and TRANSB (0 none, 1 transpose, 2 conjugate transpose), and M, N, K are anything >= 1.
// No operand is copied first: small, skinny and odd problems pay for one launch, not for
// preparation passes (CLBlast's XgemmDirect plays the same part).
//
// A work-group of MDIMC x NDIMC work-items computes an MWG x NWG tile of C, each work-item
// WPTM x WPTN results in registers, strided MDIMC and NDIMC apart so that consecutive work-items
// touch consecutive addresses of local memory and of C. K is walked in slices of KWG staged in
// local memory k-major ([k][m] and [k][n]); each slice is loaded along whichever index is the
// operand's fast one in global memory, so the loads are coalesced whatever op() is, and elements
// outside the matrix are staged as zeros. PADL pads the local rows against bank conflicts where a
// transposed operand is stored across them.
//
// With KSPLIT > 1 the host may cut K into parts (dimension 2 of the grid, a part per work-group
// there) to give skinny problems enough work-groups: each part's sums go to `work`, and
// xgemm_direct_sum adds the parts up in order into C. The host decides how many parts a problem
// gets (never more than KSPLIT, never more than its K-slices); with one part C is written here.
//
// Batched (common.cl's BATCH): dimension 2 of the grid is the problem instead, K is not cut, and
// each problem's operands are found from BATCH_AT.
#include "common.cl"

#ifndef MWG
#define MWG 32      // tile size along M: rows of C per work-group
#endif
#ifndef NWG
#define NWG 32      // tile size along N: columns of C per work-group
#endif
#ifndef KWG
#define KWG 16      // tile size along K: depth of the slices staged in local memory
#endif
#ifndef MDIMC
#define MDIMC 8     // work-items along M (dimension 0)
#endif
#ifndef NDIMC
#define NDIMC 8     // work-items along N (dimension 1)
#endif
#ifndef PADL
#define PADL 1      // padding of each local-memory row, in elements
#endif
#ifndef KSPLIT
#define KSPLIT 1    // most parts K may be cut into, each summed by a work-group of its own
#endif
#if !defined(TRANSA)  // op(A): set by the host for each problem, not tuned (0 N, 1 T, 2 C)
#define TRANSA 0
#endif
#if !defined(TRANSB)  // op(B), likewise
#define TRANSB 0
#endif

#define WGS (MDIMC * NDIMC)   // work-items per work-group
#define WPTM (MWG / MDIMC)    // results per work-item along M
#define WPTN (NWG / NDIMC)    // results per work-item along N
#define LDAL (MWG + PADL)     // local row length of the A slice
#define LDBL (NWG + PADL)     // local row length of the B slice

// gemmtune.families.direct states the constraints; these are the ones the code below relies on.
#if MWG % MDIMC != 0 || NWG % NDIMC != 0
#error "xgemm_direct: MDIMC must divide MWG, and NDIMC divide NWG"
#endif
#if (MWG * KWG) % WGS != 0 || (NWG * KWG) % WGS != 0
#error "xgemm_direct: both slices must split evenly over the work-items"
#endif

// Stages the KWG x rows slice of op(X) that starts at (r0, k0) into dst[k][r], zeros outside
// r < r_end, k < k_end. X is stored r-fastest (r_fast: A untransposed, B transposed) or k-fastest;
// consecutive work-items take consecutive elements along the fast index.
inline void stage(__local real* dst, const int rows, const int ldl, const __global real* restrict x,
                  const int ld, const int r0, const int r_end, const int k0, const int k_end,
                  const int tid, const int r_fast, const int conj) {
  const int inside = r0 + rows <= r_end && k0 + KWG <= k_end;
  #pragma unroll
  for (int e = tid; e < rows * KWG; e += WGS) {
    const int r = r_fast ? e % rows : e / KWG;
    const int k = r_fast ? e / rows : e % KWG;
    real v = ZERO;
    if (inside || (r0 + r < r_end && k0 + k < k_end)) {
      v = r_fast ? x[(k0 + k) * ld + r0 + r] : x[(r0 + r) * ld + k0 + k];
      if (conj) { v = CONJ(v); }
    }
    dst[k * ldl + r] = v;
  }
}

#if PART < 2   // common.cl: the kernels a build holds
__kernel __attribute__((reqd_work_group_size(MDIMC, NDIMC, 1)))
void xgemm_direct(const int M, const int N, const int K, const real alpha, const real beta,
                  const __global real* restrict A, const int offset_a, const int lda,
                  const __global real* restrict B, const int offset_b, const int ldb,
                  __global real* C, const int offset_c, const int ldc,
                  const int k_part, __global real* restrict work BATCH_ARGS) {
  __local real as[KWG * LDAL];
  __local real bs[KWG * LDBL];
  const int tm = get_local_id(0);
  const int tn = get_local_id(1);
  const int tid = tn * MDIMC + tm;
  const int m0 = get_group_id(0) * MWG;
  const int n0 = get_group_id(1) * NWG;
#if BATCH
  const int part = 0, parts = 1;
  const int z = get_group_id(2);
  A += offset_a + BATCH_AT(z, 0, stride_a);
  B += offset_b + BATCH_AT(z, 1, stride_b);
  C += BATCH_AT(z, 2, stride_c);
#else
  const int part = get_group_id(2), parts = get_num_groups(2);
  A += offset_a;
  B += offset_b;
#endif
  const int k_begin = part * k_part;
  const int k_end = min(K, k_begin + k_part);

  real acc[WPTM][WPTN];
  #pragma unroll
  for (int i = 0; i < WPTM; i++) {
    #pragma unroll
    for (int j = 0; j < WPTN; j++) { acc[i][j] = ZERO; }
  }

  for (int k0 = k_begin; k0 < k_end; k0 += KWG) {
    stage(as, MWG, LDAL, A, lda, m0, M, k0, k_end, tid, TRANSA == 0, TRANSA == 2);
    stage(bs, NWG, LDBL, B, ldb, n0, N, k0, k_end, tid, TRANSB != 0, TRANSB == 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int k = 0; k < KWG; k++) {
      real a[WPTM], b[WPTN];
      #pragma unroll
      for (int i = 0; i < WPTM; i++) { a[i] = as[k * LDAL + tm + i * MDIMC]; }
      #pragma unroll
      for (int j = 0; j < WPTN; j++) { b[j] = bs[k * LDBL + tn + j * NDIMC]; }
      #pragma unroll
      for (int i = 0; i < WPTM; i++) {
        #pragma unroll
        for (int j = 0; j < WPTN; j++) { MULADD(acc[i][j], a[i], b[j]); }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  // One part: C itself. Several: this part's sums, M x N packed, for xgemm_direct_sum.
  __global real* out = parts == 1 ? C + offset_c : work + part * M * N;
  const int ld_out = parts == 1 ? ldc : M;
  #pragma unroll
  for (int j = 0; j < WPTN; j++) {
    const int n = n0 + tn + j * NDIMC;
    #pragma unroll
    for (int i = 0; i < WPTM; i++) {
      const int m = m0 + tm + i * MDIMC;
      if (m < M && n < N) {
        if (parts == 1) { STORE_AXPBY(out[n * ld_out + m], acc[i][j], alpha, beta); }
        else { out[n * ld_out + m] = acc[i][j]; }
      }
    }
  }
}
#endif

#if PART == 0 || PART == 3
// C <- alpha * (the parts' sums, added in order) + beta * C; a work-item per element, the grid
// rounded up to the work-group.
__kernel void xgemm_direct_sum(const int M, const int N, const int parts, const real alpha, const real beta,
                               __global real* C, const int offset_c, const int ldc,
                               const __global real* restrict work) {
  const int m = get_global_id(0);
  const int n = get_global_id(1);
  if (m >= M || n >= N) { return; }
  real sum = ZERO;
  for (int z = 0; z < parts; z++) { sum += work[(z * N + n) * M + m]; }
  C += offset_c;
  STORE_AXPBY(C[n * ldc + m], sum, alpha, beta);
}
#endif
