"""Build and measure: candidates go to the compiler processes, then to the devices' timing
workers; an identical binary launched alike is measured once, and the early stop's threshold
follows the best speed so far."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import astuple, replace
from typing import Callable

from gemmtune.execution.messages import BuildJob, Job, Outcome, problem_key
from gemmtune.execution.processes import Compilers, Runner
from gemmtune.families import FAMILIES
from gemmtune.launch.plan import Problem
from gemmtune.precision import Precision
from gemmtune.space import Config, Space
from gemmtune.measure.timing import TimingPolicy, gflops


def running_mean(mean: float | None, x: float | None, weight: float = 0.2) -> float | None:
    """Exponentially weighted: follows a search that moves to slower or faster candidates."""
    if x is None:
        return mean
    return x if mean is None else (1 - weight) * mean + weight * x


IDENTICAL = "identical binary to trial "


def identical_note(first: int) -> str:
    """The ``detail`` of a row that took the figures of trial ``first``, measured with the same binary."""
    return f"{IDENTICAL}{first}: measured once"


class SameRuns:
    """Measured runs by what makes two candidates the same measurement: an identical binary
    launched the same way (the same launch plan)."""

    def __init__(self, prec: Precision, problem: Problem, dev):
        self.prec, self.problem, self.dev = prec, problem, dev
        self.measured: dict[tuple, tuple[int, Outcome]] = {}   # run -> (trial number, outcome)

    def of(self, config: Config, built) -> tuple | None:
        """None when not built ahead."""
        if built is None:
            return None
        plan = FAMILIES[config.kernel].plan(config.params, self.prec, self.problem, self.dev,
                                            self.dev.compute_units)
        return built.digest, plan


class IdleTime:
    """Device-seconds a pipeline's devices had nothing to measure, by what they waited for:
    whether the compilers or the sampler set a search's pace."""

    def __init__(self):
        self.seconds = {"build": 0.0, "proposal": 0.0}
        self._noted: tuple[float, str | None, int] | None = None   # (when, waiting for, devices idle)
        self.start: float | None = None   # when the search began (time.monotonic)
        self.reported_s = 0.0   # what the devices themselves say they waited since then

    def reported(self, outcome: Outcome, now: float) -> None:
        """Add what a device says it waited for the job of ``outcome``, collected ``now``; its first
        wait began when it was ready, before the search did."""
        since_start = now - (outcome.trial_s or 0.0) - self.start if self.start is not None else math.inf
        self.reported_s += min(outcome.idle_s or 0.0, max(0.0, since_start))

    def note(self, pipeline: "Pipeline", now: float, winding_down: bool = False) -> None:
        """Count the time since the last note for what the idle devices waited for then, and
        look again: a device with nothing on it waits for a proposal where the pipeline has room
        for another candidate (a compiler, or with none the timing worker, could build one), else
        for the builds in progress; for nothing while the search winds down (no more to ask)."""
        if self._noted is not None:
            when, cause, idle = self._noted
            if cause is not None:
                self.seconds[cause] += (now - when) * idle
        idle = sum(1 for entries in pipeline.timing.values() if not entries)
        waiting = None if winding_down or not idle else "proposal" if pipeline.has_room() else "build"
        self._noted = (now, waiting, idle)

    def shares(self, elapsed: float, devices: int) -> dict[str, float] | None:
        """Shares of the devices' time by cause; what the devices reported waiting beyond those
        is ``process``: the search process, busy with other work, had not yet handed over a
        candidate that was ready."""
        if not elapsed:
            return None
        shares = {why: s / (elapsed * devices) for why, s in self.seconds.items()}
        return {**shares, "process": max(0.0, self.reported_s / (elapsed * devices) - sum(shares.values()))}


class Builds:
    """The compile stage: candidates on the compiler processes, each handed back built (or
    failed), and how far to build ahead of the devices."""

    def __init__(self, compilers: Compilers, space: Space, prec: Precision, problem: Problem):
        self.compilers, self.space, self.prec, self.problem = compilers, space, prec, problem
        self.build_s: float | None = None   # mean build time

    @property
    def busy(self) -> list:
        return self.compilers.busy

    def submit(self, trial, config: Config, key: tuple) -> None:
        job = BuildJob(config, self.space.family(config.kernel).source, self.prec.code, self.problem)
        self.compilers.idle().submit(job, self.compilers.timeout, (trial, config, key))

    def has_room(self, ready: int, devices: int, device_s: float | None) -> bool:
        return self.compilers.idle() is not None and ready + len(self.busy) < self.ahead(devices, device_s)

    def ahead(self, devices: int, device_s: float | None) -> int:
        """Candidates built or building ahead of the devices: twice the builds that finish while
        a device measures (build time over device time per trial; twice, as build times vary
        tenfold), plus two ready per device. More would only keep compilers busy on cores the
        timing worker, its comparison and this process need, and put more trials in flight
        than the sampler's constant liar must cover."""
        if not (self.build_s and device_s):
            return len(self.compilers.workers) + 2 * devices
        return devices * (2 + 2 * math.ceil(self.build_s / device_s))

    def stop(self) -> list:
        """Every build in progress, stopped; their entries (trial, config, key)."""
        building = list(self.busy)
        entries = [w.job[1] for w in building]   # killing clears a worker's job
        for w in building:
            w.kill()  # nothing more is built: no need to start another
        return entries

    def collect(self, now: float) -> list:
        """The builds finished (or past their deadline): (trial, config, key, built) each."""
        done = []
        for w in self.busy:
            if w.connection.poll(0) or now >= w.deadline:
                entry = w.job[1]   # collecting clears the worker's job
                built = self.compilers.collect(w)
                self.build_s = running_mean(self.build_s, built.compile_s)
                done.append((*entry, built))
        return done


class Pipeline:
    """Candidates of one study between the proposer and their results. An entry is
    (trial, config, key, built); ``finish(trial, config, key, outcome, compile_s, device)`` is
    called for each result, in the order they come."""

    def __init__(self, runners: list[Runner], compilers: Compilers | None, space: Space, prec: Precision,
                 problem: Problem, policy: TimingPolicy, threshold_ms: Callable[[], float | None],
                 finish: Callable):
        self.runners, self.space, self.prec = runners, space, prec
        self.problem, self.policy, self.threshold_ms, self.finish = problem, policy, threshold_ms, finish
        self.builds = Builds(compilers, space, prec, problem) if compilers is not None else None
        self.same = SameRuns(prec, problem, runners[0].device)
        self.flops = prec.flops(problem.m, problem.n, problem.k) * problem.batch
        self.problem_key = problem_key(prec.code, *astuple(problem)[:5], problem.batch)   # m, n, k and the ops
        self.timing_s, self.device_s = 0.0, None   # time on devices; mean trial
        self.idle = IdleTime()   # what its devices waited for; the search sets its ``start``
        self.best_collected: float | None = None   # of results collected, recorded or not yet
        self.ready: deque = deque()   # built, waiting for a device
        # runner index -> entries on it: the one in flight, then with a compiler pool the next one,
        # waiting in the worker so that the device never waits for this process to notice
        self.timing: dict[int, deque] = {i: deque() for i in range(len(runners))}
        self.fed = [0] * len(runners)    # candidates given to each device so far
        self.depth = 2 if compilers is not None else 1

    @property
    def busy(self) -> list:
        return self.builds.busy if self.builds else []

    @property
    def in_flight(self) -> int:
        return len(self.ready) + sum(map(len, self.timing.values())) + len(self.busy)

    @property
    def empty(self) -> bool:
        return not any(self.timing.values()) and not self.busy and not self.ready

    def has_room(self) -> bool:
        if self.builds is not None:
            return self.builds.has_room(len(self.ready), len(self.runners), self.device_s)
        return len(self.ready) + sum(map(len, self.timing.values())) < len(self.runners)

    def add(self, trial, config: Config, key: tuple) -> None:
        if self.builds is not None:
            self.builds.submit(trial, config, key)
        else:
            self.ready.append((trial, config, key, None))

    def drop_unmeasured(self) -> list:
        """Every candidate not yet on a device, taken out; the builds are stopped."""
        dropped = [entry[:3] for entry in self.ready] + (self.builds.stop() if self.builds else [])
        self.ready.clear()
        return dropped

    def drop_on_devices(self) -> list:
        dropped = [entry[:3] for entries in self.timing.values() for entry in entries]
        self.timing = {i: deque() for i in self.timing}
        return dropped

    def feed(self) -> None:
        """Put built candidates on devices with room (the one in flight and one waiting): each to
        the device with the fewest queued, of those the one given the fewest so far. Filled in
        order instead, the first device took every candidate whenever building was slower than
        timing, and the others stood idle."""
        while True:
            i = min(self.timing, key=lambda j: (len(self.timing[j]), self.fed[j]))
            if len(self.timing[i]) >= self.depth:
                break
            if (entry := self._next_ready()) is None:
                break
            trial, config, key, built = entry
            self.runners[i].submit(self.job(config, built), entry)
            self.timing[i].append(entry)
            self.fed[i] += 1

    def _next_ready(self):
        """The first ready candidate to measure. One whose identical run was measured gets those
        figures instead; one whose identical run is on a device now waits for its figures."""
        on_devices = {self.same.of(c, b) for entries in self.timing.values() for _, c, _, b in entries}
        for entry in list(self.ready):
            trial, config, key, built = entry
            same = self.same.of(config, built)
            if same in self.same.measured:
                self.ready.remove(entry)
                first, outcome = self.same.measured[same]
                self.finish(trial, config, key, replace(outcome, detail=identical_note(first)), built.compile_s,
                            None)
            elif same is None or same not in on_devices:
                self.ready.remove(entry)
                return entry
        return None

    def job(self, config, built=None, early_stop: bool = True) -> Job:
        """``config``'s job on this problem; ``built`` None: the timing worker builds it."""
        p, helpers = self.problem, built.helpers if built else ()
        return Job(config, self.space.family(config.kernel).source, self.prec.code, p.m, p.n, p.k, self.policy,
                   built and built.binary, self.threshold_ms() if early_stop else None, p.trans_a, p.trans_b,
                   helpers, p.batch)

    def waits(self) -> tuple[list, list]:
        """Connections to wait on and their deadlines."""
        timed = [self.runners[i].worker for i, entries in self.timing.items() if entries]
        return ([w.connection for w in self.busy + timed], [w.deadline for w in self.busy + timed])

    def collect(self) -> None:
        now = time.monotonic()
        for trial, config, key, built in self.builds.collect(now) if self.builds else []:
            if built.status == "ok":
                self.ready.append((trial, config, key, built))
            else:
                self.finish(trial, config, key, Outcome(built.status, compile_s=built.compile_s,
                                                        detail=built.detail), None, None)
        done, before = [], self.threshold_ms()
        for i, entries in self.timing.items():
            runner = self.runners[i]
            if entries and (runner.worker.connection.poll(0) or now >= runner.worker.deadline):
                trial, config, key, built = entries.popleft()
                outcome = runner.collect()
                self.timing_s += outcome.trial_s or 0.0
                self.idle.reported(outcome, now)
                self.device_s = running_mean(self.device_s, outcome.trial_s)
                if built is not None and outcome.status in ("ok", "slow"):
                    self.same.measured[self.same.of(config, built)] = (trial.number, outcome)
                done.append((trial, config, key, outcome, built.compile_s if built is not None else None,
                             runner.device))
                if outcome.status == "ok" and outcome.timing is not None:  # the early stop of the next
                    self.best_collected = max(self.best_collected or 0.0, gflops(self.flops, outcome.timing.median_ms))
        after = self.threshold_ms() if done else before
        if after != before:  # a new best: the candidates on devices learn it
            for i, entries in self.timing.items():
                if entries:
                    self.runners[i].stop_above(after, self.problem_key)
        if done:
            self.feed()  # the next candidates go on the devices before the database writes
        for result in done:
            self.finish(*result)
