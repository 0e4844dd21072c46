"""Run 87: A read 4 values at a time (VLM 4) in the s default, held to 128 registers by PTX's .maxnreg (variants named "... r") or by the build option -cl-nv-maxrregcount=128 ("... o"); from probe78.py (runs 78, 83); SIZES as M,N,K triples separated by ;, e.g. 4096,4096,4104): B as given and staged as given (BKFAST 3: [n][k] local slices, KVEC values of k read
as one vector), no transpose pass, against the shipped s default (transpose pass + kernel +
fixup). Registers from NVIDIA's build log; whole operation and each command's device time,
median of 30, alternating with torch; results checked against numpy in float64 on sampled
columns (C poisoned with NaN first)."""
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
space = load_space(); fs = space.family("xgemm_rt"); SRC = fs.source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision("s")
NV = ["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []
VARIANTS = {"default": ({}, 4), "default r": ({}, 4), "VLM4": (dict(VLM=4), 4), "VLM4 r": (dict(VLM=4), 4),
            "VLM4 o": (dict(VLM=4), 4), "VLM4 W4 r": (dict(VLM=4, WARPM=4), 4), "VLM4 W16 r": (dict(VLM=4, WARPM=16), 4),
            "VLM4 P4 r": (dict(VLM=4, PADL=4), 4), "VLM8 r": (dict(VLM=8), 4)}
VARIANTS = {k: v for k, v in VARIANTS.items() if k in os.environ.get("ONLY", k).split(",")}
def cfg(extra):
    return Config.of("xgemm_rt", {**fs.defaults, **S, **extra})
def src(kv):
    return f"#define KVEC {kv}\n" + SRC
BINS = {}; OPTS = {}; DROP = set()
for name, (extra, kv) in VARIANTS.items():
    opts = build_options(defines(cfg(extra), prec), dev)
    if name.endswith(" o"):
        for form in (["-cl-nv-maxrregcount=128"], ["-cl-nv-maxrregcount", "128"]):
            try:
                cl.Program(ctx, src(kv)).build(options=opts + form)
                OPTS[name] = form; break
            except cl.RuntimeError as e:
                print(f"{name}: {' '.join(form)} refused: {str(e).splitlines()[0][:120]}", flush=True)
        if name not in OPTS:
            DROP.add(name); continue
        opts = opts + OPTS[name]
    prog = cl.Program(ctx, src(kv)).build(options=opts + NV)
    if name.endswith(" r") and "NVIDIA" in dev.platform.name:
        text = prog.get_info(cl.program_info.BINARIES)[0].rstrip(b"\0").decode()
        i = text.index(".entry xgemm("); j = text.index(")", i) + 1
        ptx = (text[:j] + f"\n.maxnreg {os.environ.get('MAXNREG', '128')}" + text[j:]).encode() + b"\0"
        prog = cl.Program(ctx, [dev], [ptx]).build(options=opts + NV)
        BINS[name] = ptx
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    if name in ("default", "VLM4 r", "VLM4 o") and os.environ.get("OUT"):
        open(os.path.join(os.environ["OUT"], "probe87-" + name.replace(" ", "") + ".ptx"), "wb").write(prog.get_info(cl.program_info.BINARIES)[0])
    for part in log.split("Compiling entry function")[1:]:
        if part.split("'")[1] == "xgemm":
            print(f"{name}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
rng = np.random.default_rng(0)
for size in os.environ.get("SIZES", "4096,8192").split(";"):
    m, n, k = (int(x) for x in size.split(",")) if "," in size else (int(size),) * 3; N = f"{m}x{n}x{k}"
    ha = rng.standard_normal((k, m)).astype(np.float32); hb = rng.standard_normal((n, k)).astype(np.float32)
    cols = rng.choice(n, 8, replace=False)
    ref = hb[cols].astype(np.float64) @ ha.astype(np.float64)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    c = cl.Buffer(ctx, mf.READ_WRITE, 4 * m * n)
    import gemmtune.kernels as K
    def make(name, extra, kv):
        orig = K.build_options
        if name.endswith(" o"):   # the option on every build of this operation's program
            K.build_options = lambda d, dv: orig(d, dv) + OPTS[name]
        try:
            return GemmOperation(q, cfg(extra), src(kv), prec, m, n, k, binary=BINS.get(name))
        finally:
            K.build_options = orig
    ops = {name: make(name, extra, kv) for name, (extra, kv) in VARIANTS.items() if name not in DROP}
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
        print(f"{N} {name:12s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t) + f" us  err {errs[name]:.1e}", flush=True)
    print(f"{N} torch        {f/np.median(tor):8.0f}", flush=True)
