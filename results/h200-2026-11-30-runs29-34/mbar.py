"""The mbarrier variant (xgemm_rt_mbar.cl beside this script, MBAR = 1 with PIPE 6/7): check it against numpy,
then time the whole operation at SIZE^3 next to the shipped kernel's configurations.
    python3 results/h200-2026-11-30-runs29-34/mbar.py [SIZE]"""
import sys, warnings
from pathlib import Path
import numpy as np
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space
from gemmtune.resources import load_kernel_source

warnings.simplefilter("ignore")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
VARIANT = load_kernel_source(str((Path(__file__).parent / "xgemm_rt_mbar.cl").resolve()))
SHIPPED = load_space(None).family("xgemm_rt").source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=4, VLN=4, PIPE=1, PADL=0, UNROLL=8, WARPM=8,
         BKFAST=0, STAGE=1, TRANSPOSEX=16, TRANSPOSEY=16)
D = dict(MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=8, VWG=4, VLM=2, VLN=4, PIPE=5, PADL=4, UNROLL=8, WARPM=8,
         BKFAST=0, STAGE=1, TRANSPOSEX=16, TRANSPOSEY=16)
CASES = [  # (precision, params, source)
    ("s", S, SHIPPED), ("s", {**S, "PIPE": 6}, SHIPPED),
    ("s", {**S, "PIPE": 6, "MBAR": 1}, VARIANT), ("s", {**S, "PIPE": 7, "MBAR": 1}, VARIANT),
    ("s", {**S, "PIPE": 6, "MBAR": 1, "KWG": 16}, VARIANT), ("s", {**S, "PIPE": 7, "MBAR": 1, "NWG": 64, "NDIMC": 8}, VARIANT),
    ("d", D, SHIPPED), ("d", {**D, "PIPE": 6, "MBAR": 1}, VARIANT), ("d", {**D, "PIPE": 7, "MBAR": 1}, VARIANT),
]
info, dev = open_device(0)
ctx = cl.Context([dev])
queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
rng = np.random.default_rng(1)
mf = cl.mem_flags
for code, params, source in CASES:
    prec = get_precision(code)
    cfg = Config.of("xgemm_rt", params)
    label = ",".join(f"{k}={v}" for k, v in params.items() if k not in ("TRANSPOSEX", "TRANSPOSEY", "STAGE"))
    try:
        # correctness: odd shapes (padding) and one with many slices, C poisoned with NaN
        worst = 0.0
        for m, n, k in ((130, 67, 1000), (256, 256, 24), (7, 3, 5)):
            a = rng.uniform(-1, 1, (m, k)).astype(prec.dtype, order="F")
            b = rng.uniform(-1, 1, (k, n)).astype(prec.dtype, order="F")
            op = GemmOperation(queue, cfg, source, prec, m, n, k)
            bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x) for x in (a, b, np.full((m, n), np.nan, prec.dtype, order="F"))]
            op.enqueue(*bufs)[-1].wait()
            c = np.empty((m, n), prec.dtype, order="F")
            cl.enqueue_copy(queue, c, bufs[2])
            ref = a.astype(np.float64) @ b.astype(np.float64)
            err = np.max(np.abs(c - ref)) / (np.max(np.abs(ref)) * k * np.finfo(prec.dtype).eps)
            worst = max(worst, err if np.isfinite(err) else np.inf)
        ok = worst < 1.0
        # time the whole operation at N^3
        op = GemmOperation(queue, cfg, source, prec, N, N, N)
        host = rng.uniform(-1, 1, N * N).astype(prec.dtype)
        bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host) for _ in range(3)]
        for _ in range(3):
            op.enqueue(*bufs)
        queue.finish()
        times = []
        for _ in range(15):
            ev = op.enqueue(*bufs)
            ev[-1].wait()
            times.append((ev[-1].profile.end - ev[0].profile.start) * 1e-9)
        gf = 2 * N ** 3 / np.median(times) / 1e9
        print(f"{code} {'ok  ' if ok else 'WRONG'} err/bound {worst:7.3f} {gf:9.0f} GFLOP/s  {label}", flush=True)
    except Exception as e:
        print(f"{code} FAILED {label}: {str(e).splitlines()[0][:200]}")
        print("\n".join(str(e).splitlines()[1:30]))
