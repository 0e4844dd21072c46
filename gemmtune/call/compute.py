"""``gemmtune.gemm``: GEMM on numpy arrays, on any OpenCL device, with a cached context (module compute)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from gemmtune import inputs
from gemmtune.call import batched
from gemmtune.devices.opencl import device_spec, list_devices, open_device
from gemmtune.devices.info import DeviceInfo
from gemmtune.space.defaults import default_config
from gemmtune.families import FAMILIES
from gemmtune.launch.operation import GemmOperation, Prepared
from gemmtune.launch.plan import Problem
from gemmtune.call.complex3m import Complex3M, check_algorithm
from gemmtune.call.host import HostCall, in_host_memory, poisoned
from gemmtune.errors import GemmtuneError, OperandError, OperandTypeError
from gemmtune.call.operands import (BufferFacts, check_device_memory, check_host_memory, check_out, deliver,
                                    device_buffers_in_host, host_operand, op_flag, operand_precision, out_of_memory,
                                    out_of_memory_as_error, overlap, product_shape, view)
from gemmtune.precision import Precision, get_precision
from gemmtune.space import Config, check_config, load_space, make_config, require_precision, shipped_families
from gemmtune.db.tuned import best_config
from gemmtune.measure.verify import Check, Reference, check_scalars, compare, random_matrix


@dataclass
class OpenDevice:
    info: DeviceInfo
    context: cl.Context
    queue: cl.CommandQueue


_devices: dict[str, OpenDevice] = {}
_operations = Prepared(32)   # GemmOperations by device, configuration and problem


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
        if not isinstance(config, Mapping):
            raise OperandTypeError(f"config must be a dict of kernel parameters or a Config, "
                                   f"got {type(config).__name__}")
        if not config:
            # Not "every default": an empty configuration is far more often a lost one.
            raise GemmtuneError("the configuration is empty: give kernel parameters (NAME: value), "
                                "or config=None for the tuned configuration")
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
    return _operations.get_or_make(key, lambda: GemmOperation(dev.queue, config, source, prec, m, n, k,
                                                              trans_a, trans_b))


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
         config: Mapping | Config | None = None, device=None, db: str | None = None,
         complex_algorithm: str = "standard", out: np.ndarray | None = None) -> np.ndarray:
    """Return ``alpha * op(a) @ op(b) + beta * c`` as a new array, computed on an OpenCL device.

    ``a``, ``b``, ``c`` are numpy arrays with numpy's (row-major) meaning; ``c`` is not modified
    (it is copied to the device, so it may share memory with ``a`` or ``b``).
    ``trans_a=True`` means op(a) = a.T, ``trans_a="C"`` means a.conj().T (likewise for b).
    The dtype (float32, float64, complex64, complex128) selects s, d, c or z. ``config`` is a
    dict of kernel parameters (missing ones take the kernel's defaults) or a Config; None takes
    ``best_config`` for the problem from the results database ``db`` (default: $GEMMTUNE_DB,
    else sqlite:///results/gemmtune.db): the tuned configuration of this shape, else of the
    nearest tuned shape, else the shipped default. Lookups are cached in the process.
    ``device`` is an index, "P:D", or None for $GEMMTUNE_DEVICE or 0. M, N or K may be 0, as in
    BLAS: K = 0 gives ``beta * c`` (zeros at beta 0), M or N = 0 an empty array.
    ``complex_algorithm="3m"`` (c and z only) computes the product from three real GEMMs
    (``gemmtune.call.complex3m``: faster, less accurate componentwise); ``config`` then is the real
    precision's. Raises GemmtuneError for bad input, before anything is allocated on the device:
    OperandError (also a ValueError) for mixed dtypes, mismatched shapes and alpha or beta that
    are not finite numbers of the precision (``check_scalars``); for a configuration that is
    empty or not valid on the device; for a problem whose buffers (operands, result and the
    plan's scratch) do not fit the device's memory or its largest allocation, or what the host
    must hold its available memory. An allocation that fails all the same raises GemmtuneError
    too.
    Operands of more than two dimensions are stacks of matrices, as ``numpy.matmul`` takes them:
    the leading (batch) dimensions broadcast, op() applies to the last two, and the whole batch
    is one batched launch (``gemmtune.call.batched``; docs/batched.md). ``out``: an array of the
    result's shape and dtype to write the result into (and return) instead of a new one.
    """
    a, b = host_operand("a", a, batched=True), host_operand("b", b, batched=True)
    c = None if c is None else host_operand("c", c, batched=True)
    if a.dtype != b.dtype or (c is not None and c.dtype != a.dtype):
        dtypes = ", ".join(str(x.dtype) for x in (a, b, c) if x is not None)
        raise OperandError(f"operands must share one dtype, got {dtypes}")
    prec = operand_precision(a.dtype)
    check_scalars(prec, alpha, beta)
    ta, tb = op_flag("trans_a", trans_a), op_flag("trans_b", trans_b)
    algorithm = check_algorithm(complex_algorithm, prec)
    if c is None and beta != 0:
        raise OperandError(f"beta = {beta} needs c: without c, beta must be 0")
    if max(x.ndim for x in (a, b, c) if x is not None) > 2:
        if algorithm == "3m":
            raise OperandError("complex_algorithm='3m' takes 2-D operands; a batch is computed 'standard'")
        dev = get_device(device)
        resolved = None if config is None else resolve_config(config, dev.info, prec)
        return batched.host_gemm(dev, a, b, c, alpha, beta, ta, tb, prec, resolved, db, out)
    m, n, ka = product_shape(a, b, c, ta, tb)
    check_out(out, (m, n), prec)   # before anything is computed
    return deliver(out, _gemm_2d(a, b, c, alpha, beta, ta, tb, m, n, ka, prec, algorithm, config, device, db, out))


def _gemm_2d(a, b, c, alpha, beta, ta, tb, m, n, ka, prec, algorithm, config, device, db, out) -> np.ndarray:
    dev = get_device(device)
    if min(m, n, ka) == 0:
        # BLAS's empty products: nothing to multiply; with K = 0, C <- beta * C (c unread at beta 0)
        if ka == 0 and c is not None and beta != 0:
            return (prec.dtype.type(beta) * c).astype(prec.dtype)
        return np.zeros((m, n), dtype=prec.dtype)
    what = f"{'x'.join(map(str, a.shape))} times {'x'.join(map(str, b.shape))} in precision {prec.code}"
    # The operands and the result first (a problem far too large says so, whatever the plan
    # would say of it), then with what the plan adds: padded copies, parts of K, tables.
    operands = {"a": a.nbytes, "b": b.nbytes, "c": m * n * prec.bytes}
    check_device_memory(dev.info, what, operands)
    if algorithm == "3m":
        return _gemm_3m(dev, a, b, c, alpha, beta, ta, tb, (m, n), config, db, out)
    # Row-major C = op(a) op(b) is column-major C^T = op(b)^T op(a)^T, and the memory of a
    # row-major matrix is its transpose in column-major: hand b as A and a as B, m and n swapped.
    # The tuned shape is that column-major one, the problem the kernel actually runs.
    cfg = (best_config(n, m, ka, prec, device=dev.info, db=db, trans_a=tb, trans_b=ta).config if config is None
           else resolve_config(config, dev.info, prec))
    queue = dev.queue
    plan = FAMILIES[cfg.kernel].plan(cfg.params, prec, Problem(n, m, ka, tb, ta), queue.device,
                                     dev.info.compute_units)
    buffers = {**operands, **{s.name: s.nbytes for s in plan.scratch}}
    check_device_memory(dev.info, what, buffers)
    in_place = in_host_memory(queue.device)
    # On the host: the result, contiguous copies of strided operands and, where the device is
    # the host's own processor, its buffers but those built over the host's arrays (call/host.py).
    host = {"result": m * n * prec.bytes,
            **{f"contiguous {name}": x.nbytes for name, x in (("a", a), ("b", b), ("c", c))
               if x is not None and not x.flags.c_contiguous},
            **device_buffers_in_host(dev.info, buffers, operands if in_place else ())}
    check_host_memory(what, host)
    with out_of_memory_as_error(what):
        op = operation(dev, cfg, shipped_families().family(cfg.kernel).source, prec, n, m, ka, tb, ta)
        call = HostCall(dev.context, queue, in_place, FAMILIES[cfg.kernel].takes_views)
        return call.product(op, a, b, (m, n), prec, c if c is not None and beta != 0 else None, out, alpha, beta)


def _gemm_3m(dev: OpenDevice, a, b, c, alpha, beta, ta, tb, shape, config, db, out) -> np.ndarray:
    """gemm's 3M product: a Gemm of the complex precision with complex_algorithm="3m" (its checks
    and memory estimates) on device arrays over the call's buffers (call/host.py: the numpy
    arrays themselves where the device computes in the host's memory)."""
    prec = operand_precision(a.dtype)
    queue = dev.queue
    with out_of_memory_as_error(f"the 3m product in precision {prec.code}"):
        with HostCall(dev.context, queue, in_host_memory(queue.device), views=True) as call:
            def array(x):
                buffer, at = call.operand(x)
                return cla.Array(queue, x.shape, x.dtype, data=buffer, offset=at * x.itemsize)

            start = c if c is not None and beta != 0 else None
            dc = cla.Array(queue, shape, prec.dtype, data=call.result(shape, prec, start, out, reads=(a, b)))
            Gemm(queue, prec, db=db, config=config, complex_algorithm="3m")(array(a), array(b), dc, alpha=alpha,
                                                                            beta=beta, trans_a=ta, trans_b=tb)
            return call.fetch()


def verify_config(device, prec: Precision | str, m: int, n: int, k: int, *, config=None, alpha=1.0, beta=0.0,
                  trans_a="N", trans_b="N", seed=None) -> Check:
    """Run one configuration on fresh random operands and compare with numpy (see gemmtune.measure.verify).

    With beta == 0 the output starts as NaN (``poisoned``), so any element the kernel leaves
    unwritten fails.
    GemmtuneError, before anything is allocated, for sizes that are not integers from 0, a seed
    numpy does not take, alpha or beta that ``check_scalars`` refuses, a bad op flag, and a
    problem that does not fit the device or the host.
    """
    prec = prec if isinstance(prec, Precision) else get_precision(prec)
    for name, size in (("m", m), ("n", n), ("k", k)):
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
            raise OperandError(f"{name} must be an integer from 0, got {size!r}")
    inputs.check_seed(seed)
    check_scalars(prec, alpha, beta)
    ta, tb = op_flag("trans_a", trans_a), op_flag("trans_b", trans_b)
    inputs.check_problem(get_device(device).info, prec, m, n, k)
    rng = np.random.default_rng(seed)
    a = random_matrix(prec, (m, k) if ta == "N" else (k, m), rng)
    b = random_matrix(prec, (k, n) if tb == "N" else (n, k), rng)
    c = random_matrix(prec, (m, n), rng) if beta != 0 else None
    with poisoned():
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


class Gemm:
    """GEMM on ``pyopencl.array.Array`` operands that live on ``queue``'s device, in place.

    ``Gemm(queue, "s")(a, b, c, alpha=1.0, beta=0.0, trans_a=False, trans_b=False)`` enqueues
    c <- alpha * op(a) @ op(b) + beta * c on ``queue`` and returns ``c``, with no host copies.
    The arrays have numpy's row-major meaning (as ``gemm``), 2-D, of the precision's dtype
    (float32, float64, complex64, complex128 for s, d, c, z). They may be views, as BLAS takes
    them: an offset into their buffer and rows further apart than their length (``x[i:j, p:q]``
    of a larger array); elements within a row must be adjacent. Every call checks each view
    against its buffer (offset a whole number of elements, last element inside the buffer) and
    that ``c`` shares no element with ``a`` or ``b`` (they may share with each other), raising
    OperandError, a GemmtuneError, before anything is enqueued. Nothing outside ``c``'s view is
    written. ``trans_a=True`` means op(a) = a.T, ``"C"`` a.conj().T. beta == 0 never reads c.
    An empty product (``EmptyProduct``) enqueues no kernel: K = 0 scales c's view by beta through
    the host, M or N = 0 does nothing.
    The call waits for the operands' pending events and records its own on ``c`` (``c.events``).
    A batch (docs/batched.md): 3-D arrays, problem z being ``a[z]``, ``b[z]``, ``c[z]`` (a or b
    2-D, or of one matrix, shared by all), or lists of equally shaped 2-D views; every problem is
    checked as one is, and no c may share an element with another problem's c.
    A batched call whose operands all equal the last batched call's in buffer, shape, strides,
    offset, dtype and context reuses what its checks and lookups gave (they would pass again).

    The configuration of each problem is chosen the first time its shapes and strides are seen,
    by ``best_config`` on ``db`` (default: $GEMMTUNE_DB, else sqlite:///results/gemmtune.db); a
    view with an offset takes a family that reads views (the direct one) where the tuned
    configuration's does not. Later calls with the same shapes and strides only bind their
    buffers and enqueue. Scratch buffers are kept per problem, so calls must run in order: use
    an in-order queue.
    """

    _MAX_PROBLEMS = 64

    def __init__(self, queue: cl.CommandQueue, precision: str | Precision = "s", *, db: str | None = None,
                 config: Mapping | Config | None = None, complex_algorithm: str = "standard"):
        if not isinstance(queue, cl.CommandQueue):
            raise OperandTypeError(f"queue must be a pyopencl.CommandQueue, got {type(queue).__name__}")
        self.queue = queue
        self.precision = precision if isinstance(precision, Precision) else get_precision(precision)
        self.complex3m = None
        if check_algorithm(complex_algorithm, self.precision) == "3m":
            # Three real products of the other precision, each tuned (or configured) as its own.
            real = Gemm(queue, "d" if self.precision.code == "z" else "s", db=db, config=config)
            self.complex3m = Complex3M(queue, self.precision, real)
            config = None
        self.info = device_info(queue.device)
        require_precision(self.info, self.precision)
        self.db = db
        # config: one configuration for every problem instead of best_config's choice.
        self.config = None if config is None else resolve_config(config, self.info, self.precision)
        self._calls = Prepared(self._MAX_PROBLEMS)   # GemmOperation or EmptyProduct by problem
        self._scalars = None   # the last alpha and beta check_scalars passed, with their types
        self._buffers: dict[int, BufferFacts] = {}   # of the last call's operands, by id
        self._batched = None   # the last batch's operands and what they prepared (gemmtune.call.batched)
        self.last_operation: GemmOperation | EmptyProduct | None = None   # of the last call, and its events
        self.last_events: list = []

    def operation(self, a, b, c, trans_a: str, trans_b: str, lds: tuple[int, int, int],
                  views: bool) -> GemmOperation | EmptyProduct:
        """The prepared column-major operation for these (validated) operands' shapes, leading
        dimensions ``lds`` and op flags."""
        lda, ldb, ldc = lds
        m, n, ka = product_shape(a, b, c, trans_a, trans_b)
        if min(m, n, ka) == 0:
            return EmptyProduct(self.queue, self.precision, m, n, ldc)
        # Same row-major to column-major swap as gemm: b is A, a is B, m and n exchanged.
        problem = Problem(n, m, ka, trans_b, trans_a, ldb, lda, ldc, views)
        cfg = self.config or best_config(n, m, ka, self.precision, device=self.info, db=self.db,
                                         trans_a=trans_b, trans_b=trans_a).config
        if views and not FAMILIES[cfg.kernel].takes_views:
            if self.config is not None:
                raise OperandError(f"{cfg.kernel} reads operands at offset 0 only, "
                                   f"and a, b or c is a view with an offset")
            cfg = default_config(self.info, self.precision, (n, m, ka), views=True)
        what = f"{'x'.join(map(str, a.shape))} times {'x'.join(map(str, b.shape))} in precision {self.precision.code}"
        plan = FAMILIES[cfg.kernel].plan(cfg.params, self.precision, problem, self.queue.device,
                                         self.info.compute_units)
        scratch = {s.name: s.nbytes for s in plan.scratch}
        check_device_memory(self.info, what, scratch)
        if self.info.type == "CPU":   # the device's memory is the host's
            check_host_memory(what, scratch)
        with out_of_memory_as_error(what):
            return GemmOperation(self.queue, cfg, shipped_families().family(cfg.kernel).source, self.precision,
                                 n, m, ka, problem=problem)

    def __call__(self, a, b, c, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False):
        if batched.is_batch(a, b, c):   # 3-D arrays or lists of views: gemmtune.call.batched
            return batched.call(self, a, b, c, alpha, beta, trans_a, trans_b)
        # Every call checks everything, cached operation or not: the cache is keyed by what the
        # operation depends on, and an offset or a buffer may differ from one call to the next.
        prec, context = self.precision, self.queue.context
        # Facts of the last call's buffers only (as the operation binds them): more would keep
        # the memory of arrays the caller has dropped.
        known, now = self._buffers, {}
        va, vb, vc = (view(name, x, prec, context, known, now) for name, x in (("a", a), ("b", b), ("c", c)))
        self._buffers = now
        for name, x, vx in (("a", a, va), ("b", b, vb)):   # a and b, only read, may share memory
            if overlap(vc, c.shape, vx, x.shape, prec.dtype):
                raise OperandError(f"c shares elements with {name} in one buffer: the kernels would read "
                                   f"{name} where they have already written c")
        scalars = (type(alpha), alpha, type(beta), beta)   # types first: an array never meets ==
        if scalars != self._scalars:
            check_scalars(prec, alpha, beta)
            self._scalars = scalars
        ta, tb = op_flag("trans_a", trans_a), op_flag("trans_b", trans_b)
        if self.complex3m is not None and min(product_shape(a, b, c, ta, tb)) > 0:
            events = self.complex3m(a, b, c, (va, vb, vc), alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
            self.last_operation, self.last_events = self.complex3m.real.last_operation, events
            return c
        views = bool(va.first or vb.first or vc.first)
        key = (a.shape, b.shape, c.shape, va.ld, vb.ld, vc.ld, ta, tb, views)
        op = self._calls.get_or_make(key, lambda: self.operation(a, b, c, ta, tb, (va.ld, vb.ld, vc.ld), views))
        wait = [*a.events, *b.events, *c.events] or None
        try:
            events = op.enqueue(b.base_data, a.base_data, c.base_data, alpha, beta, wait,
                                (vb.first, va.first, vc.first))
        except (cl.Error, MemoryError) as e:
            error = out_of_memory(e, f"{'x'.join(map(str, a.shape))} times {'x'.join(map(str, b.shape))}")
            if error is None:
                raise
            raise error from None
        if events:
            c.add_event(events[-1])
        self.last_operation, self.last_events = op, events
        return c
