// xgemm_rt with MMA = 0: multiply_slice, each work-item multiplying its own WPTM x WPTN results.
// Included by xgemm_rt.cl in place of xgemm_rt_mma.cl, which has the same function for matrix
// instructions.

// Where work-item (tx, ty) keeps result i along M and j along N of the tile (tid is for
// xgemm_rt_mma.cl's layout, not used here).
#define MROW(tid, tx, i) MLOC(tx, (i) / VLM, (i) % VLM)
#define NCOL(tid, ty, j) NLOC(ty, (j) / VLN, (j) % VLN)

// acc += the slice at aslice (KWG rows of lda elements along M) times the one at bslice (rows of
// ldb along N), in local memory or, without staging, in global memory. tid and frag are for
// xgemm_rt_mma.cl's function, not used here.
INLINE_FUNC void multiply_slice(real acc[WPTM][WPTN], const OPERANDS real* aslice, const int lda,
                           const OPERANDS real* bslice, const int ldb, const int tid, const int tx, const int ty,
                           __local real* frag) {
  real a[WPTM], b[WPTN];   // the operands of one step k: WPTM values of A and WPTN of B
  PRAGMA(unroll UNROLL)
  for (int k = 0; k < KWG; k++) {
    const OPERANDS real* arow = aslice + k * lda;
    const OPERANDS real* brow = bslice + k * ldb;
    PRAGMA(unroll)
    for (int c = 0; c < WPTM / VLM; c++) {
      const mvec v = *((const OPERANDS mvec*)(arow + MLOC(tx, c, 0)));
      for (int j = 0; j < VLM; j++) { a[c * VLM + j] = LANE(VLM, v, j); }
    }
    PRAGMA(unroll)
    for (int c = 0; c < WPTN / VLN; c++) {
      const nvec v = *((const OPERANDS nvec*)(brow + NLOC(ty, c, 0)));
      for (int j = 0; j < VLN; j++) { b[c * VLN + j] = LANE(VLN, v, j); }
    }
    // The results row by row in a zig-zag, from the last column: consecutive multiply-adds share a
    // value of A, and at each turn one of B. Only the order changes, and with it what NVIDIA's
    // compiler makes of the step: on the H200 (s at 4096^3, the former s default's 128 x 128
    // tiles) xgemm took 2,624 us against 2,648 row by row (docs/performance.md, multiply-add order).
    PRAGMA(unroll)
    for (int i = 0; i < WPTM; i++) {
      PRAGMA(unroll)
      for (int jj = 0; jj < WPTN; jj++) {
        const int j = i % 2 ? jj : WPTN - 1 - jj;
        MULADD(acc[i][j], a[i], b[j]);
      }
    }
  }
}
