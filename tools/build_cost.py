"""What building a candidate costs on a device, which sets a search's pace wherever the compilers
are slower than the timing worker (docs/search.md, "Throughput on the H200"). Valid
configurations of the device's space at one problem are each built whole, as a compiler builds
them (``kernels.build``), in processes of their own: first one process, then ``--at-once``
side by side, as a search's compilers run. On a device whose binary carries the build (NVIDIA's
PTX), each binary is then loaded in the same process, as a compiler does so that the driver's
cache holds its machine code for the timing worker. ``--together K`` builds K candidates in each
program instead (``together``), to see whether a build's fixed cost, shared, makes a candidate
cheaper.

    python tools/build_cost.py [--device 0] [-p s] [--size 1024] [--configs 16] [--at-once 15] [--together 1] [--seed 0]

Prints, per arrangement, the candidates built; the median seconds of a build per candidate (a
program's build over the K candidates it holds); the median seconds of a program's load after
its build; and the candidates per second of the processes together, each at the pace of its own
wall time (its start left out). Each arrangement builds configurations of its own, with the drivers' caches in an
empty folder, so that no cache serves a build.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import re
import statistics
import sys
import tempfile
import time


def _names(source: str) -> list[str]:
    """The names a program's source declares at file scope (functions, kernels, types), found in
    its text outside preprocessor lines, braces and attributes; its own macros are not names."""
    text = re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", " ", source, flags=re.S)).replace("\\\n", " ")
    code = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))
    top, depth = [], 0
    for ch in code:
        depth += (ch == "{") - (ch == "}")
        top.append(ch if depth == 0 and ch != "}" else " ")
    top = "".join(top)
    while (attribute := re.search(r"__attribute__\s*\(", top)) is not None:   # its arguments name nothing
        end, open_ = attribute.end(), 1
        while open_:
            open_ += (top[end] == "(") - (top[end] == ")")
            end += 1
        top = top[:attribute.start()] + top[end:]
    found = (re.findall(r"\b([A-Za-z_]\w*)\s*\(", top) + re.findall(r"\btypedef\b[^;]*?\b(\w+)\s*;", top)
             + re.findall(r"\b(?:struct|union)\s+(\w+)", top))
    return sorted(set(found) - _macros(source) - {"if", "while", "for", "sizeof", "return"})


def _macros(source: str) -> set[str]:
    return set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", source, re.M))


def together(parts: list[tuple[str, dict]], shared=frozenset()) -> tuple[str, list[str]]:
    """One source holding several candidates (source, defines), and the suffix each one's names
    got. Each copy defines its parameters in the text, renames its file-scope names through
    macros (``xgemm`` becomes ``xgemm__2``) and undefines every macro it defined after itself, so
    that the next copy, with its own ``#ifndef`` defaults and include guards, starts clean; but
    the ``shared`` ones, which the build's options define for every copy (the device's)."""
    text, suffixes = [], []
    for i, (source, defs) in enumerate(parts):
        names, suffix = _names(source), f"__{i}"
        text += [f"#define {k} {v}" for k, v in defs.items()] + [f"#define {n} {n}{suffix}" for n in names]
        text += [source, *(f"#undef {n}" for n in sorted({*names, *_macros(source), *defs} - set(shared)))]
        suffixes.append(suffix)
    return "\n".join(text), suffixes


def shared_defines(dev) -> set[str]:
    """The macros every build on ``dev`` gets from its options (the device's facts): one
    ``together`` program defines them once for all its copies."""
    from gemmtune.launch.operation import build_options

    return {option[2:].split("=")[0] for option in build_options({}, dev) if option.startswith("-D")}


def _builder(device: str, jobs, barrier, results, cache: str) -> None:
    """One process: open the device, wait for the others, build (and load) its share, a program
    of one or more candidates (``together``) at a time. The drivers' on-disk caches (NVIDIA's
    also keeps source builds: a repeated one took 3 ms on an H100 host) point at ``cache``, an
    empty folder, before the driver is loaded."""
    os.environ["CUDA_CACHE_PATH"] = os.environ["POCL_CACHE_DIR"] = cache
    import pyopencl as cl

    from gemmtune.devices.opencl import keeps_source_builds, open_device
    from gemmtune.launch.operation import build, load_binary, program_binary

    _, dev = open_device(device)
    ctx = cl.Context([dev])
    shared = shared_defines(dev)
    # The compilers' rule (gemmtune.execution.compiler): a GPU driver that does not keep source builds
    # for every process gets its binary loaded once.
    loads = not keeps_source_builds(dev) and not dev.type & cl.device_type.CPU
    barrier.wait()
    start, timed = time.perf_counter(), []
    for program_parts in jobs:
        source, defs = program_parts[0] if len(program_parts) == 1 else (together(program_parts, shared)[0], {})
        t0 = time.perf_counter()
        program = build(ctx, source, defs)
        t1 = time.perf_counter()
        if loads:
            load_binary(ctx, program_binary(program), defs)
        timed.append((len(program_parts), t1 - t0, time.perf_counter() - t1 if loads else None))
    results.put((timed, time.perf_counter() - start))


def arrangement(device: str, jobs: list, processes: int, per_program: int = 1) -> dict:
    """Build ``jobs``, ``per_program`` to a program, over ``processes`` processes at once; their figures."""
    spawn = mp.get_context("spawn")
    barrier, results = spawn.Barrier(processes), spawn.Queue()
    programs = [jobs[i:i + per_program] for i in range(0, len(jobs), per_program)]
    shares = [programs[i::processes] for i in range(processes)]
    with tempfile.TemporaryDirectory(prefix="gemmtune-build-cost-") as cache:
        workers = [spawn.Process(target=_builder, args=(device, share, barrier, results, cache)) for share in shares]
        for w in workers:
            w.start()
        got = [results.get() for _ in workers]
        for w in workers:
            w.join()
    built = [(n, b) for timed, _ in got for n, b, _ in timed]
    loads = [ld for timed, _ in got for *_, ld in timed if ld is not None]
    candidates = sum(n for n, _ in built)
    return {"processes": processes, "candidates": candidates, "build_s": statistics.median(b / n for n, b in built),
            "load_s": statistics.median(loads) if loads else None,
            # each process's pace, summed: the slowest's wall time alone would set it otherwise
            "per_second": sum(sum(n for n, *_ in timed) / wall for timed, wall in got)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="0", help="device index or name (default 0)")
    ap.add_argument("-p", "--precision", default="s", help="s, d, c or z (default s)")
    ap.add_argument("--size", type=int, default=1024, help="m = n = k (default 1024)")
    ap.add_argument("--configs", type=int, default=16, help="configurations built one at a time (default 16)")
    ap.add_argument("--at-once", type=int, default=15, help="processes side by side (default 15)")
    ap.add_argument("--together", type=int, default=1, help="candidates built in each program (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="which configurations are drawn (default 0)")
    args = ap.parse_args(argv)
    for name in ("size", "configs", "at_once", "together"):
        if getattr(args, name) < 1:
            print(f"Error: --{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    from gemmtune.devices.opencl import open_device
    from gemmtune.errors import GemmtuneError
    from gemmtune.launch.operation import defines
    from gemmtune.launch.plan import Problem
    from gemmtune.precision import get_precision
    from gemmtune.space import load_space
    from gemmtune.space.valid import sample_valid

    try:
        info, dev = open_device(args.device)
        prec = get_precision(args.precision)
        space = load_space(None, dev)
        problem = Problem(args.size, args.size, args.size)
        wanted = args.configs + args.at_once * 2 * args.together   # two programs per process side by side
        drawn = sample_valid(space, info, prec, wanted, random.Random(args.seed))
    except GemmtuneError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    jobs = [(space.family(c.kernel).source, defines(c, prec, problem)) for c in drawn]
    if len(jobs) < wanted:
        print(f"Error: the space holds {len(jobs)} valid configurations, fewer than the {wanted} needed",
              file=sys.stderr)
        return 2
    print(f"{info.name}, {prec.code} {args.size}^3, {len(jobs)} configurations drawn, {args.together} to a program")
    print("| processes | candidates | median build per candidate, s | median load of a program, s | candidates per second |")
    print("|---|---|---|---|---|")
    for processes, share in ((1, jobs[:args.configs]), (args.at_once, jobs[args.configs:])):
        row = arrangement(str(info.index), share, processes, args.together)
        load = "–" if row["load_s"] is None else f"{row['load_s']:.4f}"
        print(f"| {processes} | {row['candidates']} | {row['build_s']:.3f} | {load} | {row['per_second']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
