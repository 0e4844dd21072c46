"""Registers and spills of the s default with STREAMK 0/1/2 (NVIDIA build log, -cl-nv-verbose)."""
import warnings
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import build_options, defines
from gemmtune.precision import get_precision
from gemmtune.space import load_space, make_config
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev])
space = load_space()
src = space.family("xgemm_rt").source
base = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8,
            BKFAST=0, STAGE=1, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
for extra in ({"STREAMK": 0}, {"STREAMK": 2}):
    cfg = make_config(space, "xgemm_rt", {**base, **extra})
    prog = cl.Program(ctx, src).build(options=build_options(defines(cfg, get_precision("s")), dev) + ["-cl-nv-verbose"])
    log = prog.get_build_info(dev, cl.program_build_info.LOG)
    seg = next((p for p in log.split("Compiling entry function")[1:] if p.lstrip().startswith("'xgemm'")), "")
    print(extra, " | ".join(l.split(":", 1)[-1].strip() for l in seg.splitlines() if "Used" in l or "spill" in l), flush=True)
