// xgemm_rt: sizes derived from the parameters, and the constraints the build checks itself.
// Included by xgemm_rt.cl after its parameters.

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
//  11. PIPE is 0, 1, 2, 5, 6 or 7, and BKFAST 0 or 1 with PIPE 5 to 7: B goes by asynchronous
//      copies as it is in global memory, or through registers a vector of a column at a time
//      (BKFAST = 1); BKFAST 2's blocks, VWG times the registers, are not built for that pipeline
//  12. MMA == 0, or MMA 1 or 2 with: d or z on a device with MMA_F64; MDIMC % 8 == 0 and NDIMC % 4 == 0
//      (groups of 32 as 8 x 4 work-items); WPTM, WPTN even and KWG % 8 == 0 (whole 16 x 8 x 8
//      blocks); STAGE == 1, and VLM, VLN, UNROLL == 1, WARPM == 0, which do not apply to it;
//      with MMA 2, PIPE 5 to 7
#if PART < 2   // a build of the preparation or fix-up kernels alone sets only what they read
#if MWG % MDIMC != 0 || NWG % NDIMC != 0 || (KWG * MWG) % (VWG * WGS) != 0 || (KWG * NWG) % (VWG * WGS) != 0
#error "xgemm_rt: tiles must split evenly over work-items and vector loads"
#endif
#if STAGE != 0 && STAGE != 1
#error "xgemm_rt: STAGE is 0 or 1"
#endif
#if STAGE == 0 && (PIPE != 0 || PADL != 0 || VWG != 1 || BKFAST != 0)
#error "xgemm_rt: without staging (STAGE = 0), PIPE, PADL and BKFAST must be 0 and VWG 1"
#endif
#if (PIPE != 0 && PIPE != 1 && PIPE != 2 && PIPE != 5 && PIPE != 6 && PIPE != 7) || (PIPE >= 5 && BKFAST == 2)
#error "xgemm_rt: PIPE is 0, 1, 2, 5, 6 or 7, and asynchronous copies (PIPE 5 to 7) need BKFAST 0 or 1"
#endif
#if MMA != 0 && MMA != 1 && MMA != 2
#error "xgemm_rt: MMA is 0, 1 or 2"
#endif
#if MMA == 2 && PIPE < 5
#error "xgemm_rt: MMA = 2 needs asynchronous copies (PIPE 5 to 7)"
#endif
#if MMA && (PRECISION == 32 || PRECISION == 3232 || MDIMC % 8 != 0 || NDIMC % 4 != 0 || WPTM % 2 != 0 \
            || WPTN % 2 != 0 || KWG % 8 != 0 || STAGE != 1 || VLM != 1 || VLN != 1 \
            || UNROLL != 1 || WARPM != 0)
#error "xgemm_rt: MMA = 1 or 2 needs d or z, 8 x 4 work-items per group of 32, whole 16 x 8 x 8 blocks, staging"
#endif
#if BKFAST == 2 && (KWG * NWG) % (VWG * VWG * WGS) != 0
#error "xgemm_rt: with BKFAST = 2 the B slice must split evenly into VWG x VWG blocks per work-item"
#endif
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
// Element j of a local read v of w elements, halving the vector (.lo, .hi) until one is left:
// `real` for complex precisions too. Not through a union with real[w]: for two elements of 8
// or 16 bytes (d, c, z) clang made 128- and 256-bit integers of it, which Oclgrind cannot run
// ("Unsupported constant int size"); j is a constant once the loops unroll, so either way the
// element is the vector's register itself.
#define LANE_1(v, j) (v)
#define LANE_2(v, j) ((j) % 2 ? (v).hi : (v).lo)
#define LANE_4(v, j) LANE_2((j) % 4 < 2 ? (v).lo : (v).hi, (j) % 2)
#define LANE_8(v, j) LANE_4((j) % 8 < 4 ? (v).lo : (v).hi, (j) % 4)
#define LANE(w, v, j) CAT(LANE_, w)(v, j)

// The schedules and the multiply are functions only for reading: inlined, acc stays in registers,
// where a call would pass it through memory.
#define INLINE_FUNC inline __attribute__((always_inline))

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)

// Local index along M of chunk c, lane j of work-item tx: chunks of VLM consecutive elements,
// consecutive work-items on consecutive chunks (VLM = 1 is strided, VLM = WPTM blocked).
#define MLOC(tx, c, j) ((c) * (MDIMC * VLM) + (tx) * VLM + (j))
#define NLOC(ty, c, j) ((c) * (NDIMC * VLN) + (ty) * VLN + (j))
