"""CLBlast's GEMM through its C API (``clblast_c.h``), on the caller's pyopencl queue and buffers.

CLBlast is the OpenCL BLAS that C programs link; ``gemmtune bench --baseline clblast`` measures
it beside gemmtune on the same device. The library is found, in this order, at the path given
(``--clblast``), at ``$GEMMTUNE_CLBLAST``, by ``ctypes.util.find_library("clblast")``, and as
``libclblast.so.1`` (Debian's ``libclblast1`` ships no unversioned name without ``-dev``).

CLBlast compiles its kernels on a device's first call of a precision (kept for the process), so
the first call is slow on a CPU's OpenCL; time only later ones.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

import numpy as np

from gemmtune.errors import GemmtuneError, OperandError, OperandTypeError
from gemmtune.launch.operation import normalize_op
from gemmtune.precision import Precision, get_precision
from gemmtune.measure.verify import check_scalars

ENV = "GEMMTUNE_CLBLAST"
FALLBACK_NAME = "libclblast.so.1"

# CLBlastStatusCode, from clblast_c.h: name and meaning.
STATUS = {
    -3: ("CLBlastOpenCLCompilerNotAvailable", "the device has no OpenCL compiler"),
    -4: ("CLBlastTempBufferAllocFailure", "a temporary buffer could not be allocated"),
    -5: ("CLBlastOpenCLOutOfResources", "the device is out of resources"),
    -6: ("CLBlastOpenCLOutOfHostMemory", "the host is out of memory"),
    -11: ("CLBlastOpenCLBuildProgramFailure", "CLBlast's kernels failed to build on this device"),
    -30: ("CLBlastInvalidValue", "invalid value"),
    -36: ("CLBlastInvalidCommandQueue", "invalid command queue"),
    -38: ("CLBlastInvalidMemObject", "invalid memory object"),
    -42: ("CLBlastInvalidBinary", "invalid program binary"),
    -43: ("CLBlastInvalidBuildOptions", "invalid build options"),
    -44: ("CLBlastInvalidProgram", "invalid program"),
    -45: ("CLBlastInvalidProgramExecutable", "invalid program executable"),
    -46: ("CLBlastInvalidKernelName", "invalid kernel name"),
    -47: ("CLBlastInvalidKernelDefinition", "invalid kernel definition"),
    -48: ("CLBlastInvalidKernel", "invalid kernel"),
    -49: ("CLBlastInvalidArgIndex", "invalid kernel argument index"),
    -50: ("CLBlastInvalidArgValue", "invalid kernel argument value"),
    -51: ("CLBlastInvalidArgSize", "invalid kernel argument size"),
    -52: ("CLBlastInvalidKernelArgs", "invalid kernel arguments"),
    -53: ("CLBlastInvalidLocalNumDimensions", "too many work-item dimensions"),
    -54: ("CLBlastInvalidLocalThreadsTotal", "work-group too large in total"),
    -55: ("CLBlastInvalidLocalThreadsDim", "work-group too large in one dimension"),
    -56: ("CLBlastInvalidGlobalOffset", "invalid global offset"),
    -57: ("CLBlastInvalidEventWaitList", "invalid event wait list"),
    -58: ("CLBlastInvalidEvent", "invalid event"),
    -59: ("CLBlastInvalidOperation", "invalid operation"),
    -61: ("CLBlastInvalidBufferSize", "invalid buffer size"),
    -63: ("CLBlastInvalidGlobalWorkSize", "invalid global work size"),
    -1024: ("CLBlastNotImplemented", "routine or functionality not implemented"),
    -1022: ("CLBlastInvalidMatrixA", "matrix A is not a valid OpenCL buffer"),
    -1021: ("CLBlastInvalidMatrixB", "matrix B is not a valid OpenCL buffer"),
    -1020: ("CLBlastInvalidMatrixC", "matrix C is not a valid OpenCL buffer"),
    -1019: ("CLBlastInvalidVectorX", "vector X is not a valid OpenCL buffer"),
    -1018: ("CLBlastInvalidVectorY", "vector Y is not a valid OpenCL buffer"),
    -1017: ("CLBlastInvalidDimension", "m, n and k must be above zero"),
    -1016: ("CLBlastInvalidLeadDimA", "A's leading dimension is below its rows"),
    -1015: ("CLBlastInvalidLeadDimB", "B's leading dimension is below its rows"),
    -1014: ("CLBlastInvalidLeadDimC", "C's leading dimension is below its rows"),
    -1013: ("CLBlastInvalidIncrementX", "X's increment is zero"),
    -1012: ("CLBlastInvalidIncrementY", "Y's increment is zero"),
    -1011: ("CLBlastInsufficientMemoryA", "A's buffer is too small"),
    -1010: ("CLBlastInsufficientMemoryB", "B's buffer is too small"),
    -1009: ("CLBlastInsufficientMemoryC", "C's buffer is too small"),
    -1008: ("CLBlastInsufficientMemoryX", "X's buffer is too small"),
    -1007: ("CLBlastInsufficientMemoryY", "Y's buffer is too small"),
    -2050: ("CLBlastInsufficientMemoryTemp", "the temporary buffer is too small"),
    -2049: ("CLBlastInvalidBatchCount", "the batch count must be positive"),
    -2048: ("CLBlastInvalidOverrideKernel", "override of parameters for an invalid kernel"),
    -2047: ("CLBlastMissingOverrideParameter", "override parameters missing for the kernel"),
    -2046: ("CLBlastInvalidLocalMemUsage", "not enough local memory on this device"),
    -2045: ("CLBlastNoHalfPrecision", "the device has no half precision"),
    -2044: ("CLBlastNoDoublePrecision", "the device has no double precision"),
    -2043: ("CLBlastInvalidVectorScalar", "the unit-sized vector is not a valid OpenCL buffer"),
    -2042: ("CLBlastInsufficientMemoryScalar", "the unit-sized vector's buffer is too small"),
    -2041: ("CLBlastDatabaseError", "no entry for the device in CLBlast's database"),
    -2040: ("CLBlastUnknownError", "unspecified error"),
    -2039: ("CLBlastUnexpectedError", "unexpected exception"),
}

COL_MAJOR, ROW_MAJOR = 102, 101
TRANSPOSE = {"N": 111, "T": 112, "C": 113}


class ClblastError(GemmtuneError):
    """CLBlast is missing or returned a status other than success."""


def status_text(code: int) -> str:
    name, meaning = STATUS.get(code, ("unknown status", "not listed in clblast_c.h"))
    return f"{name} ({code}): {meaning}"


class _Float2(ctypes.Structure):
    # cl_float2 / cl_double2 by value: two floats share one SSE register on x86-64, two doubles
    # take two, as for this structure.
    _fields_ = [("re", ctypes.c_float), ("im", ctypes.c_float)]


class _Double2(ctypes.Structure):
    _fields_ = [("re", ctypes.c_double), ("im", ctypes.c_double)]


SCALAR = {"s": ctypes.c_float, "d": ctypes.c_double, "c": _Float2, "z": _Double2}


def _scalar(prec: Precision, value):
    """alpha or beta as the routine takes it (verify.check_scalars has checked it)."""
    value = complex(value)
    return SCALAR[prec.code](value.real, value.imag) if prec.is_complex else SCALAR[prec.code](value.real)


class Clblast:
    """One loaded CLBlast library: ``gemm`` enqueues its GEMM of any precision."""

    def __init__(self, path: str, lib: ctypes.CDLL):
        self.path, self.routines = path, {}
        size, mem, pointer = ctypes.c_size_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        for code, s in SCALAR.items():
            fn = getattr(lib, f"CLBlast{code.upper()}gemm")
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, size, size, size, s,
                           mem, size, size, mem, size, size, s, mem, size, size, pointer, pointer]
            fn.restype = ctypes.c_int
            self.routines[code] = fn
            # CLBlastXgemmStridedBatched (CLBlast 1.5 and later): each matrix's stride after its
            # leading dimension, the batch count before the queue
            fn = getattr(lib, f"CLBlast{code.upper()}gemmStridedBatched", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, size, size, size, s,
                               mem, size, size, size, mem, size, size, size, s, mem, size, size, size, size,
                               pointer, pointer]
                fn.restype = ctypes.c_int
                self.routines[f"{code}-batched"] = fn

    def gemm(self, queue, precision, trans_a: str, trans_b: str, m: int, n: int, k: int, alpha, a, lda: int,
             b, ldb: int, beta, c, ldc: int, offsets=(0, 0, 0), row_major: bool = False, batch=None):
        """C = alpha op(A) op(B) + beta C, enqueued on ``queue``; returns the event of CLBlast's
        last command. ``trans_a``/``trans_b`` as for ``gemmtune.gemm`` (N, T, C, or a bool).
        A, B, C are pyopencl Buffers (``offsets``: in elements) or pyopencl Arrays of the
        precision's type (their own offset is added); column-major unless ``row_major``. Bad
        arguments raise OperandError or OperandTypeError before CLBlast sees them; CLBlast's own
        refusals (a leading dimension, a buffer too small) raise ClblastError naming its status.
        ``batch``: (count, stride of A, of B, of C), in elements: CLBlast's strided batched GEMM,
        problem z at z strides past each offset."""
        import pyopencl as cl
        import pyopencl.array as cl_array

        prec = get_precision(precision) if isinstance(precision, str) else precision
        check_scalars(prec, alpha, beta)
        try:
            ops = normalize_op(trans_a), normalize_op(trans_b)
        except ValueError as e:
            raise OperandError(f"CLBlast GEMM: {e}") from None
        if not isinstance(queue, cl.CommandQueue):
            raise OperandTypeError(f"CLBlast GEMM: queue must be a pyopencl CommandQueue, not {type(queue).__name__}")
        sizes = dict(m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc, offset_a=offsets[0], offset_b=offsets[1],
                     offset_c=offsets[2], **dict(zip(("batch", "stride_a", "stride_b", "stride_c"), batch or ())))
        if batch is not None and f"{prec.code}-batched" not in self.routines:
            raise ClblastError(f"{self.path} has no CLBlast{prec.code.upper()}gemmStridedBatched (CLBlast 1.5 and later)")
        for name, value in sizes.items():
            # ctypes would wrap a negative size_t silently into a huge one
            if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or value < 0:
                raise OperandError(f"CLBlast GEMM: {name} must be a whole number >= 0, not {value!r}")
        handles, starts = [], []
        for name, x, off in zip("ABC", (a, b, c), offsets):
            if isinstance(x, cl_array.Array):
                if x.dtype != prec.dtype:
                    raise OperandError(f"CLBlast GEMM ({prec.code}): {name} holds {x.dtype}, not {prec.dtype}")
                if x.offset % prec.bytes:
                    raise OperandError(f"CLBlast GEMM: {name}'s offset of {x.offset} bytes is not whole elements")
                off, x = off + x.offset // prec.bytes, x.base_data
            if not isinstance(x, cl.MemoryObjectHolder):   # a Buffer, or a pool's
                raise OperandTypeError(f"CLBlast GEMM: {name} must be a pyopencl Buffer or Array, "
                                       f"not {type(x).__name__}")
            handles.append(ctypes.c_void_p(x.int_ptr))
            starts.append(off)
        queue_ptr, event_ptr = ctypes.c_void_p(queue.int_ptr), ctypes.c_void_p()
        layout, flags = ROW_MAJOR if row_major else COL_MAJOR, (TRANSPOSE[ops[0]], TRANSPOSE[ops[1]])
        if batch is None:
            status = self.routines[prec.code](
                layout, *flags, m, n, k, _scalar(prec, alpha), handles[0], starts[0], lda, handles[1], starts[1], ldb,
                _scalar(prec, beta), handles[2], starts[2], ldc, ctypes.byref(queue_ptr), ctypes.byref(event_ptr))
        else:
            count, *strides = batch
            status = self.routines[f"{prec.code}-batched"](
                layout, *flags, m, n, k, _scalar(prec, alpha), handles[0], starts[0], lda, strides[0], handles[1],
                starts[1], ldb, strides[1], _scalar(prec, beta), handles[2], starts[2], ldc, strides[2], count,
                ctypes.byref(queue_ptr), ctypes.byref(event_ptr))
        if status:
            what = f"GEMM {m}x{n}x{k}" if batch is None else f"GEMMSTRIDEDBATCHED {batch[0]} x {m}x{n}x{k}"
            raise ClblastError(f"CLBlast {prec.code.upper()}{what} {''.join(ops)}: {status_text(status)}")
        # CLBlast hands over its reference to the event: pyopencl releases it.
        return cl.Event.from_int_ptr(event_ptr.value, retain=False)


def library_path(path: str | None = None) -> str:
    """The library to load: ``path``, else $GEMMTUNE_CLBLAST, else what the loader finds."""
    if path is not None:
        return path
    return os.environ.get(ENV) or ctypes.util.find_library("clblast") or FALLBACK_NAME


@cache
def _load(path: str) -> Clblast:
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ClblastError(f"cannot load CLBlast from {path!r} ({e}); install it (Debian: libclblast1) "
                           f"or name the library with --clblast PATH or ${ENV}") from None
    missing = [f"CLBlast{code.upper()}gemm" for code in SCALAR if not hasattr(lib, f"CLBlast{code.upper()}gemm")]
    if missing:
        raise ClblastError(f"{path!r} is not CLBlast: it has no {', '.join(missing)}")
    return Clblast(path, lib)


def load(path: str | None = None) -> Clblast:
    """The CLBlast library (see the module docstring for where it is looked for); ClblastError,
    naming where it was looked for, when it cannot be loaded."""
    return _load(library_path(path))
