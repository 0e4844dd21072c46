/* C (m x n) <- A (m x k) * B (k x n), row-major, with gemmtune's exported library on one
 * OpenCL device, checked against a plain loop in double. Usage: example [PLATFORM DEVICE]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "gemmtune.h"

int main(int argc, char **argv) {
  enum { M = 67, N = 45, K = 31 };
  cl_uint pi = argc > 2 ? (cl_uint)atoi(argv[1]) : 0, di = argc > 2 ? (cl_uint)atoi(argv[2]) : 0, np = 0, nd = 0;
  cl_platform_id platforms[16];
  cl_device_id devices[16];
  char name[256] = "";
  static float a[M * K], b[K * N], c[M * N];
  double worst = 0;
  int i, j, p, status;
  gemmtune_handle handle;
  cl_int err;
  if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS || pi >= np
      || clGetDeviceIDs(platforms[pi], CL_DEVICE_TYPE_ALL, 16, devices, &nd) != CL_SUCCESS || di >= nd) {
    fprintf(stderr, "no OpenCL device %u:%u\n", pi, di);
    return 2;
  }
  clGetDeviceInfo(devices[di], CL_DEVICE_NAME, sizeof name, name, NULL);
  cl_context context = clCreateContext(NULL, 1, &devices[di], NULL, NULL, &err);
  cl_command_queue queue = clCreateCommandQueue(context, devices[di], 0, &err);
  for (i = 0; i < M * K; i++) a[i] = (float)rand() / RAND_MAX - 0.5f;
  for (i = 0; i < K * N; i++) b[i] = (float)rand() / RAND_MAX - 0.5f;
  for (i = 0; i < M * N; i++) c[i] = NAN;   /* an element the product leaves unwritten shows */
  cl_mem da = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof a, a, &err);
  cl_mem db = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof b, b, &err);
  cl_mem dc = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof c, c, &err);

  status = gemmtune_create(context, devices[di], &handle);
  if (status == GEMMTUNE_SUCCESS)
    status = gemmtune_sgemm(handle, queue, GEMMTUNE_ROW_MAJOR, GEMMTUNE_NO_TRANS, GEMMTUNE_NO_TRANS, M, N, K,
                            1.0f, da, 0, K, db, 0, N, 0.0f, dc, 0, N, NULL);
  if (status != GEMMTUNE_SUCCESS) {
    fprintf(stderr, "gemmtune: %s\n%s\n", gemmtune_status_message(status), gemmtune_last_error(handle));
    return 1;
  }
  clEnqueueReadBuffer(queue, dc, CL_TRUE, 0, sizeof c, c, 0, NULL, NULL);

  for (i = 0; i < M; i++)
    for (j = 0; j < N; j++) {
      double sum = 0;
      for (p = 0; p < K; p++) sum += (double)a[i * K + p] * b[p * N + j];
      double error = fabs(sum - c[i * N + j]);
      if (!(error <= worst)) worst = error;   /* NaN too */
    }
  printf("%s: sgemm %dx%dx%d, largest error %.3g\n", name, M, N, K, worst);
  gemmtune_release(handle);
  clReleaseMemObject(da); clReleaseMemObject(db); clReleaseMemObject(dc);
  clReleaseCommandQueue(queue); clReleaseContext(context);
  return worst < 1e-4 ? 0 : 1;
}
