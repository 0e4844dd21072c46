"""Run 88: xgemm_fixup variants on the s default: FIXU unrolls the loop over parts by 4, FIXS
stores C a vector at a time where it can, FIXW gives each work-item W vectors (a W-th of the tile
apart, so each load instruction stays coalesced); the fixup kernel replaced by fixup88.cl in the
source. Whole operation and each command's device time, median of 30, contenders each first in
turn, alternating with torch; results checked against numpy in float64, alpha 1.5 beta 0.5,
three launches each."""
import math, os, warnings
import numpy as np, pyopencl as cl
from gemmtune.bench import _cuda_timer
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
here = os.path.dirname(os.path.abspath(__file__))
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); SRC = fs.source
cut = SRC.index("typedef union { VTYPE(FIXV) v; real e[FIXV]; } funion;")
FIX = open(os.path.join(here, "fixup88.cl")).read()
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
S = {**S, **eval("dict(" + os.environ.get("CFG", "") + ")")}
prec = get_precision(os.environ.get("PREC", "s"))
VARIANTS = {"shipped": None, "F0": (0, 0, 1), "U": (1, 0, 1), "S": (0, 1, 1), "US": (1, 1, 1), "S W2": (0, 1, 2),
            "US W2": (1, 1, 2), "S W4": (0, 1, 4)}
cfg = Config.of("xgemm_rt", {**fs.defaults, **S})
def make(v, m, n, k):
    if v is None:
        return GemmOperation(q, cfg, SRC, prec, m, n, k)
    u, s, w = v
    op = GemmOperation(q, cfg, SRC[:cut] + f"#define FIXU {u}\n#define FIXS {s}\n#define FIXW {w}\n" + FIX, prec, m, n, k)
    if op.fixup is not None:
        (g,), _ = op.fixup_sizes
        per_tile = S["MWG"] * S["NWG"] // (4 * w)
        op.fixup_sizes = (g // w,), (math.gcd(per_tile, 256),)
    return op
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
    ref0 = hb[cols].astype(np.complex128) @ ha.astype(np.complex128)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    c = cl.Buffer(ctx, mf.READ_WRITE, hc.nbytes)
    ops = {name: make(v, m, n, k) for name, v in VARIANTS.items()}
    errs = {}
    for name, op in ops.items():
        e = 0.0
        for rep in range(3):
            cl.enqueue_copy(q, c, hc)
            op.enqueue(a, b, c, alpha, beta)[-1].wait(); out = np.empty_like(hc); cl.enqueue_copy(q, out, c)
            e = max(e, float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref))))
        out = np.full_like(hc, np.nan); cl.enqueue_copy(q, c, out)   # beta 0: C poisoned
        op.enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
        e = max(e, float(np.max(np.abs(out[cols] - ref0)) / np.max(np.abs(ref0))))
        errs[name] = e
    try:
        tt = _cuda_timer("torch", prec, m, n, k)
    except RuntimeError:
        tt = lambda: 1.0
    times = {name: [] for name in ops}; tor = []
    reps = int(os.environ.get("REPS", "35"))
    for i in range(reps):
        names = list(ops); names = names[i % len(names):] + names[:i % len(names)]
        for name in names:
            ev = ops[name].enqueue(a, b, c); ev[-1].wait()
            if i >= min(5, reps - 1): times[name].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
        t = tt()
        if i >= min(5, reps - 1): tor.append(t)
    f = prec.flops(m, n, k) / 1e6
    for name, t in times.items():
        t = np.median(np.array(t), axis=0)
        print(f"{N} {name:8s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {errs[name]:.1e}", flush=True)
    print(f"{N} torch    {f/np.median(tor):8.0f}", flush=True)
