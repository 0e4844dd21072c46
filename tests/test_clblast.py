"""CLBlast through gemmtune.bench.clblast, on PoCL, against numpy; and ``gemmtune bench --baseline clblast``.

CLBlast builds its kernels on a device's first call of a precision (seconds on PoCL, then kept
in PoCL's cache), so each precision is one test that runs every op pair on it. Under CI
(CI=true) a missing CLBlast fails these tests; elsewhere they are skipped, saying why.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # test_bench, whatever the import mode
from test_bench import TIME_CAP, by_contender, check_timed  # noqa: E402

from gemmtune.bench import clblast  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.measure.verify import Reference, compare, random_matrix  # noqa: E402

OPS = [(ta, tb) for ta in "NTC" for tb in "NTC"]
M, N, K = 7, 13, 5          # odd, and no two alike: a swapped dimension shows
PAD, OFFSETS = (2, 1, 3), (5, 2, 7)   # rows beyond each view, and where it starts in its buffer


@pytest.fixture(scope="module")
def lib():
    try:
        return clblast.load()
    except clblast.ClblastError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CLBlast is missing under CI (install Debian's libclblast1): {e}")
        pytest.skip(f"CLBlast is not installed here (Debian: libclblast1): {e}")


@pytest.fixture(scope="module")
def queue():
    from gemmtune.devices.opencl import open_device

    _, dev = open_device(0)
    return cl.CommandQueue(cl.Context([dev]))


def column_major(queue, prec, rows, cols, pad, offset, rng, fill=None):
    """A rows x cols column-major view (ld = rows + pad, ``offset`` elements into its buffer) of a
    fresh buffer: (host array of the whole buffer, the view of it, the device buffer)."""
    ld = rows + pad
    whole = random_matrix(prec, offset + ld * cols, rng)
    if fill is not None:
        whole[:] = fill
    view = whole[offset:].reshape(cols, ld).T[:rows]
    buf = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=whole)
    return whole, view, buf


@pytest.mark.parametrize("code", "sdcz")
def test_clblast_gemm_matches_numpy(lib, queue, code):
    """Every op pair on offset views with leading dimensions above the rows, alpha and beta off 1
    (complex ones in c and z): once with beta 0 on C poisoned with NaN, once with beta on C's
    values. C outside the view is never written."""
    prec = get_precision(code)
    alpha, beta = (0.75 - 0.5j, -0.25 + 1.5j) if prec.is_complex else (0.75, -1.25)
    for ta, tb in OPS:
        for b_scale in (0.0, beta):
            rng = np.random.default_rng()
            a_dims = (M, K) if ta == "N" else (K, M)
            b_dims = (K, N) if tb == "N" else (N, K)
            _, a, a_buf = column_major(queue, prec, *a_dims, PAD[0], OFFSETS[0], rng)
            _, b, b_buf = column_major(queue, prec, *b_dims, PAD[1], OFFSETS[1], rng)
            c_whole, c, c_buf = column_major(queue, prec, M, N, PAD[2], OFFSETS[2], rng,
                                             fill=prec.nan if b_scale == 0 else None)
            c_before = c_whole.copy()
            expected = Reference.compute(prec, a, b, None if b_scale == 0 else c.copy(), alpha, b_scale, ta, tb)
            lib.gemm(queue, code, ta, tb, M, N, K, alpha, a_buf, a_dims[0] + PAD[0], b_buf, b_dims[0] + PAD[1],
                     b_scale, c_buf, M + PAD[2], offsets=OFFSETS).wait()
            out = np.empty_like(c_whole)
            cl.enqueue_copy(queue, out, c_buf)
            result = out[OFFSETS[2]:].reshape(N, M + PAD[2]).T[:M]
            check = compare(np.ascontiguousarray(result), expected, prec)
            assert check.passed, (code, ta, tb, b_scale, check)
            inside = np.zeros(c_whole.shape, bool)
            inside[OFFSETS[2]:].reshape(N, M + PAD[2])[:, :M] = True
            np.testing.assert_array_equal(out[~inside], c_before[~inside])


def test_clblast_takes_pyopencl_arrays_with_their_offsets(lib, queue):
    """A pyopencl Array that is a slice starts at its own offset in its buffer: CLBlast is given
    that offset, in elements, added to the call's."""
    prec, rng = get_precision("d"), np.random.default_rng()
    a, b = random_matrix(prec, (K, M), rng), random_matrix(prec, (N, K), rng)   # row-major: A, B column-major
    a_dev = cl_array.to_device(queue, np.concatenate([random_matrix(prec, 3, rng), a.ravel()]))[3:]
    c_dev = cl_array.to_device(queue, np.full((N, M), np.nan))
    lib.gemm(queue, "d", "N", "N", M, N, K, 2.0, a_dev, M, cl_array.to_device(queue, b), K, 0.0, c_dev, M).wait()
    assert compare(c_dev.get().T.copy(), Reference.compute(prec, a.T, b.T, None, 2.0, 0.0), prec).passed


def test_clblast_row_major(lib, queue):
    """row_major: C (m x n, ld n) = op(A) op(B) on row-major operands, as numpy stores them."""
    prec, rng = get_precision("z"), np.random.default_rng()
    a, b = random_matrix(prec, (K, M), rng), random_matrix(prec, (K, N), rng)   # op(A) = A^T, op(B) = B
    c = cl_array.to_device(queue, np.full((M, N), prec.nan))
    a_dev, b_dev = cl_array.to_device(queue, a), cl_array.to_device(queue, b)
    lib.gemm(queue, "z", "T", "N", M, N, K, -1.5j, a_dev, M, b_dev, N, 0.0, c, N, row_major=True).wait()
    assert compare(c.get(), Reference.compute(prec, a, b, None, -1.5j, 0.0, "T", "N"), prec).passed


@pytest.mark.parametrize("change, match", [
    (dict(lda=M - 1), r"CLBlastInvalidLeadDimA \(-1016\)"),
    (dict(ldc=M - 1), r"CLBlastInvalidLeadDimC \(-1014\)"),
    (dict(n=N + 50), r"CLBlastInsufficientMemory[BC] \(-10(10|09)\)"),
    (dict(k=0), r"CLBlastInvalidDimension \(-1017\)"),
], ids=["lda", "ldc", "too-small", "zero-k"])
def test_a_clblast_status_is_an_error_naming_it(lib, queue, change, match):
    args = dict(m=M, n=N, k=K, lda=M, ldb=K, ldc=M)
    args.update(change)
    a, b, c = (cl_array.zeros(queue, size, np.float32) for size in (M * K, K * N, M * N))
    with pytest.raises(clblast.ClblastError, match=match):
        lib.gemm(queue, "s", "N", "N", args["m"], args["n"], args["k"], 1.0, a, args["lda"], b, args["ldb"], 0.0,
                 c, args["ldc"])


@pytest.mark.parametrize("change, match", [
    (lambda q: dict(m=-1), "m must be a whole number"),
    (lambda q: dict(offsets=(0, -2, 0)), "offset_b must be"),
    (lambda q: dict(trans_a="X"), "bad transpose flag 'X'"),
    (lambda q: dict(alpha=1j), "alpha = 1j is complex but the operands are real"),
    (lambda q: dict(beta="0"), "beta must be a real or complex number, got str"),
    (lambda q: dict(alpha=float("nan")), "alpha must be finite"),
    (lambda q: dict(beta=True), "beta must be a real or complex number, got bool"),
    (lambda q: dict(queue=None), "queue must be a pyopencl CommandQueue"),
    (lambda q: dict(a=np.zeros(M * K, np.float32)), "A must be a pyopencl Buffer or Array"),
    (lambda q: dict(precision="q"), "unknown precision"),
    (lambda q: dict(c=cl_array.zeros(q, M * N, np.float64)), "C holds float64"),
], ids=["negative-m", "negative-offset", "trans", "complex-alpha", "string-beta", "nan-alpha", "bool-beta",
        "no-queue", "numpy-operand", "precision", "dtype"])
def test_bad_arguments_are_refused_before_clblast(lib, queue, change, match):
    zeros = {name: cl_array.zeros(queue, size, np.float32) for name, size in (("a", M * K), ("b", K * N), ("c", M * N))}
    call = dict(queue=queue, precision="s", trans_a="N", trans_b="N", m=M, n=N, k=K, alpha=1.0, lda=M, ldb=K,
                beta=0.0, ldc=M, **zeros)
    call.update(change(queue))
    with pytest.raises(GemmtuneError, match=match):
        lib.gemm(**call)


def test_the_library_is_found_by_option_then_environment_then_name(monkeypatch):
    monkeypatch.setenv(clblast.ENV, "/from/environment.so")
    assert clblast.library_path("/given.so") == "/given.so"
    assert clblast.library_path() == "/from/environment.so"
    monkeypatch.delenv(clblast.ENV)
    assert clblast.library_path() == (ctypes.util.find_library("clblast") or clblast.FALLBACK_NAME)


def test_a_library_that_is_not_clblast_is_refused():
    libm = ctypes.util.find_library("m")
    with pytest.raises(clblast.ClblastError, match="is not CLBlast: it has no CLBlastSgemm"):
        clblast.load(libm)


# ---------------------------------------------------------------- gemmtune bench --baseline clblast

@pytest.fixture
def no_db(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMTUNE_DB", f"sqlite:///{tmp_path / 'none.db'}")
    monkeypatch.delenv("GEMMTUNE_DEVICE", raising=False)
    return f"sqlite:///{tmp_path / 'none.db'}"


def test_bench_measures_clblast_beside_gemmtune(lib, no_db):
    """Odd and transposed problems, real and complex: CLBlast's row is verified and timed like
    gemmtune's, on the same device, with the library it loaded."""
    result = CliRunner().invoke(cli, ["bench", "--device", "0", "--time-cap", str(TIME_CAP), "--db", no_db,
                                      "--shapes", "9,7,5,s,T,N;6,11,3,z,C,T", "--baseline", "clblast,numpy",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [(r["shape"], r["contender"]) for r in rows] == [
        (s, c) for s in ("s9x7x5 TN", "z6x11x3 CT") for c in ("gemmtune", "clblast", "numpy")]
    for r in rows:
        if r["contender"] == "clblast":
            assert r["source"] == "CLBlast" and r["config"] == lib.path
            assert r["verified"] is True
            ours = next(o for o in rows if o["shape"] == r["shape"] and o["contender"] == "gemmtune")
            check_timed(r, ours)


def test_bench_table_shows_clblast(lib, no_db):
    result = CliRunner().invoke(cli, ["bench", "--device", "0", "--time-cap", str(TIME_CAP), "--db", no_db,
                                      "--sizes", "17", "--baseline", "clblast"])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    row = next(line for line in lines if line[1] == "clblast")
    assert row[:3] == ["s17x17x17", "clblast", "CLBlast"]
    # GFLOP/s may show 0.0 at 17^3 on a busy machine; wall ms and this/gemmtune may not.
    assert float(row[3].replace(",", "")) >= 0 and float(row[4]) > 0 and float(row[7]) > 0
    assert lines[-1][:6] == ["geometric", "mean", "of", "clblast's", "time", "over"]


def test_a_wrong_clblast_result_is_skipped_and_never_timed(lib, no_db, monkeypatch):
    """CLBlast computing 1.01 A B (alpha changed on its way in) is caught by bench's check."""
    from gemmtune.bench import run_bench
    from gemmtune.shapes import Shape
    from gemmtune.measure.timing import TimingPolicy

    real, calls = clblast.Clblast.gemm, []

    def off(self, queue, precision, ta, tb, m, n, k, alpha, *rest, **kwargs):
        calls.append(alpha)
        return real(self, queue, precision, ta, tb, m, n, k, 1.01 * alpha, *rest, **kwargs)

    monkeypatch.setattr(clblast.Clblast, "gemm", off)
    rows = by_contender(run_bench(0, [Shape(24, 24, 24, "s")], ["clblast"], no_db, TimingPolicy(max_seconds=TIME_CAP)),
                        24)
    assert rows["clblast"]["skipped"].startswith("wrong result") and rows["clblast"]["verified"] is False
    assert rows["clblast"]["repeats"] == 0 and len(calls) == 1
    assert rows["gemmtune"]["verified"] is True


@pytest.mark.parametrize("args, env, match", [
    (["--baseline", "clblast"], {clblast.ENV: "/nonexistent"}, r"cannot load CLBlast from '/nonexistent'"),
    (["--baseline", "numpy,clblast", "--clblast", "/nonexistent/libclblast.so"], {},
     r"cannot load CLBlast from '/nonexistent/libclblast.so'"),
    (["--baseline", "numpy", "--clblast", "/usr/lib/libclblast.so"], {}, "do not include clblast"),
], ids=["environment", "option", "option-without-baseline"])
def test_bench_without_clblast_is_one_error_line(no_db, args, env, match):
    """Refused before any problem is set up: nothing on stdout."""
    import re

    result = CliRunner().invoke(cli, ["bench", "--device", "0", "--sizes", "17", "--db", no_db, *args], env=env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and re.search(match, lines[0]), result.stderr
    assert result.stdout == "" and "Traceback" not in result.output


def test_a_clblast_status_in_bench_is_one_error_line(lib, no_db, monkeypatch):
    """CLBlast failing on the device (here: out of resources, as the routine returns it) stops
    the bench with the status's name, before any row is printed."""
    monkeypatch.setitem(lib.routines, "s", lambda *args: -5)
    result = CliRunner().invoke(cli, ["bench", "--device", "0", "--sizes", "17", "--db", no_db,
                                      "--baseline", "clblast"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "Error: CLBlast SGEMM 17x17x17 NN: CLBlastOpenCLOutOfResources (-5): the device is out of resources"]
    assert result.stdout == ""
