"""Replay: re-run searches against the recorded results of an exhaustive study, not the device.

A ``grid`` study measured every valid configuration once; its rows of ``results`` (read through
``gemmtune.db.store``, never Optuna's tables) are a lookup table from configuration to GFLOP/s. A
replay drives an in-memory Optuna study with ask/tell over the same parameter space, exactly as
``gemmtune.search`` does (through its ``proposer.Proposer``), but a proposal's value is looked up instead of measured:

* a configuration the study did not record is taken as invalid: told PRUNED, not counted;
* the first proposal of a recorded configuration is a measured trial: told its recorded GFLOP/s
  (for ``slow``, the estimate search recorded and told), or for a failure (compile_error,
  wrong_result, ...) PRUNED, as search tells it (``session.FAILED``); it counts;
* a proposal measured before in this replay is told the same again and does not count; what
  the strategy names instead (``Strategy.repeated``) is proposed next, as in search;
* after ``strategies.MAX_FREE_PROPOSALS`` proposals in a row that did not count, a random
  unmeasured recorded configuration is enqueued (as search does with the valid space);
* the study's baseline configuration (its row with ``baseline`` = 1), if any, is the first
  trial, as in search; ``tpe-seeded`` then enqueues the model's K seeds (``analytic.best_tilings``: the
  best-predicted configurations, one per distinct prediction);
* ``default`` replays what ``gemmtune search`` does without ``--sampler`` and ``--no-seed``:
  after the baseline, the best configurations of the nearest other tuned shapes of the device
  and precision in the same database (``tuned.nearby_configs``: the study's own shape never
  among them; those outside the recorded space left out, as the search would measure them at
  no gain here), then the model's seeds where the default strategy allows them, then the
  strategy;
* a strategy that learns from the device's other results (``learned``) gets the device's rows
  at other problems in the same database, and those it borrows from another device's shipped
  prior (``other_studies``): each exhaustive study is replayed with its problem left out.

A search proposes a few candidates ahead of its devices (``search.ahead``); a replay proposes
one at a time, each after the previous one's value, so that a seed replays alike.

A replay stops at the first measured ``ok`` trial that reaches ``target`` x the study's best
GFLOP/s and reports how many measured trials that took. For a study that is not exhaustive, the
replay is a search of the configurations it recorded. A grid study searched with early stop
(``--early-stop F``) is still exhaustive for any target above F: its ``slow`` rows are surely
below F x the best. Sequential, it has no trial running when one is asked: the constant liar
of a search with candidates in flight changes nothing.

The parameter space is rebuilt from the recorded rows: for each kernel family, the distinct
values each parameter took. That is the search's own space whenever every value of its space
file appears in at least one valid configuration; otherwise the missing values only remove
invalid proposals, which never count. ``space_file`` gives the search's space file instead
(recorded configurations outside it are then left out).
"""

from __future__ import annotations

import multiprocessing
import os
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from gemmtune.db.urls import shown
from gemmtune.errors import GemmtuneError
from gemmtune.execution.child import die_with_parent
from gemmtune.devices.info import DeviceInfo
from gemmtune.inputs import check_jobs
from gemmtune.models import analytic, learned

# A landscape is what a replay searches: its callers load and describe one through this module.
from gemmtune.search.landscape import (Landscape, device_for, load_landscape, other_studies,  # noqa: F401
                                       recorded_nearby)
from gemmtune.search.opening import opening
from gemmtune.search.proposals import Proposals
from gemmtune.search.proposer import Proposer
from gemmtune.search.session import memory_study, quiet_optuna
from gemmtune.space import Config
from gemmtune.strategies import DEFAULT, STRATEGIES, names

SAMPLERS = ("default", *names("replay"))


def check_samplers(samplers) -> list[str]:
    """``samplers`` without repeats; GemmtuneError for none or a name that is no sampler."""
    samplers, bad = list(dict.fromkeys(samplers)), [s for s in samplers if s not in SAMPLERS]
    if bad or not samplers:
        raise GemmtuneError(f"unknown sampler {bad[0] if bad else ''!r}: use some of {', '.join(SAMPLERS)}")
    return samplers


def learns(sampler: str) -> bool:
    """Whether ``sampler``'s replays read the cost model fitted to the device's other studies."""
    return sampler == "default" or STRATEGIES[sampler].model_seeded or STRATEGIES[sampler].wants_prior


@dataclass
class ReplayRun:
    """One replayed search: measured trials to the target (None if it never got there)."""

    trials: int | None            # None only if the best was never reached (cannot happen: it is recorded)
    measured: list[Config]        # in order
    study: object                 # the in-memory Optuna study, every ask and tell in it


def replay_once(land: Landscape, sampler: str, seed: int, target: float,
                first: Sequence[Config] = (), device: DeviceInfo | None = None, prior=None,
                nearby: Sequence[Config] = (), fitted=None) -> ReplayRun:
    """One search of ``land`` with the strategy ``sampler``, stopping at the first measured ``ok``
    trial that reaches ``target`` x the best. ``first`` (the model's picks) are enqueued after
    the baseline where the strategy is model-seeded, or ``default`` and allows them; ``nearby``
    (the nearest tuned shapes' bests) before them for ``default`` only; ``device`` and ``prior``
    (the device's other results rows) and ``fitted`` (their model) are what the strategy is
    prepared with."""
    threshold = target * land.best
    strategy = STRATEGIES[DEFAULT if sampler == "default" else sampler](seed)
    if device is not None:
        strategy.prepare(learned.DeviceProblem(device, land.precision, *land.shape, peaks=land.peaks), prior, fitted)
    if not (strategy.model_seeded or (sampler == "default" and strategy.allows_model_seeds)):
        first = ()
    # The search's opening; configurations not recorded are left to the proposer, as invalid.
    pending = opening(land.baseline, nearby if sampler == "default" else (), first)
    with quiet_optuna():
        return _replay(land, strategy, memory_study(strategy), random.Random(seed), threshold, pending)


def _replay(land: Landscape, strategy, study, rng: random.Random, threshold: float, pending) -> ReplayRun:
    measured: dict[tuple, tuple[str, float | None]] = {}
    order: list[Config] = []
    # The search's own proposer: configurations not recorded count as invalid.
    proposer = Proposer(study, Proposals(land.space, strategy.ordinal), land.configs, measured, strategy, rng, pending)
    while True:
        proposal = proposer.next()
        if proposal is None:
            return ReplayRun(None, order, study)
        trial, config, key = proposal
        status, value = measured[key] = land.values[key]
        order.append(config)
        proposer.tell(trial, config, value)
        if status == "ok" and value >= threshold:
            return ReplayRun(len(order), order, study)


@dataclass
class ReplayResult:
    landscape: Landscape
    target: float
    model_seeds: int
    trials: dict[str, list[int]] = field(default_factory=dict)   # sampler -> per seed
    model_spearman: float | None = None
    learned_spearman: float | None = None   # of the cost model fitted to the other studies only

    def table(self) -> pd.DataFrame:
        """Per sampler: median, quartiles, mean, min and max of the measured trials to target."""
        out = []
        for sampler, counts in self.trials.items():
            q1, median, q3 = np.percentile(counts, [25, 50, 75])
            out.append({"sampler": sampler, "median": float(median), "q1": float(q1), "q3": float(q3),
                        "mean": float(np.mean(counts)), "min": int(np.min(counts)), "max": int(np.max(counts)),
                        "seeds": len(counts)})
        return pd.DataFrame(out)

    def to_json(self) -> dict:
        land = self.landscape
        return {"study": land.study, "db": shown(land.url), "device": land.device, "device_name": land.device_name,
                "precision": land.precision.code, "m": land.shape[0], "n": land.shape[1], "k": land.shape[2],
                "recorded": len(land.configs), "ok": sum(s == "ok" for s, _ in land.values.values()),
                "best_gflops": land.best, "target": self.target, "model_seeds": self.model_seeds,
                "model_spearman": self.model_spearman, "learned_spearman": self.learned_spearman,
                "samplers": [{**row, "trials": self.trials[row["sampler"]]}
                             for row in self.table().to_dict(orient="records")]}


def model_seeds(land: Landscape, dev: DeviceInfo, count: int, fitted=None) -> list[Config]:
    """What a search at the study's shape seeds with, among the recorded configurations
    (``learned.seeds``: the analytic model's best tilings, each nearest the baseline or the
    nearest tuned shapes' bests, and as the ``fitted`` model of the other studies picks it)."""
    from gemmtune.db.tuned import nearby_configs as tuned_nearby

    m, n, k = land.shape
    near = [*([land.baseline] if land.baseline is not None else []),
            *tuned_nearby(land.url, dev, land.precision, m, n, k)]
    problem = learned.DeviceProblem(dev, land.precision, m, n, k, peaks=land.peaks)
    return learned.seeds(land.configs, problem, count, near, fitted)


def model_spearman(land: Landscape, dev: DeviceInfo) -> float:
    """Rank correlation of the model's predicted times with the study's measured ones (ok rows)."""
    m, n, k = land.shape
    ok = [c for c in land.configs if land.gflops(c) is not None]
    predicted = [analytic.predict(c, dev, land.precision, m, n, k, land.peaks).time_s for c in ok]
    return analytic.spearman(predicted, [1 / land.gflops(c) for c in ok])


def learned_spearman(land: Landscape, dev: DeviceInfo, fitted) -> float | None:
    """Rank correlation with the study's measured times of the cost model ``fitted`` to other problems."""
    if fitted is None:
        return None
    ok = [c for c in land.configs if land.gflops(c) is not None]
    problem = learned.DeviceProblem(dev, land.precision, *land.shape, peaks=land.peaks)
    predicted, _ = fitted.predict(learned.features(ok, problem))
    return analytic.spearman(-predicted, [1 / land.gflops(c) for c in ok])


def replay(land: Landscape, samplers=SAMPLERS, seeds: int = 20, target: float = 0.95,
           seed_count: int = 10, device: DeviceInfo | None = None, jobs: int = 1,
           forest_seed: int = 0) -> ReplayResult:
    """Replay ``seeds`` searches (sampler seeds 0 .. seeds-1) per sampler against ``land``.

    ``device`` describes the study's device for the model: tpe-seeded needs it, and with it the
    result also carries the model's rank correlation with the study's measurements. ``jobs``
    processes replay the seeds side by side (0: one per core); the counts do not depend on it.
    ``forest_seed``: the random seed of the cost model's trees (a search's: 0)."""
    samplers = check_samplers(samplers)
    if seeds < 1:
        raise GemmtuneError(f"--seeds must be at least 1, got {seeds}")
    if not 0 < target <= 1:
        raise GemmtuneError(f"--target must be in (0, 1], got {target}")
    if seed_count < 1:
        raise GemmtuneError(f"--model-seeds must be at least 1, got {seed_count}")
    check_jobs(jobs)
    seeded = [s for s in samplers if learns(s)]
    if seeded and device is None:
        raise GemmtuneError(f"{seeded[0]} needs a description of the study's device ({land.device_name}) "
                            "for the model")
    result = ReplayResult(land, target, seed_count)
    top, prior, fitted = [], None, None
    if device is not None:
        # As search: the device's other studies teach a model whose picks are among the seeds.
        prior = other_studies(land, device)
        fitted = learned.prior_model(prior, device, land.peaks, seed=forest_seed)
        top = model_seeds(land, device, seed_count, fitted)
        result.model_spearman = model_spearman(land, device)
        result.learned_spearman = learned_spearman(land, device, fitted)
    nearby = recorded_nearby(land, device) if "default" in samplers and device is not None else []
    workers = min(seeds, jobs or os.cpu_count() or 1)
    tasks = [(sampler, range(first, seeds, workers)) for sampler in samplers for first in range(workers)]
    args = (target, top, device, prior, nearby, fitted)
    if workers == 1:
        counts = [_trials(land, sampler, chosen, args) for sampler, chosen in tasks]
    else:
        # Spawned: fork would copy this process's threads (a fit's, Optuna's) mid-step. What the tasks
        # share goes to each process once; the landscape's rules (functions) do not pickle: it is loaded.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_share,
                                 initargs=((land.url, land.study, land.space_file), args, os.getpid())) as pool:
            counts = [f.result() for f in [pool.submit(_shared_trials, *task) for task in tasks]]
    for (sampler, chosen), trials in zip(tasks, counts):
        per_seed = result.trials.setdefault(sampler, [None] * seeds)
        for s, n in zip(chosen, trials):
            per_seed[s] = n
    return result


def _trials(land: Landscape, sampler: str, chosen: Sequence[int], args: tuple) -> list[int | None]:
    """Trials to the target of each seed ``chosen`` (``args``: replay_once's after the seed)."""
    return [replay_once(land, sampler, s, *args).trials for s in chosen]


_SHARED: tuple = ()   # in a process of ``replay``: the landscape and ``_trials``' args


def _share(source: tuple, args: tuple, parent: int) -> None:
    global _SHARED
    die_with_parent(parent)   # a replay killed outright takes its pool with it
    _SHARED = (load_landscape(*source), args)


def _shared_trials(sampler: str, chosen: Sequence[int]) -> list[int | None]:
    return _trials(_SHARED[0], sampler, chosen, _SHARED[1])
