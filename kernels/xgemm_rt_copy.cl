// xgemm_rt: the K-slices' way from global to local memory, through registers (LOAD_GLOBAL,
// then STORE_LOCAL) or, with PIPE 5 and 6, by asynchronous copies (COPY_A, COPY_B). Included by
// xgemm_rt.cl after xgemm_rt_checks.cl. Every macro takes the buffers, registers and indices it
// uses as arguments: tid is the work-item's index in its work-group, ra and rb the register
// copies of a slice (LPTA and LPTB gunions), Alm and Blm the local buffers.

// Vector v of a slice held as it is in global memory, row by row (one row per k, W elements
// long): row v / (W/VWG), vector v % (W/VWG) of it, at k0 in global memory or in local buffer buf.
#define SLICE_SRC(block, ld, W, k0, v) \
  ((const __global gvec*)((block) + ((k0) + (v) / ((W) / VWG)) * (ld)) + (v) % ((W) / VWG))
#define SLICE_DST(lm, LD, W, buf, v) \
  ((__local gvec*)((lm) + (buf) * KWG * (LD) + ((v) / ((W) / VWG)) * (LD)) + (v) % ((W) / VWG))
#if BKFAST == 2
  // Block b of the slice: columns (b / (KWG/VWG)) * VWG + i, piece b % (KWG/VWG) of each. The
  // work-items of a block row take consecutive pieces of a column, as with BKFAST = 1.
  // Register l holds column i = l % VWG of block tid + (l / VWG) * WGS.
  #define BLOCK(tid, l) (tid + ((l) / VWG) * WGS)
  #define LOAD_B(Bblock, ldb, tid, k0, v, l) ((const __global gvec*)(Bblock + ((BLOCK(tid, l) / (KWG / VWG)) * VWG + (l) % VWG) * ldb + (k0)))[BLOCK(tid, l) % (KWG / VWG)]
  #define STORE_B(Blm, rb, tid, buf, v, l) \
    if ((l) % VWG == VWG - 1) { \
      for (int j = 0; j < VWG; j++) { \
        gunion bt; \
        for (int i = 0; i < VWG; i++) { bt.e[i] = rb[(l) - (VWG - 1) + i].e[j]; } \
        *((__local gvec*)(Blm + (buf) * KWG * LDBL + ((BLOCK(tid, l) % (KWG / VWG)) * VWG + j) * LDBL \
                          + (BLOCK(tid, l) / (KWG / VWG)) * VWG)) = bt.v; \
      } \
    }
#elif BKFAST
  // B column n of the slice is contiguous along k: vector v is column v / (KWG/VWG), piece
  // v % (KWG/VWG); its elements go to VWG rows of the k-major local slice.
  #define LOAD_B(Bblock, ldb, tid, k0, v, l) ((const __global gvec*)(Bblock + ((v) / (KWG / VWG)) * ldb + (k0)))[(v) % (KWG / VWG)]
  #define STORE_B(Blm, rb, tid, buf, v, l) \
    for (int j = 0; j < VWG; j++) { \
      Blm[(buf) * KWG * LDBL + (((v) % (KWG / VWG)) * VWG + j) * LDBL + (v) / (KWG / VWG)] = rb[l].e[j]; \
    }
#else
  #define LOAD_B(Bblock, ldb, tid, k0, v, l) *SLICE_SRC(Bblock, ldb, NWG, k0, v)
  #define STORE_B(Blm, rb, tid, buf, v, l) *SLICE_DST(Blm, LDBL, NWG, buf, v) = rb[l].v
#endif
// Global -> registers -> local: consecutive work-items take consecutive vectors, so the loads
// are coalesced.
#define LOAD_GLOBAL(ra, rb, Ablock, lda, Bblock, ldb, tid, k0) \
  for (int l = 0; l < LPTA; l++) { \
    const int v = tid + l * WGS; \
    ra[l].v = *SLICE_SRC(Ablock, lda, MWG, k0, v); \
  } \
  for (int l = 0; l < LPTB; l++) { \
    const int v = tid + l * WGS; \
    rb[l].v = LOAD_B(Bblock, ldb, tid, k0, v, l); \
  }
#define STORE_LOCAL(Alm, Blm, ra, rb, tid, buf) \
  for (int l = 0; l < LPTA; l++) { \
    const int v = tid + l * WGS; \
    *SLICE_DST(Alm, LDAL, MWG, buf, v) = ra[l].v; \
  } \
  for (int l = 0; l < LPTB; l++) { \
    const int v = tid + l * WGS; \
    STORE_B(Blm, rb, tid, buf, v, l); \
  }
#if ABUF
  // Global -> local without registers, the same vectors as LOAD_GLOBAL and STORE_LOCAL move.
  // cp.async takes 4, 8 or 16 bytes: wider vectors go as several 16-byte copies.
  #if CP_ASYNC
    #define GVEC_BYTES (VWG * SCALARS_1 * (PRECISION == 32 || PRECISION == 3232 ? 4 : 8))
    // .ca (through L1, which the work-groups of a compute unit share) measured slightly above .cg.
    #define CP_ASYNC_N(dst, src, n) __asm__ __volatile__( \
        "cp.async.ca.shared.global [%0], [%1], " #n ";" :: "r"((uint)(size_t)(dst)), "l"((ulong)(src)) : "memory")
    #if GVEC_BYTES >= 16
      #define COPY(dst, src) \
        for (int h = 0; h < GVEC_BYTES / 16; h++) { \
          CP_ASYNC_N((__local char*)(dst) + 16 * h, (const __global char*)(src) + 16 * h, 16); \
        }
    #elif GVEC_BYTES == 8
      #define COPY(dst, src) CP_ASYNC_N(dst, src, 8)
    #else
      #define COPY(dst, src) CP_ASYNC_N(dst, src, 4)
    #endif
    #define COMMIT() __asm__ __volatile__("cp.async.commit_group;" ::: "memory")
    // Wait until at most ABUF - 2 groups of copies are in flight: the oldest slice has landed.
    #if ABUF == 2
      #define WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory")
    #elif ABUF == 3
      #define WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory")
    #else
      #define WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 2;" ::: "memory")
    #endif
  #else
    #define COPY(dst, src) (*(dst) = *(src))
    #define COMMIT()
    #define WAIT_OLDEST()
  #endif
  // The slices are copied in order, each work-item's copies from addresses that advance one
  // slice at a time (ASRC, BSRC, set up with the tile): an add per copy, where computing each
  // address anew took 8 instructions per copy in the H200's inner loop (one pointer per operand
  // and offsets added per copy: 24 more instructions per 3 slices there, and 3.7 % slower). The
  // loops over the copies are unrolled, so that the arrays become single values: PoCL 3 got
  // them wrong as arrays with one work-item along M (MDIMC = 1).
  // asrc and bsrc are those addresses (LPTA and LPTB of them), declared by ASRC and BSRC; with
  // BKFAST, B goes through the registers rb instead, and bsrc is neither declared nor used.
  #define COPY_SLICE(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, buf, s) \
    PRAGMA(unroll) \
    for (int l = 0; l < LPTA; l++) { \
      COPY(SLICE_DST(Alm, LDAL, MWG, buf, tid + l * WGS), asrc[l]); \
      asrc[l] = (const __global gvec*)((const __global real*)asrc[l] + KWG * lda); \
    } \
    COPY_B(Blm, bsrc, rb, Bblock, ldb, tid, tiles, buf, s)
  #define ASRC(asrc, Ablock, lda, tid) const __global gvec* asrc[LPTA]; \
    PRAGMA(unroll) \
    for (int l = 0; l < LPTA; l++) { asrc[l] = SLICE_SRC(Ablock, lda, MWG, 0, tid + l * WGS); }
  #if BKFAST
    // B column n is contiguous along k, so it cannot land in the k-major slice by a copy of
    // whole vectors: it goes through registers as with PIPE 1 (LOAD_B, STORE_B), each slice loaded
    // while the one before it is computed and stored after the next step's barrier, when its
    // buffer is free. On the H200 (s at 4096^3, whole operation) this measured 49,571 GFLOP/s
    // with PADL 4 and WARPM 0, one 4-byte asynchronous copy per element 36,489, and the s
    // default, B transposed by a pass and copied asynchronously, 50,971 (docs/performance.md).
    #define LOAD_B_SLICE(rb, Bblock, ldb, tid, s) \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { rb[l].v = LOAD_B(Bblock, ldb, tid, (s) * KWG, tid + l * WGS, l); }
    #define COPY_B(Blm, bsrc, rb, Bblock, ldb, tid, tiles, buf, s) \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { STORE_B(Blm, rb, tid, buf, tid + l * WGS, l); } \
      if ((s) + 1 < tiles) { LOAD_B_SLICE(rb, Bblock, ldb, tid, (s) + 1) }
    #define BSRC(bsrc, rb, Bblock, ldb, tid, tiles) if (tiles > 0) { LOAD_B_SLICE(rb, Bblock, ldb, tid, 0) }
  #else
    #define COPY_B(Blm, bsrc, rb, Bblock, ldb, tid, tiles, buf, s) \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { \
        COPY(SLICE_DST(Blm, LDBL, NWG, buf, tid + l * WGS), bsrc[l]); \
        bsrc[l] = (const __global gvec*)((const __global real*)bsrc[l] + KWG * ldb); \
      }
    #define BSRC(bsrc, rb, Bblock, ldb, tid, tiles) const __global gvec* bsrc[LPTB]; \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { bsrc[l] = SLICE_SRC(Bblock, ldb, NWG, 0, tid + l * WGS); }
  #endif
  // The start of an asynchronous pipeline: the copies' sources declared (asrc, bsrc, and rb, B's
  // next slice on its way through registers with BKFAST), and slices 0 to ABUF - 2 on their way,
  // one group of copies each.
  #define START_COPIES(Alm, Blm, asrc, bsrc, rb, Ablock, lda, Bblock, ldb, tid, tiles) \
    gunion rb[LPTB]; \
    ASRC(asrc, Ablock, lda, tid) \
    BSRC(bsrc, rb, Bblock, ldb, tid, tiles) \
    for (int s = 0; s < ABUF - 1; s++) { \
      if (s < tiles) { COPY_SLICE(Alm, Blm, asrc, bsrc, rb, Bblock, lda, ldb, tid, tiles, s, s) } \
      COMMIT(); \
    }
  // STEP(..., i) for each buffer i in turn: a pipeline's loop over the slices is written out ABUF
  // times, so that every buffer index is a constant (in s on the H200, PIPE 6 went from 46,475 to
  // 48,729 GFLOP/s by it).
  #if ABUF == 2
    #define EACH_BUFFER(STEP, ...) STEP(__VA_ARGS__, 0) STEP(__VA_ARGS__, 1)
  #elif ABUF == 3
    #define EACH_BUFFER(STEP, ...) STEP(__VA_ARGS__, 0) STEP(__VA_ARGS__, 1) STEP(__VA_ARGS__, 2)
  #else
    #define EACH_BUFFER(STEP, ...) STEP(__VA_ARGS__, 0) STEP(__VA_ARGS__, 1) STEP(__VA_ARGS__, 2) STEP(__VA_ARGS__, 3)
  #endif
#endif
