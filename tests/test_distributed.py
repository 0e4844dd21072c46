"""Several devices and several processes on one study.

Two PoCL devices stand for two GPUs: POCL_DEVICES="pthread pthread" gives two devices of one
model (one device key, so one shared study), "pthread basic" two different models. Searches
sharing a study across processes run against a real PostgreSQL server: the one named by
$GEMMTUNE_TEST_POSTGRES (what .ci/run starts), else one these tests start themselves
(tests/pgserver.py); where neither can be had, those tests are skipped with the reason, except
under CI, where that is a failure.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import SMALL_SPACE  # noqa: E402

SPACE = SMALL_SPACE
FAST = ["--time-cap", "0.05", "--early-stop", "0", "--size", "40"]
SAME_MODEL = {"POCL_DEVICES": "pthread pthread"}
TWO_MODELS = {"POCL_DEVICES": "pthread basic"}


@pytest.fixture
def space(tmp_path) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(SPACE)
    return path


def gemmtune(*args, env=None, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "gemmtune", *args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def spawn(*args, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gemmtune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def rows(url: str) -> list[dict]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text("SELECT * FROM results ORDER BY id")).mappings()]
    finally:
        engine.dispose()


# ---------------------------------------------------------------- several devices, one process

def test_two_devices_of_one_model_search_one_study_together(tmp_path, space):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    # Devices 0 and 1: the first platform's two (a machine may list another PoCL after them).
    result = gemmtune("search", "--device", "0,1", "--db", url, "--space", str(space), "--trials", "8",
                      "--format", "json", *FAST, env=SAME_MODEL)
    out = json.loads(result.stdout)
    assert out["devices"] == [0, 1] and out["trials"] == 8
    got = rows(url)
    assert len(got) == 8 and {r["study"] for r in got} == {out["study"]}
    assert len({r["trial"] for r in got}) == 8 and len({r["params"] for r in got}) == 8
    # Both devices measured: each progress line names the device that measured it.
    measured_on = {line.split("| device ")[1].split(":")[0] for line in result.stderr.splitlines() if "| device " in line}
    assert measured_on == {"0", "1"}


def test_timing_workers_of_several_devices_run_on_cores_of_their_own(tmp_path, space, monkeypatch):
    from gemmtune.devices import info, opencl as device
    from gemmtune.search import loop as S
    from gemmtune.measure.timing import TimingPolicy

    seen: dict[str, dict[int, set]] = {}
    compilers: list[set] = []   # the cores of every thread of each compiler

    def threads(pid):  # every thread of a process, the OpenCL driver's too
        return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")}

    class Recording(S.Runner):
        def ready(self):
            info = super().ready()
            seen[self.spec] = threads(self.worker.process.pid)
            return info

    class RecordingCompilers(S.Compilers):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for w in self.workers:
                compilers.append(set().union(*threads(w.process.pid).values()))

    monkeypatch.setattr(S, "Runner", Recording)
    monkeypatch.setattr(S, "Compilers", RecordingCompilers)
    # The workers inherit the variable; this process may have opened PoCL already, with one device.
    monkeypatch.setenv("POCL_DEVICES", "pthread pthread")
    monkeypatch.setattr(device, "device_specs", lambda spec: ["0", "1"] if spec == "all" else [spec])
    ours = os.sched_getaffinity(0)

    def search(device, jobs=1):
        seen.clear()
        compilers.clear()
        S.run_search(S.SearchRequest(device=device, m=40, n=40, k=40, trials=2, db=f"sqlite:///{tmp_path / 'p.db'}",
                                     space_file=str(space), seeds=0, jobs=jobs, early_stop=None,
                                     policy=TimingPolicy(max_seconds=0.05)))
        return [set().union(*threads.values()) for threads in seen.values()], seen

    blocks, workers = search("all")
    plan, rest = info.core_plan(2)
    assert blocks == [set(p) for p in plan] and not blocks[0] & blocks[1]
    assert all(len({frozenset(c) for c in t.values()}) == 1 for t in workers.values())
    # The compilers keep off the workers' cores when any are left.
    assert len(compilers) == 1 and compilers[0] == (set(rest) or ours)
    blocks, _ = search("0")  # one device keeps every core
    assert blocks == [ours] and compilers[0] == ours
    # Without --jobs, one compiler per core left to them (here a plan that leaves two).
    cores = sorted(ours)
    monkeypatch.setattr(S, "core_plan", lambda workers: ([(cores[0],)] * workers, tuple(cores[:2])))
    search("all", jobs=None)
    assert len(compilers) == 2


def test_default_jobs_are_one_per_core_the_compilers_may_use(monkeypatch):
    from gemmtune.search import loop as S

    monkeypatch.setattr(S, "host_cores", lambda: 32)
    assert S.default_jobs() == 31                          # one core for the parent and the worker
    assert S.default_jobs(tuple(range(16, 32))) == 16      # pinned beside two workers' blocks
    assert S.default_jobs(()) == 31                        # nothing left to pin them to
    monkeypatch.setattr(S, "host_cores", lambda: 1)
    assert S.default_jobs() == 1


def test_core_plan_gives_each_worker_a_block_and_the_compilers_the_rest(monkeypatch):
    from gemmtune.devices import info

    def cores(c):
        monkeypatch.setattr(info.os, "sched_getaffinity", lambda pid: set(c))

    cores(range(32))
    assert info.core_plan(2) == ([tuple(range(8)), tuple(range(8, 16))], tuple(range(16, 32)))
    cores({0, 1, 2, 3, 4, 5, 6, 8})
    assert info.core_plan(2) == ([(0, 1), (2, 3)], (4, 5, 6, 8))
    assert info.core_plan(3) == ([(0,), (1,), (2,)], (3, 4, 5, 6, 8))
    assert info.core_plan(1, per_worker=2) == ([(0, 1)], (2, 3, 4, 5, 6, 8))
    cores({0, 1})
    assert info.core_plan(2) == ([(0,), (1,)], ())
    assert info.core_plan(3) is None and info.host_cores() == 2


def test_devices_of_different_models_get_a_study_each(tmp_path, space):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    out = json.loads(gemmtune("search", "--device", "0,1", "--db", url, "--space", str(space), "--trials", "3",
                              "--format", "json", "-q", *FAST, env=TWO_MODELS).stdout)
    assert isinstance(out, list) and len(out) == 2
    assert out[0]["device"] != out[1]["device"] and out[0]["study"] != out[1]["study"]
    got = rows(url)
    for summary in out:
        mine = [r for r in got if r["study"] == summary["study"]]
        assert len(mine) == 3 and {r["device"] for r in mine} == {summary["device"]}


@pytest.mark.parametrize("devices, env, message", [
    ("0,0", SAME_MODEL, "names device 0 twice"),
    ("0,7", SAME_MODEL, "no device 7"),
    ("0,,1", SAME_MODEL, "bad device list"),
])
def test_bad_device_lists_are_one_line_exit_2_and_write_nothing(tmp_path, space, devices, env, message):
    db = tmp_path / "bad.db"
    result = gemmtune("search", "--device", devices, "--db", f"sqlite:///{db}", "--space", str(space), *FAST,
                      env=env, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr
    assert not db.exists()


def test_one_study_name_for_two_models_is_refused(tmp_path, space):
    db = tmp_path / "bad.db"
    result = gemmtune("search", "--device", "0,1", "--study", "mine", "--db", f"sqlite:///{db}",
                      "--space", str(space), *FAST, env=TWO_MODELS, check=False)
    assert result.returncode == 2 and "--study" in result.stderr and "Traceback" not in result.stderr
    assert not db.exists()


def test_a_second_search_on_one_sqlite_file_is_refused_and_the_first_goes_on(tmp_path, space):
    db = tmp_path / "one.db"
    url = f"sqlite:///{db}"
    # The shipped space: thirty of its candidates take minutes to build on PoCL, so the first
    # search is still running when Ctrl-C comes (a tiny space could be exhausted before).
    first = spawn("search", "--db", url, "--trials", "30", "-q", *FAST, "--time-cap", "1")
    deadline = time.time() + 120
    while time.time() < deadline and not (db.exists() and _count(db) >= 1):
        assert first.poll() is None, first.communicate()
        time.sleep(0.2)
    before = _count(db)
    second = gemmtune("search", "--db", url, "--space", str(space), "--trials", "2", "-q", *FAST, check=False)
    assert first.poll() is None, "the first search ended before the second was tried"
    assert second.returncode == 2 and "PostgreSQL" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    first.send_signal(signal.SIGINT)  # the first is unharmed: it ends as asked, with its rows
    stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 130 and "stopped: interrupted" in stdout, stderr
    got = rows(url)
    assert len(got) >= before and len({r["trial"] for r in got}) == len(got)
    assert {r["study"] for r in got} == {got[0]["study"]}


def _count(db: Path) -> int:
    try:
        con = sqlite3.connect(db)
        try:
            return con.execute("SELECT count(*) FROM results").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0  # not created yet, or locked for a moment


# ---------------------------------------------------------------- several processes, PostgreSQL



@pytest.fixture
def pg_url(postgres) -> str:
    """A fresh database of its own on the server."""
    name = f"gemmtune_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(postgres, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return sa.engine.make_url(postgres).set(database=name).render_as_string(hide_password=False)


def _optuna_trials(url: str, study: str):
    return optuna.load_study(study_name=study, storage=url).get_trials(deepcopy=False)


def test_two_processes_share_one_study_without_losing_or_doubling_a_trial(pg_url, space):
    args = ["search", "--db", pg_url, "--space", str(space), "--study", "shared", "--trials", "5", "-q",
            "--format", "json", *FAST]
    procs = [spawn(*args, "--seed", str(seed)) for seed in (1, 2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
    summaries = [json.loads(stdout) for stdout, _ in outs]
    assert sum(s["trials"] for s in summaries) == 10

    got = rows(pg_url)
    assert len(got) == 10 and {r["study"] for r in got} == {"shared"}
    assert len({r["trial"] for r in got}) == 10           # trial numbers unique
    assert len({r["params"] for r in got}) == 10          # no configuration measured twice
    trials = {t.number: t for t in _optuna_trials(pg_url, "shared")}
    assert not [t for t in trials.values() if t.state == optuna.trial.TrialState.RUNNING]
    for r in got:  # every row is a finished Optuna trial with the row's value (as the search measured it)
        t = trials[r["trial"]]
        if r["status"] == "ok":
            assert t.state == optuna.trial.TrialState.COMPLETE
            assert t.value == pytest.approx(r["search_gflops"] or r["gflops"])
        else:   # a failure: below every result for TPE (session.FAILED)
            assert t.state == optuna.trial.TrialState.PRUNED

    # The best is the same whichever process asks, and it is the best row of either. (Each
    # summary's is the best when that process ended: the other may still have been timing its
    # finalists again, search.finalists.)
    best = max((r for r in got if r["status"] == "ok"), key=lambda r: r["gflops"])
    assert {s["best"]["trial"] for s in summaries} <= {r["trial"] for r in got if r["status"] == "ok"}
    for _ in range(2):
        report = json.loads(gemmtune("report", "--db", pg_url, "--format", "json").stdout)
        assert len(report) == 1 and report[0]["trial"] == best["trial"]
        assert report[0]["gflops"] == pytest.approx(best["gflops"])


def test_a_killed_search_leaves_no_trial_running_and_the_other_goes_on(pg_url, tmp_path):
    # More valid configurations (18 on PoCL) than the victim's 14 trials and the survivor's 2:
    # however far the victim got before the kill, the survivor has configurations left.
    space = tmp_path / "wider.toml"
    space.write_text(SPACE.replace("PAD = [0, 1]", "PAD = [0, 1, 2]"))
    common = ["search", "--db", pg_url, "--space", str(space), "--study", "shared", "-q", "--heartbeat-grace", "3",
              *FAST]
    victim = spawn(*common, "--trials", "14", "--seed", "1")
    deadline = time.time() + 120
    while time.time() < deadline:
        assert victim.poll() is None, victim.communicate()
        try:
            running = [t for t in _optuna_trials(pg_url, "shared") if t.state == optuna.trial.TrialState.RUNNING]
            if len(rows(pg_url)) >= 1 and running:
                break
        except (KeyError, sa.exc.ProgrammingError):
            pass  # study or table not created yet
        time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    orphaned = {t.number for t in _optuna_trials(pg_url, "shared") if t.state == optuna.trial.TrialState.RUNNING}
    assert orphaned, "the killed search had no trial in flight"
    recorded = {r["trial"] for r in rows(pg_url)}
    before = len(recorded)

    # Stale only once the grace period has passed since the victim's last heartbeat: a survivor
    # that asked for all its trials sooner would rightly leave them running.
    time.sleep(3 + 1)
    survivor = gemmtune(*common, "--trials", "2", "--seed", "2", "--format", "json")
    assert json.loads(survivor.stdout)["trials"] == 2
    trials = {t.number: t for t in _optuna_trials(pg_url, "shared")}
    assert not [t for t in trials.values() if t.state == optuna.trial.TrialState.RUNNING]
    assert all(trials[n].state == optuna.trial.TrialState.FAIL for n in orphaned)
    got = rows(pg_url)
    lost = {r["trial"] for r in got if r["status"] == "lost"}
    # Each orphaned trial has one row: its own, if it was recorded just before the kill, else "lost";
    # but one killed between its ask and its parameters has no configuration: failed, nothing to record.
    assert lost == {n for n in orphaned - recorded if trials[n].params}
    assert len(got) == before + 2 + len(lost) and len({r["trial"] for r in got}) == len(got)
