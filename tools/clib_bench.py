"""The exported C library (``gemmtune export --format c``) beside ``gemmtune.Gemm``: device time
for the same configuration, and the host cost of a C call beyond the OpenCL enqueues it makes.

    python tools/clib_bench.py [--device N] [--precision s] [--size 256] [--calls 2000] [--repeats 30] [--db URL]
                               [--batch COUNT]

Exports the library from ``--db`` (default: $GEMMTUNE_DB, else the default database) into a
temporary directory and compiles it with the system's C compiler. Then, on one device:

* device time: the median, over ``--repeats`` calls of each in turn, of the product's kernel (the
  last enqueued) as the queue's profiling measures it, for the C call (through ctypes) and for
  ``Gemm`` given the configuration the C library chose; and the median time of a call followed by
  a wait for it;
* host cost, measured in C at min(size, 64): the median time of one ``gemmtune_sgemm`` call (its
  operation prepared, no wait) and, after each, of as many enqueues of a kernel that does nothing
  as the call makes, over ``--calls`` turns; the cost beyond the enqueues is the call's time less
  those enqueues';
* with ``--batch COUNT``: COUNT problems of size^3 (each its own a, b and c, one after another in
  a buffer each) as one ``gemmtune_<p>gemm_strided_batched`` call, and as COUNT single calls in a
  loop, each followed by a wait for the last, the median of ``--repeats`` of each in turn; the
  batch's result is checked against numpy first (every problem, or 16 of them).
"""

from __future__ import annotations

import argparse
import ctypes as C
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

HOST_COST = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gemmtune.h"

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int order(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *t, int n) { qsort(t, (size_t)n, sizeof *t, order); return t[n / 2]; }

int main(int argc, char **argv) {
  cl_uint pi = (cl_uint)atoi(argv[1]), di = (cl_uint)atoi(argv[2]), np, nd;
  int n = atoi(argv[3]), calls = atoi(argv[4]), i, launches;
  cl_platform_id platforms[16];
  cl_device_id devices[16];
  cl_int err;
  gemmtune_handle h;
  gemmtune_launch_plan plan;
  const char *nothing = "__kernel void nothing(__global float* x) { }";
  double *t = malloc(sizeof *t * (size_t)calls), *u = malloc(sizeof *u * (size_t)calls), call, trivial;
  size_t one = 1;
  clGetPlatformIDs(16, platforms, &np);
  clGetDeviceIDs(platforms[pi], CL_DEVICE_TYPE_ALL, 16, devices, &nd);
  cl_context ctx = clCreateContext(NULL, 1, &devices[di], NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(ctx, devices[di], 0, &err);
  cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * (size_t)n * n, NULL, &err);
  cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * (size_t)n * n, NULL, &err);
  cl_mem c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * (size_t)n * n, NULL, &err);
  if (gemmtune_create(ctx, devices[di], &h) != GEMMTUNE_SUCCESS) return 1;
  if (gemmtune_plan(h, 's', GEMMTUNE_NO_TRANS, GEMMTUNE_NO_TRANS, n, n, n, n, n, n, 0, &plan) != GEMMTUNE_SUCCESS) return 1;
  launches = plan.nlaunches;
  gemmtune_plan_release(&plan);
  cl_program p = clCreateProgramWithSource(ctx, 1, &nothing, NULL, &err);
  clBuildProgram(p, 1, &devices[di], "", NULL, NULL);
  cl_kernel k = clCreateKernel(p, "nothing", &err);
  clSetKernelArg(k, 0, sizeof c, &c);
  /* the call and as many trivial enqueues in turn, so that both see the same machine */
  for (i = -100; i < calls; i++) {
    double t0 = now(), t1, t2;
    int j;
    if (gemmtune_sgemm(h, q, GEMMTUNE_COL_MAJOR, GEMMTUNE_NO_TRANS, GEMMTUNE_NO_TRANS, n, n, n, 1.0f, a, 0, n, b, 0, n,
                       0.0f, c, 0, n, NULL) != GEMMTUNE_SUCCESS) return 1;
    t1 = now();
    for (j = 0; j < launches; j++) clEnqueueNDRangeKernel(q, k, 1, NULL, &one, &one, 0, NULL, NULL);
    t2 = now();
    if (i >= 0) { t[i] = t1 - t0; u[i] = t2 - t1; }
    if (i % 50 == 49) clFinish(q);   /* outside the timed calls: a queue that never drains */
  }
  clFinish(q);
  call = median(t, calls);
  trivial = median(u, calls) / launches;
  printf("%d %.9f %.9f\n", launches, call, trivial);
  return 0;
}
"""


def profiled_ms(event) -> float:
    return (event.profile.end - event.profile.start) * 1e-6


def batch_figures(lib, handle, queue, prec, n: int, count: int, repeats: int) -> dict:
    """One strided batched call of ``count`` n^3 problems against as many single calls: the
    median wall time of each, call(s) and wait, in turn; the batch's product checked first."""
    import pyopencl as cl

    from gemmtune.export.clib.binding import OPS, scalar
    from gemmtune.measure.verify import Reference, compare, random_matrix

    rng = np.random.default_rng(1)
    host = [random_matrix(prec, (count, n, n), rng) for _ in range(2)]
    mf = cl.mem_flags
    a, b = (cl.Buffer(queue.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x) for x in host)
    c = cl.Buffer(queue.context, mf.READ_WRITE, count * n * n * prec.bytes)
    cl.enqueue_fill_buffer(queue, c, prec.nan, 0, c.size)
    one, zero, size = scalar(prec.code, 1.0 + 0j), scalar(prec.code, 0j), n * n
    batched = getattr(lib, f"gemmtune_{prec.code}gemm_strided_batched")
    single = getattr(lib, f"gemmtune_{prec.code}gemm")

    def wait(event) -> None:
        cl.Event.from_int_ptr(event.value, retain=False).wait()

    def batch_call() -> None:
        event = C.c_void_p()
        assert batched(handle, queue.int_ptr, 101, OPS["N"], OPS["N"], n, n, n, one, a.int_ptr, 0, n, size, b.int_ptr,
                       0, n, size, zero, c.int_ptr, 0, n, size, count, C.byref(event)) == 0, lib.gemmtune_last_error(handle)
        wait(event)

    def loop_calls() -> None:
        for z in range(count):
            event = C.c_void_p()
            assert single(handle, queue.int_ptr, 101, OPS["N"], OPS["N"], n, n, n, one, a.int_ptr, z * size, n,
                          b.int_ptr, z * size, n, zero, c.int_ptr, z * size, n,
                          C.byref(event) if z == count - 1 else None) == 0, lib.gemmtune_last_error(handle)
        wait(event)

    batch_call()
    got = np.empty((count, n, n), prec.dtype)
    cl.enqueue_copy(queue, got, c)
    for z in sorted({0, count - 1, *rng.integers(0, count, min(count, 16) - 2)}):
        check = compare(got[z], Reference.compute(prec, host[0][z], host[1][z], None, 1.0, 0.0), prec)
        assert check.passed, (z, check)
    loop_calls()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        batch_call()
        t1 = time.perf_counter()
        loop_calls()
        times.append((t1 - t0, time.perf_counter() - t1))
    return {"batch_ms": statistics.median(t[0] for t in times) * 1e3,
            "loop_ms": statistics.median(t[1] for t in times) * 1e3}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--precision", default="s", choices=list("sdcz"))
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--db", default=None)
    parser.add_argument("--batch", type=int, default=0)
    args = parser.parse_args(argv)

    import pyopencl as cl
    import pyopencl.array as cla

    import gemmtune
    from gemmtune.export import clib
    from gemmtune.db.urls import database_url
    from gemmtune.devices.opencl import open_device
    from gemmtune.precision import get_precision
    from gemmtune.report.table import load
    from gemmtune.space import make_config, shipped_families

    cc = shutil.which("cc") or "gcc"
    info, device = open_device(args.device)
    prec = get_precision(args.precision)
    n = args.size
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        found = load(database_url(args.db))
        clib.write(clib.generate(clib.ranked_rows(found.rows, found.devices), found.devices, found.shown), where)
        subprocess.run([cc, "-O2", "-fPIC", "-shared", str(where / "gemmtune.c"), "-o", str(where / "libgemmtune.so"),
                        "-lOpenCL", "-lm"], check=True)
        (where / "host_cost.c").write_text(HOST_COST)
        subprocess.run([cc, "-O2", f"-I{where}", str(where / "host_cost.c"), str(where / "gemmtune.c"), "-o",
                        str(where / "host_cost"), "-lOpenCL", "-lm"], check=True)
        from gemmtune.export.clib.binding import OPS, Plan, load as load_library, scalar

        lib = load_library(where / "libgemmtune.so")
        context = cl.Context([device])
        queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        handle = C.c_void_p()
        assert lib.gemmtune_create(context.int_ptr, device.int_ptr, C.byref(handle)) == 0
        plan = Plan()
        assert lib.gemmtune_plan(handle, prec.code.encode(), OPS["N"], OPS["N"], n, n, n, n, n, n, 0, C.byref(plan)) == 0
        params = {plan.param_names[i].decode(): plan.param_values[i] for i in range(plan.nparams)}
        config = make_config(shipped_families(), plan.family.decode(), params)
        source = plan.source.decode()
        lib.gemmtune_plan_release(C.byref(plan))

        rng = np.random.default_rng(0)
        a, b = (cla.to_device(queue, rng.standard_normal((n, n)).astype(prec.dtype)) for _ in range(2))
        c = cla.zeros(queue, (n, n), prec.dtype)
        gemm = getattr(lib, f"gemmtune_{prec.code}gemm")
        one, zero = scalar(prec.code, 1.0 + 0j), scalar(prec.code, 0j)

        def c_call() -> float:
            event = C.c_void_p()
            status = gemm(handle, queue.int_ptr, 102, OPS["N"], OPS["N"], n, n, n, one, a.base_data.int_ptr, 0, n,
                          b.base_data.int_ptr, 0, n, zero, c.base_data.int_ptr, 0, n, C.byref(event))
            assert status == 0, lib.gemmtune_last_error(handle)
            done = cl.Event.from_int_ptr(event.value, retain=False)
            done.wait()
            return profiled_ms(done)

        python = gemmtune.Gemm(queue, prec, config=config)

        def python_call() -> float:
            python(a, b, c)   # row-major a @ b: the column-major n x n x n problem, ops N, N
            queue.finish()
            c.events.clear()
            return profiled_ms(python.last_events[-1])

        def wall(fn) -> float:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3

        for fn in (c_call, python_call):
            fn()   # builds
        # in turn, so that both see the same machine (other processes' load comes and goes)
        device = [(c_call(), python_call()) for _ in range(args.repeats)]
        walls = [(wall(c_call), wall(python_call)) for _ in range(args.repeats)]
        results = {"c_device_ms": statistics.median(d[0] for d in device),
                   "gemm_device_ms": statistics.median(d[1] for d in device),
                   "c_call_finish_ms": statistics.median(w[0] for w in walls),
                   "gemm_call_finish_ms": statistics.median(w[1] for w in walls)}
        if args.batch > 0:
            results.update(batch_figures(lib, handle, queue, prec, n, args.batch, args.repeats))
        assert lib.gemmtune_release(handle) == 0
        out = subprocess.run([str(where / "host_cost"), str(info.platform_index), str(info.device_index), str(min(n, 64)),
                              str(args.calls)], check=True, capture_output=True, text=True).stdout.split()
    launches, call_s, trivial_s = int(out[0]), float(out[1]), float(out[2])
    results.update(launches=launches, c_call_us=call_s * 1e6, trivial_launch_us=trivial_s * 1e6,
                   beyond_enqueues_us=(call_s - launches * trivial_s) * 1e6,
                   device_ratio=results["c_device_ms"] / results["gemm_device_ms"])
    print(f"device {info.index} ({info.name}), {prec.code}gemm {n}^3, {source} configuration {config.kernel} {config}")
    print(f"device time, C call        {results['c_device_ms']:9.5f} ms   (the product's kernel, median of {args.repeats})")
    print(f"device time, Gemm          {results['gemm_device_ms']:9.5f} ms")
    print(f"C / Gemm                   {results['device_ratio']:9.3f}")
    print(f"C call + wait              {results['c_call_finish_ms']:9.4f} ms")
    print(f"Gemm call + finish         {results['gemm_call_finish_ms']:9.4f} ms")
    print(f"C call, host ({min(n, 64)}^3)       {results['c_call_us']:9.2f} us   ({launches} enqueue(s), median of {args.calls})")
    print(f"trivial launch             {results['trivial_launch_us']:9.2f} us")
    print(f"beyond its enqueues        {results['beyond_enqueues_us']:9.2f} us")
    if args.batch > 0:
        print(f"batch of {args.batch}, one call      {results['batch_ms']:9.4f} ms   (strided batched, call + wait)")
        print(f"batch of {args.batch}, single calls  {results['loop_ms']:9.4f} ms   (a call per problem, wait for the last)")
        print(f"single calls / batch       {results['loop_ms'] / results['batch_ms']:9.3f}")
    return results


if __name__ == "__main__":
    main()
