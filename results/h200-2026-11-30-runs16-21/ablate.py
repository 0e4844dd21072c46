"""Where a configuration loses time: the GEMM kernel at 4096^3 as it is (L0), without the global
loads and local stores in the loop (L1), also without the loop's barriers (L2), and also with
the local reads at fixed addresses (L3: the multiply-adds alone, on the same registers).
Results are wrong from L1 on; only device time is measured. On NVIDIA's platform it also prints
the build log's registers and spills of the GEMM kernel.

    python3 ablate.py [SIZE]       (from the project root; SIZE defaults to 4096)"""
import re, sys, warnings
import numpy as np
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.families import FAMILIES
from gemmtune.kernels import build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space

warnings.simplefilter("ignore")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
CASES = [   # run 16; the PIPE 4 rows are run 17's
    ("s", "MWG=128,NWG=256,KWG=8,MDIMC=16,NDIMC=16,VWG=4,VLM=4,VLN=4,PIPE=1,PADL=4,UNROLL=8,BKFAST=1,WARPM=8"),
    ("s", "MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWG=4,VLM=4,VLN=4,PIPE=1,PADL=0,UNROLL=8,BKFAST=0,WARPM=8"),
    ("s", "MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWG=4,VLM=4,VLN=4,PIPE=3,PADL=0,UNROLL=8,BKFAST=0,WARPM=8"),
    ("s", "MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWG=4,VLM=4,VLN=4,PIPE=4,PADL=0,UNROLL=1,BKFAST=0,WARPM=8"),
    ("s", "MWG=128,NWG=256,KWG=8,MDIMC=16,NDIMC=16,VWG=4,VLM=4,VLN=4,PIPE=4,PADL=4,UNROLL=1,BKFAST=1,WARPM=8"),
    ("d", "MWG=128,NWG=64,KWG=16,MDIMC=16,NDIMC=8,VWG=2,VLM=1,VLN=4,PIPE=2,PADL=0,UNROLL=8,BKFAST=0,WARPM=0"),
    ("d", "MWG=128,NWG=64,KWG=16,MDIMC=16,NDIMC=8,VWG=2,VLM=1,VLN=4,PIPE=3,PADL=0,UNROLL=8,BKFAST=0,WARPM=0"),
    ("d", "MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWG=2,VLM=2,VLN=2,PIPE=2,PADL=0,UNROLL=8,BKFAST=0,WARPM=8"),
    ("d", "MWG=64,NWG=128,KWG=16,MDIMC=16,NDIMC=16,VWG=2,VLM=2,VLN=4,PIPE=2,PADL=0,UNROLL=8,BKFAST=0,WARPM=8"),
    ("z", "MWG=64,NWG=64,KWG=8,MDIMC=16,NDIMC=8,VWG=1,VLM=1,VLN=4,PIPE=2,PADL=4,UNROLL=1,BKFAST=0,WARPM=8"),
    ("z", "MWG=64,NWG=64,KWG=8,MDIMC=16,NDIMC=8,VWG=1,VLM=1,VLN=4,PIPE=3,PADL=4,UNROLL=8,BKFAST=0,WARPM=8"),
    ("c", "MWG=256,NWG=64,KWG=8,MDIMC=32,NDIMC=8,VWG=2,VLM=1,VLN=4,PIPE=1,PADL=4,UNROLL=8,BKFAST=1,WARPM=8"),
]
LOOP = re.compile(r"  const int tiles = [^\n]*\n#if STAGE == 0.*?\n#endif\n", re.S)


def variant(src: str, level: int) -> str:
    if level == 0:
        return src
    body = "barrier(CLK_LOCAL_MEM_FENCE);" if level == 1 else ""
    loop = ("  const int tiles = Kp / KWG;\n  LOAD_GLOBAL(0)\n  STORE_LOCAL(0)\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"  for (int t = 0; t < tiles; t++) {{\n    COMPUTE(0, 0)\n    {body}\n  }}\n")
    out, n = LOOP.subn(lambda m: loop, src)
    assert n == 1, "the kernel's main loop has changed"
    if level == 3:
        out = out.replace("+ (k) * LDAL;", "+ 0 * LDAL;").replace("+ (k) * LDBL;", "+ 0 * LDBL;")
    return out


info, dev = open_device(0)
ctx = cl.Context([dev])
queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(None)
fam = FAMILIES["xgemm_rt"]
src = space.family("xgemm_rt").source
rng = np.random.default_rng(0)
print(f"{'p':2} {'config':100} {'L0':>8} {'L1':>8} {'L2':>8} {'L3':>8}  regs/spills")
for code, text in CASES:
    prec = get_precision(code)
    params = {**fam.defaults, **{k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}}
    params["TRANSPOSEX"] = params["TRANSPOSEY"] = 16
    c = Config.of("xgemm_rt", params)
    defs = defines(c, prec)
    nbytes = N * N * prec.bytes
    host = rng.standard_normal(N * N * prec.bytes // 4).astype(np.float32)
    bufs = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host) for _ in range(3)]
    scal = prec.dtype.type
    figs, regs = [], ""
    for level in range(4):
        s = variant(src, level)
        try:
            prog = cl.Program(ctx, s).build(options=build_options(defs) + (["-cl-nv-verbose"] if "NVIDIA" in dev.platform.name else []))
        except cl.Error:
            figs.append("err"); continue
        if level in (0, 3):
            log = prog.get_build_info(dev, cl.program_build_info.LOG)
            fn, seen = None, []
            for l in log.splitlines():
                m = re.search(r"entry function '(\w+)'", l)
                if m:
                    fn = m.group(1)
                elif fn == "xgemm" and ("Used" in l or "spill" in l):
                    seen.append(re.sub(r"^ptxas\s+(info\s+:|\.)\s*", "", l.strip()))
            regs += f" L{level}: " + (" | ".join(seen) or "?")
        k = cl.Kernel(prog, "xgemm")
        args = (np.int32(N), np.int32(N), np.int32(N), scal(1), scal(0), bufs[0], np.int32(N), bufs[1], np.int32(N), bufs[2], np.int32(N),
            np.int32(0), np.int32(0), bufs[2], bufs[2])   # STREAMK's arguments (added later), unused without it
        gs, ls = fam.global_size(params, N, N), fam.local_size(params)
        for _ in range(3):
            k(queue, gs, ls, *args)
        queue.finish()
        times = []
        for _ in range(15):
            ev = k(queue, gs, ls, *args)
            ev.wait()
            times.append((ev.profile.end - ev.profile.start) * 1e-9)
        flops = (8 if code in "cz" else 2) * N ** 3
        figs.append(f"{flops / np.median(times) / 1e9:8.0f}")
    print(f"{code:2} {text:100} " + " ".join(f"{f:>8}" for f in figs) + " " + regs, flush=True)
