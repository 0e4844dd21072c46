"""A database password never shows: not on stdout or stderr, not in any file a command writes.

Every command that takes ``--db`` runs with a password in the URL, against a real PostgreSQL
server (a role of its own with a password) and against one that cannot be reached. The server
is $GEMMTUNE_TEST_POSTGRES (what .ci/run starts), else one started here (tests/pgserver.py);
where neither can be had the server half is skipped with the reason, except under CI.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import TINY_SPACE  # noqa: E402

from gemmtune.cli import cli  # noqa: E402
from gemmtune.urls import db_error, scrub, shown  # noqa: E402

PASSWORD = "Pw0rd-SECRET-x9q"
UNREACHABLE = f"postgresql://tuner:{PASSWORD}@127.0.0.1:1/gemmtune"
FAST_SEARCH = ["--size", "16", "--trials", "2", "--no-seed", "-q", "--time-cap", "0.05", "--early-stop", "0"]


@pytest.fixture(scope="module")
def server(postgres):
    return postgres


@pytest.fixture(scope="module")
def secret_url(server) -> str:
    """A database owned by a role that logs in with PASSWORD, as a URL that carries it."""
    suffix = uuid.uuid4().hex[:10]
    role, database = f"tuner_{suffix}", f"gemmtune_{suffix}"
    engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'"))
        conn.execute(sa.text(f"CREATE DATABASE {database} OWNER {role}"))
    engine.dispose()
    url = sa.engine.make_url(server).set(username=role, password=PASSWORD, database=database)
    return url.render_as_string(hide_password=False)


def run(args, tmp_path, env=None):
    """Run a command in ``tmp_path`` and check that the password is in none of its output and
    none of the files it left there."""
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, args, env=env)
    finally:
        os.chdir(before)
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert PASSWORD not in result.stdout and PASSWORD not in result.stderr, result.output
    for path in Path(tmp_path).rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path
    return result


def masked(url: str) -> str:
    return shown(url)


def test_every_command_on_a_real_server_keeps_the_password_out(secret_url, tmp_path):
    space = tmp_path / "tiny.toml"
    space.write_text(TINY_SPACE)
    study = "secret-s16"
    db = ["--db", secret_url]

    result = run(["search", *db, "--space", str(space), "--study", study, "--sampler", "grid", *FAST_SEARCH],
                 tmp_path)
    assert result.exit_code == 0, result.output
    assert f"({masked(secret_url)})" in result.stdout.splitlines()[0]   # the summary names the database
    assert "***" in masked(secret_url)
    result = run(["search", *db, "--space", str(space), "--study", study, "--sampler", "grid", "--format", "json",
                  *FAST_SEARCH[:2], "--trials", "1", "--time-cap", "0.05", "-q"], tmp_path)
    assert '"db": "' + masked(secret_url) + '"' in result.stdout

    assert run(["report", *db], tmp_path).exit_code == 0
    assert masked(secret_url) in run(["report", *db, "--study", "no-such-study"], tmp_path).stdout
    assert run(["report", *db, "--importance", "--format", "json"], tmp_path).exit_code == 0
    for fmt, name in (("json", "tuned.json"), ("header", "tuned.h")):
        assert run(["export", *db, "--format", fmt, "-o", name], tmp_path).exit_code == 0
        assert masked(secret_url) in (tmp_path / name).read_text()
    assert masked(secret_url) in run(["export", *db], tmp_path).stdout
    result = run(["replay", *db, "--study", study, "--samplers", "random", "--seeds", "2", "--format", "json"],
                 tmp_path)
    assert result.exit_code == 0 and masked(secret_url) in result.stdout
    result = run(["bench", *db, "--sizes", "16", "--baseline", "numpy", "--time-cap", "0.02"], tmp_path)
    assert result.exit_code == 0, result.output
    result = run(["peak", *db, "--precision", "s", "--iterations", "64", "--copy-mib", "1", "--time-cap", "0.02"],
                 tmp_path)
    assert result.exit_code == 0 and f"(stored in {masked(secret_url)})" in result.stdout
    result = run(["peak", *db, "--precision", "s", "--iterations", "64", "--copy-mib", "1", "--time-cap", "0.02",
                  "--format", "json"], tmp_path)
    assert '"db": "' + masked(secret_url) + '"' in result.stdout
    # The URL from the environment instead of --db
    result = run(["report"], tmp_path, env={"GEMMTUNE_DB": secret_url})
    assert result.exit_code == 0 and "xgemm_k5" in result.stdout


def test_a_wrong_database_name_on_a_real_server_keeps_the_password_out(secret_url, tmp_path):
    wrong = sa.engine.make_url(secret_url).set(database="no_such_database").render_as_string(hide_password=False)
    for args in (["report", "--db", wrong], ["export", "--db", wrong, "-o", "out.json"],
                 ["search", "--db", wrong, "--size", "16", "--trials", "1"]):
        result = run(args, tmp_path)
        assert result.exit_code == 2 and result.stderr.startswith("Error: "), result.output
        assert "no_such_database" in result.stderr
    assert not (tmp_path / "out.json").exists()


COMMANDS = {
    "search": ["search", "--size", "16", "--trials", "1"],
    "report": ["report"],
    "report-importance": ["report", "--importance"],
    "export-json": ["export", "-o", "out.json"],
    "export-header": ["export", "--format", "header", "-o", "out.h"],
    "bench": ["bench", "--sizes", "16"],
    "peak": ["peak", "--precision", "s", "--iterations", "64", "--copy-mib", "1"],
    "replay": ["replay", "--study", "s"],
}


@pytest.mark.parametrize("how", ["option", "environment"])
@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreachable_server_is_one_error_line_without_the_password(command, how, tmp_path):
    args, env = list(COMMANDS[command]), None
    if how == "option":
        args += ["--db", UNREACHABLE]
    else:
        env = {"GEMMTUNE_DB": UNREACHABLE}
    start = time.monotonic()
    result = run(args, tmp_path, env=env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "tuner:***@127.0.0.1:1" in lines[0]     # says which database, masked
    assert time.monotonic() - start < 5          # refused before any measurement
    assert list(tmp_path.iterdir()) == []          # nothing written


@pytest.mark.parametrize("url", [
    f"postgresql://tuner:{PASSWORD}@127.0.0.1:notaport/db",
    f"postgresql+nosuchdriver://tuner:{PASSWORD}@127.0.0.1/db",
    f"nosuchdialect://tuner:{PASSWORD}@127.0.0.1/db",
])
def test_malformed_and_unknown_urls_keep_the_password_out(url, tmp_path):
    for args in (["report", "--db", url], ["search", "--db", url, "--size", "16"]):
        result = run(args, tmp_path)
        assert result.exit_code == 2 and result.stderr.startswith("Error: "), result.output


def test_shown_masks_only_the_password():
    assert shown(f"postgresql://tuner:{PASSWORD}@db.example:5432/g") == "postgresql://tuner:***@db.example:5432/g"
    assert shown("postgresql://tuner@db.example/g") == "postgresql://tuner@db.example/g"
    assert shown("sqlite:///results/gemmtune.db") == "sqlite:///results/gemmtune.db"
    # Not a URL SQLAlchemy parses, still masked.
    assert PASSWORD not in shown(f"postgresql://tuner:{PASSWORD}@h:port/g")


def test_driver_messages_lose_the_password_in_every_spelling():
    url = "postgresql://tuner:p%40ss%2Fw0rd@h/g"          # the password is p@ss/w0rd
    for said in ("auth failed for p@ss/w0rd", "dsn host=h password=p%40ss%2Fw0rd", "pw p%40ss%2Fw0rd!"):
        assert "w0rd" not in scrub(said, url)
    error = Exception("could not connect: password=p@ss/w0rd\nsecond line")
    assert db_error(error, url) == "could not connect: password=***"
