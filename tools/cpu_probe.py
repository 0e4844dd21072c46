#!/usr/bin/env python3
"""Build, verify and time kernels/xgemm_cpu.cl on an OpenCL CPU device, beside numpy's BLAS.

    python tools/cpu_probe.py -D VW=16 -D MV=2 -D NR=12 --precision s,d --sizes 1024,2048
    python tools/cpu_probe.py --sweep VW=8,16 MV=1,2 NR=4,8,12 --precision s --sizes 1024

Each configuration is built with PoCL's kernel cache off (so the build time is a real build),
checked against numpy in float64 on an odd shape and at every timed size (C pre-filled with
NaN, beta = 0, so a missed element shows), then timed: per repeat, one numpy product and one
kernel launch one after the other, so both see the same load on a shared machine; the medians
are reported, the kernel's both as OpenCL profiling time and as wall-clock time.

numpy's speed depends on the environment OpenBLAS starts in (OPENBLAS_CORETYPE,
OPENBLAS_L2_SIZE); the BLAS threadpoolctl sees is printed with them. To compare with numpy
unhindered, run the probe under `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("POCL_KERNEL_CACHE", "0")  # before PoCL loads: builds are timed for real

import numpy as np  # noqa: E402
import pyopencl as cl  # noqa: E402

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
DTYPES = {"s": (np.float32, 32), "d": (np.float64, 64), "c": (np.complex64, 3232), "z": (np.complex128, 6464)}
# a product's worst relative error (to max|A|·max|B|·K) allowed, per unit roundoff of the type
TOLERANCE_ULPS = 4.0
PACK_WG = 16  # the packing kernels' work-group size (PACK_WG in the kernel)


def pick_device(platform_hint: str | None) -> cl.Device:
    for platform in cl.get_platforms():
        label = f"{platform.name} {platform.version}"
        if platform_hint and platform_hint.lower() not in label.lower():
            continue
        for dev in platform.get_devices():
            if dev.type & cl.device_type.CPU:
                return dev
    sys.exit(f"no OpenCL CPU device{' on a platform matching ' + platform_hint if platform_hint else ''}")


def build(ctx: cl.Context, defines: dict[str, int]) -> tuple[cl.Program, float]:
    source = (KERNELS / "xgemm_cpu.cl").read_text()
    options = ["-cl-mad-enable", f"-I{KERNELS}", *(f"-D{k}={v}" for k, v in defines.items())]
    start = time.perf_counter()
    program = cl.Program(ctx, source).build(options=options)
    cl.Kernel(program, "xgemm")  # PoCL finishes some of the work at the first kernel
    return program, time.perf_counter() - start


def global_size(m: int, n: int, d: dict[str, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    mr, nr, wgs = d["MV"] * d["VW"], d["NR"] * d["NB"], d["WGS"]
    cols, rows = -(-max(n, 1) // nr), -(-max(m, 1) // mr)
    if d.get("ORDER"):
        return (-(-rows // wgs) * wgs, cols), (wgs, 1)
    return (-(-cols // wgs) * wgs, rows), (wgs, 1)


class Case:
    """One product on the device: operands with leading dimensions and offsets, C poisoned."""

    def __init__(self, ctx, queue, dtype, m, n, k, transa=0, transb=0, pad=0, off=0, seed=0):
        rng = np.random.default_rng(seed)
        self.queue, self.dtype, self.m, self.n, self.k = queue, dtype, m, n, k
        self.transa, self.transb, self.off = transa, transb, off

        def rand(rows, cols):  # stored column-major, leading dimension rows + pad
            ld = rows + pad
            x = rng.uniform(-1, 1, (cols, ld))
            if np.iscomplexobj(np.zeros(0, dtype)):
                x = x + 1j * rng.uniform(-1, 1, (cols, ld))
            return x.astype(dtype), ld

        self.a_host, self.lda = rand(*((k, m) if transa else (m, k)))
        self.b_host, self.ldb = rand(*((n, k) if transb else (k, n)))
        self.c_host, self.ldc = rand(m, n)
        mf = cl.mem_flags

        def buf(x):
            flat = np.concatenate([np.zeros(off, dtype), x.ravel()])
            return cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=flat)

        self.a, self.b, self.c = buf(self.a_host), buf(self.b_host), buf(self.c_host)

    def op(self, x, ld, rows, cols, trans):
        mat = x.T[:rows, :cols] if not trans else x.T[:cols, :rows].T
        return mat.astype(np.complex128 if np.iscomplexobj(mat) else np.float64)

    def reference(self, alpha, beta, c_before):
        a = self.op(self.a_host, self.lda, self.m, self.k, self.transa)
        b = self.op(self.b_host, self.ldb, self.k, self.n, self.transb)
        c = self.op(c_before, self.ldc, self.m, self.n, 0)
        return alpha * (a @ b) + (beta * c if beta != 0 else 0)

    def poison(self):
        nan = np.full(self.off + self.c_host.size, np.nan, self.dtype)
        cl.enqueue_copy(self.queue, self.c, nan)

    def launch(self, kernels, defines, alpha, beta) -> list[cl.Event]:
        """Enqueue the packing kernels the configuration asks for, then the product; the
        events, in order (the time of a product is from the first start to the last end)."""
        main, pack_a, pack_b = kernels
        gsize, lsize = global_size(self.m, self.n, defines)
        events, extra = [], []
        i32 = np.int32
        for flag, kern, rows, block, src, ld in (("PACKA", pack_a, self.m, defines["MV"] * defines["VW"], self.a, self.lda),
                                                  ("PACKB", pack_b, self.n, defines["NR"], self.b, self.ldb)):
            if not defines.get(flag):
                continue
            blocks = -(-max(rows, 1) // block)
            key = (flag, blocks)
            if key not in self.__dict__.setdefault("packed", {}):
                size = max(1, blocks * block * self.k) * np.dtype(self.dtype).itemsize
                self.packed[key] = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, size)
            packed = self.packed[key]
            if self.k > 0:
                events.append(kern(self.queue, (-(-self.k // PACK_WG) * PACK_WG, blocks), (PACK_WG, 1), i32(rows), i32(self.k), src,
                                   i32(self.off), i32(ld), packed))
            extra.append(packed)
        events.append(main(self.queue, gsize, lsize, i32(self.m), i32(self.n), i32(self.k),
                           self.dtype(alpha), self.dtype(beta),
                           self.a, i32(self.off), i32(self.lda),
                           self.b, i32(self.off), i32(self.ldb),
                           self.c, i32(self.off), i32(self.ldc), *extra))
        return events

    def result(self):
        out = np.empty(self.off + self.c_host.size, self.dtype)
        cl.enqueue_copy(self.queue, out, self.c)
        return out[self.off:].reshape(self.c_host.shape)

    def error(self, kernel, defines, alpha=1.0, beta=0.0):
        """Worst error relative to the bound, after one launch (C poisoned when beta == 0)."""
        if beta == 0:
            self.poison()
            before = np.full_like(self.c_host, np.nan)
        else:
            cl.enqueue_copy(self.queue, self.c, np.concatenate([np.zeros(self.off, self.dtype), self.c_host.ravel()]))
            before = self.c_host
        self.launch(kernel, defines, alpha, beta)[-1].wait()
        got = self.result()
        want = self.reference(alpha, beta, before)
        got_mc = got.T[:self.m, :self.n]
        pad_rows = got[:, self.m:]  # the rows between M and ldc must be left alone
        if pad_rows.size and not (np.isnan(pad_rows).all() if beta == 0 else np.array_equal(pad_rows, self.c_host[:, self.m:])):
            return float("inf")  # wrote outside the M x N block
        eps = np.finfo(self.dtype).eps
        bound = TOLERANCE_ULPS * eps * max(1, self.k) * (abs(alpha) + abs(beta))
        diff = np.abs(got_mc - want)
        return float("inf") if not np.isfinite(diff).all() else float(diff.max() / bound)


def blas_label() -> str:
    try:
        from threadpoolctl import threadpool_info
        libs = [f"{i['internal_api']} {i.get('version')} {i.get('architecture')} threads={i['num_threads']}"
                for i in threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        libs = ["threadpoolctl not installed"]
    env = " ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"))
    return f"numpy {np.__version__}: {'; '.join(libs)}; {env}"


def time_pair(case: Case, kernel, defines, repeats: int, with_numpy: bool):
    """Medians of (numpy wall s, kernel event s, kernel wall s), interleaved per repeat."""
    a = case.op(case.a_host, case.lda, case.m, case.k, case.transa).astype(case.dtype)
    b = case.op(case.b_host, case.ldb, case.k, case.n, case.transb).astype(case.dtype)
    a, b = np.asfortranarray(a), np.asfortranarray(b)
    case.launch(kernel, defines, 1.0, 0.0)[-1].wait()  # warm-up: pages touched
    if with_numpy:
        a @ b
    np_t, ev_t, wall_t = [], [], []
    for _ in range(repeats):
        if with_numpy:
            t = time.perf_counter()
            a @ b
            np_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        events = case.launch(kernel, defines, 1.0, 0.0)
        events[-1].wait()
        wall_t.append(time.perf_counter() - t)
        ev_t.append((events[-1].profile.end - events[0].profile.start) * 1e-9)
    med = statistics.median
    return (med(np_t) if np_t else float("nan")), med(ev_t), med(wall_t), min(ev_t), (min(np_t) if np_t else float("nan"))


DEFAULTS = {"VW": 8, "MV": 2, "NR": 8, "KU": 4, "NB": 1, "KC": 0, "WGS": 1, "ORDER": 0, "TRANSA": 0, "TRANSB": 0, "PACKA": 1, "PACKB": 0}


def parse_defines(items: list[str]) -> dict[str, int]:
    out = dict(DEFAULTS)
    for item in items:
        key, _, value = item.partition("=")
        out[key.strip().upper()] = int(value)
    return out


def run_config(ctx, queue, defines, precisions, sizes, repeats, with_numpy, verbose=True):
    rows = []
    for code in precisions:
        dtype, prec = DTYPES[code]
        d = {**defines, "PRECISION": prec}
        try:
            program, seconds = build(ctx, d)
        except cl.RuntimeError as e:
            said = [line.strip() for line in str(e).splitlines() if "error" in line.lower()]
            print(f"{code} {fmt(defines)}: build failed: {said[-1] if said else str(e).splitlines()[0]}")
            continue
        kernel = (cl.Kernel(program, "xgemm"),
                  cl.Kernel(program, "xgemm_pack_a") if d.get("PACKA") else None,
                  cl.Kernel(program, "xgemm_pack_b") if d.get("PACKB") else None)
        odd = Case(ctx, queue, dtype, 67, 35, 19, d["TRANSA"], d["TRANSB"], pad=3, off=5, seed=1)
        start = time.perf_counter()
        errs = [odd.error(kernel, d)]
        # PoCL generates the machine code at a kernel's first launch (for its local size): a
        # tiny product's first run is nearly all that, and belongs to the build time
        seconds += time.perf_counter() - start
        errs.append(odd.error(kernel, d, 0.5, -1.5))
        for size in sizes:
            case = Case(ctx, queue, dtype, size, size, size, d["TRANSA"], d["TRANSB"], seed=2)
            if size <= 2048:
                errs.append(case.error(kernel, d))
            np_s, ev_s, wall_s, best_s, np_best_s = time_pair(case, kernel, d, repeats, with_numpy)
            flops = 2 * size ** 3 * (4 if np.iscomplexobj(np.zeros(0, dtype)) else 1)
            row = dict(precision=code, size=size, build_s=seconds, err=max(errs), gflops_event=flops / ev_s / 1e9,
                       gflops_wall=flops / wall_s / 1e9, gflops_numpy=flops / np_s / 1e9,
                       gflops_best=flops / best_s / 1e9, gflops_numpy_best=flops / np_best_s / 1e9, params=fmt(defines))
            rows.append(row)
            if verbose:
                ok = "ok" if row["err"] <= 1 else f"WRONG (error {row['err']:.3g} of the bound)"
                print(f"{code} {size:5d}^3  kernel {row['gflops_event']:6.1f} GFLOP/s (event) "
                      f"{row['gflops_wall']:6.1f} (wall) {row['gflops_best']:6.1f} (best)   "
                      f"numpy {row['gflops_numpy']:6.1f} ({row['gflops_numpy_best']:6.1f} best)   "
                      f"ratio {row['gflops_event'] / row['gflops_numpy']:.2f}   build {seconds:5.2f} s  {ok}  {row['params']}",
                      flush=True)
    return rows


def fmt(defines: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in defines.items() if k != "PRECISION")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-D", dest="defines", action="append", default=[], help="NAME=VALUE, repeatable")
    ap.add_argument("--sweep", nargs="+", default=None, help="NAME=v1,v2,... : every combination")
    ap.add_argument("--precision", default="s,d")
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--platform", default=None, help="a substring of the platform's name or version")
    ap.add_argument("--no-numpy", action="store_true", help="sweep faster: time the kernel alone")
    args = ap.parse_args()

    dev = pick_device(args.platform)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    print(f"device: {dev.name} | {dev.platform.version} | {dev.version}")
    print(blas_label())
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    sizes = [int(s) for s in args.sizes.split(",")]
    base = parse_defines(args.defines)
    configs = [base]
    if args.sweep:
        axes = [(item.partition("=")[0].upper(), [int(v) for v in item.partition("=")[2].split(",")])
                for item in args.sweep]
        configs = [{**base, **dict(zip([a for a, _ in axes], combo))}
                   for combo in itertools.product(*[vals for _, vals in axes])]
    rows = []
    for d in configs:
        rows += run_config(ctx, queue, d, precisions, sizes, args.repeats, not args.no_numpy)
    if len(configs) > 1:
        print("\nbest per precision and size (by the fastest repeat: a shared machine slows repeats, never speeds them):")
        for code, size in itertools.product(precisions, sizes):
            mine = [r for r in rows if r["precision"] == code and r["size"] == size and r["err"] <= 1]
            if mine:
                for best in sorted(mine, key=lambda r: -r["gflops_best"])[:5]:
                    print(f"  {code} {size}^3: {best['gflops_best']:.1f} GFLOP/s best, {best['gflops_event']:.1f} median, "
                          f"build {best['build_s']:.2f} s: {best['params']}")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
