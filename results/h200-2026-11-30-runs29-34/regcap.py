"""Register caps (-cl-nv-maxrregcount): registers, spills and the kernel alone at SIZE^3, checked
against numpy on an odd shape first. With --nolb the kernel loses its reqd_work_group_size
attribute, which otherwise keeps ptxas from applying the cap. CUDA_CACHE_DISABLE=1 makes every
build compile afresh, so that each prints its registers.
    CUDA_CACHE_DISABLE=1 python3 results/h200-2026-11-30-runs29-34/regcap.py [SIZE] [--nolb]"""
import sys, warnings
import numpy as np
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.families import FAMILIES
from gemmtune.kernels import GemmOperation
import gemmtune.kernels as K
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space

warnings.simplefilter("ignore")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
ONLY = "--nolb" in sys.argv
S = "MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWG=4,VLM=4,VLN=4,PIPE=1,PADL=0,UNROLL=8,WARPM=8,BKFAST=0,STAGE=1"
D = "MWG=64,NWG=64,KWG=8,MDIMC=8,NDIMC=8,VWG=4,VLM=2,VLN=4,PIPE=5,PADL=4,UNROLL=8,WARPM=8,BKFAST=0,STAGE=1"
Z = "MWG=64,NWG=64,KWG=8,MDIMC=16,NDIMC=8,VWG=2,VLM=1,VLN=1,PIPE=5,PADL=0,UNROLL=8,WARPM=16,BKFAST=0,STAGE=1"
def sub(base, **kw):
    d = dict(kv.split("=") for kv in base.split(","))
    d.update({k: str(v) for k, v in kw.items()})
    return ",".join(f"{k}={v}" for k, v in d.items())
D2 = sub(D, MWG=128, MDIMC=16)
D3 = sub(D, PIPE=6)
Z2 = sub(Z, MWG=128, MDIMC=16)
CASES = [("s", S, c) for c in (0, 96)] + [("d", D, c) for c in (0, 200, 168, 128)] + [("d", D2, c) for c in (168, 128)] \
      + [("d", D3, c) for c in (168,)] + [("z", Z, c) for c in (0, 168, 128)]
if ONLY:
    CASES = [("d", D, c) for c in (0, 200, 168)] + [("d", D2, c) for c in (0, 168)] + [("z", Z, c) for c in (0, 200, 168)]
info, dev = open_device(0)
ctx = cl.Context([dev])
queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
fam = FAMILIES["xgemm_rt"]
src = load_space(None).family("xgemm_rt").source
import re
src = re.sub(r"__attribute__\(\(reqd_work_group_size\(MDIMC, NDIMC, 1\)\)\)", "", src) if "--nolb" in sys.argv else src
rng = np.random.default_rng(0)
mf = cl.mem_flags
base_opts = K.BUILD_OPTIONS
for code, text, cap in CASES:
    prec = get_precision(code)
    params = {**fam.defaults, **{k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}}
    params["TRANSPOSEX"] = params["TRANSPOSEY"] = 16
    cfg = Config.of("xgemm_rt", params)
    extra = (f"-cl-nv-maxrregcount={cap}",) if cap else ()
    K.BUILD_OPTIONS = base_opts + extra + ("-cl-nv-verbose",)
    K._programs.clear()
    try:
        # correctness on an odd shape, C poisoned
        m, n, k = 300, 200, 100
        a = rng.uniform(-1, 1, (m, k)).astype(prec.dtype, order="F") + (1j * rng.uniform(-1, 1, (m, k)) if prec.is_complex else 0)
        b = rng.uniform(-1, 1, (k, n)).astype(prec.dtype, order="F") + (1j * rng.uniform(-1, 1, (k, n)) if prec.is_complex else 0)
        a, b = np.asfortranarray(a.astype(prec.dtype)), np.asfortranarray(b.astype(prec.dtype))
        op = GemmOperation(queue, cfg, src, prec, m, n, k)
        bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x) for x in (a, b, np.full((m, n), np.nan, prec.dtype, order="F"))]
        op.enqueue(*bufs)[-1].wait()
        c = np.empty((m, n), prec.dtype, order="F")
        cl.enqueue_copy(queue, c, bufs[2])
        ref = a.astype(np.complex128) @ b.astype(np.complex128)
        err = np.max(np.abs(c - ref)) / (np.max(np.abs(ref)) * k * np.finfo(prec.dtype).eps)
        ok = bool(np.isfinite(err) and err < 1)
        log = op.program.get_build_info(dev, cl.program_build_info.LOG)
        seg = next((p for p in log.split("Compiling entry function")[1:] if p.lstrip().startswith("'xgemm'")), "")
        regs = " | ".join(l.split(":", 1)[-1].strip() for l in seg.splitlines() if "Used" in l or "spill" in l)
        op = GemmOperation(queue, cfg, src, prec, N, N, N)
        host = rng.uniform(-1, 1, N * N).astype(prec.dtype)
        bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host) for _ in range(3)]
        for _ in range(3):
            op.enqueue(*bufs)
        queue.finish()
        tk = []
        for _ in range(20):
            ev = op.enqueue(*bufs)
            ev[-1].wait()
            tk.append((ev[-1].profile.end - ev[-1].profile.start) * 1e-9)
        flops = (8 if prec.is_complex else 2) * N ** 3
        print(f"{code} cap {cap or '-':>3} {'ok  ' if ok else 'WRONG'} {flops / np.median(tk) / 1e9:8.0f}  {text}  [{regs}]", flush=True)
    except Exception as e:
        print(f"{code} cap {cap} FAILED {text}: {str(e).splitlines()[0][:200]}", flush=True)
