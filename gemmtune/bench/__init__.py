"""``gemmtune bench``: the tuned configuration against baselines, as a caller pays for it.

Each problem is BLAS's (column-major C is m x n, op() of A and B as given; see gemmtune.shapes),
a batch of them at once where the shape says (``batch``: one batched call of each contender, 3-D
arrays; CLBlast's strided batched GEMM, numpy's and torch's matmul on 3-D arrays). Contenders:

* ``gemmtune``: ``gemmtune.Gemm`` as a program calls it, with the configuration ``best_config``
  gives for the problem (tuned, nearest or default);
* ``config:NAME=VALUE,...``: ``Gemm`` held to an explicit configuration;
* ``gemm``: ``gemmtune.gemm`` on numpy arrays, returning a new one as ``a @ b`` does: what a
  numpy program pays, with its copies to and from a device that has memory of its own;
* ``numpy``: the host BLAS behind numpy (``a @ b``);
* ``clblast``: CLBlast's GEMM through its C API (``gemmtune.bench.clblast``), on the same OpenCL queue,
  with buffers of its own; an error when the library cannot be loaded (the baseline was asked for);
* ``torch`` / ``cupy``: cuBLAS on a CUDA device (TF32 off) through ``matmul`` on transposed
  views where op() asks for them; skipped, with the reason, when the package or a CUDA device
  is missing.
* ``3m`` (c and z): ``Gemm`` with ``complex_algorithm="3m"``, three real products
  (``gemmtune.call.complex3m``); ``cublas-3m``: cuBLAS's ``cublasCgemm3m`` / ``cublasZgemm3m`` on
  torch's tensors (``gemmtune.bench.cublas3m``). Their GFLOP/s count 8 real flops per complex
  multiply-add, as the standard product's do, so that the ratios compare times.

Every sample is one call and its wait, timed on the host (``wall_ms``: what the caller pays),
beside the device's own time of it (``device_ms``: OpenCL profiling events, CUDA events) and the
time the call took to return (``host_ms``: its host cost). CLBlast returns the event of its last
command only, so its ``device_ms`` is the span from a marker enqueued before the call to that
command's end (gaps between its commands included), where gemmtune's sums its commands. The ratios
and the GFLOP/s are of the wall-clock time. OpenCL contenders are first verified on their output
poisoned with NaN (up to 64 sampled rows against numpy in double precision). Contenders are sampled
in turns, one call each per round, so that a clock drifting during the run affects all alike; each
stops when the 95 % interval of its median is within 2 % of it, or at the caps of the timing
policy. A contender whose calls take under 20 ms is called once, unrecorded, before each sample;
one sampled right after the host BLAS, or the host BLAS right after an OpenCL contender, is first
called unrecorded until those calls have taken 0.25 s, while the other's threads stop spinning
(counted against its time cap).
"""

from __future__ import annotations

import math

import numpy as np

from gemmtune.bench.contenders import (HOST, Contender, _Clblast, _cublas_3m_timer, _cuda_timer, _host_operands,
                                        _HostCall, _numpy_timer, _OpenCL)
from gemmtune.errors import GemmtuneError
from gemmtune.precision import get_precision
from gemmtune.shapes import Shape
from gemmtune.measure.timing import TimingPolicy, enough, gflops, median_ci

# A contender whose calls are shorter is called once unrecorded before each sample: the first call
# after another contender's pays for the switch, 0.1-0.2 ms on the H200 between the OpenCL and CUDA
# contexts (the first OpenCL contender's wall clock above its device time against the second's,
# d and z at 4096^3 and 8192^3), up to 8 % of a 2.5 ms call and under 1 % above 20 ms.
REWARM_MS = 20.0
# The host BLAS's threads spin for a while after its call, taking cores from whatever runs next
# (OpenBLAS: 0.1-0.2 s on the 2-core EPYC; a 1024^3 s call right after numpy's ran at half speed
# on both CPU implementations, 22 ms against 11, until 0.2 s had passed). A contender sampled
# after the host BLAS's (and the host BLAS after an OpenCL contender) is called this long first.
HOST_SETTLE_S = 0.25
BASELINES = ("numpy", "torch", "cupy", "cublas-3m")   # not on OpenCL
NAMED = ("clblast", "3m", "gemm", *BASELINES)


def _measure(contenders: list[Contender], policy: TimingPolicy) -> None:
    active = [c for c in contenders if c.skipped is None]
    for c in active:
        for _ in range(policy.warmup):
            c.run()
    spent = {id(c): 0.0 for c in active}
    previous = None
    while active:
        for c in list(active):
            # The host BLAS's threads spin after its call (HOST_SETTLE_S): a CPU device's
            # contender sampled right after numpy ran at 0.77 of itself at s 2048^3 on PoCL, and at
            # half at 1024^3 after one unrecorded call.
            after_host = previous is not None and (previous.source == HOST) != (c.source == HOST)
            if after_host:
                # Between the host BLAS and an OpenCL contender, either way: the other's threads
                # may still spin. Unrecorded calls until they have stopped, not a sleep, which
                # left the cores cold: a 1024^3 s call after a 0.25 s sleep and one unrecorded
                # call ran at 0.7-0.9 of itself (PoCL and numpy alike).
                settled = 0.0
                while settled < HOST_SETTLE_S * 1e3:
                    settled += c.run()[0]
                spent[id(c)] += settled * 1e-3   # against its time cap: a bench of tiny problems stays short
            elif not c.samples or c.samples[-1][0] < REWARM_MS:
                # An unrecorded call first: the first call after another contender's pays for
                # the switch between them (on one GPU, between the OpenCL and CUDA contexts),
                # which a program calling one library in a loop does not.
                c.run()
            sample = c.run()
            previous = c
            c.samples.append(sample)
            spent[id(c)] += sample[0] * 1e-3
            walls = [s[0] for s in c.samples]
            if enough(walls, spent[id(c)], policy):
                active.remove(c)


def parse_baselines(text: str) -> list[str]:
    """``numpy,torch,config:A=1,B=2;config:...``: config items hold commas themselves, so the
    list splits on ';' and on the known names."""
    items = []
    for part in text.split(";"):
        head, sep, rest = part.partition("config:")
        items += [b.strip() for b in head.split(",") if b.strip()]
        if sep:
            items.append("config:" + rest.strip())
    for item in items:
        if not item.startswith("config:") and item not in NAMED:
            raise GemmtuneError(f"unknown baseline {item!r}: use numpy, gemm, torch, cupy, clblast, 3m, cublas-3m "
                                f"or config:NAME=VALUE,...")
    return items


def bench_shape(queue, shape: Shape, baselines: list[str], db, policy: TimingPolicy, device_info,
                clblast=None) -> list[dict]:
    """Rows of one problem; ``clblast``: the loaded library where the baselines name it."""
    from gemmtune.call.compute import resolve_config
    from gemmtune.space.text import parse_config
    from gemmtune.db.tuned import best_config

    prec = get_precision(shape.precision)
    host = _host_operands(prec, shape, np.random.default_rng())
    tuned = best_config(shape.m, shape.n, shape.k, prec, device=device_info, db=db, trans_a=shape.trans_a,
                        trans_b=shape.trans_b, batch=shape.batch)
    contenders, configs = [Contender("gemmtune", tuned.source)], [None]
    for b in baselines:
        if b.startswith("config:"):
            cfg = resolve_config(parse_config(b[len("config:"):]), device_info, prec)
            contenders.append(Contender(b, "explicit", f"{cfg.kernel} {cfg}"))
            configs.append(cfg)
    if "clblast" in baselines:
        contenders.append(Contender("clblast", "CLBlast", clblast.path))
        configs.append(clblast)
    if "3m" in baselines:
        contenders.append(Contender("3m", "gemmtune 3M"))
        configs.append(None)
    if "gemm" in baselines:
        contenders.append(Contender("gemm", "gemmtune.gemm", "numpy arrays; the configuration above"))
        configs.append(None)
    for c, cfg in zip(contenders, configs):
        try:
            if c.name == "clblast":
                c.run = _Clblast(queue, cfg, prec, shape, host)
            elif c.name == "gemm":
                c.run = _HostCall(device_info.index, prec, shape, host, db)
            elif c.name == "3m":
                if not prec.is_complex or shape.batch > 1:
                    c.skipped = "3m is one product of complex matrices (c, z)"
                    continue
                c.run = _OpenCL(queue, prec, shape, host, db, complex_algorithm="3m")
                op = c.run.operation
                c.detail = f"3 x {op.config.kernel} {op.config}"
            else:
                c.run = _OpenCL(queue, prec, shape, host, db, cfg)
                op = c.run.operation
                c.detail = f"{op.config.kernel} {op.config}"
            c.verified = c.run.check.passed
            if not c.verified:
                c.skipped = f"wrong result (componentwise error {c.run.check.componentwise_error:.3g})"
        except GemmtuneError:
            raise
        except Exception as e:  # noqa: BLE001 - a failing contender is reported, not fatal
            c.skipped = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    for lib in BASELINES:
        if lib in baselines:
            c = Contender(lib, HOST if lib == "numpy" else "cuBLAS")
            try:
                c.run = (_numpy_timer(host, shape) if lib == "numpy" else _cublas_3m_timer(prec, shape)
                         if lib == "cublas-3m" else _cuda_timer(lib, prec, shape))
            except RuntimeError as e:
                c.skipped = str(e)
            contenders.append(c)
    _measure(contenders, policy)
    flops = prec.flops(shape.m, shape.n, shape.k) * shape.batch
    ours = contenders[0].median(0)
    rows = []
    for c in contenders:
        wall = c.median(0)
        low, high = median_ci([s[0] for s in c.samples]) if c.samples else (None, None)
        rows.append({
            "shape": str(shape), "m": shape.m, "n": shape.n, "k": shape.k, "precision": prec.code,
            "trans_a": shape.trans_a, "trans_b": shape.trans_b, "batch": shape.batch,
            "contender": c.name, "source": c.source, "config": c.detail,
            "gflops": gflops(flops, wall) if wall else None,
            "time_ms": wall, "device_ms": c.median(1), "host_ms": c.median(2),
            "ci_low_ms": low, "ci_high_ms": high, "repeats": len(c.samples),
            "gemmtune_ratio": (wall / ours) if (wall and ours) else None,
            "verified": c.verified, "skipped": c.skipped,
        })
    return rows


def run_bench(device, shapes: list[Shape], baselines: list[str], db: str | None, policy: TimingPolicy,
              progress=None, clblast: str | None = None) -> list[dict]:
    """Rows of results, one per (problem, contender); see the module docstring. Each shape
    carries its precision. ``clblast``: the CLBlast library's path (see gemmtune.bench.clblast.load),
    for the baseline of that name."""
    import pyopencl as cl

    from gemmtune.bench import clblast as clblast_lib
    from gemmtune.call.compute import get_device
    from gemmtune.db.store import database_url, probe
    from gemmtune.inputs import check_problem

    if clblast is not None and "clblast" not in baselines:
        raise GemmtuneError(f"--clblast {clblast} names CLBlast's library, but the baselines do not include clblast")
    # A missing library or database fails now, not after the first problem's setup.
    library = clblast_lib.load(clblast) if "clblast" in baselines else None
    probe(database_url(db), create=False)   # bench only reads the database
    dev = get_device(device)
    for shape in shapes:
        check_problem(dev.info, get_precision(shape.precision), shape.m, shape.n, shape.k, batch=shape.batch)
    queue = cl.CommandQueue(dev.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    rows = []
    for i, shape in enumerate(shapes, 1):
        rows += bench_shape(queue, shape, baselines, db, policy, dev.info, library)
        if progress:
            progress(i, len(shapes), shape)
    return rows


def geometric_means(rows: list[dict]) -> dict[str, float]:
    """Per contender other than gemmtune: the geometric mean over the problems of its time over
    gemmtune's (above 1: gemmtune is faster), where both were measured."""
    ratios: dict[str, list[float]] = {}
    for r in rows:
        if r["contender"] != "gemmtune" and r["gemmtune_ratio"]:
            ratios.setdefault(r["contender"], []).append(r["gemmtune_ratio"])
    return {name: math.exp(sum(map(math.log, v)) / len(v)) for name, v in ratios.items()}
