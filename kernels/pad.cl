// gemmtune: operand preparation. The GEMM kernels read A as an Mp x Kp and B as an Np x Kp
// column-major matrix (both "K-major": K is the slow index), zero-padded to multiples of the
// tile sizes. These kernels copy a user matrix into that form, transposing and conjugating
// it where op() asks for it. Skipped entirely when the operand already has that form.
#include "common.cl"

#ifndef TRANSPOSEX
#define TRANSPOSEX 16   // transpose tile, work-items along the input's rows (dimension 0)
#endif
#ifndef TRANSPOSEY
#define TRANSPOSEY 16   // transpose tile, work-items along the input's columns (dimension 1)
#endif
#ifndef TRANSPOSEW
#define TRANSPOSEW 1    // transpose tile, input columns per work-item (the tile is TRANSPOSEY * TRANSPOSEW columns)
#endif
#define TRANSPOSEQ (TRANSPOSEY * TRANSPOSEW)   // input columns of the transpose tile
// Constraint: TRANSPOSEX * TRANSPOSEY work-items fit a work-group, and the local tile of
// TRANSPOSEQ * (TRANSPOSEX + 1) elements fits local memory (+1: no bank conflicts on the read).

#if !defined(COPY_PER_ITEM)   // not a tuned parameter: gemmtune builds with its own (kernels.COPY_PER_ITEM)
#define COPY_PER_ITEM 4       // elements of a row that each work-item of pad_copy moves
#endif

// A batch's problem z as the product reads it (dimension 2 of its grid, or xgemm_rt's tile number
// with STREAMK): A and B the copies these kernels prepared, packed_a and packed_b elements a problem
// (0: one copy all share), or where negative the caller's operand as it is, at BATCH_AT; C the
// caller's.
#if BATCH
#define BATCH_OPERANDS(A, B, C, z, packed_a, packed_b, offset_c) \
  A += packed_a >= 0 ? (size_t)(z) * packed_a : (size_t)BATCH_AT(z, 0, stride_a); \
  B += packed_b >= 0 ? (size_t)(z) * packed_b : (size_t)BATCH_AT(z, 1, stride_b); \
  C += offset_c + BATCH_AT(z, 2, stride_c);
#endif

#if PART == 0 || PART == 2   // common.cl: the kernels a build holds
// Batched: problem z is dimension 2 of the grid. Its operand (A: operand 0, B: 1, as BATCH_AT
// counts them) starts at offset_in + BATCH_AT, and its copy is the z-th of out, packed.
#if BATCH
#define BATCH_PROBLEM(in, out, offset_in, operand, P_out, Q_out) \
  in += offset_in + BATCH_AT((int)get_group_id(2), operand, operand ? stride_b : stride_a); \
  out += (size_t)get_group_id(2) * P_out * Q_out;
#else
#define BATCH_PROBLEM(in, out, offset_in, operand, P_out, Q_out)
#endif
// out (P_out x Q_out, column-major) <- in (P x Q, column-major, leading dimension ld_in),
// zeros outside P x Q, conjugated if conj != 0. Each work-item moves COPY_PER_ITEM elements of
// a row, a work-group's height of columns apart, all its loads before its stores: global size
// P_out x ceil(Q_out / COPY_PER_ITEM), each rounded up to the work-group. On an H200, 4096^2
// floats took 38.0-41.2 us in work-groups of 32 x 8 (a plain copy of float4s 36.5-39.5 in the
// same runs), 52-56 with a load and a store at a time, 164-169 with one element per work-item
// in 16 x 4.
__kernel void pad_copy(const int P, const int Q, const int ld_in, const int P_out, const int Q_out,
                       const int conj, const __global real* restrict in, __global real* restrict out
#if BATCH
                       , const int offset_in, const int operand BATCH_ARGS
#endif
                       ) {
  BATCH_PROBLEM(in, out, offset_in, operand, P_out, Q_out)
  const int i = get_global_id(0);
  const int j0 = get_group_id(1) * get_local_size(1) * COPY_PER_ITEM + get_local_id(1);
  real v[COPY_PER_ITEM];
  #pragma unroll
  for (int w = 0; w < COPY_PER_ITEM; w++) {
    const int j = j0 + w * (int)get_local_size(1);
    v[w] = ZERO;
    if (i < P && j < Q) {
      v[w] = in[j * ld_in + i];
      if (conj) { v[w] = CONJ(v[w]); }
    }
  }
  if (i < P_out) {
    #pragma unroll
    for (int w = 0; w < COPY_PER_ITEM; w++) {
      const int j = j0 + w * (int)get_local_size(1);
      if (j < Q_out) { out[j * P_out + i] = v[w]; }
    }
  }
}

// out (Q_out x P_out, column-major) <- transpose of in (P x Q, column-major, leading dimension
// ld_in), zeros outside, conjugated if conj != 0. Global size: P_out rounded up to TRANSPOSEX,
// and Q_out rounded up to TRANSPOSEQ, divided by TRANSPOSEW. Reads are coalesced along P, writes
// along Q; the tile may be rectangular. Several elements per work-item keep more loads in
// flight: on an H200, 32 x 8 work-items moving 4 each transposed floats 1.7x as fast as 16 x 16
// work-items moving one.
__kernel __attribute__((reqd_work_group_size(TRANSPOSEX, TRANSPOSEY, 1)))
void pad_transpose(const int P, const int Q, const int ld_in, const int P_out, const int Q_out,
                   const int conj, const __global real* restrict in, __global real* restrict out
#if BATCH
                   , const int offset_in, const int operand BATCH_ARGS
#endif
                   ) {
  BATCH_PROBLEM(in, out, offset_in, operand, P_out, Q_out)
  __local real tile[TRANSPOSEQ][TRANSPOSEX + 1];
  const int tx = get_local_id(0);
  const int ty = get_local_id(1);
  const int i0 = get_group_id(0) * TRANSPOSEX;
  const int j0 = get_group_id(1) * TRANSPOSEQ;

  for (int w = 0; w < TRANSPOSEW; w++) {
    const int j = ty + w * TRANSPOSEY;
    real v = ZERO;
    if (i0 + tx < P && j0 + j < Q) {
      v = in[(j0 + j) * ld_in + i0 + tx];
      if (conj) { v = CONJ(v); }
    }
    tile[j][tx] = v;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  // Re-deal the tile so that consecutive work-items write consecutive output elements.
  for (int w = 0; w < TRANSPOSEW; w++) {
    const int f = (w * TRANSPOSEY + ty) * TRANSPOSEX + tx;
    const int jj = f % TRANSPOSEQ;
    const int ii = f / TRANSPOSEQ;
    if (i0 + ii < P_out && j0 + jj < Q_out) {
      out[(i0 + ii) * Q_out + j0 + jj] = tile[jj][ii];
    }
  }
}
#endif
