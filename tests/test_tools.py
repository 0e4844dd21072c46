"""The scripts in tools/ run and print what they promise (their figures are measurements, so the
tests check their form and their arithmetic, not their size)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.usefixtures("no_tuned_results")
def test_call_cost_prints_the_call_beside_an_empty_launch_and_their_ratio():
    out = run("tools/call_cost.py", "--size", "8", "--calls", "50")
    figures = {name: float(value) for name, value in
               re.findall(r"^(Gemm call|Gemm call \+ finish|trivial launch|call / trivial)\s+([\d.]+)", out, re.M)}
    assert set(figures) == {"Gemm call", "Gemm call + finish", "trivial launch", "call / trivial"}, out
    assert all(v > 0 for v in figures.values())
    # The ratio is of the printed medians (rounded to two decimals there).
    assert figures["call / trivial"] == pytest.approx(figures["Gemm call"] / figures["trivial launch"], rel=0.02)


def test_cpu_probe_verifies_and_times_a_configuration():
    out = run("tools/cpu_probe.py", "-D", "VW=8", "-D", "MV=1", "-D", "NR=4", "--precision", "s,d",
              "--sizes", "48", "--repeats", "2", "--no-numpy")
    rows = [line for line in out.splitlines() if re.match(r"^[sd]\s+48\^3\s+kernel", line)]
    assert len(rows) == 2 and all(" ok " in row for row in rows), out
    assert all(float(re.search(r"kernel\s+([\d.]+) GFLOP/s", row).group(1)) > 0 for row in rows)


def test_make_prior_writes_the_rows_a_search_learns_from_and_the_same_bytes_twice(tmp_path):
    """The prior file holds exactly the ok and slow rows of the named device, each study's
    problem intact, and reads back as ``shipped_prior`` reads the shipped one."""
    from gemmtune import shipped_prior
    from gemmtune.space import Config
    from gemmtune.store import Store

    db = tmp_path / "land.db"
    store = Store(f"sqlite:///{db}")
    configs = [Config.of("xgemm_k5", {"TSM": m, "TSN": 32, "TSK": 8, "WPTN": 4, "PAD": 1, "TRANSPOSEX": 16,
                                      "TRANSPOSEY": 16, "TRANSPOSEW": 1}) for m in (16, 32, 64)]
    for device_name, study, statuses in (("Some GPU", "a", ("ok", "slow", "wrong_result")),
                                         ("Other GPU", "b", ("ok", "ok", "ok"))):
        for i, (config, status) in enumerate(zip(configs, statuses)):
            store.add(study=study, trial=i, device=f"P | {device_name} | 1", device_name=device_name, precision="d",
                      m=96, n=64, k=32, trans_a="T", kernel=config.kernel, params=config.params, status=status,
                      gflops=10.0 * (i + 1) + 0.04, time_ms=1.0, created_at="2026-12-03T00:00:00+00:00")
    store.close()
    out, again = tmp_path / "prior-some-gpu.csv.gz", tmp_path / "again.csv.gz"
    run("tools/make_prior.py", "--device-name", "Some GPU", "-o", str(out), str(db))
    run("tools/make_prior.py", "--device-name", "Some GPU", "-o", str(again), str(db))
    assert out.read_bytes() == again.read_bytes()
    rows = shipped_prior.read(out)
    assert list(rows.columns) == list(shipped_prior.COLUMNS)
    assert list(rows.status) == ["ok", "slow"] and list(rows.gflops) == [10.0, 20.0]
    assert (rows.study == "a").all() and (rows.precision == "d").all() and (rows.trans_a == "T").all()
    assert list(rows[["m", "n", "k"]].iloc[0]) == [96, 64, 32]


@pytest.mark.parametrize("case", ["no such device", "no such file", "not a database"])
def test_make_prior_answers_bad_input_with_one_error_line_and_writes_nothing(tmp_path, case):
    from gemmtune.store import Store

    db = tmp_path / "land.db"
    Store(f"sqlite:///{db}").close()
    if case == "not a database":
        db.write_text("not sqlite")
    args = [str(tmp_path / "missing.db")] if case == "no such file" else [str(db)]
    out = tmp_path / "prior.csv.gz"
    done = subprocess.run([sys.executable, "tools/make_prior.py", "--device-name", "Some GPU", "-o", str(out), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not list(tmp_path.glob("prior*"))


def test_proposal_cost_prints_the_cost_per_measured_trial_as_the_study_grows():
    out = run("tools/proposal_cost.py", "--device-info", "docs/landscapes/nvidia-h200.json", "-p", "z",
              "--trials", "90", "--every", "30")
    assert out.splitlines()[0].startswith("NVIDIA H200, z 1280x1792x1024: ")
    rows = [tuple(float(x.replace(",", "")) for x in line.split()) for line in out.splitlines()
            if re.match(r"^\s+\d+\s+\d+\s", line)]
    assert [r[0] for r in rows] == [30, 60, 90], out
    in_study = [0] + [r[1] for r in rows]
    for (measured, study, per_measured, ms, best), before in zip(rows, in_study):
        assert study >= measured and ms > 0 and best > 0
        assert per_measured == pytest.approx((study - before) / 30, abs=0.05)   # its own arithmetic
    assert [r[4] for r in rows] == sorted(r[4] for r in rows)   # the best so far never falls
    outcomes = dict((reason.strip(), int(count)) for reason, count in
                    re.findall(r"(?:, |outcome: )([a-z :-]+?) (\d+)", out.splitlines()[-1]))
    assert outcomes["measured"] == 90 and sum(outcomes.values()) == rows[-1][1], out
