"""Run 92 (run 91 with more orders, other configurations and c): the order of the multiply-adds within a step k of the s default (each work-item's
8 x 8 results): rows of acc one by one (as shipped), columns one by one, rows in a zig-zag
(consecutive multiply-adds share a value of A, and at each turn one of B), columns in a zig-zag,
and 2 x 2 blocks. Each command's device time, median of REPS, contenders rotated; results
checked against numpy in float64 with C poisoned first."""
import os, warnings
import numpy as np, pyopencl as cl
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
OLD = """  #define MULTIPLY(f) \\
    PRAGMA(unroll) \\
    for (int i = 0; i < WPTM; i++) { \\
      PRAGMA(unroll) \\
      for (int j = 0; j < WPTN; j++) { MULADD(acc[i][j], a[f][i], b[f][j]); } \\
    }"""
assert OLD in SRC
BODY = {
    "rows": "for (int i = 0; i < WPTM; i++) { PRAGMA(unroll) for (int j = 0; j < WPTN; j++) { MULADD(acc[i][j], a[f][i], b[f][j]); } }",
    "cols": "for (int j = 0; j < WPTN; j++) { PRAGMA(unroll) for (int i = 0; i < WPTM; i++) { MULADD(acc[i][j], a[f][i], b[f][j]); } }",
    "zzrows": "for (int i = 0; i < WPTM; i++) { PRAGMA(unroll) for (int jj = 0; jj < WPTN; jj++) { const int j = i % 2 ? WPTN - 1 - jj : jj; MULADD(acc[i][j], a[f][i], b[f][j]); } }",
    "zzcols": "for (int j = 0; j < WPTN; j++) { PRAGMA(unroll) for (int ii = 0; ii < WPTM; ii++) { const int i = j % 2 ? WPTM - 1 - ii : ii; MULADD(acc[i][j], a[f][i], b[f][j]); } }",
    "rowsrev": "for (int i = 0; i < WPTM; i++) { PRAGMA(unroll) for (int jj = 0; jj < WPTN; jj++) { const int j = WPTN - 1 - jj; MULADD(acc[i][j], a[f][i], b[f][j]); } }",
    "zzrows_r": "for (int i = 0; i < WPTM; i++) { PRAGMA(unroll) for (int jj = 0; jj < WPTN; jj++) { const int j = i % 2 ? jj : WPTN - 1 - jj; MULADD(acc[i][j], a[f][i], b[f][j]); } }",
    "zzrows_iv": "for (int ii = 0; ii < WPTM; ii++) { const int i = WPTM - 1 - ii; PRAGMA(unroll) for (int jj = 0; jj < WPTN; jj++) { const int j = ii % 2 ? WPTN - 1 - jj : jj; MULADD(acc[i][j], a[f][i], b[f][j]); } }",
    "zzband": "for (int i0 = 0; i0 < WPTM; i0 += 2) { PRAGMA(unroll) for (int jj = 0; jj < WPTN; jj++) { const int j = (i0 / 2) % 2 ? WPTN - 1 - jj : jj; "
              "const int i = jj % 2 ? i0 + 1 : i0; MULADD(acc[i][j], a[f][i], b[f][j]); MULADD(acc[i0 + i0 + 1 - i][j], a[f][i0 + i0 + 1 - i], b[f][j]); } }",
    "blocks": "for (int i0 = 0; i0 < WPTM; i0 += 2) { PRAGMA(unroll) for (int j0 = 0; j0 < WPTN; j0 += 2) { "
              "MULADD(acc[i0][j0], a[f][i0], b[f][j0]); MULADD(acc[i0][j0 + 1], a[f][i0], b[f][j0 + 1]); "
              "MULADD(acc[i0 + 1][j0 + 1], a[f][i0 + 1], b[f][j0 + 1]); MULADD(acc[i0 + 1][j0], a[f][i0 + 1], b[f][j0]); } }",
}
def src(order):
    return SRC.replace(OLD, "  #define MULTIPLY(f) PRAGMA(unroll) " + BODY[order])
NV = ["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []
from gemmtune.defaults import shipped_default
W = dict(NWG=256, STREAMK=1)
RUNS = {"rows": ("rows", "s", {}), "zzrows": ("zzrows", "s", {}), "rowsrev": ("rowsrev", "s", {}), "zzrows_r": ("zzrows_r", "s", {}),
        "zzrows_iv": ("zzrows_iv", "s", {}), "zzband": ("zzband", "s", {}), "zz VLM4": ("zzrows", "s", dict(VLM=4)),
        "zz W16": ("zzrows", "s", dict(WARPM=16)), "zz W4": ("zzrows", "s", dict(WARPM=4)), "zz VLN2": ("zzrows", "s", dict(VLN=2)),
        "zz 8x16": ("zzrows", "s", W), "zzc 8x16": ("zzcols", "s", W),
        "c rows": ("rows", "c", None), "c zzrows": ("zzrows", "c", None), "c zzcols": ("zzcols", "c", None)}
RUNS = {k: v for k, v in RUNS.items() if k in os.environ.get("ONLY", k).split(",")}
def cfg_of(p, extra):
    if extra is None:
        return shipped_default("GPU", get_precision(p))
    return Config.of("xgemm_rt", {**fs.defaults, **S, **extra})
ORDERS = list(RUNS)
for o in ORDERS:
    order, p, extra = RUNS[o]; cfg = cfg_of(p, extra); pr = get_precision(p)
    prog = cl.Program(ctx, src(order)).build(options=build_options(defines(cfg, pr), dev) + NV)
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    for part in log.split("Compiling entry function")[1:]:
        if part.split("'")[1] == "xgemm":
            print(f"{o}:", " | ".join(l.split(":", 1)[-1].strip() for l in part.splitlines() if "Used" in l or "spill" in l), flush=True)
rng = np.random.default_rng(0)
for N in [int(x) for x in os.environ.get("SIZES", "4096,8192").split(",")]:
    bufs = {}
    for p in ("s", "c"):
        pr = get_precision(p); dt = pr.dtype
        ha = rng.standard_normal((N, N)).astype(dt); hb = rng.standard_normal((N, N)).astype(dt)
        if p == "c":
            ha = ha + 1j * rng.standard_normal((N, N)).astype(np.float32); hb = hb + 1j * rng.standard_normal((N, N)).astype(np.float32)
        cols = rng.choice(N, 8, replace=False)
        ref = hb[cols].astype(np.complex128 if p == "c" else np.float64) @ ha.astype(np.complex128 if p == "c" else np.float64)
        mf = cl.mem_flags
        bufs[p] = (cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha), cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb),
                   cl.Buffer(ctx, mf.READ_WRITE, ha.nbytes), cols, ref, dt)
    ops, errs = {}, {}
    for o in ORDERS:
        order, p, extra = RUNS[o]; a, b, c, cols, ref, dt = bufs[p]
        op = GemmOperation(q, cfg_of(p, extra), src(order), get_precision(p), N, N, N)
        out = np.full((N, N), np.nan, dt); cl.enqueue_copy(q, c, out)
        op.enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
        errs[o] = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
        ops[o] = op
    times = {o: [] for o in ops}
    reps = int(os.environ.get("REPS", "25"))
    for i in range(reps + 2):
        names = list(ops); names = names[i % len(names):] + names[:i % len(names)]
        for o in names:
            a, b, c = bufs[RUNS[o][1]][:3]
            ev = ops[o].enqueue(a, b, c); ev[-1].wait()
            if i >= 2:
                times[o].append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
    for o, t in times.items():
        f = get_precision(RUNS[o][1]).flops(N, N, N) / 1e6
        t = np.median(np.array(t), axis=0)
        print(f"{N} {o:8s} whole {f / (t.sum() * 1e-3):8.0f}  " + "  ".join(f"{x:8.1f}" for x in t) + f" us  err {errs[o]:.1e}", flush=True)
