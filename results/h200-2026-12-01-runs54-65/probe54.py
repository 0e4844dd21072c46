"""Run 54: stream-K as equal runs of K-slices with a separate fixup kernel. The s default with
STREAMK 0/1/2 at 2048/4096/8192 (whole operation and GEMM kernels alone, device time, median of
30, alternating with torch), results checked on sampled columns; registers; PTX and, where a
ptxas is found on the machine, SASS."""
import os, warnings
import numpy as np, pyopencl as cl
from gemmtune import families
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
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=4, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
prec = get_precision("s")

# -- registers, PTX (ptxas and nvdisasm read it elsewhere)
PTX = {"sk0": dict(STREAMK=0), "sk2": dict(STREAMK=2),
       "t8x16": dict(MDIMC=16, NDIMC=8, WARPM=0), "t128x256": dict(NWG=256)}
for tag, extra in PTX.items():
    cfg = make_config(space, "xgemm_rt", {**S, **extra})
    prog = cl.Program(ctx, src).build(options=build_options(defines(cfg, prec), dev) + ["-cl-nv-verbose"])
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    for part in log.split("Compiling entry function")[1:]:
        name = part.split("'")[1]
        print(f"{tag} {name}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
    open(os.path.join(OUT, f"s-{tag}.ptx"), "wb").write(program_binary(prog).rstrip(b"\0"))

# -- timing
def variants():
    yield "S0", dict(STREAMK=0), None
    yield "SK1", dict(STREAMK=1), None
    yield "SK2", dict(STREAMK=2), None
    yield "SK2-always", dict(STREAMK=2), 0.0
rng = np.random.default_rng(0)
for N in [int(x) for x in os.environ.get("SIZES", "2048,4096,8192").split(",")]:
    m = n = k = N
    ha = rng.standard_normal((k, m)).astype(np.float32); hb = rng.standard_normal((n, k)).astype(np.float32)
    cols = rng.choice(n, 8, replace=False)
    ref = hb[cols].astype(np.float64) @ ha.astype(np.float64)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    c = cl.Buffer(ctx, mf.READ_WRITE, 4 * m * n)
    ops = {}
    for name, extra, idle in variants():
        saved = families.IDLE_WORTH_SHARING
        if idle is not None:
            families.IDLE_WORTH_SHARING = idle
        ops[name] = GemmOperation(q, make_config(space, "xgemm_rt", {**S, **extra}), src, prec, m, n, k)
        families.IDLE_WORTH_SHARING = saved
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
        print(f"{N} {name:11s} whole {f/np.median(whole[name]):8.0f}  kernels {f/np.median(kern[name]):8.0f}  "
              f"err {errs[name]:.1e}  {op.split}", flush=True)
    print(f"{N} torch       {f/np.median(tor):8.0f}", flush=True)
