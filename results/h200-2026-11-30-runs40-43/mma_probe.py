"""Probe: can OpenCL on the H200 reach the FP64 tensor cores through inline PTX (mma.sync .f64)?

1. For each shape, one warp multiplies random A (M x K) by B (K x N) under an assumed fragment
   layout; compared to numpy in float64.
2. Throughput of each shape with operands in registers, next to plain DFMA.
3. The PTX header the driver generates (.version / .target).
"""
import sys, time
import numpy as np
import pyopencl as cl

SHAPES = {  # name: (M, N, K, a regs, b regs, c regs)
    "m8n8k4": (8, 8, 4, 1, 1, 2),
    "m16n8k4": (16, 8, 4, 2, 1, 4),
    "m16n8k8": (16, 8, 8, 4, 2, 4),
    "m16n8k16": (16, 8, 16, 8, 4, 4),
}

def asm(name, na, nb, nc):
    d = ", ".join(f"%{i}" for i in range(nc))
    a = ", ".join(f"%{nc + i}" for i in range(na))
    b = ", ".join(f"%{nc + na + i}" for i in range(nb))
    outs = ", ".join(f'"+d"(c[{i}])' for i in range(nc))
    ins = ", ".join([f'"d"(a[{i}])' for i in range(na)] + [f'"d"(b[{i}])' for i in range(nb)])
    return (f'__asm__ __volatile__("mma.sync.aligned.{name}.row.col.f64.f64.f64.f64 '
            f'{{{d}}}, {{{a}}}, {{{b}}}, {{{d}}};" : {outs} : {ins});')

def src(name):
    M, N, K, na, nb, nc = SHAPES[name]
    return f"""
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define MMA(c, a, b) {asm(name, na, nb, nc)}
__kernel void one(__global const double* A, __global const double* B, __global double* D) {{
  int lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  double a[{na}], b[{nb}], c[{nc}];
  for (int i = 0; i < {na}; i++) a[i] = A[(g + 8 * (i % 2) * ({M} > 8)) * {K} + t + 4 * ({M} > 8 ? i / 2 : i)];
  for (int i = 0; i < {nb}; i++) b[i] = B[g * {K} + t + 4 * i];
  for (int i = 0; i < {nc}; i++) c[i] = 0.0;
  MMA(c, a, b)
  for (int i = 0; i < {nc}; i++) D[(g + 8 * (i / 2)) * {N} + 2 * t + (i % 2)] = c[i];
}}
__kernel void rate(__global double* out, int iters) {{
  int lane = get_local_id(0);
  double a[{na}], b[{nb}], c[8][{nc}];
  for (int i = 0; i < {na}; i++) a[i] = 1.0 + lane * 1e-3 + i;
  for (int i = 0; i < {nb}; i++) b[i] = 1.0 - lane * 1e-3 - i;
  for (int j = 0; j < 8; j++) for (int i = 0; i < {nc}; i++) c[j][i] = 0.0;
  for (int it = 0; it < iters; it++) {{
    #pragma unroll
    for (int j = 0; j < 8; j++) {{ MMA(c[j], a, b) }}
  }}
  double s = 0.0;
  for (int j = 0; j < 8; j++) for (int i = 0; i < {nc}; i++) s += c[j][i];
  out[get_global_id(0)] = s;
}}
"""

FMA = """
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void rate(__global double* out, int iters) {
  double a = 1.0 + get_local_id(0) * 1e-3, b = 1.0 - get_local_id(0) * 1e-3, c[16];
  for (int j = 0; j < 16; j++) c[j] = j;
  for (int it = 0; it < iters; it++) {
    #pragma unroll
    for (int j = 0; j < 16; j++) c[j] = fma(a, b, c[j]);
  }
  double s = 0.0;
  for (int j = 0; j < 16; j++) s += c[j];
  out[get_global_id(0)] = s;
}
"""

def timed(q, k, gsize, lsize, *args):
    k(q, gsize, lsize, *args).wait()
    best = 1e9
    for _ in range(5):
        e = k(q, gsize, lsize, *args); e.wait()
        best = min(best, (e.profile.end - e.profile.start) * 1e-9)
    return best

if __name__ == "__main__":
    ctx = cl.create_some_context(interactive=False)
    dev = ctx.devices[0]
    q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    print(dev.name, dev.version, dev.driver_version, flush=True)
    rng = np.random.default_rng(1)
    groups, wg, iters = dev.max_compute_units * 16, 128, 4096
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, groups * wg * 8)
    p = cl.Program(ctx, FMA).build()
    s = timed(q, p.rate, (groups * wg,), (wg,), out, np.int32(iters))
    print(f"DFMA rate: {groups * wg * iters * 16 * 2 / s / 1e9:,.0f} GFLOP/s", flush=True)
    for name, (M, N, K, na, nb, nc) in SHAPES.items():
        try:
            p = cl.Program(ctx, src(name)).build(options=["-cl-nv-verbose"])
        except Exception as e:
            print(name, "BUILD FAILED:", str(e)[:1500], flush=True)
            continue
        log = p.get_build_info(dev, cl.program_build_info.LOG)
        print(name, "build log:", " | ".join(l.strip() for l in log.splitlines() if l.strip())[:400])
        if name == "m8n8k4":
            ptx = p.get_info(cl.program_info.BINARIES)[0].decode(errors="replace")
            print("PTX header:", " | ".join(l for l in ptx.splitlines()[:30] if l.startswith(".")))
            print("mma lines:", [l.strip() for l in ptx.splitlines() if "mma" in l][:3])
        A = rng.standard_normal((M, K)); B = rng.standard_normal((K, N))
        dA = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=A)
        dB = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(B.T))
        D = np.full((M, N), np.nan)
        dD = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=D)
        try:
            p.one(q, (32,), (32,), dA, dB, dD).wait()
            cl.enqueue_copy(q, D, dD).wait()
            err = np.abs(D - A @ B).max()
            print(f"{name}: max |D - A@B| = {err:.3g}", "OK" if err < 1e-12 else "WRONG LAYOUT", flush=True)
            if err >= 1e-12:
                print(np.round(D, 3)); print(np.round(A @ B, 3))
            s = timed(q, p.rate, (groups * wg,), (wg,), out, np.int32(iters))
            print(f"{name} rate: {groups * wg // 32 * iters * 8 * M * N * K * 2 / s / 1e9:,.0f} GFLOP/s", flush=True)
        except Exception as e:
            print(name, "RUN FAILED:", str(e)[:500], flush=True)
            ctx = cl.create_some_context(interactive=False); dev = ctx.devices[0]
            q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
            out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, groups * wg * 8)
