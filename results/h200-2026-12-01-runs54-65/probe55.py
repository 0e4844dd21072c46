"""Run 55: copies from advancing addresses (the committed kernel before them as 'old'), stream-K
with and without a register cap; registers and PTX; whole operation and GEMM kernels alone,
device time, median of 30, alternating with torch; results checked on sampled columns."""
import os, subprocess, warnings
import numpy as np, pyopencl as cl
from gemmtune import kernels
from gemmtune.bench import _cuda_timer
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, device_time_ms, build_options, defines, program_binary
from gemmtune.precision import get_precision
from gemmtune.space import load_space, make_config
warnings.simplefilter("ignore")
OUT = os.environ.get("OUT", "/tmp")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); src = space.family("xgemm_rt").source
os.makedirs("/tmp/oldk", exist_ok=True)
for f in ("xgemm_rt.cl", "common.cl", "pad.cl"):
    open(f"/tmp/oldk/{f}", "w").write(subprocess.run(["git", "show", f"HEAD:kernels/{f}"], capture_output=True, text=True).stdout)
from pathlib import Path
from gemmtune.resources import load_kernel_source
old = load_kernel_source("xgemm_rt.cl", Path("/tmp/oldk"))
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=4, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision("s")
NV = ["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []
CAP = None
for opt in (["-cl-nv-maxrregcount=128"], ["-cl-nv-maxrregcount", "128"]):
    try:
        cl.Program(ctx, "__kernel void f(__global float* x) { x[0] = 1; }").build(options=opt)
        CAP = opt; break
    except Exception as e:
        print("option", opt, "refused:", str(e).splitlines()[0])
print("register cap option:", CAP, flush=True)
# name: (source, params, extra build options)
VARIANTS = {"old-S0": (old, dict(STREAMK=0), []), "S0": (src, dict(STREAMK=0), []), "SK2": (src, dict(STREAMK=2), [])}
if CAP:
    VARIANTS["SK2-cap"] = (src + "\n// capped\n", dict(STREAMK=2), CAP)
    VARIANTS["S0-cap"] = (src + "\n// capped\n", dict(STREAMK=0), CAP)
for name, (source, extra, opts) in VARIANTS.items():
    cfg = make_config(space, "xgemm_rt", {**S, **extra})
    prog = cl.Program(ctx, source).build(options=build_options(defines(cfg, prec), dev) + opts + NV)
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    for part in log.split("Compiling entry function")[1:]:
        fn = part.split("'")[1]
        if fn.startswith("xgemm"):
            print(f"{name} {fn}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
    open(os.path.join(OUT, f"s-{name}.ptx"), "wb").write(program_binary(prog).rstrip(b"\0"))

def make_op(name, m, n, k):
    source, extra, opts = VARIANTS[name]
    saved = kernels.BUILD_OPTIONS
    kernels.BUILD_OPTIONS = (*saved, *opts)
    try:
        op = GemmOperation(q, make_config(space, "xgemm_rt", {**S, **extra}), source, prec, m, n, k)
    finally:
        kernels.BUILD_OPTIONS = saved
    if name.startswith("old"):   # the committed kernel's STREAMK arguments: (split_from, pieces, work, counts)
        op.workspace = op.workspace + (cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4),)
    return op

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
    ops = {name: make_op(name, m, n, k) for name in VARIANTS}
    errs = {}
    for name, op in ops.items():
        out = np.full((n, m), np.nan, np.float32); cl.enqueue_copy(q, c, out)
        op.enqueue(a, b, c)[-1].wait()
        cl.enqueue_copy(q, out, c)
        errs[name] = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
    try:
        tt = _cuda_timer("torch", prec, m, n, k)
    except RuntimeError:
        tt = lambda: 1.0
    whole = {name: [] for name in ops}; kern = {name: [] for name in ops}; tor = []
    for i in range(35):
        for name, op in ops.items():
            ev = op.enqueue(a, b, c); ev[-1].wait()
            if i >= 5:
                whole[name].append(device_time_ms(ev)); kern[name].append(device_time_ms(ev[-op.kernel_events:]))
        t = tt()
        if i >= 5: tor.append(t)
    f = prec.flops(m, n, k) / 1e6
    for name, op in ops.items():
        print(f"{N} {name:8s} whole {f/np.median(whole[name]):8.0f}  kernels {f/np.median(kern[name]):8.0f}  "
              f"err {errs[name]:.1e}  {op.split}", flush=True)
    print(f"{N} torch    {f/np.median(tor):8.0f}", flush=True)
