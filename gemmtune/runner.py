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
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field

from gemmtune.errors import GemmtuneError
from gemmtune.info import DeviceInfo
from gemmtune.space import Config
from gemmtune.timing import Timing, TimingPolicy, converged
from gemmtune.verify import Check

STARTUP_TIMEOUT = 120.0   # seconds for a worker to import pyopencl and open its context
DETAIL_LIMIT = 8000       # characters of build log or error text kept per trial


@dataclass(frozen=True)
class Job:
    config: Config
    source: str               # kernel source with includes inlined
    precision: str
    m: int
    n: int
    k: int
    policy: TimingPolicy = field(default_factory=TimingPolicy)


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
        self.nan = np.full((n, m), np.nan, dtype=prec.dtype)
        mf = cl.mem_flags
        self.a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.a)
        self.b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=self.b)
        self.c_buf = cl.Buffer(ctx, mf.READ_WRITE, self.nan.nbytes)


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
        op = GemmOperation(queue, job.config, job.source, prec, job.m, job.n, job.k)
    except BuildError as e:
        return Outcome("compile_error", compile_s=time.perf_counter() - t0, detail=e.log[:DETAIL_LIMIT])
    compile_s = time.perf_counter() - t0

    def run():
        return op.enqueue(pb.a_buf, pb.b_buf, pb.c_buf, 1.0, 0.0)

    # Verify first, on an output poisoned with NaN, so unwritten elements cannot pass.
    cl.enqueue_copy(queue, pb.c_buf, pb.nan)
    run()
    result = np.empty_like(pb.nan)
    cl.enqueue_copy(queue, result, pb.c_buf)
    check = compare(result, pb.reference, prec)
    if not check.passed:
        return Outcome("wrong_result", check=check, compile_s=compile_s,
                       detail=f"componentwise error {check.componentwise_error:.3g} > tolerance "
                              f"{check.tolerance:.3g}; max relative {check.max_rel_error:.3g}, "
                              f"normwise {check.norm_rel_error:.3g}")

    policy = job.policy
    for _ in range(policy.warmup):
        run()
    queue.finish()
    total, kernel, spent = [], [], 0.0
    while len(total) < policy.max_repeats:
        events = run()
        events[-1].wait()
        whole = (events[-1].profile.end - events[0].profile.start) * 1e-6
        total.append(whole)
        kernel.append((events[-1].profile.end - events[-1].profile.start) * 1e-6)
        spent += whole * 1e-3
        if spent >= policy.max_seconds or converged(total, policy):
            break
    return Outcome("ok", Timing(tuple(total), tuple(kernel)), check, compile_s)


def _watch_parent(parent: int) -> None:
    # A worker whose parent died (kill -9) must not run on, holding the device.
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def _worker_main(conn, device: str | None, parent: int, quiet: bool) -> None:
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
        queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    except GemmtuneError as e:
        conn.send(("error", str(e)))
        return
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"cannot open device {device}: {e}"))
        return
    conn.send(("ready", info))
    problems: dict = {}
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
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


# ---------------------------------------------------------------- parent side (no OpenCL)

class Runner:
    """Runs jobs one at a time in a worker process on one device; survives any failure of one.

    ``device`` is resolved by the worker; bad specs raise GemmtuneError from the constructor.
    """

    def __init__(self, device: str | int | None = None, trial_timeout: float = 60.0, quiet: bool = True):
        from gemmtune.device import device_spec

        self.spec = device_spec(device)
        self.trial_timeout = trial_timeout
        self.quiet = quiet
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._conn = None
        self.device: DeviceInfo = self._start()

    def _start(self) -> DeviceInfo:
        parent_conn, child_conn = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker_main, args=(child_conn, self.spec, os.getpid(), self.quiet),
                                       daemon=True, name="gemmtune-worker")
        self._proc.start()
        child_conn.close()
        self._conn = parent_conn
        if not parent_conn.poll(STARTUP_TIMEOUT):
            self._kill()
            raise GemmtuneError(f"the worker for device {self.spec} did not start within {STARTUP_TIMEOUT:.0f} s")
        try:
            kind, payload = parent_conn.recv()
        except EOFError:
            self._proc.join(5)
            code = self._proc.exitcode
            self._kill()
            raise GemmtuneError(f"the worker for device {self.spec} died while opening the device "
                                f"(exit code {code})") from None
        if kind == "error":
            self._kill()
            raise GemmtuneError(payload)
        return payload

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        if self._proc is not None:
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def _restart(self) -> None:
        self._kill()
        self._start()

    def run(self, job: Job) -> Outcome:
        """Run one job; every failure comes back as an Outcome with a failure status."""
        if self._proc is None:
            self._start()
        t0 = time.perf_counter()
        self._conn.send(job)
        if not self._conn.poll(self.trial_timeout):
            self._restart()
            return Outcome("timeout", trial_s=time.perf_counter() - t0,
                           detail=f"no result within the trial timeout of {self.trial_timeout:g} s")
        try:
            outcome = self._conn.recv()
        except EOFError:
            self._proc.join(5)
            code = self._proc.exitcode
            reason = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            self._restart()
            return Outcome("crash", trial_s=time.perf_counter() - t0, detail=f"worker process died: {reason}")
        if outcome.status in ("launch_error", "crash"):
            self._restart()  # the context may be poisoned: every later call on it could fail
        return outcome

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(2)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
