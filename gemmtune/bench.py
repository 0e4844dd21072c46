"""``gemmtune bench``: the tuned configuration against baselines, in one process and one run.

Column-major C (m x n) = A (m x k) B (k x n), no transposes, for each size. Contenders:

* ``gemmtune``: the configuration ``best_config`` gives for the size (tuned, nearest or default);
* ``config:NAME=VALUE,...``: any explicit configuration;
* ``numpy``: the host BLAS behind numpy (wall-clock time of ``a @ b``);
* ``torch`` / ``cupy``: cuBLAS on a CUDA device, TF32 off, timed with CUDA events; skipped,
  with the reason, when the package or a CUDA device is missing.

OpenCL contenders are timed with profiling events over the whole operation, as in search, and
each is first verified on its output poisoned with NaN (a random sample of 64 columns of C is
checked against numpy in double precision, since the full reference of a large product would
cost more than the benchmark). Contenders are sampled in turns, one launch each per round, so
that a clock drifting during the run affects all of them alike; each stops when the 95 %
interval of its median is within 2 % of it, or at the caps of the timing policy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from gemmtune.errors import GemmtuneError
from gemmtune.precision import Precision
from gemmtune.space import Config
from gemmtune.timing import TimingPolicy, converged, gflops, median_ci

CHECK_COLUMNS = 64


@dataclass
class Contender:
    name: str
    source: str = ""                       # tuned / nearest / default / explicit / host / cuBLAS
    detail: str = ""                       # configuration, or why it was skipped
    samples_ms: list[float] = field(default_factory=list)
    skipped: str | None = None
    verified: bool | None = None
    run: object = None                     # callable -> one sample in ms

    @property
    def median_ms(self) -> float | None:
        return float(np.median(self.samples_ms)) if self.samples_ms else None


class _OpenCL:
    """One configuration on an OpenCL queue, with its operands and a sampled check."""

    def __init__(self, queue, config: Config, prec: Precision, m, n, k, host):
        import pyopencl as cl

        from gemmtune.kernels import GemmOperation, device_time_ms
        from gemmtune.space import load_space
        from gemmtune.verify import compare

        self.cl = cl
        self.device_time_ms = device_time_ms
        self.queue = queue
        self.op = GemmOperation(queue, config, load_space().family(config.kernel).source, prec, m, n, k)
        a, b, cols, ref = host
        mf = cl.mem_flags
        ctx = queue.context
        self.a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        self.b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
        nan = np.full((n, m), np.nan, dtype=prec.dtype)
        self.c = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=nan)
        self.op.enqueue(self.a, self.b, self.c)
        cl.enqueue_copy(queue, nan, self.c)
        self.check = compare(nan[cols], ref, prec)

    def __call__(self) -> float:
        events = self.op.enqueue(self.a, self.b, self.c)
        events[-1].wait()
        return self.device_time_ms(events)


def _cuda_timer(lib: str, prec: Precision, m, n, k):
    """A sampler of cuBLAS through torch or cupy, or raise RuntimeError saying why not."""
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
        # Row-major (n x k) @ (k x m) is column-major (m x k) @ (k x n) without transposes.
        a = torch.randn(k, m, dtype=dtype, device="cuda")
        b = torch.randn(n, k, dtype=dtype, device="cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def run() -> float:
            start.record()
            torch.matmul(b, a)
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        return run
    try:
        import cupy as cp
    except ImportError:
        raise RuntimeError("cupy is not installed") from None
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - cupy raises its own error types without a CUDA driver
        raise RuntimeError("cupy sees no CUDA device") from None
    rng = cp.random.default_rng()
    a = rng.standard_normal((k, m)).astype(prec.dtype)
    b = rng.standard_normal((n, k)).astype(prec.dtype)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def run() -> float:
        start.record()
        cp.matmul(b, a)
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end)
    return run


def _numpy_timer(host):
    a, b, _, _ = host

    def run() -> float:
        t0 = time.perf_counter()
        np.matmul(b, a)
        return (time.perf_counter() - t0) * 1e3
    return run


def _measure(contenders: list[Contender], policy: TimingPolicy) -> None:
    active = [c for c in contenders if c.skipped is None]
    for c in active:
        for _ in range(policy.warmup):
            c.run()
    spent = {id(c): 0.0 for c in active}
    while active:
        for c in list(active):
            t = c.run()
            c.samples_ms.append(t)
            spent[id(c)] += t * 1e-3
            if (len(c.samples_ms) >= policy.max_repeats or spent[id(c)] >= policy.max_seconds
                    or converged(c.samples_ms, policy)):
                active.remove(c)


def run_bench(device, prec: Precision, sizes: list[int], baselines: list[str], db: str | None,
              policy: TimingPolicy, progress=None) -> list[dict]:
    """Rows of results, one per (size, contender); see the module docstring."""
    import pyopencl as cl

    from gemmtune.compute import get_device, resolve_config
    from gemmtune.tuned import best_config
    from gemmtune.verify import Reference, random_matrix

    from gemmtune.inputs import check_problem

    from gemmtune.store import database_url, probe

    probe(database_url(db))  # an unusable database fails now, not after the first size's setup
    dev = get_device(device)
    for size in sizes:
        check_problem(dev.info, prec, size, size, size)
    queue = cl.CommandQueue(dev.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    explicit = []
    for b in baselines:
        if b.startswith("config:"):
            from gemmtune.cli import parse_config
            explicit.append((b, resolve_config(parse_config(b[len("config:"):]), dev.info, prec)))
        elif b not in ("numpy", "torch", "cupy"):
            raise GemmtuneError(f"unknown baseline {b!r}: use numpy, torch, cupy or config:NAME=VALUE,...")
    rows = []
    rng = np.random.default_rng()
    for size in sizes:
        m = n = k = size
        a = random_matrix(prec, (k, m), rng)   # column-major m x k
        b = random_matrix(prec, (n, k), rng)   # column-major k x n
        cols = np.sort(rng.choice(n, size=min(CHECK_COLUMNS, n), replace=False))
        host = (a, b, cols, Reference.compute(prec, b[cols], a, None, 1.0, 0.0))
        tuned = best_config(m, n, k, prec, device=dev.info, db=db)
        contenders = [Contender("gemmtune", tuned.source, f"{tuned.kernel} {tuned.config}")]
        contenders += [Contender(name, "explicit", f"{cfg.kernel} {cfg}") for name, cfg in explicit]
        configs = [tuned.config] + [cfg for _, cfg in explicit]
        for c, cfg in zip(contenders, configs):
            try:
                c.run = _OpenCL(queue, cfg, prec, m, n, k, host)
                c.verified = c.run.check.passed
                if not c.verified:
                    c.skipped = f"wrong result (componentwise error {c.run.check.componentwise_error:.3g})"
            except Exception as e:  # noqa: BLE001 - a failing contender is reported, not fatal
                c.skipped = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        for lib in ("numpy", "torch", "cupy"):
            if lib not in baselines:
                continue
            c = Contender(lib, "host BLAS" if lib == "numpy" else "cuBLAS")
            try:
                c.run = _numpy_timer(host) if lib == "numpy" else _cuda_timer(lib, prec, m, n, k)
            except RuntimeError as e:
                c.skipped = str(e)
            contenders.append(c)
        _measure(contenders, policy)
        flops = prec.flops(m, n, k)
        ours = contenders[0].median_ms
        for c in contenders:
            med = c.median_ms
            low, high = median_ci(c.samples_ms) if c.samples_ms else (None, None)
            rows.append({
                "size": size, "contender": c.name, "source": c.source, "config": c.detail,
                "gflops": gflops(flops, med) if med else None,
                "time_ms": med, "ci_low_ms": low, "ci_high_ms": high, "repeats": len(c.samples_ms),
                "gemmtune_ratio": (med / ours) if (med and ours) else None,
                "verified": c.verified, "skipped": c.skipped,
            })
        if progress:
            progress(size)
    return rows
