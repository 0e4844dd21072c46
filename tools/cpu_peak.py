#!/usr/bin/env python3
"""Multiply-add throughput of a CPU OpenCL device: kernels/peak.cl's madd (what `gemmtune peak`
runs) beside kernels/peak_cpu.cl's madd_vec, and numpy's GEMM on the same machine.

    python tools/cpu_peak.py                       # s and d, the default VECW/CHAINS
    python tools/cpu_peak.py --sweep               # VECW 4/8/16 x CHAINS 4/8/12/16

Times are OpenCL profiling times; each figure is the median of the repeats and (in brackets)
the fastest one, since other work on a shared machine only ever slows a repeat down.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("POCL_KERNEL_CACHE", "0")

import numpy as np  # noqa: E402
import pyopencl as cl  # noqa: E402

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
TYPES = {"s": (np.float32, 32), "d": (np.float64, 64)}


def pick_device(hint):
    for platform in cl.get_platforms():
        if hint and hint.lower() not in f"{platform.name} {platform.version}".lower():
            continue
        for dev in platform.get_devices():
            if dev.type & cl.device_type.CPU:
                return dev
    raise SystemExit("no OpenCL CPU device")


def timed(queue, launch, repeats):
    launch().wait()
    samples = []
    for _ in range(repeats):
        ev = launch()
        ev.wait()
        samples.append((ev.profile.end - ev.profile.start) * 1e-9)
    return statistics.median(samples), min(samples)


def peak_cl(ctx, queue, dev, code, repeats):
    """peak.cl's madd as gemmtune.peak launches it: 16 scalar chains, 256 work-items per group."""
    dtype, prec = TYPES[code]
    prg = cl.Program(ctx, (KERNELS / "peak.cl").read_text()).build(
        options=["-cl-mad-enable", f"-I{KERNELS}", f"-DPRECISION={prec}", "-DCHAINS=16"])
    local = min(256, dev.max_work_group_size)
    items = dev.max_compute_units * local
    iterations = 16384
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, items * np.dtype(dtype).itemsize)
    k = cl.Kernel(prg, "madd")
    med, best = timed(queue, lambda: k(queue, (items,), (local,), np.int32(iterations), dtype(0.999), dtype(1e-3), out), repeats)
    flops = items * 16 * iterations * 2
    return flops / med / 1e9, flops / best / 1e9


def peak_cpu(ctx, queue, dev, code, vecw, chains, repeats):
    dtype, prec = TYPES[code]
    t = time.perf_counter()
    prg = cl.Program(ctx, (KERNELS / "peak_cpu.cl").read_text()).build(
        options=["-cl-mad-enable", f"-I{KERNELS}", f"-DPRECISION={prec}", f"-DVECW={vecw}", f"-DCHAINS={chains}"])
    k = cl.Kernel(prg, "madd_vec")
    # several work-items per compute unit, so an unevenly shared core does not leave the other idle
    items = dev.max_compute_units * 8
    iterations = 1 << 16
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, items * np.dtype(dtype).itemsize)
    launch = lambda: k(queue, (items,), (1,), np.int32(iterations), dtype(0.999), dtype(1e-3), out)  # noqa: E731
    launch().wait()
    build = time.perf_counter() - t
    med, best = timed(queue, launch, repeats)
    flops = items * chains * vecw * iterations * 2
    return flops / med / 1e9, flops / best / 1e9, build


def numpy_gemm(code, size, repeats):
    dtype = TYPES[code][0]
    a = np.random.rand(size, size).astype(dtype)
    b = np.random.rand(size, size).astype(dtype)
    a @ b
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        samples.append(time.perf_counter() - t)
    flops = 2 * size ** 3
    return flops / statistics.median(samples) / 1e9, flops / min(samples) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--platform", default=None)
    ap.add_argument("--precision", default="s,d")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    dev = pick_device(args.platform)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    print(f"device: {dev.name} | {dev.platform.version} | {dev.max_compute_units} compute units")
    env = " ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"))
    print(f"numpy {np.__version__}, {env}; load average {os.getloadavg()[0]:.2f}")
    for code in [c.strip() for c in args.precision.split(",") if c.strip()]:
        med, best = peak_cl(ctx, queue, dev, code, args.repeats)
        print(f"{code} peak.cl madd (16 scalar chains, 256 work-items a group): {med:7.1f} GFLOP/s ({best:.1f} best)")
        default_w = 16 if code == "s" else 8
        grid = [(w, c) for w in (4, 8, 16) for c in (4, 8, 12, 16)] if args.sweep else [(default_w, 12)]
        for vecw, chains in grid:
            med, best, build = peak_cpu(ctx, queue, dev, code, vecw, chains, args.repeats)
            print(f"{code} peak_cpu.cl madd_vec VECW={vecw:2d} CHAINS={chains:2d}: {med:7.1f} GFLOP/s "
                  f"({best:.1f} best), build and first launch {build:.2f} s")
        for size in (1024, 2048):
            med, best = numpy_gemm(code, size, 5)
            print(f"{code} numpy GEMM {size}^3: {med:7.1f} GFLOP/s ({best:.1f} best)")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
