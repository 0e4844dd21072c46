"""gemmtune report on a real results database (conftest's searches on PoCL) and on hand-made rows.

Every expectation is computed from the results table with plain SQL, independently of
gemmtune.report.
"""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from helpers_foundation import sql

from gemmtune.cli import cli
from gemmtune.devices.opencl import resolve_device
from gemmtune.measure.timing import is_tie

FANCY = "Test | Fancy GPU 9000 | 1.0"


def groups(db: Path) -> list[tuple]:
    return [tuple(r.values()) for r in sql(db, "SELECT DISTINCT device, precision, m, n, k FROM results")]


def ranked(db: Path, group: tuple) -> list[dict]:
    """The ok rows of one (device, precision, m, n, k), fastest first."""
    return sql(db, "SELECT * FROM results WHERE status = 'ok' AND device = ? AND precision = ? AND m = ? "
                   "AND n = ? AND k = ? ORDER BY gflops DESC, id", *group)


def report(*args, db: Path | str, expect: int = 0):
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    result = CliRunner().invoke(cli, ["report", "--db", url, *args])
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


def by_group(records: list[dict]) -> dict[tuple, dict]:
    return {(r["device"], r["precision"], r["m"], r["n"], r["k"]): r for r in records}


def test_json_summary_has_one_row_per_shape_with_the_best_row(results_db):
    out = json.loads(report("--format", "json", db=results_db).stdout)
    got = by_group(out)
    assert sorted(got) == sorted(groups(results_db)) and len(got) == 3
    for group, row in got.items():
        best, runner_up = ranked(results_db, group)[:2]
        everything = sql(results_db, "SELECT * FROM results WHERE device = ? AND precision = ? AND m = ? "
                                     "AND n = ? AND k = ?", *group)
        baseline = [r for r in everything if r["baseline"]][0]
        assert row["params"] == json.loads(best["params"]) and row["kernel"] == best["kernel"]
        assert row["gflops"] == pytest.approx(best["gflops"], rel=1e-12)
        assert (row["study"], row["trial"]) == (best["study"], best["trial"])
        assert row["gflops_low"] <= row["gflops"] <= row["gflops_high"]
        flops = best["gflops"] * best["time_ms"]
        assert row["gflops_low"] == pytest.approx(flops / best["ci_high_ms"])
        assert row["trials"] == len(everything) and row["failed"] == {}
        assert row["tuning_s"] == pytest.approx(sum(r["trial_s"] for r in everything))
        assert row["compile_s"] == pytest.approx(sum(r["compile_s"] for r in everything))
        assert row["speedup"] == pytest.approx(best["gflops"] / baseline["gflops"])
        assert row["tie"] == is_tie(json.loads(best["samples_ms"]), json.loads(runner_up["samples_ms"]))
        assert row["device_name"] == resolve_device(0).name


def test_csv_markdown_and_table_carry_the_best_rows(results_db):
    best = {g: ranked(results_db, g)[0] for g in groups(results_db)}

    frame = pd.read_csv(io.StringIO(report("--format", "csv", db=results_db).stdout))
    assert len(frame) == len(best)
    for row in frame.itertuples():
        b = best[(row.device, row.precision, row.m, row.n, row.k)]
        assert json.loads(row.params) == json.loads(b["params"])
        assert row.gflops == pytest.approx(b["gflops"])

    markdown = report("--format", "markdown", db=results_db).stdout.splitlines()
    assert markdown[0].startswith("|") and "gflops" in markdown[0] and "params" in markdown[0]
    assert set(markdown[1]) <= set("|:- ") and len(markdown) == 2 + len(best)
    table = report(db=results_db).stdout
    assert len(table.splitlines()) == 1 + len(best)
    for b in best.values():
        params = ",".join(f"{k}={v}" for k, v in json.loads(b["params"]).items())
        value = f"{b['gflops']:.4g}"
        m, p = b["m"], b["precision"]
        line = next(line for line in markdown if re.search(rf"\|\s*{p}\s*\|\s*{m}\s*\|\s*{m}\s*\|\s*{m}\s*\|", line))
        assert params in line and value in line
        line = next(line for line in table.splitlines()[1:] if re.search(rf"\s{p}\s+{m}\s+{m}\s+{m}\s", line))
        assert params in line and value in line


def test_top_k_lists_the_k_fastest_of_each_shape(results_db):
    out = json.loads(report("--top", "2", "--format", "json", db=results_db).stdout)
    assert len(out) == 2 * len(groups(results_db))
    for group in groups(results_db):
        mine = [r for r in out if (r["device"], r["precision"], r["m"], r["n"], r["k"]) == group]
        expected = ranked(results_db, group)[:2]
        assert [r["rank"] for r in mine] == [1, 2]
        assert [r["params"] for r in mine] == [json.loads(e["params"]) for e in expected]
        assert [r["gflops"] for r in mine] == pytest.approx([e["gflops"] for e in expected])
        assert all(r["gflops_low"] <= r["gflops"] <= r["gflops_high"] for r in mine)
    one = json.loads(report("--top", "1", "--format", "json", db=results_db).stdout)
    assert len(one) == len(groups(results_db))
    table = report("--top", "3", db=results_db).stdout
    assert len(table.splitlines()) == 1 + 3 + 3 + 2  # the d search measured only two
    report("--top", "0", db=results_db, expect=2)


def test_failures_by_reason_tuning_time_and_a_failed_baseline(results_copy, add_result):
    pocl = resolve_device(0)
    study = sql(results_copy, "SELECT study FROM results WHERE precision = 's' AND m = 24")[0]["study"]
    for status, seconds in (("compile_error", 1.5), ("timeout", 60.0), ("timeout", 60.0)):
        add_result(results_copy, study=study, device=pocl.key, device_name=pocl.name, m=24, n=24, k=24,
                   status=status, trial_s=seconds, compile_s=1.0)
    # A shape whose baseline failed and that has one correct configuration: no speedup, no tie.
    add_result(results_copy, status="wrong_result", baseline=True)
    add_result(results_copy)
    out = by_group(json.loads(report("--format", "json", db=results_copy).stdout))
    s24 = out[(pocl.key, "s", 24, 24, 24)]
    rows = sql(results_copy, "SELECT * FROM results WHERE precision = 's' AND m = 24")
    assert s24["failed"] == {"compile_error": 1, "timeout": 2}
    assert s24["trials"] == len(rows) == 6
    assert s24["tuning_s"] == pytest.approx(sum(r["trial_s"] for r in rows))
    assert s24["params"] == json.loads(ranked(results_copy, (pocl.key, "s", 24, 24, 24))[0]["params"])
    fancy = out[(FANCY, "s", 64, 64, 64)]
    assert fancy["speedup"] is None and fancy["tie"] is None and fancy["failed"] == {"wrong_result": 1}
    table = report(db=results_copy).stdout
    assert "1 compile_error, 2 timeout" in table


def test_filters_select_rows_including_other_machines_by_name(results_copy, add_result):
    add_result(results_copy)
    pocl = resolve_device(0)
    everything = json.loads(report("--format", "json", db=results_copy).stdout)
    assert len(everything) == 4
    d = json.loads(report("--precision", "D", "--format", "json", db=results_copy).stdout)
    assert [(r["precision"], r["m"]) for r in d] == [("d", 16)]
    s40 = json.loads(report("--size", "40", "--format", "json", db=results_copy).stdout)
    assert [(r["precision"], r["m"], r["n"], r["k"]) for r in s40] == [("s", 40, 40, 40)]
    assert json.loads(report("--m", "40", "--format", "json", db=results_copy).stdout) == s40
    fancy = json.loads(report("--device", "fancy gpu", "--format", "json", db=results_copy).stdout)
    assert [r["device"] for r in fancy] == [FANCY]
    here = json.loads(report("--device", "0", "--format", "json", db=results_copy).stdout)
    assert {r["device"] for r in here} == {pocl.key} and len(here) == 3
    part = pocl.name[2:-2].upper()
    assert json.loads(report("--device", part, "--format", "json", db=results_copy).stdout) == here
    study = s40[0]["study"]
    assert json.loads(report("--study", study, "--format", "json", db=results_copy).stdout) == s40
    none = report("--device", "no such device", db=results_copy)
    assert none.stdout.count("\n") == 1 and none.stdout.startswith("No results") and "match" in none.stdout


def test_missing_or_empty_database_is_one_sentence_and_exit_0(tmp_path, monkeypatch):
    missing = tmp_path / "missing.db"
    out = report(db=missing).stdout
    assert out.startswith("No results") and out.count("\n") == 1 and not missing.exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    out = report("--format", "json", db=empty).stdout
    assert out.startswith("No results") and out.count("\n") == 1
    # The default database, before any search: nothing is created either.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GEMMTUNE_DB", raising=False)
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 0 and result.stdout.startswith("No results")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("make_url, message", [
    (lambda tmp: "sqlite:////nonexistent-dir/x.db", "does not exist"),
    (lambda tmp: "not a url", "malformed database URL"),
    (lambda tmp: (tmp / "text.db").write_text("this is not SQLite\n" * 100) and f"sqlite:///{tmp / 'text.db'}",
     "not a database"),
])
def test_a_database_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path, make_url, message):
    result = CliRunner().invoke(cli, ["report", "--db", make_url(tmp_path)])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], result.stderr


def test_plot_is_a_png_with_progress_per_study_and_size_curves(results_db, tmp_path):
    from matplotlib.image import imread  # in the test extra

    from gemmtune.report.table import load
    from gemmtune.report.plot import plot

    path = tmp_path / "report.png"
    result = report("--plot", str(path), db=results_db)
    assert "gflops" in result.stdout
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    image = imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 600 and image[..., :3].std() > 0.01

    # What is drawn: one best-so-far curve per study, and the sizes tuned in single precision.
    figure = plot(load(f"sqlite:///{results_db}").rows, tmp_path / "again.png")
    progress, sizes = figure.axes
    studies = sql(results_db, "SELECT DISTINCT study FROM results ORDER BY study")
    curves = [line for line in progress.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    assert len(curves) == len(studies)
    for line, study in zip(curves, studies):
        gflops = [r["gflops"] for r in sql(results_db, "SELECT gflops FROM results WHERE study = ? ORDER BY id",
                                           study["study"])]
        assert list(line.get_ydata()) == pytest.approx(list(np.maximum.accumulate(gflops)))
    (size_line,) = sizes.get_lines()
    assert list(size_line.get_xdata()) == pytest.approx([24, 40])
    best = [ranked(results_db, (resolve_device(0).key, "s", s, s, s))[0]["gflops"] for s in (24, 40)]
    assert list(size_line.get_ydata()) == pytest.approx(best)


def test_plot_without_matplotlib_says_how_to_get_it(results_db, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    path = tmp_path / "x.png"
    result = CliRunner().invoke(cli, ["report", "--db", f"sqlite:///{results_db}", "--plot", str(path)])
    assert result.exit_code == 2 and result.stdout == "" and not path.exists()
    assert result.stderr.strip() == "Error: --plot needs matplotlib: pip install 'gemmtune[plot]'"


def test_importance_per_study_and_a_plain_note_when_there_is_none(results_copy, add_result):
    import optuna

    out = json.loads(report("--importance", "--format", "json", db=results_copy).stdout)
    params = set(json.loads(sql(results_copy, "SELECT params FROM results LIMIT 1")[0]["params"]))
    for row in out:
        assert set(row["importance"]) == params
        assert sum(row["importance"].values()) == pytest.approx(1.0)
        # Only TSM and TSN vary in the fixture's space: nothing else can matter.
        assert row["importance"]["TSM"] + row["importance"]["TSN"] == pytest.approx(1.0)

    # A study with a single completed trial, and rows with no Optuna study at all.
    url = f"sqlite:///{results_copy}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lonely = optuna.create_study(storage=url, study_name="lonely", direction="maximize")
    lonely.add_trial(optuna.trial.create_trial(params={"TSM": 16}, value=1.0,
                                               distributions={"TSM": optuna.distributions.CategoricalDistribution([16, 32])}))
    add_result(results_copy, study="lonely", m=8, n=8, k=8)
    add_result(results_copy, study="no-optuna", m=16, n=16, k=16)
    result = report("--importance", "--format", "json", "--device", "fancy", db=results_copy)
    rows = json.loads(result.stdout)
    assert [r["importance"] for r in rows] == [None, None]
    notes = result.stderr.strip().splitlines()
    assert len(notes) == 2
    assert any("lonely" in n and "at least 2 completed trials" in n for n in notes)
    assert any("no-optuna" in n and "no Optuna study" in n for n in notes)
    table = report("--importance", "--size", "24", db=results_copy).stdout
    assert "TSM" in table.splitlines()[1].split("TRANSPOSEY=8")[-1]


def test_reading_never_writes(results_db):
    before = (os.path.getmtime(results_db), results_db.read_bytes())
    report("--importance", "--format", "csv", db=results_db)
    report("--top", "2", db=results_db)
    assert (os.path.getmtime(results_db), results_db.read_bytes()) == before


def test_model_columns_predicted_gflops_and_rank_correlation(results_db):
    from scipy import stats

    from gemmtune.models import analytic
    from gemmtune.precision import get_precision
    from gemmtune.space import Config

    dev = resolve_device(0)
    out = by_group(json.loads(report("--format", "json", "--model", db=results_db).stdout))
    for group, row in out.items():
        prec, (m, n, k) = get_precision(group[1]), group[2:]
        expect = analytic.predict(Config.of(row["kernel"], row["params"]), dev, prec, m, n, k)
        assert row["predicted_gflops"] == pytest.approx(expect.gflops)
        ok = ranked(results_db, group)
        predicted = [analytic.predict(Config.of(r["kernel"], json.loads(r["params"])), dev, prec, m, n, k).time_s
                     for r in ok]
        rho = stats.spearmanr(predicted, [r["time_ms"] for r in ok]).statistic
        assert row["model_spearman"] == pytest.approx(rho, nan_ok=True)
    top = json.loads(report("--format", "json", "--model", "--top", "2", db=results_db).stdout)
    assert len(top) == 2 * len(out) and all(r["predicted_gflops"] > 0 for r in top)
    assert "predicted_gflops" in report("--model", db=results_db).stdout


def test_model_needs_a_description_of_the_device_and_says_so(results_copy, add_result):
    add_result(results_copy)  # a made-up device that no search here described
    result = report("--format", "json", "--model", "--device", "Fancy", db=results_copy)
    assert json.loads(result.stdout)[0]["predicted_gflops"] is None
    assert "No description of device 'Fancy GPU 9000'" in result.stderr


def test_best_as_a_percentage_of_the_measured_peak(results_copy):
    from gemmtune.db.store import Store

    plain = json.loads(report("--format", "json", db=results_copy).stdout)
    assert all(r["peak_pct"] is None for r in plain)  # nothing measured yet
    key = resolve_device(0).key
    store = Store(f"sqlite:///{results_copy}")
    try:
        store.save_peaks(key, "x", {"s": 3.0, "bandwidth": 10.0})
    finally:
        store.close()
    for row in json.loads(report("--format", "json", db=results_copy).stdout):
        assert row["peak_pct"] == (pytest.approx(100 * row["gflops"] / 3.0) if row["precision"] == "s" else None)
