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

// out (P_out x Q_out, column-major) <- in (P x Q, column-major, leading dimension ld_in),
// zeros outside P x Q, conjugated if conj != 0. Each work-item copies per_item elements of a
// row, a work-group's height of columns apart: global size P_out x ceil(Q_out / per_item), each
// rounded up to the work-group. More loads in flight: on an H200, 4 per work-item in groups of
// 32 x 2 copied 4096^2 floats in 52-56 us, where one each in groups of 16 x 4 took 164-169.
__kernel void pad_copy(const int P, const int Q, const int ld_in, const int P_out, const int Q_out,
                       const int conj, const int per_item,
                       const __global real* restrict in, __global real* restrict out) {
  const int i = get_global_id(0);
  const int j0 = get_group_id(1) * get_local_size(1) * per_item + get_local_id(1);
  if (i < P_out) {
    for (int w = 0; w < per_item; w++) {
      const int j = j0 + w * (int)get_local_size(1);
      if (j < Q_out) {
        real v = ZERO;
        if (i < P && j < Q) {
          v = in[j * ld_in + i];
          if (conj) { v = CONJ(v); }
        }
        out[j * P_out + i] = v;
      }
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
                   const int conj, const __global real* restrict in, __global real* restrict out) {
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
