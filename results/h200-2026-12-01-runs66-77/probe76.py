"""Run 76: pad_copy with all its loads before its stores (4 per work-item) in three work-group shapes,
against b7f2f9d's pad_copy (a load and a store at a time, 4 per work-item in 32 x 2), the one element per work-item in 16 x 4 of before, B's transpose pass, and a plain copy of
float4s; s 4096^2 (64 MiB in, 64 MiB out), device time, median of 30, alternating; outputs checked
against numpy."""
import warnings
import numpy as np, pyopencl as cl
from gemmtune.bench import _cuda_timer
from gemmtune.device import open_device
from gemmtune.kernels import COPY_PER_ITEM, COPY_TILE, GemmOperation, build_options, defines
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
__kernel void pad_copy_two_phase(const int P, const int Q, const int ld_in, const int P_out, const int Q_out,
                                 const int conj, const __global float* restrict in, __global float* restrict out) {
  const int i = get_global_id(0);
  const int j0 = get_group_id(1) * get_local_size(1) * 4 + get_local_id(1);
  float v[4];
  #pragma unroll
  for (int w = 0; w < 4; w++) {
    const int j = j0 + w * (int)get_local_size(1);
    v[w] = (i < P && j < Q) ? in[j * ld_in + i] : 0.0f;
  }
  if (i < P_out) {
    #pragma unroll
    for (int w = 0; w < 4; w++) {
      const int j = j0 + w * (int)get_local_size(1);
      if (j < Q_out) { out[j * P_out + i] = v[w]; }
    }
  }
}
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
def pc(tile, per):
    cols = -(-N // per)
    return lambda: prog.pad_copy(q, (N, -(-cols // tile[1]) * tile[1]), tile, i32(N), i32(N), i32(N), i32(N), i32(N), i32(0),
                                 i32(per), src_buf, dst)
def two(tile):
    cols = -(-N // 4)
    return lambda: extra.pad_copy_two_phase(q, (N, -(-cols // tile[1]) * tile[1]), tile, i32(N), i32(N), i32(N), i32(N), i32(N),
                                            i32(0), src_buf, dst)
runs = {
    "two 32x2x4": two((32, 2)), "two 32x8x4": two((32, 8)), "two 64x4x4": two((64, 4)),
    "pad_copy": lambda: prog.pad_copy(q, (N, -(-cols // COPY_TILE[1]) * COPY_TILE[1]), COPY_TILE, i32(N), i32(N), i32(N), i32(N),
                                      i32(N), i32(0), i32(COPY_PER_ITEM), src_buf, dst),
    "pad_copy before": lambda: extra.pad_copy_before(q, (N, N), (16, 4), i32(N), i32(N), i32(N), i32(N), i32(N), i32(0), src_buf, dst),
    "pad_transpose": lambda: prog.pad_transpose(q, (N, N // 4), (32, 8), i32(N), i32(N), i32(N), i32(N), i32(N), i32(0), src_buf, dst),
    "copy float4": lambda: extra.copy4(q, (N * N // 4,), (256,), src_buf, dst),
}
expect = {"two 32x2x4": h, "two 32x8x4": h, "two 64x4x4": h, "pad_copy": h, "pad_copy before": h, "pad_transpose": h.T, "copy float4": h}
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
