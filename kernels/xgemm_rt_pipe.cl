// xgemm_rt: the pipeline schedules, one function each, chosen by STAGE and PIPE. Each multiplies
// one tile's K-slices 0 to tiles - 1 (global memory at Ablock and Bblock, leading dimensions lda
// and ldb) into acc, by multiply_slice (xgemm_rt_compute.cl or xgemm_rt_mma.cl). Alm and Blm are
// the work-group's NBUF local buffers per slice; tid, tx and ty the work-item's place; frag the
// scratch of the spelled-out matrix instruction (MMA without MMA_F64). Included by xgemm_rt.cl.

// multiply_slice on local buffer buf.
#define COMPUTE(acc, Alm, Blm, buf, tid, tx, ty, frag) \
  multiply_slice(acc, (Alm) + (buf) * KWG * LDAL, LDAL, (Blm) + (buf) * KWG * LDBL, LDBL, tid, tx, ty, frag)

#if STAGE == 0
// Every work-item reads what it multiplies; the cache, not local memory, shares it.
INLINE_FUNC void pipe_unstaged(real acc[WPTM][WPTN], const __global real* const Ablock, const int lda,
                          const __global real* const Bblock, const int ldb, const int tiles,
                          const int tid, const int tx, const int ty, __local real* frag) {
  for (int t = 0; t < tiles; t++) {
    multiply_slice(acc, Ablock + t * KWG * lda, lda, Bblock + t * KWG * ldb, ldb, tid, tx, ty, frag);
  }
}

#elif MMA == 2
// MMA 2 (xgemm_rt_mma.cl): the slices come as in pipe_async, and each step of 4 values of k has
// its fragments read while the step before it multiplies (before it, or in complex precisions
// amid it: HALF_ROWS), in two register sets x and y (even and odd steps: KWG / 4 is even). A
// slice's last step is multiplied after the barrier and the next slice's first reads, so that its
// matrix instructions keep the matrix pipe busy while the warp waits there; the barrier comes after
// the slice's last reads, so its buffer is free after it, and the copies of slice t + ABUF go there.
#define SLICE_A(Alm, buf) ((Alm) + (buf) * KWG * LDAL)
#define SLICE_B(Blm, buf) ((Blm) + (buf) * KWG * LDBL)
// f: the fragments of values k to k + 3 of the slice after slice i.
#define NEXT_SLICE_STEP(f, Alm, Blm, i, k) \
  LOAD_STEP(f, SLICE_A(Alm, ((i) + 1) % ABUF), LDAL, SLICE_B(Blm, ((i) + 1) % ABUF), LDBL, wm, wn, g, q, k)
// Before the next slice's first reads: it has landed, slice t + i has been read by everyone, and
// its buffer takes the copies of slice t + i + ABUF.
#define NEXT_SLICE_BARRIER(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, t, i) \
  WAIT_OLDEST();                  /* this work-item's copies of slice t + i + 1 have landed */ \
  barrier(CLK_LOCAL_MEM_FENCE);   /* everyone's have, and everyone has read slice t + i */ \
  if (t + (i) + ABUF < tiles) { \
    COPY_SLICE(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, i, t + (i) + ABUF) \
  } \
  COMMIT();
#define AHEAD_STEP(acc, Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, t, i) \
  if (t + (i) < tiles) { \
    PRAGMA(unroll) \
    for (int k = 0; k < KWG - 8; k += 8) { \
      MULTIPLY_ROWS(acc, x, fa_, fb_, g, q, 0, HALF_ROWS) \
      LOAD_STEP(y, SLICE_A(Alm, i), LDAL, SLICE_B(Blm, i), LDBL, wm, wn, g, q, k + 4) \
      MULTIPLY_ROWS(acc, x, fa_, fb_, g, q, HALF_ROWS, WPTM / 2) \
      MULTIPLY_ROWS(acc, y, fa_, fb_, g, q, 0, HALF_ROWS) \
      LOAD_STEP(x, SLICE_A(Alm, i), LDAL, SLICE_B(Blm, i), LDBL, wm, wn, g, q, k + 8) \
      MULTIPLY_ROWS(acc, y, fa_, fb_, g, q, HALF_ROWS, WPTM / 2) \
    } \
    MULTIPLY_ROWS(acc, x, fa_, fb_, g, q, 0, HALF_ROWS) \
    LOAD_STEP(y, SLICE_A(Alm, i), LDAL, SLICE_B(Blm, i), LDBL, wm, wn, g, q, KWG - 4) \
    MULTIPLY_ROWS(acc, x, fa_, fb_, g, q, HALF_ROWS, WPTM / 2) \
    if (t + (i) + 1 < tiles) { \
      NEXT_SLICE_BARRIER(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, t, i) \
      if (HALF_ROWS == 0) { NEXT_SLICE_STEP(x, Alm, Blm, i, 0) } \
    } \
    MULTIPLY_ROWS(acc, y, fa_, fb_, g, q, 0, HALF_ROWS) \
    /* after the last slice this reads a buffer no one fills: in bounds, and never multiplied */ \
    if (HALF_ROWS > 0) { NEXT_SLICE_STEP(x, Alm, Blm, i, 0) } \
    MULTIPLY_ROWS(acc, y, fa_, fb_, g, q, HALF_ROWS, WPTM / 2) \
  }
// With three register sets (FRAG_SETS), step s of a round multiplies set s % 3 and is followed by
// the reads for step s + 2 into the set step s - 1 multiplied: a whole step after the matrix
// instructions that read those registers were issued, and a whole step before the ones that
// read them next. The barrier comes before the first reads of the next slice, after the last of
// this one's, as above.
#define STEPS (KWG / 4)
#define AHEAD3_STEP(acc, Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, t, i) \
  if (t + (i) < tiles) { \
    PRAGMA(unroll) \
    for (int st = 0; st < STEPS; st++) { \
      MULTIPLY_ROWS(acc, f[((i) * STEPS + st) % 3], fa_, fb_, g, q, 0, WPTM / 2) \
      if (st + 2 < STEPS) { \
        LOAD_STEP(f[((i) * STEPS + st + 2) % 3], SLICE_A(Alm, i), LDAL, SLICE_B(Blm, i), LDBL, \
                  wm, wn, g, q, 4 * (st + 2)) \
      } else { \
        if (st + 2 == STEPS && t + (i) + 1 < tiles) { \
          NEXT_SLICE_BARRIER(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, t, i) \
        } \
        /* after the last slice these read a buffer no one fills: in bounds, never multiplied */ \
        NEXT_SLICE_STEP(f[((i) * STEPS + st + 2) % 3], Alm, Blm, i, 4 * (st + 2 - STEPS)) \
      } \
    } \
  }
INLINE_FUNC void pipe_ahead(real acc[WPTM][WPTN], __local real* Alm, __local real* Blm,
                       const __global real* const Ablock, const int lda, const __global real* const Bblock,
                       const int ldb, const int tiles, const int tid, __local real* frag) {
  const int g = MMA_G(tid), q = MMA_Q(tid), wm = MMA_WM(tid), wn = MMA_WN(tid);
  __local double* const fa_ = (__local double*)frag;   // the spelled-out instruction's scratch
  __local double* const fb_ = fa_ + 16 * 8;
#if FRAG_SETS == 3
  step_fragments f[3];
#else
  step_fragments x, y;
#endif
  START_COPIES(Alm, Blm, asrc, bsrc, rb, Ablock, lda, Bblock, ldb, tid, tiles)
  if (tiles > 0) {
    WAIT_OLDEST();
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ABUF - 1 < tiles) { COPY_SLICE(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, ABUF - 1, ABUF - 1) }
    COMMIT();
#if FRAG_SETS == 3
    LOAD_STEP(f[0], SLICE_A(Alm, 0), LDAL, SLICE_B(Blm, 0), LDBL, wm, wn, g, q, 0)
    LOAD_STEP(f[1], SLICE_A(Alm, 0), LDAL, SLICE_B(Blm, 0), LDBL, wm, wn, g, q, 4)
#else
    LOAD_STEP(x, SLICE_A(Alm, 0), LDAL, SLICE_B(Blm, 0), LDBL, wm, wn, g, q, 0)
#endif
  }
  for (int t = 0; t < tiles; t += ABUF) {
#if FRAG_SETS == 3
    EACH_BUFFER(AHEAD3_STEP, acc, Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, t)
#else
    EACH_BUFFER(AHEAD_STEP, acc, Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, t)
#endif
  }
}

#elif ABUF
// ABUF - 1 slices in flight while one is computed, one barrier per slice. Every step commits a
// group, empty near the end, so that waiting for all but the newest ABUF - 2 groups always
// means: slice t has landed.
#define ABUF_STEP(acc, Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tx, ty, frag, tiles, t, i) \
  if (t + (i) < tiles) { \
    WAIT_OLDEST();                  /* this work-item's copies of slice t + i have landed */ \
    barrier(CLK_LOCAL_MEM_FENCE);   /* everyone's have, and everyone is done with the slice before */ \
    if (t + (i) + ABUF - 1 < tiles) { \
      COPY_SLICE(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, ((i) + ABUF - 1) % ABUF, t + (i) + ABUF - 1) \
    } \
    COMMIT(); \
    COMPUTE(acc, Alm, Blm, i, tid, tx, ty, frag); \
  }
INLINE_FUNC void pipe_async(real acc[WPTM][WPTN], __local real* Alm, __local real* Blm,
                       const __global real* const Ablock, const int lda, const __global real* const Bblock,
                       const int ldb, const int tiles, const int tid, const int tx, const int ty,
                       __local real* frag) {
  START_COPIES(Alm, Blm, asrc, bsrc, rb, Ablock, lda, Bblock, ldb, tid, tiles)
  for (int t = 0; t < tiles; t += ABUF) {
    EACH_BUFFER(ABUF_STEP, acc, Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tx, ty, frag, tiles, t)
  }
}

#elif PIPE == 0
INLINE_FUNC void pipe_0(real acc[WPTM][WPTN], __local real* Alm, __local real* Blm,
                   const __global real* const Ablock, const int lda, const __global real* const Bblock,
                   const int ldb, const int tiles, const int tid, const int tx, const int ty, __local real* frag) {
  gunion ra[LPTA], rb[LPTB];
  for (int t = 0; t < tiles; t++) {
    LOAD_GLOBAL(ra, rb, Ablock, lda, Bblock, ldb, tid, t * KWG)
    STORE_LOCAL(Alm, Blm, ra, rb, tid, 0)
    barrier(CLK_LOCAL_MEM_FENCE);
    COMPUTE(acc, Alm, Blm, 0, tid, tx, ty, frag);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

#elif PIPE == 1
// The next slice's global loads are in flight while this slice is computed.
INLINE_FUNC void pipe_1(real acc[WPTM][WPTN], __local real* Alm, __local real* Blm,
                   const __global real* const Ablock, const int lda, const __global real* const Bblock,
                   const int ldb, const int tiles, const int tid, const int tx, const int ty, __local real* frag) {
  gunion ra[LPTA], rb[LPTB];
  LOAD_GLOBAL(ra, rb, Ablock, lda, Bblock, ldb, tid, 0)
  for (int t = 0; t < tiles; t++) {
    STORE_LOCAL(Alm, Blm, ra, rb, tid, 0)
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t + 1 < tiles) { LOAD_GLOBAL(ra, rb, Ablock, lda, Bblock, ldb, tid, (t + 1) * KWG) }
    COMPUTE(acc, Alm, Blm, 0, tid, tx, ty, frag);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

#else
// Two local buffers: the next slice is stored into the other one, one barrier per slice.
INLINE_FUNC void pipe_2(real acc[WPTM][WPTN], __local real* Alm, __local real* Blm,
                   const __global real* const Ablock, const int lda, const __global real* const Bblock,
                   const int ldb, const int tiles, const int tid, const int tx, const int ty, __local real* frag) {
  gunion ra[LPTA], rb[LPTB];
  LOAD_GLOBAL(ra, rb, Ablock, lda, Bblock, ldb, tid, 0)
  STORE_LOCAL(Alm, Blm, ra, rb, tid, 0)
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int t = 0; t < tiles; t++) {
    if (t + 1 < tiles) { LOAD_GLOBAL(ra, rb, Ablock, lda, Bblock, ldb, tid, (t + 1) * KWG) }
    COMPUTE(acc, Alm, Blm, t & 1, tid, tx, ty, frag);
    if (t + 1 < tiles) { STORE_LOCAL(Alm, Blm, ra, rb, tid, (t + 1) & 1) }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}
#endif
