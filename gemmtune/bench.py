"""``gemmtune bench``: the tuned configuration against baselines, as a caller pays for it.

Each problem is BLAS's (column-major C is m x n, op() of A and B as given; see gemmtune.shapes),
a batch of them at once where the shape says (``batch``: one batched call of each contender, 3-D
arrays; CLBlast's strided batched GEMM, numpy's and torch's matmul on 3-D arrays). Contenders:

* ``gemmtune``: ``gemmtune.Gemm`` as a program calls it, with the configuration ``best_config``
  gives for the problem (tuned, nearest or default);
* ``config:NAME=VALUE,...``: ``Gemm`` held to an explicit configuration;
* ``numpy``: the host BLAS behind numpy (``a @ b``);
* ``clblast``: CLBlast's GEMM through its C API (``gemmtune.clblast``), on the same OpenCL queue,
  with buffers of its own; an error when the library cannot be loaded (the baseline was asked for);
* ``torch`` / ``cupy``: cuBLAS on a CUDA device (TF32 off) through ``matmul`` on transposed
  views where op() asks for them; skipped, with the reason, when the package or a CUDA device
  is missing.
* ``3m`` (c and z): ``Gemm`` with ``complex_algorithm="3m"``, three real products
  (``gemmtune.complex3m``); ``cublas-3m``: cuBLAS's ``cublasCgemm3m`` / ``cublasZgemm3m`` on
  torch's tensors (``gemmtune.cublas3m``). Their GFLOP/s count 8 real flops per complex
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
policy. A contender whose calls take under 20 ms is called once, unrecorded, before each sample.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from gemmtune.errors import GemmtuneError
from gemmtune.precision import Precision, get_precision
from gemmtune.shapes import Shape
from gemmtune.timing import TimingPolicy, enough, gflops, median_ci

CHECK_ROWS = 64
# A contender whose calls are shorter is called once unrecorded before each sample: the first call
# after another contender's pays for the switch, 0.1-0.2 ms on the H200 between the OpenCL and CUDA
# contexts (the first OpenCL contender's wall clock above its device time against the second's,
# d and z at 4096^3 and 8192^3), up to 8 % of a 2.5 ms call and under 1 % above 20 ms.
REWARM_MS = 20.0
HOST = "host BLAS"                         # the source of the host's BLAS (numpy)
BASELINES = ("numpy", "torch", "cupy", "cublas-3m")   # not on OpenCL
NAMED = ("clblast", "3m", *BASELINES)


@dataclass
class Contender:
    name: str
    source: str = ""                       # tuned / nearest / default / explicit / host / cuBLAS
    detail: str = ""                       # configuration, or why it was skipped
    samples: list[tuple[float, float, float]] = field(default_factory=list)   # (wall, device, host) ms
    skipped: str | None = None
    verified: bool | None = None
    run: object = None                     # callable -> one sample

    def median(self, i: int) -> float | None:
        return float(np.median([s[i] for s in self.samples])) if self.samples else None


def _op(x, flag: str):
    """op() of the last two dimensions as a view, for any array type with ``swapaxes`` and ``conj``."""
    return x if flag == "N" else x.swapaxes(-1, -2) if flag == "T" else x.conj().swapaxes(-1, -2)


class _OpenCL:
    """``Gemm`` on row-major device arrays: C^T (n x m) = op(B)^T op(A)^T is the problem."""

    def __init__(self, queue, prec: Precision, shape: Shape, host, db, config=None, complex_algorithm="standard"):
        import pyopencl.array as cla

        from gemmtune.compute import Gemm
        from gemmtune.kernels import device_time_ms
        from gemmtune.verify import compare

        self.queue, self.device_time_ms = queue, device_time_ms
        x, y, rows, ref = host
        self.gemm = Gemm(queue, prec, db=db, config=config, complex_algorithm=complex_algorithm)
        self.x, self.y = cla.to_device(queue, x), cla.to_device(queue, y)
        self.c = cla.to_device(queue, np.full((*shape.lead, shape.n, shape.m), prec.nan))
        self.flags = dict(trans_a=shape.trans_b, trans_b=shape.trans_a)
        self.gemm(self.x, self.y, self.c, **self.flags)
        self.operation = self.gemm.last_operation
        self.check = compare(self.c.get()[rows], ref, prec)

    def __call__(self) -> tuple[float, float, float]:
        t0 = time.perf_counter()
        self.gemm(self.x, self.y, self.c, **self.flags)
        t1 = time.perf_counter()
        self.queue.finish()
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3, self.device_time_ms(self.gemm.last_events), (t1 - t0) * 1e3


class _Clblast:
    """CLBlast's GEMM of the problem itself: the row-major X and Y are column-major B and A (ld:
    their row length), and the row-major n x m C is column-major m x n with ld m."""

    def __init__(self, queue, lib, prec: Precision, shape: Shape, host):
        import pyopencl.array as cla

        from gemmtune.verify import compare

        x, y, rows, ref = host
        self.queue, self.lib = queue, lib
        b, a = cla.to_device(queue, x), cla.to_device(queue, y)
        self.c = cla.to_device(queue, np.full((*shape.lead, shape.n, shape.m), prec.nan))
        self.args = (prec, shape.trans_a, shape.trans_b, shape.m, shape.n, shape.k, 1.0, a, y.shape[-1],
                     b, x.shape[-1], 0.0, self.c, shape.m)
        self.batch = {"batch": (shape.batch, y[0].size, x[0].size, shape.m * shape.n)} if shape.batch > 1 else {}
        self.lib.gemm(queue, *self.args, **self.batch).wait()   # CLBlast builds on a precision's first call
        self.check = compare(self.c.get()[rows], ref, prec)

    def __call__(self) -> tuple[float, float, float]:
        import pyopencl as cl

        before = cl.enqueue_marker(self.queue)
        t0 = time.perf_counter()
        last = self.lib.gemm(self.queue, *self.args, **self.batch)
        t1 = time.perf_counter()
        self.queue.finish()
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3, (last.profile.end - before.profile.end) * 1e-6, (t1 - t0) * 1e3


def _cuda_timer(lib: str, prec: Precision, shape: Shape):
    """A sampler of cuBLAS through torch or cupy, or raise RuntimeError saying why not."""
    m, n, k = shape.m, shape.n, shape.k
    x_shape = (*shape.lead, *((n, k) if shape.trans_b == "N" else (k, n)))
    y_shape = (*shape.lead, *((k, m) if shape.trans_a == "N" else (m, k)))
    if lib == "torch":
        try:
            import torch
        except ImportError:
            raise RuntimeError("torch is not installed") from None
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        dtype = {"s": torch.float32, "d": torch.float64, "c": torch.complex64, "z": torch.complex128}[prec.code]
        x = _op(torch.randn(*x_shape, dtype=dtype, device="cuda"), shape.trans_b)
        y = _op(torch.randn(*y_shape, dtype=dtype, device="cuda"), shape.trans_a)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sync, matmul = torch.cuda.synchronize, torch.matmul
        elapsed = start.elapsed_time
    else:
        try:
            import cupy as cp
        except ImportError:
            raise RuntimeError("cupy is not installed") from None
        try:
            cp.cuda.runtime.getDeviceCount()
        except Exception:  # noqa: BLE001 - cupy raises its own error types without a CUDA driver
            raise RuntimeError("cupy sees no CUDA device") from None
        rng = cp.random.default_rng()
        x = _op(rng.standard_normal(x_shape).astype(prec.dtype), shape.trans_b)
        y = _op(rng.standard_normal(y_shape).astype(prec.dtype), shape.trans_a)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        sync, matmul = cp.cuda.Device().synchronize, cp.matmul

        def elapsed(stop):
            return cp.cuda.get_elapsed_time(start, stop)

    def run() -> tuple[float, float, float]:
        t0 = time.perf_counter()
        start.record()
        matmul(x, y)
        end.record()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3, elapsed(end), (t1 - t0) * 1e3
    return run


def _cublas_3m_timer(prec: Precision, shape: Shape):
    """A sampler of cuBLAS's own 3M product, or RuntimeError saying why not."""
    if not prec.is_complex or shape.batch > 1:
        raise RuntimeError("cuBLAS's 3m is one product of complex matrices (c, z)")
    try:
        import torch
    except ImportError:
        raise RuntimeError("torch is not installed") from None
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    from gemmtune.cublas3m import Gemm3M

    gemm = Gemm3M(prec.code)
    dtype = torch.complex64 if prec.code == "c" else torch.complex128
    m, n, k = shape.m, shape.n, shape.k
    # Column-major A (m x k, or k x m under op) and B, as tensors whose memory is that matrix.
    a_rows, a_cols = (k, m) if shape.trans_a == "N" else (m, k)
    b_rows, b_cols = (n, k) if shape.trans_b == "N" else (k, n)
    a = torch.randn(a_rows, a_cols, dtype=dtype, device="cuda")
    b = torch.randn(b_rows, b_cols, dtype=dtype, device="cuda")
    c = torch.empty(n, m, dtype=dtype, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def run() -> tuple[float, float, float]:
        t0 = time.perf_counter()
        start.record()
        gemm(a, a_cols, b, b_cols, c, m, m, n, k, shape.trans_a, shape.trans_b)
        end.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3, start.elapsed_time(end), (t1 - t0) * 1e3
    return run


def _numpy_timer(host, shape: Shape):
    x, y = _op(host[0], shape.trans_b), _op(host[1], shape.trans_a)

    def run() -> tuple[float, float, float]:
        t0 = time.perf_counter()
        np.matmul(x, y)
        t = (time.perf_counter() - t0) * 1e3
        return t, t, t
    return run


def _measure(contenders: list[Contender], policy: TimingPolicy) -> None:
    active = [c for c in contenders if c.skipped is None]
    for c in active:
        for _ in range(policy.warmup):
            c.run()
    spent = {id(c): 0.0 for c in active}
    previous = None
    while active:
        for c in list(active):
            # The host BLAS's threads spin for a while after its call (OpenBLAS: about 0.1 s),
            # taking the cores from whatever runs next: a CPU device's contender sampled right
            # after numpy ran at 0.77 of itself at s 2048^3 on PoCL.
            after_host = previous is not None and (previous.source == HOST) != (c.source == HOST)
            if not c.samples or c.samples[-1][0] < REWARM_MS or after_host:
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
            raise GemmtuneError(f"unknown baseline {item!r}: use numpy, torch, cupy, clblast, 3m, cublas-3m "
                                f"or config:NAME=VALUE,...")
    return items


def _host_operands(prec: Precision, shape: Shape, rng):
    """Row-major X (op(X) = op(B)^T, n x k) and Y (op(Y) = op(A)^T, k x m), a batch of each where the
    shape has one; the index of C^T's sampled rows (of up to 8 sampled problems), their reference."""
    from gemmtune.verify import Reference, random_matrix

    m, n, k = shape.m, shape.n, shape.k
    x = random_matrix(prec, (*shape.lead, *((n, k) if shape.trans_b == "N" else (k, n))), rng)
    y = random_matrix(prec, (*shape.lead, *((k, m) if shape.trans_a == "N" else (m, k))), rng)
    rows = np.sort(rng.choice(n, size=min(CHECK_ROWS, n), replace=False))
    problems = np.sort(rng.choice(shape.batch, size=min(8, shape.batch), replace=False))
    pick, take = (rows, ...) if shape.batch == 1 else ((problems[:, None], rows[None, :]), problems)
    ref = Reference.compute(prec, np.ascontiguousarray(_op(x, shape.trans_b)[pick]), _op(y, shape.trans_a)[take],
                            None, 1.0, 0.0)
    return x, y, pick, ref


def bench_shape(queue, shape: Shape, baselines: list[str], db, policy: TimingPolicy, device_info,
                clblast=None) -> list[dict]:
    """Rows of one problem; ``clblast``: the loaded library where the baselines name it."""
    from gemmtune.compute import resolve_config
    from gemmtune.config_text import parse_config
    from gemmtune.tuned import best_config

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
    for c, cfg in zip(contenders, configs):
        try:
            if c.name == "clblast":
                c.run = _Clblast(queue, cfg, prec, shape, host)
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
    carries its precision. ``clblast``: the CLBlast library's path (see gemmtune.clblast.load),
    for the baseline of that name."""
    import pyopencl as cl

    from gemmtune import clblast as clblast_lib
    from gemmtune.batched import check_batch
    from gemmtune.compute import get_device
    from gemmtune.db.store import database_url, probe
    from gemmtune.inputs import check_problem

    if clblast is not None and "clblast" not in baselines:
        raise GemmtuneError(f"--clblast {clblast} names CLBlast's library, but the baselines do not include clblast")
    # A missing library or database fails now, not after the first problem's setup.
    library = clblast_lib.load(clblast) if "clblast" in baselines else None
    probe(database_url(db), create=False)   # bench only reads the database
    dev = get_device(device)
    for shape in shapes:
        check_problem(dev.info, get_precision(shape.precision), shape.m, shape.n, shape.k)
        check_batch(dev.info, get_precision(shape.precision), shape)
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
