"""Throughput of the operand transpose (pad.cl) on the device over tile shapes, with each
work-item moving one element ("shipped", as pad.cl did before run 29) or TRANSPOSEW ("rows": a
taller tile; measured in run 29 as a variant of pad.cl, which has the parameter since).
    python3 results/h200-2026-11-30-runs29-34/transpose.py [SIZE]"""
import sys, warnings
import numpy as np
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.precision import get_precision
from gemmtune.resources import load_kernel_source

warnings.simplefilter("ignore")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
SHIPPED = load_kernel_source("pad.cl")
info, dev = open_device(0)
ctx = cl.Context([dev])
queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
rng = np.random.default_rng(1)
mf = cl.mem_flags
rup = lambda x, m: -(-x // m) * m

def run(kernel, gsize, lsize, p, q, src, dst):
    i32 = np.int32
    args = (i32(p), i32(q), i32(p), i32(p), i32(q), i32(0), src, dst)
    for _ in range(3):
        kernel(queue, gsize, lsize, *args)
    queue.finish()
    t = []
    for _ in range(20):
        ev = kernel(queue, gsize, lsize, *args)
        ev.wait()
        t.append((ev.profile.end - ev.profile.start) * 1e-9)
    return float(np.median(t))

for code in ("s", "d", "z"):
    prec = get_precision(code)
    for p, q in ((N, N), (N + 3, N - 5)):
        host = rng.uniform(-1, 1, p * q * (2 if prec.is_complex else 1)).astype(prec.dtype.type(0).real.dtype).view(prec.dtype)[: p * q]
        src = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)
        dst = cl.Buffer(ctx, mf.READ_WRITE, p * q * prec.bytes)
        nbytes = 2 * p * q * prec.bytes
        # reference: a plain device copy
        for _ in range(3):
            cl.enqueue_copy(queue, dst, src)
        queue.finish()
        tc = []
        for _ in range(20):
            ev = cl.enqueue_copy(queue, dst, src)
            ev.wait()
            tc.append((ev.profile.end - ev.profile.start) * 1e-9)
        print(f"{code} {p}x{q}  copy            {nbytes / np.median(tc) / 1e9:7.0f} GB/s", flush=True)
        cases = [("shipped", SHIPPED, tx, ty, 1) for tx, ty in ((16, 16), (32, 8), (32, 32), (16, 8), (8, 32))]
        cases += [("rows", SHIPPED, tx, ty, w) for tx, ty, w in ((32, 8, 4), (32, 8, 2), (32, 16, 2), (32, 4, 8), (16, 16, 2), (16, 8, 4), (64, 4, 16), (64, 8, 8))]
        for name, source, tx, ty, w in cases:
            try:
                opts = ["-cl-mad-enable", f"-DPRECISION={prec.cl_define}", f"-DTRANSPOSEX={tx}", f"-DTRANSPOSEY={ty}", f"-DTRANSPOSEW={w}"]
                prg = cl.Program(ctx, source).build(options=opts)
                k = cl.Kernel(prg, "pad_transpose")
                g = (rup(p, tx), rup(q, ty * w) // w)
                t = run(k, g, (tx, ty), p, q, src, dst)
                out = np.empty(p * q, prec.dtype)
                cl.enqueue_copy(queue, out, dst)
                ok = np.array_equal(out.reshape(p, q), host.reshape(q, p).T)  # out is q x p col-major = p x q row-major
                print(f"{code} {p}x{q}  {name:7s} {tx:3d}x{ty:<3d} w{w:<2d} {nbytes / t / 1e9:7.0f} GB/s {t * 1e6:8.1f} us {'ok' if ok else 'WRONG'}", flush=True)
            except Exception as e:
                print(f"{code} {name} {tx}x{ty} w{w} FAILED: {str(e).splitlines()[0][:150]}")
