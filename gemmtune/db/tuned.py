"""``gemmtune.best_config``: the tuned configuration for a problem, read from the results database.

The answer for (m, n, k, precision, op(A), op(B), batch) on a device, in this order:

* ``"tuned"``: the best ``ok`` row (highest GFLOP/s) of ``results`` for exactly this device key,
  precision, shape, ops and batch;
* ``"nearest"``: else the best row of the tuned problem on the same device key and precision that
  is closest in log size: the one minimising the Euclidean distance between
  (ln m, ln n, ln k, ln batch) vectors, plus OTHER_OPS where its ops differ (ties go to the larger
  shape). Tile sizes carry over between shapes because validity does not depend on the shape:
  every family serves any M, N, K. A batch (more than one problem) takes only rows of families
  that take batches;
* ``"default"``: else the shipped default for the device and the class of the shape and batch
  (``gemmtune.space.defaults``).

Shapes are BLAS's (column-major, C is m x n), as ``gemmtune search`` and the ``results`` table
use them; rows recorded before the table had ops count as N, N, and before it had batches as 1.

Rows whose configuration is not one of the shipped kernel families' (other parameter names,
e.g. tuned from a custom ``--space`` source) or that breaks a constraint on the device asked
are skipped. Nothing here imports OpenCL unless a device has to be opened by index.

The database is read once per (database, device key, precision) in a process, and every lookup
is memoised: call ``clear_cache()`` (also ``best_config.cache_clear()``) after a search in the
same process to see its results.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gemmtune.db.urls import DEFAULT_DB, DEFAULT_DB_FILE, database_url
from gemmtune.space.defaults import default_config
from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.devices.info import DeviceInfo
from gemmtune.precision import Precision, get_precision
from gemmtune.space import Config, Space, require_precision, shipped_families

SOURCES = ("tuned", "nearest", "default")


@dataclass(frozen=True)
class TunedConfig:
    """What ``best_config`` found.

    ``config`` is a ``gemmtune.space.Config`` (``gemm(config=...)`` takes it as it is);
    ``params`` its parameters as a new dict, without the kernel family, which is ``kernel``.
    ``gflops`` was measured at ``shape`` and ``batch`` (the whole batch's; None for a default);
    ``source`` is ``"tuned"``, ``"nearest"`` or ``"default"``; ``device`` is the device key of the
    results table.
    """

    config: Config
    gflops: float | None
    source: str
    shape: tuple[int, int, int] | None
    device: str
    precision: str
    batch: int | None = None   # of the tuned problem ``shape`` (None for a default)

    @property
    def params(self) -> dict[str, int]:
        return self.config.params

    @property
    def kernel(self) -> str:
        return self.config.kernel


@dataclass(frozen=True)
class _Tuned:
    shape: tuple[int, int, int]
    config: Config
    gflops: float
    ops: str = "NN"    # op(A) and op(B)
    batch: int = 1

    def distance(self, shape: tuple[int, int, int], ops: str, batch: int) -> float:
        """How far this tuned problem is from another, in log sizes (the batch one of them) and ops."""
        return shape_distance((*self.shape, self.batch), (*shape, batch)) + OTHER_OPS * (self.ops != ops)


OTHER_OPS = 0.25   # what other ops add to a tuned problem's distance (a factor of 1.28 in one size)


def shipped_config(kernel: str, params: dict, space: Space | None = None) -> Config | None:
    """The Config of a results row if it is a configuration of a shipped kernel family (the
    parameter names of the family's source in ``space``, default the shipped one), else None.
    Parameters added to the kernel after the row was written take their defaults
    (``FamilySpace.complete``)."""
    from gemmtune.db.rows import config_of

    config = config_of(kernel, params, space)
    return None if isinstance(config, str) else config


_tables: dict[tuple, list[_Tuned]] = {}
_lookups: dict[tuple, TunedConfig] = {}
_devices: dict[str, DeviceInfo] = {}


def clear_cache() -> None:
    """Forget what was read from databases (and the devices resolved by spec)."""
    _tables.clear()
    _lookups.clear()
    _devices.clear()


def _db_key(url: str) -> str:
    # A relative SQLite path names another file after a chdir. Parsing the URL took a tenth of a
    # millisecond of every batched call of 10,000 16^3 problems (1.3 ms in all): kept per directory.
    return _parsed_db_key(url, os.getcwd())


@lru_cache(maxsize=64)
def _parsed_db_key(url: str, cwd: str) -> str:
    if url == DEFAULT_DB:
        return f"sqlite:///{Path(DEFAULT_DB_FILE).absolute()}"
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return url
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return f"sqlite:///{Path(parsed.database).absolute()}"
    return url


def _device_info(device) -> DeviceInfo:
    if isinstance(device, DeviceInfo):
        return device
    from gemmtune.devices.opencl import device_spec, resolve_device

    spec = device_spec(device)
    if spec not in _devices:
        _devices[spec] = resolve_device(spec)
    return _devices[spec]


def tuned_shapes(db, dev: DeviceInfo, prec: Precision) -> list[_Tuned]:
    """Per tuned problem (shape, ops and batch), its best row that is a valid configuration here.
    ``db``: a database URL, opened for reading and closed, or a ``Store`` open already (a
    search's own), read as it is."""
    if db == DEFAULT_DB and not Path(DEFAULT_DB_FILE).exists():
        # Nothing tuned yet, known without loading SQLAlchemy and pandas: a process's first
        # call on a machine that never searched pays neither import (0.2 s on a laptop).
        return []
    from gemmtune.db.rows import screen
    from gemmtune.db.store import Store

    store = db if isinstance(db, Store) else Store(db, create=False)
    try:
        rows = store.frame(device=dev.key, precision=prec.code, status="ok")
    finally:
        if store is not db:
            store.close()
    space = shipped_families()   # records of any shipped family, if valid here
    rows = screen(rows, space).rows
    best: dict[tuple, _Tuned] = {}
    for row in rows.sort_values(["gflops", "id"], ascending=[False, True]).itertuples():
        shape = (int(row.m), int(row.n), int(row.k))
        ops, batch = row.trans_a + row.trans_b, int(row.batch)
        if (shape, ops, batch) in best:
            continue
        config = shipped_config(row.kernel, row.params, space)
        if config is None or FAMILIES[config.kernel].broken(config.params, dev, prec) is not None:
            continue
        best[shape, ops, batch] = _Tuned(shape, config, float(row.gflops), ops, batch)
    return list(best.values())


def _op(value) -> str:
    return value if value in ("N", "T", "C") else "N"


def shape_distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    return math.dist([math.log(x) for x in a], [math.log(x) for x in b])


def _batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise GemmtuneError(f"batch must be a whole number of at least 1, got {batch!r}")
    return batch


def best_config(m: int, n: int, k: int, precision: str | Precision = "s", *, device=None,
                db: str | None = None, trans_a: str = "N", trans_b: str = "N", batch: int = 1) -> TunedConfig:
    """The configuration to use for C (m x n) <- op(A) (m x k) op(B) (k x n) on a device, for
    ``batch`` such problems at once (one launch).

    ``precision`` is s, d, c or z; ``trans_a``/``trans_b`` op(A) and op(B) (N, T or C);
    ``device`` an index, "P:D", a ``DeviceInfo``, or None for
    $GEMMTUNE_DEVICE or 0; ``db`` a database URL (default: $GEMMTUNE_DB, else
    sqlite:///results/gemmtune.db). A missing database means nothing was tuned: the default.
    See the module's docstring for the rules. Raises GemmtuneError for a database that cannot
    be read and for a precision the device cannot do.
    """
    prec = precision if isinstance(precision, Precision) else get_precision(precision)
    if min(m, n, k) < 1:
        raise GemmtuneError(f"sizes must be at least 1, got {m}x{n}x{k}")
    dev = _device_info(device)
    require_precision(dev, prec)
    url = database_url(db)
    shape, ops, batch = (int(m), int(n), int(k)), _op(trans_a) + _op(trans_b), _batch(batch)
    key = (_db_key(url), dev.key, prec.code, shape, ops, batch)
    found = _lookups.get(key)
    if found is not None:
        return found
    table_key = key[:3]
    if table_key not in _tables:
        _tables[table_key] = tuned_shapes(url, dev, prec)
    tuned = _usable(_tables[table_key], batch)
    exact = next((t for t in tuned if t.shape == shape and t.ops == ops and t.batch == batch), None)
    if exact is not None:
        found = TunedConfig(exact.config, exact.gflops, "tuned", exact.shape, dev.key, prec.code, exact.batch)
    elif tuned:
        near = min(tuned, key=lambda t: (t.distance(shape, ops, batch), -math.prod(t.shape) * t.batch))
        found = TunedConfig(near.config, near.gflops, "nearest", near.shape, dev.key, prec.code, near.batch)
    else:
        found = TunedConfig(default_config(dev, prec, shape, batch=batch), None, "default", None, dev.key, prec.code)
    _lookups[key] = found
    return found


best_config.cache_clear = clear_cache


def _usable(tuned: list[_Tuned], batch: int) -> list[_Tuned]:
    """The tuned problems whose configuration can serve ``batch`` problems a launch: any for one."""
    return tuned if batch == 1 else [t for t in tuned if FAMILIES[t.config.kernel].takes_batch]


def nearby_configs(db, dev: DeviceInfo, prec: Precision, m: int, n: int, k: int, ops: str = "NN",
                   count: int = 5, batch: int = 1) -> list[Config]:
    """The best recorded configurations of the ``count`` tuned problems nearest (m, n, k) with
    ``ops`` and ``batch`` (itself excluded; the same shape with other ops or another batch is
    near), nearest first: where a search at a new problem starts (tilings carry over between
    neighbouring shapes). ``db``: a URL or an open ``Store``, as ``tuned_shapes`` takes it."""
    here = (m, n, k)
    others = [t for t in _usable(tuned_shapes(db, dev, prec), batch) if (t.shape, t.ops, t.batch) != (here, ops, batch)]
    others.sort(key=lambda t: t.distance(here, ops, batch))
    return list(dict.fromkeys(t.config for t in others[:count]))
