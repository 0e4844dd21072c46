"""Breeding the cost model's best configurations (``gemmtune.models.breeding``) where a sample of the
space would hold them only by luck: the module alone, and the search's seeds."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_replay import gpu, landscape  # noqa: E402

from gemmtune.db.store import Store  # noqa: E402
from gemmtune.models import (
    breeding,  # noqa: E402
    learned,
)
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.space import Config, parse_space  # noqa: E402

VALUES = {"A": list(range(1, 33)), "B": list(range(1, 33)), "C": [0, 1], "D": [5]}


def point(**params) -> Config:
    return Config.of("toy", {"A": 1, "B": 1, "C": 0, "D": 5, **params})


def toy_score(configs):
    """Best at A 7, B 3, C 1: one hill, every step towards it better."""
    return np.array([-abs(c.params["A"] - 7) - abs(c.params["B"] - 3) - (c.params["C"] != 1) for c in configs], float)


def test_a_mutant_changes_one_to_three_varied_parameters_to_other_values_of_the_space():
    rng = random.Random(0)
    start = point()
    changed = []
    for _ in range(300):
        child = breeding.mutant(start, VALUES, rng)
        diff = {k for k in VALUES if child.params[k] != start.params[k]}
        assert 1 <= len(diff) <= breeding.MOST_CHANGED and "D" not in diff   # D has one value: never changed
        assert all(child.params[k] in VALUES[k] for k in VALUES) and child.kernel == "toy"
        changed.append(len(diff))
    assert set(changed) == {1, 2, 3}
    assert breeding.mutant(start, {"D": [5]}, rng) == start   # nothing to vary


def test_children_are_valid_distinct_and_neither_parents_nor_known():
    rng = random.Random(1)
    parents = [point(), point(A=2)]
    known = {point(A=3), point(B=2)}
    valid = lambda c: c.params["A"] + c.params["B"] <= 9   # noqa: E731
    kids = breeding.children(parents, lambda kernel: VALUES, valid, rng, each=40, known=known.__contains__)
    assert kids and len(kids) == len(set(kids)) and len(kids) <= 80
    assert all(valid(c) and c not in parents and c not in known for c in kids)
    assert not breeding.children(parents, lambda kernel: VALUES, lambda c: False, rng)


def test_breeding_climbs_from_a_poor_sample_to_the_models_best():
    rng = random.Random(2)
    every = [point(A=a, B=b, C=c) for a in VALUES["A"] for b in VALUES["B"] for c in VALUES["C"]]
    poor = [c for c in every if c.params["A"] <= 3]   # far from the hill's top, which is A 7
    sample = rng.sample(poor, 10)
    scored = dict(zip(sample, toy_score(sample)))
    bred = breeding.evolve(toy_score, scored, lambda kernel: VALUES, lambda c: True, rng)
    assert point(A=7, B=3, C=1) in bred and bred[point(A=7, B=3, C=1)] == 0.0
    assert not set(bred) & set(sample)
    assert all(bred[c] == toy_score([c])[0] for c in bred)
    # One small generation from the same sample does not get there: the rounds do the climbing.
    once = breeding.evolve(toy_score, scored, lambda kernel: VALUES, lambda c: True, random.Random(2), rounds=1, each=2)
    assert len(once) <= 20 and max(once.values()) < 0


SPACE = """[xgemm_k5]
TSM = [16, 32, 64, 128]
TSN = [16, 32, 64, 128]
TSK = [8, 16, 32, 64]
WPTN = [4]
PAD = [1]
TRANSPOSEX = [16]
TRANSPOSEY = [16]
"""


def test_a_searchs_seeds_are_bred_where_the_space_is_larger_than_the_sample(tmp_path, monkeypatch):
    """The model's own first pick among the seeds (``learned.LEARNED_FIRST``) is its best over
    the whole valid space, which the sample drawn for the seeds does not hold."""
    from gemmtune.search import opening
    from gemmtune.search.prior import PriorModels
    from gemmtune.space.valid import ValidConfigs

    def speed(c):   # wide N tiles and small K tiles pay; one configuration stands out
        p = c.params
        return p["TSN"] / (1 + p["TSK"] / 8) * (1.5 if (p["TSM"], p["TSN"], p["TSK"]) == (64, 128, 8) else 1.0)

    db = tmp_path / "other.db"
    landscape(db, lambda c: 512 * speed(c), study="at-512", m=512)
    store = Store(f"sqlite:///{db}", create=False)
    prior = store.frame()   # every row: another study's
    store.close()
    dev, s = gpu(), get_precision("s")
    valid = ValidConfigs(parse_space(SPACE, "test"), dev, s)
    problem = learned.DeviceProblem(dev, s, 256, 256, 256)
    priors = PriorModels(f"sqlite:///{db}", [dev], early=False)
    fitted = priors.model(prior, dev, None)
    everything = list(valid)
    predicted = fitted.predict(learned.features(everything, problem))[0]
    best = everything[int(np.argmax(predicted))]
    assert len(everything) > 6 and sorted(predicted)[-2] < predicted.max()   # one best, in a space larger than the sample
    monkeypatch.setattr(opening, "MODEL_SAMPLE", 6)

    def seeds(rng_seed):
        return opening.model_seeds(valid, 10, problem, random.Random(rng_seed), set(), [], prior, priors)

    drawn = [valid.sample(6, random.Random(seed)) for seed in range(4)]
    unlucky = [seed for seed in range(4) if best not in drawn[seed]]
    assert unlucky   # a sample of 6 of the space's configurations lacks the best
    for seed in unlucky:
        first, parents = seeds(seed)
        assert first[0] == best
        # The bred sample's best, best first, go to the strategy: its first ranking breeds on from them.
        assert parents[0] == best and len(parents) == min(breeding.PARENTS, len(set(parents)))
        scores = fitted.score(parents, problem)
        assert list(scores) == sorted(scores, reverse=True)
    monkeypatch.setattr(opening, "evolve", lambda *args: {})   # unbred: the model's pick is the sample's best
    assert all(best not in seeds(seed)[0] + seeds(seed)[1] for seed in unlucky)
