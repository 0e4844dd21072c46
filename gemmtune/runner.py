"""Trials in an isolated worker process: build, verify and time one configuration at a time.

The worker owns the OpenCL context and keeps it across trials (a context per trial would cost
more than most trials). Real kernels crash: on NVIDIA an out-of-bounds read fails with -9999 and
leaves the context unusable, on PoCL it can kill the process, and some variants never finish.
So the parent sends one job at a time and waits with a deadline; a crash, a hang past the
trial timeout or an OpenCL launch error costs that trial, and the parent starts a fresh worker.

Only the worker imports pyopencl; the parent side of this module is plain Python.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gemmtune.errors import GemmtuneError
from gemmtune.info import DeviceInfo
from gemmtune.space import Config
from gemmtune.timing import Timing, TimingPolicy, converged, median_ci
from gemmtune.verify import Check

STARTUP_TIMEOUT = 120.0   # seconds for a worker to import pyopencl and open its context
DETAIL_LIMIT = 8000       # characters of build log or error text kept per trial
EARLY_STOP_SAMPLES = 6    # the fewest samples whose median has a 95 % interval
BATCH_MS = 1.0            # device time a sample's batch of calls fills, at least (see _time)
MAX_BATCH = 64


@dataclass(frozen=True)
class Job:
    config: Config
    source: str               # kernel source with includes inlined
    precision: str
    m: int
    n: int
    k: int
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    binary: bytes | None = None          # built by a compiler process; None: build here
    stop_above_ms: float | None = None   # stop timing, status "slow", once the time's interval is above this


@dataclass(frozen=True)
class StopAbove:
    """A new early-stop threshold for a timing worker's jobs, the running one and those waiting:
    the search found a faster candidate since they were submitted."""
    ms: float


@dataclass(frozen=True)
class BuildJob:
    config: Config
    source: str
    precision: str


@dataclass(frozen=True)
class Built:
    status: str                       # ok, compile_error or crash (a compiler that fails a job)
    binary: bytes | None = None
    digest: str | None = None         # sha256 of the binary: equal digests, one measurement
    compile_s: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class Outcome:
    status: str                       # ok, compile_error, launch_error, crash, timeout, wrong_result
    timing: Timing | None = None
    check: Check | None = None
    compile_s: float | None = None
    trial_s: float | None = None
    detail: str = ""


# ---------------------------------------------------------------- worker side (OpenCL)

class _Problem:
    """Random operands and their reference, kept per shape for the worker's life: the
    float64 reference of a large product costs more than most trials."""

    def __init__(self, cl, ctx, prec, m, n, k, rng):
        import numpy as np

        from gemmtune.verify import Reference, random_matrix

        # Column-major A (m x k), B (k x n), C (m x n) are, in numpy's row-major terms,
        # arrays of shape (k, m), (n, k) and (n, m), and C's memory equals b @ a.
        self.a = random_matrix(prec, (k, m), rng)
        self.b = random_matrix(prec, (n, k), rng)
        self.reference = Reference.compute(prec, self.b, self.a, None, 1.0, 0.0)
        self.nan = np.full(1, np.nan, dtype=prec.dtype)   # the pattern C is filled with
        self.shape = (n, m)
        mf = cl.mem_flags
        self.a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.a)
        self.b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.b)
        self.c_buf = cl.Buffer(ctx, mf.READ_WRITE, n * m * prec.bytes)


def _trial(cl, queue, problems, job: Job) -> Outcome:
    import numpy as np

    from gemmtune.kernels import BuildError, GemmOperation
    from gemmtune.precision import get_precision
    from gemmtune.verify import compare

    prec = get_precision(job.precision)
    key = (job.precision, job.m, job.n, job.k)
    if key not in problems:
        problems.clear()
        problems[key] = _Problem(cl, queue.context, prec, job.m, job.n, job.k, np.random.default_rng())
    pb = problems[key]

    t0 = time.perf_counter()
    try:
        op = GemmOperation(queue, job.config, job.source, prec, job.m, job.n, job.k, binary=job.binary)
    except BuildError as e:
        return Outcome("compile_error", compile_s=time.perf_counter() - t0, detail=e.log[:DETAIL_LIMIT])
    compile_s = time.perf_counter() - t0

    def run():
        return op.enqueue(pb.a_buf, pb.b_buf, pb.c_buf, 1.0, 0.0)

    # Verify first, on an output poisoned with NaN, so unwritten elements cannot pass. On a
    # device other than the host's CPU the comparison runs on the host (numpy releases the GIL)
    # while the device is timed: at large sizes it costs as much as the timing. A wrong result
    # then discards the timing. On a CPU device it would disturb the timing, so it goes first.
    cl.enqueue_fill_buffer(queue, pb.c_buf, pb.nan, 0, pb.c_buf.size)  # on the device: no host copy
    run()
    result = np.empty(pb.shape, dtype=prec.dtype)
    cl.enqueue_copy(queue, result, pb.c_buf)
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


_STOP_ABOVE: list[float | None] = [None]   # in a timing worker: the latest StopAbove received


def _stop_above(job: Job) -> float | None:
    limits = [ms for ms in (job.stop_above_ms, _STOP_ABOVE[0]) if ms is not None]
    return min(limits) if limits else None


def batch_size(device_ms: float) -> int:
    """Calls per sample: enough back-to-back calls to fill BATCH_MS of device time."""
    return max(1, min(MAX_BATCH, int(BATCH_MS / max(device_ms, 1e-6))))


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
    for _ in range(policy.warmup):
        events = run()
    events[-1].wait()
    batch = batch_size(device_time_ms(events))
    total, kernel, device, spent = [], [], [], 0.0
    while len(total) < policy.max_repeats:
        t0 = time.perf_counter()
        for _ in range(batch):
            events = run()
        events[-1].wait()
        wall = (time.perf_counter() - t0) * 1e3
        total.append(wall / batch)
        device.append(device_time_ms(events))
        kernel.append(device_time_ms(events[-kernel_events:]))
        spent += wall * 1e-3
        if spent >= policy.max_seconds or converged(total, policy):
            break
        limit = _stop_above(job)
        if limit is not None and len(total) >= EARLY_STOP_SAMPLES and median_ci(total)[0] > limit:
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


def _open(conn, device, parent: int, quiet: bool, cores):
    """Common start of every worker: cores, signals, watchdog, device; None if it could not start."""
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
    except GemmtuneError as e:
        conn.send(("error", str(e)))
        return None
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"cannot open device {device}: {e}"))
        return None
    conn.send(("ready", info))
    return cl, ctx


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
                _STOP_ABOVE[0] = job.ms
                continue
            inbox.put(job)
            if job is None:
                return

    threading.Thread(target=read, daemon=True).start()
    while (job := inbox.get()) is not None:
        yield job


def _worker_main(conn, device: str | None, parent: int, quiet: bool, cores=None) -> None:
    """The timing worker: builds (or loads a binary), verifies and times one job at a time."""
    opened = _open(conn, device, parent, quiet, cores)
    if opened is None:
        return
    cl, ctx = opened
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    problems: dict = {}
    for job in _jobs(conn):
        t0 = time.perf_counter()
        try:
            outcome = _trial(cl, queue, problems, job)
        except cl.Error as e:
            outcome = Outcome("launch_error", detail=f"{type(e).__name__}: {e}"[:DETAIL_LIMIT])
        except Exception:  # noqa: BLE001 - any other failure of the trial is reported as a crash
            outcome = Outcome("crash", detail=traceback.format_exc()[-DETAIL_LIMIT:])
        outcome = Outcome(outcome.status, outcome.timing, outcome.check, outcome.compile_s,
                          time.perf_counter() - t0, outcome.detail)
        conn.send(outcome)


def _compiler_main(conn, device: str | None, parent: int, quiet: bool, cores=None) -> None:
    """A compiler: builds one program at a time in a context of its own and returns its binary.

    Binaries, not a shared driver cache, carry the work to the timing worker: both PoCL
    (its own binary format) and NVIDIA (PTX, which the driver turns into machine code in a
    fraction of the front end's time) load a program from a binary, while only PoCL would find
    a source build of another process in its on-disk cache. NVIDIA's driver does cache the
    machine code it makes from a PTX binary on load (~/.nv/ComputeCache), so on a GPU the
    compiler loads its binary once too, and the timing worker's load is a cache hit.
    """
    import hashlib

    opened = _open(conn, device, parent, quiet, cores)
    if opened is None:
        return
    cl, ctx = opened
    from gemmtune.kernels import BuildError, build, defines, load_binary, program_binary
    from gemmtune.precision import get_precision

    preload = not ctx.devices[0].type & cl.device_type.CPU
    for job in _jobs(conn):
        t0 = time.perf_counter()
        try:
            defs = defines(job.config, get_precision(job.precision))
            binary = program_binary(build(ctx, job.source, defs))
            if preload:
                try:
                    load_binary(ctx, binary, defs)
                except cl.Error:  # the timing worker will find out for itself, and say why
                    pass
            result = Built("ok", binary, hashlib.sha256(binary).hexdigest(), time.perf_counter() - t0)
        except BuildError as e:
            result = Built("compile_error", compile_s=time.perf_counter() - t0, detail=e.log[:DETAIL_LIMIT])
        except Exception:  # noqa: BLE001 - the compiler itself broke: one candidate's loss
            result = Built("crash", compile_s=time.perf_counter() - t0, detail=traceback.format_exc()[-DETAIL_LIMIT:])
        conn.send(result)


# ---------------------------------------------------------------- parent side (no OpenCL)

class Worker:
    """One worker process running ``main`` on a device, one job at a time, replaceable at will.

    ``device`` is resolved by the process; bad specs raise GemmtuneError from ``start``.
    The parent waits on ``connection`` (for several workers at once, with
    ``multiprocessing.connection.wait``) and kills and restarts a worker that failed a job.
    """

    def __init__(self, main, device: str, quiet: bool = True, cores: tuple[int, ...] | None = None):
        self.main, self.spec, self.quiet, self.cores = main, device, quiet, cores
        self._ctx = mp.get_context("spawn")
        self.process = None
        self.connection = None
        self.job = None           # the job in flight, with whatever the caller attached
        self.deadline = None      # time.monotonic() by which its answer is due

    def start(self) -> DeviceInfo:
        self.launch()
        return self.ready()

    def launch(self) -> None:
        """Start the process; ``ready`` waits for its device. Several workers launched before
        any is waited for open their devices in parallel."""
        parent_conn, child_conn = self._ctx.Pipe()
        self.process = self._ctx.Process(target=self.main, args=(child_conn, self.spec, os.getpid(), self.quiet, self.cores),
                                         daemon=True, name="gemmtune-worker")
        self.process.start()
        child_conn.close()
        self.connection = parent_conn

    def ready(self) -> DeviceInfo:
        """The device's description once the process has opened it; GemmtuneError if it cannot."""
        parent_conn = self.connection
        if not parent_conn.poll(STARTUP_TIMEOUT):
            self.kill()
            raise GemmtuneError(f"the worker for device {self.spec} did not start within {STARTUP_TIMEOUT:.0f} s")
        try:
            kind, payload = parent_conn.recv()
        except EOFError:
            self.process.join(5)
            code = self.process.exitcode
            self.kill()
            raise GemmtuneError(f"the worker for device {self.spec} died while opening the device "
                                f"(exit code {code})") from None
        if kind == "error":
            self.kill()
            raise GemmtuneError(payload)
        return payload

    @property
    def idle(self) -> bool:
        return self.job is None

    def submit(self, job, timeout: float, tag=None) -> None:
        if self.process is None:
            self.start()
        self.job = (job, tag)
        self.deadline = time.monotonic() + timeout
        self.connection.send(job)

    def receive(self):
        """The answer to the job in flight, or None if the process died (it is restarted)."""
        try:
            answer = self.connection.recv()
        except (EOFError, ConnectionResetError):
            # ConnectionResetError: it died with a job still unread in its pipe
            answer = None
        self.job = self.deadline = None
        return answer

    def death(self) -> str:
        if self.process is None:
            return "no process"
        self.process.join(5)
        code = self.process.exitcode
        return f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(5)
        if self.connection is not None:
            self.connection.close()
        self.process = self.connection = None
        self.job = self.deadline = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        if self.connection is not None and self.process is not None and self.process.is_alive():
            try:
                self.connection.send(None)
                self.process.join(2)
            except (BrokenPipeError, OSError):
                pass
        self.kill()


class Runner:
    """Runs jobs one at a time in a timing worker on one device; survives any failure of one.

    ``device`` is resolved by the worker; bad specs raise GemmtuneError from the constructor.
    A job submitted while another runs waits in the worker (``waiting``) and starts the moment
    that one ends, not when the parent gets round to collecting it; a worker that crashes or
    hangs is replaced and gets the waiting jobs again.
    """

    def __init__(self, device: str | int | None = None, trial_timeout: float = 60.0, quiet: bool = True,
                 wait: bool = True, cores: tuple[int, ...] | None = None):
        """``wait`` False returns at once; call ``ready()`` before using the runner (runners of
        several devices then open them in parallel). ``cores``: the host cores its process (and
        every thread of it, the driver's included) may run on; None: any."""
        from gemmtune.device import device_spec

        self.spec = device_spec(device)
        self.trial_timeout = trial_timeout
        self.worker = Worker(_worker_main, self.spec, quiet, cores)
        self.waiting: deque = deque()   # (job, tag) sent behind the one in flight
        self.device: DeviceInfo | None = None
        self.worker.launch()
        if wait:
            self.ready()

    def ready(self) -> DeviceInfo:
        if self.device is None:
            self.device = self.worker.ready()
        return self.device

    @property
    def jobs(self) -> int:
        """Jobs submitted and not yet collected: the one in flight and those waiting."""
        return (not self.worker.idle) + len(self.waiting)

    def submit(self, job: Job, tag=None) -> None:
        if self.worker.idle:
            self.worker.submit(job, self.trial_timeout, tag)
        else:
            self.waiting.append((job, tag))
            try:
                self.worker.connection.send(job)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the worker died: collect() finds out, and _replace() gives the job to the next

    def collect(self) -> Outcome:
        """The outcome of the job in flight, once ``worker.connection`` is readable or its deadline passed."""
        started = self.worker.deadline - self.trial_timeout
        if not self.worker.connection.poll(0):
            self._replace()
            return Outcome("timeout", trial_s=time.monotonic() - started,
                           detail=f"no result within the trial timeout of {self.trial_timeout:g} s")
        outcome = self.worker.receive()
        if outcome is None:
            reason = self.worker.death()
            self._replace()
            return Outcome("crash", trial_s=time.monotonic() - started, detail=f"worker process died: {reason}")
        if outcome.status in ("launch_error", "crash"):
            self._replace()  # the context may be poisoned: every later call on it could fail
        elif self.waiting:  # the next job started when this one ended
            job, tag = self.waiting.popleft()
            self.worker.job, self.worker.deadline = (job, tag), time.monotonic() + self.trial_timeout
        return outcome

    def stop_above(self, ms: float) -> None:
        """Lower the early-stop threshold of the jobs submitted, running or waiting."""
        if self.jobs:
            try:
                self.worker.connection.send(StopAbove(ms))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the worker died: collect() replaces it, and its jobs keep their own thresholds

    def _replace(self) -> None:
        """A fresh worker, given the jobs that were waiting in the old one."""
        self.worker.restart()
        waiting, self.waiting = self.waiting, deque()
        for job, tag in waiting:
            self.submit(job, tag)

    def run(self, job: Job) -> Outcome:
        """Run one job; every failure comes back as an Outcome with a failure status."""
        self.submit(job)
        self.worker.connection.poll(self.trial_timeout)
        return self.collect()

    def close(self) -> None:
        self.waiting.clear()
        self.worker.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Compilers:
    """A pool of compiler processes on one device; a crash or hang costs one candidate."""

    def __init__(self, device: str, count: int, timeout: float, quiet: bool = True,
                 cores: tuple[int, ...] | None = None):
        self.timeout = timeout
        self.workers = [Worker(_compiler_main, device, quiet, cores) for _ in range(count)]
        for w in self.workers:
            w.launch()
        try:
            for w in self.workers:
                w.ready()
        except GemmtuneError:
            self.close()
            raise

    def idle(self) -> Worker | None:
        return next((w for w in self.workers if w.idle), None)

    @property
    def busy(self) -> list[Worker]:
        return [w for w in self.workers if not w.idle]

    def collect(self, worker: Worker) -> Built:
        if not worker.connection.poll(0):
            worker.restart()
            return Built("timeout", detail=f"no binary within the trial timeout of {self.timeout:g} s")
        built = worker.receive()
        if built is None:
            reason = worker.death()
            worker.restart()
            return Built("crash", detail=f"compiler process died: {reason}")
        if built.status == "crash":
            worker.restart()
        return built

    def close(self) -> None:
        for w in self.workers:
            w.close()
