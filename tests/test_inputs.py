"""Bad input is refused before any work starts: one ``Error:`` line, exit code 2, nothing written.

Seeds outside what numpy and Optuna take, non-finite scalars, problems that cannot fit the
device or the host, kernel sources without parameters; and, within a second or two rather
than after the workers' start and the space's enumeration, a database that cannot be used, a
device that does not exist and a SQLite file another search holds.
"""

from __future__ import annotations

import fcntl
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import TINY_SPACE  # noqa: E402

from gemmtune import inputs  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.call.compute import verify_config  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.search import SearchRequest, run_search  # noqa: E402

FAST_S = 2.0   # what "at once" means here: a search's setup takes far longer


def error(args, env=None) -> tuple[str, float]:
    """Run a command that must fail on bad input: its one error line and its wall time."""
    start = time.monotonic()
    result = CliRunner().invoke(cli, args, env=env)
    took = time.monotonic() - start
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0], took


@pytest.fixture
def tiny_space(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_SPACE)
    return path


@pytest.mark.parametrize("args, needle", [
    (["verify", "--size", "8", "--seed", "-1"], "--seed"),
    (["verify", "--size", "8", "--seed", str(2**32)], "--seed"),
    (["search", "--size", "8", "--seed", "-1"], "--seed"),
    (["search", "--size", "8", "--seed", str(2**40)], "--seed"),
    (["verify", "--size", "8", "--alpha", "nan"], "alpha must be finite"),
    (["verify", "--size", "8", "--alpha", "-inf"], "alpha must be finite"),
    (["verify", "--size", "8", "--beta", "inf"], "beta must be finite"),
    (["verify", "--m", "100000", "--n", "100000", "--k", "100000"], "GiB"),
    (["bench", "--sizes", "16,100000", "--baseline", "numpy"], "GiB"),
])
def test_bad_values_are_refused_at_once(args, needle, tmp_path):
    line, took = error([*args, "--db", f"sqlite:///{tmp_path / 'r.db'}"] if args[0] != "verify" else args)
    assert needle in line
    assert took < FAST_S
    assert list(tmp_path.iterdir()) == []


def test_the_largest_seed_is_taken():
    result = CliRunner().invoke(cli, ["verify", "--size", "8", "--seed", str(2**32 - 1), "--format", "json"])
    assert result.exit_code == 0, result.output


def test_the_library_refuses_the_same_values(tmp_path):
    s = get_precision("s")
    for kwargs, needle in (({"seed": -1}, "--seed"), ({"seed": 2**32}, "--seed"), ({"seed": 1.5}, "--seed"),
                           ({"alpha": float("nan")}, "alpha"), ({"beta": complex(0, float("inf"))}, "beta")):
        with pytest.raises(GemmtuneError, match=needle):
            verify_config(0, s, 8, 8, 8, **kwargs)
    with pytest.raises(GemmtuneError, match="--seed"):
        run_search(SearchRequest(device=0, m=8, n=8, k=8, seed=-5, db=f"sqlite:///{tmp_path / 'r.db'}"))
    assert not (tmp_path / "r.db").exists()


def test_a_problem_the_host_cannot_check_is_refused(monkeypatch):
    from helpers_foundation import make_device

    dev = make_device(global_mem_bytes=2**40, max_alloc_bytes=2**40)
    monkeypatch.setattr(inputs, "available_host_bytes", lambda: 2**30)
    with pytest.raises(GemmtuneError, match="host memory"):
        inputs.check_problem(dev, get_precision("d"), 8192, 8192, 8192)
    inputs.check_problem(dev, get_precision("d"), 1024, 1024, 1024)   # 48 MiB: fits
    # What verify allocates for 4096^3 in z, counted by hand: operands, C and its copies in z
    # (16 bytes), the reference's value, scale and converted operands in complex128.
    m = n = k = 4096
    assert inputs.host_bytes(get_precision("z"), m, n, k) == 16 * (2 * m * k + 3 * m * n) + 16 * (4 * m * k + 3 * m * n)


def test_a_kernel_source_without_parameters_is_refused(tmp_path):
    source = tmp_path / "plain.cl"
    source.write_text("__kernel void xgemm(__global float *c) { c[0] = 1.0f; }\n")
    space = tmp_path / "plain.toml"
    space.write_text('[xgemm_k5]\nsource = "plain.cl"\n')
    for command in (["space"], ["search", "--size", "8", "--db", f"sqlite:///{tmp_path / 'r.db'}"]):
        line, _ = error([*command, "--space", str(space)])
        assert "plain.cl declares no parameters" in line
    assert not (tmp_path / "r.db").exists()


# ---------------------------------------------------------------- fail fast

def test_an_unreachable_database_fails_a_search_at_once(tiny_space):
    line, took = error(["search", "--db", "postgresql://nobody@127.0.0.1:1/gemmtune", "--size", "16"])
    assert "cannot open database" in line and took < FAST_S


def test_a_file_that_is_not_sqlite_fails_a_search_at_once(tmp_path):
    db = tmp_path / "notes.db"
    db.write_text("these are notes, not a database\n" * 100)
    line, took = error(["search", "--db", f"sqlite:///{db}", "--size", "16"])
    assert "cannot open database" in line and took < FAST_S
    assert db.read_text() == "these are notes, not a database\n" * 100


def test_a_missing_device_fails_a_search_at_once(tmp_path):
    # The shipped space: enumerating it alone takes longer than the bound.
    line, took = error(["search", "--device", "99", "--db", f"sqlite:///{tmp_path / 'r.db'}", "--size", "16"])
    assert "no device 99" in line and took < FAST_S
    assert not (tmp_path / "r.db").exists()


def test_a_sqlite_file_in_use_by_another_search_fails_at_once(tmp_path):
    db = tmp_path / "busy.db"
    sqlite3.connect(db).close()
    with open(db, "rb") as held:   # what a running search holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        line, took = error(["search", "--db", f"sqlite:///{db}", "--size", "16"])
    assert "in use by another gemmtune search" in line and took < FAST_S


def test_a_search_keeps_the_lock_it_took_first(tmp_path, tiny_space):
    db = tmp_path / "mine.db"
    sqlite3.connect(db).close()
    seen = []

    def progress(p):
        with open(db, "rb") as other:   # a second search, while this one measures
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("free")
            except OSError:
                seen.append("held")

    run_search(SearchRequest(device=0, m=16, n=16, k=16, trials=1, seeds=0, space_file=str(tiny_space),
                             db=f"sqlite:///{db}"), progress)
    assert seen == ["held", "held"]   # the trial, and its row timed again after the search (a CPU device)
    with open(db, "rb") as after:   # and gives it back
        fcntl.flock(after, fcntl.LOCK_EX | fcntl.LOCK_NB)
