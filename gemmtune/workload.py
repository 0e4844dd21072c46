"""``gemmtune search --shapes``: tune every problem of a workload under one time budget.

Each problem is searched in a study of its own (so a second run resumes each where it
stopped), in the order given. The budget left is shared equally among the problems left, so
time a problem does not use (it ran out of trials, or its space) goes to the ones after it.
Each search starts from its baseline and then the best configurations already recorded for
the nearest other problems of the device and precision (nearest in log size), before the
performance model's picks and the sampler: tilings carry over between neighbouring shapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from gemmtune.shapes import Shape

NEARBY = 5           # configurations of the nearest tuned shapes measured first
MIN_SECONDS = 5.0    # a problem gets at least this much of the budget, or is left for a later run


@dataclass(frozen=True)
class Step:
    """What the progress display shows when a problem's search starts."""
    index: int
    total: int
    shape: Shape
    seconds: float | None   # its share of the budget; None without --timeout
    nearby: int             # configurations of nearby shapes it starts from


def nearby_configs(url: str, dev, prec, shape: Shape, count: int = NEARBY) -> list:
    """The best recorded configurations of the ``count`` tuned shapes nearest ``shape`` (itself
    excluded), nearest first."""
    from gemmtune.tuned import shape_distance, tuned_shapes

    here = (shape.m, shape.n, shape.k)
    others = [t for t in tuned_shapes(url, dev, prec) if t.shape != here]
    others.sort(key=lambda t: shape_distance(t.shape, here))
    return list(dict.fromkeys(t.config for t in others[:count]))


def run_workload(req, shapes: list[Shape], progress=None, on_step: Callable[[Step], None] | None = None):
    """One search per problem of ``shapes`` (each with its precision) under ``req``'s budget:
    ``req.timeout`` for the whole workload, ``req.trials`` per problem. Returns the searches'
    summaries and the problems left for lack of time."""
    from gemmtune.device import resolve_device
    from gemmtune.precision import get_precision
    from gemmtune.search import run_search
    from gemmtune.store import database_url

    url = database_url(req.db)
    dev = resolve_device(req.device)
    deadline = None if req.timeout is None else time.monotonic() + req.timeout
    summaries, left = [], []
    for i, shape in enumerate(shapes):
        seconds = None
        if deadline is not None:
            seconds = (deadline - time.monotonic()) / (len(shapes) - i)
            if seconds < MIN_SECONDS:
                left = shapes[i:]
                break
        prec = get_precision(shape.precision or req.precision)
        start = nearby_configs(url, dev, prec, shape)
        if on_step:
            on_step(Step(i + 1, len(shapes), shape, seconds, len(start)))
        sub = replace(req, precision=prec.code, m=shape.m, n=shape.n, k=shape.k, timeout=seconds,
                      start=tuple(start), study=None)
        found = run_search(sub, progress)
        summaries += found
        if any(s.stopped_by == "interrupted" for s in found):
            left = shapes[i + 1:]
            break
    return summaries, left
