// gemmtune kernel family "xgemm_rt": register-tiled GEMM (the tutorial's kernels 6 and 7, and
// the techniques that take a tiled GEMM towards the hardware limit, each a parameter).
//
// C (M x N, column-major, leading dimension ldc) <- alpha * A * B^T + beta * C, where
//   A is Mp x Kp column-major (lda = Mp) and B is Np x Kp column-major (ldb = Np), zero-padded
//   to multiples of MWG, NWG, KWG by pad.cl, exactly as for xgemm_k5.
//
// With BKFAST = 1 or 2, B is instead Kp x Np column-major (ldb = Kp): an untransposed
// column-major B is read as it is, and the transpose pass disappears; the B slice is transposed
// on its way into local memory: with 1, each work-item loads VWG values of k of a column and
// stores them element by element (with PIPE 5 to 7 too, while A's slices go by asynchronous
// copies); with 2, each work-item loads a VWG x VWG block (VWG columns, VWG values of k each),
// transposes it in registers and stores VWG vectors along n.
//
// A work-group of MDIMC x NDIMC work-items computes an MWG x NWG tile of C; each work-item
// holds WPTM x WPTN results in registers. Per K-step of KWG, both slices are staged in local
// memory k-major ([k][m] and [k][n]: the inner loop reads along m and n, so B is staged
// transposed relative to xgemm_k5 and neither tile needs padding against bank conflicts; PADL
// is there to test that on a device). Each k then reads WPTM values of A and WPTN of B into
// registers and does WPTM * WPTN multiply-adds.
//
// With PIPE = 5, 6 or 7, the slices go from global to local memory without passing through
// registers, into ABUF = 2, 3 or 4 local buffers: NVIDIA's cp.async (compute capability 8.0 and
// later; gemmtune defines CP_ASYNC = 1 when it builds for such a device) lands each copy in
// local memory by itself, so ABUF - 1 slices are in flight while one is computed, at no cost in
// registers. Elsewhere the same pipeline copies with a load and a store.
//
// With STREAMK = n > 0 (stream-K), the grid is one-dimensional: the tiles before split_from
// are one work-group each, in whole rounds of n work-groups per compute unit; the tiles from
// split_from on (the last round's, which would leave compute units idle) are cut along K into
// pieces that the host lists in `pieces`, one work-group each: (tile, first K-slice, end
// K-slice, slot). A piece that is a whole tile (slot -1) stores it; a part of a tile leaves its
// sum in slot `slot` of `work`, and xgemm_fixup, launched next, adds each split tile's parts up
// in order into C. Without STREAMK, the grid is 2D and split_from, pieces and work are not read.
//
// With BATCH (common.cl; the host defines it for a batch only), the launch holds many problems: the
// grid's dimension 2 is the problem, or with STREAMK its tile numbers run over every problem's
// tiles in turn; each problem's A and B are pad.cl's copies (packed_a, packed_b elements apart) or
// the caller's at BATCH_AT, its C at offset_c and BATCH_AT (pad.cl's BATCH_OPERANDS).
//
// With STAGE = 0 nothing is staged: each work-item reads its operands for step k straight from
// A and B (B n-fastest) through the device's cache, and the loop needs no barrier at all
// (CLBlast's SA = SB = 0).
//
// The parts, split as CLBlast splits its xgemm: xgemm_rt_checks.cl (derived sizes, the
// constraints, vector types), xgemm_rt_copy.cl (global to local memory), xgemm_rt_compute.cl or
// xgemm_rt_mma.cl (the multiply of one slice), xgemm_rt_pipe.cl (the pipeline schedules) and
// xgemm_rt_streamk.cl (where a tile is, and stream-K's xgemm_fixup); the kernel is at the end of this file.
#include "common.cl"

#ifndef MWG
#define MWG 64      // tile size along M: rows of C per work-group
#endif
#ifndef NWG
#define NWG 64      // tile size along N: columns of C per work-group
#endif
#ifndef KWG
#define KWG 16      // tile size along K: depth of the slices staged in local memory
#endif
#ifndef MDIMC
#define MDIMC 16    // work-items along M (dimension 0)
#endif
#ifndef NDIMC
#define NDIMC 16    // work-items along N (dimension 1)
#endif
#ifndef VWG
#define VWG 4       // vector width of global loads, in elements (1, 2, 4, 8)
#endif
#ifndef VLM
#define VLM 4       // consecutive M elements per work-item chunk, read from local memory as one vector
#endif
#ifndef VLN
#define VLN 4       // consecutive N elements per work-item chunk, read from local memory as one vector
#endif
#ifndef PIPE
#define PIPE 2      // 0 load, then compute; 1 next K-slice prefetched into registers; 2 and double-buffered local memory; 5, 6, 7 asynchronous copies into 2, 3, 4 local buffers
#endif
#ifndef PADL
#define PADL 0      // padding of each local-memory row, in elements
#endif
#ifndef UNROLL
#define UNROLL 1    // unroll factor of the loop over k within a slice
#endif
#ifndef BKFAST
#define BKFAST 0    // layout of B: 0 = Np x Kp, n fastest; 1 = Kp x Np, k fastest (an untransposed B as given); 2 = as 1, transposed in registers
#endif
#ifndef WARPM
#define WARPM 0     // 0: work-items laid out row by row; else each group of 32 covers a WARPM x (32/WARPM) sub-tile
#endif
#ifndef STAGE
#define STAGE 1     // 1: both K-slices staged in local memory; 0: operands read from global memory (through the cache), no barriers
#endif
#ifndef MMA
#define MMA 0       // 0: each work-item multiplies its own results; 1: each group of 32 multiplies 16 x 8 x 8 blocks together with matrix instructions (d and z); 2: 16 x 8 x 4 blocks, the next step's operands read while this one multiplies
#endif
#ifndef STREAMK
#define STREAMK 0   // 0: one work-group per tile; n: the last round's tiles (rounds of n work-groups per compute unit) cut along K into pieces that end together
#endif
#ifndef BANDM
#define BANDM 0     // 0: tiles in launch order down M, column after column; n: in bands of n tile rows, down each band's columns in turn (the L2 cache serves the rows of A a band shares)
#endif
#if !defined(CP_ASYNC)  // a fact about the device, not a tuned parameter: gemmtune defines it when it builds
#define CP_ASYNC 0
#endif
#if !defined(MMA_F64)   // likewise: NVIDIA's mma.sync on 16 x 8 x 8 doubles (compute capability 9.0 and later)
#define MMA_F64 0
#endif

#include "pad.cl"   // the operand preparation kernels, and their TRANSPOSEX/TRANSPOSEY
#include "xgemm_rt_checks.cl"
#if PART < 2   // common.cl: the kernels a build holds
#include "xgemm_rt_copy.cl"
#if MMA
  #include "xgemm_rt_mma.cl"
#else
  #include "xgemm_rt_compute.cl"
#endif
#include "xgemm_rt_pipe.cl"
#endif
#include "xgemm_rt_streamk.cl"

#if PART < 2
__kernel __attribute__((reqd_work_group_size(MDIMC, NDIMC, 1)))
void xgemm(const int M, const int N, const int Kp, const real alpha, const real beta,
           const __global real* restrict A, const int lda,
           const __global real* restrict B, const int ldb,
           __global real* C, const int ldc,
           const int split_from, const __global int4* restrict pieces, __global real* restrict work
#if BATCH
           , const int offset_c, const int packed_a, const int packed_b BATCH_ARGS
#endif
           ) {
  // Aligned for the widest vector access: NVIDIA faults on a misaligned vector access to local memory.
#if STAGE
  __local real Alm[NBUF * KWG * LDAL] __attribute__((aligned(128)));
  __local real Blm[NBUF * KWG * LDBL] __attribute__((aligned(128)));
#endif
#if MMA && !MMA_F64
  // the spelled-out matrix instructions' operands (xgemm_rt_mma.cl)
  __local double mma_frag[WGS / 32][MMA_FRAG_DOUBLES] __attribute__((aligned(16)));
#endif

  const int tid = get_local_id(1) * MDIMC + get_local_id(0);
#if WARPM == 0
  const int tx = get_local_id(0);
  const int ty = get_local_id(1);
#else
  // Re-map work-items so that each group of 32 covers a WARPM x (32 / WARPM) block of the grid.
  const int warp = tid / 32, lane = tid % 32;
  const int tx = (warp % (MDIMC / WARPM)) * WARPM + lane % WARPM;
  const int ty = (warp / (MDIMC / WARPM)) * (32 / WARPM) + lane / WARPM;
#endif
#if MMA && !MMA_F64
  __local real* const frag = (__local real*)mma_frag[tid / 32];
#else
  __local real* const frag = 0;
#endif
  real acc[WPTM][WPTN];

  const int slices = Kp / KWG;   // K-slices of a whole tile
#if STREAMK
  // This work-group's piece: a whole tile below split_from, else the host's. It is kept in memory
  // (volatile) and read before and after the inner loop: kept in registers, it and what derives
  // from it took the s default above 128 registers, too many for 2 work-groups of 256 on an
  // H200 compute unit.
  volatile int tile_v, s0_v, s1_v, slot_v;
  {
    const int group = get_group_id(0);
    const int4 piece = group < split_from ? (int4)(group, 0, slices, -1) : pieces[group - split_from];
    tile_v = piece.x; s0_v = piece.y; s1_v = piece.z; slot_v = piece.w;
#if BATCH
    // Tiles are numbered over the whole batch, problem after problem: the last round is the
    // batch's, not each problem's.
    const int per_problem = ((M + MWG - 1) / MWG) * ((N + NWG - 1) / NWG);
    BATCH_OPERANDS(A, B, C, tile_v / per_problem, packed_a, packed_b, offset_c)
    tile_v = tile_v % per_problem;
#endif
  }
#elif BATCH
  BATCH_OPERANDS(A, B, C, (int)get_group_id(2), packed_a, packed_b, offset_c)   // pad.cl's
#endif
  {
    // One tile, over K-slices s0 to s1: the whole GEMM of one tile, in a scope of its own so that
    // nothing of the piece is kept through the inner loop.
#if STREAMK
    TILE_ORIGIN(M, N, tile_v)
    const int s0 = s0_v, s1 = s1_v;
#else
    GRID_ORIGIN
    const int s0 = 0, s1 = slices;
#endif
    const __global real* const Ablock = A + m0 + (size_t)s0 * KWG * lda;
#if BKFAST
    const __global real* const Bblock = B + (size_t)n0 * ldb + s0 * KWG;
#else
    const __global real* const Bblock = B + n0 + (size_t)s0 * KWG * ldb;
#endif
    PRAGMA(unroll)
    for (int i = 0; i < WPTM; i++) {
      PRAGMA(unroll)
      for (int j = 0; j < WPTN; j++) { acc[i][j] = ZERO; }
    }
    const int tiles = s1 - s0;   // K-slices of this tile to multiply
#if STAGE == 0
    pipe_unstaged(acc, Ablock, lda, Bblock, ldb, tiles, tid, tx, ty, frag);
#elif MMA == 2
    pipe_ahead(acc, Alm, Blm, Ablock, lda, Bblock, ldb, tiles, tid, frag);
#elif ABUF
    pipe_async(acc, Alm, Blm, Ablock, lda, Bblock, ldb, tiles, tid, tx, ty, frag);
#elif PIPE == 0
    pipe_0(acc, Alm, Blm, Ablock, lda, Bblock, ldb, tiles, tid, tx, ty, frag);
#elif PIPE == 1
    pipe_1(acc, Alm, Blm, Ablock, lda, Bblock, ldb, tiles, tid, tx, ty, frag);
#else
    pipe_2(acc, Alm, Blm, Ablock, lda, Bblock, ldb, tiles, tid, tx, ty, frag);
#endif
  }

#if STREAMK
  // The piece again, from memory: nothing of it was kept through the inner loop.
  TILE_ORIGIN(M, N, tile_v)
  if (slot_v >= 0) {
    // Part of a split tile.
    __global real* const part = work + (size_t)slot_v * (MWG * NWG);
    PRAGMA(unroll)
    for (int i = 0; i < WPTM; i++) {
      PRAGMA(unroll)
      for (int j = 0; j < WPTN; j++) { part[NCOL(tid, ty, j) * MWG + MROW(tid, tx, i)] = acc[i][j]; }
    }
    return;
  }
#else
  GRID_ORIGIN
#endif
  // Every loop over acc is unrolled: one the compiler leaves rolled indexes acc at run time,
  // which puts it in memory (WPTM x WPTN = 16 x 8: a 512-byte stack frame, s 44,437 GFLOP/s).
  PRAGMA(unroll)
  for (int i = 0; i < WPTM; i++) {
    const int m = m0 + MROW(tid, tx, i);
    if (m < M) {
      PRAGMA(unroll)
      for (int j = 0; j < WPTN; j++) {
        const int n = n0 + NCOL(tid, ty, j);
        if (n < N) { STORE_AXPBY(C[n * ldc + m], acc[i][j], alpha, beta); }
      }
    }
  }
}
#endif
