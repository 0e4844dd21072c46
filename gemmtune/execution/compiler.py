"""The compiler processes' side (OpenCL): each builds one candidate at a time in a context of its
own and hands the timing worker what spares it the work, the binary or the driver's cache.
Started and watched by ``processes``, as the timing worker is (``timing_worker``).
"""

from __future__ import annotations

import hashlib
import time
import traceback

from gemmtune.execution.child import incoming_jobs, open_worker
from gemmtune.execution.messages import DETAIL_LIMIT, BuildJob, Built


def compiler_main(conn, device: str | None, parent: int, quiet: bool, cores=None) -> None:
    """A compiler: builds one program at a time and sends back a ``messages.Built``.

    * NVIDIA loads a program from its binary (PTX) and turns it into machine code on the first
      load, keeping that in its on-disk cache (~/.nv/ComputeCache): the compiler loads its
      binary once, so that the timing worker's load of it is a cache hit. (In the compiler's
      own process that load costs under a millisecond after the build, on an H100 host.)
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
    opened = open_worker(conn, device, parent, quiet, cores)
    if opened is None:
        return
    cl, ctx = opened
    from gemmtune.devices.opencl import keeps_source_builds
    from gemmtune.launch.operation import BuildError, build, defines, load_binary, program_binary
    from gemmtune.precision import get_precision

    cached = keeps_source_builds(ctx.devices[0])
    queue = cl.CommandQueue(ctx) if cached else None
    preload = not ctx.devices[0].type & cl.device_type.CPU
    apart: dict[tuple, bytes] = {}   # the programs built apart, by defines: built and loaded once
    for job in incoming_jobs(conn):
        t0 = time.perf_counter()
        helpers = ()
        try:
            prec = get_precision(job.precision)
            defs = defines(job.config, prec, job.problem)
            if cached:
                build(ctx, job.source, defs)
                _launch_once(cl, queue, job, prec)
                binary, digest = None, hashlib.sha256(repr((job.source, sorted(defs.items()))).encode()).hexdigest()
            else:
                binary = program_binary(build(ctx, job.source, defs))
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
    from gemmtune.devices.opencl import compute_units
    from gemmtune.families import FAMILIES

    if job.problem is None:
        return ()
    plan = FAMILIES[job.config.kernel].plan(job.config.params, prec, job.problem, ctx.devices[0],
                                            compute_units(ctx.devices[0]))
    return tuple(dict.fromkeys(launch.defines for launch in plan.launches if launch.defines is not None))


def _launch_once(cl, queue, job: BuildJob, prec) -> None:
    """Each kernel of ``job``'s problem launched over one work-group of its own size, on buffers of
    the problem's sizes (group 0 of the real launch reads and writes only what that launch's
    group 0 does), so that the driver makes its machine code for that size now. A launch the
    driver refuses is left for the timing worker to find and report."""
    from gemmtune.launch.operation import GemmOperation

    p = job.problem
    if p is None:   # the problem is not known: the timing worker makes the code for its launch
        return
    op = GemmOperation(queue, job.config, job.source, prec, p.m, p.n, p.k, p.trans_a, p.trans_b, problem=p)
    mf = cl.mem_flags
    count = p.batch if p.batched else 1   # a batch's work-item may compute several problems in turn
    a, b, c = (cl.Buffer(queue.context, mf.READ_WRITE, max(1, count * size * prec.bytes))
               for size in (p.m * p.k, p.k * p.n, p.m * p.n))
    op.bind(a, b, c, 1.0, 0.0)
    for kernel, launch, _ in op.launches:
        if launch.local_size is not None:
            try:
                cl.enqueue_nd_range_kernel(queue, kernel, launch.local_size, launch.local_size)
            except cl.Error:
                pass
    queue.finish()
