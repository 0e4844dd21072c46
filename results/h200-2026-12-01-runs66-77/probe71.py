"""Run 71: 8 x 12 and 12 x 8 results per work-item in work-groups of 128 (3 per compute unit where
their registers fit, STREAMK 3) and VWG 2 (which 96-wide tiles need), against the shipped s default;
PTX kept (to read as machine code: ptxas -arch=sm_90, nvdisasm -c). Registers from NVIDIA's build log;
whole operation and each command's device time, median of 30, alternating with torch; results
checked against numpy in float64 on sampled columns (C poisoned with NaN first)."""
import os, warnings
import numpy as np, pyopencl as cl
from gemmtune.bench import _cuda_timer
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); src = fs.source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision("s")
NV = ["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []
VARIANTS = {"default": {}, "8x12 SK3": dict(NWG=96, NDIMC=8, VWG=2, STREAMK=3), "8x12 SK2": dict(NWG=96, NDIMC=8, VWG=2),
            "12x8 SK3": dict(MWG=96, MDIMC=8, VWG=2, STREAMK=3), "8x12 SK3 P5": dict(NWG=96, NDIMC=8, VWG=2, STREAMK=3, PIPE=5),
            "8x12 SK3 W0": dict(NWG=96, NDIMC=8, VWG=2, STREAMK=3, WARPM=0), "default VWG2": dict(VWG=2)}
VARIANTS = {k: v for k, v in VARIANTS.items() if k in os.environ.get("ONLY", k)}
def cfg(extra):
    return Config.of("xgemm_rt", {**fs.defaults, **S, **extra})
for name, extra in VARIANTS.items():
    prog = cl.Program(ctx, src).build(options=build_options(defines(cfg(extra), prec), dev) + NV)
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    if os.environ.get("OUT"):
        open(os.path.join(os.environ["OUT"], "probe71-" + name.replace(" ", "") + ".ptx"), "wb").write(prog.get_info(cl.program_info.BINARIES)[0])
    for part in log.split("Compiling entry function")[1:]:
        if part.split("'")[1] == "xgemm":
            print(f"{name}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
rng = np.random.default_rng(0)
for N in [int(x) for x in os.environ.get("SIZES", "4096,8192").split(",")]:
    m = n = k = N
    ha = rng.standard_normal((k, m)).astype(np.float32); hb = rng.standard_normal((n, k)).astype(np.float32)
    cols = rng.choice(n, 8, replace=False)
    ref = hb[cols].astype(np.float64) @ ha.astype(np.float64)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    c = cl.Buffer(ctx, mf.READ_WRITE, 4 * m * n)
    ops = {name: GemmOperation(q, cfg(extra), src, prec, m, n, k) for name, extra in VARIANTS.items()}
    errs = {}
    for name, op in ops.items():
        out = np.full((n, m), np.nan, np.float32); cl.enqueue_copy(q, c, out)
        op.enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
        errs[name] = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
    try:
        tt = _cuda_timer("torch", prec, m, n, k)
    except RuntimeError:
        tt = lambda: 1.0
    times = {name: [] for name in ops}; tor = []
    reps = int(os.environ.get("REPS", "35"))
    for i in range(reps):
        for name, op in ops.items():
            ev = op.enqueue(a, b, c); ev[-1].wait()
            if i >= min(5, reps - 1): times[name].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
        t = tt()
        if i >= min(5, reps - 1): tor.append(t)
    f = prec.flops(m, n, k) / 1e6
    for name, t in times.items():
        t = np.median(np.array(t), axis=0)
        print(f"{N} {name:12s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {errs[name]:.1e}", flush=True)
    print(f"{N} torch        {f/np.median(tor):8.0f}", flush=True)
