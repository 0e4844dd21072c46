"""gemmtune's results database: one row per trial in the table ``results`` (SQLAlchemy, no OpenCL).

The same URL also holds Optuna's study tables; those are Optuna's internals and nothing in
gemmtune reads them with SQL. ``results`` is the documented interface (see README), and so is
``peaks``, the device peaks ``gemmtune peak`` measured (one row per quantity and measurement).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import pandas as pd
import sqlalchemy as sa

from gemmtune.errors import GemmtuneError
from gemmtune.info import DeviceInfo
from gemmtune.rows import device_of, peak_of
from gemmtune.urls import DEFAULT_DB, database_url, db_error, shown

metadata = sa.MetaData()
results = sa.Table(
    "results", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(255), nullable=False, index=True),
    sa.Column("trial", sa.Integer, nullable=False),          # Optuna's trial number
    sa.Column("device", sa.String(512), nullable=False),     # platform | name | driver version
    sa.Column("device_name", sa.String(255), nullable=False),
    sa.Column("precision", sa.String(1), nullable=False),
    sa.Column("m", sa.Integer, nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("k", sa.Integer, nullable=False),
    sa.Column("trans_a", sa.String(1)),                      # op(A): N, T or C (rows from before: none, N)
    sa.Column("trans_b", sa.String(1)),
    sa.Column("kernel", sa.String(64), nullable=False),
    sa.Column("params", sa.Text, nullable=False),            # JSON object, name -> value
    sa.Column("status", sa.String(32), nullable=False),      # ok or a failure reason
    sa.Column("gflops", sa.Float),
    sa.Column("time_ms", sa.Float),                          # median, per call as a caller pays (see runner)
    sa.Column("kernel_time_ms", sa.Float),                   # median, device time of the GEMM's own kernels
    sa.Column("device_time_ms", sa.Float),                   # median, device time of the whole operation
    sa.Column("ci_low_ms", sa.Float),
    sa.Column("ci_high_ms", sa.Float),
    sa.Column("min_ms", sa.Float),
    sa.Column("repeats", sa.Integer),
    sa.Column("samples_ms", sa.Text),                        # JSON list, whole-operation times
    sa.Column("max_rel_error", sa.Float),
    sa.Column("norm_rel_error", sa.Float),
    sa.Column("compile_s", sa.Float),
    sa.Column("trial_s", sa.Float),                          # wall time of the whole trial
    sa.Column("detail", sa.Text),                            # build log, OpenCL error, error figures
    sa.Column("baseline", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.String(32), nullable=False),  # UTC, ISO 8601
    sa.Column("gemmtune_version", sa.String(32), nullable=False),
)

peaks = sa.Table(
    "peaks", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("device", sa.String(512), nullable=False, index=True),   # device key, as in results
    sa.Column("device_name", sa.String(255), nullable=False),
    sa.Column("precision", sa.String(16), nullable=False),   # s, d, c, z, or "bandwidth"
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("unit", sa.String(16), nullable=False),        # GFLOP/s for a precision, GB/s for bandwidth
    sa.Column("created_at", sa.String(32), nullable=False),  # UTC, ISO 8601; one per measurement run
    sa.Column("gemmtune_version", sa.String(32), nullable=False),
)

devices = sa.Table(
    "devices", metadata,
    sa.Column("device", sa.String(512), primary_key=True),   # device key, as in results
    sa.Column("device_name", sa.String(255), nullable=False),
    sa.Column("info", sa.Text, nullable=False),              # JSON, as `gemmtune devices --format json`
    sa.Column("created_at", sa.String(32), nullable=False),
)

# One row per configuration some search process took on in a study: the unique key makes taking
# one atomic across processes and machines, so that no configuration is measured twice.
claims = sa.Table(
    "claims", metadata,
    sa.Column("study", sa.String(255), primary_key=True),
    sa.Column("config", sa.String(1024), primary_key=True),  # kernel and parameters, canonical JSON
    sa.Column("trial", sa.Integer, nullable=False),          # Optuna's trial number of the taker
    sa.Column("created_at", sa.String(32), nullable=False),
)

STATUSES = ("ok", "slow", "compile_error", "launch_error", "crash", "timeout", "wrong_result", "lost")


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
        if not os.access(path, os.R_OK | os.W_OK) or not _writable_dir(path.parent):
            raise GemmtuneError(f"database file {path.absolute()} is not writable")
    elif not path.parent.is_dir():
        raise GemmtuneError(f"cannot create database {path}: directory {path.parent} does not exist")
    elif not _writable_dir(path.parent):
        raise GemmtuneError(f"cannot create database {path.absolute()}: directory {path.parent.absolute()} "
                            "is not writable")
    return parsed


def _writable_dir(directory: Path) -> bool:
    """Whether files can be made in ``directory`` (SQLite makes its journal there): its
    permissions, and a filesystem mounted read-only, which permissions do not show to root."""
    return os.access(directory, os.W_OK) and not os.statvfs(directory).f_flag & os.ST_RDONLY


def _add_new_columns(conn) -> None:
    """Columns added to ``results`` since a database was created, added to it (nullable: rows
    recorded before them have none)."""
    have = {c["name"] for c in sa.inspect(conn).get_columns("results")}
    for column in results.columns:
        if column.name not in have:
            kind = column.type.compile(dialect=conn.dialect)
            conn.execute(sa.text(f'ALTER TABLE results ADD COLUMN "{column.name}" {kind}'))


def foreign_tables(conn) -> list[str]:
    """gemmtune's tables in the database that are not gemmtune's: a table of that name without
    the columns every version of gemmtune has given it (its required ones; later ones, which
    ``_add_new_columns`` adds, may be missing)."""
    inspector = sa.inspect(conn)
    existing = set(inspector.get_table_names())
    return [table.name for table in metadata.sorted_tables if table.name in existing
            and not {c.name for c in table.columns if not c.nullable}
            <= {c["name"] for c in inspector.get_columns(table.name)}]


def check_own_tables(conn, url: str) -> None:
    """GemmtuneError, before anything is created or altered, for a database whose tables of
    gemmtune's names belong to something else."""
    foreign = foreign_tables(conn)
    if foreign:
        raise GemmtuneError(f"{shown(url)} is not a gemmtune database: its table{'s' if len(foreign) > 1 else ''} "
                            f"{', '.join(foreign)} {'have' if len(foreign) > 1 else 'has'} other columns than "
                            "gemmtune's; give gemmtune a database of its own with --db")


def _open_tables(engine: sa.engine.Engine, create: bool, url: str) -> None:
    """Connect (an unusable database fails here, in the constructor), refuse another program's
    tables and, with ``create``, create the tables or add the columns they lack."""
    for attempt in range(3):
        try:
            with engine.begin() as conn:
                check_own_tables(conn, url)
                if create:
                    metadata.create_all(conn)
                    _add_new_columns(conn)
            return
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
            # Processes starting together on a server race to create the tables.
            if attempt == 2:
                raise
            time.sleep(0.5 * (attempt + 1))


class Store:
    """Read and append rows of the ``results`` table. Each append is its own transaction."""

    def __init__(self, url: str | None = None, create: bool = True):
        """``create`` False opens for reading only: nothing is created, not even a missing
        SQLite file (``exists`` is then False and ``frame`` is empty)."""
        self.url = database_url(url)
        self.shown = shown(self.url)   # the URL as messages and files give it: no password
        parsed = check_url(self.url, create)
        self.exists = True
        path = sqlite_file(self.url, parsed).path if parsed.get_backend_name() == "sqlite" else None
        if not create and path is not None:
            # Connecting would create the file.
            self.exists = path.exists()
        self.engine = None
        self._columns: set[str] | None = None   # of the results table, read once
        # Rows of devices and peaks read and skipped (rows.device_of, rows.peak_of): (table, key) -> reason
        self._skipped: dict[tuple[str, object], str] = {}
        if not self.exists:
            return
        try:
            self.engine = _engine(self.url, parsed, read_only=not create)
            self.logged = create and fast_sqlite(self.engine)
            _open_tables(self.engine, create, self.url)
        except (sa.exc.SQLAlchemyError, ModuleNotFoundError) as e:
            raise _open_error(e, self.url) from None

    @property
    def skipped(self) -> Counter:
        """Why rows of ``devices`` and ``peaks`` read so far were skipped: reason -> rows (each row
        once, however often it was read)."""
        return Counter(self._skipped.values())

    def add(self, **row) -> int:
        from gemmtune import __version__

        row.setdefault("created_at", _now())
        row.setdefault("gemmtune_version", __version__)
        if isinstance(row.get("params"), dict):
            row["params"] = json.dumps(row["params"])
        if isinstance(row.get("samples_ms"), (list, tuple)):
            row["samples_ms"] = json.dumps([round(x, 6) for x in row["samples_ms"]])
        with self.engine.begin() as conn:
            return conn.execute(results.insert().values(**row)).inserted_primary_key[0]

    def frame(self, after_id: int | None = None, **filters) -> pd.DataFrame:
        """Rows of ``results`` matching column == value filters (None values are ignored), and
        with ``id`` above ``after_id`` if given.

        Empty, with the table's columns, when the database or its ``results`` table does not
        exist yet; GemmtuneError when it cannot be read (e.g. a file that is not SQLite).
        """
        names = [c.name for c in results.columns]
        try:
            if self.engine is None or not sa.inspect(self.engine).has_table(results.name):
                return pd.DataFrame(columns=names)
            # A database written by an earlier version, opened read-only, may lack the newest
            # columns: they read as empty.
            if self._columns is None:
                self._columns = {c["name"] for c in sa.inspect(self.engine).get_columns(results.name)}
            query = sa.select(*(results.c[name] for name in names if name in self._columns))
            if after_id is not None:
                query = query.where(results.c.id > after_id)
            for column, value in filters.items():
                if value is not None:
                    query = query.where(results.c[column] == value)
            with self.engine.connect() as conn:
                frame = pd.read_sql(query.order_by(results.c.id), conn)
            return frame.reindex(columns=names)
        except sa.exc.SQLAlchemyError as e:
            raise GemmtuneError(f"cannot read database {self.shown}: {db_error(e, self.url)}") from None

    def best(self, study: str) -> dict | None:
        """The ok row with the highest GFLOP/s of a study."""
        query = (sa.select(results).where(results.c.study == study, results.c.status == "ok")
                 .order_by(results.c.gflops.desc()).limit(2))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return dict(rows[0]) if rows else None

    def save_peaks(self, device: str, device_name: str, values: dict[str, float]) -> str:
        """Append one measurement run of peaks (``values``: precision -> GFLOP/s and
        ``"bandwidth"`` -> GB/s) in one transaction; returns its ``created_at``."""
        from gemmtune import __version__

        created = _now()
        rows = [dict(device=device, device_name=device_name, precision=what, value=float(value),
                     unit="GB/s" if what == "bandwidth" else "GFLOP/s", created_at=created,
                     gemmtune_version=__version__) for what, value in values.items()]
        with self.engine.begin() as conn:
            conn.execute(peaks.insert(), rows)
        return created

    def latest_peaks(self, device: str) -> dict[str, float]:
        """The latest measured value of each quantity for a device key: precision -> GFLOP/s,
        ``"bandwidth"`` -> GB/s. Empty when nothing was measured (or there is no ``peaks`` table).
        A row that is not a peak (``rows.peak_of``) is skipped and counted in ``skipped``."""
        try:
            if self.engine is None or not sa.inspect(self.engine).has_table(peaks.name):
                return {}
            query = sa.select(peaks.c.id, peaks.c.precision, peaks.c.value).where(peaks.c.device == device) \
                .order_by(peaks.c.created_at, peaks.c.id)
            with self.engine.connect() as conn:
                stored = conn.execute(query).all()
        except sa.exc.SQLAlchemyError as e:
            raise GemmtuneError(f"cannot read database {self.shown}: {db_error(e, self.url)}") from None
        found = {}
        for row_id, what, value in stored:   # later rows win
            value = peak_of(what, value)
            if isinstance(value, str):
                self._skipped["peaks", row_id] = value
            else:
                found[what] = value
        return found

    def lock(self):
        """For a SQLite file, an exclusive lock on it for one search (an open file; close it to
        release); None for a server database. Several processes writing one SQLite file lock
        each other out or lose Optuna trials, so a second search on the same file is refused."""
        parsed = sa.engine.make_url(self.url)
        path = sqlite_file(self.url, parsed).path if parsed.get_backend_name() == "sqlite" else None
        return None if path is None else _lock_file(str(path))

    def save_device(self, info: DeviceInfo) -> None:
        """Describe a device key once, so the model can be applied to its results from anywhere."""
        row = dict(device=info.key, device_name=info.name, info=json.dumps(info.to_json()), created_at=_now())
        try:
            with self.engine.begin() as conn:
                if conn.execute(sa.select(devices.c.device).where(devices.c.device == info.key)).first() is None:
                    conn.execute(devices.insert().values(**row))
        except sa.exc.IntegrityError:
            pass  # another process described it first

    def device_info(self, key: str) -> DeviceInfo | None:
        """The description ``save_device`` stored for a device key; None for none, or for one
        that is not a description gemmtune wrote (counted in ``skipped``)."""
        try:
            if self.engine is None or not sa.inspect(self.engine).has_table(devices.name):
                return None
            with self.engine.connect() as conn:
                text = conn.execute(sa.select(devices.c.info).where(devices.c.device == key)).scalar()
        except sa.exc.SQLAlchemyError as e:
            raise GemmtuneError(f"cannot read database {self.shown}: {db_error(e, self.url)}") from None
        if text is None:
            return None
        info = device_of(text)
        if isinstance(info, str):
            self._skipped["devices", key] = info
            return None
        return info

    def claim(self, study: str, config: str, trial: int) -> bool:
        """Take ``config`` (a canonical text key) in ``study`` for ``trial``: True for the first
        caller in any process, False once anyone has taken it."""
        try:
            with self.engine.begin() as conn:
                conn.execute(claims.insert().values(study=study, config=config, trial=trial, created_at=_now()))
            return True
        except sa.exc.IntegrityError:
            return False

    def release(self, study: str, config: str, trial: int) -> None:
        """Give back a claim whose candidate was abandoned before it was measured."""
        with self.engine.begin() as conn:
            conn.execute(claims.delete().where(claims.c.study == study, claims.c.config == config,
                                               claims.c.trial == trial))

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            if getattr(self, "logged", False):
                plain_journal(self.engine)


CONNECT_TIMEOUT_S = 5   # a server that does not answer is unusable; waiting longer only delays saying so


def _engine(url: str, parsed: sa.engine.URL, read_only: bool = False) -> sa.engine.Engine:
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
    path = sqlite_file(url, parsed).path if parsed.get_backend_name() == "sqlite" else None
    if path is None:
        return url
    keep = {k: v for k, v in parsed.query.items() if k in _PYSQLITE_KEYS}
    uri = parse_qsl(urlsplit(parsed.database).query) if parsed.database.startswith("file:") else []
    options = {**dict(uri), **{k: v for k, v in parsed.query.items() if k not in _PYSQLITE_KEYS}, "mode": "ro"}
    database = f"file:{quote(str(path.absolute()))}?{urlencode(options)}"
    return parsed.set(database=database, query={**keep, "uri": "true"})


def _open_error(e: Exception, url: str) -> GemmtuneError:
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


def _lock_file(path: str):
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


def probe(url: str, lock: bool = False, create: bool = True):
    """Fail now, in a second or two, on a database a command could not use after its expensive
    setup: a malformed URL, a missing driver, a server that refuses the connection or the
    credentials, a file that is not SQLite, another program's tables under gemmtune's names,
    with ``create`` a file that cannot be written, and, with ``lock``, a SQLite file another
    search holds (its lock is then returned, to be kept for the search; else None). Creates
    nothing; with ``create`` False (a command that only reads) opens it read-only."""
    parsed = check_url(url, create)
    sqlite = parsed.get_backend_name() == "sqlite"
    path = sqlite_file(url, parsed).path if sqlite else None
    if sqlite and (path is None or not path.exists()):
        return None   # a new file: nothing to check, and no other search can hold it yet
    try:
        engine = _engine(url, parsed, read_only=not create)
        try:
            with engine.connect() as conn:
                if path is not None:  # opening alone does not read a SQLite file
                    conn.exec_driver_sql("SELECT count(*) FROM sqlite_master")
                check_own_tables(conn, url)
        finally:
            engine.dispose()
    except (sa.exc.SQLAlchemyError, ModuleNotFoundError) as e:
        raise _open_error(e, url) from None
    return _lock_file(str(path)) if lock and path is not None else None


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
