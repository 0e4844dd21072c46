"""Run 80: stream-K's parts added up inside xgemm by the part that arrives last (counted with an
atomic), against the previous code (HEAD before it: xgemm_fixup launched after xgemm), the s
default, whole operation and each command's device time, median of 30, alternating with torch;
results checked against numpy in float64 on sampled columns (C poisoned with NaN first).
kernels_old.py and xgemm_rt_old.cl, beside it when it ran, are gemmtune/kernels.py and
kernels/xgemm_rt.cl at 08270b0; the new code is 08270b0 with bkfast3-and-sums-in-kernel.patch
(runs 80 and 81 ran earlier forms of its adding-up, described in the README)."""
import importlib.util, os, sys, warnings
import numpy as np, pyopencl as cl
from gemmtune.bench import _cuda_timer
from gemmtune.device import open_device
from gemmtune import families
from gemmtune.kernels import GemmOperation, build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
# The previous host code, beside this one: it calls what families had then.
families.Split.fixups = property(lambda s: s.split_tiles)
families.XGEMM_RT.__class__.fixup_width = staticmethod(lambda p: 4 if p["MWG"] % 4 == 0 else 2 if p["MWG"] % 2 == 0 else 1)
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("kernels_old", os.path.join(here, "kernels_old.py"))
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
from gemmtune.resources import load_kernel_source
OLD_SRC = open(os.path.join(here, "xgemm_rt_old.cl")).read()
for inc in ("common.cl", "pad.cl"):   # unchanged since
    OLD_SRC = OLD_SRC.replace(f'#include "{inc}"', load_kernel_source(inc), 1)
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); SRC = fs.source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision(os.environ.get("PREC", "s"))
NV = ["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []
VARIANTS = {"old": ("old", {}), "new": ("new", {}), "old SK1": ("old", dict(STREAMK=1)), "new SK1": ("new", dict(STREAMK=1))}
VARIANTS = {k: v for k, v in VARIANTS.items() if k in os.environ.get("ONLY", k).split(",")}
def cfg(extra):
    return Config.of("xgemm_rt", {**fs.defaults, **S, **extra})
for name, (which, extra) in VARIANTS.items():
    prog = cl.Program(ctx, OLD_SRC if which == "old" else SRC).build(options=build_options(defines(cfg(extra), prec), dev) + NV)
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    for part in log.split("Compiling entry function")[1:]:
        if part.split("'")[1] == "xgemm":
            print(f"{name}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
rng = np.random.default_rng(0)
dt = prec.dtype
for size in os.environ.get("SIZES", "4096;8192;4000").split(";"):
    m, n, k = (int(x) for x in size.split(",")) if "," in size else (int(size),) * 3; N = f"{m}x{n}x{k}"
    def rand(shape):
        x = rng.standard_normal(shape)
        return (x + 1j * rng.standard_normal(shape) if prec.is_complex else x).astype(dt)
    ha, hb, hc = rand((k, m)), rand((n, k)), rand((n, m))
    cols = rng.choice(n, 8, replace=False)
    alpha, beta = (1.5, 0.5)
    ref = alpha * (hb[cols].astype(np.complex128) @ ha.astype(np.complex128)) + beta * hc[cols]
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    c = cl.Buffer(ctx, mf.READ_WRITE, hc.nbytes)
    ops = {name: (old.GemmOperation(q, cfg(extra), OLD_SRC, prec, m, n, k) if which == "old"
                  else GemmOperation(q, cfg(extra), SRC, prec, m, n, k)) for name, (which, extra) in VARIANTS.items()}
    errs = {}
    for name, op in ops.items():
        e = 0.0
        for rep in range(3):   # the counters must come back to 0 for the next launch
            cl.enqueue_copy(q, c, hc)
            op.enqueue(a, b, c, alpha, beta)[-1].wait(); out = np.empty_like(hc); cl.enqueue_copy(q, out, c)
            e = max(e, float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref))))
        errs[name] = e
    try:
        tt = _cuda_timer("torch", prec, m, n, k)
    except RuntimeError:
        tt = lambda: 1.0
    times = {name: [] for name in ops}; tor = []
    reps = int(os.environ.get("REPS", "35"))
    for i in range(reps):
        names = list(ops); names = names[i % len(names):] + names[:i % len(names)]   # each first in turn
        for name in names:
            op = ops[name]
            ev = op.enqueue(a, b, c); ev[-1].wait()
            if i >= min(5, reps - 1): times[name].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
        t = tt()
        if i >= min(5, reps - 1): tor.append(t)
    f = prec.flops(m, n, k) / 1e6
    for name, t in times.items():
        t = np.median(np.array(t), axis=0)
        print(f"{N} {name:8s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {errs[name]:.1e}", flush=True)
    print(f"{N} torch    {f/np.median(tor):8.0f}", flush=True)
