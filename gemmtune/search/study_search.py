"""StudySearch: one study, searched here by the devices of one device key (same model and
driver). It ties the Optuna session (what to measure), the pipeline (build and measure) and the
results rows (what was measured, here or by another process) together, and starts from the
opening (``opening``)."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import replace

import pandas as pd

from gemmtune.db import tuned
from gemmtune.db.store import Store
from gemmtune.space.defaults import default_config, distance
from gemmtune.execution.messages import Outcome
from gemmtune.execution.processes import Compilers, Runner
from gemmtune.families import FAMILIES
from gemmtune.devices.info import DeviceInfo
from gemmtune.models import learned
from gemmtune.precision import Precision
from gemmtune.search.ahead import AheadProposer, Journal, NotReady, ahead_possible
from gemmtune.search.opening import model_seeds, opening
from gemmtune.search.pipeline import Pipeline
from gemmtune.search.prior import PriorModels, search_prior, sources
from gemmtune.search.proposals import Proposals
from gemmtune.search.recording import StudyRows, claim_text, summarize
from gemmtune.search.request import Progress, SearchRequest, Summary, default_study_name
from gemmtune.search.proposer import Proposer
from gemmtune.search.session import StudySession, quiet_heartbeat
from gemmtune.shapes import packed_problem
from gemmtune.space import Config, Space
from gemmtune.strategies import make_strategy
from gemmtune.space.valid import ValidConfigs


def prepare(strategy, req: SearchRequest, prec: Precision, dev: DeviceInfo, store: Store,
            prior: pd.DataFrame | None, priors: PriorModels) -> None:
    """Tell the search's strategy its problem and, if it learns from them, the device's rows of
    the other studies (every shape the device measured) with their model, fitted once for the
    seeds and the strategy alike."""
    strategy.asynchronous = True   # a learning strategy learns beside the search, not in its way
    problem = learned.DeviceProblem(dev, prec, req.m, req.n, req.k, req.trans_a, req.trans_b,
                                    store.latest_peaks(dev.key))
    if strategy.wants_prior:
        strategy.prepare(problem, prior, priors.model(prior, dev, problem.peaks))
    else:
        strategy.prepare(problem, None)


class Broken:
    """The constraint a configuration breaks on ``dev`` for ``prec``, or None."""

    def __init__(self, dev: DeviceInfo, prec: Precision):
        self.dev, self.prec = dev, prec

    def __call__(self, c: Config):
        return FAMILIES[c.kernel].broken(c.params, self.dev, self.prec)


def first_candidates(req: SearchRequest, prec: Precision, dev: DeviceInfo, valid: ValidConfigs, store: Store,
                     proposer: Proposer, strategy, rng: random.Random, prior: pd.DataFrame | None,
                     priors: PriorModels) -> tuple[tuple, list[Config]]:
    """The baseline's key, and the opening: the shipped default (or the valid configuration
    nearest it), the best of the nearest tuned shapes (or ``--start``), and the model's seeds
    where the strategy takes them; none measured before."""
    m, n, k = req.m, req.n, req.k
    measured = proposer.measured
    baseline = default_config(dev, prec, (m, n, k), batch=req.batch)
    if not proposer.is_valid(baseline):
        baseline = min(valid, key=lambda c: distance(baseline, c))  # --space may leave it out
    start = req.start if req.start is not None else tuned.nearby_configs(store, dev, prec, m, n, k,
                                                                        req.trans_a + req.trans_b, batch=req.batch)
    seeds = []
    if req.seeds and strategy.allows_model_seeds:
        problem = learned.DeviceProblem(dev, prec, m, n, k, req.trans_a, req.trans_b, store.latest_peaks(dev.key))
        seeds, parents = model_seeds(valid, req.seeds, problem, rng, {*measured, baseline.key}, [baseline, *start],
                                     prior, priors)
        strategy.breed_from(parents)
    return baseline.key, opening(baseline, start, seeds, measured, proposer.is_valid)


class StudySearch:
    """Other processes (``--db postgresql://...``) may search the same study: Optuna shares the
    trials, the claims table makes sure each configuration is measured once, and the results
    rows tell each process what the others found. A trial whose process stops sending
    heartbeats is failed by whichever process notices, and recorded as ``lost``."""

    def __init__(self, req: SearchRequest, prec: Precision, space: Space, valid: ValidConfigs,
                 runners: list[Runner], compilers: Compilers | None, store: Store, priors: PriorModels):
        self.req, self.prec, self.space, self.valid, self.store = req, prec, space, valid, store
        self.dev = dev = runners[0].device
        m, n, k = req.m, req.n, req.k
        self.flops = prec.flops(m, n, k) * req.batch
        self.name = name = req.study or default_study_name(dev, prec, m, n, k, req.trans_a, req.trans_b, req.batch)
        strategy = make_strategy(req.sampler, req.seed)
        prior = search_prior(store, dev, name) if strategy.fits_model(req.seeds) else None
        prepare(strategy, req, prec, dev, store, prior, priors)
        self.proposals = Proposals(space, strategy.ordinal)
        self.rows = StudyRows(store, name, space, prec, (m, n, k, req.trans_a, req.trans_b, req.batch), Journal())
        self.measured = self.rows.measured
        self.session = StudySession(store.url, name, strategy, req.grace,
                                    lambda number, params: self.rows.lost(number, dev, self.proposals.decode(params)),
                                    self.proposals)
        store.save_device(dev)
        self.rows.learn = self.session.copy.learn   # other processes' results, for the sampler
        self.rows.refresh()
        rng = random.Random(req.seed)
        self.proposer = proposer = Proposer(
            self.session.study, self.proposals, valid, self.measured, strategy, rng, [], why_invalid=Broken(dev, prec),
            claim=lambda key, trial: store.claim(name, claim_text(key), trial.number), refresh=self.rows.refresh,
            batch=self.session.storage.batch,
            is_valid=lambda c: space.allows(c) and proposer.why_invalid(c) is None, copy=self.session.copy)
        self.baseline_key, first = first_candidates(req, prec, dev, valid, store, proposer, strategy, rng, prior,
                                                    priors)
        self.learned_from = None if prior is None else sources(prior, dev, priors.model(prior, dev, None))
        proposer.pending += first
        self.budget = req.trials
        if strategy.exhaustive:
            left = len(proposer.unmeasured())
            self.budget = left if self.budget is None else min(self.budget, left)
        self.ahead = ahead_possible()   # the sampler in a process of its own (``search.ahead``)
        if self.ahead:
            self.proposer = AheadProposer(proposer)
            self.rows.learn = self.proposer.learn
        self.done, self.failures, self.stopped_by = 0, Counter(), None   # stopped_by: why it stopped, once it has
        self.finalists = 0   # rows timed again after the search (``finalists``)
        self.start, self.progress = time.monotonic(), None
        problem = packed_problem(m, n, k, req.trans_a, req.trans_b, req.batch)
        self.pipeline = Pipeline(runners, compilers, space, prec, problem, req.policy, self.threshold_ms, self.finish)

    @property
    def best(self) -> float | None:
        values = [g for st, g in self.measured.values() if st == "ok" and g is not None]
        if self.pipeline.best_collected is not None:
            values.append(self.pipeline.best_collected)
        return max(values, default=None)

    def threshold_ms(self) -> float | None:
        """The early stop's threshold: the time of early_stop x the best speed so far."""
        best = self.best
        if self.req.early_stop and best:
            return self.flops / (self.req.early_stop * best * 1e9) * 1e3
        return None

    @property
    def asking(self) -> bool:   # not stopped, and the trial budget not spent on trials done or in flight
        return self.stopped_by is None and (self.budget is None or self.done + self.pipeline.in_flight < self.budget)

    def fill_one(self) -> bool:
        """Ask for one new candidate if there is room (builds run ahead of the devices); True if one
        was asked. One at a time, so that finished devices are fed between costly asks."""
        if not self.asking or not self.pipeline.has_room():
            return False
        with quiet_heartbeat():
            proposal = self.proposer.next()
        if proposal is NotReady:   # the proposing process is still at it; its connection wakes the loop
            return False
        if proposal is None:  # every configuration measured or in flight: let those finish
            self.stopped_by = self.stopped_by or "exhausted"
            return False
        self.session.started(proposal[0])
        self.pipeline.add(*proposal)
        return True

    def _abandon(self, trial, key, status: str) -> None:
        """A candidate dropped before it was measured: told failed, never recorded, its claim given back."""
        self.measured.pop(key, None)
        self.store.release(self.name, claim_text(key), trial.number)
        self.proposer.abandon(trial, status)
        self.session.ended(trial)

    def stop(self, why: str, status: str = "abandoned") -> None:
        """No new candidates; those not yet on a device are abandoned (``status``)."""
        self.stopped_by = self.stopped_by or why
        for trial, config, key in self.pipeline.drop_unmeasured():
            self._abandon(trial, key, status)

    def interrupt(self) -> None:
        self.stop("interrupted", "interrupted")
        for trial, config, key in self.pipeline.drop_on_devices():
            self._abandon(trial, key, "interrupted")

    @property
    def finished(self) -> bool:
        if self.stopped_by is None and self.budget is not None and self.done >= self.budget:
            self.stopped_by = "trials"
        return self.stopped_by is not None and self.pipeline.empty

    def finish(self, trial, config, key, outcome: Outcome, compile_s, dev: DeviceInfo | None = None):
        if compile_s is not None:
            outcome = replace(outcome, compile_s=compile_s)
        dev = dev or self.dev
        value = self.rows.write(trial.number, dev, config, outcome, key == self.baseline_key, key)
        if value is None:
            self.failures[outcome.status] += 1
        self.proposer.tell(trial, config, value, outcome.status)
        self.session.ended(trial)
        self.done += 1
        self._show(config, outcome, value, dev)

    def told_again(self, config: Config, outcome: Outcome, value: float | None) -> None:
        """A finalist timed again after the search (``finalists``), for the progress display."""
        self._show(config, outcome, value, self.dev, again=True)

    def _show(self, config: Config, outcome: Outcome, value: float | None, dev: DeviceInfo,
              again: bool = False) -> None:
        """The progress display's line for a result; the time left only while the search runs."""
        if self.progress:
            elapsed = time.monotonic() - self.start
            left = None if again or self.req.timeout is None else max(0.0, self.req.timeout - elapsed)
            self.progress(Progress(self.done, self.budget, self.best, sum(self.failures.values()), elapsed,
                                   outcome, config, value if outcome.status == "ok" else None, dev, self.name,
                                   left, again))

    def close(self) -> None:
        if self.ahead:
            self.proposer.close()
        self.session.close()

    def heartbeat(self) -> None:
        self.session.heartbeat()
        self.rows.refresh()

    def summary(self, elapsed: float, idle: dict[str, float] | None = None) -> Summary:
        runners, req = self.pipeline.runners, self.req
        busy = self.pipeline.timing_s / (elapsed * len(runners)) if elapsed else None
        return summarize(self.store, self.name, [r.device for r in runners], self.prec, (req.m, req.n, req.k), self.done,
                         self.failures, elapsed, self.baseline_key, len(self.valid), self.stopped_by or "trials", busy,
                         self.space, idle, self.learned_from, req.batch, self.finalists)
