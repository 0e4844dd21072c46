"""The contenders of ``gemmtune bench``: how each library is called on a problem and one call of
it is timed (wall clock, device time, host time), and the operands they all verify against."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from gemmtune.precision import Precision
from gemmtune.shapes import Shape

CHECK_ROWS = 64                            # rows of C^T checked against numpy, per sampled problem
HOST = "host BLAS"                         # the source of the host's BLAS (numpy)


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

        from gemmtune.call.compute import Gemm
        from gemmtune.launch.operation import device_time_ms
        from gemmtune.measure.verify import compare

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


class _HostCall:
    """``gemmtune.gemm`` on the host's numpy arrays, as numpy is called: the operands' way to the
    device and the result's back are in its time (none where the device computes in the host's
    memory, gemmtune/call/host.py). Its device time is not known apart: all three are the wall clock."""

    def __init__(self, device: int, prec: Precision, shape: Shape, host, db):
        from gemmtune.call.compute import gemm
        from gemmtune.call.host import poisoned
        from gemmtune.measure.verify import compare

        x, y, rows, ref = host
        self.call = lambda: gemm(x, y, trans_a=shape.trans_b, trans_b=shape.trans_a, device=device, db=db)
        with poisoned():   # checked on a result that starts as NaN; timed as a caller runs it
            self.check = compare(self.call()[rows], ref, prec)

    def __call__(self) -> tuple[float, float, float]:
        return _host_sample(self.call)


class _Clblast:
    """CLBlast's GEMM of the problem itself: the row-major X and Y are column-major B and A (ld:
    their row length), and the row-major n x m C is column-major m x n with ld m."""

    def __init__(self, queue, lib, prec: Precision, shape: Shape, host):
        import pyopencl.array as cla

        from gemmtune.measure.verify import compare

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
    from gemmtune.bench.cublas3m import Gemm3M

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


def _host_sample(call) -> tuple[float, float, float]:
    """One call of a host library, whose device time is not known apart: all three are its wall clock."""
    t0 = time.perf_counter()
    call()
    t = (time.perf_counter() - t0) * 1e3
    return t, t, t


def _numpy_timer(host, shape: Shape):
    x, y = _op(host[0], shape.trans_b), _op(host[1], shape.trans_a)
    return lambda: _host_sample(lambda: np.matmul(x, y))


def _host_operands(prec: Precision, shape: Shape, rng):
    """Row-major X (op(X) = op(B)^T, n x k) and Y (op(Y) = op(A)^T, k x m), a batch of each where the
    shape has one; the index of C^T's sampled rows (of up to 8 sampled problems), their reference."""
    from gemmtune.measure.verify import Reference, random_matrix

    m, n, k = shape.m, shape.n, shape.k
    x = random_matrix(prec, (*shape.lead, *((n, k) if shape.trans_b == "N" else (k, n))), rng)
    y = random_matrix(prec, (*shape.lead, *((k, m) if shape.trans_a == "N" else (m, k))), rng)
    rows = np.sort(rng.choice(n, size=min(CHECK_ROWS, n), replace=False))
    problems = np.sort(rng.choice(shape.batch, size=min(8, shape.batch), replace=False))
    pick, take = (rows, ...) if shape.batch == 1 else ((problems[:, None], rows[None, :]), problems)
    ref = Reference.compute(prec, np.ascontiguousarray(_op(x, shape.trans_b)[pick]), _op(y, shape.trans_a)[take],
                            None, 1.0, 0.0)
    return x, y, pick, ref
