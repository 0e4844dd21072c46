"""Run 63: the copies' addresses from one running pointer per operand (portable: PoCL got a private
array of pointers wrong with one work-item along M) against run 59's array of advancing pointers;
the fixup reading FIXV elements per work-item. Each command's device time, median of 30, alternating;
PTX for the machine code."""
import os, subprocess, warnings
import numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, build_options, defines, program_binary
from gemmtune.precision import get_precision
from gemmtune.resources import load_kernel_source
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
OUT = os.environ.get("OUT", "/tmp")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); src = fs.source
old = subprocess.run(["git", "show", "9a69ed9:kernels/xgemm_rt.cl"], capture_output=True, text=True).stdout   # run 59's kernel
for inc in ("common.cl", "pad.cl"):
    old = old.replace(f'#include "{inc}"', load_kernel_source(inc))
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=4, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision("s")
NV = ["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []
cfg = Config.of("xgemm_rt", {**fs.defaults, **S})
for name, source in (("run59", old), ("now", src)):
    prog = cl.Program(ctx, source).build(options=build_options(defines(cfg, prec), dev) + NV)
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    for part in log.split("Compiling entry function")[1:]:
        if part.split("'")[1].startswith("xgemm"):
            print(f"{name} {part.split(chr(39))[1]}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
    open(os.path.join(OUT, f"s-{name}.ptx"), "wb").write(program_binary(prog).rstrip(b"\0"))
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
    ops = {"run59": GemmOperation(q, cfg, old, prec, m, n, k), "now": GemmOperation(q, cfg, src, prec, m, n, k)}
    ops["run59"].fixup = None   # its fixup takes one element per work-item: time its xgemm only
    out = np.full((n, m), np.nan, np.float32); cl.enqueue_copy(q, c, out)
    ops["now"].enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
    err = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
    times = {name: [] for name in ops}
    reps = int(os.environ.get("REPS", "35"))
    for i in range(reps):
        for name, op in ops.items():
            ev = op.enqueue(a, b, c); ev[-1].wait()
            if i >= min(5, reps - 1): times[name].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
    f = prec.flops(m, n, k) / 1e6
    for name, t in times.items():
        t = np.median(np.array(t), axis=0)
        print(f"{N} {name:6s} whole {f / (t.sum() * 1e-3):8.0f}  xgemm {f / (t[1] * 1e-3):8.0f}  " + "  ".join(f"{x:7.1f}" for x in t)
              + f" us" + (f"  err {err:.1e}" if name == "now" else ""), flush=True)
