"""The messages between a search and its worker processes: what to build or time, and what came back."""

from __future__ import annotations

from dataclasses import dataclass, field

from gemmtune.launch.plan import Problem
from gemmtune.space import Config
from gemmtune.measure.timing import Timing, TimingPolicy
from gemmtune.measure.verify import Check

DETAIL_LIMIT = 8000       # characters of build log or error text kept per trial


def problem_key(precision: str, m: int, n: int, k: int, trans_a: str, trans_b: str, batch: int = 1) -> tuple:
    """What a timing worker keeps per problem (operands, early-stop thresholds)."""
    return precision, m, n, k, trans_a, trans_b, batch


@dataclass(frozen=True)
class Job:
    config: Config
    source: str               # kernel source with includes inlined
    precision: str
    m: int
    n: int
    k: int
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    binary: bytes | None = None          # built by a compiler process; None: build here
    stop_above_ms: float | None = None   # stop timing, status "slow", once the time's interval is above this
    trans_a: str = "N"
    trans_b: str = "N"
    helpers: tuple = ()                  # (defines, binary) of the programs built apart (Built.helpers)
    batch: int = 1                       # problems of the shape in one launch, one after another

    @property
    def problem_key(self) -> tuple:
        return problem_key(self.precision, self.m, self.n, self.k, self.trans_a, self.trans_b, self.batch)


@dataclass(frozen=True)
class StopAbove:
    """A new early-stop threshold for a timing worker's jobs, the running one and those waiting:
    the search found a faster candidate since they were submitted. Only for jobs of its problem:
    the worker outlives one search (a workload's problems share it)."""
    ms: float
    problem_key: tuple


@dataclass(frozen=True)
class BuildJob:
    config: Config
    source: str
    precision: str
    problem: Problem | None = None   # what the family's build defines depend on (e.g. op(A), op(B))


@dataclass(frozen=True)
class Built:
    status: str                       # ok, compile_error or crash (a compiler that fails a job)
    binary: bytes | None = None
    digest: str | None = None         # sha256 of the binary: equal digests, one measurement
    compile_s: float | None = None
    detail: str = ""
    helpers: tuple = ()               # (Launch.defines, binary) of the plan's programs built apart


@dataclass(frozen=True)
class Outcome:
    status: str                       # ok, compile_error, launch_error, crash, timeout, wrong_result
    timing: Timing | None = None
    check: Check | None = None
    compile_s: float | None = None
    trial_s: float | None = None
    detail: str = ""
    idle_s: float | None = None       # the timing worker's wait for this job since it was free
