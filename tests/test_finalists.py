"""Finalists timed again after a search on a CPU device (gemmtune.search.finalists)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from helpers_foundation import POCL_LIKE, sql

from gemmtune.cli import cli
from gemmtune.db.store import Store
from gemmtune.execution.messages import Outcome
from gemmtune.measure.timing import Timing, gflops
from gemmtune.precision import get_precision
from gemmtune.search.finalists import time_finalists
from gemmtune.search.recording import record
from gemmtune.space import Config, config_key
from gemmtune.space.defaults import default_config

FLOPS = 2 * 64**3
BASE = default_config(POCL_LIKE, get_precision("s")).params   # every row a configuration of the shipped space


def cpu(nb: int) -> dict:
    return {**BASE, "NB": nb}


def timing(gf: float) -> Timing:
    ms = FLOPS / (gf * 1e9) * 1e3
    return Timing(tuple(ms * (1 + 0.001 * (i - 5.5)) for i in range(12)), (ms,) * 12)   # median ms


class QuietRunner:
    """A timing worker whose quiet figures are given by configuration: GFLOP/s, or a failure."""

    def __init__(self, quiet: dict[int, float | str]):
        self.quiet, self.ran = quiet, []

    def run(self, job) -> Outcome:
        nb = job.config.params["NB"]
        self.ran.append(nb)
        got = self.quiet[nb]
        return Outcome(got, detail="worker process died") if isinstance(got, str) else Outcome("ok", timing(got))


def study(tmp_path, loud: dict[int, float], quiet: dict[int, float | str], baseline: int, theirs=()):
    """A study's rows, one configuration per NB value measured at ``loud`` GFLOP/s during the
    search, and a stand-in for the search whose timing worker measures ``quiet``."""
    store, prec = Store(f"sqlite:///{tmp_path / 'r.db'}"), get_precision("s")
    for trial, (nb, gf) in enumerate(loud.items()):
        record(store, "st", trial, POCL_LIKE, prec, 64, 64, 64, Config.of("xgemm_cpu", cpu(nb)),
               Outcome("ok", timing(gf)), nb == baseline)
    runner = QuietRunner(quiet)
    told = []
    search = SimpleNamespace(
        store=store, dev=POCL_LIKE, name="st", prec=prec, flops=FLOPS,
        rows=SimpleNamespace(mine={trial for trial, nb in enumerate(loud) if nb not in theirs}),
        baseline_key=config_key("xgemm_cpu", cpu(baseline)), space=None,
        pipeline=SimpleNamespace(runners=[runner], job=lambda config, early_stop: SimpleNamespace(config=config)),
        told_again=lambda config, outcome, value: told.append((config.params["NB"], value)))
    return search, runner, told


def rows(tmp_path) -> dict[int, dict]:
    return {json.loads(r["params"])["NB"]: r for r in sql(tmp_path / "r.db", "SELECT * FROM results")}


def test_the_baseline_and_the_fastest_take_their_quiet_figures(tmp_path):
    loud = {1: 50.0, 2: 100.0, 3: 90.0, 4: 70.0, 5: 60.0}
    quiet = {1: 120.0, 2: 95.0, 3: 110.0, 4: 130.0, 5: 200.0}
    search, runner, told = study(tmp_path, loud, quiet, baseline=1)
    assert time_finalists(search, most=2) == 3
    assert runner.ran == [1, 2, 3]   # the baseline, then the two fastest by the search's figures
    got = rows(tmp_path)
    for nb in (1, 2, 3):
        assert got[nb]["gflops"] == pytest.approx(quiet[nb], rel=1e-3)
        assert got[nb]["time_ms"] == pytest.approx(timing(quiet[nb]).median_ms)
        assert json.loads(got[nb]["samples_ms"]) == pytest.approx(timing(quiet[nb]).samples_ms, abs=1e-6)
        assert got[nb]["detail"].startswith("timed again after the search")
        assert f"{loud[nb]:,.1f} GFLOP/s" in got[nb]["detail"]
        assert got[nb]["trial"] == nb - 1 and got[nb]["baseline"] == (nb == 1)   # the same rows, not new ones
        assert got[nb]["search_gflops"] == pytest.approx(loud[nb], rel=1e-3)
    for nb in (4, 5):   # below the finalists: as the search measured them
        assert got[nb]["gflops"] == pytest.approx(loud[nb], rel=1e-3) and got[nb]["detail"] is None
        assert got[nb]["search_gflops"] is None
    assert len(got) == 5
    assert told == [(nb, pytest.approx(quiet[nb], rel=1e-3)) for nb in (1, 2, 3)]
    # Timed again by a later search (a resumed study): the figure of the search stays the first's.
    time_finalists(search, most=2)
    again = rows(tmp_path)[2]
    assert again["search_gflops"] == pytest.approx(loud[2], rel=1e-3)
    assert again["detail"].endswith(f"{loud[2]:,.1f} GFLOP/s during the search")


def test_the_fastest_is_timed_again_until_it_is_a_quiet_figure(tmp_path):
    # The two fastest were lucky during the search: quietly both fall below the third's figure,
    # which is then timed again as well, and stays first.
    loud = {1: 40.0, 2: 100.0, 3: 99.0, 4: 98.0, 5: 30.0}
    quiet = {1: 45.0, 2: 50.0, 3: 60.0, 4: 105.0, 5: 500.0}
    search, runner, _ = study(tmp_path, loud, quiet, baseline=1)
    assert time_finalists(search, most=2) == 4
    assert runner.ran == [1, 2, 3, 4]
    got = rows(tmp_path)
    assert json.loads(max(got.values(), key=lambda r: r["gflops"])["params"]) == cpu(4)
    assert got[4]["gflops"] == pytest.approx(105.0, rel=1e-3) and got[5]["detail"] is None


def test_a_finalist_that_fails_when_timed_again_keeps_its_figures_and_says_so(tmp_path):
    loud = {1: 40.0, 2: 100.0, 3: 90.0}
    quiet = {1: 45.0, 2: "crash", 3: 95.0}
    search, runner, _ = study(tmp_path, loud, quiet, baseline=1)
    assert time_finalists(search, most=2) == 3
    got = rows(tmp_path)
    assert got[2]["gflops"] == pytest.approx(100.0, rel=1e-3) and got[2]["status"] == "ok"
    assert got[2]["detail"].startswith("timed again after the search: crash (worker process died)")
    assert got[3]["gflops"] == pytest.approx(95.0, rel=1e-3)


def test_a_search_on_a_cpu_device_times_its_finalists_again(tmp_path):
    """A real search on PoCL: the summary counts the rows timed again, the baseline is one of them,
    and the best it reports is a quiet figure, the best of the rows."""
    db = tmp_path / "r.db"
    out = CliRunner().invoke(cli, ["search", "--db", f"sqlite:///{db}", "--size", "64", "--trials", "8",
                                   "--time-cap", "0.05", "-q", "--format", "json", "--seed", "1"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    got = sql(db, "SELECT * FROM results ORDER BY id")
    again = [r for r in got if (r["detail"] or "").startswith("timed again after the search")]
    assert summary["finalists_timed_again"] == len(again) >= 2
    assert any(r["baseline"] for r in again)
    best = max(got, key=lambda r: r["gflops"] or 0)
    assert best in again
    assert summary["best"]["gflops"] == pytest.approx(best["gflops"])
    assert best["gflops"] == pytest.approx(gflops(2 * 64**3, best["time_ms"]))



def test_rows_another_process_measured_are_left_to_it(tmp_path):
    # A study shared by two search processes: this one measured NB 1, 3 and 5.
    loud = {1: 40.0, 2: 100.0, 3: 90.0, 4: 95.0, 5: 30.0}
    quiet = {1: 45.0, 2: 500.0, 3: 92.0, 4: 500.0, 5: 35.0}
    search, runner, _ = study(tmp_path, loud, quiet, baseline=1, theirs=(2, 4))
    assert time_finalists(search, most=4) == 3
    assert runner.ran == [1, 3, 5]
    got = rows(tmp_path)
    assert got[2]["gflops"] == pytest.approx(100.0, rel=1e-3) and got[4]["detail"] is None


def test_only_a_cpu_device_timed_beside_its_compilers_has_finalists():
    from helpers_foundation import GPU_LIKE

    from gemmtune.search.finalists import needs_finalists

    def search(dev, builds):
        return SimpleNamespace(dev=dev, pipeline=SimpleNamespace(builds=builds))

    assert needs_finalists(search(POCL_LIKE, object()))
    assert not needs_finalists(search(GPU_LIKE, object()))   # builds on host cores the device's timing does not use
    assert not needs_finalists(search(POCL_LIKE, None))      # --jobs 0: every build on the timing worker, in turn


def test_ctrl_c_while_the_finalists_are_timed_again_stops_them_and_says_interrupted(tmp_path, monkeypatch):
    import os
    import signal

    import gemmtune.search.loop as loop
    from gemmtune.search import run_search
    from gemmtune.search.request import SearchRequest

    real, seen = loop.time_finalists, []

    def pressed_first(search, stopped, **kw):
        os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C, as the search's handler takes it
        seen.append(stopped())
        return real(search, stopped, **kw)

    monkeypatch.setattr(loop, "time_finalists", pressed_first)
    db = tmp_path / "r.db"
    [summary] = run_search(SearchRequest(device=0, m=32, n=32, k=32, trials=3, seeds=0, db=f"sqlite:///{db}"))
    assert seen == [True]   # the finalists see the press and stop before timing any
    assert summary.stopped_by == "interrupted" and summary.finalists == 0
    got = sql(db, "SELECT * FROM results")
    assert len(got) == 3 and not any(r["search_gflops"] for r in got)
