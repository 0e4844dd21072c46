"""``gemmtune search --shapes``: tune every problem of a workload under one time budget.

Each problem is searched in a study of its own (so a second run resumes each where it
stopped), in the order given. A time budget goes out in two passes: part of it evenly, the rest
where the first pass paid (see ``run_workload``); time a problem does not use (it ran out of
trials, or of its space) goes to the ones after it.
Each search starts from its baseline and then the best configurations already recorded for
the nearest other problems of the device and precision (nearest in log size), before the
performance model's picks and the sampler: tilings carry over between neighbouring shapes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

from gemmtune.errors import GemmtuneError
from gemmtune.shapes import Shape
from gemmtune.db.tuned import nearby_configs

NEARBY = 5           # configurations of the nearest tuned problems measured first
MIN_SECONDS = 5.0    # a problem after the first gets at least this much of the budget, or is left for a later run
FIRST_SHARE = 0.4    # of a time budget, spread evenly over the problems first
GAIN_FLOOR = 0.05    # the least weight a problem's first pass earns it in the second


@dataclass(frozen=True)
class Step:
    """What the progress display shows when a problem's search starts."""
    index: int
    total: int
    shape: Shape
    seconds: float | None   # its share of the budget; None without --timeout
    nearby: int             # configurations of nearby shapes it starts from
    second: bool = False    # the second pass, where the first paid


def run_workload(req, shapes: list[Shape], progress=None, on_step: Callable[[Step], None] | None = None):
    """One search per problem of ``shapes`` (each with its precision) under ``req``'s budget:
    ``req.timeout`` for the whole workload, ``req.trials`` per problem and pass. Returns one
    summary per problem searched and the problems left for lack of time.

    The problems share one set of timing workers and compiler processes (``search.Testbed``). With
    a time budget and several problems the budget goes out in two passes: FIRST_SHARE of it
    evenly, then the rest in proportion to what each problem's first pass gained over its
    baseline (at least GAIN_FLOOR), so that time goes where searching paid."""
    from gemmtune import search as searching
    from gemmtune.devices.opencl import resolve_device
    from gemmtune.precision import get_precision

    if req.timeout is not None and not 0 < req.timeout < math.inf:   # nan is neither
        raise GemmtuneError(f"a workload's timeout must be a positive number of seconds, got {req.timeout!r}")
    dev = resolve_device(req.device)
    deadline = None if req.timeout is None else time.monotonic() + req.timeout
    found: dict[Shape, object] = {}   # shape -> its summary so far (trials added up over passes)
    precisions = {shape: get_precision(shape.precision or req.precision) for shape in shapes}

    def search(testbed, i: int, total: int, shape: Shape, seconds: float | None, second: bool = False) -> bool:
        prec = precisions[shape]
        start = nearby_configs(testbed.db, dev, prec, shape.m, shape.n, shape.k, shape.trans_a + shape.trans_b,
                               NEARBY, shape.batch)
        if on_step:
            on_step(Step(i, total, shape, seconds, len(start), second))
        sub = replace(req, precision=prec.code, m=shape.m, n=shape.n, k=shape.k, trans_a=shape.trans_a,
                      trans_b=shape.trans_b, batch=shape.batch, timeout=seconds, start=tuple(start), study=None)
        for s in testbed.search(sub, progress):
            before = found.get(shape)
            found[shape] = s if before is None else replace(
                s, trials=before.trials + s.trials, elapsed=before.elapsed + s.elapsed,
                failures=before.failures + s.failures)
            if s.stopped_by == "interrupted":
                return False
        return True

    # Two passes only where the first still gives every problem its minimum.
    two_passes = (deadline is not None and len(shapes) > 1
                  and FIRST_SHARE * req.timeout / len(shapes) >= MIN_SECONDS)
    first_end = time.monotonic() + FIRST_SHARE * req.timeout if two_passes else deadline
    # A budget below the minimum is the first problem's whole share: it is searched, however briefly.
    least = None if deadline is None else min(MIN_SECONDS, req.timeout)
    with searching.Testbed(req, [(precisions[s], s.m, s.n, s.k, s.batch) for s in shapes]) as testbed:
        for i, shape in enumerate(shapes):
            seconds = None
            if deadline is not None:
                # Searches overrun their share a little (trials in flight finish): a late problem
                # still gets its minimum while the whole budget has it. The first problem always
                # runs, though starting the testbed took part of the budget.
                now = time.monotonic()
                seconds = max((first_end - now) / (len(shapes) - i), least)
                if i and now + seconds > deadline:
                    return list(found.values()), shapes[i:]
            if not search(testbed, i + 1, len(shapes), shape, seconds):
                return list(found.values()), shapes[i + 1:]
        if two_passes:
            gains = {s: max((found[s].speedup or 1.0) - 1.0, GAIN_FLOOR) for s in shapes}
            order = sorted(shapes, key=lambda s: -gains[s])
            for i, shape in enumerate(order):
                seconds = (deadline - time.monotonic()) * gains[shape] / sum(gains[s] for s in order[i:])
                if seconds >= MIN_SECONDS and not search(testbed, i + 1, len(order), shape, seconds, second=True):
                    break
    return [found[s] for s in shapes if s in found], []
