// gemmtune: precision definitions shared by every kernel file.
//
// PRECISION selects the element type at build time, as BLAS names it:
//   32 = s (float), 64 = d (double), 3232 = c (float2), 6464 = z (double2).
// Complex numbers are interleaved (real, imaginary), as BLAS stores them.
#ifndef GEMMTUNE_COMMON_CL
#define GEMMTUNE_COMMON_CL

#ifndef PRECISION
#define PRECISION 32    // element type: 32, 64, 3232 or 6464
#endif

// Which kernels of a file a build holds (set by the host, not tuned): 0 all of them, as an
// exported header's single program; 1 the product alone; 2 the operand-preparation kernels alone
// (pad.cl's, xgemm_cpu's packing); 3 the fix-up alone (stream-K's, or the sum of K's parts).
// gemmtune builds those apart from each candidate, once per what they depend on (launch.py).
#if !defined(PART)
  #define PART 0
#endif

// Batched launches (set by the host, not tuned; only where a launch holds several problems, so
// that a single problem's build is that of an unbatched one): 0 one problem; 1 problem z starts
// z * stride past each operand's offset (stride 0: an operand all problems share); 2 problem z's
// offsets of A, B and C are batch_offsets[3z .. 3z + 2] (the array form, any views of the buffers).
// Every kernel of a batched build takes BATCH_ARGS after its own arguments.
#if !defined(BATCH)
  #define BATCH 0
#endif
#if BATCH == 1
  #define BATCH_ARGS , const int stride_a, const int stride_b, const int stride_c
  #define BATCH_AT(z, i, stride) ((z) * (stride))
#elif BATCH == 2
  #define BATCH_ARGS , const __global int* restrict batch_offsets
  #define BATCH_AT(z, i, stride) batch_offsets[3 * (z) + (i)]
#else
  #define BATCH_ARGS
  #define BATCH_AT(z, i, stride) 0
#endif

#if PRECISION == 64 || PRECISION == 6464
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#if PRECISION == 32
  typedef float real;
  #define IS_COMPLEX 0
#elif PRECISION == 64
  typedef double real;
  #define IS_COMPLEX 0
#elif PRECISION == 3232
  typedef float2 real;
  #define IS_COMPLEX 1
#elif PRECISION == 6464
  typedef double2 real;
  #define IS_COMPLEX 1
#else
  #error "PRECISION must be 32, 64, 3232 or 6464"
#endif

#if IS_COMPLEX
  #define ZERO ((real)(0, 0))
  #define IS_ZERO(v) ((v).x == 0 && (v).y == 0)
  #define CONJ(v) ((real)((v).x, -(v).y))
  // c += a * b, as four multiply-adds so the compiler can fuse each one
  #define MULADD(c, a, b) do { (c).x += (a).x * (b).x; (c).x -= (a).y * (b).y; \
                               (c).y += (a).x * (b).y; (c).y += (a).y * (b).x; } while (0)
  inline real cmul(const real a, const real b) {
    return (real)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
  }
  #define MUL(a, b) cmul((a), (b))
#else
  #define ZERO ((real)0)
  #define IS_ZERO(v) ((v) == 0)
  #define CONJ(v) (v)
  #define MULADD(c, a, b) ((c) += (a) * (b))
  #define MUL(a, b) ((a) * (b))
#endif

// C <- alpha * acc + beta * C; beta == 0 never reads C, so whatever it held (NaN too) is ignored
#define STORE_AXPBY(dst, acc, alpha, beta) \
  (dst) = IS_ZERO(beta) ? MUL((alpha), (acc)) : MUL((alpha), (acc)) + MUL((beta), (dst))

#endif  // GEMMTUNE_COMMON_CL
