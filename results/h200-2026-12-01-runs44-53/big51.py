"""Runs 51 and 52 (52: every loop over acc unrolled): cuBLAS's tile shape (256 x 128, 16 x 8 results per work-item) in our kernel: registers and
spills from NVIDIA's build log, and the GEMM kernel alone at 4096^3 (device time, median of 30)."""
import warnings, numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, build_options, defines, device_time_ms
from gemmtune.space import load_space, make_config
from gemmtune.precision import get_precision
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); src = space.family("xgemm_rt").source; prec = get_precision("s")
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0, STAGE=1,
         TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
CASES = [{}, dict(MWG=256), dict(MWG=256, VLM=4), dict(MWG=256, PIPE=5), dict(MWG=256, PIPE=1), dict(MWG=256, UNROLL=1),
         dict(NWG=256, VLM=4, VLN=2), dict(MWG=256, MDIMC=32, NDIMC=8, VLM=4, VLN=4)]
N = 4096
rng = np.random.default_rng(0); mf = cl.mem_flags
a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rng.standard_normal(N * N).astype(np.float32))
b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rng.standard_normal(N * N).astype(np.float32))
c = cl.Buffer(ctx, mf.READ_WRITE, 4 * N * N)
for extra in CASES:
    cfg = make_config(space, "xgemm_rt", {**S, **extra})
    prog = cl.Program(ctx, src).build(options=build_options(defines(cfg, prec), dev) + ["-cl-nv-verbose"])
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    seg = next((p for p in log.split("Compiling entry function")[1:] if p.lstrip().startswith("'xgemm'")), "")
    regs = " | ".join(l.split(":", 1)[-1].strip() for l in seg.splitlines() if "Used" in l or "spill" in l)
    op = GemmOperation(q, cfg, src, prec, N, N, N)
    t = []
    for i in range(35):
        ev = op.enqueue(a, b, c); ev[-1].wait()
        if i >= 5: t.append(device_time_ms(ev[-1:]))
    print(f"{2e-6 * N**3 / np.median(t):8.0f}  {extra or 'the s default'}  [{regs}]", flush=True)
