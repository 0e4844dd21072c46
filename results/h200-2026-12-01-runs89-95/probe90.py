"""Run 90: 8 x 16 and 16 x 8 results per work-item in work-groups of 256 (tiles of 128 x 256 and
256 x 128, one work-group per compute unit: cuBLAS's shape at 4096^3, run 89), with stream-K
(STREAMK 1), against the shipped s default. Registers from NVIDIA's build log; each command's
device time, median of REPS, contenders rotated; results checked against numpy in float64."""
import os, warnings
import numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.families import FAMILIES
from gemmtune.kernels import GemmOperation, build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); SRC = fs.source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision("s")
W = dict(NWG=256, STREAMK=1)          # 8 x 16
T = dict(MWG=256, STREAMK=1, VLM=4)   # 16 x 8
VARIANTS = {"default": {}, "8x16": W, "8x16 P5": dict(W, PIPE=5), "8x16 U4": dict(W, UNROLL=4), "8x16 U2": dict(W, UNROLL=2),
            "8x16 U1": dict(W, UNROLL=1), "8x16 W4": dict(W, WARPM=4), "8x16 W16": dict(W, WARPM=16), "8x16 W0": dict(W, WARPM=0),
            "8x16 VLM4": dict(W, VLM=4), "8x16 VLN8": dict(W, VLN=8), "8x16 P5 U4": dict(W, PIPE=5, UNROLL=4),
            "8x16 P7": dict(W, PIPE=7), "8x16 K16 P5": dict(W, KWG=16, PIPE=5, UNROLL=4),
            "16x8": T, "16x8 VLM2": dict(T, VLM=2), "16x8 U4": dict(T, UNROLL=4), "16x8 P5": dict(T, PIPE=5)}
VARIANTS = {k: v for k, v in VARIANTS.items() if k in os.environ.get("ONLY", k).split(",")}
NV = ["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []
def cfg(extra):
    return Config.of("xgemm_rt", {**fs.defaults, **S, **extra})
for name, extra in list(VARIANTS.items()):
    bad = FAMILIES["xgemm_rt"].broken(cfg(extra).params, info, prec)
    if bad is not None:
        print(f"{name}: breaks {bad.text if hasattr(bad, 'text') else bad}", flush=True); del VARIANTS[name]; continue
    prog = cl.Program(ctx, SRC).build(options=build_options(defines(cfg(extra), prec), dev) + NV)
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    for part in log.split("Compiling entry function")[1:]:
        if part.split("'")[1] == "xgemm":
            print(f"{name}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
rng = np.random.default_rng(0)
N = int(os.environ.get("N", "4096"))
ha = rng.standard_normal((N, N)).astype(np.float32); hb = rng.standard_normal((N, N)).astype(np.float32)
cols = rng.choice(N, 8, replace=False)
ref = hb[cols].astype(np.float64) @ ha.astype(np.float64)
mf = cl.mem_flags
a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
c = cl.Buffer(ctx, mf.READ_WRITE, 4 * N * N)
ops, errs = {}, {}
for name, extra in VARIANTS.items():
    op = GemmOperation(q, cfg(extra), SRC, prec, N, N, N)
    out = np.full((N, N), np.nan, np.float32); cl.enqueue_copy(q, c, out)
    op.enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
    errs[name] = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
    ops[name] = op
times = {name: [] for name in ops}
reps = int(os.environ.get("REPS", "15"))
for i in range(reps + 2):
    names = list(ops); names = names[i % len(names):] + names[:i % len(names)]
    for name in names:
        ev = ops[name].enqueue(a, b, c); ev[-1].wait()
        if i >= 2:
            times[name].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
f = prec.flops(N, N, N) / 1e6
for name, t in times.items():
    t = np.median(np.array(t), axis=0)
    print(f"{N} {name:12s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {errs[name]:.1e}", flush=True)
