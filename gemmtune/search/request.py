"""What a search is asked (``SearchRequest``), what it shows as it goes (``Progress``) and what it
reports (``Summary``)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from gemmtune.execution.messages import Outcome
from gemmtune.devices.info import DeviceInfo
from gemmtune.precision import Precision
from gemmtune.space import Config
from gemmtune.strategies import DEFAULT
from gemmtune.measure.timing import TimingPolicy


def default_study_name(dev: DeviceInfo, prec: Precision, m: int, n: int, k: int, trans_a: str = "N",
                       trans_b: str = "N", batch: int = 1) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{dev.name}-{dev.driver_version}").strip("-").lower()
    ops = "" if trans_a + trans_b == "NN" else f"-{trans_a}{trans_b}"
    batched = "" if batch == 1 else f"-batch{batch}"
    return f"{slug}-{prec.code}-{m}x{n}x{k}{ops}{batched}"
@dataclass
class SearchRequest:
    device: str | int | None = None
    precision: str = "s"
    m: int = 1024
    n: int = 1024
    k: int = 1024
    trans_a: str = "N"               # op(A) and op(B): N, T or C
    trans_b: str = "N"
    batch: int = 1                   # problems of the shape in one launch (the objective: the whole batch's GFLOP/s)
    trials: int | None = 30          # new measured trials; None with grid: the whole space
    timeout: float | None = None     # seconds for the whole search
    trial_timeout: float = 120.0
    sampler: str = DEFAULT
    seed: int | None = None
    db: str | None = None
    study: str | None = None
    space_file: str | None = None
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    jobs: int | None = None          # compiler processes; None: one per spare core; 0: build on the timer
    early_stop: float | None = 0.5   # stop timing a candidate whose speed is surely below this x the best
    seeds: int = 10                  # best-predicted configurations measured first (0: none)
    grace: float = 60.0              # seconds without a heartbeat before another process fails a trial
    start: tuple | None = None       # measured first, after the baseline; None: the best of the nearest tuned problems


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
    again: bool = False                  # ``last`` was a finalist timed again after the search


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
    # share of the wall time the timing workers had nothing to measure, by what they waited for:
    # "proposal" (the pipeline had room for another candidate) or "build" (the builds in progress)
    device_idle: dict[str, float] | None = None
    # what the cost model learned from (``search.prior.sources``); None where the strategy learns nothing
    learned_from: dict | None = None
    skipped: str | None = None       # rows of devices and peaks the search skipped, and why (rows.skipped_note)
    batch: int = 1                   # problems of ``shape`` a launch; best and baseline are GFLOP/s of the whole batch
    finalists: int = 0               # rows timed again after the search, no build running (``search.finalists``)

    @property
    def speedup(self) -> float | None:
        if self.best and self.baseline and self.baseline["gflops"]:
            return self.best["gflops"] / self.baseline["gflops"]
        return None


