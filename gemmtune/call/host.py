"""numpy arrays as a call's buffers: in place where the device computes in the host's memory
(a CPU, an integrated GPU), copied where it has memory of its own.

On a CPU device a copy is pure overhead: with the operands copied in and the result copied back,
an s call at 1024³ took 14.5 ms on PoCL and 18.1 on Intel's runtime, whose copies also fault
fresh pages in; in place, 11.5 and 11.6 (docs/performance.md). In place, the buffers are built
over the arrays' own memory (CL_MEM_USE_HOST_PTR). Drivers compute there without a copy only at an address of
the device's base alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN: 128 bytes on both): Intel's runtime
copies a misaligned array, as numpy's (16 bytes past a page) usually are. So an operand's buffer
starts at the aligned address at or below its first element, still in the array's page (the
alignment divides the page size): bytes before the array are in the buffer, never read, and the
kernels take the element offset of the operand's first element, as for a view. The result is an
aligned array of our own, read back by mapping its buffer, which copies nothing either.

A fresh result starts uninitialised, as numpy's do: where beta is 0 the kernels write every
element without reading it. Filling it with NaN first (``poisoned``) makes an element a kernel
leaves unwritten show; ``verify_config`` and the tests do that, a call does not pay for it: on a
batch of 10,000 16³ problems the fill, which also takes the fresh pages' faults on one thread,
made the call 1.4-2.1x slower on PoCL and Intel's runtime (docs/batched.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import mmap

import numpy as np
import pyopencl as cl

from gemmtune.precision import Precision

_mf = cl.mem_flags
_POISONED = contextvars.ContextVar("gemmtune_poisoned", default=False)


@contextlib.contextmanager
def poisoned(on: bool = True):
    """Within the block (of this thread or task), a call's fresh result starts as NaN, so that an
    element the kernel leaves unwritten shows instead of what the memory held."""
    token = _POISONED.set(on)
    try:
        yield
    finally:
        _POISONED.reset(token)


def is_poisoned() -> bool:
    """Whether fresh results start as NaN here (``poisoned``)."""
    return _POISONED.get()


def in_host_memory(device: cl.Device) -> bool:
    """Whether ``device`` computes in the host's memory, at an alignment within a page. The
    query is deprecated since OpenCL 2.0: a driver that refuses it gets copies."""
    try:
        unified = bool(device.host_unified_memory)
    except cl.Error:
        return False
    return unified and alignment(device) <= mmap.PAGESIZE


def alignment(device: cl.Device) -> int:
    """The address alignment, in bytes, of a buffer the device uses in place."""
    return max(1, device.mem_base_addr_align // 8)


def aligned_empty(shape, dtype, align: int) -> np.ndarray:
    """An uninitialised array whose first element is at a multiple of ``align`` bytes."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class HostCall:
    """The buffers of one call on host arrays. ``in_place``: the device computes in the host's
    memory (``in_host_memory``); ``views``: the launch reads operands at element offsets (a family
    that ``takes_views``), so that an operand need not start at the aligned address."""

    def __init__(self, context: cl.Context, queue: cl.CommandQueue, in_place: bool, views: bool):
        self.context, self.queue = context, queue
        self.in_place, self.views = in_place, views
        self.align = alignment(queue.device)
        self.host = self.buffer = None
        self.held = []   # contiguous copies the operands' buffers lie over, alive until ``fetch``

    def product(self, op, a: np.ndarray, b: np.ndarray, shape, prec: Precision, start: np.ndarray | None,
                out: np.ndarray | None, alpha, beta) -> np.ndarray:
        """Row-major ``alpha * a @ b + beta * start`` (of ``shape``) by ``op``, which runs it as the
        column-major product it is: b is the kernels' A and a their B, at the offsets found here."""
        with self:
            a_buf, a_at = self.operand(a)
            b_buf, b_at = self.operand(b)
            c_buf = self.result(shape, prec, start, out, reads=(a, b))
            op.enqueue(b_buf, a_buf, c_buf, alpha, beta, offsets=(b_at, a_at, 0))
            return self.fetch()

    def __enter__(self) -> "HostCall":
        return self

    def __exit__(self, kind, error, trace) -> None:
        # Whatever was enqueued over the held arrays must have run before they may be freed.
        if self.held:
            try:
                self.queue.finish()
            finally:
                self.held.clear()

    def operand(self, x: np.ndarray) -> tuple[cl.Buffer, int]:
        """A read-only buffer of ``x`` (made contiguous) and the element offset of its first
        element there. The caller keeps ``x`` alive until ``fetch`` has returned, in the ``with``
        block of this HostCall."""
        x = np.ascontiguousarray(x)
        self.held.append(x)
        start = x.ctypes.data
        before = start % self.align
        if self.in_place and x.nbytes and (before == 0 or (self.views and before % x.itemsize == 0)):
            memory = (ctypes.c_char * (before + x.nbytes)).from_address(start - before)
            return cl.Buffer(self.context, _mf.READ_ONLY | _mf.USE_HOST_PTR, hostbuf=memory), before // x.itemsize
        return cl.Buffer(self.context, _mf.READ_ONLY | _mf.COPY_HOST_PTR, hostbuf=x), 0

    def result(self, shape, prec: Precision, start: np.ndarray | None = None,
               out: np.ndarray | None = None, reads=()) -> cl.Buffer:
        """The result's buffer, holding ``start`` (broadcast to ``shape``: C's values for beta != 0),
        else NaN where ``poisoned``, else whatever the memory held. The result is ``out`` where that
        is contiguous and, in place, aligned and sharing no memory with the arrays ``reads``."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * prec.bytes
        if not self.in_place:
            if start is not None:
                self.buffer = cl.Buffer(self.context, _mf.READ_WRITE | _mf.COPY_HOST_PTR,
                                        hostbuf=np.ascontiguousarray(np.broadcast_to(start, shape)))
            else:
                self.buffer = cl.Buffer(self.context, _mf.READ_WRITE, size=nbytes)
                if is_poisoned():
                    cl.enqueue_fill_buffer(self.queue, self.buffer, prec.nan, 0, nbytes)
            # read back once the product has run, when the operands are long copied: any ``out`` will do
            self.host = out if out is not None and out.flags.c_contiguous else np.empty(shape, prec.dtype)
            return self.buffer
        usable = (out is not None and out.flags.c_contiguous and out.ctypes.data % self.align == 0
                  and not any(np.may_share_memory(out, x) for x in reads))
        self.host = out if usable else aligned_empty(shape, prec.dtype, self.align)
        if start is not None:
            self.host[...] = start
        elif is_poisoned():
            self.host.fill(prec.nan)
        self.buffer = cl.Buffer(self.context, _mf.READ_WRITE | _mf.USE_HOST_PTR, hostbuf=self.host)
        return self.buffer

    def fetch(self) -> np.ndarray:
        """The result on the host, once what was enqueued has run."""
        if not self.in_place:
            cl.enqueue_copy(self.queue, self.host, self.buffer)
            self.held.clear()
            return self.host
        # A map of a buffer over host memory is where its contents become the host's to read;
        # in place it copies nothing.
        mapped, _ = cl.enqueue_map_buffer(self.queue, self.buffer, cl.map_flags.READ, 0, self.host.shape,
                                          self.host.dtype, is_blocking=True)
        mapped.base.release(self.queue).wait()
        self.held.clear()
        return self.host
