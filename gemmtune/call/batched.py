"""Batched GEMM: many problems of one shape in one launch (docs/batched.md).

``gemmtune.gemm`` on stacks of matrices (numpy.matmul's broadcasting) and ``gemmtune.Gemm`` on
3-D pyopencl arrays or lists of 2-D views come here. Each batch is one plan of a family that
``takes_batch`` (``Problem.batch``: strides per operand, or a table of offsets per problem), with
every operand checked as a single problem's is (``operands.py``) and for the whole batch.
"""

from __future__ import annotations

import math
import operator
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from gemmtune.space.defaults import default_config
from gemmtune.errors import OperandError
from gemmtune.families import FAMILIES
from gemmtune.launch.operation import GemmOperation, Prepared
from gemmtune.launch.plan import Problem
from gemmtune.call.host import HostCall, in_host_memory
from gemmtune.call.operands import (batch_view, check_device_memory, check_host_memory, check_out, deliver,
                                    device_buffers_in_host, op_flag,
                                    out_of_memory, out_of_memory_as_error, overlap, product_shape, view)
from gemmtune.space import Config, shipped_families
from gemmtune.db.tuned import best_config
from gemmtune.measure.verify import check_scalars

_operations = Prepared(32)


def batch_config(config: Config | None, info, prec, shape: tuple[int, int, int], ops: tuple[str, str],
                 db, batch: int) -> Config:
    """``config``, or what ``best_config`` gives for ``batch`` problems of the batch's (column-major)
    shape and ops: the batch's tuned row, else the nearest in shape and batch of a family that
    takes batches, else the shipped default of the batch's class."""
    m, n, k = shape
    cfg = config
    if cfg is None and k > 0:
        cfg = best_config(m, n, k, prec, device=info, db=db, trans_a=ops[0], trans_b=ops[1], batch=batch).config
    if cfg is not None and FAMILIES[cfg.kernel].takes_batch:
        return cfg
    if config is not None:
        batching = ", ".join(name for name, family in FAMILIES.items() if family.takes_batch)
        raise OperandError(f"{config.kernel} launches one problem at a time; a batch needs one of {batching}")
    cfg = default_config(info, prec, shape, views=True, batch=batch)
    assert FAMILIES[cfg.kernel].takes_batch, cfg.kernel   # the families that read views take batches
    return cfg


def _operation(queue, info, cfg: Config, prec, problem: Problem, what: str, cache) -> GemmOperation:
    key = (id(queue.context), cfg, prec.code, problem)

    def make() -> GemmOperation:
        plan = FAMILIES[cfg.kernel].plan(cfg.params, prec, problem, queue.device, info.compute_units)
        scratch = {s.name: s.nbytes for s in plan.scratch}
        check_device_memory(info, what, scratch)
        if info.type == "CPU":   # the device's memory is the host's
            check_host_memory(what, scratch)
        with out_of_memory_as_error(what):
            return GemmOperation(queue, cfg, shipped_families().family(cfg.kernel).source, prec,
                                 problem.m, problem.n, problem.k, problem=problem)
    return cache.get_or_make(key, make)


def _shape(shape) -> SimpleNamespace:
    return SimpleNamespace(shape=tuple(shape))


def host_gemm(dev, a: np.ndarray, b: np.ndarray, c, alpha, beta, ta: str, tb: str, prec, config, db,
              out: np.ndarray | None = None) -> np.ndarray:
    """numpy.matmul's batched product on the device (``gemmtune.gemm`` with operands of more than
    two dimensions): batch dimensions broadcast, each operand stacked once (a stack of one matrix
    is shared by every problem, stride 0), one launch."""
    m, n, ka = product_shape(_shape(a.shape[-2:]), _shape(b.shape[-2:]), None, ta, tb)
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], *(() if c is None else (c.shape[:-2],)))
    except ValueError:
        shapes = ", ".join("x".join(map(str, x.shape)) for x in (a, b, c) if x is not None)
        raise OperandError(f"the batch dimensions of {shapes} do not broadcast together") from None
    shape, count = (*batch, m, n), math.prod(batch)
    if c is not None and any(x not in (1, y) for x, y in zip(c.shape[-2:], (m, n))):
        # as beta * c is added in numpy: c broadcasts to the result
        raise OperandError(f"c ({'x'.join(map(str, c.shape))}) does not broadcast to the result "
                           f"({'x'.join(map(str, shape))})")
    check_out(out, shape, prec)
    if count == 0 or m == 0 or n == 0 or ka == 0:
        # BLAS's empty products, as gemm's: K = 0 gives beta * c (c unread at beta 0)
        if ka == 0 and c is not None and beta != 0:
            return deliver(out, (prec.dtype.type(beta) * np.broadcast_to(c, shape)).astype(prec.dtype))
        return deliver(out, np.zeros(shape, dtype=prec.dtype))
    what = f"{'x'.join(map(str, a.shape))} times {'x'.join(map(str, b.shape))} in precision {prec.code}"

    def stacked(x):
        # One matrix for all: passed once, stride 0; else every problem's, contiguous.
        if math.prod(x.shape[:-2]) == 1:
            return x.reshape(x.shape[-2:]), 0
        return np.broadcast_to(x, (*batch, *x.shape[-2:])).reshape(count, *x.shape[-2:]), x.shape[-2] * x.shape[-1]

    (sa, stride_a), (sb, stride_b) = stacked(a), stacked(b)
    with_c = c is not None and beta != 0
    operands = {"a": sa.size * prec.bytes, "b": sb.size * prec.bytes, "c": count * m * n * prec.bytes}
    check_device_memory(dev.info, what, operands)
    cfg = batch_config(config, dev.info, prec, (n, m, ka), (tb, ta), db, count)
    # Row-major C = op(a) op(b) is column-major C^T = op(b)^T op(a)^T, as in gemm: b is A.
    problem = Problem(n, m, ka, tb, ta, batch=count, strides=(stride_b, stride_a, m * n))
    plan = FAMILIES[cfg.kernel].plan(cfg.params, prec, problem, dev.queue.device, dev.info.compute_units)
    buffers = {**operands, **{s.name: s.nbytes for s in plan.scratch}}
    check_device_memory(dev.info, what, buffers)
    in_place = in_host_memory(dev.queue.device)
    check_host_memory(what, {"result": count * m * n * prec.bytes, "stacked a": operands["a"],
                             "stacked b": operands["b"], **({"stacked c": operands["c"]} if with_c else {}),
                             **device_buffers_in_host(dev.info, buffers, operands if in_place else ())})
    with out_of_memory_as_error(what):
        op = _operation(dev.queue, dev.info, cfg, prec, problem, what, _operations)
        call = HostCall(dev.context, dev.queue, in_place, FAMILIES[cfg.kernel].takes_views)
        return deliver(out, call.product(op, sa, sb, shape, prec, c if with_c else None, out, alpha, beta))


def is_batch(a, b, c) -> bool:
    """Whether ``Gemm`` was called with a batch: a list of views, or a 3-D array."""
    return any(isinstance(x, (list, tuple)) or getattr(x, "ndim", 2) == 3 for x in (a, b, c))


def _scalars(g, alpha, beta) -> None:
    scalars = (type(alpha), alpha, type(beta), beta)   # types first: an array never meets ==
    if scalars != g._scalars:
        check_scalars(g.precision, alpha, beta)
        g._scalars = scalars


def _launch(g, op, a, b, c, alpha, beta, waits, offsets=(0, 0, 0), table=None, outputs=()) -> list:
    try:
        events = op.enqueue(b, a, c, alpha, beta, waits or None, offsets, table)
    except (cl.Error, MemoryError) as e:
        error = out_of_memory(e, "a batched GEMM")
        if error is None:
            raise
        raise error from None
    for x in outputs:
        x.add_event(events[-1])
    g.last_operation, g.last_events = op, events
    return events


def call(g, a, b, c, alpha, beta, trans_a, trans_b):
    """``Gemm(...)(a, b, c)`` with a batch: 3-D arrays or lists of views."""
    ta, tb = op_flag("trans_a", trans_a), op_flag("trans_b", trans_b)
    if g.complex3m is not None:
        raise OperandError("complex_algorithm='3m' takes one problem at a time, not a batch")
    if any(isinstance(x, (list, tuple)) for x in (a, b, c)):
        return enqueue_array(g, a, b, c, alpha, beta, ta, tb)
    return enqueue_strided(g, a, b, c, alpha, beta, ta, tb)


# All that ``batch_view``/``view`` and the plan read of an operand: the buffer itself (held, so
# that no other buffer takes its id), shape, strides, offset, dtype and context. An attrgetter:
# the pointer-array form takes it of every view on every call.
_operand_key = operator.attrgetter("base_data", "shape", "strides", "offset", "dtype", "context")


def _same_call(g, key) -> tuple | None:
    """What the last batched call of ``g`` prepared, where its key is ``key``: operands equal in
    all that their checks read pass them again, so only the scalars and the events are new."""
    last = g._batched
    return last[1] if last is not None and last[0] == key else None


def enqueue_strided(g, a, b, c, alpha, beta, ta: str, tb: str):
    """``Gemm`` on 3-D arrays: problem z is a[z], b[z], c[z]; a or b 2-D (or of one matrix) is
    shared by all. One launch, the batch strides kernel arguments."""
    if not isinstance(c, cla.Array) or c.ndim != 3:
        raise OperandError("c must be a 3-D pyopencl array (a batch of matrices) where a or b is one")
    key = (("strided", ta, tb, *map(_operand_key, (a, b, c)))
           if all(type(x) is cla.Array for x in (a, b, c)) else None)   # others: checked in full
    prepared = _same_call(g, key) if key is not None else None
    if prepared is None:
        prepared = _prepare_strided(g, a, b, c, ta, tb)
        g._batched = (key, prepared)
    _scalars(g, alpha, beta)
    op, offsets = prepared
    if op is not None:
        _launch(g, op, a.base_data, b.base_data, c.base_data, alpha, beta, [*a.events, *b.events, *c.events],
                offsets, outputs=(c,))
    return c


def _prepare_strided(g, a, b, c, ta: str, tb: str) -> tuple:
    """Every check of a strided batch, then its operation (None: nothing to compute) and the
    operands' first elements."""
    prec, context = g.precision, g.queue.context
    count = c.shape[0]
    known, now = g._buffers, {}
    (va, sa), (vb, sb), (vc, sc) = (batch_view(name, x, prec, context, known, now, count)
                                    for name, x in (("a", a), ("b", b), ("c", c)))
    g._buffers = now
    m, n, ka = product_shape(_shape(a.shape[-2:]), _shape(b.shape[-2:]), _shape(c.shape[1:]), ta, tb)
    item = prec.bytes
    for name, x, vx, sx in (("a", a, va, sa), ("b", b, vb, sb)):
        if overlap(vc, c.shape[1:], vx, x.shape[-2:], prec.dtype, (count, sc * item), (count, sx * item)):
            raise OperandError(f"c shares elements with {name} in one buffer: the kernels would read "
                               f"{name} where they have already written c")
    if count == 0 or m == 0 or n == 0:
        return None, None
    problem = Problem(n, m, ka, tb, ta, vb.ld, va.ld, vc.ld, bool(va.first or vb.first or vc.first),
                      batch=count, strides=(sb, sa, sc))
    what = f"a batch of {count}: {m}x{ka} times {ka}x{n} in precision {prec.code}"
    cfg = batch_config(g.config, g.info, prec, (n, m, ka), (tb, ta), g.db, count)
    return _operation(g.queue, g.info, cfg, prec, problem, what, g._calls), (vb.first, va.first, vc.first)


def _problems(name: str, x, count: int) -> list:
    if isinstance(x, (list, tuple)):
        if len(x) != count:
            raise OperandError(f"{name} holds {len(x)} problems, c {count}")
        return list(x)
    return [x] * count   # one matrix for every problem


def _check_disjoint(views: dict[str, list], shapes: dict[str, tuple], dtype) -> None:
    """No c shares an element with another c, or with any a or b: the problems run at once.
    Byte ranges first (sorted, so that only views whose ranges meet are compared exactly)."""
    spans = sorted((v.start, v.end, name, i) for name, vs in views.items() for i, v in enumerate(vs)
                   if v.root is not None)
    active = []
    for start, end, name, i in spans:
        active = [s for s in active if s[1] > start]
        for _, _, other, j in active:
            if "c" not in (name, other) or (name == other and i == j):
                continue
            x, y = views[name][i], views[other][j]
            if overlap(x, shapes[name], y, shapes[other], dtype):
                what = "another problem's c" if name == other else f"{'a' if 'a' in (name, other) else 'b'}"
                raise OperandError(f"c of problem {i if name == 'c' else j} shares elements with {what}: "
                                   f"each problem needs a c of its own, apart from every a and b")
        active.append((start, end, name, i))


def _array_key(ta: str, tb: str, operands) -> tuple | None:
    """``_operand_key`` of every view of a pointer-array call; None where one is not exactly a
    pyopencl array (a subclass is checked in full on every call)."""
    lists = [x if isinstance(x, (list, tuple)) else (x,) for x in operands]
    if any(set(map(type, xs)) - {cla.Array} for xs in lists):
        return None
    return ("array", ta, tb, *(tuple(map(_operand_key, xs)) if xs is x else _operand_key(x)
                               for xs, x in zip(lists, operands)))


def enqueue_array(g, a, b, c, alpha, beta, ta: str, tb: str):
    """``Gemm`` on lists of 2-D views (the pointer-array form): problem z is a[z], b[z], c[z];
    an a or b given as one array is every problem's. Problems of the same buffers and leading
    dimensions go as one launch, their offsets in a table."""
    if not isinstance(c, (list, tuple)):
        raise OperandError("c must be a list of 2-D arrays where a or b is one")
    count = len(c)
    ops = {name: _problems(name, x, count) for name, x in (("a", a), ("b", b), ("c", c))}
    key = _array_key(ta, tb, (a, b, c))
    launches = _same_call(g, key) if key is not None else None
    if launches is None:
        launches = _prepare_array(g, ops, ta, tb)
        g._batched = (key, launches)
    _scalars(g, alpha, beta)
    for op, buffers, offsets, table, members in launches:
        waits = [e for z in members for name in "abc" for e in ops[name][z].events]
        _launch(g, op, *buffers, alpha, beta, waits, offsets, table, outputs=[ops["c"][z] for z in members])
    return c


def _prepare_array(g, ops: dict[str, list], ta: str, tb: str) -> list[tuple]:
    """Every check of a pointer-array batch, then its launches: (operation, the buffers of a, b
    and c, the first elements of a launch of one problem, the offsets' table of several, the
    problems)."""
    prec, context = g.precision, g.queue.context
    count = len(ops["c"])
    known, now = g._buffers, {}
    views = {name: [view(name, x, prec, context, known, now) for x in xs] for name, xs in ops.items()}
    g._buffers = now
    shapes = {}
    for name, xs in ops.items():
        shapes[name] = xs[0].shape if xs else (0, 0)
        if any(x.shape != shapes[name] for x in xs):
            raise OperandError(f"{name}'s matrices must all have one shape, got "
                               f"{sorted({'x'.join(map(str, x.shape)) for x in xs})}")
    m, n, ka = product_shape(_shape(shapes["a"]), _shape(shapes["b"]), _shape(shapes["c"]), ta, tb)
    # a shared matrix is compared once
    distinct = {name: list({id(x): v for x, v in zip(ops[name], vs)}.values()) for name, vs in views.items()}
    _check_disjoint({**distinct, "c": views["c"]}, shapes, prec.dtype)
    if count == 0 or m == 0 or n == 0:
        return []
    groups: dict[tuple, list[int]] = {}
    for z in range(count):
        key = tuple((id(ops[name][z].base_data), views[name][z].ld) for name in "abc")
        groups.setdefault(key, []).append(z)
    item_cfg = batch_config(g.config, g.info, prec, (n, m, ka), (tb, ta), g.db, count)
    launches = []
    for members in groups.values():
        z0 = members[0]
        va, vb, vc = (views[name][z0] for name in "abc")
        problem = Problem(n, m, ka, tb, ta, vb.ld, va.ld, vc.ld, True, batch=len(members), table=True)
        what = f"a batch of {len(members)}: {m}x{ka} times {ka}x{n} in precision {prec.code}"
        op = _operation(g.queue, g.info, item_cfg, prec, problem, what, g._calls)
        buffers = tuple(ops[name][z0].base_data for name in "abc")
        if len(members) == 1:
            launches.append((op, buffers, (vb.first, va.first, vc.first), None, members))
            continue
        offsets = np.array([(views["b"][z].first, views["a"][z].first, views["c"][z].first) for z in members],
                           np.int32)
        with out_of_memory_as_error(what):
            table = cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=offsets)
        launches.append((op, buffers, (0, 0, 0), table, members))
    return launches
