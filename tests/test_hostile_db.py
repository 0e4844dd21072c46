"""A database that is shared, foreign, read-only or full: one Error line or the right answer.

Rows of ``devices``, ``peaks`` and Optuna's tables are written by hand, as another program or a
hand edit sharing the database could; every reader skips a bad one, says so on stderr and goes
on with the rest. SQLite URLs with query parameters, read-only files and directories, a full
disk and another application's tables under gemmtune's names each give one ``Error:`` line
before anything is written, or work.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import POCL_LIKE, TINY_SPACE  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.db.store import Store  # noqa: E402
from gemmtune.devices.opencl import resolve_device  # noqa: E402
from gemmtune.db.tuned import best_config  # noqa: E402

K5 = {"TSM": 16, "TSN": 16, "TSK": 16, "WPTN": 2, "PAD": 1, "TRANSPOSEX": 8, "TRANSPOSEY": 8}
# xgemm_cpu configurations as recorded before PACKB existed: the reader fills in its default
CPU_OLD = [{"VW": 16, "MV": 1, "NR": 4, "KU": 1, "NB": 1, "KC": 0, "WGS": 1, "ORDER": 0, "PACKA": 0},
           {"VW": 8, "MV": 1, "NR": 4, "KU": 1, "NB": 1, "KC": 0, "WGS": 1, "ORDER": 0, "PACKA": 0}]


def invoke(args, code=0, cwd=None):
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, args)
    finally:
        os.chdir(before)
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, (args, result.output)
    if code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return result


def execute(db: Path, *statements) -> None:
    with sqlite3.connect(db) as conn:
        for statement, *values in statements:
            conn.execute(statement, values)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- one bad row of devices, peaks, Optuna

BAD_INFOS = {
    "not JSON": '{"name": ',
    "empty": "{}",
    "extra key": json.dumps({**POCL_LIKE.to_json(), "evil": 1}),
    "wrong type": json.dumps({**POCL_LIKE.to_json(), "compute_units": "8"}),
    "a list": json.dumps([1, 2]),
}


@pytest.fixture
def shared_db(tmp_path, add_result) -> Path:
    """A study on POCL_LIKE of xgemm_cpu rows recorded before PACKB, with its description and
    peaks; devices whose stored descriptions are broken, each with a row; peaks no one measured."""
    db = tmp_path / "shared.db"
    for trial, (params, gflops) in enumerate(zip(CPU_OLD, (20.0, 10.0))):
        add_result(db, study="old", trial=trial, device=POCL_LIKE.key, device_name=POCL_LIKE.name, m=16, n=16, k=16,
                   kernel="xgemm_cpu", params=params, gflops=gflops, time_ms=8192 / gflops / 1e6)
    store = Store(f"sqlite:///{db}")
    try:
        store.save_device(POCL_LIKE)
        store.save_peaks(POCL_LIKE.key, POCL_LIKE.name, {"s": 100.0, "bandwidth": 20.0})
    finally:
        store.close()
    for i, (why, info) in enumerate(BAD_INFOS.items()):
        key = f"Lab | Broken {i} | 1.0"
        add_result(db, study=f"broken-{i}", device=key, device_name=f"Broken {i}", m=16, n=16, k=16, params=K5)
        execute(db, ("INSERT INTO devices VALUES (?, ?, ?, ?)", key, f"Broken {i}", info, "2026-01-01T00:00:00"))
    execute(db, *[("INSERT INTO peaks (device, device_name, precision, value, unit, created_at, gemmtune_version) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", POCL_LIKE.key, POCL_LIKE.name, what, value, "GFLOP/s",
                   "2027-01-01T00:00:00", "0")
                  for what, value in (("s", "abc"), ("bandwidth", -1.0), ("q", 5.0))])
    return db


def test_bad_device_and_peak_rows_are_skipped_and_counted(shared_db):
    result = invoke(["report", "--db", f"sqlite:///{shared_db}", "--model", "--format", "json"])
    rows = {r["study"]: r for r in json.loads(result.stdout)}
    assert len(rows) == 1 + len(BAD_INFOS)
    old = rows["old"]
    assert old["params"] == CPU_OLD[0] and old["gflops"] == 20.0
    # The later, broken peak rows do not replace the good ones: 20 of a measured 100 GFLOP/s
    assert old["peak_pct"] == pytest.approx(20.0)
    assert old["predicted_gflops"] > 0 and old["model_spearman"] is not None
    skipped = [line for line in result.stderr.splitlines() if line.startswith("Skipped")]
    assert len(skipped) == 1, result.stderr
    line = skipped[0]
    assert line.startswith(f"Skipped {len(BAD_INFOS) + 3} stored rows")
    for why in ("1 in devices whose info is not JSON", "not a JSON object", "has a field DeviceInfo does not have",
                "lacks a field", "of the wrong type", "2 in peaks without a positive number", "unknown quantity"):
        assert why in line, line
    # The broken descriptions' devices get the note of a device with no description, not a crash
    assert result.stderr.count("No description of device") == len(BAD_INFOS)


def test_every_reader_reads_past_bad_device_and_peak_rows(shared_db):
    url = f"sqlite:///{shared_db}"
    entries = json.loads(invoke(["export", "--db", url]).stdout)["entries"]
    assert {e["study"] for e in entries} == {"old", *(f"broken-{i}" for i in range(len(BAD_INFOS)))}
    result = invoke(["replay", "--db", url, "--study", "old", "--samplers", "random,tpe-seeded", "--seeds", "1",
                     "--format", "json"])
    assert json.loads(result.stdout)["recorded"] == 2
    assert "2 in peaks without a positive number" in result.stderr   # the study's device's broken peaks
    result = invoke(["replay", "--db", url, "--study", "broken-0", "--samplers", "random", "--seeds", "1",
                     "--format", "json"])
    assert "1 in devices whose info is not JSON" in result.stderr


def test_a_search_reads_past_bad_peak_rows_of_its_device(tmp_path):
    space = tmp_path / "tiny.toml"
    space.write_text(TINY_SPACE)
    db = tmp_path / "r.db"
    Store(f"sqlite:///{db}").close()
    key = resolve_device(0).key
    execute(db, *[("INSERT INTO peaks (device, device_name, precision, value, unit, created_at, gemmtune_version) "
                   "VALUES (?, 'x', ?, ?, 'GFLOP/s', '2026-01-01T00:00:00', '0')", key, what, value)
                  for what, value in (("s", "abc"), ("bandwidth", float("inf")))])
    result = invoke(["search", "--db", f"sqlite:///{db}", "--space", str(space), "--size", "16", "--trials", "1",
                     "--no-seed", "-q", "--time-cap", "0.05", "--format", "json"])
    assert json.loads(result.stdout)["best"]["gflops"] > 0
    assert result.stderr.splitlines() == ["Skipped 2 stored rows that gemmtune cannot use: "
                                          "2 in peaks without a positive number."]


def test_unreadable_optuna_trials_are_left_out_of_importances(results_copy):
    """A trial whose parameter has a distribution Optuna does not know spoils Optuna's reading of
    the whole study; the importances are of the other trials, and stderr says one was skipped."""
    with sqlite3.connect(results_copy) as conn:
        study = conn.execute("SELECT study FROM results WHERE precision = 's' AND m = 40").fetchone()[0]
        trial = conn.execute("SELECT t.trial_id FROM trials t JOIN studies s ON s.study_id = t.study_id "
                             "WHERE s.study_name = ? ORDER BY t.number LIMIT 1", (study,)).fetchone()[0]
        conn.execute("UPDATE trial_params SET distribution_json = ? WHERE trial_id = ?",
                     ('{"name": "EvilDistribution", "attributes": {}}', trial))
    result = invoke(["report", "--db", f"sqlite:///{results_copy}", "--importance", "--format", "json", "--m", "40"])
    assert json.loads(result.stdout)[0]["study"] == study
    assert f"Study {study!r}: skipped 1 stored trial" in result.stderr


# ---------------------------------------------------------------- SQLite URLs

def test_sqlite_uri_parameters_are_taken_as_sqlalchemy_documents_them_or_refused(results_copy, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(results_copy, work / "r.db")
    before = digest(work / "r.db")
    # SQLAlchemy's URI form: read-only, for a reader
    result = invoke(["report", "--db", "sqlite:///file:r.db?mode=ro&uri=true", "--format", "json"], cwd=work)
    assert len(json.loads(result.stdout)) == 3
    # ... and refused by a command that writes
    result = invoke(["search", "--db", "sqlite:///file:r.db?mode=ro&uri=true", "--size", "16", "--trials", "1"],
                    code=2, cwd=work)
    assert "read-only" in result.stderr
    # URI parameters SQLite would not apply as written: refused, no file named "r.db?mode=ro"
    for url in ("sqlite:///file.db?mode=ro&uri=true", "sqlite:///r.db?mode=ro", "sqlite:///new.db?cache=shared"):
        for command in (["search", "--size", "16", "--trials", "1"], ["report"], ["export"]):
            result = invoke([*command, "--db", url], code=2, cwd=work)
            assert "uri=true" in result.stderr
    assert sorted(p.name for p in work.iterdir()) == ["r.db"] and digest(work / "r.db") == before


def test_a_reader_opens_sqlite_read_only(results_copy):
    store = Store(f"sqlite:///{results_copy}", create=False)
    try:
        assert len(store.frame())
        with pytest.raises(sa.exc.OperationalError, match="readonly"), store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE intruder (x)")
    finally:
        store.close()


def test_a_reader_opens_postgresql_read_only(postgres):
    database = f"gemmtune_ro_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {database}"))
    url = sa.engine.make_url(postgres).set(database=database)
    try:
        for given in (url, url.update_query_dict({"options": "-c statement_timeout=5000"})):
            given = given.render_as_string(hide_password=False)
            Store(given).close()   # a writer creates the tables
            store = Store(given, create=False)
            try:
                assert store.frame().empty
                with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"), store.engine.begin() as conn:
                    conn.exec_driver_sql("CREATE TABLE intruder (x integer)")
            finally:
                store.close()
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE {database}"))
        admin.dispose()


@pytest.fixture
def unwritable(tmp_path):
    """``unwritable(files)``: a directory holding copies of ``files`` that nothing can write: a
    tmpfs mounted read-only as root (whom permissions do not stop), else permissions."""
    made = []

    def make(*files) -> Path:
        where = tmp_path / f"ro{len(made)}"
        where.mkdir()
        if os.geteuid() == 0:
            if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
                              capture_output=True).returncode != 0:
                pytest.skip("as root without mount, nothing here is unwritable")
            made.append(where)
        for file in files:
            shutil.copy(file, where)
        if os.geteuid() == 0:
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        else:
            for file in where.iterdir():
                file.chmod(0o444)
            where.chmod(0o555)
        return where

    yield make
    for where in made:   # lazily: a process that read the file may still be closing it
        subprocess.run(["umount", "-l", str(where)], check=True)
    for where in tmp_path.glob("ro*"):
        where.chmod(0o755)


def test_commands_that_only_read_work_on_a_read_only_database(results_copy, unwritable):
    where = unwritable(results_copy)
    db = where / results_copy.name
    url = f"sqlite:///{db}"
    before = digest(db)
    assert len(json.loads(invoke(["report", "--db", url, "--format", "json"]).stdout)) == 3
    invoke(["report", "--db", url, "--importance", "--model"])
    assert json.loads(invoke(["export", "--db", url]).stdout)["entries"]
    rows = json.loads(invoke(["bench", "--db", url, "--sizes", "24", "--baseline", "numpy", "--time-cap", "0.02",
                              "--format", "json"]).stdout)["rows"]
    assert next(r for r in rows if r["contender"] == "gemmtune")["source"] == "tuned"
    study = json.loads(invoke(["report", "--db", url, "--format", "json", "--m", "24"]).stdout)[0]["study"]
    invoke(["replay", "--db", url, "--study", study, "--samplers", "random", "--seeds", "1"])
    assert best_config(24, 24, 24, "s", device=0, db=url).source == "tuned"
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((24, 24)), rng.standard_normal((24, 24))
    c = gemmtune.gemm(a.astype(np.float32), b.astype(np.float32), device=0, db=url)
    assert np.allclose(c.astype(np.float64), a @ b, rtol=1e-4, atol=1e-4)
    # A command that writes says so, naming the file
    result = invoke(["search", "--db", url, "--size", "16", "--trials", "1"], code=2)
    assert str(db) in result.stderr and "not writable" in result.stderr
    assert [p.name for p in where.iterdir()] == [db.name] and digest(db) == before


def test_the_default_database_where_it_cannot_be_made_is_one_error_naming_it(tmp_path, unwritable, monkeypatch):
    monkeypatch.delenv("GEMMTUNE_DB", raising=False)
    (tmp_path / "results").write_text("a file where the directory would go")
    result = invoke(["search", "--size", "16", "--trials", "1"], code=2, cwd=tmp_path)
    assert str(tmp_path / "results" / "gemmtune.db") in result.stderr
    where = unwritable()
    result = invoke(["search", "--size", "16", "--trials", "1"], code=2, cwd=where)
    assert str(where / "results" / "gemmtune.db") in result.stderr
    assert list(where.iterdir()) == []
    invoke(["report"], cwd=where)   # nothing to read is no error


def test_a_full_disk_stops_the_search_with_one_error_and_keeps_the_rows(tmp_path, add_result, monkeypatch):
    """On a real full filesystem where one can be mounted (root), else with the driver's error
    raised where the rows are written."""
    space = tmp_path / "tiny.toml"
    space.write_text(TINY_SPACE)
    where = tmp_path / "disk"
    where.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True).returncode == 0
    db = where / "r.db"
    search = ["search", "--db", f"sqlite:///{db}", "--space", str(space), "--no-seed", "-q", "--time-cap", "0.05",
              "--early-stop", "0", "--sampler", "grid"]
    try:
        invoke([*search, "--size", "16", "--trials", "1", "--study", "first"])
        if mounted:
            free = os.statvfs(where).f_bavail * os.statvfs(where).f_frsize
            (where / "filler").write_bytes(b"\0" * (free - 96 * 1024))
        else:
            def full(*args, **kwargs):
                raise sa.exc.OperationalError("INSERT INTO results", {},
                                              sqlite3.OperationalError("database or disk is full"))
            monkeypatch.setattr(Store, "add", full)
        result = invoke([*search, "--size", "24", "--trials", "4", "--study", "second"], code=2)
        assert "database or disk is full" in result.stderr and str(where) in result.stderr
        if mounted:
            (where / "filler").unlink()
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert conn.execute("SELECT count(*) FROM results WHERE study = 'first'").fetchone() == (1,)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], check=True)


def test_peak_on_a_failing_database_is_one_error(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise sa.exc.OperationalError("INSERT INTO peaks", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(Store, "save_peaks", full)
    result = invoke(["peak", "--db", f"sqlite:///{tmp_path / 'p.db'}", "--precision", "s", "--iterations", "64",
                     "--copy-mib", "1", "--time-cap", "0.02"], code=2)
    assert "database or disk is full" in result.stderr


# ---------------------------------------------------------------- another application's database

@pytest.mark.parametrize("table", ["results", "peaks", "devices", "claims"])
def test_another_programs_table_under_a_gemmtune_name_is_refused_before_anything_is_written(table, tmp_path):
    db = tmp_path / "other.db"
    execute(db, (f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT)",),
            (f"INSERT INTO {table} (name) VALUES ('theirs')",))
    before = digest(db)
    url = f"sqlite:///{db}"
    for command in (["search", "--size", "16", "--trials", "1"], ["peak", "--precision", "s", "--iterations", "64"],
                    ["report"], ["export"], ["bench", "--sizes", "16"]):
        result = invoke([*command, "--db", url], code=2)
        assert f"{url} is not a gemmtune database: its table {table}" in result.stderr
    assert digest(db) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() == [(table,)]
