"""Run 48: the GEMM kernel alone at 4096^3 with leading dimensions of A, B (and C) padded past the
power of two, s and d defaults: does the stride, not the tile count, cost the 3 %?"""
import warnings, numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import build, defines
from gemmtune.space import load_space, make_config
from gemmtune.precision import get_precision
from gemmtune.families import FAMILIES
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); src = space.family("xgemm_rt").source; fam = FAMILIES["xgemm_rt"]
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0, STAGE=1)
D = dict(MWG=128, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=4, VLM=1, VLN=1, PIPE=6, PADL=4, UNROLL=1, BKFAST=0, WARPM=0, STAGE=1, MMA=1)
N = 4096
for code, base in (("s", S), ("d", D)):
    prec = get_precision(code); dt = prec.dtype
    cfg = make_config(space, "xgemm_rt", base)
    k = cl.Kernel(build(ctx, src, defines(cfg, prec)), "xgemm")
    dummy = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
    for lda, ldb, ldc in ((4096, 4096, 4096), (4096, 4128, 4096), (4128, 4096, 4096), (4128, 4128, 4096),
                          (4096, 4160, 4096), (4096, 4096 + 256, 4096), (4096, 4128, 4128), (4096, 4096, 4128)):
        rng = np.random.default_rng(0)
        A = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=rng.standard_normal(lda * N).astype(dt))
        B = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=rng.standard_normal(ldb * N).astype(dt))
        C = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, ldc * N * dt.itemsize)
        i32 = np.int32
        args = (i32(N), i32(N), i32(N), dt.type(1), dt.type(0), A, i32(lda), B, i32(ldb), C, i32(ldc), i32(0), i32(0), dummy, dummy)
        gs, ls = fam.global_size(cfg.params, N, N), fam.local_size(cfg.params)
        for _ in range(3): k(q, gs, ls, *args)
        q.finish(); t = []
        for _ in range(30):
            ev = k(q, gs, ls, *args); ev.wait(); t.append((ev.profile.end - ev.profile.start) * 1e-9)
        print(f"{code} lda {lda} ldb {ldb} ldc {ldc}: {2 * N**3 / np.median(t) / 1e9:8.0f} GFLOP/s (kernel alone)", flush=True)
