"""What one GEMM call costs the host, beside one trivial kernel launch on the same queue.

    python tools/call_cost.py [--device N] [--size 16] [--precision s] [--calls 2000]

Prints the median host time of ``gemmtune.Gemm(queue, p)(a, b, c)`` (the call returning, no
wait), of the same call followed by ``queue.finish()``, and of enqueuing a kernel that does
nothing (its arguments set once), each over ``--calls`` calls after a warm-up. The first is the
host cost the thin call path is about; the ratio of it to the trivial launch is printed last.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

TRIVIAL = "__kernel void nothing(__global float* x) { }"


def median_us(fn, calls: int) -> float:
    for _ in range(min(100, calls)):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--precision", default="s")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)

    import pyopencl as cl
    import pyopencl.array as cla

    import gemmtune
    from gemmtune.call.compute import get_device
    from gemmtune.precision import get_precision

    dev = get_device(args.device)
    queue = cl.CommandQueue(dev.context)
    prec = get_precision(args.precision)
    n = args.size
    a, b = (cla.to_device(queue, np.ones((n, n), prec.dtype)) for _ in range(2))
    c = cla.zeros(queue, (n, n), prec.dtype)
    gemm = gemmtune.Gemm(queue, prec)

    def call():
        gemm(a, b, c)
        c.events.clear()   # a long loop's events, as a program that waits would not keep them

    def call_and_wait():
        call()
        queue.finish()

    kernel = cl.Program(dev.context, TRIVIAL).build().nothing
    kernel.set_arg(0, c.base_data)

    def trivial():
        cl.enqueue_nd_range_kernel(queue, kernel, (1,), None)

    results = {"call_us": median_us(call, args.calls), "call_and_wait_us": median_us(call_and_wait, args.calls),
               "trivial_launch_us": median_us(trivial, args.calls)}
    queue.finish()
    results["ratio"] = results["call_us"] / results["trivial_launch_us"]
    print(f"device {dev.info.index} ({dev.info.name}), {prec.code}gemm {n}^3, "
          f"configuration {gemm.last_operation.config.kernel} {gemm.last_operation.config}")
    print(f"Gemm call            {results['call_us']:8.2f} us")
    print(f"Gemm call + finish   {results['call_and_wait_us']:8.2f} us")
    print(f"trivial launch       {results['trivial_launch_us']:8.2f} us")
    print(f"call / trivial       {results['ratio']:8.2f}")
    return results


if __name__ == "__main__":
    main()
