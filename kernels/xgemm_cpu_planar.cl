// xgemm_cpu, complex precisions in planar vectors (included by xgemm_cpu.cl).
//
// With VW > 1 a complex precision keeps real and imaginary parts in vectors of their own
// (PLANAR): xgemm_pack_a writes, per step of K, the panel's MR real parts and then its MR
// imaginary parts, and the block of C is two sets of MV x NR accumulators, so that a step is four
// full-width vector multiply-adds per column of B. With VW 1 a complex element is one 2-vector,
// and a step does 2-wide arithmetic: a tenth of the speed on a CPU with 16-float vectors. The
// packing kernel, built apart with VW 1, gets PLANAR from the host.
#ifndef PLANAR
  #if IS_COMPLEX && VW > 1
    #define PLANAR 1
  #else
    #define PLANAR 0
  #endif
#endif
#if PLANAR && !IS_COMPLEX
#error "xgemm_cpu: PLANAR is for complex precisions"
#endif
#if IS_COMPLEX && VW != 1 && !PACKA
#error "xgemm_cpu: complex precisions take VW 1 unless A is packed (PACKA 1)"
#endif

// A packed panel of A: per step of K, PANEL_STEP values of panel_t
#if PLANAR
  typedef SCALAR panel_t;
  #define PANEL_STEP (2 * MR)
  #define PANEL_PUT(out, r, value) do { const real x_ = (value); (out)[r] = x_.x; (out)[MR + (r)] = x_.y; } while (0)
#else
  typedef real panel_t;
  #define PANEL_STEP MR
  #define PANEL_PUT(out, r, value) ((out)[r] = (value))
#endif

#if PLANAR && VW > 1   // (the packing kernel's build has VW 1 and no product; realV, VLOAD: xgemm_cpu.cl)
#define A_VEC_IM(u, v) VLOAD(a_ptr + (u) * PANEL_STEP + MR + (v) * VW)

#define PLANAR_ACCUMULATORS                                                        \
  realV re[NR][MV], im[NR][MV];                                                    \
  _Pragma("unroll") for (int j = 0; j < NR; j++) {                                 \
    _Pragma("unroll") for (int v = 0; v < MV; v++) { re[j][v] = (realV)(0); im[j][v] = (realV)(0); } \
  }

// (re + i im) += (ar + i ai) * (br + i bi), VW rows at a time (A_VEC: xgemm_cpu.cl)
#define STEP(LOAD_A, u) do {                                                       \
    realV ar[MV], ai[MV];                                                          \
    _Pragma("unroll") for (int v = 0; v < MV; v++) {                               \
      A_VEC(ar[v], (u), v);                                                        \
      ai[v] = A_VEC_IM((u), v);                                                    \
    }                                                                              \
    _Pragma("unroll") for (int j = 0; j < NR; j++) {                               \
      const real b = B_ELEM((u), j);                                               \
      const realV br = (realV)(b.x), bi = (realV)(b.y);                            \
      _Pragma("unroll") for (int v = 0; v < MV; v++) {                             \
        re[j][v] += ar[v] * br;                                                    \
        re[j][v] -= ai[v] * bi;                                                    \
        im[j][v] += ar[v] * bi;                                                    \
        im[j][v] += ai[v] * br;                                                    \
      }                                                                            \
    }                                                                              \
  } while (0)

// The block interleaved back into complex elements, MR * NR per KC steps of K: little beside
// the step's 4 * MR * NR * KC multiply-adds
#define PLANAR_TO_TILE(tile)                                                       \
  _Pragma("unroll") for (int j = 0; j < NR; j++) {                                 \
    _Pragma("unroll") for (int v = 0; v < MV; v++) {                               \
      _Pragma("unroll") for (int l = 0; l < VW; l++) {                             \
        (tile)[j][v * VW + l] = (real)(((SCALAR*)&re[j][v])[l], ((SCALAR*)&im[j][v])[l]); \
      }                                                                            \
    }                                                                              \
  }
#endif
