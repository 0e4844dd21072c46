"""Run 44 probe: wave quantization (tail) of the s default and of cuBLAS, and cuBLAS's kernel names."""
import warnings, numpy as np, pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation, device_time_ms
from gemmtune.space import load_space
from gemmtune.precision import get_precision
from gemmtune.bench import _cuda_timer
from gemmtune.defaults import default_config
warnings.simplefilter("ignore")
prec = get_precision("s")
info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
cfg = default_config(info, prec)
print(cfg)
src = load_space().family(cfg.kernel).source
rng = np.random.default_rng(0)
SH = [(4096, 4096, 4096), (4224, 4096, 4096), (4096, 4224, 4096), (4096, 4096, 4224), (8192, 8192, 8192), (8448, 8192, 8192), (8192, 8448, 8192)]
for m, n, k in SH:
    op = GemmOperation(q, cfg, src, prec, m, n, k)
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rng.standard_normal((k, m)).astype(np.float32))
    b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rng.standard_normal((n, k)).astype(np.float32))
    c = cl.Buffer(ctx, mf.READ_WRITE, 4 * m * n)
    tt = _cuda_timer("torch", prec, m, n, k)
    ops, kers, tor = [], [], []
    for i in range(45):
        ev = op.enqueue(a, b, c); ev[-1].wait()
        if i >= 5:
            ops.append(device_time_ms(ev)); kers.append(device_time_ms(ev[-1:]))
        t = tt()
        if i >= 5: tor.append(t)
    f = 2e-6 * m * n * k
    print(f"{m:5d} {n:5d} {k:5d}  op {f/np.median(ops):8.0f}  kernel {f/np.median(kers):8.0f}  torch {f/np.median(tor):8.0f}  ratio {np.median(tor)/np.median(ops):.3f}", flush=True)
import torch
from torch.profiler import profile, ProfilerActivity
torch.backends.cuda.matmul.allow_tf32 = False
for s in (4096, 8192):
    x = torch.randn(s, s, device="cuda"); y = torch.randn(s, s, device="cuda")
    torch.matmul(x, y); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        torch.matmul(x, y); torch.cuda.synchronize()
    for e in p.key_averages():
        print(s, e.key[:160], f"{e.device_time_total if hasattr(e,'device_time_total') else e.cuda_time_total:.0f} us")
