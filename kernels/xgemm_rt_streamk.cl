// xgemm_rt with STREAMK: where a tile is, and xgemm_fixup, which adds the parts of split tiles
// up into C. Included by xgemm_rt.cl before its kernel.

// Tile number `tile`, counted down M first (as the 2D grid's groups are), is the tile of C at
// (m0, n0), for an M x N matrix C.
#define TILE_ORIGIN(M, tile) \
  const int m0 = ((tile) % ((M + MWG - 1) / MWG)) * MWG, n0 = ((tile) / ((M + MWG - 1) / MWG)) * NWG;

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
  TILE_ORIGIN(M, fix.x)
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
