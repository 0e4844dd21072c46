"""Run 47: STREAMK (tiles of the last round split along K) on shapes with few tiles and on the
4096^3 defaults: whole operation, device time, median of 30, against torch; results checked."""
import warnings, numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, device_time_ms
from gemmtune.space import load_space, make_config
from gemmtune.precision import get_precision
from gemmtune.bench import _cuda_timer
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); src = space.family("xgemm_rt").source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0, STAGE=1)
D = dict(MWG=128, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=4, VLM=1, VLN=1, PIPE=6, PADL=4, UNROLL=1, BKFAST=0, WARPM=0, STAGE=1, MMA=1)
Z = dict(MWG=32, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=1, VLM=1, VLN=1, PIPE=5, PADL=4, UNROLL=1, BKFAST=0, WARPM=0, STAGE=1, MMA=1)
CASES = [("s", S, (1024, 1024, 16384)), ("s", S, (2048, 2048, 2048)), ("d", D, (1024, 1024, 16384)),
         ("d", D, (4096, 4096, 4096)), ("z", Z, (4096, 4096, 4096))]
rng = np.random.default_rng(0)
for code, base, (m, n, k) in CASES:
    prec = get_precision(code)
    dt = prec.dtype
    ha = rng.standard_normal((k, m)).astype(dt); hb = rng.standard_normal((n, k)).astype(dt)
    if code in "cz":
        ha = ha + 1j * rng.standard_normal((k, m)).astype(dt); hb = hb + 1j * rng.standard_normal((n, k)).astype(dt)
        ha, hb = ha.astype(dt), hb.astype(dt)
    cols = rng.choice(n, 16, replace=False)
    ref = hb[cols].astype(np.complex128 if code in "cz" else np.float64) @ ha.astype(np.complex128 if code in "cz" else np.float64)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
    c = cl.Buffer(ctx, mf.READ_WRITE, dt.itemsize * m * n)
    ops = {sk: GemmOperation(q, make_config(space, "xgemm_rt", {**base, "STREAMK": sk, "TRANSPOSEX": 32, "TRANSPOSEY": 8, "TRANSPOSEW": 4}), src, prec, m, n, k)
           for sk in (0, 1, 2)}
    errs = {}
    for sk, op in ops.items():
        out = np.full((n, m), np.nan, dt); cl.enqueue_copy(q, c, out)
        op.enqueue(a, b, c)[-1].wait(); op.enqueue(a, b, c)[-1].wait()   # twice: the counters reset
        cl.enqueue_copy(q, out, c)
        errs[sk] = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
    tt = _cuda_timer("torch", prec, m, n, k)
    times = {sk: [] for sk in ops}; tor = []
    for i in range(35):
        for sk, op in ops.items():
            ev = op.enqueue(a, b, c); ev[-1].wait()
            if i >= 5: times[sk].append(device_time_ms(ev))
        t = tt()
        if i >= 5: tor.append(t)
    f = prec.flops(m, n, k) / 1e6
    line = "  ".join(f"STREAMK={sk} {f/np.median(v):8.0f} (err {errs[sk]:.1e}, split {op.split})" for (sk, v), op in zip(times.items(), ops.values()))
    print(f"{code} {m}x{n}x{k}: {line}  torch {f/np.median(tor):8.0f}", flush=True)
