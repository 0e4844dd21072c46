"""Time the GEMM kernel alone at 4096^3 for configurations and source variants (results unchecked),
with the registers and local memory of NVIDIA's build log. Run 26 (CASES as below; it spelled
PIPE 5/6/7 as ASYNC = 2/3/4 with PIPE = 0). Run 25 timed an earlier form of the kernel.

    python3 results/h200-2026-11-30-runs23-28/variants.py [SIZE]     (from the project root)"""
import sys, warnings
import numpy as np
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.families import FAMILIES
from gemmtune.kernels import build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space

warnings.simplefilter("ignore")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
S = "MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWG=4,VLM=4,VLN=4,PIPE=1,PADL=0,UNROLL=8,WARPM=8,BKFAST=0,STAGE=1"
D = "MWG=128,NWG=64,KWG=8,MDIMC=16,NDIMC=8,VWG=2,VLM=2,VLN=4,PIPE=6,PADL=0,UNROLL=8,BKFAST=0,WARPM=0,STAGE=1"
def sub(base, **kw):
    d = dict(kv.split("=") for kv in base.split(","))
    d.update({k: str(v) for k, v in kw.items()})
    return ",".join(f"{k}={v}" for k, v in d.items())
VARIANTS = {
    "base": lambda s: s,
    "sync": lambda s: s.replace("#if CP_ASYNC\n", "#if 0\n", 1),          # the load-and-store fallback
}
CASES = [
    ("s", S, "base"),
    ("s", sub(S, PIPE=5), "base"), ("s", sub(S, PIPE=6), "base"),
    ("s", sub(S, PIPE=5, KWG=16), "base"), ("s", sub(S, PIPE=6, KWG=16), "base"),
    ("s", sub(S, PIPE=5, KWG=16, WARPM=16), "base"), ("s", sub(S, PIPE=5, KWG=16, PADL=4), "base"),
    ("s", sub(S, PIPE=5, NWG=256), "base"),
    ("d", D, "base"), ("d", sub(D, PIPE=5, KWG=16), "base"), ("d", sub(D, PIPE=7), "base"),
]
info, dev = open_device(0)
ctx = cl.Context([dev])
queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
fam = FAMILIES["xgemm_rt"]
src = load_space(None).family("xgemm_rt").source
rng = np.random.default_rng(0)
for code, text, vname in CASES:
    prec = get_precision(code)
    params = {**fam.defaults, **{k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}}
    params["TRANSPOSEX"] = params["TRANSPOSEY"] = 16
    defs = defines(Config.of("xgemm_rt", params), prec)
    host = rng.standard_normal(N * N * prec.bytes // 4).astype(np.float32)
    bufs = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host) for _ in range(3)]
    s = VARIANTS[vname](src)
    if vname != "base" and s == src:
        print(code, vname, "variant did not apply"); continue
    prog = cl.Program(ctx, s).build(options=build_options(defs, dev) + (["-cl-nv-verbose"] if "NVIDIA" in dev.vendor.upper() else []))
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    seg = next((p for p in log.split("Compiling entry function")[1:] if p.lstrip().startswith("'xgemm'")), "")
    regs = " | ".join(l.split(":", 1)[-1].strip() for l in seg.splitlines() if "Used" in l)
    k = cl.Kernel(prog, "xgemm")
    scal = prec.dtype.type
    args = (np.int32(N), np.int32(N), np.int32(N), scal(1), scal(0), bufs[0], np.int32(N), bufs[1], np.int32(N), bufs[2], np.int32(N),
            np.int32(0), np.int32(0), bufs[2], bufs[2])   # STREAMK's arguments (added later), unused without it
    gs, ls = fam.global_size(params, N, N), fam.local_size(params)
    for _ in range(3):
        k(queue, gs, ls, *args)
    queue.finish()
    times = []
    for _ in range(25):
        ev = k(queue, gs, ls, *args); ev.wait()
        times.append((ev.profile.end - ev.profile.start) * 1e-9)
    flops = (8 if code in "cz" else 2) * N ** 3
    print(f"{code} {vname:5} {flops / np.median(times) / 1e9:8.0f}  {text}  [{regs}]", flush=True)
