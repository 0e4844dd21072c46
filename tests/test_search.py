"""gemmtune search on PoCL: results rows, resume, grid, fault isolation, kill -9, Ctrl-C, bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from faults import write_fault_space
from helpers_foundation import SMALL_SPACE, TINY_SPACE, make_device

from gemmtune.cli import cli
from gemmtune.devices.opencl import resolve_device
from gemmtune.devices.info import DeviceInfo
from gemmtune.precision import get_precision
from gemmtune.search import check_problem
from gemmtune.space import load_space
from gemmtune.space.valid import valid_configs

FAST = ["--time-cap", "0.05", "-q", "--early-stop", "0"]  # early stop: its own test


def rows(db: Path, where: str = "1=1") -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(f"SELECT * FROM results WHERE {where} ORDER BY id")]
    finally:
        con.close()


def search(*args, db: Path, expect: int = 0):
    result = CliRunner().invoke(cli, ["search", "--db", f"sqlite:///{db}", *FAST, *args])
    assert result.exit_code == expect, (result.output, result.stderr if hasattr(result, "stderr") else "")
    return result


@pytest.fixture
def tiny_space(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_SPACE)
    return path


def test_search_fills_results_with_verified_rows(tmp_path, tiny_space):
    db = tmp_path / "r.db"
    out = search("--m", "40", "--n", "24", "--k", "56", "--trials", "3", "--space", str(tiny_space),
                 "--seed", "3", "--format", "json", db=db)
    summary = json.loads(out.stdout)
    got = rows(db)
    assert len(got) == summary["trials"] == 3
    space = load_space(tiny_space)
    allowed = [c.params for c in valid_configs(space, resolve_device(0), get_precision("s"))]
    for r in got:
        assert r["status"] == "ok", r["detail"]
        assert json.loads(r["params"]) in allowed
        assert (r["m"], r["n"], r["k"], r["precision"], r["kernel"]) == (40, 24, 56, "s", "xgemm_k5")
        assert r["max_rel_error"] is not None and r["norm_rel_error"] < 1e-5
        # GFLOP/s is computed from the median device time of the whole operation.
        assert r["gflops"] == pytest.approx(2 * 40 * 24 * 56 / (r["time_ms"] * 1e-3) / 1e9)
        assert 0 < r["kernel_time_ms"] <= r["time_ms"]
        assert r["ci_low_ms"] <= r["time_ms"] <= r["ci_high_ms"]
        assert r["min_ms"] <= r["time_ms"]
        assert r["repeats"] == len(json.loads(r["samples_ms"])) >= 6
        assert r["compile_s"] >= 0 and r["created_at"].endswith("+00:00")
        assert "PoCL" in r["device"] or "Portable" in r["device"]
    best = max(got, key=lambda r: r["gflops"])
    assert summary["best"]["gflops"] == pytest.approx(best["gflops"])
    assert summary["best"]["params"] == json.loads(best["params"])
    # The baseline (the built-in default, or the nearest point of this space) is measured first.
    assert got[0]["baseline"] == 1 and sum(r["baseline"] for r in got) == 1
    assert summary["speedup_over_baseline"] == pytest.approx(best["gflops"] / got[0]["gflops"])


def test_resume_adds_trials_to_the_same_study(tmp_path, tiny_space):
    db = tmp_path / "r.db"
    first = json.loads(search("--size", "24", "--trials", "2", "--seed", "1", "--space", str(tiny_space),
                              "--format", "json", db=db).stdout)
    second = json.loads(search("--size", "24", "--trials", "2", "--seed", "2", "--space", str(tiny_space),
                               "--format", "json", db=db).stdout)
    assert first["study"] == second["study"]
    got = rows(db)
    assert len(got) == 4 and {r["study"] for r in got} == {first["study"]}
    # Optuna numbered the new trials after the old ones, and no configuration was measured twice.
    assert min(r["trial"] for r in got[2:]) > max(r["trial"] for r in got[:2])
    assert len({r["params"] for r in got}) == 4


def test_grid_covers_a_tiny_space_once_and_stops(tmp_path, tiny_space):
    db = tmp_path / "g.db"
    out = json.loads(search("--size", "33", "--sampler", "grid", "--space", str(tiny_space),
                            "--format", "json", db=db).stdout)
    got = rows(db)
    assert out["trials"] == len(got) == out["valid_configurations"] == 4
    assert len({r["params"] for r in got}) == 4
    again = json.loads(search("--size", "33", "--sampler", "grid", "--space", str(tiny_space),
                              "--format", "json", db=db).stdout)
    assert again["trials"] == 0 and len(rows(db)) == 4


def test_each_injected_fault_costs_one_trial_and_the_good_trial_survives(tmp_path):
    db = tmp_path / "f.db"
    # The timeout covers a cold build on a busy two-core machine; the hanging kernel costs all of it.
    out = json.loads(search("--size", "40", "--sampler", "grid", "--space", str(write_fault_space(tmp_path)),
                            "--trial-timeout", "30", "--format", "json", db=db).stdout)
    by_fault = {json.loads(r["params"])["FAULT"]: r for r in rows(db)}
    assert {f: r["status"] for f, r in by_fault.items()} == {
        1: "ok", 2: "compile_error", 3: "crash", 4: "timeout", 5: "wrong_result", 6: "launch_error"}
    assert "not OpenCL C" in by_fault[2]["detail"] or "error" in by_fault[2]["detail"].lower()
    assert "signal" in by_fault[3]["detail"]
    assert "INVALID_WORK_GROUP_SIZE" in by_fault[6]["detail"]
    assert by_fault[5]["max_rel_error"] > 1e-3 and "componentwise" in by_fault[5]["detail"]
    good = by_fault[1]
    assert good["gflops"] > 0 and good["norm_rel_error"] < 1e-5
    assert out["best"]["params"]["FAULT"] == 1  # a wrong result can never be best
    assert out["failures"] == {"compile_error": 1, "crash": 1, "timeout": 1, "wrong_result": 1, "launch_error": 1}
    # The study's trials say why each failed; a complete one is ok, which goes without saying.
    import optuna

    trials = optuna.load_study(study_name=out["study"], storage=f"sqlite:///{db}").trials
    said = {t.params["FAULT"]: t.user_attrs.get("status") for t in trials if "skipped" not in t.user_attrs}
    assert said == {1: None, 2: "compile_error", 3: "crash", 4: "timeout", 5: "wrong_result", 6: "launch_error"}


def test_building_on_the_timing_worker_gives_the_same_verdicts(tmp_path):
    # --jobs 0: no compiler processes; the timing worker builds each candidate itself.
    db = tmp_path / "j0.db"
    out = json.loads(search("--size", "40", "--sampler", "grid", "--jobs", "0", "--format", "json",
                            "--space", str(write_fault_space(tmp_path, (1, 2, 5, 8))), db=db).stdout)
    by_fault = {json.loads(r["params"])["FAULT"]: r for r in rows(db)}
    assert {f: r["status"] for f, r in by_fault.items()} == {1: "ok", 2: "compile_error", 5: "wrong_result",
                                                             8: "wrong_result"}
    assert "componentwise error nan" in by_fault[8]["detail"]  # the one element C kept from its poison
    assert out["best"]["params"]["FAULT"] == 1


def test_a_clearly_slower_candidate_is_stopped_early_and_never_best(tmp_path):
    db = tmp_path / "e.db"
    space = write_fault_space(tmp_path, (1, 7))  # grid order: the fast one first
    out = json.loads(search("--size", "64", "--sampler", "grid", "--early-stop", "0.5", "--time-cap", "2",
                            "--format", "json", "--space", str(space), db=db).stdout)
    fast, slow = rows(db)
    assert json.loads(slow["params"])["FAULT"] == 7 and slow["status"] == "slow"
    assert fast["status"] == "ok" and out["best"]["params"]["FAULT"] == 1
    # Stopped once its interval was surely below half the best: few samples, and far below.
    assert 6 <= slow["repeats"] < fast["repeats"]
    assert slow["ci_low_ms"] > fast["time_ms"] / 0.5
    assert "stopped after" in slow["detail"]
    assert out["failures"] == {}  # slow is not a failure


def test_the_summary_reports_the_pipeline(tmp_path, tiny_space):
    db = tmp_path / "p.db"
    out = json.loads(search("--size", "24", "--trials", "3", "--jobs", "1", "--space", str(tiny_space),
                            "--format", "json", db=db).stdout)
    assert 0 < out["device_busy_share"] <= 1
    got = rows(db)
    assert len(got) == 3 and all(r["compile_s"] > 0 and r["trial_s"] > 0 for r in got)
    # Written with a write-ahead log, left as one ordinary file that opens read-only anywhere.
    assert not Path(f"{db}-wal").exists()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        con.close()


def _spawn_search(db: Path, *args) -> subprocess.Popen:
    space = db.parent / "tiny.toml"
    space.write_text(TINY_SPACE.replace("TSK = [16]", "TSK = [8, 16, 32]").replace("PAD = [1]", "PAD = [0, 1, 2]"))
    return subprocess.Popen([sys.executable, "-m", "gemmtune", "search", "--db", f"sqlite:///{db}", *FAST,
                             "--space", str(space), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_rows(db: Path, count: int, proc: subprocess.Popen, limit: float = 120) -> None:
    end = time.time() + limit
    while time.time() < end:
        assert proc.poll() is None, proc.communicate()
        if db.exists():
            try:
                if len(rows(db)) >= count:
                    return
            except sqlite3.OperationalError:
                pass  # table not created yet, or locked for a moment
        time.sleep(0.2)
    raise AssertionError(f"no {count} rows within {limit} s")


def _children(parent: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid,ppid"], capture_output=True, text=True).stdout
    return [int(p) for p, pp in (line.split() for line in out.splitlines()[1:]) if int(pp) == parent]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state  # a zombie has exited; only its parent's reaping is left


def test_kill_9_loses_at_most_the_trial_in_flight_and_resume_works(tmp_path):
    db = tmp_path / "k.db"
    proc = _spawn_search(db, "--size", "32", "--trials", "50", "--seed", "5")
    _wait_for_rows(db, 2, proc)
    workers = _children(proc.pid)
    assert workers and all(_alive(w) for w in workers)
    proc.kill()
    proc.wait()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    before = rows(db)
    assert len(before) >= 2 and all(r["status"] == "ok" for r in before)
    # The orphaned worker notices its parent is gone and exits.
    deadline = time.time() + 10
    while any(_alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(w) for w in workers)
    out = json.loads(search("--size", "32", "--trials", "2", "--seed", "6", "--space", str(db.parent / "tiny.toml"),
                            "--format", "json", db=db).stdout)
    after = rows(db)
    assert len(after) == len(before) + 2
    assert {r["study"] for r in after} == {out["study"]}


def test_ctrl_c_keeps_finished_trials_prints_the_summary_and_exits_130(tmp_path):
    db = tmp_path / "c.db"
    proc = _spawn_search(db, "--size", "32", "--trials", "50", "--seed", "7")
    _wait_for_rows(db, 2, proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "stopped: interrupted" in stdout and "best" in stdout
    assert "Traceback" not in stderr
    assert len(rows(db)) >= 2


@pytest.mark.parametrize("args, message", [
    (["--device", "9"], "no device 9"),
    (["--size", "0"], "--size"),
    (["--size", "300000"], "GiB"),
    (["--trials", "0"], "--trials"),
    (["--precision", "x"], "--precision"),
    (["--space", "/nonexistent/space.toml"], "cannot read space file"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    db = tmp_path / "bad.db"
    result = CliRunner().invoke(cli, ["search", "--db", f"sqlite:///{db}", *FAST, *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], result.stderr
    assert not db.exists()


@pytest.mark.parametrize("url, message", [
    ("sqlite:////nonexistent-dir/x.db", "does not exist"),
    ("not a url", "malformed database URL"),
    ("nosuchdb://user@host/db", "database URL"),
])
def test_bad_database_urls_are_refused(url, message):
    result = CliRunner().invoke(cli, ["search", "--db", url, "--size", "16", *FAST])
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unwritable_database_directory_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores permissions: use a path under a file instead
            target = tmp_path / "file"
            target.write_text("")
            url, message = f"sqlite:///{target}/x.db", "does not exist"
        else:
            url, message = f"sqlite:///{ro}/x.db", "not writable"
        result = CliRunner().invoke(cli, ["search", "--db", url, "--size", "16", *FAST])
        assert result.exit_code == 2 and message in result.stderr
    finally:
        ro.chmod(0o700)


def _device(**changes) -> DeviceInfo:
    return make_device(**{"global_mem_bytes": 2**30, "max_alloc_bytes": 2**28, **changes})


def test_problem_checks_name_what_is_wrong():
    from gemmtune.errors import GemmtuneError

    with pytest.raises(GemmtuneError, match="double precision"):
        check_problem(_device(double_precision=False), get_precision("z"), 8, 8, 8)
    with pytest.raises(GemmtuneError, match="GiB"):
        check_problem(_device(), get_precision("s"), 16384, 16384, 16384)
    with pytest.raises(GemmtuneError, match="one allocation"):
        check_problem(_device(global_mem_bytes=2**40), get_precision("d"), 8192, 8192, 8)
    check_problem(_device(), get_precision("d"), 1024, 1024, 1024)  # fits: no error
    # a batch stacks its problems in each operand's buffer: it must fit as a whole
    check_problem(_device(), get_precision("s"), 64, 64, 64, batch=1000)
    with pytest.raises(GemmtuneError, match="a batch of 100000 64x64x64 in precision s needs about .* GiB"):
        check_problem(_device(global_mem_bytes=2**30, max_alloc_bytes=2**40), get_precision("s"), 64, 64, 64,
                      batch=100_000)
    with pytest.raises(GemmtuneError, match="a batch of 20000 .* one allocation"):
        check_problem(_device(global_mem_bytes=2**40), get_precision("s"), 64, 64, 64, batch=20_000)
    with pytest.raises(GemmtuneError, match="stacks .* elements in one operand"):
        check_problem(_device(global_mem_bytes=2**44, max_alloc_bytes=2**44), get_precision("s"), 1024, 1024, 8,
                      batch=4096)


def test_the_model_best_predictions_are_measured_right_after_the_baseline(tmp_path):
    from gemmtune.models.analytic import best_tilings

    space_file = tmp_path / "seed.toml"
    space_file.write_text(TINY_SPACE.replace("TSK = [16]", "TSK = [8, 16, 32]").replace("PAD = [1]", "PAD = [0, 2]"))
    db = tmp_path / "s.db"
    search("--size", "40", "--trials", "3", "--space", str(space_file), "--seed", "4", db=db)
    got = [json.loads(r["params"]) for r in rows(db)]
    dev, prec = resolve_device(0), get_precision("s")
    others = [c for c in valid_configs(load_space(space_file), dev, prec) if c.params != got[0]]
    assert got[1:] == [c.params for c in best_tilings(others, dev, prec, 40, 40, 40, count=2)]
    # With --no-seed the sampler alone decides after the baseline (TPE's first proposals are random).
    db2 = tmp_path / "n.db"
    search("--size", "40", "--trials", "3", "--space", str(space_file), "--seed", "4", "--no-seed", db=db2)
    assert rows(db2)[0]["params"] == rows(db)[0]["params"] and len(rows(db2)) == 3


def test_candidates_with_an_identical_binary_launched_alike_are_measured_once(tmp_path, monkeypatch):
    # PoCL's binaries embed a hash of the build options, so no two configurations share one
    # there; a compiler pool that reports PAD-blind digests stands in for a driver that emits
    # the same code for them (PAD changes neither the work-group nor the padded problem).
    from dataclasses import replace

    import gemmtune.search.loop as search_module
    from gemmtune.execution.processes import Compilers

    class PadBlind(Compilers):
        def collect(self, worker):
            _, config, _ = worker.job[1]
            built = super().collect(worker)
            if built.status != "ok":
                return built
            same = {k: v for k, v in config.params.items() if k != "PAD"}
            return replace(built, digest=json.dumps(same, sort_keys=True))

    monkeypatch.setattr(search_module, "Compilers", PadBlind)
    space_file = tmp_path / "pads.toml"
    space_file.write_text(TINY_SPACE.replace("TSN = [16, 32]", "TSN = [16]").replace("PAD = [1]", "PAD = [0, 1, 2]"))
    db = tmp_path / "r.db"
    search("--size", "32", "--sampler", "grid", "--jobs", "1", "--space", str(space_file), db=db)
    got = rows(db)
    assert len(got) == 6 and all(r["status"] == "ok" for r in got)
    by_trial = {r["trial"]: r for r in got}
    for tsm in (16, 32):
        group = [r for r in got if json.loads(r["params"])["TSM"] == tsm]
        measured = [r for r in group if not (r["detail"] or "").startswith("identical binary")]
        assert len(measured) == 1, [r["detail"] for r in group]
        first = measured[0]
        for r in group:
            if r is not first:
                assert r["detail"] == f"identical binary to trial {first['trial']}: measured once"
                assert (r["time_ms"], r["samples_ms"], r["gflops"]) == (first["time_ms"], first["samples_ms"], first["gflops"])
    # Different TSM: a different launch, so never shared even with equal digests.
    assert len({r["time_ms"] for r in by_trial.values()}) >= 2


def test_builds_run_ahead_only_as_far_as_the_devices_consume_them():
    from types import SimpleNamespace

    from gemmtune.search.pipeline import Builds, running_mean

    builds = Builds(SimpleNamespace(workers=[object()] * 15), None, None, None)
    assert builds.ahead(1, None) == 15 + 2  # nothing measured yet: every compiler, two ready
    builds.build_s = 0.36  # builds take 6.8 trials of device time: 7, twice
    assert builds.ahead(1, 0.053) == 2 + 2 * 7
    assert builds.ahead(2, 0.053) == 2 * (2 + 2 * 7)
    builds.build_s = 0.5  # device-bound: two building and two ready per device
    assert builds.ahead(2, 1.0) == 2 * 4
    assert running_mean(None, 2.0) == 2.0 and running_mean(2.0, None) == 2.0
    assert running_mean(2.0, 4.0) == pytest.approx(2.4)


def test_idle_device_time_is_counted_for_what_the_devices_waited_for():
    from collections import deque
    from types import SimpleNamespace

    from gemmtune.search.pipeline import IdleTime

    room = [False]
    pipe = SimpleNamespace(timing={0: deque(), 1: deque()}, has_room=lambda: room[0])
    clock = IdleTime()
    clock.note(pipe, 10.0)              # both devices empty, every compiler building
    pipe.timing[0].append("trial")
    clock.note(pipe, 12.0)              # 2 s x 2 devices waited for a build; now one is busy
    room[0] = True
    clock.note(pipe, 13.0)              # 1 s x 1 device for a build; a compiler could build one more now
    clock.note(pipe, 16.5)              # 3.5 s x 1 device for a proposal
    assert clock.seconds == {"build": 5.0, "proposal": 3.5}
    clock.note(pipe, 18.0, winding_down=True)
    clock.note(pipe, 30.0)              # nothing more to ask: not waiting for anything
    assert clock.seconds == {"build": 5.0, "proposal": 5.0}
    room[0] = False
    clock.note(pipe, 31.0)              # 1 s more of a proposal
    pipe.timing[1].append("trial")
    clock.note(pipe, 32.0)              # 1 s x 1 device for a build
    clock.note(pipe, 40.0)              # every device busy
    assert clock.seconds == {"build": 6.0, "proposal": 6.0}
    assert clock.shares(40.0, 2) == {"build": 6.0 / 80, "proposal": 6.0 / 80, "process": 0.0}
    assert clock.shares(0.0, 2) is None
    # The devices say they waited 20 s in all (a first wait counts from the search's start
    # only): 8 s of it neither for a build nor a proposal, but for this process to hand them
    # what was ready.
    from gemmtune.execution.messages import Outcome

    clock.start = 10.0
    clock.reported(Outcome("ok", trial_s=1.0, idle_s=9.0), now=15.0)    # ready at 6: 4 s of it in the search
    clock.reported(Outcome("ok", trial_s=1.0, idle_s=16.0), now=40.0)
    clock.reported(Outcome("timeout", trial_s=30.0), now=45.0)           # no report
    assert clock.reported_s == 20.0
    assert clock.shares(40.0, 2) == {"build": 6.0 / 80, "proposal": 6.0 / 80, "process": 8.0 / 80}
    clock.reported_s = 5.0
    assert clock.shares(40.0, 2)["process"] == 0.0   # never below nothing


def test_the_summary_says_what_an_idle_device_waited_for(tmp_path, tiny_space):
    # Without compiler processes the timing worker builds each candidate itself: it never waits
    # for a compiler's build, only for the next proposal; with one, it waits for the first build.
    for jobs, builds in (("0", False), ("1", True)):
        out = json.loads(search("--size", "24", "--trials", "4", "--jobs", jobs, "--space", str(tiny_space),
                                "--format", "json", db=tmp_path / f"idle{jobs}.db").stdout)
        idle = out["device_idle_share"]
        assert set(idle) == {"build", "proposal", "process"} and all(0 <= v <= 1 for v in idle.values())
        assert out["device_busy_share"] + sum(idle.values()) <= 1.0
        assert (idle["build"] > 0) == builds   # the first candidate's build, at least
    text = search("--size", "24", "--trials", "2", "--space", str(tiny_space), db=tmp_path / "idle1.db").stdout
    assert re.search(r"busy \d+% of the wall time; nothing to measure, waiting for a build \d+%, "
                     r"for a proposal \d+%, for this process \d+%", text)


def test_the_summary_says_what_the_cost_model_learned_from(tmp_path, tiny_space):
    """None on an empty database; then every row of the device's other studies (the first
    search's, whatever their status); nothing where the strategy learns nothing."""
    db = tmp_path / "learned.db"
    first = search("--size", "24", "--trials", "3", "--space", str(tiny_space), db=db).stdout
    assert "model      none: 0 rows of the device's other studies, fewer than a model needs" in first
    for size in (32, 40):
        search("--size", str(size), "--trials", "4", "--space", str(tiny_space), db=db)
    out = json.loads(search("--size", "48", "--trials", "2", "--space", str(tiny_space), "--format", "json",
                            db=db).stdout)
    others = len(rows(db, "m != 48"))
    assert others >= 8 and out["learned_from"] == {"database_rows": others, "shipped_rows": 0, "shipped_for": None,
                                                  "borrowed": False, "enough": True}
    text = search("--size", "56", "--trials", "1", "--space", str(tiny_space), db=db).stdout
    assert f"model      learned from {len(rows(db, 'm != 56')):,} rows of the device's other studies\n" in text
    plain = json.loads(search("--size", "64", "--trials", "1", "--space", str(tiny_space), "--sampler", "tpe",
                              "--no-seed", "--format", "json", db=db).stdout)
    assert plain["learned_from"] is None
    grid = search("--size", "72", "--sampler", "grid", "--space", str(tiny_space), db=db).stdout   # seeds or not
    assert "model " not in grid and "best " in grid


def test_only_a_strategy_that_learns_or_takes_model_seeds_fits_the_cost_model():
    from gemmtune.strategies import STRATEGIES

    assert STRATEGIES["learned"].fits_model(10) and STRATEGIES["learned"].fits_model(0)
    assert STRATEGIES["tpe"].fits_model(10) and not STRATEGIES["tpe"].fits_model(0)
    assert not STRATEGIES["grid"].fits_model(10)   # it measures everything: no seeds, nothing learned


def test_the_summary_names_the_device_whose_shipped_rows_a_search_borrows(capsys):
    from gemmtune.cli.tune import print_summary

    summary = {"study": "s", "db": "x", "device": "d", "devices": [0], "precision": "s", "m": 1, "n": 1, "k": 1,
               "failures": {}, "trials": 1, "elapsed_s": 1.0, "stopped_by": "trials", "valid_configurations": 1,
               "device_busy_share": None, "best": None, "tie_with_runner_up": None, "baseline": None,
               "learned_from": {"database_rows": 1234, "shipped_rows": 20836, "shipped_for": "NVIDIA H200",
                                "borrowed": True, "enough": True}}
    print_summary(summary)
    assert ("model      learned from 1,234 rows of the device's other studies and 20,836 shipped rows of "
            "NVIDIA H200, a device of its kind\n") in capsys.readouterr().out


def test_a_job_waiting_behind_a_crash_or_a_hang_runs_on_the_fresh_worker(tmp_path):
    from gemmtune.execution.messages import Job
    from gemmtune.execution.processes import Runner
    from gemmtune.measure.timing import TimingPolicy

    space = load_space(write_fault_space(tmp_path, (1, 3, 4)))
    source = space.family("xgemm_k5").source

    def collect(runner):
        runner.worker.connection.poll(max(0.0, runner.worker.deadline - time.monotonic()))
        return runner.collect()

    with Runner(0, trial_timeout=15) as runner:
        configs = {c.params["FAULT"]: c for c in valid_configs(space, runner.device, get_precision("s"))}

        def job(fault):
            return Job(configs[fault], source, "s", 40, 40, 40, TimingPolicy(max_seconds=0.05))

        for bad, status in ((3, "crash"), (4, "timeout")):
            first = runner.worker.process.pid
            runner.submit(job(bad))
            runner.submit(job(1))  # sent at once, waiting in the worker behind the bad one
            assert runner.jobs == 2 and len(runner.waiting) == 1
            assert collect(runner).status == status
            assert runner.worker.process.pid != first and runner.jobs == 1
            good = collect(runner)
            assert good.status == "ok" and good.check.passed and runner.jobs == 0
        # Behind a good job the next one starts when it ends: both come back, in order.
        runner.submit(job(1))
        runner.submit(job(1))
        assert [collect(runner).status for _ in range(2)] == ["ok", "ok"] and runner.jobs == 0
        # Each outcome says how long the worker waited for its job since it was free: at least
        # the pause before it was sent, at most the time since the last result came back.
        since = time.monotonic()
        time.sleep(0.4)
        runner.submit(job(1))
        late = collect(runner)
        assert late.status == "ok" and 0.4 <= late.idle_s <= time.monotonic() - since


def test_a_chosen_candidate_is_one_running_trial_written_at_once_that_samplers_accept(tmp_path):
    # The baseline, the model's seeds, random and grid candidates skip enqueue_trial and ask.
    import optuna
    import sqlalchemy as sa
    from optuna.trial import TrialState

    from gemmtune.optuna_adapter import BatchedStorage
    from gemmtune.search.proposals import Proposals
    from gemmtune.strategies import make_strategy

    space = load_space(None)   # the shipped space: several families, so KERNEL is a parameter too
    dev, prec = resolve_device(0), get_precision("s")
    valid = valid_configs(space, dev, prec)
    chosen = [valid[0], valid[-1]]
    assert {c.kernel for c in chosen} == {"xgemm_k5", "xgemm_thin"}
    storage = BatchedStorage(f"sqlite:///{tmp_path / 's.db'}")
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(storage=storage, study_name="x", direction="maximize",
                                    sampler=make_strategy("tpe", 1).sampler(constant_liar=True))
        proposals = Proposals(space)
        commits = []
        sa.event.listen(storage.engine, "commit", lambda conn: commits.append(1))
        trials = [proposals.start(study, c, storage.batch) for c in chosen]
        started = len(commits)
        # What it replaces: enqueue the parameters, ask for the waiting trial, suggest them.
        params = {proposals.name(chosen[1].kernel, p): v for p, v in chosen[1].items} | {"KERNEL": "xgemm_rt"}
        study.enqueue_trial(params)
        old = study.ask()
        with storage.batch():
            proposals.suggest(old)
        # Two transactions write a chosen trial (the trial, then its parameters; one more reads it
        # back), against more for the way it replaces.
        assert started / len(chosen) <= 3 < len(commits) - started
        study.tell(old, state=TrialState.PRUNED)
        for trial, config in zip(trials, chosen):
            frozen = study._storage.get_trial(trial._trial_id)
            assert frozen.state == TrialState.RUNNING and proposals.decode(frozen.params) == config
            # The parameters are what the sampler would have suggested: suggesting them again
            # returns them, with no clash of distributions.
            assert proposals.suggest(trial) == config
        study.tell(trials[0], 1.0)
        study.tell(trials[1], 2.0)
        for _ in range(3):   # TPE, constant liar and all, models the study these trials are in
            trial = study.ask()
            config = proposals.suggest(trial)
            assert proposals.decode(study._storage.get_trial(trial._trial_id).params) == config
            study.tell(trial, 0.5)
        assert [t.number for t in study.trials] == list(range(6))
    finally:
        storage.engine.dispose()


def test_one_read_serves_a_whole_tpe_proposal_and_changes_no_proposal(tmp_path):
    # With the constant liar TPE re-reads the study for every group it samples; one_read makes
    # that one read per proposal. In one process nothing changes between those reads, so the
    # proposals must be exactly those of plain Optuna.
    import contextlib

    import optuna

    from gemmtune.optuna_adapter import BatchedStorage, one_read
    from gemmtune.search.proposals import Proposals
    from gemmtune.strategies import make_strategy

    space = load_space(None)   # three families: TPE samples a group per family and KERNEL

    def propose(wrap: bool):
        storage = BatchedStorage(f"sqlite:///{tmp_path / f'{wrap}.db'}")
        try:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.create_study(storage=storage, study_name="x", direction="maximize",
                                        sampler=make_strategy("tpe", 3).sampler(constant_liar=True))
            reads = []
            real = study._storage.get_all_trials
            study._storage.get_all_trials = lambda *a, **k: (reads.append(1), real(*a, **k))[1]
            proposals, seen, per_proposal, flying = Proposals(space), [], [], []
            for _ in range(16):   # past TPE's ten random start-up trials
                before = len(reads)
                with one_read(study) if wrap else contextlib.nullcontext():
                    trial = study.ask()
                    config = proposals.suggest(trial)
                per_proposal.append(len(reads) - before)
                seen.append(config)
                flying.append((trial, config))
                if len(flying) > 2:   # two stay running, for the constant liar to see
                    done, c = flying.pop(0)
                    study.tell(done, float(sum(c.params.values()) % 97 + len(c.kernel)))
            return seen, per_proposal
        finally:
            storage.engine.dispose()

    fast, fast_reads = propose(True)
    plain, plain_reads = propose(False)
    assert fast == plain and len(set(map(str, fast))) > 10
    # ask reads the waiting trials itself; the sampler's reads of the study become one
    assert max(fast_reads) <= 2 < max(plain_reads) and sum(fast_reads) < sum(plain_reads)


def test_one_read_blocks_nest_and_leave_the_study_as_it_was(tmp_path):
    import optuna

    from gemmtune.optuna_adapter import one_read

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.tell(study.ask(), 1.0)
    with one_read(study):
        outer = study._get_trials
        with one_read(study):
            assert study._get_trials is not outer and len(study._get_trials(deepcopy=False)) == 1
        assert study._get_trials is outer
    assert "_get_trials" not in vars(study)
    study.tell(study.ask(), 2.0)   # reads are live again once the block ends
    assert len(study._get_trials(deepcopy=False)) == 2


def test_a_large_space_is_searched_without_listing_it(tmp_path, monkeypatch):
    # 131,072 points, more than a chunk: the search draws its seeds from the product and counts
    # the valid ones at the end; the shipped space's 2.36 million took 15 s to list before the
    # first trial.
    from gemmtune.search.proposer import Proposer
    from gemmtune.space import CHUNK_ROWS, FamilySpace

    space_file = tmp_path / "large.toml"
    space_file.write_text("[xgemm_k5]\nTSM = [8, 16, 32, 64]\nTSN = [8, 16, 32, 64]\nTSK = [8, 16, 32, 64]\n"
                          "WPTN = [1, 2, 4, 8]\nPAD = [" + ", ".join(map(str, range(16))) + "]\n"
                          "TRANSPOSEX = [8, 16, 32, 64]\nTRANSPOSEY = [8, 16, 32, 64]\nTRANSPOSEW = [1, 2]\n")
    space, dev, prec = load_space(space_file), resolve_device(0), get_precision("s")
    assert space.size > CHUNK_ROWS
    valid = {json.dumps(c.params) for c in valid_configs(space, dev, prec)}

    def listed(*args, **kwargs):
        raise AssertionError("the search listed the whole space")

    for owner, name in ((FamilySpace, "valid"), (FamilySpace, "configs"), (Proposer, "unmeasured")):
        monkeypatch.setattr(owner, name, listed)
    db = tmp_path / "l.db"
    out = json.loads(search("--size", "40", "--trials", "3", "--space", str(space_file), "--seed", "2",
                            "--format", "json", db=db).stdout)
    got = rows(db)
    assert len(got) == out["trials"] == 3
    assert all(json.dumps(json.loads(r["params"])) in valid for r in got)
    assert len({r["params"] for r in got}) == 3
    assert out["valid_configurations"] == len(valid)


@pytest.mark.parametrize("args, trials, timeout", [
    ([], None, 240.0),                                # the Quick start: a time budget, any number of trials
    (["--trials", "5"], 5, None),
    (["--timeout", "10"], None, 10.0),
    (["--trials", "5", "--timeout", "10"], 5, 10.0),
    (["--sampler", "grid"], None, None),              # grid: the whole space, however long it takes
])
def test_search_without_trials_or_timeout_has_a_time_budget(monkeypatch, tmp_path, args, trials, timeout):
    import gemmtune.search

    asked = []
    monkeypatch.setattr(gemmtune.search, "run_search", lambda req, line: asked.append(req) or [])
    result = CliRunner().invoke(cli, ["search", "--db", f"sqlite:///{tmp_path / 'b.db'}", "-q", *args])
    assert result.exit_code == 0, result.output
    assert (asked[0].trials, asked[0].timeout) == (trials, timeout)


def test_progress_shows_the_time_left(capsys):
    from gemmtune.cli.tune import _ProgressLine
    from gemmtune.search import Progress

    line = _ProgressLine(quiet=False)
    line(Progress(3, None, 120.5, 0, 61.2, last_gflops=99.0, left=178.8))
    line(Progress(3, 30, 120.5, 1, 61.2, last_gflops=99.0))
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith("trial 3  best 120.5 GFLOP/s") and "61 s, 179 s left" in first
    assert second.startswith("trial 3/30 ") and "left" not in second


def test_search_on_a_cpu_takes_the_cpu_space_unless_given_one(tmp_path, tiny_space):
    dev = resolve_device(0)
    assert dev.type == "CPU"
    db = tmp_path / "cpu.db"
    out = json.loads(search("--size", "24", "--trials", "2", "--no-seed", "--format", "json", db=db).stdout)
    assert out["valid_configurations"] == len(valid_configs(load_space(device=dev), dev, get_precision("s")))
    assert {r["kernel"] for r in rows(db)} == {"xgemm_cpu"}
    given = tmp_path / "given.db"
    search("--size", "24", "--trials", "2", "--no-seed", "--space", str(tiny_space), db=given)
    assert {r["kernel"] for r in rows(given)} == {"xgemm_k5"}


def test_a_large_valid_set_is_counted_aside_for_the_summary(tmp_path, monkeypatch):
    # A product larger than a chunk: the search counts its valid set in a forked process while it
    # runs, and the summary reads the count from there.
    import gemmtune.space as space_module
    from gemmtune.search import SearchRequest, run_search
    from gemmtune.measure.timing import TimingPolicy
    from gemmtune.space.valid import ValidConfigs

    space = tmp_path / "small.toml"
    space.write_text(SMALL_SPACE)
    monkeypatch.setattr(space_module, "CHUNK_ROWS", 4)
    counted: list[bool] = []
    count_aside = ValidConfigs.count_aside

    def watched(self):
        count_aside(self)
        counted.append(self._aside is not None)

    monkeypatch.setattr(ValidConfigs, "count_aside", watched)
    [summary] = run_search(SearchRequest(m=24, n=24, k=24, trials=2, db=f"sqlite:///{tmp_path / 's.db'}",
                                         space_file=str(space), seeds=0, jobs=1,
                                         policy=TimingPolicy(max_seconds=0.05)))
    assert counted == [True]
    dev = resolve_device(None)
    assert summary.space_size == len(valid_configs(load_space(space), dev, get_precision("s"))) > 4


def _compile(configs, space, problem) -> list:
    from gemmtune.execution.messages import BuildJob
    from gemmtune.execution.processes import Compilers

    compilers = Compilers("0", 1, 60)
    try:
        built = []
        for config in configs:
            worker = compilers.idle()
            worker.submit(BuildJob(config, space.family(config.kernel).source, "s", problem), 60)
            assert worker.connection.poll(60)
            built.append(compilers.collect(worker))
        return built
    finally:
        compilers.close()


def test_on_pocl_a_compiler_hands_its_build_over_through_the_drivers_cache(tmp_path, monkeypatch):
    # PoCL keeps source builds, and each kernel's code for the size it was launched with, on
    # disk: no binary is made (asked for one, PoCL compiles every kernel for any size first).
    # One digest per build, so that identical builds are measured once.
    from gemmtune.devices.opencl import keeps_source_builds, open_device
    from gemmtune.launch.plan import Problem

    (tmp_path / "tiny.toml").write_text(TINY_SPACE)
    space = load_space(tmp_path / "tiny.toml")
    info, dev = open_device("0")
    first, second = valid_configs(space, info, get_precision("s"))[:2]
    assert keeps_source_builds(dev)
    built = _compile([first, first, second], space, Problem(40, 24, 56))
    assert [b.status for b in built] == ["ok"] * 3 and all(b.binary is None for b in built)
    assert built[0].digest == built[1].digest != built[2].digest
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")   # the cache off: the binary carries the build
    assert not keeps_source_builds(dev)
    (again,) = _compile([first], space, Problem(40, 24, 56))
    assert again.status == "ok" and again.binary


def test_a_compiler_sends_the_programs_built_apart_and_the_timing_worker_loads_them(tmp_path, monkeypatch):
    # Where the binary carries the build (PoCL's cache off, as on NVIDIA), the preparation
    # kernels' program goes along with each candidate, and the timing worker loads it from its
    # binary instead of compiling it; the product is still verified against numpy.
    import pyopencl as cl

    from gemmtune.launch import operation as kernels
    from gemmtune.devices.opencl import open_device
    from gemmtune.execution.messages import Job
    from gemmtune.execution.timing_worker import _trial
    from gemmtune.families import FAMILIES
    from gemmtune.launch.plan import Problem
    from gemmtune.measure.timing import TimingPolicy

    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    (tmp_path / "tiny.toml").write_text(TINY_SPACE)
    space = load_space(tmp_path / "tiny.toml")
    info, dev = open_device("0")
    problem = Problem(40, 24, 56, "T", "N")   # A transposed, B too (xgemm_k5 reads it Np x Kp)
    first, second = valid_configs(space, info, get_precision("s"))[:2]
    built = _compile([first, second], space, problem)
    plan = FAMILIES["xgemm_k5"].plan(first.params, get_precision("s"), problem, dev, dev.max_compute_units)
    apart = {launch.defines for launch in plan.launches if launch.defines is not None}
    assert len(apart) == 1 and all(b.status == "ok" for b in built)
    assert [d for d, _ in built[0].helpers] == [*apart] and all(binary for _, binary in built[0].helpers)
    assert built[0].helpers == built[1].helpers   # the same transpose tile: one program for both

    calls = []
    real_build = kernels.build
    monkeypatch.setattr(kernels, "build", lambda ctx, source, defs, binary=None: calls.append((defs, binary))
                        or real_build(ctx, source, defs, binary))
    queue = cl.CommandQueue(cl.Context([dev]), properties=cl.command_queue_properties.PROFILING_ENABLE)
    job = Job(first, space.family("xgemm_k5").source, "s", 40, 24, 56, TimingPolicy(max_seconds=0.01),
              built[0].binary, trans_a="T", helpers=built[0].helpers)
    outcome = _trial(cl, queue, {}, job)
    assert outcome.status == "ok" and outcome.check.passed
    assert (dict(*apart), built[0].helpers[0][1]) in calls


def test_on_pocl_a_compiler_launches_the_kernels_it_built(tmp_path):
    # The proof that it launches: a kernel that reads far out of bounds kills the compiler
    # (one candidate lost, as on the timing worker); a launch the driver refuses is left for the
    # timing worker to report.
    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.plan import Problem

    space = load_space(write_fault_space(tmp_path, (3, 6)))
    info, _ = open_device("0")
    crashing, refused = valid_configs(space, info, get_precision("s"))
    out_of_bounds, bad_size = _compile([crashing, refused], space, Problem(40, 24, 56))
    assert out_of_bounds.status == "crash" and "signal" in out_of_bounds.detail
    assert bad_size.status == "ok"
