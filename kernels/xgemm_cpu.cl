// gemmtune kernel family "xgemm_cpu": GEMM for CPUs under PoCL.
//
// C (M x N) <- alpha * op(A) * op(B) + beta * C, column-major as BLAS stores it:
//   op(A) is M x K: A(i, p) = A[offA + i + p * lda] (TRANSA 0), or A[offA + p + i * lda] (TRANSA 1;
//                   2 conjugates it too)
//   op(B) is K x N: B(p, j) = B[offB + p + j * ldb] (TRANSB 0), or B[offB + j + p * ldb] (TRANSB 1;
//                   2 conjugates it too)
//   C(i, j) = C[offC + i + j * ldc]
// Any M, N, K >= 0; nothing outside the matrices is read, and C is read only when beta != 0.
//
// Why it looks like this: a CPU has no local memory worth staging into and no lock-step warps,
// but it has wide vector registers and hardware prefetchers. So each work-item keeps an
// (MV * VW) x NR block of C in MV * NR vector registers and walks all of K, like the
// micro-kernel of a CPU BLAS: per step of K it loads MV vectors of one column of A (contiguous
// when TRANSA is 0) and NR scalars of one row of B, each broadcast into a vector multiply-add.
// No local memory and no barriers, so PoCL runs a work-group as a plain loop. With ORDER 0 the
// column blocks lie along dimension 0, so the work-groups a thread runs one after another share
// one panel of A (MR x K), which stays in its L2 cache while B streams; ORDER 1 the other way.
//
// Launch (MR = MV * VW; a global size of 0 is rounded up to 1, whose work-item returns):
//   PACKA: xgemm_pack_a(M, K, A, offA, lda, Ap), global (ceil(K / 16) * 16, ceil(M / MR)), local
//          (16, 1), into Ap of ceil(M / MR) * MR * K elements; skipped when K is 0
//   PACKB: xgemm_pack_b(N, K, B, offB, ldb, Bp), likewise with NR and N, into Bp
//   xgemm(M, N, K, alpha, beta, A, offA, lda, B, offB, ldb, C, offC, ldc[, Ap][, Bp]),
//          global (ceil(ceil(N / (NR * NB)) / WGS) * WGS, ceil(M / MR)), local (WGS, 1);
//          ORDER 1 swaps the two: (ceil(ceil(M / MR) / WGS) * WGS, ceil(N / (NR * NB)))
//   Batched (common.cl's BATCH): a dimension 2, problem z's panels z panels into Ap and Bp; xgemm
//          takes (batch, per_item) after BATCH_ARGS, each work-item computing per_item problems in
//          turn over ceil(batch / per_item), so that tiny problems do not each pay for a work-group.
//          Dimensions 0 and 1 may be narrower than the blocks (families/cpu.py, whole_problems:
//          (WGS, 1)): a work-item then walks its problems' blocks a launch's width apart
#include "common.cl"

#ifndef VW
#define VW 8        // vector width along M, in elements (1, 2, 4, 8, 16; complex: 1, or more with PACKA)
#endif
#ifndef MV
#define MV 2        // vectors per column of a work-item's block: MR = MV * VW rows of C
#endif
#ifndef NR
#define NR 8        // columns of C per work-item (each one B element broadcast per step of K)
#endif
#ifndef KU
#define KU 4        // unroll factor of the loop over K
#endif
#ifndef NB
#define NB 1        // blocks of NR columns per work-item, walked one after another
#endif
#ifndef KC
#define KC 0        // K is walked in chunks of KC steps (0: all of K at once), each over NB blocks
#endif
#ifndef WGS
#define WGS 1       // work-items per work-group, along dimension 0
#endif
#ifndef ORDER
#define ORDER 0     // dimension 0 walks 0: column blocks (neighbours share A's panel); 1: row blocks (B's)
#endif
// Set by the host from the problem, not tuned (so not read as parameters)
#if !defined(TRANSA)
  #define TRANSA 0  // 0: A is M x K column-major; 1: A is given as K x M (op(A) = A^T); 2: op(A) = A^H
#endif
#if !defined(TRANSB)
  #define TRANSB 0  // 0: B is K x N column-major; 1: B is given as N x K (op(B) = B^T); 2: op(B) = B^H
#endif
#if TRANSA == 2
  #define CONJ_A(v) CONJ(v)
#else
  #define CONJ_A(v) (v)
#endif
#if TRANSB == 2
  #define CONJ_B(v) CONJ(v)
#else
  #define CONJ_B(v) (v)
#endif
#ifndef PACKA
#define PACKA 1     // 1: xgemm_pack_a first copies op(A) into MR-row panels, contiguous along K
#endif
#ifndef PACKB
#define PACKB 0     // 1: xgemm_pack_b first copies op(B) into NR-column panels, contiguous along K
#endif

#define MR (MV * VW)  // rows of C per work-item
#define PACK_WG 16    // work-items per work-group of the packing kernels: launches round K up to it
// Constraints, for the search space:
//   1. VW in {1, 2, 4, 8, 16}; for complex precisions VW > 1 needs PACKA (planar panels, below)
//   2. the MV * NR accumulators, MV vectors of A and a broadcast of B fit the vector registers
//      (a vector of VW elements takes ceil(VW * element bytes / register bytes) of them):
//      (MV * NR + MV + 1) * that <= 16 with AVX2, <= 32 with AVX-512 (complex with VW > 1:
//      twice as many vectors, of VW real or imaginary parts). Past that the compiler spills
//      accumulators to the stack, and builds take longer
//   3. WGS <= max work-group size
// TRANSA and TRANSB describe the operands, they are not tuned. With PACKA 1 the product never
// reads A in place, so TRANSA costs only the packing; without it TRANSA 1 gathers a column of
// op(A) one element at a time, several times slower.
#if VW != 1 && VW != 2 && VW != 4 && VW != 8 && VW != 16
#error "xgemm_cpu: VW must be 1, 2, 4, 8 or 16"
#endif
#if IS_COMPLEX
  #define ONE ((real)(1, 0))
#else
  #define ONE ((real)1)
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#if PRECISION == 32 || PRECISION == 3232
  #define SCALAR float
#elif PRECISION == 64 || PRECISION == 6464
  #define SCALAR double
#endif

// A vector of VW scalars at any address a scalar may have: vectors are loaded and stored through
// it, not with vloadN/vstoreN. Those are library calls, and where PoCL 3.0 compiles for a CPU
// without AVX-512 (a Zen 4 taken for a Zen 3), a program that passes them 512-bit vectors
// builds, but loads from PoCL's kernel cache with no kernels in it (docs/kernels.md).
#if VW > 1
typedef SCALAR realV_any __attribute__((ext_vector_type(VW), aligned(sizeof(SCALAR))));
#endif

#include "xgemm_cpu_planar.cl"   // PLANAR: complex numbers in vectors of their real and imaginary parts
#if VW == 1
  typedef real realV;
  #define VLOAD(p) (*(p))
  #define VSTORE(v, p) (*(p) = (v))
  #define VSTORE_PRIVATE VSTORE
  #define SPLAT(b) (b)
#else
  typedef CAT(SCALAR, VW) realV;   // VW elements, or VW real (or imaginary) parts where PLANAR
  #define VLOAD(p) (*(const __global realV_any*)(p))
  #define VSTORE(v, p) (*(__global realV_any*)(p) = (v))
  #define VSTORE_PRIVATE(v, p) (*(realV_any*)(p) = (v))
  // Through a function that returns the vector type, inlined: clang marks a kernel that uses
  // wide vectors only inside it with "min-legal-vector-width"="0", and LLVM's x86 back end, for
  // targets that prefer 256-bit vectors (skylake-avx512, as PoCL names Zen 4 and 5), then
  // splits every 512-bit operation in two (PoCL's build of s VW 16: not one zmm register). The
  // inlined function raises the kernel's width to 512. Where the FMA units are 512 bits wide
  // that is twice the ceiling; on the 2-core Zen 4 (512-bit FMAs at half rate) it ran the same.
#if PLANAR
  #define SPLAT(b) ((realV)(b))   // (unused: the planar step splats parts, xgemm_cpu_planar.cl)
#else
  static inline __attribute__((always_inline)) realV splat_v(const real b) { return (realV)(b); }
  #define SPLAT(b) splat_v(b)
#endif
#endif

#if TRANSA == 0
  #define A_AT(i, p) A[(size_t)(i) + (size_t)(p) * lda]
#else
  #define A_AT(i, p) CONJ_A(A[(size_t)(p) + (size_t)(i) * lda])
#endif
#if TRANSB == 0
  #define B_AT(p, j) B[(size_t)(p) + (size_t)(j) * ldb]
#else
  #define B_AT(p, j) CONJ_B(B[(size_t)(j) + (size_t)(p) * ldb])
#endif

// Operands are walked by pointers that move KU steps of K per iteration, so every load of an
// unrolled iteration is one base register plus a constant (or one stride register) offset:
// indices recomputed per element (p + col * ldb in 32 bits) cost more instructions than the
// multiply-adds, and the compiler vectorised them into shuffles.
//   a_ptr: packed panel (step PANEL_STEP: MR elements, or 2 * MR parts where PLANAR), or A itself
//          (TRANSA 0: step lda; TRANSA 1: step 1)
//   b_ptr: packed panel (step NR), or B itself (TRANSB 0: step 1; TRANSB 1: step ldb)
#if PACKA
  #define A_STEP PANEL_STEP
  #define A_VEC(dst, u, v) ((dst) = VLOAD(a_ptr + (u) * PANEL_STEP + (v) * VW))
#elif TRANSA == 0
  #define A_STEP lda
  #define A_VEC(dst, u, v) ((dst) = VLOAD(a_ptr + (size_t)(u) * lda + (v) * VW))
#else
  #define A_STEP 1
  #define A_VEC(dst, u, v) load_a_rows(&(dst), a_ptr + (u), lda, (v) * VW)
  // op(A)'s column is strided when A is given transposed: one element per lane. (Loads write
  // through a pointer: a 512-bit vector passed or returned by value is what PoCL warns of above.)
  static inline void load_a_rows(realV* r, const __global real* restrict a, const int lda, const int i) {
    _Pragma("unroll") for (int l = 0; l < VW; l++) { ((real*)r)[l] = CONJ_A(a[(size_t)(i + l) * lda]); }
  }
#endif
#if PACKB
  #define B_STEP NR
  #define B_ELEM(u, j) b_ptr[(u) * NR + (j)]
#elif TRANSB == 0
  #define B_STEP 1
  #define B_ELEM(u, j) b_ptr[boff[j] + (u)]
#else
  #define B_STEP ldb
  #define B_ELEM(u, j) CONJ_B(b_ptr[(size_t)(u) * ldb + boff[j]])
#endif

// The last block of rows (when A is not packed): rows past M read row M - 1 instead (never out
// of bounds), and their results are dropped at the store.
#if TRANSA == 0
  #define A_EDGE(dst, u, v) load_a_edge(&(dst), a_ptr + (size_t)(u) * lda, 1, M - i0, (v) * VW)
#else
  #define A_EDGE(dst, u, v) load_a_edge(&(dst), a_ptr + (u), lda, M - i0, (v) * VW)
#endif
static inline void load_a_edge(realV* r, const __global real* restrict a, const int stride, const int rows, const int i) {
  _Pragma("unroll") for (int l = 0; l < VW; l++) { ((real*)r)[l] = CONJ_A(a[(size_t)min(i + l, rows - 1) * stride]); }
}

// One step of K: acc += op(A)(block rows, p) * op(B)(p, block columns). Columns are never
// guarded: boff[] points a missing column at the last real one (a packed panel holds zeros
// there), and its results are not stored.
#if !PLANAR   // (the complex step of planar vectors: xgemm_cpu_planar.cl)
#define STEP(LOAD_A, u) do {                                                       \
    realV a[MV];                                                                   \
    _Pragma("unroll") for (int v = 0; v < MV; v++) { LOAD_A(a[v], (u), v); }       \
    _Pragma("unroll") for (int j = 0; j < NR; j++) {                               \
      const realV b = SPLAT(B_ELEM((u), j));                                       \
      _Pragma("unroll") for (int v = 0; v < MV; v++) { MULADD(acc[j][v], a[v], b); } \
    }                                                                              \
  } while (0)
#endif

#if BATCH   // for (v = first; v < limit; v += step), or with one problem its first value only
  #define BLOCKS(v, first, limit, step) for (int v = (first); v < (limit); v += (step))
#else
  #define BLOCKS(v, first, limit, step) for (int v = (first), v##_once = 1; v##_once; v##_once = 0)
#endif

#define K_LOOP(LOAD_A, count) do {                                                 \
    int p = 0;                                                                     \
    for (; p + KU <= (count); p += KU) {                                                 \
      _Pragma("unroll") for (int u = 0; u < KU; u++) { STEP(LOAD_A, u); }          \
      a_ptr += (size_t)KU * A_STEP;                                                \
      b_ptr += (size_t)KU * B_STEP;                                                \
    }                                                                              \
    for (; p < (count); p++) {                                                     \
      STEP(LOAD_A, 0);                                                             \
      a_ptr += A_STEP;                                                             \
      b_ptr += B_STEP;                                                             \
    }                                                                              \
  } while (0)

#if PART != 2
__kernel __attribute__((reqd_work_group_size(WGS, 1, 1)))
void xgemm(const int M, const int N, const int K, const real alpha, const real beta,
           const __global real* restrict A, const int offA, const int lda,
           const __global real* restrict B, const int offB, const int ldb,
           __global real* C, const int offC, const int ldc
#if PACKA
           , const __global real* restrict Ap
#endif
#if PACKB
           , const __global real* restrict Bp
#endif
           BATCH_ARGS
#if BATCH
           , const int batch, const int per_item
#endif
           ) {
#if ORDER == 0   // the work-item's first block
  const int jstart_first = get_global_id(0) * NR * NB;
  const int i0_first = get_global_id(1) * MR;
#else
  const int jstart_first = get_global_id(1) * NR * NB;
  const int i0_first = get_global_id(0) * MR;
#endif
  if (jstart_first >= N || i0_first >= M) { return; }  // the launch is rounded up to whole work-groups
  A += offA;
  B += offB;
  C += offC;
#if BATCH   // dimension 2: per_item problems, one after another; their panels follow each other's
  const __global real *A0 = A, *B0 = B;
  __global real* C0 = C;
  const int z0 = (int)get_global_id(2) * per_item, z_end = min(z0 + per_item, batch);
#else
  const int z0 = 0, z_end = 1;   // one problem: a loop of one, which the compiler drops
#endif
  for (int z = z0; z < z_end; z++) {
#if BATCH
  A = A0 + BATCH_AT(z, 0, stride_a);
  B = B0 + BATCH_AT(z, 1, stride_b);
  C = C0 + BATCH_AT(z, 2, stride_c);
#if PACKA
  Ap += (size_t)(z == z0 ? z : 1) * ((M + MR - 1) / MR) * MR * K;
#endif
#if PACKB
  Bp += (size_t)(z == z0 ? z : 1) * ((N + NR - 1) / NR) * NR * K;
#endif
#endif
  // Batched, each work-item takes every (launch width)-th block of rows and columns: a launch
  // one work-item wide computes whole problems, paying a work-group's start once for all of a
  // small problem's blocks; rows outside, so a panel of A serves every column block. One
  // problem: its one block (a loop the compiler drops).
  BLOCKS(i0, i0_first, M, MR * (int)get_global_size(ORDER == 0 ? 1 : 0)) {
  BLOCKS(jstart, jstart_first, N, NR * NB * (int)get_global_size(ORDER == 0 ? 0 : 1)) {
  const bool full_rows = i0 + MR <= M;
#if !PLANAR
  const realV va = SPLAT(alpha);
#endif

  // K in chunks of KC, and per chunk NB blocks of NR columns: the chunk of A's panel (MR x KC)
  // stays in L1 while the blocks' chunks of B stream past it. The first chunk stores
  // alpha * sum + beta * C, later ones add alpha * sum to that. K = 0 still makes one pass.
  const int kc_max = KC > 0 ? KC : max(K, 1);
  for (int k0 = 0; k0 == 0 || k0 < K; k0 += kc_max) {
    const int kc = min(kc_max, K - k0);
    const real beta_k = k0 == 0 ? beta : ONE;
#if !PLANAR
    const realV vb = SPLAT(beta_k);
    const bool zero_beta = IS_ZERO(beta_k);
#endif
    for (int jb = 0; jb < NB; jb++) {
      const int j0 = jstart + jb * NR;
      if (j0 >= N) { break; }
#if PACKA
      const __global panel_t* restrict a_ptr = (const __global panel_t*)Ap + ((size_t)(i0 / MR) * K + k0) * PANEL_STEP;
#elif TRANSA == 0
      const __global real* restrict a_ptr = A + i0 + (size_t)k0 * lda;
#else
      const __global real* restrict a_ptr = A + (size_t)i0 * lda + k0;
#endif
#if PACKB
      const __global real* restrict b_ptr = Bp + ((size_t)(j0 / NR) * K + k0) * NR;
#else
      const __global real* restrict b_ptr = B + (size_t)k0 * B_STEP;
      size_t boff[NR];
      _Pragma("unroll") for (int j = 0; j < NR; j++) {
        boff[j] = (size_t)min(j0 + j, N - 1) * (TRANSB ? 1 : ldb);
      }
#endif

#if PLANAR
      PLANAR_ACCUMULATORS;
#else
      realV acc[NR][MV];
      _Pragma("unroll") for (int j = 0; j < NR; j++) {
        _Pragma("unroll") for (int v = 0; v < MV; v++) { acc[j][v] = SPLAT(ZERO); }
      }
#endif
#if PACKA
      K_LOOP(A_VEC, kc);  // the panel's missing rows are zeros: no edge case
#else
      if (full_rows) { K_LOOP(A_VEC, kc); } else { K_LOOP(A_EDGE, kc); }
#endif

#if PLANAR
      const bool vector_store = false;   // the parts are interleaved through the tile below
#else
      const bool vector_store = full_rows && j0 + NR <= N;
#endif
      if (vector_store) {
#if !PLANAR
        _Pragma("unroll") for (int j = 0; j < NR; j++) {
          __global real* c = C + i0 + (size_t)(j0 + j) * ldc;
          _Pragma("unroll") for (int v = 0; v < MV; v++) {
            realV r = MUL(va, acc[j][v]);
            if (!zero_beta) { r += MUL(vb, VLOAD(c + v * VW)); }
            VSTORE(r, c + v * VW);
          }
        }
#endif
      } else {
        // A ragged block: through a private copy, so the guarded loop indexes memory at run
        // time rather than being unrolled into MR * NR guarded stores (which made builds twice
        // as long). Indexing acc itself at run time would keep all of it out of registers.
        real tile[NR][MR];
#if PLANAR
        PLANAR_TO_TILE(tile);
#else
        _Pragma("unroll") for (int j = 0; j < NR; j++) {
          _Pragma("unroll") for (int v = 0; v < MV; v++) { VSTORE_PRIVATE(acc[j][v], &tile[j][v * VW]); }
        }
#endif
        const int rows = min(MR, M - i0), cols = min(NR, N - j0);
        for (int j = 0; j < cols; j++) {
          __global real* c = C + i0 + (size_t)(j0 + j) * ldc;
          for (int i = 0; i < rows; i++) { STORE_AXPBY(c[i], tile[j][i], alpha, beta_k); }
        }
      }
    }
  }
  }}   // the work-item's next block
  }   // the work-item's next problem
}
#endif

#include "xgemm_cpu_pack.cl"   // PACKA, PACKB: the preparation passes (PART 2)
