"""Building kernel programs and enqueuing one configured GEMM on an OpenCL queue.

Everything here works in BLAS's column-major convention: C (m x n) <- alpha * op(A) * op(B)
+ beta * C with op in N (none), T (transpose), C (conjugate transpose). ``gemmtune.gemm``
maps numpy's row-major arrays onto it.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict

import numpy as np
import pyopencl as cl

from gemmtune.devices.opencl import compute_units as device_compute_units, has_fp64_matrix, nvidia_compute_capability
from gemmtune.families import COPY_PER_ITEM, FAMILIES, Family
from gemmtune.launch.plan import (A, ALPHA, B, BATCH_OFFSETS, BETA, C, CALL_ARGUMENTS, OFFSET_A, OFFSET_B, OFFSET_C,
                                  Problem, Scratch)
from gemmtune.precision import Precision
from gemmtune.space import Config

BUILD_OPTIONS = ("-cl-mad-enable",)


class BuildError(Exception):
    """The OpenCL compiler rejected a source; ``log`` holds its output."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def normalize_op(op) -> str:
    """False/None/'N' -> 'N', True/'T' -> 'T', 'C'/'H' -> 'C'."""
    if op is None or op is False or (isinstance(op, str) and op.upper() == "N"):
        return "N"
    if op is True or (isinstance(op, str) and op.upper() == "T"):
        return "T"
    if isinstance(op, str) and op.upper() in ("C", "H"):
        return "C"
    raise ValueError(f"bad transpose flag {op!r}: use False, True, 'N', 'T' or 'C'")


def defines(config: Config, prec: Precision, problem: Problem | None = None) -> dict[str, int]:
    """What a build of ``config`` defines: its parameters, the precision, and what the family
    needs to know of the problem (e.g. the direct family's op() of each operand)."""
    extra = FAMILIES[config.kernel].build_defines(config.params, prec, problem or Problem(1, 1, 1))
    return {**config.params, "PRECISION": prec.cl_define, **extra}


def device_defines(device: cl.Device) -> dict[str, int]:
    """What the kernels may use on this device beyond OpenCL C, through inline PTX: ``CP_ASYNC``
    where NVIDIA's cp.async copies are there (compute capability 8.0 and later), ``MMA_F64``
    where mma.sync multiplies 16 x 8 x 8 doubles (9.0 and later; ``DeviceInfo.fp64_matrix``)."""
    cp_async = (nvidia_compute_capability(device) or 0) >= 8
    return {**({"CP_ASYNC": 1} if cp_async else {}), **({"MMA_F64": 1} if has_fp64_matrix(device) else {})}


def build_options(defs: dict[str, int], device: cl.Device | None = None) -> list[str]:
    defs = {**(device_defines(device) if device is not None else {}), "COPY_PER_ITEM": COPY_PER_ITEM, **defs}
    return [*BUILD_OPTIONS, *(f"-D{k}={v}" for k, v in defs.items())]


# Programs by context (its cl_context's address), source and defines. Each entry keeps its context
# too, so that no later context can take over its address while the entry lives: keyed by the
# Python object's id, a context made after another was freed could be handed that one's program,
# and its kernels then failed with INVALID_CONTEXT.
_programs: dict[tuple, tuple[cl.Program, cl.Context]] = {}


def build(context: cl.Context, source: str, defs: dict[str, int], binary: bytes | None = None) -> cl.Program:
    """A built program, cached per context, source and defines for the life of the process.

    With ``binary`` (what ``program_binary`` gave for the same source and defines, built in
    another process), the program is loaded from it instead of compiled; if the driver refuses
    the binary, it is compiled from source after all.
    """
    key = (context.int_ptr, hashlib.sha1(source.encode()).hexdigest(), tuple(sorted(defs.items())))
    program, _ = _programs.get(key, (None, None))
    if program is None:
        options = build_options(defs, context.devices[0])
        with warnings.catch_warnings():
            # Drivers print notes on every build; a failed build's log is in BuildError.
            warnings.simplefilter("ignore", cl.CompilerWarning)
            if binary is not None:
                try:
                    program = cl.Program(context, context.devices, [binary]).build(options=options)
                except cl.Error:
                    program = None
            if program is None:
                try:
                    program = cl.Program(context, source).build(options=options)
                except cl.RuntimeError as e:
                    raise BuildError(f"build failed: {str(e).splitlines()[0]}", str(e)) from None
        if program.get_info(cl.program_info.NUM_KERNELS) == 0:
            # Seen with PoCL 3.0: a program that built once came back from its kernel cache
            # empty (kernels/xgemm_cpu.cl says which); a failed trial, not a missing-kernel crash.
            raise BuildError("build failed: the driver returned a program with no kernels", "")
        _programs[key] = program, context
    return program


def load_binary(context: cl.Context, binary: bytes, defs: dict[str, int]) -> None:
    """Load a program binary as a timing worker will, and drop it. NVIDIA's binaries are PTX,
    which the driver compiles to machine code on every new load (0.10-0.15 s for a large GEMM
    kernel, measured on the H200) and keeps in its on-disk cache (~/.nv/ComputeCache): loaded
    once by a compiler process, the binary then loads from that cache in the timing worker."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        options = build_options(defs, context.devices[0])
        cl.Program(context, context.devices, [binary]).build(options=options)


def program_binary(program: cl.Program) -> bytes:
    """The program's binary for its (single) device: PoCL's own format, PTX on NVIDIA."""
    return program.get_info(cl.program_info.BINARIES)[0]


def work_group_limit(kernel: cl.Kernel, device: cl.Device) -> int:
    """The most work-items per group this kernel, as built, can be launched with.

    What the driver reports (CL_KERNEL_WORK_GROUP_SIZE), except for a kernel built for a declared
    group size (reqd_work_group_size) on NVIDIA: its compiler fits the registers to that size,
    spilling if it must, while the driver reports 256 for every kernel (measured on the H200,
    driver 580: a one-line kernel too), and groups of 512 and 1024 ran and computed right."""
    info = cl.kernel_work_group_info
    reported = kernel.get_work_group_info(info.WORK_GROUP_SIZE, device)
    declared = int(np.prod(kernel.get_work_group_info(info.COMPILE_WORK_GROUP_SIZE, device)))
    if declared and nvidia_compute_capability(device) is not None:
        return max(reported, declared)
    return reported


def check_work_group(kernel: cl.Kernel, name: str, local_size, device: cl.Device) -> None:
    """Refuse a launch larger than the built kernel allows (work_group_limit): drivers that
    check launches say CL_INVALID_WORK_GROUP_SIZE, the others may run it wrongly."""
    if local_size is None:
        return
    items = int(np.prod(local_size))
    limit = work_group_limit(kernel, device)
    if items > limit:
        message = (f"{name} as built runs at most {limit} work-items per group "
                   f"(its registers or local memory), not {items}")
        raise BuildError(message, message)


class Prepared(OrderedDict):
    """What a call prepares once and reuses (operations with their programs and scratch
    buffers, the 3M product's parts), by what it depends on; past ``limit`` entries the least
    recently used is dropped, so a long-running program's memory stays bounded."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def get_or_make(self, key, make):
        found = self.get(key)
        if found is None:
            found = self[key] = make()
            if len(self) > self.limit:
                self.popitem(last=False)
        else:
            self.move_to_end(key)
        return found


class GemmOperation:
    """One configured GEMM of a fixed problem on one queue, ready to enqueue repeatedly.

    It carries out the family's launch plan (gemmtune.launch.plan): the program is built, the scratch
    buffers allocated and each kernel's arguments typed once, so that a call sets them all
    together where its operands or scalars differ from the last call's, and enqueues.
    The operands last bound stay referenced until the next call binds others.
    """

    def __init__(self, queue: cl.CommandQueue, config: Config, source: str, prec: Precision,
                 m: int, n: int, k: int, trans_a="N", trans_b="N", binary: bytes | None = None,
                 compute_units: int | None = None, problem: Problem | None = None, helpers=()):
        self.queue, self.config, self.prec = queue, config, prec
        self.problem = problem or Problem(m, n, k, normalize_op(trans_a), normalize_op(trans_b))
        self.m, self.n, self.k = self.problem.m, self.problem.n, self.problem.k
        self.family: Family = FAMILIES[config.kernel]
        # compute_units: what a split of the work assumes (the device's unless given).
        self.plan = self.family.plan(config.params, prec, self.problem, queue.device,
                                     compute_units or device_compute_units(queue.device))
        self.program = build(queue.context, source, defines(config, prec, self.problem), binary)
        self.scratch = {s.name: _scratch_buffer(queue.context, s) for s in self.plan.scratch}
        # Each kernel's arguments are set together, typed once: pyopencl's set_args with the scalar
        # dtypes declared took 1.5 us for nine arguments where one set_arg each took 35 us, paid on
        # every call on fresh buffers (numpy arrays).
        scalar = {ALPHA: prec.dtype, BETA: prec.dtype, OFFSET_A: np.int32, OFFSET_B: np.int32, OFFSET_C: np.int32}
        self.launches = []   # (kernel, launch, its arguments: a call's by name, the others as they are)
        for launch in self.plan.launches:
            program = (self.program if launch.defines is None else
                       build(queue.context, source, dict(launch.defines), dict(helpers).get(launch.defines)))
            kernel = cl.Kernel(program, launch.kernel)
            check_work_group(kernel, launch.kernel, launch.local_size, queue.device)
            args = tuple(arg if isinstance(arg, str) and arg in CALL_ARGUMENTS else
                         self.scratch[arg] if isinstance(arg, str) else int(arg) for arg in launch.args)
            kernel.set_scalar_arg_dtypes([scalar.get(arg) if isinstance(arg, str) else
                                          np.int32 if isinstance(arg, int) else None for arg in args])
            self.launches.append((kernel, launch, args))
        self.kernel_events = self.plan.kernel_launches
        self.in_order = not queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
        self._bound = None

    def bind(self, a: cl.Buffer, b: cl.Buffer, c: cl.Buffer, alpha, beta, offsets=(0, 0, 0),
             table: cl.Buffer | None = None) -> None:
        """Set the call's arguments on every kernel, unless they are those already set. ``table``:
        a batch's offsets (``Problem.table``), 3 int32 per problem."""
        call = (a, b, c, alpha, beta, *offsets, table)
        if call == self._bound:
            return
        values = {A: a, B: b, C: c, ALPHA: alpha, BETA: beta,   # set_args converts to the declared dtypes
                  OFFSET_A: offsets[0], OFFSET_B: offsets[1], OFFSET_C: offsets[2], BATCH_OFFSETS: table}
        for kernel, _, args in self.launches:
            kernel.set_args(*(values[arg] if isinstance(arg, str) else arg for arg in args))
        self._bound = call

    def launch(self, index: int, wait_for) -> cl.Event:
        kernel, launch, _ = self.launches[index]
        return cl.enqueue_nd_range_kernel(self.queue, kernel, launch.global_size, launch.local_size,
                                          wait_for=wait_for)

    def enqueue(self, a: cl.Buffer, b: cl.Buffer, c: cl.Buffer, alpha=1.0, beta=0.0,
                wait_for=None, offsets=(0, 0, 0), table: cl.Buffer | None = None) -> list[cl.Event]:
        """Enqueue the whole operation; returns its events in order, the last
        ``kernel_events`` of them the GEMM's own kernels (the passes before them). ``offsets``:
        the operands' first elements, for a family that ``takes_views``; ``table``: a batch's
        offsets of each problem, for a plan of ``Problem.table``."""
        self.bind(a, b, c, alpha, beta, offsets, table)
        events = [self.launch(0, wait_for)]
        for i in range(1, len(self.launches)):
            # An in-order queue runs them in order anyway; passing no events is cheaper.
            events.append(self.launch(i, None if self.in_order else events[-1:]))
        return events


def _scratch_buffer(context: cl.Context, scratch: Scratch) -> cl.Buffer:
    if scratch.table is not None:
        return cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=np.array(scratch.table, np.int32))
    return cl.Buffer(context, cl.mem_flags.READ_WRITE, max(1, scratch.nbytes))


def device_time_ms(events: list[cl.Event]) -> float:
    """Device time of one enqueued operation, in ms: the sum of its commands' execution times.

    The span from the first command's start to the last one's end would also count the time
    the host took to enqueue the next command while the previous one ran: 90-220 us per
    2.9 ms SGEMM on an H200 while a search compiled on every core, which ranked
    configurations with a transpose pass below equal ones without it. (In a stream of
    operations that host latency overlaps earlier work; an in-order queue never overlaps the
    commands themselves.)"""
    return sum(e.profile.end - e.profile.start for e in events) * 1e-6
