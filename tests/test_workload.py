"""Workloads: ``--shapes`` files and strings, and ``gemmtune search --shapes`` on PoCL.

The searches run over a space of four direct-family configurations (built in a second or two
each), two trials per problem, so that what is checked is the workload's bookkeeping: a study
per problem, the nearby shapes' best configurations measured first, resuming, the budget, and
the objective's device time recorded beside it.
"""

from __future__ import annotations

import json
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


@pytest.mark.usefixtures("no_tuned_results")
def test_search_shapes_with_too_small_a_budget_says_what_is_left(tmp_path, monkeypatch):
    from gemmtune import workload

    space = tmp_path / "s.toml"
    space.write_text(SPACE)
    monkeypatch.setattr(workload, "MIN_SECONDS", 1e9)   # no problem can get its share
    result = search("--space", str(space), "--db", f"sqlite:///{tmp_path / 'w.db'}", "--timeout", "30",
                    "--shapes", "24,24,24;16,16,16")
    assert "The budget ran out before 2 problem(s): s24x24x24, s16x16x16" in result.stderr
    assert not (tmp_path / "w.db").exists() or rows(tmp_path / "w.db") == []


@pytest.mark.parametrize("extra, match", [
    (["--size", "64"], "leave --size out"),
    (["--study", "mine"], "leave --study out"),
    (["--m", "8"], "leave --m out"),
])
def test_search_shapes_refuses_a_single_problems_options(tmp_path, extra, match):
    result = search("--shapes", "24,24,24", "--db", f"sqlite:///{tmp_path / 'w.db'}", *extra, code=2)
    assert result.stderr.startswith("Error: --shapes names the problems") and match in result.stderr
    assert not (tmp_path / "w.db").exists()


def test_a_time_budget_goes_out_evenly_first_then_where_the_first_pass_paid(monkeypatch):
    """Three problems, 100 s: 40 s evenly, then the rest in proportion to each one's gain over its
    baseline in the first pass (2.0, the floor of 0.05, and 0.5), largest gain first."""
    from collections import Counter
    from dataclasses import dataclass

    from gemmtune import search as search_module
    from gemmtune import workload
    from gemmtune.search import SearchRequest

    @dataclass
    class Found:
        trials: int
        elapsed: float
        failures: Counter
        speedup: float
        stopped_by: str = "timeout"

    clock = [0.0]
    speedups = {(1, 1, 1): 3.0, (2, 2, 2): 0.9, (3, 3, 3): 1.5}
    given = []

    def fake_search(req, progress=None):
        given.append(((req.m, req.n, req.k), req.timeout, req.trials))
        clock[0] += req.timeout   # each search spends its share
        return [Found(2, req.timeout, Counter(crash=1), speedups[(req.m, req.n, req.k)])]

    monkeypatch.setattr(workload.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(search_module, "run_search", fake_search)
    monkeypatch.setattr(workload, "nearby_configs", lambda *args: [])
    steps = []
    shapes = [Shape(1, 1, 1), Shape(2, 2, 2), Shape(3, 3, 3)]
    summaries, left = workload.run_workload(SearchRequest(device=0, timeout=100.0, trials=None), shapes,
                                            on_step=steps.append)
    assert left == []
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
