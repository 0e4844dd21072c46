"""The search: Optuna proposes configurations of the valid space, the runner measures them.

Driven with ``study.ask()`` / ``study.tell()`` so that gemmtune decides what a trial costs:

* A proposal that breaks a constraint is told to Optuna as PRUNED (TPE ranks pruned trials
  below every completed one, so it learns to avoid them) without any build, and does not count
  against ``--trials``. Neither does a proposal measured before in this study: Optuna is told
  the earlier value, and nothing is rebuilt.
* After a run of such free proposals the search enqueues a random unmeasured valid
  configuration, so a sampler stuck on measured or invalid points cannot stall it.
* ``grid`` enqueues every valid configuration in turn and stops when none is left.

Every measured trial becomes one row of ``results``, committed when the trial ends.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from multiprocessing import connection as mp_connection
from typing import Callable

import optuna
from optuna.trial import TrialState

from gemmtune.defaults import default_config, distance
from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.info import DeviceInfo
from gemmtune.precision import Precision, get_precision
from gemmtune.runner import BuildJob, Compilers, Job, Outcome, Runner
from gemmtune.space import Config, Space, load_space, require_precision, valid_configs
from gemmtune.store import Store, database_url
from gemmtune.timing import Timing, TimingPolicy, gflops, is_tie

SAMPLERS = ("tpe", "random", "grid")
MAX_FREE_PROPOSALS = 25   # invalid or already-measured proposals in a row before a random pick


def make_sampler(name: str, seed: int | None, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
    # Arguments spelled out: Optuna 5 changed TPE's defaults, and results should not move with them.
    # With several candidates in flight, the constant liar keeps TPE from proposing them again.
    if name == "tpe":
        return optuna.samplers.TPESampler(n_startup_trials=10, n_ei_candidates=24, multivariate=True,
                                          group=False, constant_liar=constant_liar, seed=seed)
    if name in ("random", "grid"):  # grid enqueues every point itself; the sampler never decides
        return optuna.samplers.RandomSampler(seed=seed)
    raise GemmtuneError(f"unknown sampler {name!r}: use one of {', '.join(SAMPLERS)}")


def default_study_name(dev: DeviceInfo, prec: Precision, m: int, n: int, k: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{dev.name}-{dev.driver_version}").strip("-").lower()
    return f"{slug}-{prec.code}-{m}x{n}x{k}"


def problem_bytes(prec: Precision, m: int, n: int, k: int) -> int:
    """Device memory of one trial: A, B, C and, at worst, padded copies of A and B."""
    return prec.bytes * (2 * (m * k + k * n) + m * n)


def check_problem(dev: DeviceInfo, prec: Precision, m: int, n: int, k: int) -> None:
    require_precision(dev, prec)
    need = problem_bytes(prec, m, n, k)
    if need > dev.global_mem_bytes:
        raise GemmtuneError(f"{m}x{n}x{k} in precision {prec.code} needs about {need / 2**30:.1f} GiB, "
                            f"more than the {dev.global_mem_bytes / 2**30:.1f} GiB of device {dev.index}")
    largest = prec.bytes * max(m * k, k * n, m * n)
    if dev.max_alloc_bytes and largest > dev.max_alloc_bytes:
        raise GemmtuneError(f"{m}x{n}x{k} in precision {prec.code} needs a {largest / 2**20:.0f} MiB buffer, "
                            f"more than device {dev.index} allows in one allocation "
                            f"({dev.max_alloc_bytes / 2**20:.0f} MiB)")


@dataclass
class SearchRequest:
    device: str | int | None = None
    precision: str = "s"
    m: int = 1024
    n: int = 1024
    k: int = 1024
    trials: int | None = 30          # new measured trials; None with grid: the whole space
    timeout: float | None = None     # seconds for the whole search
    trial_timeout: float = 120.0
    sampler: str = "tpe"
    seed: int | None = None
    db: str | None = None
    study: str | None = None
    space_file: str | None = None
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    jobs: int | None = None          # compiler processes; None: one per spare core; 0: build on the timer
    early_stop: float | None = 0.5   # stop timing a candidate whose speed is surely below this x the best
    seeds: int = 10                  # best-predicted configurations measured first (0: none)


@dataclass
class Progress:
    """What the progress display shows after each measured trial."""

    done: int
    total: int | None
    best_gflops: float | None
    failures: int
    elapsed: float
    last: Outcome | None = None
    last_config: Config | None = None
    last_gflops: float | None = None


@dataclass
class Summary:
    study: str
    device: DeviceInfo
    precision: str
    shape: tuple[int, int, int]
    trials: int                      # measured in this run
    failures: Counter                # reason -> count, this run
    elapsed: float
    best: dict | None                # the study's best results row
    baseline: dict | None            # the baseline configuration's row
    tie_with_runner_up: bool | None
    space_size: int
    stopped_by: str                  # trials, timeout, exhausted, interrupted
    db: str
    device_busy: float | None = None  # share of the wall time the timing worker was busy

    @property
    def speedup(self) -> float | None:
        if self.best and self.baseline and self.baseline["gflops"]:
            return self.best["gflops"] / self.baseline["gflops"]
        return None


def _config_key(kernel: str, params: dict) -> tuple:
    return (kernel, tuple(sorted(params.items())))


class _Proposals:
    """Maps configurations to Optuna parameters and back."""

    def __init__(self, space: Space):
        self.space = space
        self.multi = len(space.families) > 1

    def name(self, kernel: str, param: str) -> str:
        return f"{kernel}.{param}" if self.multi else param

    def suggest(self, trial: optuna.Trial) -> Config:
        kernel = self.space.families[0].family.name
        if self.multi:
            kernel = trial.suggest_categorical("KERNEL", [fs.family.name for fs in self.space.families])
        fs = self.space.family(kernel)
        return Config.of(kernel, {p: trial.suggest_categorical(self.name(kernel, p), values)
                                  for p, values in fs.values.items()})

    def enqueue(self, study: optuna.Study, config: Config) -> None:
        params = {self.name(config.kernel, p): v for p, v in config.items}
        if self.multi:
            params["KERNEL"] = config.kernel
        study.enqueue_trial(params)


def run_search(req: SearchRequest, progress: Callable[[Progress], None] | None = None) -> Summary:
    """Search, measure and record; returns the summary. Ctrl-C ends it early (stopped_by)."""
    prec = get_precision(req.precision)
    if req.trials is not None and req.trials < 1:
        raise GemmtuneError(f"--trials must be at least 1, got {req.trials}")
    if req.sampler not in SAMPLERS:
        raise GemmtuneError(f"unknown sampler {req.sampler!r}: use one of {', '.join(SAMPLERS)}")
    if req.early_stop is not None and not 0 <= req.early_stop < 1:
        raise GemmtuneError(f"--early-stop must be in [0, 1), got {req.early_stop}")
    if req.jobs is not None and req.jobs < 0:
        raise GemmtuneError(f"--jobs must be at least 0, got {req.jobs}")
    space = load_space(req.space_file)
    runner = Runner(req.device, req.trial_timeout)
    compilers = None
    try:
        dev = runner.device
        check_problem(dev, prec, req.m, req.n, req.k)
        valid = valid_configs(space, dev, prec)
        if not valid:
            raise GemmtuneError(f"no configuration of {space.origin} is valid on device {dev.index} "
                                f"for precision {prec.code} (see gemmtune space --explain)")
        url = database_url(req.db)
        store = Store(url)  # opened last: bad input above leaves no database behind
        jobs = default_jobs() if req.jobs is None else req.jobs
        if jobs > 0:
            compilers = Compilers(runner.spec, jobs, req.trial_timeout)
        return _search(req, prec, space, valid, runner, compilers, store, progress)
    finally:
        if compilers is not None:
            compilers.close()
        runner.close()


def default_jobs() -> int:
    """One compiler process per core beside the one the parent and the timing worker share."""
    return max(1, (os.cpu_count() or 2) - 1)


class Proposer:
    """The next candidate to measure, by the rules in the module docstring.

    ``measured`` maps configuration keys to (status, GFLOP/s or None) and is shared with the
    caller, who adds each measured candidate; a proposal of a key already there is told that
    value again, or PRUNED while its status is "in_flight". ``pending`` configurations are
    enqueued first; ``grid`` (a list) makes the order exhaustive instead of the sampler's.
    Used by the live search and by ``gemmtune replay``, so that both follow one set of rules.
    """

    def __init__(self, study, proposals: "_Proposals", valid: list[Config], measured: dict, rng: random.Random,
                 pending: list[Config], grid: list[Config] | None = None, why_invalid=None):
        self.study, self.proposals, self.valid, self.measured = study, proposals, valid, measured
        self.rng, self.pending, self.grid, self.why_invalid = rng, pending, grid, why_invalid
        self.valid_keys = {_config_key(c.kernel, c.params) for c in valid}
        self.free = 0   # proposals in a row that cost nothing (invalid or measured before)

    def unmeasured(self) -> list[Config]:
        return [c for c in self.valid if _config_key(c.kernel, c.params) not in self.measured]

    def next(self):
        """(trial, config, key) of a valid, unmeasured configuration, or None when none is left.
        The key is marked "in_flight" in ``measured``."""
        study, measured = self.study, self.measured
        while True:
            if not self.pending:
                if self.grid is not None:
                    nxt = next((c for c in self.grid if _config_key(c.kernel, c.params) not in measured), None)
                    if nxt is None:
                        return None
                    self.pending.append(nxt)
                elif self.free >= MAX_FREE_PROPOSALS:
                    left = self.unmeasured()
                    if not left:
                        return None
                    self.pending.append(self.rng.choice(left))
            if self.pending:
                self.proposals.enqueue(study, self.pending.pop(0))
            trial = study.ask()
            config = self.proposals.suggest(trial)
            key = _config_key(config.kernel, config.params)
            if key not in self.valid_keys:
                broken = self.why_invalid(config) if self.why_invalid else None
                trial.set_user_attr("skipped", f"invalid: {broken.name if broken else 'not in space'}")
                study.tell(trial, state=TrialState.PRUNED)
                self.free += 1
                continue
            if key in measured:
                status, value = measured[key]
                trial.set_user_attr("skipped", "measured before" if status != "in_flight" else "in flight")
                if value is not None:
                    study.tell(trial, value)
                else:
                    study.tell(trial, state=TrialState.FAIL if status != "in_flight" else TrialState.PRUNED)
                self.free += 1
                continue
            self.free = 0
            measured[key] = ("in_flight", None)
            return trial, config, key


def _search(req, prec, space, valid, runner, compilers, store, progress) -> Summary:
    dev = runner.device
    m, n, k = req.m, req.n, req.k
    flops = prec.flops(m, n, k)
    name = req.study or default_study_name(dev, prec, m, n, k)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(storage=optuna.storages.RDBStorage(store.url), study_name=name,
                                    direction="maximize", load_if_exists=True,
                                    sampler=make_sampler(req.sampler, req.seed, constant_liar=compilers is not None))
    except Exception as e:  # storage errors come in many types; the message says which
        raise GemmtuneError(f"cannot open the study {name!r} in {store.url}: {str(e).splitlines()[0]}") from None

    measured: dict[tuple, tuple[str, float | None]] = {}
    for row in store.frame(study=name).itertuples():
        # pandas reads a failed row's NULL as NaN: Optuna must be told "failed", not NaN.
        value = None if row.gflops is None or row.gflops != row.gflops else float(row.gflops)
        measured[_config_key(row.kernel, json.loads(row.params))] = (row.status, value)
    valid_keys = {_config_key(c.kernel, c.params) for c in valid}
    proposals = _Proposals(space)
    rng = random.Random(req.seed)

    def unmeasured() -> list[Config]:
        return [c for c in valid if _config_key(c.kernel, c.params) not in measured]

    baseline = default_config(dev, prec)
    if _config_key(baseline.kernel, baseline.params) not in valid_keys:
        baseline = min(valid, key=lambda c: distance(baseline, c))  # --space may leave it out
    baseline_key = _config_key(baseline.kernel, baseline.params)
    pending: list[Config] = []
    if baseline_key not in measured:
        pending.append(baseline)
    grid_order = list(valid) if req.sampler == "grid" else None
    if req.seeds and grid_order is None:
        pending += _model_seeds(unmeasured(), req.seeds, dev, prec, m, n, k, store, rng, {baseline_key})

    budget = req.trials
    if req.sampler == "grid":
        left = len(unmeasured())
        budget = left if budget is None else min(budget, left)
    done, failures = 0, Counter()
    start = time.monotonic()
    stopped_by = None
    best = max((g for st, g in measured.values() if st == "ok" and g is not None), default=None)
    digests: dict[str, tuple[int, Outcome]] = {}   # binary digest -> (trial, outcome) measured
    timing_s = 0.0

    proposer = Proposer(study, proposals, valid, measured, rng, pending, grid_order,
                        why_invalid=lambda c: FAMILIES[c.kernel].broken(c.params, dev, prec))
    propose = proposer.next

    def finish(trial, config, key, outcome: Outcome, compile_s=None):
        nonlocal done, best
        if compile_s is not None:
            outcome = replace(outcome, compile_s=compile_s)
        value = _record(store, name, trial.number, dev, prec, m, n, k, config, outcome, key == baseline_key)
        measured[key] = (outcome.status, value)
        trial.set_user_attr("status", outcome.status)
        if value is not None:
            study.tell(trial, value)
            if outcome.status == "ok":
                best = value if best is None else max(best, value)
        else:
            failures[outcome.status] += 1
            study.tell(trial, state=TrialState.FAIL)
        done += 1
        if progress:
            progress(Progress(done, budget, best, sum(failures.values()), time.monotonic() - start,
                              outcome, config, value if outcome.status == "ok" else None))

    def job(config, built=None) -> Job:
        threshold = None
        if req.early_stop and best:
            threshold = flops / (req.early_stop * best * 1e9) * 1e3  # ms at early_stop x the best speed
        return Job(config, space.family(config.kernel).source, prec.code, m, n, k, req.policy,
                   binary=built.binary if built else None, stop_above_ms=threshold)

    ready: deque = deque()   # (trial, config, key, built): built, waiting for the device
    timing = None            # (trial, config, key, built) on the device
    try:
        while True:
            if stopped_by is None:
                if req.timeout is not None and time.monotonic() - start >= req.timeout:
                    stopped_by = "timeout"
            in_flight = len(ready) + (timing is not None) + (len(compilers.busy) if compilers else 0)
            # Ask for new candidates while there is room: builds run ahead of the device.
            while stopped_by is None and (budget is None or done + in_flight < budget):
                if compilers is not None:
                    worker = compilers.idle()
                    if worker is None or len(ready) >= len(compilers.workers):
                        break
                elif timing is not None or ready:
                    break
                proposal = propose()
                if proposal is None:
                    stopped_by = "exhausted"
                    break
                trial, config, key = proposal
                if compilers is not None:
                    worker.submit(BuildJob(config, space.family(config.kernel).source, prec.code),
                                  compilers.timeout, (trial, config, key))
                else:
                    ready.append((trial, config, key, None))
                in_flight += 1
            if stopped_by is not None:
                # Candidates not yet on the device are abandoned: told failed, never recorded.
                for trial, config, key, _ in ready:
                    measured.pop(key, None)
                    trial.set_user_attr("status", "abandoned")
                    study.tell(trial, state=TrialState.FAIL)
                ready.clear()
                if compilers is not None:
                    for w in compilers.busy:
                        trial, config, key = w.job[1]
                        measured.pop(key, None)
                        trial.set_user_attr("status", "abandoned")
                        study.tell(trial, state=TrialState.FAIL)
                        w.restart()
            if budget is not None and done >= budget and stopped_by is None:
                stopped_by = "trials"
            # Feed the device.
            while timing is None and ready:
                trial, config, key, built = ready.popleft()
                if built is not None and built.digest in digests:
                    first, outcome = digests[built.digest]
                    finish(trial, config, key, replace(outcome, detail=f"identical binary to trial {first}: "
                                                       f"measured once"), built.compile_s)
                    continue
                runner.submit(job(config, built), (trial, config, key, built))
                timing = (trial, config, key, built)
            busy = compilers.busy if compilers else []
            if timing is None and not busy and not ready:
                if stopped_by is not None:
                    break
                continue
            waits = [w.connection for w in busy] + ([runner.worker.connection] if timing else [])
            deadlines = [w.deadline for w in busy] + ([runner.worker.deadline] if timing else [])
            mp_connection.wait(waits, timeout=max(0.0, min(deadlines) - time.monotonic()))
            now = time.monotonic()
            for w in busy:
                if w.connection.poll(0) or now >= w.deadline:
                    trial, config, key = w.job[1]
                    built = compilers.collect(w)
                    if built.status == "ok":
                        ready.append((trial, config, key, built))
                    else:
                        finish(trial, config, key, Outcome(built.status, compile_s=built.compile_s,
                                                           detail=built.detail))
            if timing is not None and (runner.worker.connection.poll(0) or now >= runner.worker.deadline):
                trial, config, key, built = timing
                timing = None
                outcome = runner.collect()
                timing_s += outcome.trial_s or 0.0
                if built is not None and outcome.status in ("ok", "slow"):
                    digests[built.digest] = (trial.number, outcome)
                finish(trial, config, key, outcome, built.compile_s if built is not None else None)
    except KeyboardInterrupt:
        stopped_by = "interrupted"
        abandoned = [t for t, *_ in ready] + ([timing[0]] if timing else [])
        if compilers is not None:
            abandoned += [w.job[1][0] for w in compilers.busy]
        for trial in abandoned:
            trial.set_user_attr("status", "interrupted")
            study.tell(trial, state=TrialState.FAIL)
    elapsed = time.monotonic() - start
    return _summarize(store, name, dev, prec, (m, n, k), done, failures, elapsed,
                      baseline_key, len(valid), stopped_by or "trials", timing_s / elapsed if elapsed else None)


MODEL_SAMPLE = 5000  # configurations ranked by the model for seeding; the whole space may be 10^5


def _model_seeds(candidates: list[Config], count: int, dev, prec, m, n, k, store: Store, rng: random.Random,
                 skip: set) -> list[Config]:
    """The best-predicted unmeasured configurations, one per distinct prediction (of a random
    sample, when the space is large), with the device's measured peaks where `gemmtune peak`
    stored them."""
    from gemmtune.model import seeds

    sample = candidates if len(candidates) <= MODEL_SAMPLE else rng.sample(candidates, MODEL_SAMPLE)
    sample = [c for c in sample if _config_key(c.kernel, c.params) not in skip]
    return seeds(sample, dev, prec, m, n, k, count, store.latest_peaks(dev.key))


def _record(store: Store, study: str, number: int, dev: DeviceInfo, prec: Precision, m, n, k,
            config: Config, outcome: Outcome, is_baseline: bool) -> float | None:
    """Commit one trial's row; returns its GFLOP/s, or None for a failure."""
    t: Timing | None = outcome.timing
    # A "slow" candidate was stopped early: its estimate is kept, but it can never be best.
    value = gflops(prec.flops(m, n, k), t.median_ms) if outcome.status in ("ok", "slow") and t else None
    low, high = t.ci_ms if t else (None, None)
    store.add(
        study=study, trial=number, device=dev.key, device_name=dev.name, precision=prec.code,
        m=m, n=n, k=k, kernel=config.kernel, params=config.params, status=outcome.status,
        gflops=value, time_ms=t.median_ms if t else None, kernel_time_ms=t.kernel_median_ms if t else None,
        ci_low_ms=None if low is None or low != low else low, ci_high_ms=None if high is None or high != high else high,
        min_ms=t.min_ms if t else None, repeats=t.repeats if t else None, samples_ms=t.samples_ms if t else None,
        max_rel_error=outcome.check.max_rel_error if outcome.check else None,
        norm_rel_error=outcome.check.norm_rel_error if outcome.check else None,
        compile_s=outcome.compile_s, trial_s=outcome.trial_s, detail=outcome.detail or None,
        baseline=is_baseline,
    )
    return value


def _summarize(store, name, dev, prec, shape, done, failures, elapsed, baseline_key, space_size, stopped_by,
               device_busy=None):
    rows = store.frame(study=name)
    ok = rows[rows.status == "ok"].sort_values("gflops", ascending=False)
    best = ok.iloc[0].to_dict() if len(ok) else None
    tie = None
    if len(ok) >= 2:
        tie = is_tie(json.loads(ok.iloc[0].samples_ms), json.loads(ok.iloc[1].samples_ms))
    base_rows = rows[rows.apply(lambda r: _config_key(r.kernel, json.loads(r.params)) == baseline_key, axis=1)] \
        if len(rows) else rows
    baseline = base_rows.iloc[0].to_dict() if len(base_rows) else None
    return Summary(name, dev, prec.code, shape, done, failures, elapsed, best, baseline, tie, space_size,
                   stopped_by, store.url, device_busy)
