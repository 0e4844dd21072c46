"""What every worker process does (the timing worker's and the compilers'): bound to the
parent's life, pinned to its cores, the device opened and a one-line kernel built, then its jobs
read off the pipe in order. ``processes`` starts them; ``timing_worker`` and ``compiler`` are
what they run.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import sys
import threading
import time

from gemmtune.errors import GemmtuneError
from gemmtune.execution.messages import StopAbove

PR_SET_PDEATHSIG = 1      # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """Have Linux kill this child the moment its parent ends (prctl's PR_SET_PDEATHSIG), and end it
    now if the parent ended already: every process a search starts (timing worker, compiler,
    proposer, counter) goes with it when it is killed outright. A counter of a search killed with
    SIGKILL was found counting 55 minutes later. Linux sends the signal when the thread that
    started the child ends: a search starts its children from the thread it runs in."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


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

        from gemmtune.devices.opencl import open_device

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
    from gemmtune.launch.operation import BuildError, build

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


def incoming_jobs(conn, stop_above: list | None = None):
    """The jobs, in order. A thread takes each off the pipe as it comes, so that the parent can
    queue the next job while this one runs without blocking on a full pipe (a job carries a
    program binary, larger than a pipe's buffer). The latest ``StopAbove`` goes into ``stop_above[0]``
    rather than the queue: it applies to the job in flight."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def read():
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                job = None
            if isinstance(job, StopAbove):
                if stop_above is not None:
                    stop_above[0] = job
                continue
            inbox.put(job)
            if job is None:
                return

    threading.Thread(target=read, daemon=True).start()
    while (job := inbox.get()) is not None:
        yield job
