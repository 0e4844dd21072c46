"""The timing worker (OpenCL): it builds or loads, verifies and times one job at a time. It
starts as every worker process does (``child``); the compilers are ``compiler``. Started and
watched by ``processes``, which is why a crash or a hang here costs one trial, never the search.
"""

from __future__ import annotations

import math
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from gemmtune.execution.child import incoming_jobs, open_worker
from gemmtune.execution.messages import DETAIL_LIMIT, Job, Outcome, StopAbove
from gemmtune.measure.timing import MIN_SAMPLES, Timing, enough, median_ci

BATCH_MS = 1.0            # device time a sample's batch of calls fills, at least (see _time)
MAX_BATCH = 64
# A batch of problems (Job.batch) is compared with numpy whole up to this many multiply-adds; a
# larger one in CHECKED problems: the first, the last and others drawn at random, while every
# element of every problem must still be written (no NaN left of the poisoned output).
CHECK_ALL = 1 << 28
CHECKED = 16


def checked_problems(batch: int, m: int, n: int, k: int, rng):
    """The problems of a batch compared with numpy: all, or the first, the last and random others."""
    import numpy as np

    if batch * m * n * k <= CHECK_ALL or batch <= CHECKED:
        return np.arange(batch)
    inner = rng.choice(np.arange(1, batch - 1), CHECKED - 2, replace=False)
    return np.unique(np.concatenate(([0, batch - 1], inner)))


def batch_reference(prec, a, b, trans_a: str, trans_b: str):
    """The reference of stacks of column-major problems, each stored as numpy's transpose (as one
    problem's operands are below): C^T = (op(A) op(B))^T per problem, in double precision."""
    import numpy as np

    from gemmtune.measure.verify import Reference

    def t(x):
        return np.swapaxes(x, -1, -2)

    ref = Reference.compute(prec, t(a), t(b), None, 1.0, 0.0, trans_a, trans_b)
    return Reference(np.ascontiguousarray(t(ref.value)), np.ascontiguousarray(t(ref.scale)), ref.k)


class _Problem:
    """Random operands and their reference, kept per shape for the worker's life: the
    float64 reference of a large product costs more than most trials."""

    def __init__(self, cl, queue, prec, m, n, k, trans_a, trans_b, rng, batch: int = 1):
        from gemmtune.measure.verify import random_matrix

        # Column-major operands as stored (A m x k, or k x m under op T or C; B likewise) are, in
        # numpy's row-major terms, their transposes; C's memory is the n x m transpose of C. A
        # batch stacks its problems, one after another.
        lead = (batch,) if batch > 1 else ()
        self.a = random_matrix(prec, (*lead, *((k, m) if trans_a == "N" else (m, k))), rng)
        self.b = random_matrix(prec, (*lead, *((n, k) if trans_b == "N" else (k, n))), rng)
        self.checked = checked_problems(batch, m, n, k, rng) if batch > 1 else None
        pick = (lambda x: x) if self.checked is None else (lambda x: x[self.checked])
        self.reference = batch_reference(prec, pick(self.a), pick(self.b), trans_a, trans_b)
        self.shape = (*lead, n, m)
        mf, ctx = cl.mem_flags, queue.context
        self.a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.a)
        self.b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.b)
        self.c_buf = cl.Buffer(ctx, mf.READ_WRITE, batch * n * m * prec.bytes)
        # Each result is read back into host memory the driver allocated and keeps mapped (page-
        # locked on a GPU), reused by every trial of the shape: read into fresh numpy memory, a z
        # 2048^2 result took 33 ms (2 GB/s) on the H200's busy host, a third of the trial.
        self.result = None
        try:
            self.c_host = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, batch * n * m * prec.bytes)
            self.result, _ = cl.enqueue_map_buffer(queue, self.c_host, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                                   self.shape, prec.dtype)
        except cl.Error:   # a driver that will not map so much: each trial reads into numpy memory
            self.c_host = None

    def compare(self, result, prec):
        return check_batch_result(result, self.reference, self.checked, prec)


def check_batch_result(result, reference, checked, prec):
    """A result's check against the reference of its ``checked`` problems (None: one problem, or
    a batch compared whole), failed too where any element of any problem is left NaN."""
    from dataclasses import replace

    import numpy as np

    from gemmtune.measure.verify import compare

    if checked is None or len(checked) == result.shape[0]:
        return compare(result, reference, prec)
    check = compare(result[checked], reference, prec)
    unwritten = not np.isfinite(result).all()
    return replace(check, passed=False, componentwise_error=float("nan")) if unwritten else check


def _trial(cl, queue, problems, job: Job) -> Outcome:
    import numpy as np

    from gemmtune.launch.operation import BuildError, GemmOperation
    from gemmtune.precision import get_precision
    from gemmtune.shapes import packed_problem

    prec = get_precision(job.precision)
    key = job.problem_key
    if key not in problems:
        problems.clear()
        problems[key] = _Problem(cl, queue, prec, job.m, job.n, job.k, job.trans_a, job.trans_b,
                                 np.random.default_rng(), job.batch)
    pb = problems[key]

    t0 = time.perf_counter()
    try:
        op = GemmOperation(queue, job.config, job.source, prec, job.m, job.n, job.k, job.trans_a, job.trans_b,
                           binary=job.binary, helpers=job.helpers,
                           problem=packed_problem(job.m, job.n, job.k, job.trans_a, job.trans_b, job.batch))
    except BuildError as e:
        return Outcome("compile_error", compile_s=time.perf_counter() - t0, detail=e.log[:DETAIL_LIMIT])
    compile_s = time.perf_counter() - t0

    def run():
        return op.enqueue(pb.a_buf, pb.b_buf, pb.c_buf, 1.0, 0.0)

    # Verify first, on an output poisoned with NaN, so unwritten elements cannot pass. On a
    # device other than the host's CPU the comparison runs on the host (numpy releases the GIL)
    # while the device is timed: at large sizes it costs as much as the timing. A wrong result
    # then discards the timing. On a CPU device it would disturb the timing, so it goes first.
    cl.enqueue_fill_buffer(queue, pb.c_buf, prec.nan, 0, pb.c_buf.size)  # on the device: no host copy
    run()
    result = pb.result if pb.result is not None else np.empty(pb.shape, dtype=prec.dtype)
    cl.enqueue_copy(queue, result, pb.c_buf)   # the last trial's comparison of it has ended
    checking = _CHECKER.submit(pb.compare, result, prec)
    timed = None
    if queue.device.type & cl.device_type.CPU:
        checking.result()
    try:
        if not checking.done() or checking.result().passed:
            timed = _time(cl, queue, run, job, op.kernel_events)
    finally:
        check = checking.result()
    if not check.passed:
        return Outcome("wrong_result", check=check, compile_s=compile_s,
                       detail=f"componentwise error {check.componentwise_error:.3g} > tolerance "
                              f"{check.tolerance:.3g}; max relative {check.max_rel_error:.3g}, "
                              f"normwise {check.norm_rel_error:.3g}")
    status, timing, detail = timed
    return Outcome(status, timing, check, compile_s, detail=detail)


_CHECKER = ThreadPoolExecutor(max_workers=1)


_STOP_ABOVE: list[StopAbove | None] = [None]   # in a timing worker: the latest StopAbove received


def _stop_above(job: Job) -> float | None:
    latest = _STOP_ABOVE[0]
    later = latest.ms if latest is not None and latest.problem_key == job.problem_key else None
    limits = [ms for ms in (job.stop_above_ms, later) if ms is not None]
    return min(limits) if limits else None


def batch_size(device_ms: float, call_ms: float = 0.0, cap_s: float = math.inf) -> int:
    """Calls per sample: enough back-to-back calls to fill BATCH_MS of device time, but few
    enough that MIN_SAMPLES samples of calls costing ``call_ms`` each fit the time cap."""
    fit = cap_s * 1e3 / (MIN_SAMPLES * call_ms) if call_ms > 0 else math.inf
    return max(1, int(min(MAX_BATCH, BATCH_MS / max(device_ms, 1e-6), fit)))


def _time(cl, queue, run, job: Job, kernel_events: int = 1) -> tuple[str, Timing, str]:
    """Warm up, then time until the interval is tight, the time cap is spent, or (early stop)
    the candidate is surely slower than ``job.stop_above_ms`` or a later StopAbove.

    A sample is what a caller pays per call: the wall-clock time from enqueuing a batch of
    back-to-back calls of the whole operation to its end, divided by the calls. A small
    problem's call costs whichever is longer of the host's enqueue and the device's work, plus
    the gaps between launches, which device time alone would leave out; a large problem's
    batch is one call, and its wait adds little to the device time. The device time of the
    last call's kernels is kept beside it."""
    from gemmtune.launch.operation import device_time_ms

    policy = job.policy
    for _ in range(max(1, policy.warmup)):   # the last warm call sizes the batch
        t0 = time.perf_counter()
        events = run()
        events[-1].wait()
        call_ms = (time.perf_counter() - t0) * 1e3
    batch = batch_size(device_time_ms(events), call_ms, policy.max_seconds)
    total, kernel, device, spent = [], [], [], 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(batch):
            events = run()
        events[-1].wait()
        wall = (time.perf_counter() - t0) * 1e3
        total.append(wall / batch)
        device.append(device_time_ms(events))
        kernel.append(device_time_ms(events[-kernel_events:]))
        spent += wall * 1e-3
        if enough(total, spent, policy):
            break
        limit = _stop_above(job)
        if limit is not None and len(total) >= MIN_SAMPLES and median_ci(total)[0] > limit:
            return ("slow", Timing(tuple(total), tuple(kernel), tuple(device)),
                    f"stopped after {len(total)} samples: time interval above {limit:.4g} ms")
    return "ok", Timing(tuple(total), tuple(kernel), tuple(device)), ""


def worker_main(conn, device: str | None, parent: int, quiet: bool, cores=None) -> None:
    """The timing worker: builds (or loads a binary), verifies and times one job at a time."""
    opened = open_worker(conn, device, parent, quiet, cores, check_builds=True)
    if opened is None:
        return
    cl, ctx = opened
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    problems: dict = {}
    free = time.perf_counter()   # since when it had nothing to do: what the search made it wait
    for job in incoming_jobs(conn, _STOP_ABOVE):
        t0 = time.perf_counter()
        try:
            outcome = _trial(cl, queue, problems, job)
        except cl.Error as e:
            outcome = Outcome("launch_error", detail=f"{type(e).__name__}: {e}"[:DETAIL_LIMIT])
        except Exception:  # noqa: BLE001 - any other failure of the trial is reported as a crash
            outcome = Outcome("crash", detail=traceback.format_exc()[-DETAIL_LIMIT:])
        done = time.perf_counter()
        outcome = Outcome(outcome.status, outcome.timing, outcome.check, outcome.compile_s,
                          done - t0, outcome.detail, idle_s=t0 - free)
        free = done
        conn.send(outcome)
