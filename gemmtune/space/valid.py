"""The valid set of a space on a device and precision: listed, streamed, counted, sampled and
explained, chunk by chunk of the Cartesian product (constraints evaluated on numpy columns), so
that nothing needs the whole list of millions of configurations. Nothing here imports OpenCL.
"""

from __future__ import annotations

import bisect
import itertools
import math
import multiprocessing as mp
import os
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from gemmtune import space as space_module
from gemmtune.families import FAMILIES, Constraint
from gemmtune.devices.info import DeviceInfo, forking_is_safe
from gemmtune.precision import Precision
from gemmtune.space import Config, FamilySpace, Space, require_precision


def valid_configs(space: Space, dev: DeviceInfo, prec: Precision) -> list[Config]:
    """Every configuration of the space that breaks no constraint on this device and precision."""
    require_precision(dev, prec)
    with np.errstate(divide="ignore", invalid="ignore"):
        return [c for fs in space.families for c in fs.valid(dev, prec)]


def _quietly(chunks: Iterator) -> Iterator:
    """The items of ``chunks``, each computed with numpy's division warnings off (the
    constraints divide by parameters that other constraints require to be positive) and
    handed on with the caller's settings."""
    while True:
        with np.errstate(divide="ignore", invalid="ignore"):
            item = next(chunks, None)
        if item is None:
            return
        yield item


def iter_valid_columns(space: Space, dev: DeviceInfo, prec: Precision) -> Iterator[tuple[FamilySpace, dict[str, np.ndarray]]]:
    """The valid points as columns with their family, chunk by chunk, in ``valid_configs`` order."""
    require_precision(dev, prec)
    for fs in space.families:
        for cols in _quietly(fs.valid_chunks(dev, prec)):
            yield fs, cols


def iter_valid_configs(space: Space, dev: DeviceInfo, prec: Precision) -> Iterator[Config]:
    """``valid_configs`` one at a time: memory for one chunk of the product, not for the list."""
    for fs, cols in iter_valid_columns(space, dev, prec):
        yield from fs.to_configs(cols)


def _chunk_counts(space: Space, dev: DeviceInfo, prec: Precision) -> list[tuple[FamilySpace, int, int]]:
    """(family, chunk index, valid points) of every chunk of the product, in order."""
    require_precision(dev, prec)
    counts = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for fs in space.families:
            layout = fs.valid_layout(dev, prec)
            counts += [(fs, j, layout.repeats * int(np.count_nonzero(fs.chunk_mask(j, layout, dev, prec, reduced=True))))
                       for j in range(fs.chunk_count(layout))]
    return counts


def count_valid(space: Space, dev: DeviceInfo, prec: Precision) -> int:
    """``len(valid_configs(...))`` from the constraints' masks alone: no configuration is built."""
    return sum(n for _, _, n in _chunk_counts(space, dev, prec))


# Points of the product drawn per configuration wanted before sample_valid stops drawing and
# enumerates: a space with less than one valid point in 64 is cheaper to walk.
DRAWS_PER_PICK = 64


def sample_valid(space: Space, dev: DeviceInfo, prec: Precision, n: int, rng: random.Random) -> list[Config]:
    """``n`` distinct valid configurations drawn uniformly, in random order; every valid one, in
    ``valid_configs`` order, where there are no more than ``n``.

    Draws random points of the Cartesian product and keeps the valid ones, so that it costs
    about ``n`` divided by the valid share of the product, not a pass over the whole space; a
    space whose valid share is too small for that, or whose product is smaller than a chunk, is
    enumerated instead. ``rng`` is left untouched where a small product has no more than ``n``.
    """
    require_precision(dev, prec)
    if n <= 0:
        return []
    if space.size <= space_module.CHUNK_ROWS:
        everything = valid_configs(space, dev, prec)
        return everything if len(everything) <= n else rng.sample(everything, n)
    starts = list(itertools.accumulate((fs.size for fs in space.families), initial=0))
    gen = np.random.default_rng(rng.getrandbits(64))
    seen: set[int] = set()
    found: list[Config] = []
    budget = max(DRAWS_PER_PICK * n, space_module.CHUNK_ROWS)
    drawn_total = valid_total = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        while len(found) < n and budget > 0:
            share = max(valid_total / drawn_total if drawn_total else 1.0, 1 / DRAWS_PER_PICK)
            want = min(budget, space_module.CHUNK_ROWS, max(1024, math.ceil(1.2 * (n - len(found)) / share)))
            budget -= want
            drawn = gen.integers(0, space.size, size=want)
            _, first = np.unique(drawn, return_index=True)
            drawn = np.asarray([i for i in drawn[np.sort(first)].tolist() if i not in seen], dtype=np.int64)
            seen.update(drawn.tolist())
            batch: list[tuple[int, Config]] = []
            for f, fs in enumerate(space.families):
                where = np.flatnonzero((drawn >= starts[f]) & (drawn < starts[f + 1]))
                if len(where):
                    cols = fs.points(drawn[where] - starts[f])
                    ok = fs.mask(cols, dev, prec)
                    batch += zip(where[ok].tolist(), fs.to_configs({k: v[ok] for k, v in cols.items()}))
            batch.sort(key=lambda t: t[0])   # in the order drawn, whatever the family
            found += [c for _, c in batch]
            drawn_total += len(drawn)
            valid_total += len(batch)
    if len(found) >= n:
        return found[:n]
    # Too few valid points to find by chance: one pass counts them, another picks them.
    view = ValidConfigs(space, dev, prec)
    if len(view) <= n:
        return list(view)
    return view.take(rng.sample(range(len(view)), n))


class ValidConfigs(Sequence):
    """The valid configurations of a space on a device and precision, as a sequence in
    ``valid_configs`` order that is never held whole: ``len`` sums the constraints' masks (once),
    indexing evaluates one chunk of the product, iteration goes chunk by chunk, and ``sample``
    draws from the product.

    A search proposes from it without building the 2.36 million configurations of the shipped
    space for s on PoCL (10 s and 1 GB) before its first trial.
    """

    def __init__(self, space: Space, dev: DeviceInfo, prec: Precision):
        require_precision(dev, prec)
        self.space, self.dev, self.prec = space, dev, prec
        self._counts: list[tuple[FamilySpace, int, int]] | None = None
        self._ends: list[int] = []
        self._aside = None   # (pid that started it, process, pipe) of ``count_aside``

    @property
    def _count_is_cheap(self) -> bool:   # counted already, or a product of one chunk
        return self._counts is not None or self.space.size <= space_module.CHUNK_ROWS

    def count_aside(self) -> None:
        """Start counting in a forked process, for ``len`` to read later. A search's summary
        says how many configurations are valid, and for a GPU's space the count takes seconds
        (4.5 s for z on the H200, more beside busy compilers): the search would otherwise wait
        for it after its last trial. A small product counts when asked, and so does a platform
        where forking a process with threads is not safe (``info.forking_is_safe``)."""
        if self._count_is_cheap or self._aside is not None or not forking_is_safe():
            return
        receive, send = mp.Pipe(duplex=False)
        process = mp.get_context("fork").Process(target=_count_into, args=(self, send, os.getpid()),
                                                 name="gemmtune-count", daemon=True)
        process.start()
        send.close()
        self._aside = (os.getpid(), process, receive)

    def _counted_aside(self) -> list[tuple[FamilySpace, int, int]] | None:
        """What ``count_aside`` counted, waiting for it; None where it failed or another process
        (a fork of this one) asks."""
        pid, process, receive = self._aside
        self._aside = None
        if pid != os.getpid():
            return None
        try:
            counted = receive.recv() if receive.poll(ASIDE_WAIT_S) else None
        except (EOFError, OSError):
            counted = None
        finally:
            receive.close()
            process.join(1)
            if process.is_alive():
                process.kill()
        return [(self.space.families[f], j, n) for f, j, n in counted] if counted is not None else None

    def _index(self) -> list[int]:
        if self._counts is None:
            counted = self._counted_aside() if self._aside is not None else None
            self._counts = counted if counted is not None else _chunk_counts(self.space, self.dev, self.prec)
            self._ends = list(itertools.accumulate(n for _, _, n in self._counts))
        return self._ends

    def __len__(self) -> int:
        ends = self._index()
        return ends[-1] if ends else 0

    def __bool__(self) -> bool:
        # one valid point drawn at random is enough, and far cheaper than counting them all
        if self._counts is not None:
            return len(self) > 0
        return bool(sample_valid(self.space, self.dev, self.prec, 1, random.Random(0)))

    def take(self, indices: list[int]) -> list[Config]:
        """The configurations at these positions, in the order given, in one pass over the
        chunks that hold them."""
        ends, size = self._index(), len(self)
        wanted: dict[int, list[int]] = {}   # chunk -> positions in it
        for i in indices:
            if not -size <= i < size:
                raise IndexError("valid configuration index out of range")
            i %= size
            c = bisect.bisect_right(ends, i)
            wanted.setdefault(c, []).append(i - (ends[c - 1] if c else 0))
        got: dict[int, Config] = {}
        with np.errstate(divide="ignore", invalid="ignore"):
            for c, local in sorted(wanted.items()):
                fs, j, _ = self._counts[c]
                layout = fs.valid_layout(self.dev, self.prec)   # as counted
                cols = fs.chunk(j, layout)
                rows = np.flatnonzero(fs.chunk_mask(j, layout, self.dev, self.prec))[local]
                start = ends[c - 1] if c else 0
                got.update(zip((start + r for r in local), fs.to_configs({k: v[rows] for k, v in cols.items()})))
        return [got[i % size] for i in indices]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(list(range(*i.indices(len(self)))))
        return self.take([i])[0]

    def __iter__(self) -> Iterator[Config]:
        return iter_valid_configs(self.space, self.dev, self.prec)

    def __contains__(self, config) -> bool:
        return (isinstance(config, Config) and self.space.allows(config)
                and FAMILIES[config.kernel].broken(config.params, self.dev, self.prec) is None)

    def sample(self, n: int, rng: random.Random) -> list[Config]:
        return sample_valid(self.space, self.dev, self.prec, n, rng)

    def pick(self, rng: random.Random) -> Config:
        """One valid configuration, drawn uniformly: by position where the set is counted or
        small, else from the product, which needs no count (4.5 s for z's H200 space)."""
        if self._count_is_cheap:
            return rng.choice(self)
        return self.sample(1, rng)[0]


# How long ``len`` waits for a count started aside before counting itself: far longer than any
# count takes, short of a hang (a fork can inherit a lock that another thread held).
ASIDE_WAIT_S = 120


def _count_into(valid: ValidConfigs, send, parent: int) -> None:
    """The forked counter: ``_chunk_counts`` sent as (family position, chunk, valid points)."""
    from gemmtune.execution.child import die_with_parent

    die_with_parent(parent)   # a count takes seconds to minutes: none without the search
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the search's to handle
    position = {id(fs): i for i, fs in enumerate(valid.space.families)}
    send.send([(position[id(fs)], j, n) for fs, j, n in _chunk_counts(valid.space, valid.dev, valid.prec)])
    send.close()


@dataclass(frozen=True)
class ConstraintCount:
    kernel: str
    constraint: Constraint
    removed: int   # configurations for which this is the first constraint broken
    broken: int    # configurations that break it, whatever else they break


def explain(space: Space, dev: DeviceInfo, prec: Precision) -> list[ConstraintCount]:
    require_precision(dev, prec)
    counts = []
    for fs in space.families:
        removed = dict.fromkeys(fs.family.constraints, 0)
        broken = dict.fromkeys(fs.family.constraints, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            for cols in fs.chunks():
                alive = True  # obeys every constraint checked so far
                for c, ok in fs.checks(cols, dev, prec):
                    removed[c] += int((alive & ~ok).sum())
                    broken[c] += int((~ok).sum())
                    alive = alive & ok
        counts += [ConstraintCount(fs.family.name, c, removed[c], broken[c]) for c in fs.family.constraints]
    return counts
