"""Trials in an isolated worker process: build, verify and time one configuration at a time.

The worker owns the OpenCL context and keeps it across trials (a context per trial would cost
more than most trials). Real kernels crash: on NVIDIA an out-of-bounds read fails with -9999 and
leaves the context unusable, on PoCL it can kill the process, and some variants never finish.
So the parent sends one job at a time and waits with a deadline; a crash, a hang past the
trial timeout or an OpenCL launch error costs that trial, and the parent starts a fresh worker.

This module is the parent side, plain Python; ``timing_worker`` and ``compiler`` are what runs in
the processes (the only part that imports pyopencl), ``child`` how each starts, and ``messages``
what goes between them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque

from gemmtune.errors import GemmtuneError
from gemmtune.execution.child import die_with_parent
from gemmtune.execution.compiler import compiler_main
from gemmtune.execution.messages import Built, Job, Outcome, StopAbove
from gemmtune.execution.timing_worker import worker_main
from gemmtune.devices.info import DeviceInfo
from gemmtune.inputs import check_jobs

STARTUP_TIMEOUT = 120.0   # seconds for a worker to import pyopencl and open its context


def _child(main, conn, device, parent, *args) -> None:
    """A worker process's start: bound to its parent's life, then ``main``."""
    die_with_parent(parent)
    main(conn, device, parent, *args)

# ---------------------------------------------------------------- parent side (no OpenCL)

class WorkerProcess:
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
        self.process = self._ctx.Process(target=_child, daemon=True, name="gemmtune-worker",
                                         args=(self.main, child_conn, self.spec, os.getpid(), self.quiet, self.cores))
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
        from gemmtune.devices.opencl import device_spec

        self.spec = device_spec(device)
        self.trial_timeout = trial_timeout
        self.worker = WorkerProcess(worker_main, self.spec, quiet, cores)
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

    def stop_above(self, ms: float, problem_key: tuple) -> None:
        """Lower the early-stop threshold of the jobs of that problem submitted, running or waiting."""
        if self.jobs:
            try:
                self.worker.connection.send(StopAbove(ms, problem_key))
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
        check_jobs(count)
        self.timeout = timeout
        self.workers = [WorkerProcess(compiler_main, device, quiet, cores) for _ in range(count)]
        for w in self.workers:
            w.launch()
        try:
            for w in self.workers:
                w.ready()
        except GemmtuneError:
            self.close()
            raise

    def idle(self) -> WorkerProcess | None:
        return next((w for w in self.workers if w.idle), None)

    @property
    def busy(self) -> list[WorkerProcess]:
        return [w for w in self.workers if not w.idle]

    def collect(self, worker: WorkerProcess) -> Built:
        if not worker.connection.poll(0):
            worker.restart()
            return Built("timeout", detail=f"no build within the trial timeout of {self.timeout:g} s")
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
