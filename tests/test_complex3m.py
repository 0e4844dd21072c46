"""The 3M complex product (three real GEMMs) against numpy in complex128, on PoCL."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import gemmtune
from gemmtune.call.compute import get_device
from gemmtune.errors import GemmtuneError

pytestmark = pytest.mark.usefixtures("no_tuned_results")

OPS = {"N": lambda x: x, "T": lambda x: x.T, "C": lambda x: x.conj().T}


def _random(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("code, dtype", [("c", np.complex64), ("z", np.complex128)])
@pytest.mark.parametrize("trans_a, trans_b", [("N", "N"), ("T", "C"), ("C", "N")])
def test_3m_views_ops_and_scalars_match_numpy(code, dtype, trans_a, trans_b):
    rng = np.random.default_rng()
    dev = get_device(0)
    m, n, k = 13, 7, 19
    a_shape = (m, k) if trans_a == "N" else (k, m)
    b_shape = (k, n) if trans_b == "N" else (n, k)
    # Views: each operand sits inside a larger array, at an offset, rows further apart than long.
    big_a, big_b, big_c = (_random(rng, (s[0] + 3, s[1] + 5), dtype) for s in (a_shape, b_shape, (m, n)))
    alpha, beta = complex(0.7, -1.3), complex(-0.4, 0.25)
    da, db, dc = (cla.to_device(dev.queue, x) for x in (big_a, big_b, big_c))
    a = da[2:2 + a_shape[0], 3:3 + a_shape[1]]
    b = db[1:1 + b_shape[0], 4:4 + b_shape[1]]
    c = dc[3:3 + m, 1:1 + n]
    gemm = gemmtune.Gemm(dev.queue, code, complex_algorithm="3m")
    gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
    got = dc.get()
    wide = np.complex128
    want = big_c.astype(wide)
    want[3:3 + m, 1:1 + n] = (alpha * OPS[trans_a](big_a[2:2 + a_shape[0], 3:3 + a_shape[1]].astype(wide))
                              @ OPS[trans_b](big_b[1:1 + b_shape[0], 4:4 + b_shape[1]].astype(wide))
                              + beta * want[3:3 + m, 1:1 + n])
    outside = np.ones(big_c.shape, bool)
    outside[3:3 + m, 1:1 + n] = False
    assert np.array_equal(got[outside], big_c[outside])   # nothing outside c's view is written
    inside = got[3:3 + m, 1:1 + n].astype(wide)
    ref = want[3:3 + m, 1:1 + n]
    eps = np.finfo(np.float32 if code == "c" else np.float64).eps
    assert np.linalg.norm(inside - ref) <= 8 * (k + 2) * eps * np.linalg.norm(ref) + eps


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_3m_gemm_on_numpy_never_reads_c_at_beta_zero(dtype):
    rng = np.random.default_rng()
    a, b = _random(rng, (31, 9), dtype), _random(rng, (9, 17), dtype)
    got = gemmtune.gemm(a, b, complex_algorithm="3m")
    ref = a.astype(np.complex128) @ b.astype(np.complex128)
    eps = np.finfo(np.float32 if dtype == np.complex64 else np.float64).eps
    assert np.isfinite(got).all()   # the device's C was NaN before the call
    assert np.linalg.norm(got - ref) <= 8 * 11 * eps * np.linalg.norm(ref)


def test_3m_is_asked_for_by_name_only():
    dev = get_device(0)
    with pytest.raises(GemmtuneError, match="complex operands"):
        gemmtune.Gemm(dev.queue, "s", complex_algorithm="3m")
    with pytest.raises(GemmtuneError, match="unknown complex_algorithm"):
        gemmtune.Gemm(dev.queue, "c", complex_algorithm="4m")
    with pytest.raises(GemmtuneError, match="unknown complex_algorithm"):
        gemmtune.gemm(np.ones((2, 2), np.complex64), np.ones((2, 2), np.complex64), complex_algorithm="")


def test_3m_keeps_gemms_checks_and_empty_products():
    rng = np.random.default_rng()
    dev = get_device(0)
    gemm = gemmtune.Gemm(dev.queue, "z", complex_algorithm="3m")
    d = cla.to_device(dev.queue, _random(rng, (6, 6), np.complex128))
    with pytest.raises(GemmtuneError, match="shares elements"):
        gemm(d, d, d)
    # K = 0: C <- beta C, as the standard product does it.
    c0 = _random(rng, (4, 3), np.complex128)
    c = cla.to_device(dev.queue, c0)
    gemm(cla.empty(dev.queue, (4, 0), np.complex128), cla.empty(dev.queue, (0, 3), np.complex128), c, beta=2 - 1j)
    assert np.allclose(c.get(), (2 - 1j) * c0, rtol=1e-15, atol=0)


def test_bench_measures_3m_beside_the_standard_product(tmp_path):
    import json

    from click.testing import CliRunner

    from gemmtune.cli import cli

    result = CliRunner().invoke(cli, ["bench", "--shapes", "9,7,5,c,T,C;6,11,3,s", "--baseline", "3m,cublas-3m",
                                      "--time-cap", "0.05", "--format", "json",
                                      "--db", f"sqlite:///{tmp_path / 'none.db'}"])
    assert result.exit_code == 0, result.output
    rows = {(r["precision"], r["contender"]): r for r in json.loads(result.stdout)["rows"]}
    three = rows[("c", "3m")]
    assert three["verified"] is True and three["skipped"] is None and three["time_ms"] > 0
    assert three["config"].startswith("3 x ")
    assert "complex" in rows[("s", "3m")]["skipped"]
    assert rows[("c", "cublas-3m")]["skipped"]   # no CUDA device here: skipped with the reason
