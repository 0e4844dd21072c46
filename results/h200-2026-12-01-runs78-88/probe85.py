"""Run 85: stream-K's pieces first (SK_FIRST: the split tiles' pieces are the first work-groups,
the whole tiles after them), with the parts added up inside xgemm by the part that arrives last,
against the same with the pieces last, and the code of 08270b0 (xgemm_fixup after xgemm); the s
default, whole operation and each command's device time, median of 30, contenders each first in
turn, alternating with torch; results checked against numpy in float64 on sampled columns, three
launches each. kernels_old.py and xgemm_rt_old.cl, beside it when it ran, are gemmtune/kernels.py
and kernels/xgemm_rt.cl at 08270b0; the new code is 08270b0 with sums-in-kernel-pieces-first.patch."""
import importlib.util, os, warnings
import numpy as np, pyopencl as cl
from gemmtune.bench import _cuda_timer
from gemmtune.device import open_device
from gemmtune import families
from gemmtune.kernels import GemmOperation
from gemmtune.precision import get_precision
from gemmtune.resources import load_kernel_source
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
families.Split.fixups = property(lambda s: s.split_tiles)
families.XGEMM_RT.__class__.fixup_width = staticmethod(lambda p: 4 if p["MWG"] % 4 == 0 else 2 if p["MWG"] % 2 == 0 else 1)
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("kernels_old", os.path.join(here, "kernels_old.py"))
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
OLD_SRC = open(os.path.join(here, "xgemm_rt_old.cl")).read()
for inc in ("common.cl", "pad.cl"):
    OLD_SRC = OLD_SRC.replace(f'#include "{inc}"', load_kernel_source(inc), 1)
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); SRC = fs.source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
S = {**S, **eval("dict(" + os.environ.get("CFG", "") + ")")}
prec = get_precision(os.environ.get("PREC", "s"))
VARIANTS = {"old": "old", "last": "new", "first": "first"}
def cfg():
    return Config.of("xgemm_rt", {**fs.defaults, **S})
def make(which, m, n, k):
    if which == "old":
        return old.GemmOperation(q, cfg(), OLD_SRC, prec, m, n, k)
    op = GemmOperation(q, cfg(), ("#define SK_FIRST 1\n" if which == "first" else "") + SRC, prec, m, n, k)
    if which == "first" and op.split is not None:
        op.workspace = (np.int32(len(op.split.pieces)),) + op.workspace[1:]
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
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    c = cl.Buffer(ctx, mf.READ_WRITE, hc.nbytes)
    ops = {name: make(which, m, n, k) for name, which in VARIANTS.items()}
    errs = {}
    for name, op in ops.items():
        e = 0.0
        for rep in range(3):
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
        names = list(ops); names = names[i % len(names):] + names[:i % len(names)]
        for name in names:
            ev = ops[name].enqueue(a, b, c); ev[-1].wait()
            if i >= min(5, reps - 1): times[name].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
        t = tt()
        if i >= min(5, reps - 1): tor.append(t)
    f = prec.flops(m, n, k) / 1e6
    for name, t in times.items():
        t = np.median(np.array(t), axis=0)
        print(f"{N} {name:6s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {errs[name]:.1e}", flush=True)
    print(f"{N} torch  {f/np.median(tor):8.0f}", flush=True)
