"""`gemmtune bench` on the PoCL CPU device: rows per size and contender, the source of the tuned
configuration, verification before timing, the baselines that cannot run here, and bad input.

Sizes are tiny and the time cap short: what is checked is what the rows say and how they relate
to each other, not the speeds. torch and cupy are not installed in the test environment.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import toml_space  # noqa: E402

import gemmtune.bench  # noqa: E402
import gemmtune.measure.verify  # noqa: E402
from gemmtune.bench import run_bench  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.space.defaults import default_config  # noqa: E402
from gemmtune.devices.opencl import resolve_device  # noqa: E402
from gemmtune.launch.operation import GemmOperation  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.shapes import Shape  # noqa: E402
from gemmtune.space import load_space, make_config  # noqa: E402
from gemmtune.measure.timing import TimingPolicy, converged  # noqa: E402
from gemmtune.db.tuned import best_config  # noqa: E402

EXPLICIT = "config:KERNEL=xgemm_k5,TSM=16,TSN=16,TSK=16,WPTN=2,PAD=1"
# The explicit configuration in full: the parameters it leaves out take the kernel's defaults.
EXPLICIT_CONFIG = make_config(load_space(), "xgemm_k5", dict(TSM=16, TSN=16, TSK=16, WPTN=2, PAD=1))
ROW_KEYS = {"shape", "m", "n", "k", "precision", "trans_a", "trans_b", "batch", "contender", "source", "config",
            "gflops", "time_ms", "device_ms", "host_ms", "ci_low_ms", "ci_high_ms", "repeats", "gemmtune_ratio",
            "verified", "skipped"}
SIZES = [24, 40]
TIME_CAP = 0.05


pytestmark = pytest.mark.usefixtures("no_tuned_results")


@pytest.fixture
def empty_db(tmp_path) -> str:
    """A database URL whose file does not exist: nothing was tuned."""
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory) -> str:
    """A database written by a short real search at 24^3, over a space of one configuration (the
    explicit one, so that PoCL builds it once for both)."""
    where = tmp_path_factory.mktemp("tuned")
    space = where / "one.toml"
    space.write_text(toml_space({k: [v] for k, v in EXPLICIT_CONFIG.params.items()}))
    url = f"sqlite:///{where / 'results.db'}"
    result = CliRunner().invoke(cli, ["search", "--device", "0", "--db", url, "--space", str(space), "--size", "24",
                                      "--trials", "2", "--time-cap", str(TIME_CAP), "--seed", "1", "-q"])
    assert result.exit_code == 0, result.output
    return url


def bench(*args, code=0):
    result = CliRunner().invoke(cli, ["bench", "--device", "0", "--time-cap", str(TIME_CAP), *args])
    assert "Traceback" not in result.output
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def bench_json(*args, means=None) -> list[dict]:
    result = bench(*args, "--format", "json")
    found = json.loads(result.stdout)
    rows = found["rows"]
    assert all(set(r) == ROW_KEYS for r in rows)
    # The geometric mean of each contender's time over gemmtune's, over the problems both ran.
    expected = {}
    for r in rows:
        if r["contender"] != "gemmtune" and r["gemmtune_ratio"]:
            expected.setdefault(r["contender"], []).append(math.log(r["gemmtune_ratio"]))
    assert found["geometric_mean_ratio"] == pytest.approx({c: math.exp(sum(v) / len(v)) for c, v in expected.items()})
    return rows


def by_contender(rows, size) -> dict[str, dict]:
    return {r["contender"]: r for r in rows if (r["m"], r["n"], r["k"]) == (size,) * 3}


def flops(row: dict) -> int:
    per_term = 8 if row["precision"] in "cz" else 2   # complex: four multiplies and four adds
    return per_term * row["m"] * row["n"] * row["k"] * row["batch"]


def check_timed(row: dict, ours: dict) -> None:
    """A contender that ran: its speed follows from its median wall time and the shape, and
    each call returned (host) and ran on the device no later than its wait ended."""
    assert row["skipped"] is None, row
    assert 1 <= row["repeats"] <= TimingPolicy().max_repeats
    assert row["time_ms"] > 0 and row["gflops"] > 0
    assert row["gflops"] == pytest.approx(flops(row) / (row["time_ms"] * 1e-3) / 1e9, rel=1e-9)
    assert row["gemmtune_ratio"] == pytest.approx(row["time_ms"] / ours["time_ms"], rel=1e-12)
    assert 0 < row["host_ms"] <= row["time_ms"] and 0 < row["device_ms"]
    if row["repeats"] >= 6:
        assert row["ci_low_ms"] <= row["time_ms"] <= row["ci_high_ms"]


# ---------------------------------------------------------------- rows

def test_bench_json_with_an_empty_database(empty_db):
    rows = bench_json("--precision", "s", "--sizes", ",".join(map(str, SIZES)), "--db", empty_db,
                      "--baseline", f"numpy,torch,cupy,{EXPLICIT}")
    contenders = ["gemmtune", EXPLICIT, "numpy", "torch", "cupy"]
    assert [(r["m"], r["contender"]) for r in rows] == [(s, c) for s in SIZES for c in contenders]
    for size in SIZES:
        default = default_config(resolve_device(0), get_precision("s"), (size,) * 3)
        row = by_contender(rows, size)
        ours = row["gemmtune"]
        assert ours["source"] == "default"
        assert ours["config"] == f"{default.kernel} {default}"
        assert ours["verified"] is True
        check_timed(ours, ours)
        assert ours["gemmtune_ratio"] == 1.0

        explicit = row[EXPLICIT]
        assert explicit["source"] == "explicit"
        assert explicit["config"] == f"xgemm_k5 {EXPLICIT_CONFIG}"
        assert explicit["verified"] is True
        check_timed(explicit, ours)

        numpy_ = row["numpy"]
        assert numpy_["verified"] is None
        check_timed(numpy_, ours)

        for lib in ("torch", "cupy"):
            skipped = row[lib]
            assert "not installed" in skipped["skipped"] or "no CUDA" in skipped["skipped"], skipped
            assert lib in skipped["skipped"]
            assert skipped["repeats"] == 0
            assert skipped["gflops"] is skipped["time_ms"] is skipped["gemmtune_ratio"] is None


def test_bench_progress_goes_to_stderr(empty_db):
    result = bench("--sizes", "24,40", "--db", empty_db, "--baseline", "numpy", "--format", "json")
    assert [line for line in result.stderr.splitlines() if line.strip()] == ["[1/2] s24x24x24 done",
                                                                          "[2/2] s40x40x40 done"]
    assert len(json.loads(result.stdout)["rows"]) == 4


def test_bench_shapes_measure_each_problem_with_its_precision_and_ops(empty_db, tmp_path):
    """A workload of odd, transposed and complex problems: each is verified and timed as Gemm
    runs it, against numpy doing the same product."""
    shapes = tmp_path / "w.csv"
    shapes.write_text("# a comment\nm,n,k,precision,trans_a,trans_b\n7,13,5,,T,N\n33,9,17,z,C,T\n1,40,24,d,N,N\n")
    rows = bench_json("--shapes", str(shapes), "--db", empty_db, "--baseline", "numpy")
    got = [(r["shape"], r["contender"], r["precision"]) for r in rows]
    assert got == [(s, c, s[0]) for s in ("s7x13x5 TN", "z33x9x17 CT", "d1x40x24") for c in ("gemmtune", "numpy")]
    for r in rows:
        if r["contender"] == "gemmtune":
            # PoCL's CPU device: xgemm_cpu serves small problems (the direct family does on a GPU)
            assert r["verified"] is True and r["config"].startswith("xgemm_cpu")
            check_timed(r, r)


def test_the_gemm_baseline_is_gemmtune_gemm_on_numpy_arrays(empty_db, tmp_path, monkeypatch):
    """``--baseline gemm``: the public call on the host's arrays, one problem and a batch, ops
    included, verified like the others; a wrong result from it is caught and never timed."""
    import gemmtune.call.compute as compute

    shapes = tmp_path / "w.csv"
    shapes.write_text("m,n,k,precision,trans_a,trans_b,batch\n30,17,9,d,T,N,1\n12,7,5,c,N,C,6\n")
    rows = bench_json("--shapes", str(shapes), "--db", empty_db, "--baseline", "gemm,numpy")
    assert [(r["shape"], r["contender"]) for r in rows] == [
        (s, c) for s in ("d30x17x9 TN", "6 x c12x7x5 NC") for c in ("gemmtune", "gemm", "numpy")]
    for ours, host, _ in zip(rows[::3], rows[1::3], rows[2::3]):
        assert host["source"] == "gemmtune.gemm" and host["verified"] is True
        check_timed(host, ours)
        assert host["device_ms"] == host["host_ms"] == host["time_ms"]   # not known apart from the call's
    real = compute.gemm
    monkeypatch.setattr(compute, "gemm", lambda *a, **k: 1.01 * real(*a, **k))
    rows = run_bench(0, [Shape(24, 24, 24, "s")], ["gemm"], empty_db, TimingPolicy(max_seconds=TIME_CAP))
    wrong = by_contender(rows, 24)["gemm"]
    assert wrong["verified"] is False and wrong["skipped"].startswith("wrong result") and wrong["repeats"] == 0


@pytest.mark.parametrize("spec, match", [
    ("24,24", "expected m,n,k"),
    ("24,24,0", "between 1 and"),
    ("24,24,x", "whole number"),
    ("24,24,24,q", "precision"),
    ("24,24,24,s,X", "trans_a"),
    (";", "names no problem"),
])
def test_bench_bad_shapes(empty_db, spec, match):
    result = bench("--shapes", spec, "--db", empty_db, code=2)
    assert result.stderr.startswith("Error: ") and match in result.stderr and result.stdout == ""


@pytest.mark.parametrize("text, match", [
    ("m,n\n1,2\n", "header must name m, n and k"),
    ("m,n,k\n1,2,3,4\n", "row 2: more fields"),
    ("m,n,k,depth\n1,2,3,4\n", "unknown column 'depth'"),
    ("m,n,k\n1,2,-3\n", "row 2: k must be between"),
], ids=["header", "extra-field", "unknown-column", "negative"])
def test_bench_malformed_shapes_file(empty_db, tmp_path, text, match):
    shapes = tmp_path / "bad.csv"
    shapes.write_text(text)
    result = bench("--shapes", str(shapes), "--db", empty_db, code=2)
    assert result.stderr.startswith("Error: shapes file") and match in result.stderr, result.stderr


def test_bench_sources_with_a_tuned_database(tuned_db):
    """The search tuned 24^3 (column-major m, n, k = 24): bench finds that shape itself for 24 and,
    for 40, the nearest tuned one."""
    rows = bench_json("--sizes", ",".join(map(str, SIZES)), "--db", tuned_db, "--baseline", "numpy")
    assert [(r["m"], r["contender"]) for r in rows] == [(s, c) for s in SIZES for c in ("gemmtune", "numpy")]
    ours = {s: by_contender(rows, s)["gemmtune"] for s in SIZES}
    assert ours[24]["source"] == "tuned" and ours[40]["source"] == "nearest"
    found = best_config(24, 24, 24, "s", device=0, db=tuned_db)
    assert found.source == "tuned" and found.config == EXPLICIT_CONFIG
    for size in SIZES:
        assert ours[size]["config"] == f"xgemm_k5 {EXPLICIT_CONFIG}"
        assert ours[size]["verified"] is True
        check_timed(ours[size], ours[size])
        check_timed(by_contender(rows, size)["numpy"], ours[size])


def test_bench_table_format(empty_db):
    result = bench("--sizes", "24", "--db", empty_db, "--baseline", "numpy,torch")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 5
    assert lines[0].split() == ["problem", "contender", "source", "GFLOP/s", "wall", "ms", "device", "ms", "host",
                                "ms", "this/gemmtune", "note"]
    ours, numpy_, torch_ = (line.split() for line in lines[1:4])
    assert ours[:3] == ["s24x24x24", "gemmtune", "default"] and ours[7] == "1.000"
    assert float(ours[3].replace(",", "")) >= 0
    assert numpy_[:3] == ["s24x24x24", "numpy", "host"]
    assert torch_[:2] == ["s24x24x24", "torch"] and torch_[3:8] == ["-"] * 5
    assert "torch" in " ".join(torch_[8:]) and ("installed" in lines[3] or "CUDA" in lines[3])
    assert lines[4].startswith("geometric mean of numpy's time over gemmtune's, 1 problem(s): ")


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, match", [
    (["--sizes", "0"], "sizes"),
    (["--sizes", "24,-8"], "sizes"),
    (["--sizes", "abc"], "sizes"),
    (["--sizes", "24,4x4"], "sizes"),
    (["--sizes", ","], "sizes"),
    (["--sizes", "24", "--baseline", "numpy,blas"], "blas"),
    (["--sizes", "24", "--baseline", "config:KERNEL=xgemm_k5,TSN=24,WPTN=16"], r"constraint 1\b"),
    (["--sizes", "24", "--baseline",
      "config:KERNEL=xgemm_rt,MWG=16,NWG=16,KWG=6,MDIMC=2,NDIMC=2,VWG=4,VLM=1,VLN=1,BKFAST=1"], r"constraint 3\b"),
    (["--sizes", "24", "--baseline", "config:KERNEL=xgemm_k5,TSX=16"], "TSX"),
    (["--sizes", "24", "--baseline", "config:KERNEL=xgemm_k5,TSM=sixteen"], "TSM"),
], ids=["zero", "negative", "letters", "mixed", "empty", "unknown-baseline", "k5-constraint-1",
        "rt-constraint-3", "unknown-parameter", "bad-value"])
def test_bench_bad_input(empty_db, args, match):
    import re

    result = bench(*args, "--db", empty_db, code=2)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert re.search(match, lines[0]), lines[0]
    assert result.stdout == ""


# ---------------------------------------------------------------- wrong results are not timed

@pytest.fixture
def timed_configs(monkeypatch) -> list:
    """The configuration of every OpenCL contender launch that is timed (a sample)."""
    calls = []
    real = gemmtune.bench._OpenCL.__call__

    def recording(self):
        calls.append(self.operation.config)
        return real(self)

    monkeypatch.setattr(gemmtune.bench._OpenCL, "__call__", recording)
    return calls


def test_a_wrong_contender_is_skipped_and_never_timed(empty_db, timed_configs, monkeypatch):
    """The explicit configuration computes 1.01 * A B (a real wrong result from the device, found
    by bench's own sampled check): it is reported as skipped and never launched for timing."""
    real = GemmOperation.enqueue

    def off_by_one_percent(self, a, b, c, alpha=1.0, beta=0.0, wait_for=None, offsets=(0, 0, 0)):
        if self.config == EXPLICIT_CONFIG:
            alpha = 1.01 * alpha
        return real(self, a, b, c, alpha, beta, wait_for, offsets)

    monkeypatch.setattr(GemmOperation, "enqueue", off_by_one_percent)
    default = default_config(resolve_device(0), get_precision("s"), (24, 24, 24))
    assert default != EXPLICIT_CONFIG
    rows = run_bench(0, [Shape(24, 24, 24, "s")], ["numpy", EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
    row = by_contender(rows, 24)
    assert list(row) == ["gemmtune", EXPLICIT, "numpy"]
    wrong = row[EXPLICIT]
    assert wrong["skipped"].startswith("wrong result"), wrong
    assert wrong["verified"] is False
    assert wrong["repeats"] == 0 and wrong["gflops"] is wrong["time_ms"] is wrong["gemmtune_ratio"] is None
    assert EXPLICIT_CONFIG not in timed_configs
    assert timed_configs and set(timed_configs) == {default}
    check_timed(row["gemmtune"], row["gemmtune"])
    check_timed(row["numpy"], row["gemmtune"])


def test_timed_samples_leave_the_hosts_latency_out(empty_db, monkeypatch):
    """The host stalls 0.2 s after each transpose pass of the explicit configuration (B goes
    through one for xgemm_k5): its device time must leave the stall out (see test_kernel for
    device_time_ms), its wall-clock and host times, what a caller pays, must not."""
    import time

    real = GemmOperation.launch

    def stalling(self, index, wait_for):
        event = real(self, index, wait_for)
        if self.config == EXPLICIT_CONFIG and not self.plan.launches[index].gemm:   # after a pass
            self.queue.flush()
            time.sleep(0.2)
        return event

    monkeypatch.setattr(GemmOperation, "launch", stalling)
    rows = run_bench(0, [Shape(24, 24, 24, "s")], [EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
    row = by_contender(rows, 24)[EXPLICIT]
    assert row["verified"] is True and row["repeats"] >= 1
    # The caller waits out the stall; the device's own time leaves it out.
    assert row["device_ms"] < 50 and row["time_ms"] >= 200 and row["host_ms"] >= 200, row


def test_a_wrong_gemmtune_result_leaves_no_ratio(empty_db, timed_configs, monkeypatch):
    """bench's check (gemmtune.measure.verify.compare, imported by bench when a contender is set up)
    fails for the first OpenCL contender only: the tuned one is skipped, and with nothing to
    compare against, no contender has a ratio."""
    real = gemmtune.measure.verify.compare
    calls = []

    def first_fails(result, ref, prec):
        calls.append(result.shape)
        if len(calls) == 1:
            result = result.copy()
            result.flat[0] += 1.0
        return real(result, ref, prec)

    monkeypatch.setattr(gemmtune.measure.verify, "compare", first_fails)
    rows = run_bench(0, [Shape(24, 24, 24, "s")], ["numpy", EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
    row = by_contender(rows, 24)
    assert len(calls) == 2, "each OpenCL contender is checked once, before timing"
    ours = row["gemmtune"]
    assert ours["skipped"].startswith("wrong result") and ours["verified"] is False
    assert ours["repeats"] == 0 and ours["time_ms"] is None
    assert row[EXPLICIT]["verified"] is True and row[EXPLICIT]["repeats"] >= 1
    assert set(timed_configs) == {EXPLICIT_CONFIG}
    for r in row.values():
        assert r["gemmtune_ratio"] is None
    assert row["numpy"]["gflops"] > 0 and row[EXPLICIT]["gflops"] > 0
    assert not any(isinstance(v, float) and math.isnan(v) for v in (row["numpy"]["gflops"], row[EXPLICIT]["gflops"]))


def test_the_check_covers_sampled_columns_of_the_output(empty_db, monkeypatch):
    """An OpenCL contender whose output misses a column (left NaN, as bench poisons it) is caught
    when that column is among those sampled: with a size below 64 every column is."""
    real = GemmOperation.enqueue

    def skip_last_column(self, a, b, c, alpha=1.0, beta=0.0, wait_for=None, offsets=(0, 0, 0)):
        events = real(self, a, b, c, alpha, beta, wait_for, offsets)
        if self.config == EXPLICIT_CONFIG:
            import pyopencl as cl

            events[-1].wait()
            nan = np.full(self.m, np.nan, dtype=self.prec.dtype)
            events.append(cl.enqueue_copy(self.queue, c, nan, dst_offset=(self.n - 1) * self.m * nan.itemsize))
        return events

    monkeypatch.setattr(GemmOperation, "enqueue", skip_last_column)
    rows = run_bench(0, [Shape(40, 40, 40, "s")], [EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
    row = by_contender(rows, 40)
    assert list(row) == ["gemmtune", EXPLICIT]
    assert row[EXPLICIT]["skipped"].startswith("wrong result") and row[EXPLICIT]["verified"] is False
    assert row["gemmtune"]["verified"] is True


def counting(calls: dict):
    """Contenders' runs that count their calls in ``calls`` and take ``ms`` each."""
    def timed(name, ms):
        def run():
            calls[name] = calls.get(name, 0) + 1
            return ms, ms, 0.01
        return run
    return timed


def test_short_calls_are_sampled_after_an_unrecorded_call_and_long_ones_directly():
    """Sampled in turns, a contender's first call after another's pays for the switch between
    them; under REWARM_MS each sample follows an unrecorded call, above it the switch is a small
    share of the call and every call after the warm-up is a sample."""
    calls = {}
    timed = counting(calls)
    short = gemmtune.bench.Contender("short", run=timed("short", gemmtune.bench.REWARM_MS / 2))
    long_ = gemmtune.bench.Contender("long", run=timed("long", gemmtune.bench.REWARM_MS * 1.5))
    policy = TimingPolicy(warmup=2, min_repeats=8, max_repeats=12)
    gemmtune.bench._measure([short, long_], policy)
    assert 8 <= len(short.samples) <= 12 and 8 <= len(long_.samples) <= 12
    assert calls["short"] == policy.warmup + 2 * len(short.samples)
    assert calls["long"] == policy.warmup + 1 + len(long_.samples)   # before the first sample: no wall clock yet


def test_a_switch_between_the_host_blas_and_opencl_is_settled_by_calls_whatever_their_length(monkeypatch):
    """The host BLAS's threads spin after its call, taking the cores from the next contender (and
    a driver's may, from the host's): a contender sampled right after the other kind is first
    called unrecorded until those calls have taken HOST_SETTLE_S, with no idle wait, which would
    leave the cores cold; two OpenCL contenders in a row get no such calls above REWARM_MS."""
    calls = {}
    timed = counting(calls)
    long_ms = gemmtune.bench.REWARM_MS * 1.5
    first = gemmtune.bench.Contender("first", "tuned", run=timed("first", long_ms))
    second = gemmtune.bench.Contender("second", "explicit", run=timed("second", long_ms))
    host = gemmtune.bench.Contender("numpy", gemmtune.bench.HOST, run=timed("numpy", long_ms))
    policy = TimingPolicy(warmup=1, min_repeats=8, max_repeats=8, max_seconds=60)   # the settling would reach 2 s
    sleeps = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    gemmtune.bench._measure([first, second, host], policy)
    assert len(first.samples) == len(second.samples) == len(host.samples) == 8
    assert sleeps == []
    settle = math.ceil(gemmtune.bench.HOST_SETTLE_S * 1e3 / long_ms)   # calls until they have taken it
    assert settle > 1
    assert calls["first"] == policy.warmup + 1 + 8 + 7 * settle   # every round but the first follows the host's
    assert calls["second"] == policy.warmup + 1 + 8               # always follows first's: one call before its first sample
    assert calls["numpy"] == policy.warmup + 8 * (settle + 1)     # always follows an OpenCL contender


def test_the_settling_calls_count_against_the_time_cap():
    """Calls too short and noisy to converge would be sampled up to the repeat cap, each after
    HOST_SETTLE_S of settling calls: those count against the contender's time cap, so it stops
    after about max_seconds / HOST_SETTLE_S samples, not after 200."""
    noisy = itertools.cycle([0.01, 0.02])
    tiny = gemmtune.bench.Contender("tiny", "tuned", run=lambda: (lambda ms: (ms, ms, 0.001))(next(noisy)))
    host = gemmtune.bench.Contender("numpy", gemmtune.bench.HOST, run=counting({})("numpy", 0.01))
    policy = TimingPolicy(warmup=1, max_repeats=200, max_seconds=2.0)
    gemmtune.bench._measure([tiny, host], policy)
    waits = round(policy.max_seconds / gemmtune.bench.HOST_SETTLE_S)
    assert waits - 1 <= len(tiny.samples) <= waits + 1
    assert not converged([x[0] for x in tiny.samples], policy)   # the time cap stopped it, not its interval
