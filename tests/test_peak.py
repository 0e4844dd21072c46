"""gemmtune peak on PoCL: measured values, the peaks table, the model's use of it, bad input."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmtune.cli import cli
from gemmtune.db.store import Store
from gemmtune.devices.opencl import resolve_device
from gemmtune.models import analytic
from gemmtune.precision import get_precision
from gemmtune.space import Config

SMALL = ["--iterations", "256", "--copy-mib", "2", "--time-cap", "0.2"]


def peak(db: Path, *args, expect: int = 0):
    result = CliRunner().invoke(cli, ["peak", "--db", f"sqlite:///{db}", *SMALL, *args])
    assert result.exit_code == expect, (result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def stored(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM peaks ORDER BY id")]
    finally:
        con.close()


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One small measurement of every precision PoCL supports: (db path, JSON output)."""
    db = tmp_path_factory.mktemp("peak") / "p.db"
    return db, json.loads(peak(db, "--format", "json").stdout)


def test_every_supported_precision_and_the_bandwidth_are_measured(measured):
    _, out = measured
    dev = resolve_device(0)
    assert out["device"] == dev.key and out["device_name"] == dev.name
    expected = ["s", "d", "c", "z"] if dev.double_precision else ["s", "c"]
    assert [p["precision"] for p in out["peaks"]] == expected + ["bandwidth"]
    for p in out["peaks"]:
        assert math.isfinite(p["value"]) and p["value"] > 0
        assert p["unit"] == ("GB/s" if p["precision"] == "bandwidth" else "GFLOP/s")
        assert p["repeats"] >= 1 and p["median_ms"] > 0
        assert p["nominal"] == pytest.approx(analytic.nominal_peaks(dev)[p["precision"]])
    bandwidth = out["peaks"][-1]["value"]
    assert bandwidth > 0.1  # GB/s: any CPU copies faster than that
    assert bandwidth < 10_000


def test_rows_are_stored_and_latest_peaks_returns_them(measured):
    db, out = measured
    rows = stored(db)
    assert len(rows) == len(out["peaks"])
    assert {r["created_at"] for r in rows} == {out["created_at"]}
    assert all(r["device"] == out["device"] and r["gemmtune_version"] for r in rows)
    assert [(r["precision"], r["value"], r["unit"]) for r in rows] == \
        [(p["precision"], pytest.approx(p["value"]), p["unit"]) for p in out["peaks"]]
    store = Store(f"sqlite:///{db}", create=False)
    try:
        assert store.latest_peaks(out["device"]) == {p["precision"]: pytest.approx(p["value"]) for p in out["peaks"]}
        assert store.latest_peaks("no such device") == {}
    finally:
        store.close()


def test_a_later_run_wins_per_quantity(measured, tmp_path):
    db, out = measured
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    store = Store(f"sqlite:///{copy}")
    try:
        store.save_peaks(out["device"], out["device_name"], {"s": 12345.0, "bandwidth": 67.0})
        latest = store.latest_peaks(out["device"])
    finally:
        store.close()
    assert latest["s"] == 12345.0 and latest["bandwidth"] == 67.0
    first = {p["precision"]: p["value"] for p in out["peaks"]}
    assert latest["c"] == pytest.approx(first["c"])  # not measured again: the earlier value stays


def test_the_model_uses_measured_peaks(measured):
    db, out = measured
    dev = resolve_device(0)
    store = Store(f"sqlite:///{db}", create=False)
    try:
        peaks = store.latest_peaks(dev.key)
    finally:
        store.close()
    config = Config.of("xgemm_k5", {"TSM": 32, "TSN": 32, "TSK": 16, "WPTN": 4, "PAD": 1,
                                    "TRANSPOSEX": 16, "TRANSPOSEY": 16})
    s = get_precision("s")
    with_measured = analytic.predict(config, dev, s, 256, 256, 256, peaks)
    nominal = analytic.predict(config, dev, s, 256, 256, 256)
    assert with_measured.peaks == analytic.Peaks(pytest.approx(peaks["s"]), pytest.approx(peaks["bandwidth"]), True)
    assert not nominal.peaks.measured
    assert with_measured.time_s != pytest.approx(nominal.time_s)


def test_one_precision_and_the_table_format(tmp_path):
    db = tmp_path / "one.db"
    out = peak(db, "--precision", "s").stdout
    assert "GFLOP/s" in out and "GB/s" in out and "bandwidth" in out
    assert [r["precision"] for r in stored(db)] == ["s", "bandwidth"]


@pytest.mark.parametrize("args, message", [
    (["--device", "9"], "no device 9"),
    (["--precision", "x"], "unknown precision"),
    (["--precision", ","], "empty --precision"),
    (["--iterations", "0"], "--iterations"),
    (["--copy-mib", "0"], "--copy-mib"),
    (["--time-cap", "0"], "--time-cap"),
    (["--format", "xml"], "--format"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    db = tmp_path / "bad.db"
    result = CliRunner().invoke(cli, ["peak", "--db", f"sqlite:///{db}", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], result.stderr
    assert not db.exists()


def test_an_unusable_database_is_refused_before_measuring():
    result = CliRunner().invoke(cli, ["peak", "--db", "sqlite:////nonexistent-dir/x.db", *SMALL])
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_doubles_on_a_device_without_them_are_refused():
    from gemmtune.errors import GemmtuneError
    from gemmtune.bench.peak import parse_precisions

    dev = resolve_device(0)
    no_doubles = type(dev)(**{**dev.__dict__, "double_precision": False})
    assert [p.code for p in parse_precisions(None, no_doubles)] == ["s", "c"]
    with pytest.raises(GemmtuneError, match="double precision"):
        parse_precisions("s,z", no_doubles)


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_the_madd_kernel_computes_the_multiply_adds_it_is_credited_with(code):
    # The flops of a peak are counted, not observed: a kernel that skipped part of a complex
    # multiply-add would report a rate it never reached. Its result must be the chains'.
    import numpy as np
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.bench.peak import CHAINS, _program

    info, dev = open_device(0)
    prec = get_precision(code)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    rng = np.random.default_rng()
    draw = (lambda: complex(*rng.uniform(-0.9, 0.9, 2))) if prec.is_complex else (lambda: rng.uniform(-0.9, 0.9))
    a, b, items, iterations = draw(), draw(), 64, 5
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, items * prec.bytes)
    cl.Kernel(_program(ctx, prec), "madd")(queue, (items,), (items,), np.int32(iterations),
                                            np.array(a, dtype=prec.dtype), np.array(b, dtype=prec.dtype), out)
    got = np.empty(items, dtype=prec.dtype)
    cl.enqueue_copy(queue, got, out)
    start = np.arange(items)[:, None] + np.arange(CHAINS)[None, :]
    acc = start * (1 - 1j) if prec.is_complex else start.astype(float)
    for _ in range(iterations):
        acc = acc * a + b
    expected = acc.sum(axis=1)
    assert np.allclose(got, expected, rtol=1e-4 if code in "sc" else 1e-12, atol=0)


def test_cpu_peak_counts_the_flops_of_its_vector_kernel(monkeypatch):
    """On a CPU, peak runs kernels/peak_cpu.cl: compute units x 8 work-items, 12 chains of
    vectors, 4 x the iterations, 2 flops per lane and iteration. With every launch timed at
    2 ms, the widest vector (64 bytes) does the most flops in that time and gives the figure."""
    import pyopencl as cl

    from gemmtune.bench import peak as pk
    from gemmtune.devices.opencl import open_device

    info, dev = open_device(0)
    if info.type != "CPU":
        pytest.skip("device 0 is not a CPU")
    queue = cl.CommandQueue(cl.Context([dev]), properties=cl.command_queue_properties.PROFILING_ENABLE)
    monkeypatch.setattr(pk, "_time", lambda launch, policy: [launch().wait() or 2.0])
    sizes = pk.PeakSizes(iterations=64)
    for code, lanes in (("s", 16), ("d", 8)):
        got = pk.measure_madd(queue, info, get_precision(code), sizes)
        flops = info.compute_units * 8 * 12 * lanes * (64 * 4) * 2
        assert got.value == pytest.approx(flops / 2e-3 / 1e9)
        assert pk.cpu_madd_flops(info.compute_units * 8, lanes, 256) == flops
        assert got.median_ms == 2.0 and got.repeats == 1
