"""The search: Optuna proposes configurations of the valid space (``gemmtune.proposer``), the
runner measures them, and every measured trial becomes one row of ``results``, committed when
the trial ends.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import signal
import socket
import threading
import time
import warnings
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from multiprocessing import connection as mp_connection
from typing import Callable

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from gemmtune.defaults import default_config, distance
from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.launch import Problem
from gemmtune.info import DeviceInfo, core_plan, host_cores
from gemmtune.inputs import check_problem, check_seed, check_study_name
from gemmtune.precision import Precision, get_precision
from gemmtune.rows import screen
from gemmtune.runner import BuildJob, Compilers, Job, Outcome, Runner
from gemmtune.space import Config, Space, load_space
from gemmtune.valid import ValidConfigs
from gemmtune.store import Store, database_url, fast_sqlite, probe
from gemmtune.proposer import SAMPLERS, Proposals, Proposer, config_key, make_sampler
from gemmtune.study_storage import BatchedStorage
from gemmtune.timing import Timing, TimingPolicy, gflops, is_tie
from gemmtune.urls import db_error, shown

def default_study_name(dev: DeviceInfo, prec: Precision, m: int, n: int, k: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{dev.name}-{dev.driver_version}").strip("-").lower()
    return f"{slug}-{prec.code}-{m}x{n}x{k}"


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
    grace: float = 60.0              # seconds without a heartbeat before another process fails a trial
    start: tuple = ()                # configurations measured first, after the baseline (e.g. of nearby shapes)


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
    device: DeviceInfo | None = None     # the device that measured ``last`` (None: it failed to build)
    study: str | None = None
    left: float | None = None            # seconds of the time budget left (None: no budget)


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
    db: str                          # without the password
    device_busy: float | None = None  # share of the wall time the timing workers were busy
    devices: list[DeviceInfo] = field(default_factory=list)   # every device that searched it here

    @property
    def speedup(self) -> float | None:
        if self.best and self.baseline and self.baseline["gflops"]:
            return self.best["gflops"] / self.baseline["gflops"]
        return None


def run_search(req: SearchRequest, progress: Callable[[Progress], None] | None = None) -> list[Summary]:
    """Search, measure and record on every device of ``req.device``; one Summary per study
    (devices of one model share one). Ctrl-C ends it early (``stopped_by``)."""
    prec = get_precision(req.precision)
    if req.trials is not None and req.trials < 1:
        raise GemmtuneError(f"--trials must be at least 1, got {req.trials}")
    if req.sampler not in SAMPLERS:
        raise GemmtuneError(f"unknown sampler {req.sampler!r}: use one of {', '.join(SAMPLERS)}")
    if req.early_stop is not None and not 0 <= req.early_stop < 1:
        raise GemmtuneError(f"--early-stop must be in [0, 1), got {req.early_stop}")
    if req.jobs is not None and req.jobs < 0:
        raise GemmtuneError(f"--jobs must be at least 0, got {req.jobs}")
    if req.grace < 1:
        raise GemmtuneError(f"--heartbeat-grace must be at least 1 second, got {req.grace:g}")
    check_seed(req.seed)
    check_study_name(req.study)
    # A given space file is read (and refused) now; without one, each device gets the shipped
    # space of its type once it is open.
    space = load_space(req.space_file) if req.space_file is not None else None
    from gemmtune.device import device_specs, resolve_device

    specs = device_specs(req.device)
    # What would otherwise fail only after the workers opened their devices and the space was
    # enumerated (tens of seconds with the shipped space) fails now: the database, its lock,
    # the devices and whether the problem fits them.
    early_lock = probe(database_url(req.db), lock=True)
    try:
        for info in {i.key: i for i in map(resolve_device, specs)}.values():
            check_problem(info, prec, req.m, req.n, req.k)
        return _run(req, prec, space, specs, early_lock, progress)
    finally:
        if early_lock is not None:
            early_lock.close()


def _run(req: SearchRequest, prec: Precision, space: Space | None, specs: list[str], early_lock,
         progress) -> list[Summary]:
    # Several timing workers share the host: each gets cores of its own, and the compilers the
    # rest. Measured on two H200s of one host, two unpinned workers each spent 1.6 times as long
    # per trial on the host (read-back, comparison, even waiting for the device) as one alone;
    # pinned to 8 cores each, no longer than alone.
    plan = core_plan(len(specs)) if len(specs) > 1 else None
    shares, compiler_cores = plan if plan else (None, None)
    runners: list[Runner] = []
    lanes: list[_Lane] = []
    try:
        for i, spec in enumerate(specs):
            runners.append(Runner(spec, req.trial_timeout, wait=False, cores=shares[i] if shares else None))
        for r in runners:
            r.ready()
        groups: dict[str, list[Runner]] = {}
        for r in runners:
            groups.setdefault(r.device.key, []).append(r)
        if req.study and len(groups) > 1:
            names = " and ".join(sorted({g[0].device.name for g in groups.values()}))
            raise GemmtuneError(f"--study names one study, but the devices are of different models ({names}), "
                                "each searched in a study of its own: leave --study out")
        plans = []
        for group in groups.values():
            dev = group[0].device
            searched = space or load_space(device=dev)
            valid = ValidConfigs(searched, dev, prec)   # drawn from and counted, never listed whole
            if not valid:
                raise GemmtuneError(f"no configuration of {searched.origin} is valid on device {dev.index} "
                                    f"for precision {prec.code} (see gemmtune space --explain)")
            plans.append((group, searched, valid))
        store = Store(database_url(req.db))  # opened last: bad input above leaves no database behind
        lock = early_lock or store.lock()
        try:
            jobs = default_jobs(compiler_cores) if req.jobs is None else req.jobs
            for group, searched, valid in plans:
                compilers = Compilers(group[0].spec, max(1, jobs // len(plans)), req.trial_timeout,
                                      cores=compiler_cores or None) if jobs else None
                lanes.append(_Lane(req, prec, searched, valid, group, compilers, store))
            return _search(lanes, req, progress)
        finally:
            for lane in lanes:
                lane.storage.engine.dispose()  # Optuna's connections closed before the store's
            store.close()
            if lock is not None and lock is not early_lock:
                lock.close()
    finally:
        for lane in lanes:
            if lane.compilers is not None:
                lane.compilers.close()
        for r in runners:
            r.close()


def default_jobs(compiler_cores: tuple[int, ...] | None = None) -> int:
    """One compiler process per core left to the compilers where they are pinned; else one per
    core beside the one the parent and the timing worker share."""
    if compiler_cores:
        return len(compiler_cores)
    return max(1, host_cores() - 1)


HEARTBEAT_S = 5                          # seconds between heartbeats of the trials in flight, at most


def heartbeat_interval(grace: float) -> int:
    """Whole seconds between heartbeats: a few beats fit in the grace period, so a live trial
    is never taken for a dead one."""
    return max(1, min(HEARTBEAT_S, int(grace // 3)))


def claim_text(key: tuple) -> str:
    """A configuration key as canonical text, the claims table's ``config``."""
    kernel, items = key
    return json.dumps([kernel, [list(item) for item in items]], separators=(",", ":"))


@contextlib.contextmanager
def _quiet_heartbeat():
    """Optuna warns that heartbeats are meant for Study.optimize, and that they are experimental;
    gemmtune drives ask/tell and records the heartbeats itself."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


class _Lane:
    """One study, searched here by the devices of one device key (same model and driver).

    Other processes (``--db postgresql://...``) may search the same study: Optuna shares the
    trials, the claims table makes sure each configuration is measured once, and the results
    rows tell each process what the others found. A trial whose process stops sending
    heartbeats is failed by whichever process notices, and recorded as ``lost``.
    """

    def __init__(self, req: SearchRequest, prec: Precision, space: Space, valid: ValidConfigs,
                 runners: list[Runner], compilers: Compilers | None, store: Store):
        self.req, self.prec, self.space, self.valid = req, prec, space, valid
        self.runners, self.compilers, self.store = runners, compilers, store
        self.dev = dev = runners[0].device
        m, n, k = req.m, req.n, req.k
        self.flops = prec.flops(m, n, k)
        self.name = name = req.study or default_study_name(dev, prec, m, n, k)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.beat = heartbeat_interval(req.grace)
        self.storage, self.study = self._open_study(store.url, name)
        store.save_device(dev)

        self.measured: dict[tuple, tuple[str, float | None]] = {}
        self.seen_id = 0
        self.refresh()
        self.proposals = Proposals(space)
        rng = random.Random(req.seed)
        def broken(c: Config):
            return FAMILIES[c.kernel].broken(c.params, dev, prec)

        self.proposer = proposer = Proposer(
            self.study, self.proposals, valid, self.measured, rng, [],
            list(valid) if req.sampler == "grid" else None, uniform=req.sampler == "random",
            why_invalid=broken,
            claim=lambda key, trial: store.claim(name, claim_text(key), trial.number), refresh=self.refresh,
            batch=self.storage.batch, asked=lambda trial: self.storage.record_heartbeat(trial._trial_id),
            is_valid=lambda c: space.allows(c) and broken(c) is None)
        baseline = default_config(dev, prec, (m, n, k))
        if not proposer.is_valid(baseline):
            baseline = min(valid, key=lambda c: distance(baseline, c))  # --space may leave it out
        self.baseline_key = config_key(baseline.kernel, baseline.params)
        if self.baseline_key not in self.measured:
            proposer.pending.append(baseline)
        for c in req.start:
            key = config_key(c.kernel, c.params)
            if key != self.baseline_key and key not in self.measured and proposer.is_valid(c):
                proposer.pending.append(c)
        if req.seeds and proposer.grid is None:
            proposer.pending += _model_seeds(valid, req.seeds, dev, prec, m, n, k, store, rng,
                                             {*self.measured, self.baseline_key})

        self.budget = req.trials
        self.timeout = req.timeout
        if req.sampler == "grid":
            left = len(self.proposer.unmeasured())
            self.budget = left if self.budget is None else min(self.budget, left)
        self.done, self.failures, self.timing_s = 0, Counter(), 0.0
        self.build_s = self.device_s = None   # running means of a build and of a device's trial
        self.stopped_by: str | None = None
        self.unrecorded_best: float | None = None   # of results collected but not yet recorded
        self.digests: dict[tuple, tuple[int, Outcome]] = {}   # _same_run -> (trial, outcome) measured
        self.ready: deque = deque()   # (trial, config, key, built): built, waiting for a device
        # runner index -> (trial, config, key, built) on it: the one in flight first, then the
        # one waiting in the worker (with a compiler pool, each device gets its next candidate
        # before it finishes, so that it never waits for this process to notice)
        self.timing: dict[int, deque] = {i: deque() for i in range(len(runners))}
        self.fed = [0] * len(runners)    # candidates given to each device so far
        self.depth = 2 if compilers is not None else 1
        self.flying: dict[int, optuna.Trial] = {}   # trial id -> trial, everything asked and not told

    def _open_study(self, url: str, name: str, attempts: int = 3):
        for attempt in range(attempts):
            try:
                with _quiet_heartbeat():
                    storage = BatchedStorage(
                        url, heartbeat_interval=self.beat, grace_period=int(math.ceil(self.req.grace)),
                        heartbeat_stale_trial_callback=self._lost)
                fast_sqlite(storage.engine)
                study = optuna.create_study(storage=storage, study_name=name, direction="maximize",
                                            load_if_exists=True,
                                            sampler=make_sampler(self.req.sampler, self.req.seed, constant_liar=True))
                return storage, study
            except sa.exc.IntegrityError:
                # Processes starting together race to create Optuna's tables; the loser retries.
                if attempt == attempts - 1:
                    raise GemmtuneError(f"cannot create the study {name!r} in {shown(url)}: tables created "
                                        "concurrently by another process") from None
                time.sleep(0.5 * (attempt + 1))
            except Exception as e:  # storage errors come in many types; the message says which
                raise GemmtuneError(f"cannot open the study {name!r} in {shown(url)}: {db_error(e, url)}") from None

    @property
    def best(self) -> float | None:
        values = [g for st, g in self.measured.values() if st == "ok" and g is not None]
        if self.unrecorded_best is not None:
            values.append(self.unrecorded_best)
        return max(values, default=None)

    def refresh(self) -> None:
        """Read results rows recorded since the last look (by any process) into ``measured``."""
        rows = self.store.frame(study=self.name, after_id=self.seen_id)
        if len(rows):
            self.seen_id = max(self.seen_id, int(rows.id.max()))
        for row in screen(rows, self.space).rows.itertuples():  # rows of a shared database can be anything
            # pandas reads a failed row's NULL as NaN: Optuna must be told "failed", not NaN.
            value = None if row.gflops is None or row.gflops != row.gflops else float(row.gflops)
            key = config_key(row.kernel, json.loads(row.params))
            if self.measured.get(key, ("", None))[0] != "in_flight":
                self.measured[key] = (row.status, value)

    def _lost(self, study, frozen) -> None:
        """Optuna failed a stale trial (its process stopped sending heartbeats): record it, once."""
        if frozen._trial_id in self.flying:  # our own, late after a long pause: its result comes
            return
        if frozen.number in set(self.store.frame(study=self.name, trial=frozen.number).trial):
            return
        config = self.proposals.decode(frozen.params)
        if config is None:
            return
        _record(self.store, self.name, frozen.number, self.dev, self.prec, self.req.m, self.req.n, self.req.k,
                config, Outcome("lost", detail="its search process stopped sending heartbeats (it or its machine "
                                "died) during the trial"), False)

    # -- the pipeline

    def has_room(self) -> bool:
        if self.stopped_by is not None:
            return False
        busy = len(self.compilers.busy) if self.compilers else 0
        on_devices = sum(map(len, self.timing.values()))
        in_flight = len(self.ready) + on_devices + busy
        if self.budget is not None and self.done + in_flight >= self.budget:
            return False
        if self.compilers is not None:
            return self.compilers.idle() is not None and len(self.ready) + busy < self.build_ahead()
        return len(self.ready) + on_devices < len(self.runners)

    def build_ahead(self) -> int:
        """Candidates built or building ahead of the devices: twice the builds that finish while
        a device measures (build time over device time per trial; twice, as build times vary
        tenfold), plus two ready per device. More would only keep compilers busy on cores the
        timing worker, its comparison and this process need, and put more trials in flight
        than the sampler's constant liar must cover."""
        if not (self.build_s and self.device_s):
            return len(self.compilers.workers) + 2 * len(self.runners)
        return len(self.runners) * (2 + 2 * math.ceil(self.build_s / self.device_s))

    def fill_one(self) -> bool:
        """Ask for one new candidate if there is room (builds run ahead of the devices); True if
        one was asked. One at a time, so that finished devices are fed between asks: an ask
        (and the invalid proposals it may skip) costs the sampler and the database some time."""
        if not self.has_room():
            return False
        with _quiet_heartbeat():
            proposal = self.proposer.next()
        if proposal is None:  # every configuration measured or in flight: let those finish
            self.stopped_by = self.stopped_by or "exhausted"
            return False
        trial, config, key = proposal
        self.flying[trial._trial_id] = trial
        if self.compilers is not None:
            self.compilers.idle().submit(BuildJob(config, self.space.family(config.kernel).source, self.prec.code),
                                         self.compilers.timeout, (trial, config, key))
        else:
            self.ready.append((trial, config, key, None))
        return True

    def _abandon(self, trial, key, status: str) -> None:
        """A candidate dropped before it was measured: told failed, never recorded, its claim given back."""
        self.measured.pop(key, None)
        self.store.release(self.name, claim_text(key), trial.number)
        trial.set_user_attr("status", status)
        self.study.tell(trial, state=TrialState.FAIL)
        self.flying.pop(trial._trial_id, None)

    def stop(self, why: str, status: str = "abandoned") -> None:
        """No new candidates; those not yet on a device are abandoned (``status``)."""
        self.stopped_by = self.stopped_by or why
        for trial, config, key, _ in self.ready:
            self._abandon(trial, key, status)
        self.ready.clear()
        if self.compilers is not None:
            for w in self.compilers.busy:
                trial, config, key = w.job[1]
                self._abandon(trial, key, status)
                w.kill()  # this lane builds nothing more: no need to start another

    def interrupt(self) -> None:
        self.stop("interrupted", "interrupted")
        for entries in self.timing.values():
            for trial, config, key, _ in entries:
                self._abandon(trial, key, "interrupted")
            entries.clear()

    @property
    def finished(self) -> bool:
        if self.stopped_by is None and self.budget is not None and self.done >= self.budget:
            self.stopped_by = "trials"
        busy = self.compilers.busy if self.compilers else []
        return self.stopped_by is not None and not any(self.timing.values()) and not busy and not self.ready

    def feed(self, progress) -> None:
        """Put built candidates on devices with room (the one in flight and one waiting): each to
        the device with the fewest queued, of those the one given the fewest so far. Filled in
        order instead, the first device took every candidate whenever building was slower than
        timing, and the others stood idle."""
        while True:
            i = min(self.timing, key=lambda j: (len(self.timing[j]), self.fed[j]))
            if len(self.timing[i]) >= self.depth:
                break
            entry = self._next_ready(progress)
            if entry is None:
                break
            trial, config, key, built = entry
            self.runners[i].submit(self._job(config, built), entry)
            self.timing[i].append(entry)
            self.fed[i] += 1

    def _next_ready(self, progress):
        """The first ready candidate to measure. One whose identical run was measured gets those
        figures instead; one whose identical run is on a device now waits for its figures."""
        on_devices = {self._same_run(c, b) for entries in self.timing.values() for _, c, _, b in entries}
        for entry in list(self.ready):
            trial, config, key, built = entry
            same = self._same_run(config, built)
            if same in self.digests:
                self.ready.remove(entry)
                first, outcome = self.digests[same]
                self.finish(trial, config, key, replace(outcome, detail=f"identical binary to trial {first}: "
                                                                    "measured once"), built.compile_s, progress)
            elif same is None or same not in on_devices:
                self.ready.remove(entry)
                return entry
        return None

    def _same_run(self, config: Config, built) -> tuple | None:
        """What makes two candidates the same measurement: an identical binary launched the
        same way (the same launch plan); None when not built ahead."""
        if built is None:
            return None
        plan = FAMILIES[config.kernel].plan(config.params, self.prec, Problem(self.req.m, self.req.n, self.req.k),
                                            self.dev, self.dev.compute_units)
        return built.digest, plan

    def threshold_ms(self) -> float | None:
        """The early stop's threshold: the time of early_stop x the best speed so far."""
        best = self.best
        if self.req.early_stop and best:
            return self.flops / (self.req.early_stop * best * 1e9) * 1e3
        return None

    def _job(self, config, built) -> Job:
        return Job(config, self.space.family(config.kernel).source, self.prec.code, self.req.m, self.req.n,
                   self.req.k, self.req.policy, binary=built.binary if built else None,
                   stop_above_ms=self.threshold_ms())

    def waits(self) -> tuple[list, list]:
        """Connections to wait on and their deadlines."""
        busy = self.compilers.busy if self.compilers else []
        timed = [self.runners[i].worker for i, entries in self.timing.items() if entries]
        return ([w.connection for w in busy + timed], [w.deadline for w in busy + timed])

    def collect(self, progress) -> None:
        now = time.monotonic()
        for w in self.compilers.busy if self.compilers else []:
            if w.connection.poll(0) or now >= w.deadline:
                trial, config, key = w.job[1]
                built = self.compilers.collect(w)
                self.build_s = _running_mean(self.build_s, built.compile_s)
                if built.status == "ok":
                    self.ready.append((trial, config, key, built))
                else:
                    self.finish(trial, config, key, Outcome(built.status, compile_s=built.compile_s,
                                                            detail=built.detail), None, progress)
        done, before = [], self.threshold_ms()
        for i, entries in self.timing.items():
            runner = self.runners[i]
            if entries and (runner.worker.connection.poll(0) or now >= runner.worker.deadline):
                trial, config, key, built = entries.popleft()
                outcome = runner.collect()
                self.timing_s += outcome.trial_s or 0.0
                self.device_s = _running_mean(self.device_s, outcome.trial_s)
                if built is not None and outcome.status in ("ok", "slow"):
                    self.digests[self._same_run(config, built)] = (trial.number, outcome)
                done.append((trial, config, key, outcome, built, runner.device))
                if outcome.status == "ok" and outcome.timing is not None:  # the early stop of the next
                    value = gflops(self.flops, outcome.timing.median_ms)
                    self.unrecorded_best = max(self.unrecorded_best or 0.0, value)
        after = self.threshold_ms() if done else before
        if after != before:  # a new best: the candidates on devices learn it
            for i, entries in self.timing.items():
                if entries:
                    self.runners[i].stop_above(after)
        if done:
            self.feed(progress)  # the next candidates go on the devices before the database writes
        for trial, config, key, outcome, built, dev in done:
            self.finish(trial, config, key, outcome, built.compile_s if built is not None else None, progress, dev)

    def finish(self, trial, config, key, outcome: Outcome, compile_s, progress, dev: DeviceInfo | None = None):
        if compile_s is not None:
            outcome = replace(outcome, compile_s=compile_s)
        dev = dev or self.dev
        value = _record(self.store, self.name, trial.number, dev, self.prec, self.req.m, self.req.n, self.req.k,
                        config, outcome, key == self.baseline_key)
        self.measured[key] = (outcome.status, value)
        if value is None:
            self.failures[outcome.status] += 1
        try:
            trial.set_user_attr("status", outcome.status)
            if value is not None:
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=TrialState.FAIL)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            pass  # failed as stale while this process was paused past the grace period; its row stands
        self.flying.pop(trial._trial_id, None)
        self.done += 1
        if progress:
            elapsed = time.monotonic() - self.start
            left = None if self.timeout is None else max(0.0, self.timeout - elapsed)
            progress(Progress(self.done, self.budget, self.best, sum(self.failures.values()),
                              elapsed, outcome, config, value if outcome.status == "ok" else None, dev,
                              self.name, left))

    def heartbeat(self) -> None:
        for trial_id in self.flying:
            self.storage.record_heartbeat(trial_id)
        with _quiet_heartbeat():
            optuna.storages.fail_stale_trials(self.study)
        for trial_id in self.storage.unbeaten_trial_ids(self.study._study_id, self.req.grace):
            if trial_id not in self.flying and self.storage.set_trial_state_values(trial_id, TrialState.FAIL):
                self._lost(self.study, self.storage.get_trial(trial_id))
        self.refresh()

    def summary(self, elapsed: float) -> Summary:
        busy = self.timing_s / (elapsed * len(self.runners)) if elapsed else None
        return _summarize(self.store, self.name, [r.device for r in self.runners], self.prec,
                          (self.req.m, self.req.n, self.req.k), self.done, self.failures, elapsed,
                          self.baseline_key, len(self.valid), self.stopped_by or "trials", busy, self.space)


def _running_mean(mean: float | None, x: float | None, weight: float = 0.2) -> float | None:
    """Exponentially weighted: follows a search that moves to slower or faster candidates."""
    if x is None:
        return mean
    return x if mean is None else (1 - weight) * mean + weight * x


class _CtrlC:
    """Ctrl-C as a flag, not an exception: an exception could land inside a database write and
    leave its transaction holding SQLite's lock. ``wakeup`` becomes readable when it is pressed,
    so the main loop's wait returns at once."""

    def __enter__(self):
        self.pressed = False
        self.wakeup, self._writer = socket.socketpair()
        for end in (self.wakeup, self._writer):
            end.setblocking(False)
        self._handler = self._fd = None
        if threading.current_thread() is threading.main_thread():
            self._fd = signal.set_wakeup_fd(self._writer.fileno())
            self._handler = signal.signal(signal.SIGINT, self._press)
        return self

    def _press(self, signum, frame):
        self.pressed = True

    def drain(self) -> None:
        try:
            while self.wakeup.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def __exit__(self, *exc):
        if self._handler is not None:
            signal.signal(signal.SIGINT, self._handler)
            signal.set_wakeup_fd(self._fd)
        self.wakeup.close()
        self._writer.close()


def _search(lanes: list[_Lane], req: SearchRequest, progress) -> list[Summary]:
    with _CtrlC() as ctrl_c:
        return _run_lanes(lanes, req, progress, ctrl_c)


def _run_lanes(lanes: list[_Lane], req: SearchRequest, progress, ctrl_c: _CtrlC) -> list[Summary]:
    start = time.monotonic()
    for lane in lanes:
        lane.start = start
        lane.heartbeat()  # trials of searches that died before this one started
    beat, beat_s = start, min(lane.beat for lane in lanes)
    try:
        while True:
            if ctrl_c.pressed:
                raise KeyboardInterrupt
            now = time.monotonic()
            asked = False
            for lane in lanes:
                if lane.stopped_by is None and req.timeout is not None and now - start >= req.timeout:
                    lane.stop("timeout")
                lane.collect(progress)
                lane.feed(progress)
                asked = lane.fill_one() or asked
                lane.feed(progress)
            if now - beat >= beat_s:
                beat = now
                for lane in lanes:
                    lane.heartbeat()
            if all(lane.finished for lane in lanes):
                break
            waits, deadlines = [], []
            for lane in lanes:
                w, d = lane.waits()
                waits += w
                deadlines += d
            if asked:
                continue  # more to ask: look at the devices again first, without waiting
            until = min(deadlines + [beat + beat_s])
            mp_connection.wait(waits + [ctrl_c.wakeup], timeout=max(0.0, until - time.monotonic()))
            ctrl_c.drain()
    except KeyboardInterrupt:
        for lane in lanes:
            lane.interrupt()
    elapsed = time.monotonic() - start
    return [lane.summary(elapsed) for lane in lanes]


MODEL_SAMPLE = 5000  # configurations ranked by the model for seeding; the whole space may be 10^5


def _model_seeds(valid: ValidConfigs, count: int, dev, prec, m, n, k, store: Store, rng: random.Random,
                 skip: set) -> list[Config]:
    """The best-predicted configurations not in ``skip``, one per distinct prediction (of a random
    sample, when the space is large), with the device's measured peaks where `gemmtune peak`
    stored them."""
    from gemmtune.model import seeds

    sample = valid.sample(MODEL_SAMPLE, rng)   # drawn from the product: the space is never listed
    sample = [c for c in sample if config_key(c.kernel, c.params) not in skip]
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
        device_time_ms=t.device_median_ms if t else None,
        ci_low_ms=None if low is None or low != low else low, ci_high_ms=None if high is None or high != high else high,
        min_ms=t.min_ms if t else None, repeats=t.repeats if t else None, samples_ms=t.samples_ms if t else None,
        max_rel_error=outcome.check.max_rel_error if outcome.check else None,
        norm_rel_error=outcome.check.norm_rel_error if outcome.check else None,
        compile_s=outcome.compile_s, trial_s=outcome.trial_s, detail=outcome.detail or None,
        baseline=is_baseline,
    )
    return value


def _summarize(store, name, devices, prec, shape, done, failures, elapsed, baseline_key, space_size, stopped_by,
               device_busy=None, space=None):
    rows = screen(store.frame(study=name), space).rows
    ok = rows[rows.status == "ok"].sort_values("gflops", ascending=False)
    best = ok.iloc[0].to_dict() if len(ok) else None
    tie = None
    if len(ok) >= 2 and ok.iloc[0].samples_ms and ok.iloc[1].samples_ms:
        tie = is_tie(json.loads(ok.iloc[0].samples_ms), json.loads(ok.iloc[1].samples_ms))
    base_rows = rows[rows.apply(lambda r: config_key(r.kernel, json.loads(r.params)) == baseline_key, axis=1)] \
        if len(rows) else rows
    baseline = base_rows.iloc[0].to_dict() if len(base_rows) else None
    return Summary(name, devices[0], prec.code, shape, done, failures, elapsed, best, baseline, tie, space_size,
                   stopped_by, store.shown, device_busy, devices)
