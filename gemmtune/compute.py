"""``gemmtune.gemm``: GEMM on numpy arrays, on any OpenCL device, with a cached context (module compute)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyopencl as cl

from gemmtune.defaults import default_config
from gemmtune.device import device_spec, open_device
from gemmtune.info import DeviceInfo
from gemmtune.kernels import GemmOperation, normalize_op
from gemmtune.precision import Precision, precision_of
from gemmtune.space import Config, check_config, load_space, make_config
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
        resolved = make_config(load_space(), kernel, given)
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


def _op_shape(x: np.ndarray, flag: str) -> tuple[int, int]:
    return x.shape if flag == "N" else x.shape[::-1]


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
         config: Mapping | Config | None = None, device=None) -> np.ndarray:
    """Return ``alpha * op(a) @ op(b) + beta * c`` as a new array, computed on an OpenCL device.

    ``a``, ``b``, ``c`` are numpy arrays with numpy's (row-major) meaning; ``c`` is not modified.
    ``trans_a=True`` means op(a) = a.T, ``trans_a="C"`` means a.conj().T (likewise for b).
    The dtype (float32, float64, complex64, complex128) selects s, d, c or z. ``config`` is a
    dict of kernel parameters (missing ones take the kernel's defaults); None takes the shipped
    default for the device. ``device`` is an index, "P:D", or None for $GEMMTUNE_DEVICE or 0.
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
    if min(m, n, ka) < 1:
        raise ValueError(f"empty product: {m}x{ka} times {kb}x{n}")

    dev = get_device(device)
    cfg = default_config(dev.info, prec) if config is None else resolve_config(config, dev.info, prec)
    fs = load_space().family(cfg.kernel)
    # Row-major C = op(a) op(b) is column-major C^T = op(b)^T op(a)^T, and the memory of a
    # row-major matrix is its transpose in column-major: hand b as A and a as B, m and n swapped.
    op = operation(dev, cfg, fs.source, prec, n, m, ka, tb, ta)
    mf = cl.mem_flags
    ctx, queue = dev.context, dev.queue
    a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))
    b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(b))
    if c is not None and beta != 0:
        c_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(c))
    else:
        # beta == 0: C is never read. Poison it so an element the kernel fails to write shows as NaN.
        c_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR,
                          hostbuf=np.full((m, n), np.nan, dtype=prec.dtype))
    op.enqueue(b_buf, a_buf, c_buf, alpha, beta)
    result = np.empty((m, n), dtype=prec.dtype)
    cl.enqueue_copy(queue, result, c_buf)
    return result


def verify_config(device, prec: Precision, m: int, n: int, k: int, *, config=None, alpha=1.0, beta=0.0,
                  trans_a="N", trans_b="N", seed=None) -> Check:
    """Run one configuration on fresh random operands and compare with numpy (see gemmtune.verify).

    With beta == 0 the output starts as NaN, so any element the kernel leaves unwritten fails.
    """
    rng = np.random.default_rng(seed)
    ta, tb = normalize_op(trans_a), normalize_op(trans_b)
    a = random_matrix(prec, (m, k) if ta == "N" else (k, m), rng)
    b = random_matrix(prec, (k, n) if tb == "N" else (n, k), rng)
    c = random_matrix(prec, (m, n), rng) if beta != 0 else None
    result = gemm(a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb, config=config, device=device)
    return compare(result, Reference.compute(prec, a, b, c, alpha, beta, ta, tb), prec)
