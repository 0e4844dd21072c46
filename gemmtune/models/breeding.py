"""The cost model's best configurations in a space too large to score whole.

A device's valid space holds millions of configurations (6.3 million s configurations on the
H200), and the cost model scores a few thousand a second. A random sample of thousands holds the
model's best only by luck: at s 1792 x 1536 x 1280, with the H200's 25 landscapes learned, the
best of four samples of 5,000 scored -0.09 to -0.14 (log GFLOP/s below the best), and the
128 x 128 tile that a 15-minute search found came first in a sample of 200,000 alone.

So, as Ansor searches its cost model, the best configurations scored so far breed: each child is
a parent with one to three parameters set to other values of the space, the valid ones are
scored, and the best of parents and children breed again. Five generations from each of those
four samples reached -0.090, that tile, in 0.4-0.7 s on a laptop's core (``tools/breed_bench.py``).
A parameter the model hardly reads can change in a child at no cost to its score, so the best
bred are often variants of one tile (the learned model's first three seeds there differ only in
WARPM and BANDM): they measure what the model cannot tell apart. Seeds kept two parameters apart
lost in the replays (docs/search.md, "Tried and not kept").

Pure Python; no OpenCL.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from gemmtune.space import Config

ROUNDS = 5      # generations bred from a sample
PARENTS = 32    # the best scored so far, that breed
CHILDREN = 32   # children drawn per parent and generation
MOST_CHANGED = 3   # parameters a child changes, at most


def mutant(config: Config, values: Mapping[str, Sequence[int]], rng: random.Random) -> Config:
    """``config`` with one to ``MOST_CHANGED`` of its parameters (of those the space varies) set to
    another value of ``values``; the same configuration where the space varies none."""
    varied = [name for name, choices in values.items() if len(choices) > 1 and name in config.params]
    if not varied:
        return config
    params = dict(config.params)
    for name in rng.sample(varied, min(len(varied), rng.randint(1, MOST_CHANGED))):
        params[name] = rng.choice([v for v in values[name] if v != params[name]])
    return Config.of(config.kernel, params)


def children(parents: Iterable[Config], values_of: Callable[[str], Mapping[str, Sequence[int]]],
             is_valid: Callable[[Config], bool], rng: random.Random, each: int = CHILDREN,
             known: Callable[[Config], bool] = lambda c: False) -> list[Config]:
    """Up to ``each`` distinct valid children of every parent (``values_of(kernel)``: the
    values each parameter of that family takes), none a parent or ``known``."""
    parents = list(parents)
    seen = set(parents)
    out = []
    for parent in parents:
        values = values_of(parent.kernel)
        for _ in range(each):
            child = mutant(parent, values, rng)
            if child not in seen:
                seen.add(child)
                if not known(child) and is_valid(child):
                    out.append(child)
    return out


def evolve(score: Callable[[list[Config]], np.ndarray], scored: Mapping[Config, float],
           values_of: Callable[[str], Mapping[str, Sequence[int]]], is_valid: Callable[[Config], bool],
           rng: random.Random, rounds: int = ROUNDS, parents: int = PARENTS, each: int = CHILDREN) -> dict[Config, float]:
    """The configurations bred from ``scored`` (configuration -> the model's score, higher
    better; ``score`` scores a list) in ``rounds`` generations, with their scores: the
    ``parents`` best of all scored so far breed ``each`` children apiece each generation."""
    every = dict(scored)
    bred: dict[Config, float] = {}
    for _ in range(rounds):
        best = sorted(every, key=every.__getitem__, reverse=True)[:parents]
        young = children(best, values_of, is_valid, rng, each, known=every.__contains__)
        if not young:
            break
        new = dict(zip(young, (float(s) for s in score(young))))
        every.update(new)
        bred.update(new)
    return bred
