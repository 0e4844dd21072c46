"""Which recorded rows of ``results`` every reader can trust: one check, shared by all of them.

A results database may be shared, old, or edited by hand, and what it holds reaches the kernel
compiler (as ``-D`` options), exported C headers and people's tables. ``report``, ``export``,
``bench``, ``best_config``, ``gemm(db=...)`` and ``replay`` read rows through ``screen`` and
skip alike every row that is not a configuration of a shipped kernel family: parameters that
are not a JSON object, an unknown kernel, a parameter the family's source does not declare, a
value that is not an integer the parameter can take (such as ``"64 -DFOO=1"``). Rows tuned from
a custom ``--space`` source with parameters of its own are skipped for the same reason: the
shipped kernels could not use them. A row must also name a known precision, a positive shape
and an integer trial, and a correct (``ok``) row a finite GFLOP/s.

SQLite keeps whatever type a value was written with, so the other columns are brought to their
declared types first: a measurement that is not a number reads as missing (as NULL does), time
samples that are not a JSON list of numbers as none, text columns as text.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from gemmtune.families import FAMILIES
from gemmtune.precision import PRECISIONS

VALUE_MAX = 2**31 - 1   # shapes and trial numbers are OpenCL ints

NUMBERS = ("trial", "m", "n", "k", "gflops", "time_ms", "kernel_time_ms", "ci_low_ms", "ci_high_ms", "min_ms",
           "repeats", "max_rel_error", "norm_rel_error", "compile_s", "trial_s")
OPS = ("N", "T", "C")
TEXTS = ("study", "device", "device_name", "precision", "kernel", "status", "created_at", "gemmtune_version")


@dataclass(frozen=True)
class Screened:
    """Rows that passed, in their order, and why the others were skipped (reason -> rows)."""

    rows: pd.DataFrame
    skipped: Counter = field(default_factory=Counter)

    def note(self) -> str | None:
        """One line for people saying what was skipped; None when nothing was."""
        if not self.skipped:
            return None
        count = sum(self.skipped.values())
        reasons = "; ".join(f"{n} {why}" for why, n in sorted(self.skipped.items(), key=lambda kv: (-kv[1], kv[0])))
        return (f"Skipped {count} recorded row{'s' if count != 1 else ''} that "
                f"{'are' if count != 1 else 'is'} not a valid configuration of a shipped kernel family: {reasons}.")


def config_of(kernel, params, space=None):
    """The ``gemmtune.space.Config`` of a recorded kernel and parameters (a dict or its JSON
    text), completed with the source's defaults for parameters added since; else the reason it
    is not a configuration of a shipped family, as a string."""
    from gemmtune.errors import GemmtuneError
    from gemmtune.space import Config, shipped_families

    if isinstance(params, str):
        try:
            params = json.loads(params)
        except (json.JSONDecodeError, RecursionError):
            return "with parameters that are not JSON"
    if not isinstance(params, dict):
        return "with parameters that are not a JSON object"
    if not isinstance(kernel, str) or kernel not in FAMILIES:
        return "of an unknown kernel"
    space = space or shipped_families()
    family = next((fs for fs in space.families if fs.family.name == kernel), None)
    if family is None:
        return "of a kernel not in the shipped space"
    full = family.complete(params)
    if full is None:
        return "with parameters the kernel does not declare"
    try:   # the range every configuration is held to, wherever it comes in
        for name, value in params.items():
            FAMILIES[kernel].check_value(name, value, "")
    except GemmtuneError:
        return "with a value that is not an integer the parameter can take"
    return Config.of(kernel, full)


def _why_not(row, space) -> str | None:
    config = config_of(row.kernel, row.params, space)
    if isinstance(config, str):
        return config
    if row.precision not in PRECISIONS:
        return "of an unknown precision"
    if not all(float(x).is_integer() and 1 <= x <= VALUE_MAX for x in (row.m, row.n, row.k)):
        return "with a shape that is not positive integers"
    if not (float(row.batch).is_integer() and 1 <= row.batch <= VALUE_MAX):
        return "with a batch that is not a positive integer"
    if not (float(row.trial).is_integer() and 0 <= row.trial <= VALUE_MAX):
        return "with a trial number that is not an integer"
    if row.status == "ok" and not (math.isfinite(row.gflops) and row.gflops >= 0):
        return "marked ok without a finite speed"
    return None


def _samples(text):
    """Time samples as stored (JSON text of a list of numbers), or None for anything else."""
    try:
        values = json.loads(text) if isinstance(text, str) else None
    except (json.JSONDecodeError, RecursionError):
        return None
    if isinstance(values, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                        and math.isfinite(v) for v in values):
        return text
    return None


def _typed(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    for column in NUMBERS:
        if column in rows:
            rows[column] = pd.to_numeric(rows[column], errors="coerce").astype("float64")
    for column in TEXTS:
        if column in rows:
            rows[column] = rows[column].astype(str)
    if "samples_ms" in rows:
        rows["samples_ms"] = [_samples(t) for t in rows.samples_ms]
    if "baseline" in rows:
        rows["baseline"] = pd.to_numeric(rows.baseline, errors="coerce").fillna(0).astype(bool)
    for column in ("trans_a", "trans_b"):
        rows[column] = recorded_op(rows[column]) if column in rows else "N"
    rows["batch"] = recorded_batch(rows["batch"]) if "batch" in rows else 1.0
    return rows


def recorded_batch(column: pd.Series) -> pd.Series:
    """A batch column as the batches it means: rows from before batches were recorded (none) are 1."""
    return pd.to_numeric(column, errors="coerce").astype("float64").fillna(1.0)


def recorded_op(column: pd.Series) -> pd.Series:
    """A trans_a or trans_b column as the ops it means: rows from before the ops were recorded
    (none) are N."""
    return column.where(column.isin(OPS), "N")


def screen(rows: pd.DataFrame, space=None) -> Screened:
    """``rows`` (of ``results``, as ``Store.frame`` reads them) without those no reader may
    use, and the reasons for skipping them. Shapes become integers."""
    from gemmtune.space import shipped_families

    if rows.empty:
        return Screened(rows)
    space = space or shipped_families()
    rows = _typed(rows)
    skipped: Counter = Counter()
    keep = []
    for row in rows.itertuples():
        why = _why_not(row, space)
        keep.append(why is None)
        if why is not None:
            skipped[why] += 1
    kept = rows[keep].astype({"m": "int64", "n": "int64", "k": "int64", "trial": "int64", "batch": "int64"})
    return Screened(kept, skipped)


# ---------------------------------------------------------------- the other tables

PEAK_QUANTITIES = (*PRECISIONS, "bandwidth")
# DeviceInfo's fields a stored description leaves out (to_json) or may (later ones have defaults)
_UNSTORED = ("platform_index", "device_index")


def skipped_note(skipped: Counter) -> str | None:
    """One line for people saying which rows of ``devices`` and ``peaks`` (or Optuna's trials)
    were skipped and why; None when none were."""
    if not skipped:
        return None
    count = sum(skipped.values())
    reasons = "; ".join(f"{n} {why}" for why, n in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"Skipped {count} stored row{'s' if count != 1 else ''} that gemmtune cannot use: {reasons}."


def _fits(value, kind: str) -> bool:
    """Whether a JSON value has the type a DeviceInfo field declares (its annotation's text)."""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind.startswith("tuple[int"):
        return isinstance(value, list) and all(_fits(v, "int") for v in value)
    if kind.startswith("tuple[tuple[str"):   # fallbacks: stored as an object of text
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return False


def device_of(text):
    """The ``DeviceInfo`` a ``devices`` row's ``info`` describes; else the reason it does not
    describe one, as a string: not a JSON object of DeviceInfo's fields, each of its type."""
    from dataclasses import MISSING, fields

    from gemmtune.devices.info import DeviceInfo

    try:
        data = json.loads(text) if isinstance(text, str) else None
    except (json.JSONDecodeError, RecursionError):
        return "in devices whose info is not JSON"
    if not isinstance(data, dict):
        return "in devices whose info is not a JSON object"
    declared = {f.name: f for f in fields(DeviceInfo) if f.name not in _UNSTORED}
    if set(data) - set(declared):
        return "in devices whose info has a field DeviceInfo does not have"
    if any(f.default is MISSING and f.default_factory is MISSING and name not in data
           for name, f in declared.items()):
        return "in devices whose info lacks a field DeviceInfo needs"
    if not all(_fits(value, str(declared[name].type)) for name, value in data.items()):
        return "in devices whose info has a field of the wrong type"
    try:
        return DeviceInfo.from_json(data)
    except (TypeError, ValueError, KeyError, ArithmeticError):
        return "in devices whose info DeviceInfo refuses"


def peak_of(quantity, value):
    """A ``peaks`` row's value as a float; else the reason it is not a peak, as a string."""
    if quantity not in PEAK_QUANTITIES:
        return "in peaks of an unknown quantity"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return "in peaks without a positive number"
    return float(value)
