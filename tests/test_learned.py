"""The learned cost model and the strategy it drives, on hand-made landscapes and on PoCL."""

from __future__ import annotations

import random
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_replay import SYNTHETIC, gpu, k5, landscape, recorded_as  # noqa: E402

from gemmtune.db.store import Store  # noqa: E402
from gemmtune.space.defaults import distance  # noqa: E402
from gemmtune.models import (
    analytic,
    breeding,  # noqa: E402
    learned,
)
from gemmtune.models.analytic import spearman  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.search import replay as rp
from gemmtune.strategies import STRATEGIES  # noqa: E402


def speed(config, m=512):
    """A landscape with structure the analytic model does not see: small K-tiles and wide N
    tiles pay, and one configuration stands out."""
    p = config.params
    best = p["TSM"] == 64 and p["TSN"] == 128 and p["TSK"] == 8
    return m * (p["TSN"] / (1 + p["TSK"] / 8) + 5 * (p["TSM"] == 64)) * (1.5 if best else 1.0)


@pytest.fixture()
def two_studies(tmp_path):
    """One database, two exhaustive studies of the same device at two sizes."""
    db = tmp_path / "two.db"
    landscape(db, lambda c: speed(c, 512), study="at-512", m=512)
    landscape(db, lambda c: speed(c, 256), study="at-256", m=256)
    return f"sqlite:///{db}"


@pytest.fixture()
def two_runnable_studies(tmp_path):
    """``two_studies`` as the device records them: the configurations that break a constraint
    on it fail (to build or launch) instead of running."""
    from gemmtune.families import FAMILIES

    def runnable(config):
        c = recorded_as(config)
        return FAMILIES[c.kernel].broken(c.params, gpu(), get_precision("s")) is None

    db = tmp_path / "two.db"
    for m in (512, 256):
        landscape(db, lambda c: speed(c, m) if runnable(c) else None, study=f"at-{m}", m=m)
    return f"sqlite:///{db}"


def test_features_describe_each_configuration_at_its_problem():
    dev, s = gpu(), get_precision("s")
    small, large = learned.DeviceProblem(dev, s, 64, 64, 64), learned.DeviceProblem(dev, s, 4096, 4096, 4096)
    x = learned.features(SYNTHETIC[:3], small)
    assert x.shape[0] == 3 and np.isfinite(x).all()
    assert not np.array_equal(x[0], x[1])                                     # the parameters differ
    assert not np.array_equal(x[0], learned.features(SYNTHETIC[:1], large)[0])  # so does the problem
    targets = learned.relative_targets(np.array([10.0, 20.0, 5.0, 5.0]), np.array(["a", "a", "b", "b"]))
    assert targets == pytest.approx([np.log(0.5), 0.0, 0.0, 0.0])


def test_rows_asked_for_again_reuse_their_features_and_changed_rows_get_new_ones(two_studies, monkeypatch):
    rows = Store(two_studies, create=False).frame()
    dev = gpu()
    # Rows of configurations the device's constraints rule out teach nothing (next test).
    usable = {s: len(learned.training_rows(rows[rows.study == s], dev)[1]) for s in ("at-256", "at-512")}
    learned._STUDY_ROWS.clear()
    computed = []
    real_features = learned.features
    monkeypatch.setattr(learned, "features", lambda cs, p: computed.append(len(cs)) or real_features(cs, p))
    x, y = learned.training_rows(rows, dev)
    assert len(y) == sum(usable.values()) and sum(computed) == len(y) and 0 < len(y) <= len(rows)
    x2, y2 = learned.training_rows(rows.copy(), dev)   # the same rows again
    assert sum(computed) == len(y) and np.array_equal(x2, x) and np.array_equal(y2, y)
    # One row faster, in one study: only that study's features are computed again, and its
    # targets move (it becomes its study's best).
    changed = rows.copy()
    one = next(i for i in changed.index[changed.study == "at-256"]
               if len(learned.training_rows(changed.loc[[i]], dev)[1]))
    changed.loc[one, "gflops"] = 10 * changed.gflops.max()
    before = sum(computed)
    x3, y3 = learned.training_rows(changed, dev)
    assert sum(computed) - before == usable["at-256"]
    assert y3.max() == 0 and not np.array_equal(y3, y) and np.array_equal(x3, x)
    # Other peaks: the analytic terms change, so the features are computed again.
    x4, _ = learned.training_rows(rows, dev, {"s": 1.0, "bandwidth": 1.0})
    assert sum(computed) - before == usable["at-256"] + len(y) and not np.array_equal(x4, x)


def test_rows_of_configurations_the_device_rules_out_are_not_trained_on(two_studies):
    """A row whose configuration breaks a constraint on the device (a kernel variant since
    removed, a limit added since) is left out of the training rows, however fast it was; the
    others keep their targets."""
    from dataclasses import replace

    from gemmtune.db.rows import config_of
    from gemmtune.families import FAMILIES

    rows = Store(two_studies, create=False).frame()
    dev, s = gpu(), get_precision("s")
    learned._STUDY_ROWS.clear()
    x, y = learned.training_rows(rows, dev)
    configs = [config_of(r.kernel, r.params) for r in rows.itertuples()]
    allowed = np.array([FAMILIES[c.kernel].broken(c.params, dev, s) is None for c in configs])
    assert 0 < allowed.sum() == len(y) < len(rows)   # the fixture holds both kinds
    ruled_out = rows.assign(gflops=np.where(allowed, rows.gflops, 100 * rows.gflops.max()))
    x2, y2 = learned.training_rows(ruled_out, dev)
    assert np.array_equal(x2, x) and np.array_equal(y2, y)
    # On a device that takes larger work-groups the rows ruled out by the group size alone are
    # trained on, and being fast, they set their studies' best.
    roomy = replace(dev, max_work_group_size=1 << 16, max_work_item_sizes=(1 << 16,) * 3)
    more = np.array([FAMILIES[c.kernel].broken(c.params, roomy, s) is None for c in configs])
    _, y3 = learned.training_rows(ruled_out, roomy)
    assert len(y3) == more.sum() > allowed.sum() and y3.max() == 0 and (y3 < np.log(0.02)).sum() == allowed.sum()


def test_a_correction_fitted_to_this_searchs_rows_overrules_a_wrong_prior():
    """The prior learned elsewhere that the first feature pays; here the second one does. A few
    measured rows teach the correction that, and the sum ranks as they do; without a prior the
    correction alone does."""
    rng = np.random.default_rng(3)
    elsewhere = rng.uniform(0, 1, (400, 2))
    prior = learned.CostModel(0).fit(elsewhere, elsewhere[:, 0])
    here = rng.uniform(0, 1, (40, 2))
    fresh = rng.uniform(0, 1, (200, 2))
    truth = fresh[:, 1]
    assert spearman(prior.predict(fresh)[0], truth) < 0.3
    for base in (prior, None):
        corrected = learned.Corrected(base, here, here[:, 1], seed=0)
        mean, spread = corrected.predict(fresh)
        assert spearman(mean, truth) > 0.8 and (spread >= 0).all()
    alone = learned.Corrected(prior, here[:1], here[:1, 1], seed=0)   # one row: the prior, unchanged
    assert np.array_equal(alone.predict(fresh)[0], prior.predict(fresh)[0])


def test_the_model_learned_from_other_studies_ranks_a_new_one(two_studies):
    """Fitted to the 512³ study alone, it ranks the 256³ study's configurations nearly as
    measured (the analytic model does not), and the learned strategy finds the unique best in
    a few trials where random search needs many."""
    land = rp.load_landscape(two_studies, "at-256")
    prior = rp.other_studies(land)
    assert set(prior.study) == {"at-512"}   # the study replayed is never in its own prior
    dev = gpu()
    assert rp.learned_spearman(land, dev, learned.prior_model(prior, dev)) > 0.9
    assert abs(rp.model_spearman(land, dev)) < 0.9
    result = rp.replay(land, ["learned", "random"], seeds=5, target=1.0, device=dev)
    assert result.learned_spearman > 0.9
    assert np.median(result.trials["learned"]) <= 3 < np.median(result.trials["random"])


def test_seeds_take_each_best_tiling_as_known_configurations_and_the_learned_model_suggest(two_runnable_studies, monkeypatch):
    """Where the device's other problems taught a model, each of the analytic model's best
    tilings is measured twice: as the nearest known good configuration spells it and as the
    learned model picks it (the best tiling a third time, as far from both as it goes), after
    the learned model's own best picks over every tiling, one before each of the first pairs.
    Here the known one has K tiles of 64; the other study shows that small K tiles pay, which
    the analytic model cannot see, and the learned picks have each tiling's smallest."""
    land, dev = rp.load_landscape(two_runnable_studies, "at-256"), gpu()
    configs = [c for c in land.configs if land.gflops(c) is not None]   # the valid space
    problem = learned.DeviceProblem(dev, land.precision, *land.shape)
    fitted = learned.prior_model(rp.other_studies(land), dev)
    near = [recorded_as(k5(128, 128, 64))]
    alone = learned.seeds(configs, problem, 10, near)
    assert alone == analytic.best_tilings(configs, dev, land.precision, *land.shape, count=10, near=near)
    assert len(alone) >= 5 and {c.params["TSK"] for c in alone} == {64}
    monkeypatch.setattr(learned, "LEARNED_FIRST", 0)
    paired = learned.seeds(configs, problem, 10, near, fitted)
    tiling = lambda c: (c.params["TSM"], c.params["TSN"]) if c.params["TSM"] <= c.params["TSN"] else \
        (c.params["TSN"], c.params["TSM"])   # one prediction holds a tiling and its transpose
    groups = analytic.tied_groups(configs, dev, land.precision, *land.shape, 10)
    # The best tiling a third time, as the configuration of its prediction farthest from both picks.
    far = max(groups[0], key=lambda c: min(distance(c, paired[0]), distance(c, paired[1])))
    assert paired[2] == far and far not in paired[:2] and tiling(far) == tiling(paired[0])
    pairs = [*paired[:2], *paired[3:]]
    assert [c.params["TSK"] for c in pairs[::2]] == [64] * len(pairs[::2])
    assert [c.params["TSK"] for c in pairs[1::2]] == [min(c.params["TSK"] for c in g) for g in groups[:len(pairs[1::2])]]
    assert [tiling(c) for c in pairs[::2]] == [tiling(c) for c in alone[:len(pairs[::2])]]
    assert [tiling(c) for c in pairs[1::2]] == [tiling(c) for c in alone[:len(pairs[1::2])]]
    # And the learned model's own best picks over every tiling, one before each of the first.
    monkeypatch.undo()
    both = learned.seeds(configs, problem, 10, near, fitted)
    predicted = fitted.predict(learned.features(configs, problem))[0]
    own = [configs[i] for i in np.argsort(-predicted, kind="stable")[:learned.LEARNED_FIRST]]
    assert len(own) == 3 and both[0:6:2] == own
    # Scores the caller has already (a search's, from breeding) stand for the model's own.
    assert learned.seeds(configs, problem, 10, near, fitted, dict(zip(configs, predicted))) == both
    turned = learned.seeds(configs, problem, 10, near, fitted, dict(zip(configs, -predicted)))
    assert turned[0] == configs[int(np.argmin(predicted))] != both[0]
    assert [c for c in both if c not in own] == [c for c in paired if c not in own]
    best = max(configs, key=land.gflops)
    assert best in both and best not in alone   # the landscape's best, which no seed of the analytic model is
    assert learned.prior_model(None, dev) is None
    assert learned.prior_model(rp.other_studies(land).head(learned.MIN_ROWS - 1), dev) is None


def test_without_other_studies_the_learned_strategy_proposes_as_tpe_does(tmp_path):
    """A device with nothing measured elsewhere teaches no model: the strategy leaves every
    proposal to TPE, trial for trial; with another study in the database its model proposes, and
    the same seeds measure in another order."""
    alone = tmp_path / "alone.db"
    landscape(alone, lambda c: speed(c, 256), study="at-256", m=256)
    land, dev = rp.load_landscape(f"sqlite:///{alone}", "at-256"), gpu()
    assert len(rp.other_studies(land)) == 0
    strategy = STRATEGIES["learned"](0)
    strategy.prepare(learned.DeviceProblem(dev, land.precision, *land.shape), rp.other_studies(land))
    assert not strategy.learns and strategy.model is None and strategy.allows_model_seeds
    runs = {s: [rp.replay_once(land, s, seed, 1.0, device=dev, prior=rp.other_studies(land)).measured
                for seed in range(4)] for s in ("tpe", "learned")}
    assert runs["learned"] == runs["tpe"]
    landscape(alone, lambda c: speed(c, 512), study="at-512", m=512)   # now the device has a prior
    land = rp.load_landscape(f"sqlite:///{alone}", "at-256")
    taught = [rp.replay_once(land, "learned", seed, 1.0, device=dev, prior=rp.other_studies(land)).measured
              for seed in range(4)]
    assert taught != runs["tpe"]


def test_replay_default_is_what_search_does_without_options(two_studies, monkeypatch):
    """"default" replays the search's default strategy, seeded by the model where that strategy
    allows it, with the same prior, after the nearest other tuned shape's best."""
    land, dev = rp.load_landscape(two_studies, "at-256"), gpu()
    nearby = rp.recorded_nearby(land, dev)
    assert len(nearby) == 1 and land.gflops(nearby[0]) < land.best   # at-512's best is not at-256's
    monkeypatch.setattr(rp, "DEFAULT", "tpe")
    seeded = rp.replay(land, ["default", "tpe-seeded"], seeds=3, target=1.0, device=dev)
    assert seeded.trials["default"] == [t + 1 for t in seeded.trials["tpe-seeded"]]
    monkeypatch.setattr(rp, "recorded_nearby", lambda land, dev: [])
    seeded = rp.replay(land, ["default", "tpe-seeded"], seeds=3, target=1.0, device=dev)
    assert seeded.trials["default"] == seeded.trials["tpe-seeded"]
    # With the learned strategy as the default: it measures after the baseline, the nearest
    # shape's best and the seeds (which replay's "learned" skips), with the prior's model fitted
    # once for both.
    monkeypatch.undo()
    monkeypatch.setattr(rp, "DEFAULT", "learned")
    prior = rp.other_studies(land)
    fitted = learned.prior_model(prior, dev, land.peaks)
    top = rp.model_seeds(land, dev, 10, fitted)
    run = rp.replay_once(land, "default", 0, 1.0, top, dev, prior, nearby, fitted)
    first = list(dict.fromkeys(c for c in [land.baseline, *nearby, *top] if c is not None))
    assert run.measured[:len(first)] == first[:len(run.measured)]
    assert rp.replay(land, ["default"], seeds=2, target=1.0, device=dev).trials["default"][0] == run.trials
    bare = rp.replay_once(land, "learned", 0, 1.0, top, dev, prior, nearby, fitted)
    assert bare.measured[:len(first)] != first[:len(bare.measured)]


def test_a_study_recorded_before_the_newest_columns_replays(tmp_path):
    """A database of an earlier version, opened read-only, lacks today's columns (ops, device
    time): its rows read, and replay runs."""
    db = tmp_path / "old.db"
    landscape(db, lambda c: speed(c), study="old")
    con = sqlite3.connect(db)
    for column in ("trans_a", "trans_b", "device_time_ms"):
        con.execute(f"ALTER TABLE results DROP COLUMN {column}")
    con.commit()
    con.close()
    land = rp.load_landscape(f"sqlite:///{db}", "old")
    assert len(land.configs) == len(SYNTHETIC)
    assert rp.replay(land, ["random"], seeds=2, target=1.0).trials["random"][0] >= 1


def _refits_in_a_forked_child(strategy, config, answer) -> None:
    strategy.tell(config, 999.0)
    before = strategy.model
    try:
        strategy._fit()
        strategy.fitting.result(timeout=60)
        answer.put(strategy.model is not before)
    except Exception as e:  # noqa: BLE001  the parent's assertion says what went wrong
        answer.put(repr(e))


def test_in_a_search_the_model_is_refitted_beside_it_not_in_its_way(two_studies):
    """asynchronous: the prior's model, fitted before the search, proposes from the first
    proposal; each result refits the correction on a thread while the last model keeps
    proposing; in a forked child as well (proposals are made ahead in one), where the thread
    the parent started does not exist."""
    import multiprocessing as mp

    land = rp.load_landscape(two_studies, "at-256")
    prior, dev = rp.other_studies(land), gpu()
    fitted = learned.prior_model(prior, dev)
    strategy = STRATEGIES["learned"](0)
    strategy.asynchronous = True
    strategy.prepare(learned.DeviceProblem(dev, land.precision, *land.shape), prior, fitted)
    assert strategy.learns and strategy._fit() and strategy.model is fitted
    strategy.fitting.result()
    strategy.tell(land.configs[0], 1234.0)
    assert strategy._fit() and (strategy.model is fitted or strategy.fitting.done())
    strategy.fitting.result()
    assert isinstance(strategy.model, learned.Corrected) and strategy.model.prior is fitted
    answer = mp.get_context("fork").Queue()
    child = mp.get_context("fork").Process(target=_refits_in_a_forked_child, args=(strategy, land.configs[1], answer))
    child.start()
    assert answer.get(timeout=90) is True
    child.join(30)


class _Drawn:
    """The unmeasured part of a list of configurations, as a strategy sees it."""

    def __init__(self, configs):
        self.rng, self.free, self.configs, self.measured, self.draws = random.Random(0), 0, configs, set(), 0
        self.parents = []   # what each ranking bred from

    def sample_unmeasured(self, count):
        self.draws += 1
        left = [c for c in self.configs if c not in self.measured]
        return self.rng.sample(left, min(count, len(left)))

    def first_unmeasured(self, order):
        return next((c for c in order if c not in self.measured), None)

    def unmeasured_children(self, parents, each):
        """Every unmeasured configuration one parameter from a parent, up to ``each`` a parent."""
        self.parents.append(list(parents))
        near = lambda a, b: sum(a.params[k] != b.params[k] for k in a.params) == 1   # noqa: E731
        self.kids = [c for p in parents for c in [c for c in self.configs if c not in self.measured and near(c, p)][:each]]
        return self.kids


def _ranking_strategy(two_studies, monkeypatch, pool):
    """The learned strategy prepared at the study at-256, as a search prepares it, proposing from
    its model alone (no share to TPE) with rankings of ``pool`` drawn configurations."""
    from gemmtune.strategies import learned as strategy_module

    monkeypatch.setattr(strategy_module, "EXPLORE", 0.0)
    monkeypatch.setattr(strategy_module, "POOL", pool)
    land = rp.load_landscape(two_studies, "at-256")
    prior, dev = rp.other_studies(land), gpu()
    fitted = learned.prior_model(prior, dev)
    problem = learned.DeviceProblem(dev, land.precision, *land.shape)
    strategy = STRATEGIES["learned"](0)
    strategy.prepare(problem, prior, fitted)
    return strategy, land, fitted, problem


def test_the_learned_strategy_proposes_a_rankings_best_in_turn_then_ranks_again(two_studies, monkeypatch):
    """One ranking (a draw, its features, a prediction) serves BATCH proposals, best first by
    predicted speed plus spread; one measured meanwhile is skipped; then the next ranking, whose
    pool holds the last one's best and their children (``gemmtune.models.breeding``)."""
    from gemmtune.strategies import learned as strategy_module

    strategy, land, fitted, problem = _ranking_strategy(two_studies, monkeypatch, 12)
    drawn = _Drawn(list(land.configs))
    first = [strategy.propose(drawn) for _ in range(3)]
    assert drawn.draws == 1
    mean, spread = fitted.predict(learned.features(first, problem))
    score = mean + strategy_module.KAPPA * spread
    assert list(score) == sorted(score, reverse=True)
    skipped = strategy._ranked[0]
    drawn.measured.add(skipped)
    rest = [strategy.propose(drawn) for _ in range(strategy_module.BATCH - 4)]
    assert skipped not in rest and drawn.draws == 1 and len(set(first + rest)) == strategy_module.BATCH - 1
    elite = strategy._elite
    assert drawn.parents == [[]] and len(elite) == min(breeding.PARENTS, strategy_module.POOL)
    assert elite[:len(first)] == first and skipped in elite[:strategy_module.BATCH]
    drawn.measured |= set(first + rest)   # what a search proposed is measured, or in flight
    scored = []
    rows = strategy._rows
    monkeypatch.setattr(strategy, "_rows", lambda configs: scored.append(list(configs)) or rows(configs))
    ranked = [strategy.propose(drawn) for _ in range(strategy_module.BATCH)]
    assert drawn.draws == 2 and drawn.parents[1] == elite
    # The new ranking scored its draw, the last one's best that are left, and their children.
    left = [c for c in elite if c not in drawn.measured]
    assert left and drawn.kids and set(left) | set(drawn.kids) <= set(scored[0])
    assert not set(scored[0]) & drawn.measured and not set(ranked) & drawn.measured
    mean, spread = fitted.predict(learned.features(scored[0], problem))
    assert ranked[0] == scored[0][int(np.argmax(mean + strategy_module.KAPPA * spread))]


def test_the_first_ranking_breeds_from_the_parents_the_seeds_bred(two_studies, monkeypatch):
    """Handed the seeds' bred best (``breed_from``), the first ranking scores them and their
    children beside its draw, and the model's best of all of them comes first; without them it
    breeds from nothing."""
    from gemmtune.strategies import learned as strategy_module

    for handed in (False, True):
        strategy, land, fitted, problem = _ranking_strategy(two_studies, monkeypatch, 4)
        configs = list(land.configs)
        ranked = [configs[i] for i in np.argsort(-fitted.score(configs, problem), kind="stable")]
        parents = ranked[:3] if handed else []   # the model's best, as bred seeds would be
        strategy.breed_from(parents)
        drawn = _Drawn(configs)
        drawn.rng = random.Random(1)
        scored = []
        rows = strategy._rows
        monkeypatch.setattr(strategy, "_rows", lambda cs: scored.append(list(cs)) or rows(cs))
        first = strategy.propose(drawn)
        assert drawn.parents == [parents]
        assert set(parents) | set(drawn.kids) <= set(scored[0])
        mean, spread = fitted.predict(learned.features(scored[0], problem))
        assert first == scored[0][int(np.argmax(mean + strategy_module.KAPPA * spread))]
    assert ranked[0] in scored[0] and len(scored[0]) > strategy_module.POOL


def test_a_learned_search_learns_from_the_devices_other_studies(tmp_path):
    """On PoCL: a grid study at one size, then a learned search at another, which reads it as
    its prior, refits beside the search, and records its trials, all correct."""
    import json

    from click.testing import CliRunner

    from gemmtune.cli import cli

    space = tmp_path / "k5.toml"
    space.write_text("[xgemm_k5]\nTSM = [16, 32]\nTSN = [16, 32]\nTSK = [8, 16]\nWPTN = [1, 2]\nPAD = [1]\n"
                     "TRANSPOSEX = [8]\nTRANSPOSEY = [8]\n")
    db = f"sqlite:///{tmp_path / 'l.db'}"
    common = ["--device", "0", "--space", str(space), "--db", db, "--time-cap", "0.05", "--early-stop", "0", "-q"]
    grid = CliRunner().invoke(cli, ["search", "--sampler", "grid", "--size", "32", *common])
    assert grid.exit_code == 0, grid.output
    found = CliRunner().invoke(cli, ["search", "--sampler", "learned", "--size", "48", "--trials", "6", "--seed", "1",
                                     "--format", "json", *common])
    assert found.exit_code == 0, found.output
    summary = json.loads(found.stdout)
    assert summary["trials"] == 6 and summary["best"]["gflops"] > 0 and not summary["failures"]


def test_the_seeds_model_fitted_while_the_workers_start_serves_only_the_same_rows(two_studies):
    """A search fits its seeds' model on a thread as it opens its workers; a study's search takes that
    model where its prior is exactly the rows it learned from, and fits its own otherwise."""
    from gemmtune.search.prior import PriorModels

    dev = gpu()
    land = rp.load_landscape(two_studies, "at-256")
    land_rows = rp.other_studies(land)
    store = Store(two_studies, create=False)
    every = store.frame(device=dev.key)   # what the thread read: the device's every row
    store.close()
    priors = PriorModels(two_studies, [dev])
    early = priors.model(every, dev, None)
    assert early is not None and priors.model(every, dev, None) is early          # the same rows: fitted once
    own = priors.model(land_rows, dev, None)                                         # a study's own rows left out
    assert own is not None and own is not early
    assert priors.model(land_rows.copy(), dev, None) is own and priors.model(every, dev, None) is early  # asked again
    fresh = learned.features(SYNTHETIC[:5], learned.DeviceProblem(dev, land.precision, 256, 256, 256))
    assert np.array_equal(own.predict(fresh)[0], learned.prior_model(land_rows, dev).predict(fresh)[0])
    assert PriorModels(two_studies, [gpu("Other GPU")]).model(None, gpu("Other GPU"), None) is None
    late = PriorModels(two_studies, [dev], early=False).model(every, dev, None)   # a search without seeds
    assert np.array_equal(late.predict(fresh)[0], early.predict(fresh)[0])
