"""Building kernel programs and enqueuing one configured GEMM on an OpenCL queue.

Everything here works in BLAS's column-major convention: C (m x n) <- alpha * op(A) * op(B)
+ beta * C with op in N (none), T (transpose), C (conjugate transpose). ``gemmtune.gemm``
maps numpy's row-major arrays onto it.
"""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np
import pyopencl as cl

from gemmtune.device import has_fp64_matrix, nvidia_compute_capability
from gemmtune.families import FAMILIES, Family, fits_work_group
from gemmtune.precision import Precision
from gemmtune.space import Config

BUILD_OPTIONS = ("-cl-mad-enable",)
# pad_copy's work-group: the first of these the device takes (32 down a column; on an H200 the
# first copied 4096^2 floats in 38.0 us, the second in 45.7), and the elements of a row each of its
# work-items moves, a work-group's height of columns apart.
COPY_TILES = ((32, 8), (32, 2))
COPY_PER_ITEM = 4


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


def defines(config: Config, prec: Precision) -> dict[str, int]:
    return {**config.params, "PRECISION": prec.cl_define}


def device_defines(device: cl.Device) -> dict[str, int]:
    """What the kernels may use on this device beyond OpenCL C, through inline PTX: ``CP_ASYNC``
    where NVIDIA's cp.async copies are there (compute capability 8.0 and later), ``MMA_F64``
    where mma.sync multiplies 16 x 8 x 8 doubles (9.0 and later; ``DeviceInfo.fp64_matrix``)."""
    cp_async = (nvidia_compute_capability(device) or 0) >= 8
    return {**({"CP_ASYNC": 1} if cp_async else {}), **({"MMA_F64": 1} if has_fp64_matrix(device) else {})}


def build_options(defs: dict[str, int], device: cl.Device | None = None) -> list[str]:
    defs = {**(device_defines(device) if device is not None else {}), "COPY_PER_ITEM": COPY_PER_ITEM, **defs}
    return [*BUILD_OPTIONS, *(f"-D{k}={v}" for k, v in defs.items())]


_programs: dict[tuple, cl.Program] = {}


def build(context: cl.Context, source: str, defs: dict[str, int], binary: bytes | None = None) -> cl.Program:
    """A built program, cached per context, source and defines for the life of the process.

    With ``binary`` (what ``program_binary`` gave for the same source and defines, built in
    another process), the program is loaded from it instead of compiled; if the driver refuses
    the binary, it is compiled from source after all.
    """
    key = (id(context), hashlib.sha1(source.encode()).hexdigest(), tuple(sorted(defs.items())))
    program = _programs.get(key)
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
        _programs[key] = program
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


def copy_tile(device) -> tuple[int, int]:
    """pad_copy's work-group on ``device``: the first of COPY_TILES within its limits (the last
    if none is)."""
    return next((t for t in COPY_TILES if fits_work_group(*t, device)), COPY_TILES[-1])


def _roundup(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


class GemmOperation:
    """One configured GEMM of a fixed shape on one queue, ready to enqueue repeatedly.

    Operands that are not already in the layout the main kernel reads (A as Mp x Kp, B as
    Np x Kp, column-major, zero-padded to tile multiples) go through pad.cl first; the scratch
    buffers for that are allocated once here.
    """

    def __init__(self, queue: cl.CommandQueue, config: Config, source: str, prec: Precision,
                 m: int, n: int, k: int, trans_a="N", trans_b="N", binary: bytes | None = None,
                 compute_units: int | None = None):
        self.queue, self.config, self.prec = queue, config, prec
        self.m, self.n, self.k = m, n, k
        self.trans_a, self.trans_b = normalize_op(trans_a), normalize_op(trans_b)
        self.family: Family = FAMILIES[config.kernel]
        p = config.params
        self.mp, self.np, self.kp = self.family.padded_shape(p, m, n, k)
        self.program = build(queue.context, source, defines(config, prec), binary)
        self.main = cl.Kernel(self.program, self.family.kernel_name)
        self.pad_copy = cl.Kernel(self.program, "pad_copy")
        self.pad_transpose = cl.Kernel(self.program, "pad_transpose")
        self.transpose_tile = (p["TRANSPOSEX"], p["TRANSPOSEY"], p["TRANSPOSEW"])
        self.copy_tile = copy_tile(queue.device)
        item = prec.bytes
        # A must be Mp x Kp; it is usable as given only untransposed and already that shape.
        self.a_direct = self.trans_a == "N" and (self.mp, self.kp) == (m, k)
        # B must be Np x Kp, i.e. op(B) transposed: given as such when trans_b == "T"; or, for
        # kernels that read it k-fastest, Kp x Np: given as such when trans_b == "N".
        self.b_k_fast = self.family.b_k_fast(p)
        self.b_direct = self.trans_b == ("N" if self.b_k_fast else "T") and (self.np, self.kp) == (n, k)
        mf = cl.mem_flags.READ_WRITE
        ctx = queue.context
        self.a_scratch = None if self.a_direct else cl.Buffer(ctx, mf, self.mp * self.kp * item)
        self.b_scratch = None if self.b_direct else cl.Buffer(ctx, mf, self.np * self.kp * item)
        # compute_units: what the split of work-groups assumes (the device's unless given).
        self.split = self.family.split(p, self.mp, self.np, self.kp, compute_units or queue.device.max_compute_units)
        self.workspace = ()
        self.fixup = None
        if self.family.workspace:
            split = self.split
            self.work = cl.Buffer(ctx, mf, max(item, self.family.workspace_bytes(p, prec, split)))
            pieces = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                               hostbuf=np.array(split.pieces if split and split.pieces else [(0, 0, 0, -1)], np.int32))
            self.workspace = (np.int32(split.first if split else 0), pieces, self.work)
            if split and split.fixups:
                self.fixup = cl.Kernel(self.program, "xgemm_fixup")
                fixups = np.array([(*f, 0) for f in split.fixups], np.int32)
                self.fixups = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=fixups)
                # a work-item per fixup_width elements of each split tile
                per_tile = p["MWG"] * p["NWG"] // self.family.fixup_width(p)
                self.fixup_sizes = (len(split.fixups) * per_tile,), (math.gcd(per_tile, 256),)
        # The trailing events of enqueue that are the GEMM itself: the main kernel, and the
        # kernel that adds up the tiles it computed in parts.
        self.kernel_events = 1 + (self.fixup is not None)

    def _prepare(self, src, transpose: bool, conj: bool, rows: int, cols: int,
                 rows_p: int, cols_p: int, dst, wait_for) -> cl.Event:
        """dst (rows_p x cols_p, column-major) <- src (rows x cols), zero-padded and conjugated
        if asked; with ``transpose``, src is stored cols x rows and dst gets its transpose."""
        i32 = np.int32
        if not transpose:
            # A fixed work-group (the kernel guards the edges): with local size left to the driver,
            # PoCL compiles a new work-group function for every new shape.
            tile = self.copy_tile
            gsize = (_roundup(rows_p, tile[0]), _roundup(-(-cols_p // COPY_PER_ITEM), tile[1]))
            return self.pad_copy(self.queue, gsize, tile, i32(rows), i32(cols), i32(rows),
                                 i32(rows_p), i32(cols_p), i32(conj), src, dst, wait_for=wait_for)
        tx, ty, tw = self.transpose_tile   # tiles of ty * tw input columns, tw per work-item
        gsize = (_roundup(cols_p, tx), _roundup(rows_p, ty * tw) // tw)
        return self.pad_transpose(self.queue, gsize, (tx, ty), i32(cols), i32(rows), i32(cols),
                                  i32(cols_p), i32(rows_p), i32(conj), src, dst, wait_for=wait_for)

    def enqueue(self, a: cl.Buffer, b: cl.Buffer, c: cl.Buffer, alpha=1.0, beta=0.0,
                wait_for=None) -> list[cl.Event]:
        """Enqueue the whole operation; returns its events in order, the last
        ``kernel_events`` of them the GEMM's own kernels (the passes before them)."""
        events = []
        lda, ldb = self.m, (self.k if self.b_k_fast else self.n)
        if not self.a_direct:
            events.append(self._prepare(a, self.trans_a != "N", self.trans_a == "C", self.m, self.k,
                                        self.mp, self.kp, self.a_scratch, wait_for))
            a, lda = self.a_scratch, self.mp
        if self.b_direct:
            pass
        elif self.b_k_fast:
            # The kernel reads op(B) as it is (k x n): B given transposed needs a transpose back.
            events.append(self._prepare(b, self.trans_b != "N", self.trans_b == "C", self.k, self.n,
                                        self.kp, self.np, self.b_scratch, wait_for))
            b, ldb = self.b_scratch, self.kp
        else:
            # The kernel reads op(B) transposed (n x k): B given untransposed needs a transpose.
            events.append(self._prepare(b, self.trans_b == "N", self.trans_b == "C", self.n, self.k,
                                        self.np, self.kp, self.b_scratch, wait_for))
            b, ldb = self.b_scratch, self.np
        i32 = np.int32
        dtype = self.prec.dtype.type
        p = self.config.params
        events.append(self.main(self.queue, self.family.global_size(p, self.mp, self.np, self.split),
                                self.family.local_size(p), i32(self.m), i32(self.n), i32(self.kp),
                                dtype(alpha), dtype(beta), a, i32(lda), b, i32(ldb), c, i32(self.m),
                                *self.workspace, wait_for=events or wait_for))
        if self.fixup is not None:
            events.append(self.fixup(self.queue, *self.fixup_sizes, i32(self.m), i32(self.n), dtype(alpha),
                                     dtype(beta), c, i32(self.m), self.fixups, self.work,
                                     wait_for=events[-1:]))
        return events


def device_time_ms(events: list[cl.Event]) -> float:
    """Device time of one enqueued operation, in ms: the sum of its commands' execution times.

    The span from the first command's start to the last one's end would also count the time
    the host took to enqueue the next command while the previous one ran: 90-220 us per
    2.9 ms SGEMM on an H200 while a search compiled on every core, which ranked
    configurations with a transpose pass below equal ones without it. (In a stream of
    operations that host latency overlaps earlier work; an in-order queue never overlaps the
    commands themselves.)"""
    return sum(e.profile.end - e.profile.start for e in events) * 1e-6
