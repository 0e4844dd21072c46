"""Workloads: ``--shapes`` files and strings, and ``gemmtune search --shapes`` on PoCL.

The searches run over a space of four direct-family configurations (built in a second or two
each), two trials per problem, so that what is checked is the workload's bookkeeping: a study
per problem, the nearby shapes' best configurations measured first, resuming, the budget, and
the objective's device time recorded beside it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from gemmtune.cli import cli
from gemmtune.errors import GemmtuneError
from gemmtune.shapes import Shape, load_shapes

SPACE = """
[xgemm_direct]
MWG = [16, 32]
NWG = [16]
KWG = [8]
MDIMC = [8]
NDIMC = [8]
PADL = [0, 1]
KSPLIT = [1]
"""


def test_csv_toml_and_inline_shapes_agree(tmp_path):
    csv = tmp_path / "w.csv"
    csv.write_text("# problems\nm,n,k,precision,trans_a,trans_b\n\n64,32,16,,,\n1,4096,4096,d,T,c\n64,32,16,,,\n")
    toml = tmp_path / "w.toml"
    toml.write_text('[[shape]]\nm = 64\nn = 32\nk = 16\n\n[[shape]]\nm = 1\nn = 4096\nk = 4096\n'
                    'precision = "d"\ntrans_a = "T"\ntrans_b = "C"\n')
    expected = [Shape(64, 32, 16), Shape(1, 4096, 4096, "d", "T", "C")]
    assert load_shapes(str(csv)) == expected   # the repeated row is dropped
    assert load_shapes(str(toml)) == expected
    assert load_shapes("64,32,16; 1,4096,4096,D,t,C;") == expected
    assert [str(s) for s in expected] == ["64x32x16", "d1x4096x4096 TC"]
    assert expected[0].with_precision("z") == Shape(64, 32, 16, "z")


@pytest.mark.parametrize("text, suffix, match", [
    ("[[shape]]\nm = 1\nn = 2\n", ".toml", "shape 1: k is missing"),
    ("[[shape]]\nm = 1.5\nn = 2\nk = 3\n", ".toml", "m must be a whole number"),
    ("[[shape]]\nm = true\nn = 2\nk = 3\n", ".toml", "m must be a whole number"),
    ("shape = 3\n", ".toml", "expected [[shape]] tables"),
    ("[[shape]\n", ".toml", "not valid TOML"),
    ("m,n,k\n2147483648,1,1\n", ".csv", "row 2: m must be between 1 and 2147483647"),
    ("m,n,k,trans_b\n1,1,1,H\n", ".csv", "row 2: trans_b must be N, T or C"),
    ("m,n,k\n", ".csv", "names no problem"),
    ("\xff\xfe", ".csv", "cannot read shapes file"),
])
def test_malformed_shapes_files_name_what_is_wrong(tmp_path, text, suffix, match):
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(GemmtuneError, match=match.replace("[", r"\[").replace("]", r"\]")):
        load_shapes(str(path))


def test_a_missing_shapes_file_is_an_error(tmp_path):
    with pytest.raises(GemmtuneError, match="cannot read shapes file"):
        load_shapes(str(tmp_path / "none.csv"))


def search(*args, code=0):
    result = CliRunner().invoke(cli, ["search", "--device", "0", "--time-cap", "0.05", "--early-stop", "0",
                                      "--no-seed", "--seed", "3", *args])
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == code, (result.output, result.exception)
    return result


def rows(db: Path) -> list[dict]:
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        found = [dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM results ORDER BY id"))]
    engine.dispose()
    return found


@pytest.mark.usefixtures("no_tuned_results")
def test_search_shapes_tunes_each_problem_in_its_own_study_and_resumes(tmp_path):
    space = tmp_path / "s.toml"
    space.write_text(SPACE)
    db = tmp_path / "w.db"
    args = ["--space", str(space), "--db", f"sqlite:///{db}", "--trials", "2", "--shapes", "24,24,24;40,16,24",
            "--format", "json"]
    result = search(*args)
    found = json.loads(result.stdout)
    assert [(s["m"], s["n"], s["k"]) for s in found] == [(24, 24, 24), (40, 16, 24)]
    assert len({s["study"] for s in found}) == 2 and all(s["trials"] == 2 for s in found)
    progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert progress[0].startswith("[1/2] s24x24x24: searching, starting from 0 configuration(s)")
    assert progress[1].startswith("[2/2] s40x16x24: searching, starting from 1 configuration(s)")
    first = rows(db)
    by_shape = {}
    for r in first:
        by_shape.setdefault((r["m"], r["n"], r["k"]), []).append(r)
    best_24 = max((r for r in by_shape[(24, 24, 24)] if r["status"] == "ok"), key=lambda r: r["gflops"])
    # The second problem measures its baseline, then the first problem's best (when they differ).
    second = [json.loads(r["params"]) for r in by_shape[(40, 16, 24)]]
    assert json.loads(best_24["params"]) in second[:2]
    # The objective is per call as a caller pays; the device's own time of it is recorded beside.
    for r in first:
        assert r["status"] == "ok" and r["device_time_ms"] > 0 and r["kernel_time_ms"] > 0
        assert r["time_ms"] > 0.5 * r["device_time_ms"]
    # Running it again resumes both studies: two more trials each, in the same studies.
    again = json.loads(search(*args).stdout)
    assert [s["study"] for s in again] == [s["study"] for s in found]
    assert len(rows(db)) == len(first) + 4


def test_search_shapes_with_too_small_a_budget_says_what_is_left(tmp_path, monkeypatch):
    """The first problem takes the whole budget when it is below a problem's minimum; the
    command says which problems the budget left."""
    from gemmtune.search import workload

    monkeypatch.setattr(workload, "MIN_SECONDS", 1e9)   # no problem can get its share
    clock, given = [0.0], []

    def fake_search(req, progress=None):
        given.append(((req.m, req.n, req.k), req.timeout))
        clock[0] += req.timeout
        return []

    fake_workers(monkeypatch, fake_search, clock)
    result = search("--db", f"sqlite:///{tmp_path / 'w.db'}", "--timeout", "30", "--shapes", "24,24,24;16,16,16")
    assert given == [((24, 24, 24), 30.0)]
    assert "The budget ran out before 1 problem(s): s16x16x16" in result.stderr


def ticking(clock: list[float], step: float = 1e-3):
    """A monotonic clock that moves on at every reading, as the real one does between two calls."""
    def read() -> float:
        clock[0] += step
        return clock[0]
    return read


@pytest.mark.parametrize("timeout, start, expected", [
    (20.0, 3.0, [pytest.approx(17.0, abs=0.01)]),   # the budget less the workers' start
    (3.0, 0.0, [3.0]),                               # below the minimum: the whole of it
    (4.0, 6.0, [4.0]),                               # the workers' start took it all: still searched
])
def test_a_single_problem_workload_is_searched_whatever_its_budget(monkeypatch, timeout, start, expected):
    """`search --shapes m,n,k --timeout T` searched nothing: the last problem of a single pass
    was given the time to the deadline, then compared with a later reading of the clock."""
    from gemmtune.search import SearchRequest, workload

    clock, given = [0.0], []

    def fake_search(req, progress=None):
        given.append(req.timeout)
        clock[0] += req.timeout
        return [Found(1, req.timeout, Counter(), 1.0)]

    fake_workers(monkeypatch, fake_search, clock, start=start)
    monkeypatch.setattr(workload.time, "monotonic", ticking(clock))
    summaries, left = workload.run_workload(SearchRequest(device=0, timeout=timeout, trials=None), [Shape(8, 8, 8)])
    assert given == expected and left == [] and len(summaries) == 1


def test_the_last_problem_of_a_single_pass_gets_what_is_left(monkeypatch):
    """Three problems, 12 s (one pass: 40% of it is less than a minimum each): 5 s, 5 s, then the
    2 s left are below the minimum and the third waits for a later run; with 15.1 s each gets a third."""
    from gemmtune.search import SearchRequest, workload

    clock, given = [0.0], []

    def fake_search(req, progress=None):
        given.append((req.m, req.timeout))
        clock[0] += req.timeout
        return [Found(1, req.timeout, Counter(), 1.0)]

    fake_workers(monkeypatch, fake_search, clock)
    monkeypatch.setattr(workload.time, "monotonic", ticking(clock, 1e-6))
    shapes = [Shape(i, i, i) for i in (1, 2, 3)]
    _, left = workload.run_workload(SearchRequest(device=0, timeout=12.0, trials=None), shapes)
    assert [g[0] for g in given] == [1, 2] and left == shapes[2:]
    given.clear()
    _, left = workload.run_workload(SearchRequest(device=0, timeout=15.1, trials=None), shapes)
    assert [g[0] for g in given] == [1, 2, 3] and left == []
    assert [g[1] for g in given] == pytest.approx([15.1 / 3] * 3, abs=1e-3)


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan"), float("inf")])
def test_a_workload_refuses_a_budget_that_is_not_a_positive_number(timeout):
    from gemmtune.search import SearchRequest, workload

    with pytest.raises(GemmtuneError, match="timeout must be a positive number"):
        workload.run_workload(SearchRequest(device=0, timeout=timeout, trials=None), [Shape(8, 8, 8)])


@pytest.mark.parametrize("extra, match", [
    (["--size", "64"], "leave --size out"),
    (["--study", "mine"], "leave --study out"),
    (["--m", "8"], "leave --m out"),
])
def test_search_shapes_refuses_a_single_problems_options(tmp_path, extra, match):
    result = search("--shapes", "24,24,24", "--db", f"sqlite:///{tmp_path / 'w.db'}", *extra, code=2)
    assert result.stderr.startswith("Error: --shapes names the problems") and match in result.stderr
    assert not (tmp_path / "w.db").exists()


@dataclass
class Found:
    """What a search returns, as much of it as the workload reads."""
    trials: int
    elapsed: float
    failures: Counter
    speedup: float
    stopped_by: str = "timeout"


def fake_workers(monkeypatch, search, clock, opened=None, start: float = 0.0):
    """The workload's Testbed replaced by ``search`` (req -> summaries) and its clock by ``clock``;
    starting them takes ``start`` seconds."""
    from gemmtune import search as search_module
    from gemmtune.search import workload

    class FakeTestbed:
        db = None

        def __init__(self, req, problems):
            if opened is not None:
                opened.append([p[1:4] for p in problems])   # (precision, m, n, k, batch)

        def __enter__(self):
            clock[0] += start
            return self

        def __exit__(self, *exc):
            pass

    FakeTestbed.search = staticmethod(search)
    monkeypatch.setattr(workload.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(search_module, "Testbed", FakeTestbed)
    monkeypatch.setattr(workload, "nearby_configs", lambda *args: [])


def test_a_time_budget_goes_out_evenly_first_then_where_the_first_pass_paid(monkeypatch):
    """Three problems, 100 s: 40 s evenly, then the rest in proportion to each one's gain over its
    baseline in the first pass (2.0, the floor of 0.05, and 0.5), largest gain first."""
    from gemmtune.search import SearchRequest, workload

    clock = [0.0]
    speedups = {(1, 1, 1): 3.0, (2, 2, 2): 0.9, (3, 3, 3): 1.5}
    given = []

    def fake_search(req, progress=None):
        given.append(((req.m, req.n, req.k), req.timeout, req.trials))
        clock[0] += req.timeout   # each search spends its share
        return [Found(2, req.timeout, Counter(crash=1), speedups[(req.m, req.n, req.k)])]

    opened = []   # one set of workers for the whole workload
    fake_workers(monkeypatch, fake_search, clock, opened)
    steps = []
    shapes = [Shape(1, 1, 1), Shape(2, 2, 2), Shape(3, 3, 3)]
    summaries, left = workload.run_workload(SearchRequest(device=0, timeout=100.0, trials=None), shapes,
                                            on_step=steps.append)
    assert left == [] and opened == [[(1, 1, 1), (2, 2, 2), (3, 3, 3)]]
    first, second = given[:3], given[3:]
    assert [g[0] for g in first] == [(1, 1, 1), (2, 2, 2), (3, 3, 3)]
    assert [g[1] for g in first] == pytest.approx([40 / 3] * 3)
    # 60 s left: 2.0 / 2.55 of it, then 0.5 / 0.55 of what is left; the last 1.2 s are below
    # a search's minimum, so the problem whose first pass gained nothing gets no second.
    assert [g[0] for g in second] == [(1, 1, 1), (3, 3, 3)]
    assert [g[1] for g in second] == pytest.approx([60 * 2 / 2.55, 60 * 0.5 / 2.55])
    assert [s.second for s in steps] == [False] * 3 + [True] * 2
    # One summary per problem, its trials, time and failures added up over both passes.
    assert [(s.trials, s.failures["crash"]) for s in summaries] == [(4, 2), (2, 1), (4, 2)]
    assert all(g[2] is None for g in given)   # no trial cap: each searches until its share is spent


def test_a_problem_after_an_overrun_still_gets_its_minimum_while_the_budget_lasts(monkeypatch):
    """The first of four problems overruns its share of the first pass 3 times over (trials in
    flight finish): the others still get MIN_SECONDS each while the whole budget has it, and
    those the budget cannot give it to are left for a later run."""
    from gemmtune.search import SearchRequest, workload

    clock, given = [0.0], []

    def fake_search(req, progress=None):
        given.append((req.m, req.timeout))
        clock[0] += req.timeout * (3 if req.m == 1 else 1)
        return [Found(1, req.timeout, Counter(), 1.0)]

    fake_workers(monkeypatch, fake_search, clock)
    shapes = [Shape(i, i, i) for i in (1, 2, 3, 4)]
    # 50 s: 20 s for the first pass, 5 s each; the first takes 15.
    summaries, left = workload.run_workload(SearchRequest(device=0, timeout=50.0, trials=None), shapes)
    assert [g[0] for g in given[:4]] == [1, 2, 3, 4]
    assert [g[1] for g in given[:4]] == pytest.approx([5.0] + [workload.MIN_SECONDS] * 3)
    assert left == []
    # 30 s: the first's 15, then three minimums. Of the 20 s left, the first takes a quarter
    # (and overruns it to 15); the last gets what remains, the two between less than a minimum.
    assert given[4:] == [(1, pytest.approx(5.0)), (4, pytest.approx(5.0))]
    few, left = workload.run_workload(SearchRequest(device=0, timeout=22.0, trials=None), shapes)
    assert left == shapes[2:]   # 15 s after the first, 5 for the second: nothing left for the third


THIN = """
[xgemm_thin]
WGS = [32]
WPT = [1, 2]
KU = [1, 2]
RB = [1]
KSPLIT = [1, 4]
"""


@pytest.mark.usefixtures("no_tuned_results")
def test_each_problem_is_searched_with_its_ops_and_builds_of_its_own(tmp_path):
    """A workload's transposed problems are measured and verified as given (against numpy, with
    the operands stored transposed), recorded with their ops and looked up by them. The thin
    family's build depends on the problem (which side is thin, which operand is K-fastest): the
    compiler processes build each problem's own, so none is a wrong result."""
    from gemmtune.db.tuned import best_config

    space = tmp_path / "t.toml"
    space.write_text(THIN)
    db = tmp_path / "w.db"
    search("--space", str(space), "--db", f"sqlite:///{db}", "--trials", "3", "--jobs", "1",
           "--shapes", "40,1,300;40,1,300,d,T,N;1,40,300,d,N,T;24,3,70,z,C,T")
    found = rows(db)
    assert {(r["precision"], r["m"], r["n"], r["trans_a"], r["trans_b"]) for r in found} == {
        ("s", 40, 1, "N", "N"), ("d", 40, 1, "T", "N"), ("d", 1, 40, "N", "T"), ("z", 24, 3, "C", "T")}
    assert all(r["status"] == "ok" for r in found), [r["detail"] for r in found if r["status"] != "ok"]
    assert len({r["study"] for r in found}) == 4
    url = f"sqlite:///{db}"
    assert best_config(40, 1, 300, "d", db=url, trans_a="T").source == "tuned"
    near = best_config(40, 1, 300, "d", db=url)   # N, N: not tuned; the same shape with ops T, N is nearest
    assert near.source == "nearest" and near.shape == (40, 1, 300)
    # report and export keep problems with other ops apart and say which.
    shown = json.loads(CliRunner().invoke(cli, ["report", "--db", url, "--format", "json"]).stdout)
    assert sorted((e["precision"], e["m"], e["n"], e["ops"]) for e in shown) == [
        ("d", 1, 40, "NT"), ("d", 40, 1, "TN"), ("s", 40, 1, "NN"), ("z", 24, 3, "CT")]
    exported = json.loads(CliRunner().invoke(cli, ["export", "--db", url, "--format", "json"]).stdout)
    assert sorted(e["ops"] for e in exported["entries"]) == ["CT", "NN", "NT", "TN"]


def test_an_early_stop_threshold_applies_to_its_own_problems_jobs_only():
    """A timing worker outlives one search: a threshold sent during the last problem must not
    stop the next problem's candidates (they would all be recorded slow)."""
    from gemmtune.execution import timing_worker
    from gemmtune.execution.messages import Job, StopAbove
    from gemmtune.space import Config

    config = Config.of("xgemm_thin", {"WGS": 32})
    small = Job(config, "", "s", 64, 64, 64, stop_above_ms=5.0)
    large = Job(config, "", "s", 4096, 4096, 4096)
    large_tn = Job(config, "", "s", 4096, 4096, 4096, trans_a="T")
    timing_worker._STOP_ABOVE[0] = StopAbove(0.01, small.problem_key)
    try:
        assert timing_worker._stop_above(small) == 0.01 and timing_worker._stop_above(large) is None
        timing_worker._STOP_ABOVE[0] = StopAbove(3.0, large.problem_key)
        assert timing_worker._stop_above(large) == 3.0 and timing_worker._stop_above(small) == 5.0
        assert timing_worker._stop_above(large_tn) is None
    finally:
        timing_worker._STOP_ABOVE[0] = None


@pytest.mark.usefixtures("no_tuned_results")
def test_a_single_search_at_a_new_shape_starts_from_the_nearest_tuned_ones_best(tmp_path):
    space = tmp_path / "s.toml"
    space.write_text(SPACE)
    db = tmp_path / "one.db"
    common = ["--space", str(space), "--db", f"sqlite:///{db}", "--trials", "2"]
    search(*common, "--size", "24")
    first = rows(db)
    best = max((r for r in first if r["status"] == "ok"), key=lambda r: r["gflops"])
    search(*common, "--m", "40", "--n", "16", "--k", "24")
    second = [json.loads(r["params"]) for r in rows(db)[len(first):]]
    assert json.loads(best["params"]) in second[:2]   # after the baseline (unless it is the baseline)
