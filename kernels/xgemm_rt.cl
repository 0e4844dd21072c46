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
// stores them element by element (with PIPE 5 and 6 too, while A's slices go by asynchronous
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
// With PIPE = 5 or 6, the slices go from global to local memory without passing through
// registers, into ABUF = 2 or 3 local buffers: NVIDIA's cp.async (compute capability 8.0 and
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
// With STAGE = 0 nothing is staged: each work-item reads its operands for step k straight from
// A and B (B n-fastest) through the device's cache, and the loop needs no barrier at all
// (CLBlast's SA = SB = 0).
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
#define PIPE 2      // 0 load, then compute; 1 next K-slice prefetched into registers; 2 and double-buffered local memory; 5, 6 asynchronous copies into 2, 3 local buffers
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
#define MMA 0       // 0: each work-item multiplies its own results; 1: each group of 32 multiplies 16 x 8 x 8 blocks together with matrix instructions (d and z)
#endif
#ifndef STREAMK
#define STREAMK 0   // 0: one work-group per tile; n: the last round's tiles (rounds of n work-groups per compute unit) cut along K into pieces that end together
#endif
#if !defined(CP_ASYNC)  // a fact about the device, not a tuned parameter: gemmtune defines it when it builds
#define CP_ASYNC 0
#endif
#if !defined(MMA_F64)   // likewise: NVIDIA's mma.sync on 16 x 8 x 8 doubles (compute capability 9.0 and later)
#define MMA_F64 0
#endif

#include "pad.cl"   // the operand preparation kernels, and their TRANSPOSEX/TRANSPOSEY

#define WGS (MDIMC * NDIMC)            // work-items per work-group
#define WPTM (MWG / MDIMC)             // results per work-item along M
#define WPTN (NWG / NDIMC)             // results per work-item along N
#define LDAL (MWG + PADL)              // local row length of the A slice
#define LDBL (NWG + PADL)              // local row length of the B slice
#define LPTA ((KWG * MWG) / (VWG * WGS))  // vector loads per work-item, A slice
#define LPTB ((KWG * NWG) / (VWG * WGS))  // vector loads per work-item, B slice
#define ABUF (PIPE >= 5 ? PIPE - 3 : 0)  // local buffers of the asynchronous copies, 0 without them
#define NBUF (ABUF ? ABUF : PIPE >= 2 ? 2 : 1)  // local buffers per slice
#if STAGE
  #define OPERANDS __local               // where the inner loop reads its operands from
#else
  #define OPERANDS __global
#endif

// Constraints, checked by gemmtune.space before any build:
//   1. MWG % MDIMC == 0 and NWG % NDIMC == 0: WPTM and WPTN are integers
//   2. MDIMC <= max work-item size[0], NDIMC <= max work-item size[1], WGS <= max work-group size
//   3. KWG * MWG and KWG * NWG are multiples of VWG * WGS, and MWG, NWG (KWG if BKFAST) of VWG:
//      whole vector loads; with BKFAST = 2, KWG * NWG a multiple of VWG * VWG * WGS: whole blocks
//   4. WPTM % VLM == 0, WPTN % VLN == 0, and PADL keeps local rows aligned to VWG, VLM and VLN
//   5. STAGE * NBUF * KWG * (LDAL + LDBL) * sizeof(real) <= local memory size
//   6. KWG % UNROLL == 0
//   7. WARPM == 0, or WGS % 32 == 0, WARPM divides 32 and MDIMC, and 32 / WARPM divides NDIMC
//   8. WPTM * WPTN accumulators take at most 128 32-bit registers (room left for operands)
//  10. STAGE == 1, or STAGE == 0 with PIPE == 0, PADL == 0, VWG == 1 and BKFAST == 0: without
//      staging, those parameters do not apply, and B is read n-fastest so that a work-item's
//      WPTN values of B for one k are contiguous
//  11. PIPE is 0, 1, 2, 5 or 6, and BKFAST 0 or 1 with PIPE 5 or 6: B goes by asynchronous
//      copies as it is in global memory, or through registers a vector of a column at a time
//      (BKFAST = 1); BKFAST 2's blocks, VWG times the registers, are not built for that pipeline
//  12. MMA == 0, or MMA == 1 with: d or z on a device with MMA_F64; MDIMC % 8 == 0 and NDIMC % 4 == 0 (groups
//      of 32 as 8 x 4 work-items); WPTM, WPTN even and KWG % 8 == 0 (whole 16 x 8 x 8 blocks);
//      STAGE == 1, and VLM, VLN, UNROLL == 1, WARPM == 0, which do not apply to it
#if MWG % MDIMC != 0 || NWG % NDIMC != 0 || (KWG * MWG) % (VWG * WGS) != 0 || (KWG * NWG) % (VWG * WGS) != 0
#error "xgemm_rt: tiles must split evenly over work-items and vector loads"
#endif
#if STAGE != 0 && STAGE != 1
#error "xgemm_rt: STAGE is 0 or 1"
#endif
#if STAGE == 0 && (PIPE != 0 || PADL != 0 || VWG != 1 || BKFAST != 0)
#error "xgemm_rt: without staging (STAGE = 0), PIPE, PADL and BKFAST must be 0 and VWG 1"
#endif
#if (PIPE != 0 && PIPE != 1 && PIPE != 2 && PIPE != 5 && PIPE != 6) || (PIPE >= 5 && BKFAST == 2)
#error "xgemm_rt: PIPE is 0, 1, 2, 5 or 6, and asynchronous copies (PIPE 5 and 6) need BKFAST 0 or 1"
#endif
#if MMA != 0 && MMA != 1
#error "xgemm_rt: MMA is 0 or 1"
#endif
#if MMA && (PRECISION == 32 || PRECISION == 3232 || MDIMC % 8 != 0 || NDIMC % 4 != 0 || WPTM % 2 != 0 \
            || WPTN % 2 != 0 || KWG % 8 != 0 || STAGE != 1 || VLM != 1 || VLN != 1 \
            || UNROLL != 1 || WARPM != 0)
#error "xgemm_rt: MMA = 1 needs d or z, 8 x 4 work-items per group of 32, whole 16 x 8 x 8 blocks, staging"
#endif
#if BKFAST == 2 && (KWG * NWG) % (VWG * VWG * WGS) != 0
#error "xgemm_rt: with BKFAST = 2 the B slice must split evenly into VWG x VWG blocks per work-item"
#endif

// Vector types: VW elements of `real` moved as one OpenCL vector of the underlying scalar.
#if PRECISION == 32 || PRECISION == 3232
  #define SCALAR float
#else
  #define SCALAR double
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if IS_COMPLEX
  #define SCALARS_1 2
  #define SCALARS_2 4
  #define SCALARS_4 8
  #define SCALARS_8 16
#else
  #define SCALARS_1 1
  #define SCALARS_2 2
  #define SCALARS_4 4
  #define SCALARS_8 8
#endif
#define VEC_(a, b) a##b
#define VEC(a, b) VEC_(a, b)   // not CAT: VTYPE_n is expanded inside CAT, which cannot recurse
#define VTYPE_1 SCALAR
#define VTYPE_2 VEC(SCALAR, 2)
#define VTYPE_4 VEC(SCALAR, 4)
#define VTYPE_8 VEC(SCALAR, 8)
#define VTYPE_16 VEC(SCALAR, 16)
#define VTYPE(w) CAT(VTYPE_, CAT(SCALARS_, w))
typedef VTYPE(VWG) gvec;       // a global load
typedef VTYPE(VLM) mvec;       // a local read of A
typedef VTYPE(VLN) nvec;       // a local read of B
typedef union { gvec v; real e[VWG]; } gunion;
typedef union { mvec v; real e[VLM]; } munion;
typedef union { nvec v; real e[VLN]; } nunion;

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)

// Local index along M of chunk c, lane j of work-item tx: chunks of VLM consecutive elements,
// consecutive work-items on consecutive chunks (VLM = 1 is strided, VLM = WPTM blocked).
#define MLOC(tx, c, j) ((c) * (MDIMC * VLM) + (tx) * VLM + (j))
#define NLOC(ty, c, j) ((c) * (NDIMC * VLN) + (ty) * VLN + (j))
// With STREAMK: tile number `tile`, counted down M first (as the 2D grid's groups are), is the
// tile of C at (m0, n0).
#define TILE_ORIGIN(tile) \
  const int m0 = ((tile) % ((M + MWG - 1) / MWG)) * MWG, n0 = ((tile) / ((M + MWG - 1) / MWG)) * NWG;

__kernel __attribute__((reqd_work_group_size(MDIMC, NDIMC, 1)))
void xgemm(const int M, const int N, const int Kp, const real alpha, const real beta,
           const __global real* restrict A, const int lda,
           const __global real* restrict B, const int ldb,
           __global real* C, const int ldc,
           const int split_from, const __global int4* restrict pieces, __global real* restrict work) {
  // Aligned for the widest vector access: NVIDIA faults on a misaligned vector access to local memory.
#if STAGE
  __local real Alm[NBUF * KWG * LDAL] __attribute__((aligned(128)));
  __local real Blm[NBUF * KWG * LDBL] __attribute__((aligned(128)));
#endif
#if MMA && !MMA_F64
  __local double mma_frag[WGS / 32][16 * 8 + 8 * 8];   // the spelled-out matrix instructions' operands
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
  real acc[WPTM][WPTN];

  gunion ra[LPTA], rb[LPTB];
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
  #define BLOCK(l) (tid + ((l) / VWG) * WGS)
  #define LOAD_B(k0, v, l) ((const __global gvec*)(Bblock + ((BLOCK(l) / (KWG / VWG)) * VWG + (l) % VWG) * ldb + (k0)))[BLOCK(l) % (KWG / VWG)]
  #define STORE_B(buf, v, l) \
    if ((l) % VWG == VWG - 1) { \
      for (int j = 0; j < VWG; j++) { \
        gunion bt; \
        for (int i = 0; i < VWG; i++) { bt.e[i] = rb[(l) - (VWG - 1) + i].e[j]; } \
        *((__local gvec*)(Blm + (buf) * KWG * LDBL + ((BLOCK(l) % (KWG / VWG)) * VWG + j) * LDBL \
                          + (BLOCK(l) / (KWG / VWG)) * VWG)) = bt.v; \
      } \
    }
#elif BKFAST
  // B column n of the slice is contiguous along k: vector v is column v / (KWG/VWG), piece
  // v % (KWG/VWG); its elements go to VWG rows of the k-major local slice.
  #define LOAD_B(k0, v, l) ((const __global gvec*)(Bblock + ((v) / (KWG / VWG)) * ldb + (k0)))[(v) % (KWG / VWG)]
  #define STORE_B(buf, v, l) \
    for (int j = 0; j < VWG; j++) { \
      Blm[(buf) * KWG * LDBL + (((v) % (KWG / VWG)) * VWG + j) * LDBL + (v) / (KWG / VWG)] = rb[l].e[j]; \
    }
#else
  #define LOAD_B(k0, v, l) *SLICE_SRC(Bblock, ldb, NWG, k0, v)
  #define STORE_B(buf, v, l) *SLICE_DST(Blm, LDBL, NWG, buf, v) = rb[l].v
#endif
  // Global -> registers -> local: consecutive work-items take consecutive vectors, so the loads
  // are coalesced.
  #define LOAD_GLOBAL(k0) \
    for (int l = 0; l < LPTA; l++) { \
      const int v = tid + l * WGS; \
      ra[l].v = *SLICE_SRC(Ablock, lda, MWG, k0, v); \
    } \
    for (int l = 0; l < LPTB; l++) { \
      const int v = tid + l * WGS; \
      rb[l].v = LOAD_B(k0, v, l); \
    }
  #define STORE_LOCAL(buf) \
    for (int l = 0; l < LPTA; l++) { \
      const int v = tid + l * WGS; \
      *SLICE_DST(Alm, LDAL, MWG, buf, v) = ra[l].v; \
    } \
    for (int l = 0; l < LPTB; l++) { \
      const int v = tid + l * WGS; \
      STORE_B(buf, v, l); \
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
    #else
      #define WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory")
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
  #define COPY_SLICE(buf, s) \
    PRAGMA(unroll) \
    for (int l = 0; l < LPTA; l++) { \
      COPY(SLICE_DST(Alm, LDAL, MWG, buf, tid + l * WGS), asrc[l]); \
      asrc[l] = (const __global gvec*)((const __global real*)asrc[l] + KWG * lda); \
    } \
    COPY_B(buf, s)
  #define ASRC const __global gvec* asrc[LPTA]; \
    PRAGMA(unroll) \
    for (int l = 0; l < LPTA; l++) { asrc[l] = SLICE_SRC(Ablock, lda, MWG, 0, tid + l * WGS); }
  #if BKFAST
    // B column n is contiguous along k, so it cannot land in the k-major slice by a copy of
    // whole vectors: it goes through registers as with PIPE 1 (LOAD_B, STORE_B), each slice loaded
    // while the one before it is computed and stored after the next step's barrier, when its
    // buffer is free. On the H200 (s at 4096^3, whole operation) this measured 49,571 GFLOP/s
    // with PADL 4 and WARPM 0, one 4-byte asynchronous copy per element 36,489, and the s
    // default, B transposed by a pass and copied asynchronously, 50,971 (docs/performance.md).
    #define LOAD_B_SLICE(s) \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { rb[l].v = LOAD_B((s) * KWG, tid + l * WGS, l); }
    #define COPY_B(buf, s) \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { STORE_B(buf, tid + l * WGS, l); } \
      if ((s) + 1 < tiles) { LOAD_B_SLICE((s) + 1) }
    #define BSRC if (tiles > 0) { LOAD_B_SLICE(0) }
  #else
    #define COPY_B(buf, s) \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { \
        COPY(SLICE_DST(Blm, LDBL, NWG, buf, tid + l * WGS), bsrc[l]); \
        bsrc[l] = (const __global gvec*)((const __global real*)bsrc[l] + KWG * ldb); \
      }
    #define BSRC const __global gvec* bsrc[LPTB]; \
      PRAGMA(unroll) \
      for (int l = 0; l < LPTB; l++) { bsrc[l] = SLICE_SRC(Bblock, ldb, NWG, 0, tid + l * WGS); }
  #endif
#endif
#if MMA
  // Each group of 32 work-items (a warp) owns an (8 WPTM) x (4 WPTN) block of the tile, made of
  // WPTM/2 x WPTN/2 blocks of 16 x 8, and multiplies them 8 values of k at a time with one matrix
  // instruction per block: lane (g, q) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2q
  // and 2q + 1 of each block's results as acc[2i + h][2j + c], and for each block of 8 k supplies
  // A at rows g, g + 8 and k = q, q + 4, and B at column g and k = q, q + 4.
  const int lane = tid % 32, g = lane / 4, q = lane % 4;
  const int wm = ((tid / 32) % (MDIMC / 8)) * (8 * WPTM);
  const int wn = ((tid / 32) / (MDIMC / 8)) * (4 * WPTN);
  #define MROW(i) (wm + ((i) / 2) * 16 + ((i) % 2) * 8 + g)
  #define NCOL(j) (wn + ((j) / 2) * 8 + 2 * q + (j) % 2)
  #if MMA_F64
    // d0..d3 += a0..a3 (16 x 8) * b0, b1 (8 x 8), the registers as above.
    #define MMA16X8X8(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1) { \
        double c0 = (d0), c1 = (d1), c2 = (d2), c3 = (d3); \
        __asm__ __volatile__("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, " \
                             "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" \
                             : "+d"(c0), "+d"(c1), "+d"(c2), "+d"(c3) \
                             : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1)); \
        (d0) = c0; (d1) = c1; (d2) = c2; (d3) = c3; \
      }
  #else
    // The same instruction, spelled out: the warp's fragments go through local memory as the
    // 16 x 8 and 8 x 8 matrices they are, and each lane sums its four results. Every work-item
    // reaches every multiply, so the barriers are safe; on such devices this path is for tests.
    __local double* const fa_ = mma_frag[tid / 32];
    __local double* const fb_ = fa_ + 16 * 8;
    #define MMA16X8X8(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1) { \
        fa_[g * 8 + q] = (a0); fa_[(g + 8) * 8 + q] = (a1); \
        fa_[g * 8 + q + 4] = (a2); fa_[(g + 8) * 8 + q + 4] = (a3); \
        fb_[g * 8 + q] = (b0); fb_[g * 8 + q + 4] = (b1); \
        barrier(CLK_LOCAL_MEM_FENCE); \
        for (int k = 0; k < 8; k++) { \
          (d0) += fa_[g * 8 + k] * fb_[2 * q * 8 + k]; (d1) += fa_[g * 8 + k] * fb_[(2 * q + 1) * 8 + k]; \
          (d2) += fa_[(g + 8) * 8 + k] * fb_[2 * q * 8 + k]; (d3) += fa_[(g + 8) * 8 + k] * fb_[(2 * q + 1) * 8 + k]; \
        } \
        barrier(CLK_LOCAL_MEM_FENCE); \
      }
  #endif
  real fa[WPTM / 2][4], fb[WPTN / 2][2];
  #define LOAD_FRAGMENTS(buf, kk) { \
      const __local real* alo = Alm + (buf) * KWG * LDAL + ((kk) + q) * LDAL + wm + g; \
      const __local real* blo = Blm + (buf) * KWG * LDBL + ((kk) + q) * LDBL + wn + g; \
      for (int i = 0; i < WPTM / 2; i++) { \
        fa[i][0] = alo[16 * i]; fa[i][1] = alo[16 * i + 8]; \
        fa[i][2] = alo[4 * LDAL + 16 * i]; fa[i][3] = alo[4 * LDAL + 16 * i + 8]; \
      } \
      for (int j = 0; j < WPTN / 2; j++) { fb[j][0] = blo[8 * j]; fb[j][1] = blo[4 * LDBL + 8 * j]; } \
    }
  #define BLOCK_MMA(i, j, P, a, b) \
    MMA16X8X8(acc[2 * (i)][2 * (j)]P, acc[2 * (i)][2 * (j) + 1]P, acc[2 * (i) + 1][2 * (j)]P, \
              acc[2 * (i) + 1][2 * (j) + 1]P, a[0], a[1], a[2], a[3], b[0], b[1])
  #if IS_COMPLEX
    // (ar + i ai)(br + i bi): four real products, ai negated once for the real part.
    #define MULTIPLY_FRAGMENTS() \
      for (int i = 0; i < WPTM / 2; i++) { \
        const double ar[4] = {fa[i][0].x, fa[i][1].x, fa[i][2].x, fa[i][3].x}; \
        const double ai[4] = {fa[i][0].y, fa[i][1].y, fa[i][2].y, fa[i][3].y}; \
        const double an[4] = {-ai[0], -ai[1], -ai[2], -ai[3]}; \
        for (int j = 0; j < WPTN / 2; j++) { \
          const double br[2] = {fb[j][0].x, fb[j][1].x}, bi[2] = {fb[j][0].y, fb[j][1].y}; \
          BLOCK_MMA(i, j, .x, ar, br) BLOCK_MMA(i, j, .x, an, bi) \
          BLOCK_MMA(i, j, .y, ar, bi) BLOCK_MMA(i, j, .y, ai, br) \
        } \
      }
  #else
    #define MULTIPLY_FRAGMENTS() \
      for (int i = 0; i < WPTM / 2; i++) { \
        for (int j = 0; j < WPTN / 2; j++) { BLOCK_MMA(i, j, , fa[i], fb[j]) } \
      }
  #endif
  #define COMPUTE(buf, k0) \
    PRAGMA(unroll) \
    for (int kk = 0; kk < KWG; kk += 8) { LOAD_FRAGMENTS(buf, kk) MULTIPLY_FRAGMENTS() }
#else
  #define MROW(i) MLOC(tx, (i) / VLM, (i) % VLM)
  #define NCOL(j) NLOC(ty, (j) / VLN, (j) % VLN)
  // Operands of step k of the slice at k0: WPTM values of A and WPTN of B, read into set f from
  // local buffer buf or, without staging, from global memory.
  real a[2][WPTM], b[2][WPTN];
#if STAGE
  #define ROWS(buf, k0, k) \
      const __local real* arow = Alm + (buf) * KWG * LDAL + (k) * LDAL; \
      const __local real* brow = Blm + (buf) * KWG * LDBL + (k) * LDBL;
#else
  #define ROWS(buf, k0, k) \
      const __global real* arow = Ablock + ((k0) + (k)) * lda; \
      const __global real* brow = Bblock + ((k0) + (k)) * ldb;
#endif
  #define LOAD_OPERANDS(buf, k0, k, f) { \
      ROWS(buf, k0, k) \
      PRAGMA(unroll) \
      for (int c = 0; c < WPTM / VLM; c++) { \
        munion u; u.v = *((const OPERANDS mvec*)(arow + MLOC(tx, c, 0))); \
        for (int j = 0; j < VLM; j++) { a[f][c * VLM + j] = u.e[j]; } \
      } \
      PRAGMA(unroll) \
      for (int c = 0; c < WPTN / VLN; c++) { \
        nunion u; u.v = *((const OPERANDS nvec*)(brow + NLOC(ty, c, 0))); \
        for (int j = 0; j < VLN; j++) { b[f][c * VLN + j] = u.e[j]; } \
      } \
    }
  // The results row by row in a zig-zag, from the last column: consecutive multiply-adds share a
  // value of A, and at each turn one of B. Only the order changes, and with it what NVIDIA's
  // compiler makes of the step: on the H200 (s at 4096^3, the former s default's 128 x 128
  // tiles) xgemm took 2,624 us against 2,648 row by row (docs/performance.md, multiply-add order).
  #define MULTIPLY(f) \
    PRAGMA(unroll) \
    for (int i = 0; i < WPTM; i++) { \
      PRAGMA(unroll) \
      for (int jj = 0; jj < WPTN; jj++) { \
        const int j = i % 2 ? jj : WPTN - 1 - jj; \
        MULADD(acc[i][j], a[f][i], b[f][j]); \
      } \
    }
  #define COMPUTE(buf, k0) \
    PRAGMA(unroll UNROLL) \
    for (int k = 0; k < KWG; k++) { LOAD_OPERANDS(buf, k0, k, 0) MULTIPLY(0) }
#endif

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
  }
  {
    {
      TILE_ORIGIN(tile_v)
      const int s0 = s0_v, s1 = s1_v;
#else
  {
    const int m0 = get_group_id(0) * MWG, n0 = get_group_id(1) * NWG;
    {
      const int s0 = 0, s1 = slices;
#endif
  // One tile, over K-slices s0 to s1: what follows up to its end is the whole GEMM of one tile.
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
  // Every work-item reads what it multiplies; the cache, not local memory, shares it.
  for (int t = 0; t < tiles; t++) {
    COMPUTE(0, t * KWG)
  }
#elif ABUF
  // ABUF - 1 slices in flight while one is computed, one barrier per slice. Every step commits a
  // group, empty near the end, so that waiting for all but the newest ABUF - 2 groups always
  // means: slice t has landed. The loop is written out ABUF times so that every buffer index
  // is a constant (in s on the H200, PIPE 6 went from 46,475 to 48,729 GFLOP/s by it).
  ASRC
  BSRC
  for (int s = 0; s < ABUF - 1; s++) {
    if (s < tiles) { COPY_SLICE(s, s) }
    COMMIT();
  }
  #define ABUF_STEP(i) \
    if (t + (i) < tiles) { \
      WAIT_OLDEST();                  /* this work-item's copies of slice t + i have landed */ \
      barrier(CLK_LOCAL_MEM_FENCE);   /* everyone's have, and everyone is done with the slice before */ \
      if (t + (i) + ABUF - 1 < tiles) { COPY_SLICE(((i) + ABUF - 1) % ABUF, t + (i) + ABUF - 1) } \
      COMMIT(); \
      COMPUTE(i, 0) \
    }
  for (int t = 0; t < tiles; t += ABUF) {
    ABUF_STEP(0)
    ABUF_STEP(1)
  #if ABUF == 3
    ABUF_STEP(2)
  #endif
  }
#elif PIPE == 0
  for (int t = 0; t < tiles; t++) {
    LOAD_GLOBAL(t * KWG)
    STORE_LOCAL(0)
    barrier(CLK_LOCAL_MEM_FENCE);
    COMPUTE(0, 0)
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#elif PIPE == 1
  // The next slice's global loads are in flight while this slice is computed.
  LOAD_GLOBAL(0)
  for (int t = 0; t < tiles; t++) {
    STORE_LOCAL(0)
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t + 1 < tiles) { LOAD_GLOBAL((t + 1) * KWG) }
    COMPUTE(0, 0)
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#elif PIPE == 2
  // Two local buffers: the next slice is stored into the other one, one barrier per slice.
  LOAD_GLOBAL(0)
  STORE_LOCAL(0)
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int t = 0; t < tiles; t++) {
    if (t + 1 < tiles) { LOAD_GLOBAL((t + 1) * KWG) }
    COMPUTE(t & 1, 0)
    if (t + 1 < tiles) { STORE_LOCAL((t + 1) & 1) }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#endif

    }
#if STREAMK
    // The piece again, from memory: nothing of it was kept through the inner loop.
    TILE_ORIGIN(tile_v)
    if (slot_v >= 0) {
      // Part of a split tile.
      __global real* const part = work + (size_t)slot_v * (MWG * NWG);
      PRAGMA(unroll)
      for (int i = 0; i < WPTM; i++) {
        PRAGMA(unroll)
        for (int j = 0; j < WPTN; j++) { part[NCOL(j) * MWG + MROW(i)] = acc[i][j]; }
      }
      return;
    }
#endif
  // Every loop over acc is unrolled: one the compiler leaves rolled indexes acc at run time,
  // which puts it in memory (WPTM x WPTN = 16 x 8: a 512-byte stack frame, s 44,437 GFLOP/s).
  PRAGMA(unroll)
  for (int i = 0; i < WPTM; i++) {
    const int m = m0 + MROW(i);
    if (m < M) {
      PRAGMA(unroll)
      for (int j = 0; j < WPTN; j++) {
        const int n = n0 + NCOL(j);
        if (n < N) { STORE_AXPBY(C[n * ldc + m], acc[i][j], alpha, beta); }
      }
    }
  }
  }   // the tile
}

// With STREAMK: C <- alpha * (the sum of a split tile's parts, in order) + beta * C, FIXV
// consecutive elements along M per work-item (read from the parts as one vector: on the H200,
// 15.3 us instead of 25.8 for the 494 parts of s 4096^3). fixups[f] = (tile, first slot, parts)
// for work-items f * MWG * NWG / FIXV on; the element's place in the tile is column-major.
#if MWG % 4 == 0
  #define FIXV 4
#elif MWG % 2 == 0
  #define FIXV 2
#else
  #define FIXV 1
#endif
typedef union { VTYPE(FIXV) v; real e[FIXV]; } funion;
__kernel void xgemm_fixup(const int M, const int N, const real alpha, const real beta,
                          __global real* C, const int ldc, const __global int4* restrict fixups,
                          const __global real* restrict work) {
  const int4 fix = fixups[get_global_id(0) / (MWG * NWG / FIXV)];
  const int e = (get_global_id(0) % (MWG * NWG / FIXV)) * FIXV;
  TILE_ORIGIN(fix.x)
  const int m = m0 + e % MWG, n = n0 + e / MWG;
  funion sum;
  for (int i = 0; i < FIXV; i++) { sum.e[i] = ZERO; }
  for (int p = 0; p < fix.z; p++) {
    funion part;
    part.v = *((const __global VTYPE(FIXV)*)(work + (size_t)(fix.y + p) * (MWG * NWG) + e));
    for (int i = 0; i < FIXV; i++) { sum.e[i] += part.e[i]; }
  }
  if (n < N) {
    for (int i = 0; i < FIXV; i++) {
      if (m + i < M) { STORE_AXPBY(C[n * ldc + m + i], sum.e[i], alpha, beta); }
    }
  }
}
