// gemmtune kernel family "xgemm_cpu", its preparation passes (included by xgemm_cpu.cl, which
// defines MR, NR, PANEL_STEP and the operands' access macros before it).
//
// Packing: the product then reads each operand as one sequential stream, whatever lda and ldb
// are. Read in place, a column stride of a multiple of 4 KiB maps every step of K onto the same
// few cache sets, and the panel of A no longer stays in cache between work-items (in s at
// 2048^3, A read in place ran at about 60 % of the speed of packed A on a 2-core AMD EPYC).
// Rows or columns past M or N are stored as zeros, so the product needs no edge case for them.
#if PACKA && PART != 1
// Ap[(b * K + p) * MR + r] = op(A)(b * MR + r, p); one work-item per (p, b). A fixed work-group
// size, because PoCL compiles a kernel again for each new local size it is launched with.
__kernel __attribute__((reqd_work_group_size(PACK_WG, 1, 1)))
void xgemm_pack_a(const int M, const int K, const __global real* restrict A, const int offA,
                           const int lda, __global real* restrict Ap BATCH_ARGS) {
  const int p = get_global_id(0);
  const int b = get_global_id(1);
  if (p >= K) { return; }
  A += offA;
#if BATCH
  A += BATCH_AT((int)get_global_id(2), 0, stride_a);
  Ap += (size_t)get_global_id(2) * ((M + MR - 1) / MR) * MR * K;
#endif
  __global panel_t* restrict out = (__global panel_t*)Ap + ((size_t)b * K + p) * PANEL_STEP;
  _Pragma("unroll") for (int r = 0; r < MR; r++) {
    const int i = b * MR + r;
    PANEL_PUT(out, r, i < M ? A_AT(i, p) : ZERO);
  }
}
#endif

#if PACKB && PART != 1
// Bp[(b * K + p) * NR + j] = op(B)(p, b * NR + j); one work-item per (p, b)
__kernel __attribute__((reqd_work_group_size(PACK_WG, 1, 1)))
void xgemm_pack_b(const int N, const int K, const __global real* restrict B, const int offB,
                           const int ldb, __global real* restrict Bp BATCH_ARGS) {
  const int p = get_global_id(0);
  const int b = get_global_id(1);
  if (p >= K) { return; }
  B += offB;
#if BATCH
  B += BATCH_AT((int)get_global_id(2), 1, stride_b);
  Bp += (size_t)get_global_id(2) * ((N + NR - 1) / NR) * NR * K;
#endif
  __global real* restrict out = Bp + ((size_t)b * K + p) * NR;
  _Pragma("unroll") for (int j = 0; j < NR; j++) {
    const int col = b * NR + j;
    out[j] = col < N ? B_AT(p, col) : ZERO;
  }
}
#endif
