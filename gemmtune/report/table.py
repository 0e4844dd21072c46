"""``gemmtune report``: what the searches found, from gemmtune's ``results`` table.

Only the ``results`` table is read with SQL (through ``gemmtune.db.store``); parameter importances
come from Optuna's own API. Each view is a pandas DataFrame with structured cells (``params``
and ``failed`` are dicts), which ``render`` turns into a table, CSV, JSON or Markdown.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from gemmtune.db.store import Store, database_url
from gemmtune.db.urls import shown
from gemmtune.errors import GemmtuneError
from gemmtune.report.importance import importance_text
from gemmtune.files.output import cells
from gemmtune.measure.timing import is_tie

FORMATS = ("table", "csv", "json", "markdown")
_DEVICE_SPEC = re.compile(r"\d+(?::\d+)?")


@dataclass(frozen=True)
class Filters:
    """Which rows to show; None means any. ``device`` is an index or "P:D" of this machine
    (matched on the device key), or else a case-insensitive part of the device name."""

    device: str | None = None
    precision: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    study: str | None = None

    def describe(self) -> str:
        parts = [] if self.device is None else [f"device {self.device!r}"]
        parts += [f"{name} {value}" for name, value in (("precision", self.precision), ("m", self.m),
                                                         ("n", self.n), ("k", self.k), ("study", self.study))
                  if value is not None]
        return ", ".join(parts)

    def apply(self, rows: pd.DataFrame) -> pd.DataFrame:
        keep = pd.Series(True, index=rows.index)
        if self.device is not None:
            spec = str(self.device).strip()
            if _DEVICE_SPEC.fullmatch(spec):
                from gemmtune.devices.opencl import resolve_device  # OpenCL only for a device of this machine

                keep &= rows.device == resolve_device(spec).key
            else:
                keep &= rows.device_name.str.contains(spec, case=False, regex=False)
        for column in ("precision", "m", "n", "k", "study"):
            value = getattr(self, column)
            if value is not None:
                keep &= rows[column] == (value.lower() if column == "precision" else value)
        return rows[keep]


@dataclass(frozen=True)
class Results:
    """The rows of ``results`` that match the filters, and what to say when there are none."""

    url: str
    exists: bool
    total: int            # rows in the table, before filtering
    rows: pd.DataFrame
    filters: Filters
    peaks: dict = field(default_factory=dict)     # device key -> measured peaks (Store.latest_peaks)
    devices: dict = field(default_factory=dict)   # device key -> DeviceInfo stored by search or peak
    skipped: Counter = field(default_factory=Counter)   # why rows were left out (gemmtune.db.rows) -> count
    stored_skipped: Counter = field(default_factory=Counter)   # the same of devices and peaks rows (Store.skipped)

    def skipped_note(self) -> str | None:
        """A line for each table saying how many rows were skipped and why; None when none were."""
        from gemmtune.db.rows import Screened, skipped_note

        lines = [line for line in (Screened(self.rows, self.skipped).note(), skipped_note(self.stored_skipped)) if line]
        return "\n".join(lines) or None

    @property
    def shown(self) -> str:
        """The URL as messages and exported files give it: without the password."""
        return shown(self.url)

    def nothing_message(self) -> str:
        if not self.exists:
            return f"No results: there is no database at {self.shown} yet (run gemmtune search first)."
        if self.total == 0:
            return f"No results: the database {self.shown} holds no results yet (run gemmtune search first)."
        return f"No results in {self.shown} match {self.filters.describe()} ({self.total} rows in all)."


def load(db: str | None = None, filters: Filters = Filters()) -> Results:
    """Read the ``results`` table without creating or changing anything; GemmtuneError when
    the database cannot be opened or read."""
    from gemmtune.db.rows import screen

    store = Store(database_url(db), create=False)
    try:
        rows = store.frame()
        screened = screen(rows)
        kept = with_ops(filters.apply(screened.rows))
        keys = kept.device.unique()
        peaks = {key: store.latest_peaks(key) for key in keys}
        devices = {key: store.device_info(key) for key in keys}
    finally:
        store.close()
    return Results(store.url, store.exists, len(rows), kept, filters, peaks, devices, screened.skipped, store.skipped)


GROUP = ["device", "precision", "m", "n", "k", "ops", "batch"]


def with_ops(rows: pd.DataFrame) -> pd.DataFrame:
    """Screened rows (``rows.screen``) with ``ops``, op(A) and op(B) as one string ("NN", "TN", ...)."""
    return rows.assign(ops=rows.trans_a + rows.trans_b)


def _interval(row) -> tuple[float, float]:
    """95 % interval of GFLOP/s, from the interval of the median time (GFLOP/s = flops / time)."""
    low, high = row.ci_low_ms, row.ci_high_ms
    if row.gflops is None or not (low and high) or math.isnan(low) or math.isnan(high):
        return math.nan, math.nan
    return row.gflops * row.time_ms / high, row.gflops * row.time_ms / low


def _samples(text) -> list[float]:
    return json.loads(text) if isinstance(text, str) else []


def _ranked(group: pd.DataFrame) -> pd.DataFrame:
    ok = group[group.status == "ok"]
    return ok.sort_values(["gflops", "id"], ascending=[False, True])


def _best_columns(row) -> dict:
    low, high = _interval(row)
    return {"kernel": row.kernel, "params": json.loads(row.params), "gflops": row.gflops,
            "gflops_low": low, "gflops_high": high, "time_ms": row.time_ms}


def summary(rows: pd.DataFrame, peaks: dict | None = None) -> pd.DataFrame:
    """One row per (device, precision, m, n, k, ops, batch): the best configuration and how it was
    found (``gflops`` and ``time_ms`` of a batch are the whole batch's).

    ``gflops_low``/``gflops_high``: 95 % interval of the best's GFLOP/s; ``trials``: rows
    measured; ``failed``: reason -> count; ``tuning_s``: summed wall time of the trials
    (``compile_s``, the builds' share of it, beside it); ``speedup``: best over the baseline
    configuration of the best's search (None if that failed or is missing); ``tie``: whether
    best and runner-up are a statistical tie (one-tailed Mann-Whitney U at 95 % on their time
    samples), None with fewer than two correct configurations or fewer than three samples
    each; ``study``/``trial``: where the best was found; ``peak_pct``: the best GFLOP/s in
    percent of the device's measured peak for the precision (``peaks``: device key -> what
    ``Store.latest_peaks`` returns; None where ``gemmtune peak`` measured none).
    """
    peaks = peaks or {}
    out = []
    for (device, precision, m, n, k, ops, batch), group in rows.groupby(GROUP, sort=False):
        ranked = _ranked(group)
        # "slow" was stopped early on purpose: neither correct-and-complete nor a failure.
        failed = group[~group.status.isin(("ok", "slow"))].status.value_counts().sort_index()
        entry = {"device": device, "device_name": group.device_name.iloc[0], "precision": precision,
                 "m": int(m), "n": int(n), "k": int(k), "ops": ops, "batch": int(batch), "kernel": None, "params": None, "gflops": None,
                 "gflops_low": None, "gflops_high": None, "time_ms": None, "trials": len(group),
                 "failed": {str(r): int(c) for r, c in failed.items()},
                 "tuning_s": float(group.trial_s.fillna(0).sum()),
                 "compile_s": float(group.compile_s.fillna(0).sum()),
                 "speedup": None, "tie": None, "study": None, "trial": None, "peak_pct": None}
        if len(ranked):
            best = ranked.iloc[0]
            entry.update(_best_columns(best), study=best.study, trial=int(best.trial))
            peak = peaks.get(device, {}).get(precision)
            if peak:
                entry["peak_pct"] = 100 * best.gflops / peak
            baselines = group[group.baseline.astype(bool)]
            baselines = baselines.assign(same=baselines.study == best.study).sort_values(
                ["same", "id"], ascending=[False, True])
            if len(baselines) and baselines.iloc[0].status == "ok" and baselines.iloc[0].gflops:
                entry["speedup"] = best.gflops / baselines.iloc[0].gflops
            samples = [_samples(r.samples_ms) for _, r in ranked.head(2).iterrows()]
            if len(samples) == 2 and min(map(len, samples)) >= 3:  # fewer cannot be tested
                entry["tie"] = is_tie(*samples)
        out.append(entry)
    return _sorted(pd.DataFrame(out))


def top(rows: pd.DataFrame, count: int) -> pd.DataFrame:
    """The ``count`` best correct configurations of each (device, precision, m, n, k)."""
    out = []
    for _, group in rows.groupby(GROUP, sort=False):
        for rank, row in enumerate(_ranked(group).head(count).itertuples(), start=1):
            out.append({"device": row.device, "device_name": row.device_name, "precision": row.precision,
                        "m": int(row.m), "n": int(row.n), "k": int(row.k), "ops": row.ops, "batch": int(row.batch),
                        "rank": rank,
                        **_best_columns(row), "study": row.study, "trial": int(row.trial)})
    return _sorted(pd.DataFrame(out), extra=["rank"])


def _sorted(frame: pd.DataFrame, extra=()) -> pd.DataFrame:
    if frame.empty:
        return frame
    return frame.sort_values(["device_name", "device", "precision", "m", "n", "k", "ops", "batch", *extra]
                             ).reset_index(drop=True)


# ---------------------------------------------------------------- the performance model

def describe_device(found: Results, key: str):
    """The DeviceInfo of a device key: as search or peak stored it, else this machine's device
    with that key; None when neither has it."""
    if found.devices.get(key) is not None:
        return found.devices[key]
    try:
        from gemmtune.devices.opencl import list_devices  # OpenCL only for a device this database never described

        return next((d for d in list_devices() if d.key == key), None)
    except GemmtuneError:
        return None


def add_model(frame: pd.DataFrame, found: Results) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` (a summary or top view) with the model's ``predicted_gflops`` for each row's
    configuration and ``model_spearman``, the rank correlation of predicted and measured time
    over all correct configurations of the row's device, precision and shape; and a sentence for
    each device the model cannot be applied to (no description of it anywhere)."""
    from gemmtune.db.rows import config_of
    from gemmtune.families import FAMILIES
    from gemmtune.models.analytic import predict, spearman
    from gemmtune.precision import get_precision

    notes, devices, correlation = [], {}, {}
    for key in frame.device.unique():
        devices[key] = describe_device(found, key)
        if devices[key] is None:
            name = frame.device_name[frame.device == key].iloc[0]
            notes.append(f"No description of device {name!r} in {found.shown} or on this machine, so no "
                         "model figures for it (a search or gemmtune peak with this version stores one).")
    for group, rows in found.rows.groupby(GROUP, sort=False):
        dev = devices.get(group[0])
        ok = rows[(rows.status == "ok") & rows.kernel.isin(list(FAMILIES))]
        if dev is None or ok.empty or group[6] > 1:   # the model times one problem, not a batch
            continue
        prec, (m, n, k), ops = get_precision(group[1]), map(int, group[2:5]), group[5]
        # Screened rows: each a configuration, completed with the defaults of parameters added since
        predicted = [predict(config_of(r.kernel, r.params), dev, prec, m, n, k, found.peaks.get(group[0]),
                             trans_a=ops[0], trans_b=ops[1]).time_s for r in ok.itertuples()]
        correlation[group] = spearman(predicted, list(ok.time_ms))
    predicted_gflops = []
    for row in frame.itertuples():
        dev = devices.get(row.device)
        config = config_of(row.kernel, row.params) if isinstance(row.params, dict) else None
        ok = dev is not None and config is not None and not isinstance(config, str) and row.batch == 1
        predicted_gflops.append(
            predict(config, dev, get_precision(row.precision), row.m, row.n, row.k,
                    found.peaks.get(row.device), trans_a=row.ops[0], trans_b=row.ops[1]).gflops if ok else None)
    spearmans = [correlation.get((r.device, r.precision, r.m, r.n, r.k, r.ops, r.batch)) for r in frame.itertuples()]
    return frame.assign(predicted_gflops=predicted_gflops, model_spearman=spearmans), notes


# ---------------------------------------------------------------- formatting

def _number(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.4g}"


def _for_people(frame: pd.DataFrame) -> pd.DataFrame:
    """Dicts as short text, numbers rounded, the device shown by name; the batch only where some
    row is one (problems per launch above 1)."""
    shown = frame.drop(columns=["device", *(["batch"] if "batch" in frame and (frame.batch == 1).all() else [])])
    for column in shown.columns:
        values = shown[column]
        if column == "params":
            shown[column] = [",".join(f"{k}={v}" for k, v in p.items()) if p else "-" for p in values]
        elif column == "failed":
            shown[column] = [", ".join(f"{n} {r}" for r, n in f.items()) or "none" for f in values]
        elif column == "importance":
            shown[column] = [importance_text(v) for v in values]
        elif column == "tie":
            shown[column] = ["-" if v is None or v != v else ("yes" if v else "no") for v in values]
        elif column in ("gflops", "gflops_low", "gflops_high", "time_ms", "tuning_s", "compile_s", "speedup",
                        "peak_pct", "predicted_gflops"):
            shown[column] = [_number(v) for v in values]
        elif column == "model_spearman":
            shown[column] = ["-" if v is None or v != v else f"{v:.2f}" for v in values]
        else:
            shown[column] = ["-" if v is None else v for v in values]
    return shown


def render(frame: pd.DataFrame, fmt: str) -> str:
    """The frame as ``table`` (aligned text), ``csv`` (dict cells as JSON), ``json`` (a list of
    objects) or ``markdown`` (a pipe table); always ends with a newline. Every string cell is
    made safe for its format (``gemmtune.files.output.cells``): names come from any shared database."""
    if fmt == "json":
        # pandas escapes every control character but DEL, which JSON allows raw but a terminal should not get;
        # outside strings JSON text has none, so this replaces it inside them alone
        return frame.to_json(orient="records", indent=2, double_precision=15).replace("\x7f", "\\u007f") + "\n"
    if fmt == "csv":
        text = frame.copy()
        for column in ("params", "failed", "importance"):
            if column in text:
                text[column] = [None if v is None else json.dumps(v) for v in text[column]]
        return cells(text, fmt).to_csv(index=False)
    if fmt == "markdown":
        return cells(_for_people(frame), fmt).to_markdown(index=False) + "\n"
    if fmt == "table":
        return cells(_for_people(frame), fmt).to_string(index=False) + "\n"
    raise GemmtuneError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")

