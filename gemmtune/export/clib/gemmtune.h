/* gemmtune: GEMM on OpenCL with the configurations tuned for each device (see docs/c.md).
 *
 * C (m x n) <- alpha * op(A) (m x k) * op(B) (k x n) + beta * C, BLAS's meaning, on buffers of
 * the handle's context, row- or column-major, op N (none), T (transpose) or C (conjugate
 * transpose), with element offsets and leading dimensions. The configuration is chosen at run
 * time from the device's name and the problem: the tuned one of this shape, else of the nearest
 * tuned shape, else the shipped default of the problem's class.
 *
 * A handle is used by one thread at a time, and its calls run in order on in-order queues:
 * scratch buffers are kept per problem. Every function returns a gemmtune_status;
 * gemmtune_status_message() says what it means, gemmtune_last_error() what went wrong last. */
#ifndef GEMMTUNE_H
#define GEMMTUNE_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#ifdef __APPLE__
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  GEMMTUNE_SUCCESS = 0,
  GEMMTUNE_INVALID_HANDLE = -1,          /* a null handle, or one without a context or device */
  GEMMTUNE_INVALID_LAYOUT = -2,
  GEMMTUNE_INVALID_TRANSPOSE = -3,
  GEMMTUNE_INVALID_SIZE = -4,            /* m, n or k negative, or an offset negative */
  GEMMTUNE_INVALID_LEADING_DIMENSION = -5,
  GEMMTUNE_INVALID_BUFFER = -6,          /* a null buffer, or an operand outside its buffer */
  GEMMTUNE_TOO_LARGE = -7,               /* an operand beyond what a kernel's int indexes */
  GEMMTUNE_UNSUPPORTED_PRECISION = -8,   /* d or z on a device without doubles */
  GEMMTUNE_INVALID_CONFIGURATION = -9,   /* gemmtune_plan_config: unknown family or parameter */
  GEMMTUNE_BUILD_FAILURE = -10,          /* the OpenCL compiler refused a kernel */
  GEMMTUNE_OPENCL_ERROR = -11,           /* an OpenCL call failed: gemmtune_last_error says which */
  GEMMTUNE_OUT_OF_HOST_MEMORY = -12,
  GEMMTUNE_INVALID_ARGUMENT = -13,       /* a null pointer where a result goes */
  GEMMTUNE_INVALID_BATCH = -14           /* a batch count or stride negative, a stride of c of 0, or null offsets */
} gemmtune_status;

typedef enum { GEMMTUNE_ROW_MAJOR = 101, GEMMTUNE_COL_MAJOR = 102 } gemmtune_layout;   /* CBLAS's values */
typedef enum { GEMMTUNE_NO_TRANS = 111, GEMMTUNE_TRANS = 112, GEMMTUNE_CONJ_TRANS = 113 } gemmtune_transpose;

typedef struct gemmtune_handle_ *gemmtune_handle;

const char *gemmtune_status_message(int status);
const char *gemmtune_version(void);

/* A handle for one device of a context: it builds the kernels it needs once and keeps them. */
int gemmtune_create(cl_context context, cl_device_id device, gemmtune_handle *handle);
int gemmtune_release(gemmtune_handle handle);
/* What went wrong in the handle's last failed call (an OpenCL code, a build log): never null. */
const char *gemmtune_last_error(gemmtune_handle handle);

/* The GEMMs. Sizes, offsets and leading dimensions are in elements; alpha and beta of the
 * complex ones are (real, imaginary). With m or n 0 nothing is computed, with k 0 C becomes
 * beta * C (C is never read where beta is 0). event: null, or where the event of the last
 * kernel enqueued goes (a marker's where none is). */
int gemmtune_sgemm(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                   int64_t m, int64_t n, int64_t k, float alpha, cl_mem a, int64_t a_offset, int64_t lda,
                   cl_mem b, int64_t b_offset, int64_t ldb, float beta, cl_mem c, int64_t c_offset, int64_t ldc,
                   cl_event *event);
int gemmtune_dgemm(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                   int64_t m, int64_t n, int64_t k, double alpha, cl_mem a, int64_t a_offset, int64_t lda,
                   cl_mem b, int64_t b_offset, int64_t ldb, double beta, cl_mem c, int64_t c_offset, int64_t ldc,
                   cl_event *event);
int gemmtune_cgemm(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                   int64_t m, int64_t n, int64_t k, cl_float2 alpha, cl_mem a, int64_t a_offset, int64_t lda,
                   cl_mem b, int64_t b_offset, int64_t ldb, cl_float2 beta, cl_mem c, int64_t c_offset,
                   int64_t ldc, cl_event *event);
int gemmtune_zgemm(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                   int64_t m, int64_t n, int64_t k, cl_double2 alpha, cl_mem a, int64_t a_offset, int64_t lda,
                   cl_mem b, int64_t b_offset, int64_t ldb, cl_double2 beta, cl_mem c, int64_t c_offset,
                   int64_t ldc, cl_event *event);

/* Batches: batch_count problems of one shape in one launch (two or three with operand passes),
 * as CLBlast's GemmStridedBatched and GemmBatched take them. Strided: problem i's operands start
 * i * stride past each offset; a stride of a or b may be 0 (one matrix all problems share), c's
 * may not. Array form: problem i's at a_offsets[i], b_offsets[i], c_offsets[i] of one buffer per
 * operand, with alphas[i] and betas[i] (problems of equal alpha and beta go as one launch, their
 * offsets in a table). Each problem's C must share no element with another's, nor with any A or B. */
int gemmtune_sgemm_strided_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a,
                                  int trans_b, int64_t m, int64_t n, int64_t k, float alpha, cl_mem a,
                                  int64_t a_offset, int64_t lda, int64_t a_stride, cl_mem b, int64_t b_offset,
                                  int64_t ldb, int64_t b_stride, float beta, cl_mem c, int64_t c_offset, int64_t ldc,
                                  int64_t c_stride, int64_t batch_count, cl_event *event);
int gemmtune_sgemm_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                          int64_t m, int64_t n, int64_t k, const float *alphas, cl_mem a, const int64_t *a_offsets,
                          int64_t lda, cl_mem b, const int64_t *b_offsets, int64_t ldb, const float *betas, cl_mem c,
                          const int64_t *c_offsets, int64_t ldc, int64_t batch_count, cl_event *event);
int gemmtune_dgemm_strided_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a,
                                  int trans_b, int64_t m, int64_t n, int64_t k, double alpha, cl_mem a,
                                  int64_t a_offset, int64_t lda, int64_t a_stride, cl_mem b, int64_t b_offset,
                                  int64_t ldb, int64_t b_stride, double beta, cl_mem c, int64_t c_offset, int64_t ldc,
                                  int64_t c_stride, int64_t batch_count, cl_event *event);
int gemmtune_dgemm_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                          int64_t m, int64_t n, int64_t k, const double *alphas, cl_mem a, const int64_t *a_offsets,
                          int64_t lda, cl_mem b, const int64_t *b_offsets, int64_t ldb, const double *betas, cl_mem c,
                          const int64_t *c_offsets, int64_t ldc, int64_t batch_count, cl_event *event);
int gemmtune_cgemm_strided_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a,
                                  int trans_b, int64_t m, int64_t n, int64_t k, cl_float2 alpha, cl_mem a,
                                  int64_t a_offset, int64_t lda, int64_t a_stride, cl_mem b, int64_t b_offset,
                                  int64_t ldb, int64_t b_stride, cl_float2 beta, cl_mem c, int64_t c_offset, int64_t ldc,
                                  int64_t c_stride, int64_t batch_count, cl_event *event);
int gemmtune_cgemm_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                          int64_t m, int64_t n, int64_t k, const cl_float2 *alphas, cl_mem a, const int64_t *a_offsets,
                          int64_t lda, cl_mem b, const int64_t *b_offsets, int64_t ldb, const cl_float2 *betas, cl_mem c,
                          const int64_t *c_offsets, int64_t ldc, int64_t batch_count, cl_event *event);
int gemmtune_zgemm_strided_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a,
                                  int trans_b, int64_t m, int64_t n, int64_t k, cl_double2 alpha, cl_mem a,
                                  int64_t a_offset, int64_t lda, int64_t a_stride, cl_mem b, int64_t b_offset,
                                  int64_t ldb, int64_t b_stride, cl_double2 beta, cl_mem c, int64_t c_offset, int64_t ldc,
                                  int64_t c_stride, int64_t batch_count, cl_event *event);
int gemmtune_zgemm_batched(gemmtune_handle handle, cl_command_queue queue, int layout, int trans_a, int trans_b,
                          int64_t m, int64_t n, int64_t k, const cl_double2 *alphas, cl_mem a, const int64_t *a_offsets,
                          int64_t lda, cl_mem b, const int64_t *b_offsets, int64_t ldb, const cl_double2 *betas, cl_mem c,
                          const int64_t *c_offsets, int64_t ldc, int64_t batch_count, cl_event *event);

/* ---- Introspection: what a call enqueues, without enqueueing it. ---- */

#define GEMMTUNE_MAX_ARGS 24
#define GEMMTUNE_MAX_LAUNCHES 4
#define GEMMTUNE_MAX_SCRATCH 5
#define GEMMTUNE_MAX_PARAMS 40

enum { GEMMTUNE_ARG_INT = 0, GEMMTUNE_ARG_SCRATCH = 1, GEMMTUNE_ARG_CALL = 2 };
/* GEMMTUNE_ARG_CALL's values: the call's operands, their offsets and the scalars */
enum { GEMMTUNE_CALL_A, GEMMTUNE_CALL_B, GEMMTUNE_CALL_C, GEMMTUNE_CALL_OFFSET_A, GEMMTUNE_CALL_OFFSET_B,
       GEMMTUNE_CALL_OFFSET_C, GEMMTUNE_CALL_ALPHA, GEMMTUNE_CALL_BETA,
       GEMMTUNE_CALL_BATCH_OFFSETS /* the array form's table: per problem, the offsets of A, B and C (int32) */ };

typedef struct { int kind; int64_t value; } gemmtune_arg;   /* an int, a scratch index, a call argument */

typedef struct {
  char kernel[32];
  int gemm;                      /* 1: the product's own; 0: a pass that prepares an operand */
  int dims;
  size_t global_size[3];
  size_t local_size[3];          /* all 0: left to the driver */
  int nargs;
  gemmtune_arg args[GEMMTUNE_MAX_ARGS];
  char defines[256];             /* "": the configuration's program; else a program of its own built
                                    with these NAME=VALUE defines alone, space-separated */
} gemmtune_launch;

typedef struct {
  char name[16];
  size_t nbytes;                 /* bytes, uninitialised, unless table is set */
  int rows, cols;                /* table: rows x cols int32 values, row by row */
  int *table;
} gemmtune_scratch;

typedef struct {
  char family[16];               /* the kernel family, e.g. "xgemm_cpu" */
  char source[8];                /* "tuned", "nearest", "default" or "given" */
  int64_t shape[3];              /* the tuned problem's m, n, k (0s for a default) */
  int nparams;
  const char *param_names[GEMMTUNE_MAX_PARAMS];
  int param_values[GEMMTUNE_MAX_PARAMS];
  char options[1024];            /* the configuration's program's build options */
  int nscratch;
  gemmtune_scratch scratch[GEMMTUNE_MAX_SCRATCH];
  int nlaunches;
  gemmtune_launch launches[GEMMTUNE_MAX_LAUNCHES];
} gemmtune_launch_plan;

/* What a plan depends on of a device. */
typedef struct {
  size_t max_work_group_size;
  size_t max_work_item_sizes[3];
  int64_t compute_units;         /* what a split of the work assumes */
} gemmtune_device_facts;

/* The column-major plan of the configuration a call of this precision ('s', 'd', 'c', 'z') and
 * problem gets on the handle's device; views: an offset is not 0. Release it with
 * gemmtune_plan_release. */
int gemmtune_plan(gemmtune_handle handle, char precision, int trans_a, int trans_b, int64_t m, int64_t n,
                  int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int views, gemmtune_launch_plan *plan);
/* The plan of a given configuration (family and parameters; unnamed ones take the kernel's
 * defaults) for a device described by facts. */
int gemmtune_plan_config(const char *family, int nparams, const char *const *names, const int *values,
                         const gemmtune_device_facts *facts, char precision, int trans_a, int trans_b, int64_t m,
                         int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int views,
                         gemmtune_launch_plan *plan);
/* gemmtune_plan for a batch of batch_count problems, as gemmtune_plan_config_batched takes it: the
 * configuration a batched call of that column-major problem gets. */
int gemmtune_plan_batched(gemmtune_handle handle, char precision, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int views, int64_t batch_count,
                          const int64_t strides[3], int table, gemmtune_launch_plan *plan);
/* gemmtune_plan_config for a batch of batch_count problems: strided (strides of A, B and C of the
 * column-major problem), or with table != 0 the array form, whose offsets a table gives. */
int gemmtune_plan_config_batched(const char *family, int nparams, const char *const *names, const int *values,
                                 const gemmtune_device_facts *facts, char precision, int trans_a, int trans_b,
                                 int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int views,
                                 int64_t batch_count, const int64_t strides[3], int table,
                                 gemmtune_launch_plan *plan);
void gemmtune_plan_release(gemmtune_launch_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* GEMMTUNE_H */
