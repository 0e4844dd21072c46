"""What building a candidate costs on a device, which sets a search's pace wherever the compilers
are slower than the timing worker (docs/search.md, "Throughput on the H200"). Valid
configurations of the device's space at one problem are each built whole, as a compiler builds
them (``kernels.build``), in processes of their own: first one process, then ``--at-once``
side by side, as a search's compilers run. On a device whose binary carries the build (NVIDIA's
PTX), each binary is then loaded in the same process, as a compiler does so that the driver's
cache holds its machine code for the timing worker.

    python tools/build_cost.py [--device 0] [-p s] [--size 1024] [--configs 16] [--at-once 15] [--seed 0]

Prints, per arrangement, the builds, the median seconds of a build and of the load after it,
and the builds per second of the processes' own wall time (their start left out). Each
arrangement builds configurations of its own, with the drivers' caches in an empty folder, so
that no cache serves a build.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time


def _builder(device: str, jobs, barrier, results, cache: str) -> None:
    """One process: open the device, wait for the others, build (and load) its share. The
    drivers' on-disk caches (NVIDIA's also keeps source builds: a repeated one took 3 ms on an
    H100 host) point at ``cache``, an empty folder, before the driver is loaded."""
    os.environ["CUDA_CACHE_PATH"] = os.environ["POCL_CACHE_DIR"] = cache
    import pyopencl as cl

    from gemmtune.device import keeps_source_builds, open_device
    from gemmtune.kernels import build, load_binary, program_binary

    _, dev = open_device(device)
    ctx = cl.Context([dev])
    # The compilers' rule (gemmtune.compiler): a GPU driver that does not keep source builds
    # for every process gets its binary loaded once.
    loads = not keeps_source_builds(dev) and not dev.type & cl.device_type.CPU
    barrier.wait()
    start, timed = time.perf_counter(), []
    for source, defs in jobs:
        t0 = time.perf_counter()
        program = build(ctx, source, defs)
        t1 = time.perf_counter()
        if loads:
            load_binary(ctx, program_binary(program), defs)
        timed.append((t1 - t0, time.perf_counter() - t1 if loads else None))
    results.put((timed, time.perf_counter() - start))


def arrangement(device: str, jobs: list, processes: int) -> dict:
    """Build ``jobs`` over ``processes`` processes at once; their figures."""
    spawn = mp.get_context("spawn")
    barrier, results = spawn.Barrier(processes), spawn.Queue()
    shares = [jobs[i::processes] for i in range(processes)]
    with tempfile.TemporaryDirectory(prefix="gemmtune-build-cost-") as cache:
        workers = [spawn.Process(target=_builder, args=(device, share, barrier, results, cache)) for share in shares]
        for w in workers:
            w.start()
        got = [results.get() for _ in workers]
        for w in workers:
            w.join()
    builds = [b for timed, _ in got for b, _ in timed]
    loads = [ld for timed, _ in got for _, ld in timed if ld is not None]
    return {"processes": processes, "builds": len(builds), "build_s": statistics.median(builds),
            "load_s": statistics.median(loads) if loads else None,
            "per_second": len(builds) / max(wall for _, wall in got)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="0", help="device index or name (default 0)")
    ap.add_argument("-p", "--precision", default="s", help="s, d, c or z (default s)")
    ap.add_argument("--size", type=int, default=1024, help="m = n = k (default 1024)")
    ap.add_argument("--configs", type=int, default=16, help="configurations built one at a time (default 16)")
    ap.add_argument("--at-once", type=int, default=15, help="processes side by side (default 15)")
    ap.add_argument("--seed", type=int, default=0, help="which configurations are drawn (default 0)")
    args = ap.parse_args(argv)
    for name in ("size", "configs", "at_once"):
        if getattr(args, name) < 1:
            print(f"Error: --{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    from gemmtune.device import open_device
    from gemmtune.errors import GemmtuneError
    from gemmtune.kernels import defines
    from gemmtune.launch import Problem
    from gemmtune.precision import get_precision
    from gemmtune.space import load_space
    from gemmtune.valid import sample_valid

    try:
        info, dev = open_device(args.device)
        prec = get_precision(args.precision)
        space = load_space(None, dev)
        problem = Problem(args.size, args.size, args.size)
        wanted = args.configs + args.at_once * 2   # two builds per process side by side
        drawn = sample_valid(space, info, prec, wanted, random.Random(args.seed))
    except GemmtuneError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    jobs = [(space.family(c.kernel).source, defines(c, prec, problem)) for c in drawn]
    if len(jobs) < wanted:
        print(f"Error: the space holds {len(jobs)} valid configurations, fewer than the {wanted} needed",
              file=sys.stderr)
        return 2
    print(f"{info.name}, {prec.code} {args.size}^3, {len(jobs)} configurations drawn")
    print("| processes | builds | median build, s | median load after it, s | builds per second |")
    print("|---|---|---|---|---|")
    for processes, share in ((1, jobs[:args.configs]), (args.at_once, jobs[args.configs:])):
        row = arrangement(str(info.index), share, processes)
        load = "–" if row["load_s"] is None else f"{row['load_s']:.4f}"
        print(f"| {processes} | {row['builds']} | {row['build_s']:.3f} | {load} | {row['per_second']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
