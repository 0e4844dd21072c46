"""Which spellings of NVIDIA's register cap the OpenCL compiler takes.   python3 results/h200-2026-11-30-runs29-34/options.py"""
import warnings
import pyopencl as cl
from gemmtune.device import open_device
warnings.simplefilter("ignore")
info, dev = open_device(0)
ctx = cl.Context([dev])
src = "__kernel void f(__global float* x) { x[get_global_id(0)] *= 2.0f; }"
for opts in (["-cl-nv-maxrregcount", "64"], ["-cl-nv-maxrregcount=64"], ["-cl-nv-maxrregcount 64"], ["-cl-nv-verbose", "-cl-nv-maxrregcount=64"], ["-cl-nv-opt-level=3"], ["-cl-nv-arch", "sm_90"]):
    try:
        p = cl.Program(ctx, src).build(options=opts)
        print(opts, "ok:", p.get_build_info(dev, cl.program_build_info.LOG).strip()[:300].replace("\n", " | "))
    except Exception as e:
        print(opts, "FAILED:", str(e)[:400].replace("\n", " | "))
