"""``gemmtune.gemm``: GEMM on numpy arrays, on any OpenCL device, with a cached context (module compute)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from gemmtune.device import device_spec, list_devices, open_device
from gemmtune.info import DeviceInfo
from gemmtune.defaults import default_config
from gemmtune.families import FAMILIES
from gemmtune.kernels import GemmOperation, normalize_op
from gemmtune.launch import Problem
from gemmtune.errors import GemmtuneError
from gemmtune.precision import Precision, get_precision, precision_of
from gemmtune.space import Config, check_config, load_space, make_config, require_precision, shipped_families
from gemmtune.tuned import best_config
from gemmtune.verify import Check, Reference, compare, random_matrix


@dataclass
class OpenDevice:
    info: DeviceInfo
    context: cl.Context
    queue: cl.CommandQueue


_devices: dict[str, OpenDevice] = {}
_operations: OrderedDict[tuple, GemmOperation] = OrderedDict()
_MAX_OPERATIONS = 32  # each holds scratch buffers; keep the most recently used


def get_device(device=None) -> OpenDevice:
    """The device for ``device`` (index, "P:D", or None for $GEMMTUNE_DEVICE / 0), opened once."""
    spec = device_spec(device)
    if spec not in _devices:
        info, dev = open_device(spec)
        ctx = cl.Context([dev])
        _devices[spec] = OpenDevice(info, ctx, cl.CommandQueue(ctx))
    return _devices[spec]


def resolve_config(config, info: DeviceInfo, prec: Precision) -> Config:
    """A Config from a dict of parameters (``KERNEL`` picks the family), checked on the device."""
    if isinstance(config, Config):
        resolved = config
    else:
        given = dict(config)
        kernel = given.pop("KERNEL", None)
        if kernel is None:
            # The first family, of the device's space and then of the other shipped ones, that
            # has every parameter given (TSM=... names xgemm_k5 on a CPU too); else the device's
            # first, which names the unknown parameter.
            spaces = (*load_space(device=info).families, *shipped_families().families)
            kernel = next((fs.family.name for fs in spaces if set(given) <= set(fs.defaults)),
                          spaces[0].family.name)
        resolved = make_config(shipped_families(), kernel, given)
    check_config(resolved, info, prec)
    return resolved


def operation(dev: OpenDevice, config: Config, source: str, prec: Precision, m: int, n: int, k: int,
              trans_a: str, trans_b: str) -> GemmOperation:
    key = (id(dev.context), config, hash(source), prec.code, m, n, k, trans_a, trans_b)
    op = _operations.get(key)
    if op is None:
        op = GemmOperation(dev.queue, config, source, prec, m, n, k, trans_a, trans_b)
        _operations[key] = op
        if len(_operations) > _MAX_OPERATIONS:
            _operations.popitem(last=False)
    else:
        _operations.move_to_end(key)
    return op


def check_scalars(prec: Precision, alpha, beta) -> None:
    """ValueError for a complex alpha or beta with real operands: it cannot be applied."""
    if not prec.is_complex:
        for name, value in (("alpha", alpha), ("beta", beta)):
            if np.iscomplexobj(value):
                raise ValueError(f"{name} = {value} is complex but the operands are real ({prec.dtype})")


def _op_shape(x: np.ndarray, flag: str) -> tuple[int, int]:
    return x.shape if flag == "N" else x.shape[::-1]


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
         config: Mapping | Config | None = None, device=None, db: str | None = None) -> np.ndarray:
    """Return ``alpha * op(a) @ op(b) + beta * c`` as a new array, computed on an OpenCL device.

    ``a``, ``b``, ``c`` are numpy arrays with numpy's (row-major) meaning; ``c`` is not modified.
    ``trans_a=True`` means op(a) = a.T, ``trans_a="C"`` means a.conj().T (likewise for b).
    The dtype (float32, float64, complex64, complex128) selects s, d, c or z. ``config`` is a
    dict of kernel parameters (missing ones take the kernel's defaults) or a Config; None takes
    ``best_config`` for the problem from the results database ``db`` (default: $GEMMTUNE_DB,
    else sqlite:///results/gemmtune.db): the tuned configuration of this shape, else of the
    nearest tuned shape, else the shipped default. Lookups are cached in the process.
    ``device`` is an index, "P:D", or None for $GEMMTUNE_DEVICE or 0. M, N or K may be 0, as in
    BLAS: K = 0 gives ``beta * c`` (zeros at beta 0), M or N = 0 an empty array.
    Raises ValueError for mixed dtypes or mismatched shapes, GemmtuneError for a configuration
    that is not valid on the device.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"a and b must be 2-D, got {a.ndim}-D and {b.ndim}-D")
    if a.dtype != b.dtype or (c is not None and np.asarray(c).dtype != a.dtype):
        dtypes = ", ".join(str(np.asarray(x).dtype) for x in (a, b, c) if x is not None)
        raise ValueError(f"operands must share one dtype, got {dtypes}")
    prec = precision_of(a.dtype)
    ta, tb = normalize_op(trans_a), normalize_op(trans_b)
    (m, ka), (kb, n) = _op_shape(a, ta), _op_shape(b, tb)
    if ka != kb:
        raise ValueError(f"op(a) is {m}x{ka} but op(b) is {kb}x{n}: inner dimensions differ")
    if c is not None and np.asarray(c).shape != (m, n):
        raise ValueError(f"c must be {m}x{n}, got {'x'.join(map(str, np.asarray(c).shape))}")
    if c is None and beta != 0:
        raise ValueError(f"beta = {beta} needs c: without c, beta must be 0")
    check_scalars(prec, alpha, beta)

    dev = get_device(device)
    if min(m, n, ka) == 0:
        # BLAS's empty products: nothing to multiply; with K = 0, C <- beta * C (c unread at beta 0)
        if ka == 0 and c is not None and beta != 0:
            return (beta * np.asarray(c)).astype(prec.dtype)
        return np.zeros((m, n), dtype=prec.dtype)
    # Row-major C = op(a) op(b) is column-major C^T = op(b)^T op(a)^T, and the memory of a
    # row-major matrix is its transpose in column-major: hand b as A and a as B, m and n swapped.
    # The tuned shape is that column-major one, the problem the kernel actually runs.
    cfg = (best_config(n, m, ka, prec, device=dev.info, db=db, trans_a=tb, trans_b=ta).config if config is None
           else resolve_config(config, dev.info, prec))
    fs = shipped_families().family(cfg.kernel)
    op = operation(dev, cfg, fs.source, prec, n, m, ka, tb, ta)
    mf = cl.mem_flags
    ctx, queue = dev.context, dev.queue
    a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))
    b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(b))
    if c is not None and beta != 0:
        c_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(c))
    else:
        # beta == 0: C is never read. Poison it so an element the kernel fails to write shows as
        # NaN, on the device: no host array to fill and copy.
        c_buf = cl.Buffer(ctx, mf.READ_WRITE, size=m * n * prec.bytes)
        cl.enqueue_fill_buffer(queue, c_buf, prec.nan, 0, c_buf.size)
    op.enqueue(b_buf, a_buf, c_buf, alpha, beta)
    result = np.empty((m, n), dtype=prec.dtype)
    cl.enqueue_copy(queue, result, c_buf)
    return result


def verify_config(device, prec: Precision, m: int, n: int, k: int, *, config=None, alpha=1.0, beta=0.0,
                  trans_a="N", trans_b="N", seed=None) -> Check:
    """Run one configuration on fresh random operands and compare with numpy (see gemmtune.verify).

    With beta == 0 the output starts as NaN, so any element the kernel leaves unwritten fails.
    GemmtuneError, before anything is allocated, for a seed numpy does not take, a non-finite
    alpha or beta, and a problem that does not fit the device or the host.
    """
    from gemmtune.inputs import check_finite, check_problem, check_seed

    check_seed(seed)
    check_finite("alpha", alpha)
    check_finite("beta", beta)
    check_problem(get_device(device).info, prec, m, n, k)
    rng = np.random.default_rng(seed)
    ta, tb = normalize_op(trans_a), normalize_op(trans_b)
    a = random_matrix(prec, (m, k) if ta == "N" else (k, m), rng)
    b = random_matrix(prec, (k, n) if tb == "N" else (n, k), rng)
    c = random_matrix(prec, (m, n), rng) if beta != 0 else None
    result = gemm(a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb, config=config, device=device)
    return compare(result, Reference.compute(prec, a, b, c, alpha, beta, ta, tb), prec)


def device_info(device: cl.Device) -> DeviceInfo:
    """gemmtune's description of a pyopencl device, found in the flat device index."""
    for info in list_devices():
        if open_device(info.index)[1] == device:
            return info
    raise GemmtuneError(f"device {device.name.strip()!r} is not among the OpenCL devices gemmtune lists")


class EmptyProduct:
    """What ``Gemm`` enqueues for a product with M, N or K of 0, as BLAS means it: nothing where
    M or N is 0; C <- beta * C where K is 0 (c not read where beta is 0). Rectangular copies of
    c's view through the host (blocking) instead of a kernel, which would need a build of its
    own for a call this rare."""

    kernel_events = 0

    def __init__(self, queue: cl.CommandQueue, prec: Precision, m: int, n: int, ldc: int):
        self.queue, self.prec, self.m, self.n, self.ldc = queue, prec, m, n, ldc

    def enqueue(self, a, b, c: cl.Buffer, alpha=1.0, beta=0.0, wait_for=None, offsets=(0, 0, 0)) -> list[cl.Event]:
        if self.m == 0 or self.n == 0:
            return []
        item = self.prec.bytes
        rect = dict(buffer_origin=(offsets[2] * item, 0), host_origin=(0, 0), region=(self.n * item, self.m),
                    buffer_pitches=(self.ldc * item,), host_pitches=(self.n * item,))
        host = np.zeros((self.m, self.n), dtype=self.prec.dtype)
        events = []
        if beta != 0:
            events.append(cl.enqueue_copy(self.queue, host, c, wait_for=wait_for, **rect))
            host *= self.prec.dtype.type(beta)
            wait_for = None
        events.append(cl.enqueue_copy(self.queue, c, host, wait_for=wait_for, **rect))
        return events


_PLAIN = (float, int)   # scalars that need no check: they fit every precision


class Gemm:
    """GEMM on ``pyopencl.array.Array`` operands that live on ``queue``'s device, in place.

    ``Gemm(queue, "s")(a, b, c, alpha=1.0, beta=0.0, trans_a=False, trans_b=False)`` enqueues
    c <- alpha * op(a) @ op(b) + beta * c on ``queue`` and returns ``c``, with no host copies.
    The arrays have numpy's row-major meaning (as ``gemm``), 2-D, of the precision's dtype
    (float32, float64, complex64, complex128 for s, d, c, z). They may be views, as BLAS takes
    them: an offset into their buffer and rows further apart than their length (``x[i:j, p:q]``
    of a larger array); elements within a row must be adjacent. Nothing outside ``c``'s view is
    written. ``trans_a=True`` means op(a) = a.T, ``"C"`` a.conj().T. beta == 0 never reads c.
    An empty product (``EmptyProduct``) enqueues no kernel: K = 0 scales c's view by beta through
    the host, M or N = 0 does nothing.
    The call waits for the operands' pending events and records its own on ``c`` (``c.events``).

    The configuration of each problem is chosen the first time its shapes and strides are seen,
    by ``best_config`` on ``db`` (default: $GEMMTUNE_DB, else sqlite:///results/gemmtune.db); a
    view with an offset takes a family that reads views (the direct one) where the tuned
    configuration's does not. Later calls with the same shapes and strides only bind their
    buffers and enqueue. Scratch buffers are kept per problem, so calls must run in order: use
    an in-order queue.
    """

    _MAX_PROBLEMS = 64

    def __init__(self, queue: cl.CommandQueue, precision: str | Precision = "s", *, db: str | None = None,
                 config: Mapping | Config | None = None):
        self.queue = queue
        self.precision = precision if isinstance(precision, Precision) else get_precision(precision)
        self.info = device_info(queue.device)
        require_precision(self.info, self.precision)
        self.db = db
        # config: one configuration for every problem instead of best_config's choice.
        self.config = None if config is None else resolve_config(config, self.info, self.precision)
        self._calls: OrderedDict[tuple, GemmOperation] = OrderedDict()
        self.last_operation: GemmOperation | EmptyProduct | None = None   # of the last call, and its events
        self.last_events: list = []

    def _check(self, name: str, x) -> int:
        """Validate one operand; its leading dimension in elements (numpy's row stride)."""
        if not isinstance(x, cla.Array):
            raise TypeError(f"{name} must be a pyopencl.array.Array, got {type(x).__name__}")
        if x.ndim != 2 or x.dtype != self.precision.dtype:
            raise ValueError(f"{name} must be a 2-D {self.precision.dtype} array, got {x.ndim}-D {x.dtype}")
        if x.context != self.queue.context:
            raise ValueError(f"{name} lives in another OpenCL context than the queue")
        item = x.dtype.itemsize
        rows, cols = x.shape
        if cols > 1 and x.strides[1] != item:
            raise ValueError(f"{name}'s elements within a row must be adjacent (strides {x.strides})")
        if rows > 1 and (x.strides[0] % item or x.strides[0] < cols * item):
            raise ValueError(f"{name}'s rows must be whole elements apart and not overlap (strides {x.strides})")
        if x.offset % item:
            raise ValueError(f"{name}'s offset ({x.offset} bytes) is not a whole number of elements")
        return x.strides[0] // item if rows > 1 else max(cols, 1)

    def operation(self, a, b, c, trans_a: str, trans_b: str, views: bool) -> GemmOperation | EmptyProduct:
        """The prepared column-major operation for these operands' shapes, strides and op flags."""
        lda, ldb, ldc = (self._check(name, x) for name, x in (("a", a), ("b", b), ("c", c)))
        (m, ka), (kb, n) = _op_shape(a, trans_a), _op_shape(b, trans_b)
        if ka != kb:
            raise ValueError(f"op(a) is {m}x{ka} but op(b) is {kb}x{n}: inner dimensions differ")
        if c.shape != (m, n):
            raise ValueError(f"c must be {m}x{n}, got {'x'.join(map(str, c.shape))}")
        if min(m, n, ka) == 0:
            return EmptyProduct(self.queue, self.precision, m, n, ldc)
        # Same row-major to column-major swap as gemm: b is A, a is B, m and n exchanged.
        problem = Problem(n, m, ka, trans_b, trans_a, ldb, lda, ldc, views)
        cfg = self.config or best_config(n, m, ka, self.precision, device=self.info, db=self.db,
                                         trans_a=trans_b, trans_b=trans_a).config
        if views and not FAMILIES[cfg.kernel].takes_views:
            if self.config is not None:
                raise ValueError(f"{cfg.kernel} reads operands at offset 0 only, and a, b or c is a view with an offset")
            cfg = default_config(self.info, self.precision, (n, m, ka), views=True)
        return GemmOperation(self.queue, cfg, shipped_families().family(cfg.kernel).source, self.precision,
                             n, m, ka, problem=problem)

    def __call__(self, a, b, c, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False):
        try:
            views = bool(a.offset or b.offset or c.offset)
            key = (a.shape, a.strides, a.dtype, a.context, b.shape, b.strides, b.dtype, b.context,
                   c.shape, c.strides, c.dtype, c.context, trans_a, trans_b, views)
        except AttributeError:
            key, views = None, False   # not arrays: operation() says which
        op = self._calls.get(key)
        if op is None:
            op = self.operation(a, b, c, normalize_op(trans_a), normalize_op(trans_b), views)
            self._calls[key] = op
            if len(self._calls) > self._MAX_PROBLEMS:
                self._calls.popitem(last=False)
        if type(alpha) not in _PLAIN or type(beta) not in _PLAIN:
            check_scalars(self.precision, alpha, beta)
        item = self.precision.bytes
        wait = [*a.events, *b.events, *c.events] or None
        events = op.enqueue(b.base_data, a.base_data, c.base_data, alpha, beta, wait,
                            (b.offset // item, a.offset // item, c.offset // item))
        if events:
            c.add_event(events[-1])
        self.last_operation, self.last_events = op, events
        return c
