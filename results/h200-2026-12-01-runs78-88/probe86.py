"""Run 86: what a round of work-groups costs beyond its work. The s default without stream-K
(STREAMK 0), xgemm's device time alone, at shapes of 264 tiles (one round of 2 work-groups on
each of 132 compute units) with K = 4096 x r, against r rounds of tiles with K = 4096: the
same multiply-adds per compute unit, r - 1 more starts of a tile. Median of 30, shapes each
first in turn; results checked against numpy in float64 on sampled columns."""
import os, warnings
import numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt"); SRC = fs.source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=0, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
S = {**S, **eval("dict(" + os.environ.get("CFG", "") + ")")}
prec = get_precision("s")
cfg = Config.of("xgemm_rt", {**fs.defaults, **S})
U = int(os.environ.get("UNITS", dev.max_compute_units)) * 2   # work-groups in a round
tm = S["MWG"] * 24; tn_round = U // 24 * S["NWG"]                  # 264 tiles = 24 x 11
SHAPES = {}
for r in (1, 2, 4, 8):
    SHAPES[f"1 round, K x{r}"] = (tm, tn_round, 4096 * r)
    SHAPES[f"{r} rounds"] = (tm, tn_round * r, 4096)
rng = np.random.default_rng(0)
ops, bufs, errs = {}, {}, {}
for name, (m, n, k) in SHAPES.items():
    if name in ops: continue
    ha = rng.standard_normal((k, m)).astype(np.float32); hb = rng.standard_normal((n, k)).astype(np.float32)
    cols = rng.choice(n, 4, replace=False)
    ref = hb[cols].astype(np.float64) @ ha.astype(np.float64)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    out = np.full((n, m), np.nan, np.float32)
    c = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=out)
    op = GemmOperation(q, cfg, SRC, prec, m, n, k)
    op.enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
    errs[name] = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
    ops[name], bufs[name] = op, (a, b, c)
times = {name: [] for name in ops}
reps = int(os.environ.get("REPS", "35"))
for i in range(reps):
    names = list(ops); names = names[i % len(names):] + names[:i % len(names)]
    for name in names:
        ev = ops[name].enqueue(*bufs[name]); ev[-1].wait()
        if i >= min(5, reps - 1): times[name].append((ev[-1].profile.end - ev[-1].profile.start) * 1e-3)
for name in ops:
    m, n, k = SHAPES[name]
    t = float(np.median(times[name]))
    print(f"{name:16s} {m}x{n}x{k} tiles {(m // S['MWG']) * (n // S['NWG'])}  xgemm {t:9.1f} us  "
          f"{prec.flops(m, n, k) / (t * 1e3):8.0f} GFLOP/s  err {errs[name]:.1e}", flush=True)
for r in (2, 4, 8):
    t1 = float(np.median(times[f"1 round, K x{r}"])); tr = float(np.median(times[f"{r} rounds"]))
    print(f"{r} rounds - 1 round of K x{r}: {tr - t1:7.1f} us, {(tr - t1) / (r - 1):6.1f} us per extra round")
