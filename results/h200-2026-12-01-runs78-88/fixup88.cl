typedef union { VTYPE(FIXV) v; real e[FIXV]; } funion;
#if !defined(FIXW)
#define FIXW 1   // vectors of FIXV per work-item
#endif
__kernel void xgemm_fixup(const int M, const int N, const real alpha, const real beta,
                          __global real* C, const int ldc, const __global int4* restrict fixups,
                          const __global real* restrict work) {
  const int4 fix = fixups[get_global_id(0) / (MWG * NWG / (FIXV * FIXW))];
  const int e0 = (get_global_id(0) % (MWG * NWG / (FIXV * FIXW))) * FIXV;
  TILE_ORIGIN(fix.x)
  funion sum[FIXW];
  for (int w = 0; w < FIXW; w++) { for (int i = 0; i < FIXV; i++) { sum[w].e[i] = ZERO; } }
#if FIXU
  #pragma unroll 4
#endif
  for (int p = 0; p < fix.z; p++) {
    #pragma unroll
    for (int w = 0; w < FIXW; w++) {
      const int e = e0 + w * (MWG * NWG / FIXW);
      funion part;
      part.v = *((const __global VTYPE(FIXV)*)(work + (size_t)(fix.y + p) * (MWG * NWG) + e));
      for (int i = 0; i < FIXV; i++) { sum[w].e[i] += part.e[i]; }
    }
  }
  #pragma unroll
  for (int w = 0; w < FIXW; w++) {
    const int e = e0 + w * (MWG * NWG / FIXW);
    const int m = m0 + e % MWG, n = n0 + e / MWG;
    if (n < N) {
#if FIXS
      if (m + FIXV <= M && ldc % FIXV == 0) {
        __global VTYPE(FIXV)* const c = (__global VTYPE(FIXV)*)(C + n * ldc + m);
        funion out;
        if (IS_ZERO(beta)) {
          for (int i = 0; i < FIXV; i++) { out.e[i] = MUL(alpha, sum[w].e[i]); }
        } else {
          funion old; old.v = *c;
          for (int i = 0; i < FIXV; i++) { out.e[i] = MUL(alpha, sum[w].e[i]) + MUL(beta, old.e[i]); }
        }
        *c = out.v;
        continue;
      }
#endif
      for (int i = 0; i < FIXV; i++) {
        if (m + i < M) { STORE_AXPBY(C[n * ldc + m + i], sum[w].e[i], alpha, beta); }
      }
    }
  }
}
