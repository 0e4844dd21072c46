// xgemm_rt: where a tile is; with STREAMK, xgemm_fixup, which adds the parts of split tiles
// up into C. Included by xgemm_rt.cl before its kernel.

// Tile number `tile` is the tile of C at (m0, n0), for an M x N matrix C. Counted down M first,
// column after column, as the 2D grid's groups are, unless BANDM > 0: then down the first BANDM
// tile rows a column at a time, then the next BANDM rows (the last band may be narrower). The
// work-groups running at once then share a few tile rows of A and columns of B, which the L2
// cache holds, instead of reading all of A each round: at 8192^3 in doubles, 128 x 64 tiles in
// launch order read all 512 MB of A in each round of work-groups.
#if BANDM
#define TILE_ORIGIN(M, N, tile) \
  const int band_ = (tile) / (BANDM * ((N + NWG - 1) / NWG)), in_band_ = (tile) % (BANDM * ((N + NWG - 1) / NWG)); \
  const int rows_ = min(BANDM, (M + MWG - 1) / MWG - band_ * BANDM); \
  const int m0 = (band_ * BANDM + in_band_ % rows_) * MWG, n0 = (in_band_ / rows_) * NWG;
#else
#define TILE_ORIGIN(M, N, tile) \
  const int m0 = ((tile) % ((M + MWG - 1) / MWG)) * MWG, n0 = ((tile) / ((M + MWG - 1) / MWG)) * NWG;
#endif
// Without STREAMK, the tile of a work-group of the 2D grid. In launch order the group ids as they
// are: numbering the groups and dividing, as bands must, cost the c default (8 x 8 complex results
// per work-item) 12 % at 4096^3 on the H200.
#if BANDM
#define GRID_ORIGIN TILE_ORIGIN(M, N, (int)(get_group_id(0) + get_group_id(1) * get_num_groups(0)))
#else
#define GRID_ORIGIN const int m0 = get_group_id(0) * MWG, n0 = get_group_id(1) * NWG;
#endif

#if PART == 0 || PART == 3
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
                          const __global real* restrict work
#if BATCH
                          , const int offset_c BATCH_ARGS
#endif
                          ) {
  const int4 fix = fixups[get_global_id(0) / (MWG * NWG / FIXV)];
  const int e = (get_global_id(0) % (MWG * NWG / FIXV)) * FIXV;
#if BATCH
  // a tile's number over the batch, as xgemm's: the problem's C, and the tile in it
  const int per_problem = ((M + MWG - 1) / MWG) * ((N + NWG - 1) / NWG);
  C += offset_c + BATCH_AT(fix.x / per_problem, 2, stride_c);
  TILE_ORIGIN(M, N, fix.x % per_problem)
#else
  TILE_ORIGIN(M, N, fix.x)
#endif
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
#endif
