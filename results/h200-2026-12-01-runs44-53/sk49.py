"""Run 49/50 (plain loads in the fixup): why is STREAMK's kernel slower on tiles it does not split? Source variants of the s default,
GEMM kernel alone (device time, median of 30) at 2048^3 (nothing split) and 4096^3."""
import warnings, numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, device_time_ms
from gemmtune.space import load_space, make_config
from gemmtune.precision import get_precision
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); src = space.family("xgemm_rt").source
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0, STAGE=1,
         TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
def edit(old, new):
    assert old in src, old
    return src.replace(old, new)
VARIANTS = [
    ("STREAMK 0", 0, src),
    ("STREAMK 2", 2, src),
    ("2, no fixup code", 2, edit("  if (parts > 1) {", "  if (0) {")),
    ("STREAMK 1", 1, src),
]
prec = get_precision("s")
for N in (2048, 4096, 8192):
    rng = np.random.default_rng(0)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rng.standard_normal(N * N).astype(np.float32))
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rng.standard_normal(N * N).astype(np.float32))
    c = cl.Buffer(ctx, mf.READ_WRITE, 4 * N * N)
    ops = [(name, GemmOperation(q, make_config(space, "xgemm_rt", {**S, "STREAMK": sk}), s, prec, N, N, N)) for name, sk, s in VARIANTS]
    t = {name: [] for name, _ in ops}
    for i in range(35):
        for name, op in ops:
            ev = op.enqueue(a, b, c); ev[-1].wait()
            if i >= 5: t[name].append(device_time_ms(ev[-1:]))
    for name, op in ops:
        print(f"{N} {name:28s} {2e-6 * N**3 / np.median(t[name]):8.0f}  split {op.split}", flush=True)
