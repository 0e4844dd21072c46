"""Recording: every measured trial becomes one row of ``results``, committed when the trial ends;
the rows (of every process sharing the database) are what the search knows was measured, and
what its summary reports."""

from __future__ import annotations

import json
from typing import Callable

from gemmtune.db.rows import screen, skipped_note
from gemmtune.db.store import Store
from gemmtune.execution.messages import Outcome
from gemmtune.devices.info import DeviceInfo
from gemmtune.precision import Precision
from gemmtune.search.request import Summary
from gemmtune.space import Config, Space, config_key
from gemmtune.measure.timing import Timing, gflops, is_tie


def claim_text(key: tuple) -> str:
    """A configuration key as canonical text, the claims table's ``config``."""
    kernel, items = key
    return json.dumps([kernel, [list(item) for item in items]], separators=(",", ":"))


def measured_fields(prec: Precision, flops: float, outcome: Outcome) -> dict:
    """The columns of ``results`` that one measurement fills: its timing and check."""
    t: Timing | None = outcome.timing
    # A "slow" candidate was stopped early: its estimate is kept, but it can never be best.
    value = gflops(flops, t.median_ms) if outcome.status in ("ok", "slow") and t else None
    low, high = t.ci_ms if t else (None, None)
    return dict(
        status=outcome.status,
        gflops=value, time_ms=t.median_ms if t else None, kernel_time_ms=t.kernel_median_ms if t else None,
        device_time_ms=t.device_median_ms if t else None,
        ci_low_ms=None if low is None or low != low else low, ci_high_ms=None if high is None or high != high else high,
        min_ms=t.min_ms if t else None, repeats=t.repeats if t else None, samples_ms=t.samples_ms if t else None,
        max_rel_error=outcome.check.max_rel_error if outcome.check else None,
        norm_rel_error=outcome.check.norm_rel_error if outcome.check else None,
        compile_s=outcome.compile_s, trial_s=outcome.trial_s, detail=outcome.detail or None,
    )


def record(store: Store, study: str, number: int, dev: DeviceInfo, prec: Precision, m, n, k,
           config: Config, outcome: Outcome, is_baseline: bool, trans_a: str = "N", trans_b: str = "N",
           batch: int = 1) -> float | None:
    """Commit one trial's row; returns its GFLOP/s (of the whole batch), or None for a failure."""
    fields = measured_fields(prec, prec.flops(m, n, k) * batch, outcome)
    store.add(study=study, trial=number, device=dev.key, device_name=dev.name, precision=prec.code,
              m=m, n=n, k=k, trans_a=trans_a, trans_b=trans_b, batch=batch, kernel=config.kernel,
              params=config.params, baseline=is_baseline, **fields)
    return fields["gflops"]


def read_results(store: Store, study: str, space: Space, after_id: int, measured: dict,
                 learn: Callable[[Config, float | None], None] | None = None) -> int:
    """Put the rows recorded since row ``after_id`` (by any process) into ``measured``; returns the
    last row's id. ``learn(config, GFLOP/s or None)``, where given, is told each row of a
    configuration this process neither measured nor has in flight."""
    rows = store.frame(study=study, after_id=after_id)
    if len(rows):
        after_id = max(after_id, int(rows.id.max()))
    for row in screen(rows, space).rows.itertuples():  # rows of a shared database can be anything
        # pandas reads a failed row's NULL as NaN: Optuna must be told "failed", not NaN.
        value = None if row.gflops is None or row.gflops != row.gflops else float(row.gflops)
        params = json.loads(row.params)
        key = config_key(row.kernel, params)
        before = measured.get(key, ("", None))[0]
        if before != "in_flight":
            measured[key] = (row.status, value)
        if learn is not None and before in ("", "elsewhere"):
            learn(Config.of(row.kernel, params), value)
    return after_id


def is_recorded(store: Store, study: str, number: int) -> bool:
    return number in set(store.frame(study=study, trial=number).trial)


class StudyRows:
    """The study's results rows as this process knows them: ``measured`` maps each configuration's
    key to (status, GFLOP/s), from the rows this process wrote and those other processes sharing
    the database recorded (read by ``refresh``), with "in_flight" for its own candidates not yet
    measured. ``learn`` is told each configuration another process measured."""

    def __init__(self, store: Store, name: str, space: Space, prec: Precision, problem: tuple,
                 measured: dict):
        self.store, self.name, self.space, self.prec = store, name, space, prec
        self.m, self.n, self.k, self.trans_a, self.trans_b, self.batch = problem
        self.measured = measured
        self.seen_id = 0
        self.mine: set[int] = set()   # trial numbers of the rows this process measured
        self.learn: Callable[[Config, float | None], None] | None = None

    def refresh(self) -> None:
        """Read the rows recorded since the last look (by any process) into ``measured``."""
        self.seen_id = read_results(self.store, self.name, self.space, self.seen_id, self.measured, self.learn)

    def write(self, number: int, dev: DeviceInfo, config: Config, outcome: Outcome, is_baseline: bool,
              key: tuple | None = None) -> float | None:
        """Commit one trial's row; ``key``, where given (a trial this process measured), is marked
        measured with its result."""
        value = record(self.store, self.name, number, dev, self.prec, self.m, self.n, self.k, config, outcome,
                       is_baseline, self.trans_a, self.trans_b, self.batch)
        if key is not None:
            self.measured[key] = (outcome.status, value)
            self.mine.add(number)
        return value

    def lost(self, number: int, dev: DeviceInfo, config: Config | None) -> None:
        """Another process's trial failed as stale: recorded once, by whichever process noticed."""
        if config is None or is_recorded(self.store, self.name, number):
            return
        self.write(number, dev, config, Outcome("lost", detail="its search process stopped sending heartbeats "
                                                "(it or its machine died) during the trial"), False)


def summarize(store, name, devices, prec, shape, done, failures, elapsed, baseline_key, space_size, stopped_by,
              device_busy=None, space=None, device_idle=None, learned_from=None, batch: int = 1,
              finalists: int = 0) -> Summary:
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
                   stopped_by, store.shown, device_busy, devices, device_idle, learned_from,
                   skipped_note(store.skipped), batch, finalists)
