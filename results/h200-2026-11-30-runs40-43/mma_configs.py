"""Time hand-picked MMA configurations of xgemm_rt at SIZE^3 (whole operation and kernel alone),
with registers/spills from NVIDIA's build log, next to the shipped GPU defaults."""
import os, sys
os.environ["CUDA_CACHE_DISABLE"] = "1"
import pyopencl as cl
from gemmtune.runner import Runner, Job
from gemmtune.space import load_space, make_config
from gemmtune.timing import TimingPolicy, gflops
from gemmtune.precision import get_precision
from gemmtune.kernels import defines, build_options
from gemmtune.defaults import shipped_default

M1 = dict(MMA=1, VLM=1, VLN=1, UNROLL=1, WARPM=0, STAGE=1, BKFAST=0, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
D = [dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=2, PIPE=5, PADL=4),
     dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=2, PIPE=5, PADL=0),
     dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=2, PIPE=2, PADL=4),
     dict(MWG=128, NWG=128, KWG=16, MDIMC=16, NDIMC=16, VWG=2, PIPE=1, PADL=4),
     dict(MWG=128, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=2, PIPE=6, PADL=4),
     dict(MWG=64, NWG=128, KWG=8, MDIMC=8, NDIMC=16, VWG=2, PIPE=6, PADL=4),
     dict(MWG=64, NWG=64, KWG=16, MDIMC=8, NDIMC=8, VWG=2, PIPE=5, PADL=4),
     dict(MWG=128, NWG=128, KWG=8, MDIMC=32, NDIMC=8, VWG=2, PIPE=5, PADL=4),
     dict(MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=8, VWG=2, PIPE=6, PADL=4)]
Z = [dict(MWG=64, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=1, PIPE=5, PADL=0),
     dict(MWG=64, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=1, PIPE=6, PADL=0),
     dict(MWG=128, NWG=64, KWG=8, MDIMC=16, NDIMC=16, VWG=1, PIPE=1, PADL=0),
     dict(MWG=64, NWG=128, KWG=8, MDIMC=8, NDIMC=32, VWG=1, PIPE=1, PADL=0),
     dict(MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=16, VWG=1, PIPE=5, PADL=0),
     dict(MWG=32, NWG=64, KWG=8, MDIMC=8, NDIMC=8, VWG=1, PIPE=6, PADL=0),
     dict(MWG=64, NWG=32, KWG=8, MDIMC=16, NDIMC=4, VWG=1, PIPE=6, PADL=0)]

if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    sp = load_space()
    ctx = cl.create_some_context(interactive=False); dev = ctx.devices[0]
    fam = sp.family("xgemm_rt")
    rows = []
    with Runner(0, trial_timeout=120) as r:
        for pc, cands in (("d", D), ("z", Z)):
            prec = get_precision(pc)
            configs = [shipped_default("GPU", prec)] + [make_config(sp, "xgemm_rt", {**M1, **c}) for c in cands]
            for c in configs:
                try:
                    prg = cl.Program(ctx, fam.source).build(options=build_options(defines(c, prec), dev) + ["-cl-nv-verbose"])
                    log = prg.get_build_info(dev, cl.program_build_info.LOG)
                    regs = " ".join(l.split(":", 1)[1].strip() for l in log.splitlines() if "registers" in l)[-90:]
                except Exception as e:
                    regs = "BUILD FAILED " + str(e)[:800]
                o = r.run(Job(c, fam.source, pc, size, size, size, TimingPolicy(max_seconds=1.0)))
                g = gflops(prec.flops(size, size, size), o.timing.median_ms) if o.timing else 0
                kg = gflops(prec.flops(size, size, size), o.timing.kernel_median_ms) if o.timing else 0
                print(f"RESULT {pc} {o.status} op {g:,.0f} kernel {kg:,.0f} | {c} | {regs} | {o.detail[:300]}", flush=True)
                rows.append((pc, g, kg, str(c)))
    print("\nprecision  op GFLOP/s  kernel  config")
    for pc, g, kg, c in rows:
        print(f"{pc}  {g:9,.0f}  {kg:9,.0f}  {c}")
