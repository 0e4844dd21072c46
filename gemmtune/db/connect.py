"""A ``--db`` URL made usable: parsed and checked (a SQLite file's path, whether it may be made or
read, SQLite's URI form), opened as an engine (read-only for commands that only read), its
errors said without the password, a SQLite file locked for one search and its journal mode.
Nothing here knows gemmtune's tables (``store``)."""

from __future__ import annotations

import os
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import sqlalchemy as sa

from gemmtune.db.urls import DEFAULT_DB, db_error, shown
from gemmtune.errors import GemmtuneError

# What pysqlite takes from a URL's query (SQLAlchemy's pysqlite dialect); any other key is a SQLite
# URI parameter, which SQLite reads only with uri=true from a database written as file:PATH.
_PYSQLITE_KEYS = ("uri", "timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements")
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SqliteFile:
    """Where a SQLite URL keeps its database: ``path`` (None: in memory) and whether the URL
    opens it read-only (SQLite's URI parameters ``mode=ro`` or ``immutable=1``)."""

    path: Path | None
    read_only: bool = False


def sqlite_file(url: str, parsed: sa.engine.URL) -> SqliteFile:
    """The file of a SQLite URL, as SQLite itself will open it: ``sqlite:///PATH``, or
    SQLAlchemy's URI form ``sqlite:///file:PATH?mode=ro&uri=true``. GemmtuneError for query
    parameters SQLite would not apply as written (it would ignore them, or open a file named
    ``PATH?mode=ro`` beside the one meant)."""
    query = {key: value if isinstance(value, str) else value[-1] for key, value in parsed.query.items()}
    others = sorted(set(query) - set(_PYSQLITE_KEYS))
    database = parsed.database or ""
    if str(query.get("uri", "")).lower() not in _TRUE:
        if others:
            given = "&".join(f"{k}={query[k]}" for k in others)
            raise GemmtuneError(f"database URL {shown(url)!r}: SQLite ignores {', '.join(others)} without uri=true; "
                                f"write it as sqlite:///file:PATH?{given}&uri=true")
        return SqliteFile(None if database in ("", ":memory:") else Path(database))
    if not database.startswith("file:"):
        raise GemmtuneError(f"database URL {shown(url)!r}: with uri=true SQLite opens the database as a URI, "
                            f"written file:PATH (sqlite:///file:{database or 'PATH'}?...&uri=true)")
    split = urlsplit(database)
    options = {**dict(parse_qsl(split.query)), **{k: query[k] for k in others}}
    if options.get("mode") == "memory" or split.path in ("", ":memory:"):
        return SqliteFile(None)
    return SqliteFile(Path(unquote(split.path)),
                      options.get("mode") == "ro" or options.get("immutable", "").lower() in _TRUE)


def sqlite_path(url: str, parsed: sa.engine.URL) -> Path | None:
    """The file a URL's database is kept in: None for a server's or one in memory."""
    return sqlite_file(url, parsed).path if parsed.get_backend_name() == "sqlite" else None


def check_url(url: str, create: bool = True) -> sa.engine.URL:
    """Parse a URL and, for SQLite, make sure the file can be created (or, with ``create``
    False, read), without creating it."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError):  # ValueError: a port that is not a number
        raise GemmtuneError(f"malformed database URL {shown(url)!r}: expected e.g. sqlite:///results/gemmtune.db "
                            "or postgresql://user@host/db") from None
    if parsed.get_backend_name() != "sqlite":
        return parsed
    found = sqlite_file(url, parsed)
    path = found.path
    if path is None:
        return parsed
    if not create:
        # Reading: a missing file (or the default's missing results/) means no results yet.
        if path.exists() and not os.access(path, os.R_OK):
            raise GemmtuneError(f"database file {path} is not readable")
        if not path.exists() and url != DEFAULT_DB and not path.parent.is_dir():
            raise GemmtuneError(f"no database {path}: directory {path.parent} does not exist")
        return parsed
    if found.read_only:
        raise GemmtuneError(f"database URL {shown(url)!r} opens {path} read-only; this command writes to it")
    if url == DEFAULT_DB:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise GemmtuneError(f"cannot create the default database {path.absolute()}: {e.strerror} "
                                f"(give another with --db or $GEMMTUNE_DB)") from None
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK) or not writable_dir(path.parent):
            raise GemmtuneError(f"database file {path.absolute()} is not writable")
    elif not path.parent.is_dir():
        raise GemmtuneError(f"cannot create database {path}: directory {path.parent} does not exist")
    elif not writable_dir(path.parent):
        raise GemmtuneError(f"cannot create database {path.absolute()}: directory {path.parent.absolute()} "
                            "is not writable")
    return parsed


def writable_dir(directory: Path) -> bool:
    """Whether files can be made in ``directory`` (SQLite makes its journal there): its
    permissions, and a filesystem mounted read-only, which permissions do not show to root."""
    return os.access(directory, os.W_OK) and not os.statvfs(directory).f_flag & os.ST_RDONLY


CONNECT_TIMEOUT_S = 5   # a server that does not answer is unusable; waiting longer only delays saying so


def open_engine(url: str, parsed: sa.engine.URL, read_only: bool = False) -> sa.engine.Engine:
    """An engine of ``url``; with ``read_only``, a SQLite file is opened read-only (SQLite's
    ``mode=ro``), so that reading works where the file or its directory cannot be written, and
    a PostgreSQL session refuses writes (``default_transaction_read_only``)."""
    connect_args = {}
    if parsed.get_backend_name() == "postgresql":
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        if read_only:   # libpq's options, after any the URL gives
            given = parsed.query.get("options", "")
            connect_args["options"] = " ".join(filter(None, (given if isinstance(given, str) else " ".join(given),
                                                             "-c default_transaction_read_only=on")))
    if read_only and parsed.get_backend_name() == "sqlite":
        url = read_only_url(url)
    return sa.create_engine(url, connect_args=connect_args)


def read_only_url(url: str) -> str | sa.engine.URL:
    """``url`` as a reader opens it: a SQLite file as SQLAlchemy's URI form with ``mode=ro``
    (its other URI parameters kept); any other URL as given."""
    parsed = sa.engine.make_url(url)
    path = sqlite_path(url, parsed)
    if path is None:
        return url
    keep = {k: v for k, v in parsed.query.items() if k in _PYSQLITE_KEYS}
    uri = parse_qsl(urlsplit(parsed.database).query) if parsed.database.startswith("file:") else []
    options = {**dict(uri), **{k: v for k, v in parsed.query.items() if k not in _PYSQLITE_KEYS}, "mode": "ro"}
    database = f"file:{quote(str(path.absolute()))}?{urlencode(options)}"
    return parsed.set(database=database, query={**keep, "uri": "true"})


def open_error(e: Exception, url: str) -> GemmtuneError:
    """What a database that cannot be opened gets said about it; never the password."""
    if isinstance(e, sa.exc.NoSuchModuleError):
        return GemmtuneError(f"database URL {shown(url)!r}: {db_error(e, url)}")
    if isinstance(e, ModuleNotFoundError):
        hint = " (pip install 'gemmtune[postgres]')" if e.name and e.name.startswith("psycopg") else ""
        return GemmtuneError(f"database URL {shown(url)!r} needs the driver module {e.name!r}{hint}")
    return GemmtuneError(f"cannot open database {shown(url)}: {db_error(e, url)}")


@contextmanager
def writing(url: str):
    """Around a command's writes to the database (gemmtune's and Optuna's): a database that
    fails under them (a full disk, a server gone, a file turned read-only) ends the command
    with one GemmtuneError saying so; each row committed before stays as it was."""
    from optuna.exceptions import StorageInternalError  # Optuna's storage wraps the driver's error in it

    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InternalError, StorageInternalError) as e:
        cause = e.__cause__ if isinstance(e, StorageInternalError) else e
        if isinstance(e, StorageInternalError) and not isinstance(cause, sa.exc.SQLAlchemyError):
            raise
        raise GemmtuneError(f"writing to the database {shown(url)} failed: {db_error(cause, url)} "
                            "(what was recorded before stays)") from None


def lock_file(path: str):
    import fcntl  # flock is independent of SQLite's own fcntl record locks

    handle = open(path, "rb")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise GemmtuneError(f"{path} is in use by another gemmtune search; a SQLite database takes "
                            "one search at a time (with any number of devices: --device 0,1 or all). For "
                            "several processes or machines use PostgreSQL: --db postgresql://USER@HOST/DB") from None
    return handle


def fast_sqlite(engine: sa.engine.Engine) -> bool:
    """For a SQLite file written by a search: write-ahead logging with commits that skip the
    disk flush (True if applied). A search commits some 30 times per trial (Optuna's trial, its
    parameters, the claim, the row), and a flush each can cost the device more time than a
    trial's own work. A commit survives a crash of the process; only a power failure may lose
    the last ones. ``plain_journal`` turns the file back into an ordinary one when done."""
    if engine.dialect.name != "sqlite" or sqlite_file(str(engine.url), engine.url).path is None:
        return False

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, record):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return True


def plain_journal(engine: sa.engine.Engine) -> None:
    """Back to SQLite's default rollback journal, once every connection of the search is closed:
    a file left in write-ahead mode cannot be opened where it is read-only."""
    import sqlite3

    try:
        with closing(sqlite3.connect(sqlite_file(str(engine.url), engine.url).path, timeout=1)) as conn:
            conn.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error:
        pass  # another process still has it open: it stays in write-ahead mode, which is harmless
