"""A learned cost model: trees fitted to everything a device measured, at every shape.

The analytic model (``gemmtune.models.analytic``) ranks configurations from first principles and ranks
them well only where its terms were designed (docs/search.md, "Search efficiency"). This
one learns from the results table instead, as AutoTVM and Ansor do: each ``ok`` or ``slow`` row
of the device is a configuration at a problem, described by numbers (``features``: the
family, every parameter, the problem, and the analytic model's terms), and its target is how
far it is from the best of its problem (log GFLOP/s relative to the problem's best), so that
problems of any size teach the same thing: which configurations come close to the best.

scikit-learn's extremely randomised trees fit it; the spread of the trees' predictions is the
model's uncertainty, which the learned strategy trades against the predicted speed. Pure Python
and numpy; no OpenCL.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from gemmtune.families import FAMILIES
from gemmtune.devices.info import DeviceInfo
from gemmtune.models import analytic
from gemmtune.precision import Precision, get_precision
from gemmtune.space import Config

TREES = 48
LEARNED_FIRST = 3   # the learned model's own best picks among the seeds (``seeds``)
MIN_ROWS = 8   # fewer rows than this teach nothing: the strategy leaves the choice to its sampler
# Every parameter name of every family, in one order: a configuration's value, or -1 where its
# family has no such parameter.
PARAMETERS = sorted({name for f in FAMILIES.values() for name in f.parameters})
KERNELS = list(FAMILIES)


@dataclass(frozen=True)
class DeviceProblem:
    """What a configuration is measured at: the device, precision, shape and ops."""
    dev: DeviceInfo
    prec: Precision
    m: int
    n: int
    k: int
    trans_a: str = "N"
    trans_b: str = "N"
    peaks: Mapping[str, float] | None = None


def features(configs: Sequence[Config], problem: DeviceProblem) -> np.ndarray:
    """One row of numbers per configuration at ``problem``."""
    p = problem
    fixed = [math.log2(p.m), math.log2(p.n), math.log2(p.k), math.log2(min(p.m, p.n)), p.prec.bytes,
             float(p.prec.is_complex), float(p.trans_a != "N"), float(p.trans_b != "N")]
    rows = []
    for c in configs:
        params = c.params
        pred = analytic.predict(c, p.dev, p.prec, p.m, p.n, p.k, p.peaks, trans_a=p.trans_a, trans_b=p.trans_b)
        # Predicted time over the ideal (the flops at the device's peak): comparable across shapes.
        ideal = pred.flops / (pred.peaks.gflops * 1e9)
        terms = [math.log(pred.time_s / ideal), math.log(pred.memory_s / pred.time_s + 1e-12),
                 math.log(pred.time_s), math.log(pred.compute_s), math.log(pred.memory_s + 1e-12),
                 pred.efficiency, math.log(pred.intensity), math.log2(pred.groups), pred.resident,
                 pred.padded_flops / pred.flops, pred.kernels, pred.work_group_size, pred.local_mem_bytes / 1024]
        family = [float(c.kernel == name) for name in KERNELS]
        rows.append([*family, *(params.get(name, -1) for name in PARAMETERS), *fixed, *terms])
    return np.asarray(rows, dtype=float)


def relative_targets(gflops: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """log(GFLOP/s / the best GFLOP/s of the row's group): 0 for each problem's best, below it
    for the rest."""
    frame = pd.DataFrame({"g": np.log(gflops), "group": groups})
    return (frame.g - frame.groupby("group").g.transform("max")).to_numpy()


class CostModel:
    """Trees predicting ``relative_targets`` from ``features``, with their spread."""

    def __init__(self, seed: int | None = None):
        self.seed = seed
        self.forest = None

    def fit(self, x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None, jobs: int | None = None) -> "CostModel":
        """``jobs``: processor cores to fit on (scikit-learn's n_jobs; None: one)."""
        from sklearn.ensemble import ExtraTreesRegressor  # here: most commands never learn

        self.forest = ExtraTreesRegressor(n_estimators=TREES, min_samples_leaf=2, max_features=0.5,
                                          random_state=self.seed, n_jobs=jobs).fit(x, y, sample_weight=weight)
        return self

    @property
    def fitted(self) -> bool:
        return self.forest is not None

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and spread (standard deviation over the trees) of the predicted targets."""
        each = np.stack([tree.predict(x) for tree in self.forest.estimators_])
        return each.mean(axis=0), each.std(axis=0)

    def score(self, configs: Sequence[Config], problem: DeviceProblem) -> np.ndarray:
        """The mean predicted target of each of ``configs`` at ``problem`` (higher: faster)."""
        return self.predict(features(configs, problem))[0]


class Corrected:
    """A prior model plus trees fitted to its errors on this search's rows; with no prior, the
    trees alone. The spreads add as independent errors do."""

    def __init__(self, prior: CostModel | None, x: np.ndarray, y: np.ndarray, seed: int | None = None):
        self.prior = prior
        base = prior.predict(x)[0] if prior is not None else 0.0
        self.correction = CostModel(seed).fit(x, y - base) if len(y) >= 2 else None

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, spread = self.prior.predict(x) if self.prior is not None else (np.zeros(len(x)), np.zeros(len(x)))
        if self.correction is not None:
            more, more_spread = self.correction.predict(x)
            mean, spread = mean + more, np.hypot(spread, more_spread)
        return mean, spread


def training_rows(rows: pd.DataFrame, dev: DeviceInfo, peaks=None) -> tuple[np.ndarray, np.ndarray]:
    """Features and targets of the ``ok`` and ``slow`` rows of ``rows`` (a results frame),
    each at its own problem, on ``dev``; rows of families or parameters not shipped are left
    out. Grouped by study: a study is one problem."""
    usable = rows[rows.status.isin(("ok", "slow")) & (rows.gflops > 0)]
    xs, ys, groups = [], [], []
    for study, part in usable.groupby("study"):
        for x, gflops in _study_rows(part, dev, peaks):
            xs.append(x)
            ys.append(gflops)
            groups += [study] * len(gflops)
    if not xs:
        return np.empty((0, 0)), np.empty(0)
    return np.vstack(xs), relative_targets(np.concatenate(ys), np.asarray(groups))


# Features of a study's rows, by what they were computed from: a search asks for the same rows
# several times (the model fitted early, the learned strategy, each later problem of a workload),
# and the screening, parsing and analytic model cost about 50 microseconds a row (20,836 shipped
# rows: a second on a 2-core laptop).
_STUDY_ROWS: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}
_STUDIES_KEPT = 256
_KEY_COLUMNS = ["precision", "m", "n", "k", "trans_a", "trans_b", "kernel", "params", "gflops"]


def _study_rows(part: pd.DataFrame, dev: DeviceInfo, peaks) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per problem of one study's usable rows: features and GFLOP/s of those that are
    configurations of today's kernels."""
    key = (dev, tuple(sorted((peaks or {}).items())),
           pd.util.hash_pandas_object(part[_KEY_COLUMNS], index=False).to_numpy().tobytes())   # 8 bytes a row
    found = _STUDY_ROWS.get(key)
    if found is None:
        found = _STUDY_ROWS[key] = _compute_study_rows(part, dev, peaks)
        while len(_STUDY_ROWS) > _STUDIES_KEPT:
            _STUDY_ROWS.pop(next(iter(_STUDY_ROWS)), None)
    return found


def _compute_study_rows(part: pd.DataFrame, dev: DeviceInfo, peaks) -> list[tuple[np.ndarray, np.ndarray]]:
    from gemmtune.db.rows import screen
    from gemmtune.db.tuned import shipped_config

    out = []
    for (code, m, n, k, ta, tb), rows in screen(part).rows.groupby(["precision", "m", "n", "k", "trans_a", "trans_b"]):
        prec = get_precision(code)
        configs = [shipped_config(r.kernel, r.params) for r in rows.itertuples()]
        # Only what today's kernels can run on this device: a row of a kernel variant since
        # removed (the older grids' PIPE 3 and 4) or of a configuration a constraint added since
        # rules out describes nothing a search can propose, and its values blur the trees'
        # splits on those that remain (docs/search.md, "The older grids").
        chosen = np.flatnonzero(_runnable(configs, dev, prec)).tolist()
        if chosen:
            problem = DeviceProblem(dev, prec, int(m), int(n), int(k), ta, tb, peaks)
            out.append((features([configs[i] for i in chosen], problem), rows.gflops.to_numpy(dtype=float)[chosen]))
    return out


def _runnable(configs: Sequence[Config | None], dev: DeviceInfo, prec: Precision) -> np.ndarray:
    """Which of ``configs`` (None: not one of today's kernels) break no constraint on ``dev``:
    each family's constraints on columns of its configurations at once, as the valid space is
    enumerated (``FamilySpace.mask``; a row at a time, the shipped prior's 20,836 rows took half
    a second more)."""
    from gemmtune.space import shipped_families

    runnable = np.zeros(len(configs), dtype=bool)
    by_family: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        if c is not None:
            by_family.setdefault(c.kernel, []).append(i)
    for kernel, where in by_family.items():
        params = [configs[i].params for i in where]   # a dict built per call
        cols = {name: np.array([p[name] for p in params]) for name in params[0]}
        with np.errstate(divide="ignore", invalid="ignore"):   # constraints divide by parameters others keep positive
            runnable[where] = shipped_families().family(kernel).mask(cols, dev, prec)
    return runnable


def prior_model(rows: pd.DataFrame | None, dev: DeviceInfo, peaks=None, jobs: int | None = None,
                seed: int = 0) -> CostModel | None:
    """The cost model fitted to ``rows`` (the device's results at other problems), or None where
    they are fewer than ``MIN_ROWS`` usable ones. ``seed``: the trees' random seed; a search
    always fits with 0, and a replay may ask for others to see how much a verdict owes to it."""
    if rows is None:
        return None
    x, y = training_rows(rows, dev, peaks)
    return CostModel(seed).fit(x, y, jobs=jobs) if len(y) >= MIN_ROWS else None


def seeds(configs: Sequence[Config], problem: DeviceProblem, count: int = 10, near: Sequence[Config] = (),
          fitted: CostModel | None = None, scores: Mapping[Config, float] | None = None) -> list[Config]:
    """What a search measures first after its baseline and the nearest tuned shapes' bests: the
    analytic model's best tilings (``analytic.tied_groups``), each as the configuration of its
    tiling nearest a known good one (``analytic.nearest``) and, with a model ``fitted`` to the
    device's other problems, as the one that model predicts fastest. At most ``count`` of
    those, best tiling first. The analytic model judges the tiling (the learned one, fitted at
    other sizes, can misjudge how a tile count fills the device); for what it cannot see,
    measured and learned knowledge each get their turn; the best tiling also as the
    configuration farthest from both (``analytic.farthest``), which explores what neither knows.

    With a fitted model, its own ``LEARNED_FIRST`` best picks over every tiling come too, one
    before each of the first few: where the other problems taught it the tiling as well (a
    large prior), one of them is often the best, and where they did not, the analytic seeds
    follow a trial later. ``scores``: ``fitted.score`` of each of ``configs`` where the caller
    has them already (a search scores its sample once, to breed from it)."""
    p = problem
    # One prediction per configuration, read by both uses below (None: nothing learned).
    predicted = None
    if fitted is not None:
        predicted = np.array([scores[c] for c in configs]) if scores is not None else fitted.score(configs, problem)
    learned_score = dict(zip(configs, predicted)) if predicted is not None else {}
    chosen: list[Config] = []
    for tied in analytic.tied_groups(configs, p.dev, p.prec, p.m, p.n, p.k, count, p.peaks):
        picks = [analytic.nearest(tied, near)]
        if predicted is not None:
            picks.append(max(tied, key=learned_score.__getitem__))   # the first of equal ones, as argmax
            if not chosen:
                # The best tiling once more, with what neither the known configurations nor the
                # learned model would try: otherwise every seed shares their values of what the
                # analytic model cannot see (an unroll, a warp layout), and TPE after the seeds
                # tries others late; one trial finds where such a parameter is what matters.
                picks.append(analytic.farthest(tied, picks))
        chosen += [c for c in dict.fromkeys(picks) if c not in chosen]
        if len(chosen) >= count:
            break
    chosen = chosen[:count]
    if predicted is None:
        return chosen
    own = [configs[i] for i in np.argsort(-predicted, kind="stable")[:LEARNED_FIRST]]
    rest = [c for c in chosen if c not in own]
    return [c for pair in itertools.zip_longest(own, rest) for c in pair if c is not None]
