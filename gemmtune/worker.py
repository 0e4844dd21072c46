"""The worker processes' side (OpenCL): a timing worker builds or loads, verifies and times one
job at a time; a compiler builds programs and returns their binaries. Started and watched by
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
from gemmtune.jobs import Built, BuildJob, Job, Outcome, StopAbove
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


def _open(conn, device, parent: int, quiet: bool, cores, check_builds: bool = False):
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


def _jobs(conn):
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


def _worker_main(conn, device: str | None, parent: int, quiet: bool, cores=None) -> None:
    """The timing worker: builds (or loads a binary), verifies and times one job at a time."""
    opened = _open(conn, device, parent, quiet, cores, check_builds=True)
    if opened is None:
        return
    cl, ctx = opened
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    problems: dict = {}
    free = time.perf_counter()   # since when it had nothing to do: what the search made it wait
    for job in _jobs(conn):
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


def _compiler_main(conn, device: str | None, parent: int, quiet: bool, cores=None) -> None:
    """A compiler: builds one program at a time in a context of its own and hands the timing
    worker what spares it the work: the binary, or the driver's cache.

    * NVIDIA loads a program from its binary (PTX) and turns it into machine code on the first
      load, in a fraction of the front end's time, keeping that in its on-disk cache
      (~/.nv/ComputeCache): the compiler loads its binary once, and the timing worker's load of
      it is a cache hit.
    * PoCL (``keeps_source_builds``) makes each kernel's machine code for the work-group size
      of its first launch, then: 0.25-0.3 s of the timing worker's time per candidate on a
      2-core machine, and asked for a binary it first makes a version for any size, which no
      launch uses (0.25-0.35 s more). So there the compiler returns no binary and launches each
      of the problem's kernels over one work-group instead; the timing worker's build from
      source then finds the program and its kernels in PoCL's cache.
    * Other drivers: the binary alone.

    Where the binary carries the build, so do the programs the plan builds apart from the
    candidate (operand preparation, stream-K's fix-up: ``Launch.defines``), each built and loaded
    once per compiler, so that the timing worker never compiles one (``_apart_defines``).
    """
    import hashlib

    opened = _open(conn, device, parent, quiet, cores)
    if opened is None:
        return
    cl, ctx = opened
    from gemmtune.device import keeps_source_builds
    from gemmtune.kernels import BuildError, build, defines, load_binary, program_binary
    from gemmtune.precision import get_precision

    preload = not ctx.devices[0].type & cl.device_type.CPU
    cached = keeps_source_builds(ctx.devices[0])
    queue = cl.CommandQueue(ctx) if cached else None
    apart: dict[tuple, bytes] = {}   # the programs built apart, by defines: built and loaded once
    for job in _jobs(conn):
        t0 = time.perf_counter()
        helpers = ()
        try:
            prec = get_precision(job.precision)
            defs = defines(job.config, prec, job.problem)
            program = build(ctx, job.source, defs)
            if cached:
                _launch_once(cl, queue, job, prec)
                binary, digest = None, hashlib.sha256(repr((job.source, sorted(defs.items()))).encode()).hexdigest()
            else:
                binary = program_binary(program)
                digest = hashlib.sha256(binary).hexdigest()
                wanted = _apart_defines(ctx, job, prec)
                new = {d: program_binary(build(ctx, job.source, dict(d))) for d in wanted if d not in apart}
                apart.update(new)
                helpers = tuple((d, apart[d]) for d in wanted)
                if preload:   # the product's binary, and each program built apart the first time
                    for code, code_defs in ((binary, defs), *((b, dict(d)) for d, b in new.items())):
                        try:
                            load_binary(ctx, code, code_defs)
                        except cl.Error:  # the timing worker will find out for itself, and say why
                            pass
            result = Built("ok", binary, digest, time.perf_counter() - t0, helpers=helpers)
        except BuildError as e:
            result = Built("compile_error", compile_s=time.perf_counter() - t0, detail=e.log[:DETAIL_LIMIT])
        except Exception:  # noqa: BLE001 - the compiler itself broke: one candidate's loss
            result = Built("crash", compile_s=time.perf_counter() - t0, detail=traceback.format_exc()[-DETAIL_LIMIT:])
        conn.send(result)


def _apart_defines(ctx, job: BuildJob, prec) -> tuple[tuple, ...]:
    """The defines of each program of ``job``'s plan built apart from the candidate
    (``Launch.defines``: operand preparation, stream-K's fix-up), in launch order. Their binaries
    go with the candidate, so that the timing worker loads them instead of compiling them. Empty
    where the problem is not known."""
    from gemmtune.families import FAMILIES

    if job.problem is None:
        return ()
    plan = FAMILIES[job.config.kernel].plan(job.config.params, prec, job.problem, ctx.devices[0],
                                            ctx.devices[0].max_compute_units)
    return tuple(dict.fromkeys(launch.defines for launch in plan.launches if launch.defines is not None))


def _launch_once(cl, queue, job: BuildJob, prec) -> None:
    """Each kernel of ``job``'s problem launched over one work-group of its own size, on buffers of
    the problem's sizes (group 0 of the real launch reads and writes only what that launch's
    group 0 does), so that the driver makes its machine code for that size now. A launch the
    driver refuses is left for the timing worker to find and report."""
    from gemmtune.kernels import GemmOperation

    p = job.problem
    if p is None:   # the problem is not known: the timing worker makes the code for its launch
        return
    op = GemmOperation(queue, job.config, job.source, prec, p.m, p.n, p.k, p.trans_a, p.trans_b, problem=p)
    mf = cl.mem_flags
    a, b, c = (cl.Buffer(queue.context, mf.READ_WRITE, max(1, size * prec.bytes))
               for size in (p.m * p.k, p.k * p.n, p.m * p.n))
    op.bind(a, b, c, 1.0, 0.0)
    for kernel, launch, _ in op.launches:
        if launch.local_size is not None:
            try:
                cl.enqueue_nd_range_kernel(queue, kernel, launch.local_size, launch.local_size)
            except cl.Error:
                pass
    queue.finish()

