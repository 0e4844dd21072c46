"""gemmtune's results database: one row per trial in the table ``results`` (SQLAlchemy, no OpenCL).

The same URL also holds Optuna's study tables; those are Optuna's internals and nothing in
gemmtune reads them with SQL. ``results`` is the documented interface (see README), and so is
``peaks``, the device peaks ``gemmtune peak`` measured (one row per quantity and measurement).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timezone

import pandas as pd
import sqlalchemy as sa

from gemmtune.db.connect import check_url, fast_sqlite, lock_file, open_engine, open_error, plain_journal, sqlite_path
from gemmtune.db.rows import device_of, peak_of
from gemmtune.db.urls import database_url, db_error, shown
from gemmtune.errors import GemmtuneError
from gemmtune.devices.info import DeviceInfo

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
    sa.Column("batch", sa.Integer),                          # problems per launch (rows from before: none, 1)
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
    # GFLOP/s the search measured (Optuna's value) where the row was timed again after it,
    # quietly (search.finalists): gflops and the times are then the quiet figures
    sa.Column("search_gflops", sa.Float),
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


class DeviceRows:
    """The rows that describe devices rather than trials: the peaks ``gemmtune peak`` measured
    and what ``gemmtune devices`` said of each (for the model, from anywhere). A shared database
    may hold any row: one that is not a peak or a description is skipped and counted in
    ``skipped``. Part of ``Store``, whose engine and reads it uses."""

    @property
    def skipped(self) -> Counter:
        """Why rows of ``devices`` and ``peaks`` read so far were skipped: reason -> rows (each row
        once, however often it was read)."""
        return Counter(self._skipped.values())

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
        query = sa.select(peaks.c.id, peaks.c.precision, peaks.c.value).where(peaks.c.device == device) \
            .order_by(peaks.c.created_at, peaks.c.id)
        found = {}
        for row_id, what, value in self._read(peaks, lambda conn: conn.execute(query).all()) or ():   # later rows win
            value = peak_of(what, value)
            if isinstance(value, str):
                self._skipped["peaks", row_id] = value
            else:
                found[what] = value
        return found

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
        text = self._read(devices, lambda conn: conn.execute(
            sa.select(devices.c.info).where(devices.c.device == key)).scalar())
        if text is None:
            return None
        info = device_of(text)
        if isinstance(info, str):
            self._skipped["devices", key] = info
            return None
        return info


def _encoded(row: dict) -> dict:
    """``row`` as its columns hold it: the parameters and the samples as JSON."""
    row = dict(row)
    if isinstance(row.get("params"), dict):
        row["params"] = json.dumps(row["params"])
    if isinstance(row.get("samples_ms"), (list, tuple)):
        row["samples_ms"] = json.dumps([round(x, 6) for x in row["samples_ms"]])
    return row


class Store(DeviceRows):
    """Read and append rows of the ``results`` table. Each append is its own transaction."""

    def __init__(self, url: str | None = None, create: bool = True):
        """``create`` False opens for reading only: nothing is created, not even a missing
        SQLite file (``exists`` is then False and ``frame`` is empty)."""
        self.url = database_url(url)
        self.shown = shown(self.url)   # the URL as messages and files give it: no password
        parsed = check_url(self.url, create)
        self.exists = True
        path = sqlite_path(self.url, parsed)
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
            self.engine = open_engine(self.url, parsed, read_only=not create)
            self.logged = create and fast_sqlite(self.engine)
            _open_tables(self.engine, create, self.url)
        except (sa.exc.SQLAlchemyError, ModuleNotFoundError) as e:
            raise open_error(e, self.url) from None

    def add(self, **row) -> int:
        from gemmtune import __version__

        row.setdefault("created_at", _now())
        row.setdefault("gemmtune_version", __version__)
        with self.engine.begin() as conn:
            return conn.execute(results.insert().values(**_encoded(row))).inserted_primary_key[0]

    def update(self, row_id: int, **values) -> None:
        """Replace columns of the row ``row_id`` (a measurement taken again)."""
        with self.engine.begin() as conn:
            conn.execute(results.update().where(results.c.id == row_id).values(**_encoded(values)))

    def frame(self, after_id: int | None = None, **filters) -> pd.DataFrame:
        """Rows of ``results`` matching column == value filters (None values are ignored), and
        with ``id`` above ``after_id`` if given.

        Empty, with the table's columns, when the database or its ``results`` table does not
        exist yet; GemmtuneError when it cannot be read (e.g. a file that is not SQLite).
        """
        names = [c.name for c in results.columns]

        def read(conn) -> pd.DataFrame:
            # A database written by an earlier version, opened read-only, may lack the newest
            # columns: they read as empty.
            if self._columns is None:
                self._columns = {c["name"] for c in sa.inspect(conn).get_columns(results.name)}
            query = sa.select(*(results.c[name] for name in names if name in self._columns))
            if after_id is not None:
                query = query.where(results.c.id > after_id)
            for column, value in filters.items():
                if value is not None:
                    query = query.where(results.c[column] == value)
            return pd.read_sql(query.order_by(results.c.id), conn)

        frame = self._read(results, read)
        return pd.DataFrame(columns=names) if frame is None else frame.reindex(columns=names)

    def _read(self, table: sa.Table, read):
        """``read(connection)``'s answer; None where the database or ``table`` does not exist
        (yet); GemmtuneError where the database cannot be read (a file that is not SQLite, say)."""
        try:
            if self.engine is None or not sa.inspect(self.engine).has_table(table.name):
                return None
            with self.engine.connect() as conn:
                return read(conn)
        except sa.exc.SQLAlchemyError as e:
            raise GemmtuneError(f"cannot read database {self.shown}: {db_error(e, self.url)}") from None

    def best(self, study: str) -> dict | None:
        """The ok row with the highest GFLOP/s of a study."""
        query = (sa.select(results).where(results.c.study == study, results.c.status == "ok")
                 .order_by(results.c.gflops.desc()).limit(2))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return dict(rows[0]) if rows else None

    def lock(self):
        """For a SQLite file, an exclusive lock on it for one search (an open file; close it to
        release); None for a server database. Several processes writing one SQLite file lock
        each other out or lose Optuna trials, so a second search on the same file is refused."""
        path = sqlite_path(self.url, sa.engine.make_url(self.url))
        return None if path is None else lock_file(str(path))

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


def probe(url: str, lock: bool = False, create: bool = True):
    """Fail now, in a second or two, on a database a command could not use after its expensive
    setup: a malformed URL, a missing driver, a server that refuses the connection or the
    credentials, a file that is not SQLite, another program's tables under gemmtune's names,
    with ``create`` a file that cannot be written, and, with ``lock``, a SQLite file another
    search holds (its lock is then returned, to be kept for the search; else None). Creates
    nothing; with ``create`` False (a command that only reads) opens it read-only."""
    parsed = check_url(url, create)
    sqlite = parsed.get_backend_name() == "sqlite"
    path = sqlite_path(url, parsed)
    if sqlite and (path is None or not path.exists()):
        return None   # a new file: nothing to check, and no other search can hold it yet
    try:
        engine = open_engine(url, parsed, read_only=not create)
        try:
            with engine.connect() as conn:
                if path is not None:  # opening alone does not read a SQLite file
                    conn.exec_driver_sql("SELECT count(*) FROM sqlite_master")
                check_own_tables(conn, url)
        finally:
            engine.dispose()
    except (sa.exc.SQLAlchemyError, ModuleNotFoundError) as e:
        raise open_error(e, url) from None
    return lock_file(str(path)) if lock and path is not None else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
