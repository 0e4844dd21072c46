"""Run 73: what B's transpose pass could reach at s 4096^3: the pass (pad_transpose, 32 x 8 work-items
moving 4 each) against pad_copy (the same bytes, no transpose) and a plain copy of float4s, each
64 MiB in and 64 MiB out; device time, median of 30, alternating; outputs checked against numpy.
It ran before run 74's pad_copy, which takes one more argument (elements per work-item)."""
import warnings
import numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); src = fs.source
prec = get_precision("s")
cfg = Config.of("xgemm_rt", {**fs.defaults, "TRANSPOSEX": 32, "TRANSPOSEY": 8, "TRANSPOSEW": 4})
prog = cl.Program(ctx, src).build(options=build_options(defines(cfg, prec), dev))
copy4 = cl.Program(ctx, "__kernel void copy4(const __global float4* restrict in, __global float4* restrict out)"
                        "{ out[get_global_id(0)] = in[get_global_id(0)]; }").build().copy4
N = 4096
h = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)   # row-major = column-major N x N
mf = cl.mem_flags
src_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=h)
dst = cl.Buffer(ctx, mf.READ_WRITE, h.nbytes)
i32 = np.int32
runs = {
    "pad_transpose": lambda: prog.pad_transpose(q, (N, N // 4), (32, 8), i32(N), i32(N), i32(N), i32(N), i32(N), i32(0), src_buf, dst),
    "pad_copy": lambda: prog.pad_copy(q, (N, N), (32, 8), i32(N), i32(N), i32(N), i32(N), i32(N), i32(0), src_buf, dst),
    "copy float4": lambda: copy4(q, (N * N // 4,), (256,), src_buf, dst),
}
expect = {"pad_transpose": h.T, "pad_copy": h, "copy float4": h}
for name, run in runs.items():
    cl.enqueue_copy(q, dst, np.full_like(h, np.nan)); run().wait()
    out = np.empty_like(h); cl.enqueue_copy(q, out, dst)
    print(f"{name}: output {'right' if np.array_equal(out, expect[name]) else 'WRONG'}", flush=True)
times = {name: [] for name in runs}
for i in range(35):
    for name, run in runs.items():
        e = run(); e.wait()
        if i >= 5: times[name].append((e.profile.end - e.profile.start) * 1e-3)
for name, t in times.items():
    us = float(np.median(t))
    print(f"{name:14s} {us:7.1f} us  {2 * h.nbytes / us / 1e6:5.2f} TB/s", flush=True)
