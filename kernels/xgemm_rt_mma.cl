// xgemm_rt with MMA = 1: multiply_slice by matrix instructions. Included by xgemm_rt.cl in
// place of xgemm_rt_compute.cl, which has the same function for one work-item's own results.
//
// Each group of 32 work-items (a warp) owns an (8 WPTM) x (4 WPTN) block of the tile, made of
// WPTM/2 x WPTN/2 blocks of 16 x 8, and multiplies them 8 values of k at a time with one matrix
// instruction per block: lane (g, q) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2q
// and 2q + 1 of each block's results as acc[2i + h][2j + c], and for each block of 8 k supplies
// A at rows g, g + 8 and k = q, q + 4, and B at column g and k = q, q + 4. The warp's block
// starts at row MMA_WM(tid) and column MMA_WN(tid) of the tile.
#define MMA_G(tid) (((tid) % 32) / 4)
#define MMA_Q(tid) (((tid) % 32) % 4)
#define MMA_WM(tid) ((((tid) / 32) % (MDIMC / 8)) * (8 * WPTM))
#define MMA_WN(tid) ((((tid) / 32) / (MDIMC / 8)) * (4 * WPTN))
// Where work-item tid (or tx, ty: unused here) keeps result i along M and j along N of the tile.
#define MROW(tid, tx, i) (MMA_WM(tid) + ((i) / 2) * 16 + ((i) % 2) * 8 + MMA_G(tid))
#define NCOL(tid, ty, j) (MMA_WN(tid) + ((j) / 2) * 8 + 2 * MMA_Q(tid) + (j) % 2)
#if MMA_F64
  // d0..d3 += a0..a3 (16 x 8) * b0, b1 (8 x 8), the registers as above (fa_, fb_, g and q are
  // for the spelled-out instruction below).
  #define MMA16X8X8(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, fa_, fb_, g, q) { \
        double c0 = (d0), c1 = (d1), c2 = (d2), c3 = (d3); \
        __asm__ __volatile__("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, " \
                             "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" \
                             : "+d"(c0), "+d"(c1), "+d"(c2), "+d"(c3) \
                             : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1)); \
        (d0) = c0; (d1) = c1; (d2) = c2; (d3) = c3; \
      }
#else
  // The same instruction, spelled out: the warp's fragments go through local memory (fa_ and
  // fb_, the warp's 16 x 8 and 8 x 8 doubles) as the matrices they are, and each lane sums its
  // four results. Every work-item reaches every multiply, so the barriers are safe; on such
  // devices this path is for tests.
  #define MMA_FRAG_DOUBLES (16 * 8 + 8 * 8)   // the warp's scratch: fa_ and fb_
  #define MMA16X8X8(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, fa_, fb_, g, q) { \
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
// fa and fb: the fragments of A and B for one block of 8 values of k, from the slices at aslice
// and bslice (rows of lda and ldb elements, one row per k).
#define LOAD_FRAGMENTS(fa, fb, aslice, lda, bslice, ldb, wm, wn, g, q, kk) { \
    const __local real* alo = (aslice) + ((kk) + q) * (lda) + wm + g; \
    const __local real* blo = (bslice) + ((kk) + q) * (ldb) + wn + g; \
    for (int i = 0; i < WPTM / 2; i++) { \
      fa[i][0] = alo[16 * i]; fa[i][1] = alo[16 * i + 8]; \
      fa[i][2] = alo[4 * (lda) + 16 * i]; fa[i][3] = alo[4 * (lda) + 16 * i + 8]; \
    } \
    for (int j = 0; j < WPTN / 2; j++) { fb[j][0] = blo[8 * j]; fb[j][1] = blo[4 * (ldb) + 8 * j]; } \
  }
#define BLOCK_MMA(acc, fa_, fb_, g, q, i, j, P, a, b) \
  MMA16X8X8(acc[2 * (i)][2 * (j)]P, acc[2 * (i)][2 * (j) + 1]P, acc[2 * (i) + 1][2 * (j)]P, \
            acc[2 * (i) + 1][2 * (j) + 1]P, a[0], a[1], a[2], a[3], b[0], b[1], fa_, fb_, g, q)
#if IS_COMPLEX
  // (ar + i ai)(br + i bi): four real products, ai negated once for the real part.
  #define MULTIPLY_FRAGMENTS(acc, fa, fb, fa_, fb_, g, q) \
    for (int i = 0; i < WPTM / 2; i++) { \
      const double ar[4] = {fa[i][0].x, fa[i][1].x, fa[i][2].x, fa[i][3].x}; \
      const double ai[4] = {fa[i][0].y, fa[i][1].y, fa[i][2].y, fa[i][3].y}; \
      const double an[4] = {-ai[0], -ai[1], -ai[2], -ai[3]}; \
      for (int j = 0; j < WPTN / 2; j++) { \
        const double br[2] = {fb[j][0].x, fb[j][1].x}, bi[2] = {fb[j][0].y, fb[j][1].y}; \
        BLOCK_MMA(acc, fa_, fb_, g, q, i, j, .x, ar, br) BLOCK_MMA(acc, fa_, fb_, g, q, i, j, .x, an, bi) \
        BLOCK_MMA(acc, fa_, fb_, g, q, i, j, .y, ar, bi) BLOCK_MMA(acc, fa_, fb_, g, q, i, j, .y, ai, br) \
      } \
    }
#else
  #define MULTIPLY_FRAGMENTS(acc, fa, fb, fa_, fb_, g, q) \
    for (int i = 0; i < WPTM / 2; i++) { \
      for (int j = 0; j < WPTN / 2; j++) { BLOCK_MMA(acc, fa_, fb_, g, q, i, j, , fa[i], fb[j]) } \
    }
#endif

#if MMA == 2
// MMA 2 multiplies 16 x 8 x 4 blocks, half the depth of MMA 1's: lane (g, q) supplies A at rows g,
// g + 8 and k = q, B at column g and k = q, and holds the same results. With the depth halved, the
// fragments of one step (4 values of k) take half the registers of MMA 1's, so that two steps'
// fit where one did: pipe_ahead reads the next step's while this one's matrix instructions run,
// across the barrier between slices too, as CUTLASS's multistage loop does.
// One step's fragments: A's two values per 16-row block, B's one per 8-column block.
typedef struct { real a[WPTM / 2][2]; real b[WPTN / 2]; } step_fragments;
// f: the fragments of values k to k + 3 of the slice at aslice and bslice.
#define LOAD_STEP(f, aslice, lda, bslice, ldb, wm, wn, g, q, k) { \
    const __local real* alo = (aslice) + ((k) + q) * (lda) + wm + g; \
    const __local real* blo = (bslice) + ((k) + q) * (ldb) + wn + g; \
    PRAGMA(unroll) \
    for (int i = 0; i < WPTM / 2; i++) { f.a[i][0] = alo[16 * i]; f.a[i][1] = alo[16 * i + 8]; } \
    PRAGMA(unroll) \
    for (int j = 0; j < WPTN / 2; j++) { f.b[j] = blo[8 * j]; } \
  }
#if MMA_F64
  #define MMA16X8X4(d0, d1, d2, d3, a0, a1, b0, fa_, fb_, g, q) { \
        double c0 = (d0), c1 = (d1), c2 = (d2), c3 = (d3); \
        __asm__ __volatile__("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, " \
                             "{%4, %5}, {%6}, {%0, %1, %2, %3};" \
                             : "+d"(c0), "+d"(c1), "+d"(c2), "+d"(c3) : "d"(a0), "d"(a1), "d"(b0)); \
        (d0) = c0; (d1) = c1; (d2) = c2; (d3) = c3; \
      }
#define STEP_MMA(acc, fa_, fb_, g, q, i, j, P, a0, a1, b0) \
  MMA16X8X4(acc[2 * (i)][2 * (j)]P, acc[2 * (i)][2 * (j) + 1]P, acc[2 * (i) + 1][2 * (j)]P, \
            acc[2 * (i) + 1][2 * (j) + 1]P, a0, a1, b0, fa_, fb_, g, q)
#if IS_COMPLEX
  // (ar + i ai)(br + i bi) as four real products; bi is the one negated for the real part: a step
  // holds WPTN / 2 values of B against WPTM of A, and registers are what z runs short of.
  #define MULTIPLY_ROWS(acc, f, fa_, fb_, g, q, first, end) \
    PRAGMA(unroll) \
    for (int i = (first); i < (end); i++) { \
      PRAGMA(unroll) \
      for (int j = 0; j < WPTN / 2; j++) { \
        STEP_MMA(acc, fa_, fb_, g, q, i, j, .x, f.a[i][0].x, f.a[i][1].x, f.b[j].x) \
        STEP_MMA(acc, fa_, fb_, g, q, i, j, .x, f.a[i][0].y, f.a[i][1].y, -f.b[j].y) \
        STEP_MMA(acc, fa_, fb_, g, q, i, j, .y, f.a[i][0].x, f.a[i][1].x, f.b[j].y) \
        STEP_MMA(acc, fa_, fb_, g, q, i, j, .y, f.a[i][0].y, f.a[i][1].y, f.b[j].x) \
      } \
    }
#else
  #define MULTIPLY_ROWS(acc, f, fa_, fb_, g, q, first, end) \
    PRAGMA(unroll) \
    for (int i = (first); i < (end); i++) { \
      PRAGMA(unroll) \
      for (int j = 0; j < WPTN / 2; j++) { STEP_MMA(acc, fa_, fb_, g, q, i, j, , f.a[i][0], f.a[i][1], f.b[j]) } \
    }
#endif
#else
  // The step's matrix instructions spelled out for devices without them (this path is for tests):
  // the warp's fragments of row blocks first .. end - 1 and of B go through local memory (the
  // warp's scratch at fa_) as the matrices they are, and each lane sums the products of its
  // results from there. Two barriers a call: with two an instruction, the unrolled pipelines held
  // hundreds, and PoCL's compiler took up to ten minutes over one kernel. Every work-item makes
  // every call with rows to multiply (a constant condition), so the barriers are safe.
  #undef MMA_FRAG_DOUBLES
  #define MMA_FRAG_DOUBLES (((WPTM / 2) * 64 + (WPTN / 2) * 32) * sizeof(real) / sizeof(double))
  #define MULTIPLY_ROWS(acc, f, fa_, fb_, g, q, first, end) if ((first) < (end)) { \
      __local real* const sa_ = (__local real*)(fa_);   /* [block i][row 0..15][k 0..3] */ \
      __local real* const sb_ = sa_ + (WPTM / 2) * 64;  /* [block j][column 0..7][k 0..3] */ \
      for (int i = (first); i < (end); i++) { \
        sa_[(16 * i + g) * 4 + q] = f.a[i][0]; sa_[(16 * i + g + 8) * 4 + q] = f.a[i][1]; \
      } \
      for (int j = 0; j < WPTN / 2; j++) { sb_[(8 * j + g) * 4 + q] = f.b[j]; } \
      barrier(CLK_LOCAL_MEM_FENCE); \
      for (int i = (first); i < (end); i++) { \
        for (int j = 0; j < WPTN / 2; j++) { \
          for (int k = 0; k < 4; k++) { \
            const real a0 = sa_[(16 * i + g) * 4 + k], a1 = sa_[(16 * i + g + 8) * 4 + k]; \
            const real b0 = sb_[(8 * j + 2 * q) * 4 + k], b1 = sb_[(8 * j + 2 * q + 1) * 4 + k]; \
            MULADD(acc[2 * i][2 * j], a0, b0); MULADD(acc[2 * i][2 * j + 1], a0, b1); \
            MULADD(acc[2 * i + 1][2 * j], a1, b0); MULADD(acc[2 * i + 1][2 * j + 1], a1, b1); \
          } \
        } \
      } \
      barrier(CLK_LOCAL_MEM_FENCE); \
    }
#endif
// MULTIPLY_ROWS: a step's matrix instructions of row blocks first .. end - 1. The next step's
// fragments are read after HALF_ROWS of them: its registers were last read by the step before
// this one, whose matrix instructions must have taken their operands before the reads overwrite
// them, and a warp issues in order: reads ahead of the whole step hold it back until then. In the
// middle of the step they measured 4 % faster for z at 8192^3 on the H200 and 1-3 % slower for d,
// whose steps are a quarter as long (docs/fp64.md, "Fragments read mid-step").
#define HALF_ROWS (IS_COMPLEX ? WPTM / 4 : 0)
// d with three local buffers keeps three steps' fragments instead (pipe_ahead): a round of
// 3 KWG / 4 steps gives each step's the same registers in every round.
#define FRAG_SETS (!IS_COMPLEX && ABUF == 3 ? 3 : 2)
#endif

// acc += the slice at aslice (KWG rows of lda elements along M) times the one at bslice (rows of
// ldb along N). frag is the warp's scratch of the spelled-out instruction, unused with MMA_F64;
// tx and ty are not used: the lanes of a warp are laid out by tid.
INLINE_FUNC void multiply_slice(real acc[WPTM][WPTN], const OPERANDS real* aslice, const int lda,
                           const OPERANDS real* bslice, const int ldb, const int tid, const int tx, const int ty,
                           __local real* frag) {
  const int g = MMA_G(tid), q = MMA_Q(tid), wm = MMA_WM(tid), wn = MMA_WN(tid);
  __local double* const fa_ = (__local double*)frag;
  __local double* const fb_ = fa_ + 16 * 8;
  real fa[WPTM / 2][4], fb[WPTN / 2][2];
  PRAGMA(unroll)
  for (int kk = 0; kk < KWG; kk += 8) {
    LOAD_FRAGMENTS(fa, fb, aslice, lda, bslice, ldb, wm, wn, g, q, kk)
    MULTIPLY_FRAGMENTS(acc, fa, fb, fa_, fb_, g, q)
  }
}
