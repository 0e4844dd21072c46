"""The opening: what a search measures before its strategy proposes anything.

1. The baseline: the shipped default for the problem (``defaults.default_config``), or the valid
   configuration nearest it where the space leaves it out.
2. The nearest tuned problems' bests (``tuned.nearby_configs``), or ``--start``: tilings carry
   over between neighbouring shapes.
3. The seeds where the strategy takes them (``learned.seeds``): the analytic model's best tilings,
   each nearest a configuration of 1 or 2 and as a cost model fitted to the device's other
   studies picks it.

A search (``study_search``) and a replay (``replay``) both compose it with ``opening``, so a
replay measures first what a search would.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Sequence

import pandas as pd

from gemmtune.models import learned
from gemmtune.models.breeding import PARENTS, evolve
from gemmtune.search.prior import PriorModels
from gemmtune.space import Config
from gemmtune.space.valid import ValidConfigs

MODEL_SAMPLE = 5000  # configurations ranked by the model for seeding; the whole space may be 10^5


def opening(baseline: Config | None, nearby: Iterable[Config], seeds: Iterable[Config], skip=frozenset(),
            allowed: Callable[[Config], bool] = lambda c: True) -> list[Config]:
    """The baseline, then the ``nearby`` configurations that are not the baseline and ``allowed``,
    then the seeds but the baseline; none whose key is in ``skip`` (measured before) but seeds,
    which are drawn without them."""
    base = baseline.key if baseline is not None else None
    first = [baseline] if baseline is not None and base not in skip else []
    passed = {base, *skip}
    first += [c for c in nearby if c.key not in passed and allowed(c)]
    return first + [c for c in seeds if c.key != base]


def breed(valid: ValidConfigs, score, scored: dict[Config, float], rng: random.Random) -> dict[Config, float]:
    """The valid configurations bred from ``scored`` by the model's ``score`` (``evolve``), with
    their scores: children take other values of the space's parameters."""
    return evolve(score, scored, lambda kernel: valid.space.family(kernel).values, valid.__contains__, rng)


def model_seeds(valid: ValidConfigs, count: int, problem: learned.DeviceProblem, rng: random.Random, skip: set,
                near: Sequence[Config], prior: pd.DataFrame | None,
                priors: PriorModels) -> tuple[list[Config], list[Config]]:
    """A search's seeds (``learned.seeds``), none of ``skip``, drawn from a random sample when the
    space is large; ``prior`` (the device's other studies) teaches a model whose picks are among
    them (``priors``: fitted early where it has the same rows). Second, where the sample was
    bred, its ``breeding.PARENTS`` best by the model, best first: a strategy that breeds goes on
    from them."""
    sample = valid.sample(MODEL_SAMPLE, rng)   # drawn from the product: the space is never listed
    fitted, scores = priors.model(prior, problem.dev, problem.peaks), None
    if fitted is not None and len(sample) >= MODEL_SAMPLE:
        # A sample holds the model's best only by luck where the space is larger: breed it,
        # and hand the seeds the scores (the sample's are a third of a second on a laptop).
        scores = dict(zip(sample, fitted.score(sample, problem)))
        scores.update(breed(valid, lambda configs: fitted.score(configs, problem), scores, rng))
        sample = list(scores)
    sample = [c for c in sample if c.key not in skip]
    parents = [] if scores is None else sorted(sample, key=scores.__getitem__, reverse=True)[:PARENTS]
    return learned.seeds(sample, problem, count, near, fitted, scores), parents
