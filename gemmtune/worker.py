"""The timing worker's side (OpenCL): it builds or loads, verifies and times one job at a time,
and what every worker process does to start (``open_worker``) and to read its jobs
(``incoming_jobs``); the compilers are ``gemmtune.compiler``. Started and watched by
gemmtune.runner, which is why a crash or a hang here costs one trial, never the search.
"""

from __future__ import annotations

import math
import os
import queue
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from gemmtune.errors import GemmtuneError
from gemmtune.jobs import Job, Outcome, StopAbove
from gemmtune.timing import MIN_SAMPLES, Timing, enough, median_ci

DETAIL_LIMIT = 8000       # characters of build log or error text kept per trial
BATCH_MS = 1.0            # device time a sample's batch of calls fills, at least (see _time)
MAX_BATCH = 64




class _Problem:
    """Random operands and their reference, kept per shape for the worker's life: the
    float64 reference of a large product costs more than most trials."""

    def __init__(self, cl, queue, prec, m, n, k, trans_a, trans_b, rng):
        import numpy as np

        from gemmtune.verify import Reference, random_matrix

        # Column-major operands as stored (A m x k, or k x m under op T or C; B likewise) are, in
        # numpy's row-major terms, their transposes; C's memory is the n x m transpose of C.
        self.a = random_matrix(prec, (k, m) if trans_a == "N" else (m, k), rng)
        self.b = random_matrix(prec, (n, k) if trans_b == "N" else (k, n), rng)
        ref = Reference.compute(prec, self.a.T, self.b.T, None, 1.0, 0.0, trans_a, trans_b)
        self.reference = Reference(np.ascontiguousarray(ref.value.T), np.ascontiguousarray(ref.scale.T), ref.k)
        self.shape = (n, m)
        mf, ctx = cl.mem_flags, queue.context
        self.a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.a)
        self.b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.b)
        self.c_buf = cl.Buffer(ctx, mf.READ_WRITE, n * m * prec.bytes)
        # Each result is read back into host memory the driver allocated and keeps mapped (page-
        # locked on a GPU), reused by every trial of the shape: read into fresh numpy memory, a z
        # 2048^2 result took 33 ms (2 GB/s) on the H200's busy host, a third of the trial.
        self.result = None
        try:
            self.c_host = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, n * m * prec.bytes)
            self.result, _ = cl.enqueue_map_buffer(queue, self.c_host, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                                   self.shape, prec.dtype)
        except cl.Error:   # a driver that will not map so much: each trial reads into numpy memory
            self.c_host = None


def _trial(cl, queue, problems, job: Job) -> Outcome:
    import numpy as np

    from gemmtune.kernels import BuildError, GemmOperation
    from gemmtune.precision import get_precision
    from gemmtune.verify import compare

    prec = get_precision(job.precision)
    key = job.problem_key
    if key not in problems:
        problems.clear()
        problems[key] = _Problem(cl, queue, prec, job.m, job.n, job.k, job.trans_a, job.trans_b,
                                 np.random.default_rng())
    pb = problems[key]

    t0 = time.perf_counter()
    try:
        op = GemmOperation(queue, job.config, job.source, prec, job.m, job.n, job.k, job.trans_a, job.trans_b,
                           binary=job.binary, helpers=job.helpers)
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
    checking = _CHECKER.submit(compare, result, pb.reference, prec)
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
    from gemmtune.kernels import device_time_ms

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


def _watch_parent(parent: int) -> None:
    # A worker whose parent died (kill -9) must not run on, holding the device.
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def _pin(cores) -> None:
    # Threads started before this (numpy's BLAS pool, at import) keep their own affinity: each
    # is set by its thread id, which Linux lists under /proc/self/task.
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


def open_worker(conn, device, parent: int, quiet: bool, cores, check_builds: bool = False):
    """Common start of every worker: cores, signals, watchdog, device; None if it could not start.
    ``check_builds``: a one-line kernel is built first (the timing worker's: it starts before the
    compilers, so they need not)."""
    if cores:  # first, so that every thread started below (the driver's too) inherits them
        _pin(cores)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if quiet:
        # Drivers print build diagnostics on stderr; each trial's own log is kept in its row.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        import pyopencl as cl

        from gemmtune.device import open_device

        info, dev = open_device(device)
        ctx = cl.Context([dev])
        if check_builds:
            _check_builds(ctx, info)
    except GemmtuneError as e:
        conn.send(("error", str(e)))
        return None
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"cannot open device {device}: {e}"))
        return None
    conn.send(("ready", info))
    return cl, ctx


PROBE_SOURCE = "__kernel void gemmtune_probe(__global float* x) { x[0] = 1.0f; }"


def _check_builds(ctx, info) -> None:
    """GemmtuneError where the device's compiler builds not even a one-line kernel: every trial
    would fail alike, and the search would record hundreds of compile errors and find nothing."""
    from gemmtune.kernels import BuildError, build

    try:
        build(ctx, PROBE_SOURCE, {})
    except BuildError as e:
        raise GemmtuneError(cannot_build(info.index, info.name, e.log)) from None


def cannot_build(index: int, name: str, log: str) -> str:
    """What to say of a device whose compiler fails a one-line kernel with ``log``."""
    noise = ("clBuildProgram failed", "Build on ", "(options:")
    reason = next((line.strip() for line in log.splitlines() if line.strip() and not line.startswith(noise)),
                  "the build failed")[:200]
    text = f"device {index} ({name}) cannot build an OpenCL program: {reason}"
    if "unknown target CPU" in log:
        text += ("; this PoCL's LLVM does not know the processor: install the distribution's PoCL "
                 "(apt-get install pocl-opencl-icd on Debian) and use its device (gemmtune devices lists them)")
    return text


def incoming_jobs(conn):
    """The jobs, in order. A thread takes each off the pipe as it comes, so that the parent can
    queue the next job while this one runs without blocking on a full pipe (a job carries a
    program binary, larger than a pipe's buffer)."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def read():
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                job = None
            if isinstance(job, StopAbove):
                _STOP_ABOVE[0] = job
                continue
            inbox.put(job)
            if job is None:
                return

    threading.Thread(target=read, daemon=True).start()
    while (job := inbox.get()) is not None:
        yield job


def worker_main(conn, device: str | None, parent: int, quiet: bool, cores=None) -> None:
    """The timing worker: builds (or loads a binary), verifies and times one job at a time."""
    opened = open_worker(conn, device, parent, quiet, cores, check_builds=True)
    if opened is None:
        return
    cl, ctx = opened
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    problems: dict = {}
    free = time.perf_counter()   # since when it had nothing to do: what the search made it wait
    for job in incoming_jobs(conn):
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
