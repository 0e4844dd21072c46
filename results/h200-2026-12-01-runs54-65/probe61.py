"""Run 61: where the rest of the time goes at 4096^3 with stream-K (run 59's best): each command's
device time (B's transpose pass, xgemm, xgemm_fixup); transpose tiles; VLM 4; a fixup that reads
4 elements per work-item as one vector. Median of 30, alternating."""
import os, warnings
import numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import load_space, make_config
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); src = space.family("xgemm_rt").source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=4, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision("s")
FIX4 = """
__kernel void fixup4(const int M, const int N, const float alpha, const float beta, __global float* C, const int ldc,
                     const __global int4* restrict fixups, const __global float4* restrict work) {
  const int4 fix = fixups[get_global_id(0) / (MWG * NWG / 4)];
  const int e = (get_global_id(0) % (MWG * NWG / 4)) * 4;
  const int tiles_m = (M + MWG - 1) / MWG;
  const int m = (fix.x % tiles_m) * MWG + e % MWG, n = (fix.x / tiles_m) * NWG + e / MWG;
  float4 sum = (float4)(0);
  for (int p = 0; p < fix.z; p++) { sum += work[((size_t)(fix.y + p) * (MWG * NWG) + e) / 4]; }
  if (n < N) {
    if (m + 0 < M) C[n * ldc + m + 0] = alpha * sum.x;
    if (m + 1 < M) C[n * ldc + m + 1] = alpha * sum.y;
    if (m + 2 < M) C[n * ldc + m + 2] = alpha * sum.z;
    if (m + 3 < M) C[n * ldc + m + 3] = alpha * sum.w;
  }
}
"""
fix4 = cl.Program(ctx, FIX4).build(options=["-DMWG=128", "-DNWG=128"]).fixup4
VARIANTS = {"best": {}, "VLM4": dict(VLM=4), "VLM4-WARPM4": dict(VLM=4, WARPM=4),
            "T32x8x8": dict(TRANSPOSEW=8), "T32x16x4": dict(TRANSPOSEY=16), "T64x8x4": dict(TRANSPOSEX=64),
            "T32x32x1": dict(TRANSPOSEY=32, TRANSPOSEW=1), "T16x16x4": dict(TRANSPOSEX=16, TRANSPOSEY=16)}
N = int(os.environ.get("SIZE", "4096")); REPS = int(os.environ.get("REPS", "35"))
m = n = k = N
rng = np.random.default_rng(0)
ha = rng.standard_normal((k, m)).astype(np.float32); hb = rng.standard_normal((n, k)).astype(np.float32)
cols = rng.choice(n, 8, replace=False)
ref = hb[cols].astype(np.float64) @ ha.astype(np.float64)
mf = cl.mem_flags
a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
c = cl.Buffer(ctx, mf.READ_WRITE, 4 * m * n)
ops = {name: GemmOperation(q, make_config(space, "xgemm_rt", {**S, **extra}), src, prec, m, n, k) for name, extra in VARIANTS.items()}
def fix4_run(op, wait):
    size = len(op.split.fixups) * 128 * 128 // 4
    return fix4(q, (size,), (256,), np.int32(m), np.int32(n), np.float32(1), np.float32(0), c, np.int32(m), op.fixups,
                op.workspace[-1], wait_for=wait)
def err():
    out = np.full((n, m), np.nan, np.float32); cl.enqueue_copy(q, out, c)
    return float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
errs = {}
for name, op in ops.items():
    cl.enqueue_copy(q, c, np.full((n, m), np.nan, np.float32)); op.enqueue(a, b, c)[-1].wait(); errs[name] = err()
op = ops["best"]
cl.enqueue_copy(q, c, np.full((n, m), np.nan, np.float32)); ev = op.enqueue(a, b, c); fix4_run(op, ev[-2:-1]).wait(); errs["fix4"] = err()
times = {name: [] for name in [*ops, "fix4"]}
for i in range(REPS):
    for name, op in ops.items():
        ev = op.enqueue(a, b, c); ev[-1].wait()
        if i >= min(5, REPS - 1): times[name].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
    op = ops["best"]
    ev = op.enqueue(a, b, c)[:-1]; ev.append(fix4_run(op, ev[-1:])); ev[-1].wait()
    if i >= min(5, REPS - 1): times["fix4"].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
f = prec.flops(m, n, k) / 1e6
for name, t in times.items():
    t = np.median(np.array(t), axis=0)
    print(f"{N} {name:12s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {errs[name]:.1e}", flush=True)
