"""`gemmtune bench` on the PoCL CPU device: rows per size and contender, the source of the tuned
configuration, verification before timing, the baselines that cannot run here, and bad input.

Sizes are tiny and the time cap short: what is checked is what the rows say and how they relate
to each other, not the speeds. torch and cupy are not installed in the test environment.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import toml_space  # noqa: E402

import gemmtune.bench  # noqa: E402
import gemmtune.verify  # noqa: E402
from gemmtune.bench import run_bench  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.defaults import default_config  # noqa: E402
from gemmtune.device import resolve_device  # noqa: E402
from gemmtune.kernels import GemmOperation  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.space import load_space, make_config  # noqa: E402
from gemmtune.timing import TimingPolicy  # noqa: E402
from gemmtune.tuned import best_config  # noqa: E402

EXPLICIT = "config:KERNEL=xgemm_k5,TSM=16,TSN=16,TSK=16,WPTN=2,PAD=1"
# The explicit configuration in full: the parameters it leaves out take the kernel's defaults.
EXPLICIT_CONFIG = make_config(load_space(), "xgemm_k5", dict(TSM=16, TSN=16, TSK=16, WPTN=2, PAD=1))
ROW_KEYS = {"size", "contender", "source", "config", "gflops", "time_ms", "ci_low_ms", "ci_high_ms", "repeats",
            "gemmtune_ratio", "verified", "skipped"}
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


def bench_json(*args) -> list[dict]:
    result = bench(*args, "--format", "json")
    rows = json.loads(result.stdout)
    assert all(set(r) == ROW_KEYS for r in rows)
    return rows


def by_contender(rows, size) -> dict[str, dict]:
    return {r["contender"]: r for r in rows if r["size"] == size}


def flops(size: int) -> int:
    return 2 * size ** 3   # real precision: one multiply and one add per term


def check_timed(row: dict, ours: dict) -> None:
    """A contender that ran: its speed follows from its median time and the size."""
    assert row["skipped"] is None, row
    assert 1 <= row["repeats"] <= TimingPolicy().max_repeats
    assert row["time_ms"] > 0 and row["gflops"] > 0
    assert row["gflops"] == pytest.approx(flops(row["size"]) / (row["time_ms"] * 1e-3) / 1e9, rel=1e-9)
    assert row["gemmtune_ratio"] == pytest.approx(row["time_ms"] / ours["time_ms"], rel=1e-12)
    if row["repeats"] >= 6:
        assert row["ci_low_ms"] <= row["time_ms"] <= row["ci_high_ms"]


# ---------------------------------------------------------------- rows

def test_bench_json_with_an_empty_database(empty_db):
    rows = bench_json("--precision", "s", "--sizes", ",".join(map(str, SIZES)), "--db", empty_db,
                      "--baseline", f"numpy,torch,cupy,{EXPLICIT}")
    contenders = ["gemmtune", EXPLICIT, "numpy", "torch", "cupy"]
    assert [(r["size"], r["contender"]) for r in rows] == [(s, c) for s in SIZES for c in contenders]
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
    assert [line for line in result.stderr.splitlines() if line.strip()] == ["size 24 done", "size 40 done"]
    assert len(json.loads(result.stdout)) == 4


def test_bench_sources_with_a_tuned_database(tuned_db):
    """The search tuned 24^3 (column-major m, n, k = 24): bench finds that shape itself for 24 and,
    for 40, the nearest tuned one."""
    rows = bench_json("--sizes", ",".join(map(str, SIZES)), "--db", tuned_db, "--baseline", "numpy")
    assert [(r["size"], r["contender"]) for r in rows] == [(s, c) for s in SIZES for c in ("gemmtune", "numpy")]
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
    assert len(lines) == 4
    header = lines[0].split()
    assert header == ["size", "contender", "source", "GFLOP/s", "gemmtune/this", "repeats", "note"]
    ours, numpy_, torch_ = (line.split() for line in lines[1:])
    assert ours[:3] == ["24", "gemmtune", "default"] and ours[4] == "1.000"
    assert float(ours[3].replace(",", "")) >= 0
    assert numpy_[:3] == ["24", "numpy", "host"]
    assert torch_[:2] == ["24", "torch"] and torch_[3:6] == ["-", "-", "0"]
    assert "torch" in " ".join(torch_[6:]) and ("installed" in lines[3] or "CUDA" in lines[3])


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
        calls.append(self.op.config)
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
    rows = run_bench(0, get_precision("s"), [24], ["numpy", EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
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
    through one for xgemm_k5): its samples must still be device time, far below the stall
    (see test_kernel for device_time_ms)."""
    import time

    real = GemmOperation.launch

    def stalling(self, index, wait_for):
        event = real(self, index, wait_for)
        if self.config == EXPLICIT_CONFIG and not self.plan.launches[index].gemm:   # after a pass
            self.queue.flush()
            time.sleep(0.2)
        return event

    monkeypatch.setattr(GemmOperation, "launch", stalling)
    rows = run_bench(0, get_precision("s"), [24], [EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
    row = by_contender(rows, 24)[EXPLICIT]
    assert row["verified"] is True and row["repeats"] >= 1
    assert row["time_ms"] < 50, row


def test_a_wrong_gemmtune_result_leaves_no_ratio(empty_db, timed_configs, monkeypatch):
    """bench's check (gemmtune.verify.compare, imported by bench when a contender is set up)
    fails for the first OpenCL contender only: the tuned one is skipped, and with nothing to
    compare against, no contender has a ratio."""
    real = gemmtune.verify.compare
    calls = []

    def first_fails(result, ref, prec):
        calls.append(result.shape)
        if len(calls) == 1:
            result = result.copy()
            result.flat[0] += 1.0
        return real(result, ref, prec)

    monkeypatch.setattr(gemmtune.verify, "compare", first_fails)
    rows = run_bench(0, get_precision("s"), [24], ["numpy", EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
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
    rows = run_bench(0, get_precision("s"), [40], [EXPLICIT], empty_db, TimingPolicy(max_seconds=TIME_CAP))
    row = by_contender(rows, 40)
    assert list(row) == ["gemmtune", EXPLICIT]
    assert row[EXPLICIT]["skipped"].startswith("wrong result") and row[EXPLICIT]["verified"] is False
    assert row["gemmtune"]["verified"] is True
