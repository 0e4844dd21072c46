"""Run 77: pad_copy with its loads before its stores, 4 elements per work-item, in the work-group
copy_tile gives the device (the committed one), against one element per work-item in 16 x 4 (before run 74), B's transpose pass, and a plain copy of
float4s; s 4096^2 (64 MiB in, 64 MiB out), device time, median of 30, alternating; outputs checked
against numpy. Then the whole s operation at 4000^3 (A padded by pad_copy, B transposed and
padded) with the shipped default, against torch."""
import warnings
import numpy as np, pyopencl as cl
from gemmtune.bench import _cuda_timer
from gemmtune.device import open_device
from gemmtune.kernels import COPY_PER_ITEM, GemmOperation, build_options, copy_tile, defines
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); src = fs.source
prec = get_precision("s")
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
cfg = Config.of("xgemm_rt", {**fs.defaults, **S})
prog = cl.Program(ctx, src).build(options=build_options(defines(cfg, prec), dev))
extra = cl.Program(ctx, """
__kernel void copy4(const __global float4* restrict in, __global float4* restrict out) { out[get_global_id(0)] = in[get_global_id(0)]; }
__kernel void pad_copy_before(const int P, const int Q, const int ld_in, const int P_out, const int Q_out,
                              const int conj, const __global float* restrict in, __global float* restrict out) {
  const int i = get_global_id(0), j = get_global_id(1);
  if (i < P_out && j < Q_out) { float v = 0; if (i < P && j < Q) { v = in[j * ld_in + i]; } out[j * P_out + i] = v; }
}""").build()
N = 4096
h = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)   # row-major = column-major N x N
mf = cl.mem_flags
src_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=h)
dst = cl.Buffer(ctx, mf.READ_WRITE, h.nbytes)
i32 = np.int32
cols = -(-N // COPY_PER_ITEM)
TILE = copy_tile(dev)
print('pad_copy work-group', TILE, 'x', COPY_PER_ITEM)
runs = {
    "pad_copy": lambda: prog.pad_copy(q, (N, -(-cols // TILE[1]) * TILE[1]), TILE, i32(N), i32(N), i32(N), i32(N),
                                      i32(N), i32(0), src_buf, dst),
    "pad_copy before": lambda: extra.pad_copy_before(q, (N, N), (16, 4), i32(N), i32(N), i32(N), i32(N), i32(N), i32(0), src_buf, dst),
    "pad_transpose": lambda: prog.pad_transpose(q, (N, N // 4), (32, 8), i32(N), i32(N), i32(N), i32(N), i32(N), i32(0), src_buf, dst),
    "copy float4": lambda: extra.copy4(q, (N * N // 4,), (256,), src_buf, dst),
}
expect = {"pad_copy": h, "pad_copy before": h, "pad_transpose": h.T, "copy float4": h}
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
    print(f"{name:16s} {us:7.1f} us  {2 * h.nbytes / us / 1e6:5.2f} TB/s", flush=True)
m = n = k = 4000
rng = np.random.default_rng(1)
ha = rng.standard_normal((k, m)).astype(np.float32); hb = rng.standard_normal((n, k)).astype(np.float32)
sel = rng.choice(n, 8, replace=False)
ref = hb[sel].astype(np.float64) @ ha.astype(np.float64)
a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
c = cl.Buffer(ctx, mf.READ_WRITE, 4 * m * n)
op = GemmOperation(q, cfg, src, prec, m, n, k)
out = np.full((n, m), np.nan, np.float32); cl.enqueue_copy(q, c, out); op.enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
err = float(np.max(np.abs(out[sel] - ref)) / np.max(np.abs(ref)))
tt = _cuda_timer("torch", prec, m, n, k)
ts, tor = [], []
for i in range(35):
    ev = op.enqueue(a, b, c); ev[-1].wait(); t = tt()
    if i >= 5: ts.append([(e.profile.end - e.profile.start) * 1e-3 for e in ev]); tor.append(t)
t = np.median(np.array(ts), axis=0); f = prec.flops(m, n, k) / 1e6
print(f"4000 default whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {err:.1e}", flush=True)
print(f"4000 torch         {f / np.median(tor):8.0f}", flush=True)
