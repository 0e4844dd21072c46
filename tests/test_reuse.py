"""Tuned configurations reused from Python: best_config, gemm(config=None, db=...), Gemm on
pyopencl arrays. Results are checked against numpy in float64/complex128 on fresh random data
with the output first filled with NaN."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import gemmtune
from gemmtune.call import compute
from gemmtune.db import store
from gemmtune.space.defaults import default_config
from gemmtune.devices.opencl import open_device, resolve_device
from gemmtune.precision import get_precision
from gemmtune.space import Config
from gemmtune.measure.verify import Reference, compare, random_matrix

# Valid on PoCL, outside the fixture's space, unlike any default: if it is used, it was looked up.
MARKED = {"TSM": 16, "TSN": 64, "TSK": 16, "WPTN": 8, "PAD": 3, "TRANSPOSEX": 8, "TRANSPOSEY": 16, "TRANSPOSEW": 2}
OTHER = {"TSM": 64, "TSN": 16, "TSK": 32, "WPTN": 1, "PAD": 0, "TRANSPOSEX": 16, "TRANSPOSEY": 8, "TRANSPOSEW": 1}


def url(db: Path) -> str:
    return f"sqlite:///{db}"


def best_row(db: Path, precision: str, m: int, n: int, k: int) -> dict:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return dict(con.execute("SELECT * FROM results WHERE status = 'ok' AND precision = ? AND m = ? AND n = ? "
                                "AND k = ? ORDER BY gflops DESC LIMIT 1", (precision, m, n, k)).fetchone())
    finally:
        con.close()


@pytest.fixture(scope="module")
def pocl():
    return resolve_device(0)


def test_tuned_shape_gets_its_best_row(results_db, pocl):
    for precision, size in (("s", 24), ("s", 40), ("d", 16)):
        got = gemmtune.best_config(size, size, size, precision, db=url(results_db))
        row = best_row(results_db, precision, size, size, size)
        assert got.source == "tuned" and got.shape == (size, size, size)
        assert got.params == json.loads(row["params"]) and got.kernel == row["kernel"]
        assert got.config == Config.of(row["kernel"], json.loads(row["params"]))
        assert got.gflops == pytest.approx(row["gflops"])
        assert got.device == pocl.key and got.precision == precision


@pytest.mark.parametrize("shape, tuned_at", [
    ((30, 30, 30), 24),     # |ln 30/24| = 0.22 < |ln 40/30| = 0.29
    ((34, 34, 34), 40),     # |ln 34/24| = 0.35 > |ln 40/34| = 0.16
    ((24, 40, 24), 24),     # one axis off by ln 40/24 beats all three off by it
    ((2000, 3, 3), 24),     # sqrt(4.4² + 2.1² * 2) ~ 5.3 against sqrt(3.9² + 2.6² * 2) ~ 5.4
    ((1, 1, 1), 24),
])
def test_untuned_shape_gets_the_nearest_in_log_size(results_db, shape, tuned_at):
    got = gemmtune.best_config(*shape, "s", db=url(results_db))
    row = best_row(results_db, "s", tuned_at, tuned_at, tuned_at)
    assert got.source == "nearest" and got.shape == (tuned_at,) * 3
    assert got.params == json.loads(row["params"]) and got.gflops == pytest.approx(row["gflops"])


def test_nothing_tuned_gets_the_valid_default(results_db, tmp_path, pocl):
    for precision in ("c", "z"):
        got = gemmtune.best_config(24, 24, 24, precision, db=url(results_db))
        assert got.source == "default" and got.shape is None and got.gflops is None
        assert got.config == default_config(pocl, get_precision(precision), (24, 24, 24))
    missing = tmp_path / "none.db"
    got = gemmtune.best_config(24, 24, 24, "s", db=url(missing))
    assert got.source == "default" and not missing.exists()


def test_the_default_database_before_any_search_means_defaults(tmp_path, monkeypatch, pocl):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GEMMTUNE_DB", raising=False)
    got = gemmtune.best_config(24, 24, 24, "s")
    assert got.source == "default" and got.config == default_config(pocl, get_precision("s"), (24, 24, 24))
    assert not (tmp_path / "results").exists()
    with pytest.raises(gemmtune.GemmtuneError, match="does not exist"):
        gemmtune.best_config(24, 24, 24, "s", db=url(tmp_path / "no-such-dir" / "x.db"))


FIRST_CALL = """
import sys
import numpy as np
import gemmtune
from gemmtune.precision import get_precision
from gemmtune.measure.verify import Reference, compare, random_matrix
prec = get_precision("s")
rng = np.random.default_rng()
a, b = random_matrix(prec, (24, 40), rng), random_matrix(prec, (40, 24), rng)
poisoned = np.full((24, 24), np.nan, dtype=np.float32)
c = gemmtune.gemm(a, b, poisoned, beta=0.0)
assert compare(c, Reference.compute(prec, a, b, None, 1.0, 0.0), prec).passed
print(gemmtune.best_config(24, 24, 40, "s").source, *sorted(m for m in ("sqlalchemy", "pandas") if m in sys.modules))
"""


def test_a_first_call_reads_the_default_database_only_where_it_exists(results_db, tmp_path):
    # Without results/ a process's first call loads neither SQLAlchemy nor pandas (0.2 s of a
    # 0.3 s first call on a laptop); once a search has written it, the lookup reads it.
    env = {k: v for k, v in os.environ.items() if k not in ("GEMMTUNE_DB", "GEMMTUNE_DEVICE")}

    def first_call() -> str:
        done = subprocess.run([sys.executable, "-c", FIRST_CALL], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert first_call() == ["default"]
    (tmp_path / "results").mkdir()
    shutil.copy(results_db, tmp_path / "results" / "gemmtune.db")
    assert first_call() == ["nearest", "pandas", "sqlalchemy"]


def test_rows_of_other_devices_kernels_or_limits_are_not_used(results_copy, add_result, pocl):
    huge = 1e9
    add_result(results_copy, m=30, n=30, k=30, gflops=huge)  # another device
    add_result(results_copy, device=pocl.key, m=24, n=24, k=24, gflops=huge,  # a custom kernel source
               params={**MARKED, "FAULT": 1})
    add_result(results_copy, device=pocl.key, m=24, n=24, k=24, gflops=huge,  # work-group too big here
               params={**MARKED, "TSM": 8192})
    add_result(results_copy, device=pocl.key, m=24, n=24, k=24, gflops=huge, status="wrong_result")
    add_result(results_copy, device=pocl.key, m=24, n=24, k=24, gflops=huge, precision="d", params=MARKED)
    row = best_row(results_copy, "s", 24, 24, 24)
    assert row["gflops"] == huge  # the invalid ones are the table's best
    for shape in ((24, 24, 24), (30, 30, 30)):
        got = gemmtune.best_config(*shape, "s", db=url(results_copy))
        assert got.shape == (24, 24, 24) and got.gflops < huge and got.device == pocl.key
        assert "FAULT" not in got.params and got.params["TSM"] <= 128


def test_rows_recorded_before_a_parameter_existed_get_its_default(results_copy, add_result, pocl):
    """TRANSPOSEW came after the first databases: a row without it moved one element per
    work-item, which is its default; the row is used, and computes right."""
    legacy = {k: v for k, v in MARKED.items() if k != "TRANSPOSEW"}
    add_result(results_copy, device=pocl.key, m=24, n=24, k=24, gflops=1e9, params=legacy)
    got = gemmtune.best_config(24, 24, 24, "s", db=url(results_copy))
    assert got.params == {**legacy, "TRANSPOSEW": 1} and got.gflops == 1e9 and got.source == "tuned"
    rng, prec = np.random.default_rng(5), get_precision("s")
    a, b = random_matrix(prec, (24, 24), rng), random_matrix(prec, (24, 24), rng)
    for tb in (False, True):    # one of the two operands goes through pad_transpose either way
        c = gemmtune.gemm(a, b, np.full((24, 24), np.nan, np.float32), trans_b=tb, db=url(results_copy))
        want = a.astype(np.float64) @ (b.T if tb else b).astype(np.float64)
        np.testing.assert_allclose(c, want, rtol=0, atol=24 * np.finfo(np.float32).eps * np.abs(want).max())
        assert compare(c, Reference.compute(prec, a, b, None, 1.0, 0.0, "N", "T" if tb else "N"), prec).passed


def test_lookups_are_cached_until_cleared(results_copy, add_result, pocl, monkeypatch):
    opened = []

    class CountingStore(store.Store):
        def __init__(self, *args, **kwargs):
            opened.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(store, "Store", CountingStore)   # tuned imports it when it reads
    first = gemmtune.best_config(24, 24, 24, "s", db=url(results_copy))
    assert len(opened) == 1
    add_result(results_copy, device=pocl.key, m=24, n=24, k=24, gflops=1e9, params=MARKED)
    for shape in ((24, 24, 24), (30, 30, 30), (24, 24, 24)):
        assert gemmtune.best_config(*shape, "s", db=url(results_copy)).params == first.params
    assert len(opened) == 1  # same database, device and precision: read once
    gemmtune.best_config(16, 16, 16, "d", db=url(results_copy))
    assert len(opened) == 2
    gemmtune.best_config.cache_clear()
    again = gemmtune.best_config(24, 24, 24, "s", db=url(results_copy))
    assert len(opened) == 3 and again.params == MARKED and again.gflops == 1e9


# ---------------------------------------------------------------- gemm(config=None)

@pytest.fixture
def spy_operation(monkeypatch):
    """Records (config, m, n, k) of every operation gemm prepares."""
    seen = []
    real = compute.operation

    def spy(dev, config, source, prec, m, n, k, trans_a, trans_b):
        seen.append((config, (m, n, k)))
        return real(dev, config, source, prec, m, n, k, trans_a, trans_b)

    monkeypatch.setattr(compute, "operation", spy)
    return seen


@pytest.mark.parametrize("precision", ["s", "d", "c", "z"])
def test_gemm_returns_nan_where_the_kernel_wrote_nothing(results_db, monkeypatch, precision):
    # beta 0: C is poisoned on the device before the product, so an element the product leaves
    # unwritten comes back NaN (real and imaginary parts), never stale memory or zero.
    class WritesNothing:
        def enqueue(self, *args, **kwargs):
            return []

    monkeypatch.setattr(compute, "operation", lambda *args: WritesNothing())
    prec = get_precision(precision)
    rng = np.random.default_rng()
    a, b = random_matrix(prec, (9, 5), rng), random_matrix(prec, (5, 7), rng)
    got = gemmtune.gemm(a, b, db=url(results_db))
    assert got.shape == (9, 7) and got.dtype == prec.dtype
    parts = (got.real, got.imag) if prec.is_complex else (got,)
    assert all(np.isnan(part).all() for part in parts)


def check(result, prec, a, b, c, alpha, beta, ta="N", tb="N"):
    got = compare(result, Reference.compute(prec, a, b, c, alpha, beta, ta, tb), prec)
    assert got.passed, got


def test_gemm_without_config_uses_the_tuned_configuration(results_db, spy_operation):
    rng = np.random.default_rng(11)
    prec = get_precision("s")
    for size in (24, 40):
        a, b = random_matrix(prec, (size, size), rng), random_matrix(prec, (size, size), rng)
        result = gemmtune.gemm(a, b, db=url(results_db))
        check(result, prec, a, b, None, 1.0, 0.0)
        row = best_row(results_db, "s", size, size, size)
        assert spy_operation[-1] == (Config.of(row["kernel"], json.loads(row["params"])), (size, size, size))
    prec = get_precision("d")
    a, b, c = (random_matrix(prec, (16, 16), rng) for _ in range(3))
    check(gemmtune.gemm(a, b, c, alpha=0.5, beta=-2.0, db=url(results_db)), prec, a, b, c, 0.5, -2.0)
    row = best_row(results_db, "d", 16, 16, 16)
    assert spy_operation[-1][0] == Config.of(row["kernel"], json.loads(row["params"]))


def test_gemm_looks_up_the_column_major_shape_it_runs(results_copy, add_result, spy_operation, pocl):
    # numpy's a (20 x 28) @ b (28 x 36) runs as the column-major 36 x 20 x 28 product.
    add_result(results_copy, device=pocl.key, m=36, n=20, k=28, params=MARKED, gflops=5.0)
    add_result(results_copy, device=pocl.key, m=20, n=36, k=28, params=OTHER, gflops=9.0)
    rng = np.random.default_rng(12)
    prec = get_precision("s")
    a, b = random_matrix(prec, (20, 28), rng), random_matrix(prec, (28, 36), rng)
    result = gemmtune.gemm(a, b, db=url(results_copy))
    assert result.shape == (20, 36)
    check(result, prec, a, b, None, 1.0, 0.0)
    assert spy_operation[-1] == (Config.of("xgemm_k5", MARKED), (36, 20, 28))
    # Transposed operands: same problem, same lookup.
    result = gemmtune.gemm(np.ascontiguousarray(a.T), b, trans_a=True, db=url(results_copy))
    check(result, prec, np.ascontiguousarray(a.T), b, None, 1.0, 0.0, "T", "N")
    assert spy_operation[-1][0] == Config.of("xgemm_k5", MARKED)


def test_gemm_with_an_empty_database_uses_the_default(tmp_path, spy_operation, pocl):
    rng = np.random.default_rng(13)
    prec = get_precision("c")
    a, b = random_matrix(prec, (9, 17), rng), random_matrix(prec, (17, 5), rng)
    check(gemmtune.gemm(a, b, alpha=1 - 2j, db=url(tmp_path / "none.db")), prec, a, b, None, 1 - 2j, 0.0)
    # The column-major problem the kernel runs: 5 x 9 x 17.
    assert spy_operation[-1][0] == default_config(pocl, prec, (5, 9, 17))


# ---------------------------------------------------------------- Gemm on pyopencl arrays

@pytest.fixture(scope="module")
def queue():
    _, device = open_device(0)
    return cl.CommandQueue(cl.Context([device]))


@pytest.fixture
def spy_operations(monkeypatch):
    seen = []
    real = compute.GemmOperation

    def spy(queue, config, source, prec, m, n, k, trans_a="N", trans_b="N", **more):
        seen.append((config, (m, n, k)))
        return real(queue, config, source, prec, m, n, k, trans_a, trans_b, **more)

    monkeypatch.setattr(compute, "GemmOperation", spy)
    return seen


def test_gemm_object_computes_in_place_on_device_arrays(queue, results_copy, add_result, pocl, spy_operations):
    add_result(results_copy, device=pocl.key, m=36, n=20, k=28, params=MARKED, gflops=5.0)
    rng = np.random.default_rng(21)
    prec = get_precision("s")
    a, b = random_matrix(prec, (20, 28), rng), random_matrix(prec, (28, 36), rng)
    c0 = random_matrix(prec, (20, 36), rng)
    nan = np.full((20, 36), np.nan, dtype=np.float32)
    da, db_, dc, dnan = (cla.to_device(queue, x) for x in (a, b, c0, nan))

    gemm = gemmtune.Gemm(queue, "s", db=url(results_copy))
    for beta, out, c in ((0.0, dnan, None), (0.75, dc, c0)):
        buffer = out.data
        with pytest.MonkeyPatch.context() as mp:
            # Any transfer between host and device during the call fails the test.
            for target, name in ((cl, "enqueue_copy"), (cla.Array, "get"), (cla.Array, "set")):
                mp.setattr(target, name, lambda *args, **kwargs: pytest.fail("a host copy was made"))
            returned = gemm(da, db_, out, alpha=1.5, beta=beta)
        assert returned is out and out.data is buffer
        check(out.get(), prec, a, b, c, 1.5, beta)
    assert spy_operations == [(Config.of("xgemm_k5", MARKED), (36, 20, 28))]  # built once, tuned config


@pytest.mark.parametrize("precision, ta, tb", [("d", "T", "N"), ("z", "C", "T"), ("c", "N", "C")])
def test_gemm_object_with_transposes_and_every_precision(queue, results_db, precision, ta, tb):
    rng = np.random.default_rng(22)
    prec = get_precision(precision)
    m, n, k = 19, 33, 45
    a = random_matrix(prec, (m, k) if ta == "N" else (k, m), rng)
    b = random_matrix(prec, (k, n) if tb == "N" else (n, k), rng)
    c0 = random_matrix(prec, (m, n), rng)
    alpha, beta = (0.5 - 1j, 2 + 0.5j) if prec.is_complex else (0.5, 2.0)
    dc = cla.to_device(queue, c0)
    gemm = gemmtune.Gemm(queue, precision, db=url(results_db))
    gemm(cla.to_device(queue, a), cla.to_device(queue, b), dc, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
    check(dc.get(), prec, a, b, c0, alpha, beta, ta, tb)
    dc.fill(np.nan)
    gemm(cla.to_device(queue, a), cla.to_device(queue, b), dc, alpha=alpha, trans_a=ta, trans_b=tb)
    check(dc.get(), prec, a, b, None, alpha, 0.0, ta, tb)


def test_gemm_object_refuses_what_it_cannot_use(queue, results_db):
    gemm = gemmtune.Gemm(queue, "s", db=url(results_db))
    x = cla.zeros(queue, (8, 8), np.float32)
    with pytest.raises(TypeError, match="pyopencl.array.Array"):
        gemm(np.zeros((8, 8), np.float32), x, x)
    with pytest.raises(ValueError, match="float32"):
        gemm(cla.zeros(queue, (8, 8), np.float64), x, x)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm(cla.zeros(queue, (8, 4), np.float32), x, cla.zeros(queue, (8, 8), np.float32))
    with pytest.raises(ValueError, match="within a row must be adjacent"):
        gemm(cla.zeros(queue, (8, 8), np.float32)[:, ::2], cla.zeros(queue, (4, 8), np.float32), x)


@pytest.mark.parametrize("m, k, n", [(5, 0, 7), (0, 4, 3), (6, 3, 0)])
def test_gemm_empty_products_as_blas_means_them(results_db, m, k, n):
    """K = 0 leaves beta * C (C unread at beta 0, so its NaN must not show); M or N = 0 an empty C."""
    rng = np.random.default_rng()
    prec = get_precision("d")
    a, b = random_matrix(prec, (m, k), rng), random_matrix(prec, (k, n), rng)
    c = random_matrix(prec, (m, n), rng)
    nan = np.full((m, n), np.nan)
    for beta, given in ((0.0, nan), (-0.5, c)):
        out = gemmtune.gemm(a, b, given, alpha=2.0, beta=beta, db=url(results_db))
        assert out.shape == (m, n) and out.dtype == np.float64
        assert np.array_equal(out, beta * c if beta else np.zeros((m, n)))
    assert gemmtune.gemm(a, b, db=url(results_db)).shape == (m, n)


@pytest.mark.parametrize("precision", ["s", "z"])
def test_gemm_object_with_k_zero_scales_c_within_its_view(queue, results_db, precision):
    """C <- beta * C on a view of a larger array (an offset, rows further apart than their
    length): nothing outside the view changes; beta 0 writes zeros over NaN."""
    rng = np.random.default_rng()
    prec = get_precision(precision)
    m, n = 5, 7
    big = random_matrix(prec, (m + 3, n + 4), rng)
    a, b = cla.zeros(queue, (m, 0), prec.dtype), cla.zeros(queue, (0, n), prec.dtype)
    gemm = gemmtune.Gemm(queue, precision, db=url(results_db))
    beta = (0.5 - 2j) if prec.is_complex else -1.5
    for scale, start in ((beta, big), (0.0, np.where(np.ones_like(big, bool), np.nan, big))):
        whole = cla.to_device(queue, start)
        c = whole[2:2 + m, 3:3 + n]
        assert gemm(a, b, c, alpha=3.0, beta=scale) is c
        out = whole.get()
        expected = start.copy()
        expected[2:2 + m, 3:3 + n] = scale * start[2:2 + m, 3:3 + n] if scale else 0
        assert np.allclose(out, expected, rtol=1e-6, atol=0, equal_nan=True)
        assert not np.isnan(out[2:2 + m, 3:3 + n]).any()
    empty = cla.zeros(queue, (0, n), prec.dtype)
    assert gemm(cla.zeros(queue, (0, 3), prec.dtype), cla.zeros(queue, (3, n), prec.dtype), empty) is empty


def test_prepared_drops_the_least_recently_used_not_the_oldest():
    """Operations and scratch are kept per problem up to a limit; a problem called again stays,
    so a program alternating a few shapes never rebuilds them."""
    from gemmtune.launch.operation import Prepared

    made = []

    def make(key):
        return lambda: made.append(key) or f"op {key}"

    cache = Prepared(2)
    assert cache.get_or_make("a", make("a")) == "op a"
    cache.get_or_make("b", make("b"))
    assert cache.get_or_make("a", make("a")) == "op a"   # reused, and now the most recent
    cache.get_or_make("c", make("c"))                      # drops b, not a
    cache.get_or_make("a", make("a"))
    cache.get_or_make("b", make("b"))
    assert made == ["a", "b", "c", "b"] and list(cache) == ["a", "b"]
