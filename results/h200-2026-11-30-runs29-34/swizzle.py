"""Work-group order for L2 reuse: xgemm_rt with its tiles re-dealt in bands of SWIZZLE tile-rows
(0 = as launched, M fastest). Checks against numpy, then times the main kernel alone.
    python3 results/h200-2026-11-30-runs29-34/swizzle.py [SIZES]"""
import sys, warnings
import numpy as np
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space

warnings.simplefilter("ignore")
SIZES = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "4096,8192").split(",")]
SHIPPED = load_space(None).family("xgemm_rt").source
OLD = "  const int m0 = get_group_id(0) * MWG;\n  const int n0 = get_group_id(1) * NWG;\n"
assert OLD in SHIPPED
NEW = """#ifndef SWIZZLE
#define SWIZZLE 0
#endif
#if SWIZZLE
  const int gm = get_num_groups(0), gn = get_num_groups(1);
  const int pid = get_group_id(1) * gm + get_group_id(0);
  const int first = (pid / (SWIZZLE * gn)) * SWIZZLE;
  const int rows = min(gm - first, SWIZZLE);
  const int inband = pid % (SWIZZLE * gn);
  const int m0 = (first + inband % rows) * MWG;
  const int n0 = (inband / rows) * NWG;
#else
  const int m0 = get_group_id(0) * MWG;
  const int n0 = get_group_id(1) * NWG;
#endif
"""
VARIANT = SHIPPED.replace(OLD, NEW)
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=4, VLN=4, PIPE=1, PADL=0, UNROLL=8, WARPM=8,
         BKFAST=0, STAGE=1, TRANSPOSEX=16, TRANSPOSEY=16)
D = dict(MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=8, VWG=4, VLM=2, VLN=4, PIPE=5, PADL=4, UNROLL=8, WARPM=8,
         BKFAST=0, STAGE=1, TRANSPOSEX=16, TRANSPOSEY=16)
info, dev = open_device(0)
ctx = cl.Context([dev])
queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
rng = np.random.default_rng(1)
mf = cl.mem_flags
for code, base in (("s", S), ("d", D)):
    prec = get_precision(code)
    for sw in (0, 2, 4, 8, 16, 32):
        cfg = Config.of("xgemm_rt", {**base, "SWIZZLE": sw})
        worst = 0.0
        for m, n, k in ((700, 300, 40), (130, 1000, 16)):
            a = rng.uniform(-1, 1, (m, k)).astype(prec.dtype, order="F")
            b = rng.uniform(-1, 1, (k, n)).astype(prec.dtype, order="F")
            op = GemmOperation(queue, cfg, VARIANT, prec, m, n, k)
            bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x) for x in (a, b, np.full((m, n), np.nan, prec.dtype, order="F"))]
            op.enqueue(*bufs)[-1].wait()
            c = np.empty((m, n), prec.dtype, order="F")
            cl.enqueue_copy(queue, c, bufs[2])
            ref = a.astype(np.float64) @ b.astype(np.float64)
            err = np.max(np.abs(c - ref)) / (np.max(np.abs(ref)) * k * np.finfo(prec.dtype).eps)
            worst = max(worst, err if np.isfinite(err) else np.inf)
        figs = []
        for N in SIZES:
            op = GemmOperation(queue, cfg, VARIANT, prec, N, N, N)
            host = rng.uniform(-1, 1, N * N).astype(prec.dtype)
            bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host) for _ in range(3)]
            for _ in range(3):
                op.enqueue(*bufs)
            queue.finish()
            tk, to = [], []
            for _ in range(10):
                ev = op.enqueue(*bufs)
                ev[-1].wait()
                tk.append((ev[-1].profile.end - ev[-1].profile.start) * 1e-9)
                to.append((ev[-1].profile.end - ev[0].profile.start) * 1e-9)
            figs.append(f"{N}: kernel {2 * N ** 3 / np.median(tk) / 1e9:7.0f} op {2 * N ** 3 / np.median(to) / 1e9:7.0f}")
        print(f"{code} SWIZZLE={sw:<2d} {'ok  ' if worst < 1 else 'WRONG'} {worst:6.3f}  " + "  ".join(figs), flush=True)
