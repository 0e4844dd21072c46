"""A database password never shows: not on stdout or stderr, not in any file a command writes.

Every command that takes ``--db`` runs with a password in the URL, against a real PostgreSQL
server (a role of its own with a password) and against one that cannot be reached. The server
is $GEMMTUNE_TEST_POSTGRES (what .ci/run starts), else one started here (tests/pgserver.py);
where neither can be had the server half is skipped with the reason, except under CI.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import TINY_SPACE  # noqa: E402

from gemmtune.cli import cli  # noqa: E402
from gemmtune.db.urls import MASK, db_error, password, scrub, shown  # noqa: E402
from gemmtune.export import comment_text  # noqa: E402

PASSWORD = "Pw0rd-SECRET-x9q"
UNREACHABLE = f"postgresql://tuner:{PASSWORD}@127.0.0.1:1/gemmtune"
FAST_SEARCH = ["--size", "16", "--trials", "2", "--no-seed", "-q", "--time-cap", "0.05", "--early-stop", "0"]


@pytest.fixture(scope="module")
def server(postgres):
    return postgres


@pytest.fixture(scope="module", params=["userinfo", "query"])
def secret_url(server, request) -> str:
    """A database owned by a role that logs in with PASSWORD, as a URL that carries it in its
    userinfo or as the query parameter libpq reads (?password=)."""
    suffix = uuid.uuid4().hex[:10]
    role, database = f"tuner_{suffix}", f"gemmtune_{suffix}"
    engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'"))
        conn.execute(sa.text(f"CREATE DATABASE {database} OWNER {role}"))
    engine.dispose()
    url = sa.engine.make_url(server).set(username=role, database=database)
    if request.param == "userinfo":
        return url.set(password=PASSWORD).render_as_string(hide_password=False)
    return url.update_query_dict({"password": PASSWORD}).render_as_string(hide_password=False)


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
    for fmt, name, said in (("json", "tuned.json", masked(secret_url)),
                            ("header", "tuned.h", comment_text(masked(secret_url)))):   # a comment has no ?
        assert run(["export", *db, "--format", fmt, "-o", name], tmp_path).exit_code == 0
        assert said in (tmp_path / name).read_text()
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


# ---------------------------------------------------------------- every way a URL carries a secret

SECRET = "Pw0rd:S3CRET@x9+q/"   # needs percent-encoding in a URL: each form below writes it as its own
ENCODED = quote(SECRET, safe="")
LOWER = re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), ENCODED)   # %2f: libpq and SQLAlchemy decode it alike
FORMS = {
    "userinfo": f"postgresql://tuner:{ENCODED}@127.0.0.1:1/gemmtune",
    "query": f"postgresql://tuner@127.0.0.1:1/gemmtune?password={ENCODED}",
    "query-lowercase-escapes": f"postgresql://tuner@127.0.0.1:1/gemmtune?password={LOWER}",
    "sslpassword": f"postgresql://tuner@127.0.0.1:1/gemmtune?sslmode=disable&sslpassword={ENCODED}",
    "no-scheme": f"tuner:{SECRET}@127.0.0.1:1/gemmtune",
    "keyword-value": f"host=127.0.0.1 port=1 user=tuner password={SECRET} dbname=gemmtune",
    "keyword-value-quoted": f"host=127.0.0.1 user=tuner password='{SECRET}' dbname=gemmtune",
    # SQLAlchemy takes x9+q@127.0.0.1 for the host
    "unencoded": f"postgresql://tuner:{SECRET[:-1]}@127.0.0.1:1/gemmtune",
}


def leaks(text: str) -> list[str]:
    """The spellings of SECRET found in ``text``: as written, percent-encoded (either case)."""
    forms = {SECRET, ENCODED, LOWER, quote_plus(SECRET), "S3CRET"}
    return [form for form in forms if form in text]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("command", COMMANDS)
def test_no_form_of_a_secret_in_a_url_shows(command, form, tmp_path):
    """Every command that takes --db, with the secret in each place a URL can carry it: one
    Error: line that names the database masked, and no spelling of the secret anywhere."""
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, [*COMMANDS[command], "--db", FORMS[form]])
    finally:
        os.chdir(before)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and MASK in lines[0], result.stderr
    assert not leaks(result.output), result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("form", FORMS)
def test_shown_and_scrub_mask_every_form(form):
    url = FORMS[form]
    assert not leaks(shown(url)) and MASK in shown(url)
    secret = SECRET[:-1] if form == "unencoded" else SECRET
    said = f"could not connect with {secret} ({ENCODED}, {LOWER}, {quote_plus(SECRET)}) to {url}"
    assert not leaks(scrub(said, url)), scrub(said, url)
    assert password(url) is not None


def test_shown_keeps_what_is_not_secret():
    plain = "postgresql://u@h/d?sslmode=require&passfile=/home/u/.pgpass"   # passfile names a file: no secret
    assert sa.engine.make_url(shown(plain)) == sa.engine.make_url(plain)
    assert shown("sqlite:///results/x.db?mode=ro&uri=true") == "sqlite:///results/x.db?mode=ro&uri=true"
    assert shown("host=h password=pw dbname=d") == "host=h password=*** dbname=d"
    quoted = r"host=h password='a b\'c' dbname=d"   # libpq's quoting: blanks and \' inside
    assert shown(quoted) == "host=h password=*** dbname=d" and scrub("said a b'c", quoted) == "said ***"
    assert password("postgresql://u@h/d") is None and password("sqlite:///a@b.db") is None
