"""A small real results database, built once per test run by short searches on PoCL.

Two shapes in single precision (so that nearest-shape lookups and the size plot have something
to choose from) and one in double, a few trials each over a four-point space, with little
timing per trial. Tests that change the database work on a copy (``results_copy``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import TINY_SPACE  # noqa: E402

from gemmtune.cli import cli  # noqa: E402

SEARCHES = (
    ("s", (24, 24, 24), 3),
    ("s", (40, 40, 40), 3),
    ("d", (16, 16, 16), 2),
)


@pytest.fixture(scope="session")
def results_db(tmp_path_factory) -> Path:
    """Path of the shared SQLite results database; treat it as read-only."""
    where = tmp_path_factory.mktemp("tuned")
    space = where / "tiny.toml"
    space.write_text(TINY_SPACE)
    db = where / "results.db"
    for precision, (m, n, k), trials in SEARCHES:
        result = CliRunner().invoke(cli, [
            "search", "--db", f"sqlite:///{db}", "--space", str(space), "--time-cap", "0.05", "-q",
            "--early-stop", "0",  # every row complete: what the report tests count is fixed
            "--seed", "1", "--precision", precision, "--m", str(m), "--n", str(n), "--k", str(k),
            "--trials", str(trials)])
        assert result.exit_code == 0, result.output
    return db


@pytest.fixture
def results_copy(results_db, tmp_path) -> Path:
    """A private copy of the shared database, for tests that add rows."""
    copy = tmp_path / "copy.db"
    shutil.copy(results_db, copy)
    return copy


@pytest.fixture(scope="module")
def no_tuned_results(tmp_path_factory):
    """For a module (``pytest.mark.usefixtures``): no results database and no $GEMMTUNE_DEVICE.
    config=None takes a tuned configuration from the results database when there is one; an
    empty database location makes it the shipped default, whatever was tuned in the checkout."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEMMTUNE_DB", f"sqlite:///{tmp_path_factory.mktemp('nodb') / 'none.db'}")
        mp.delenv("GEMMTUNE_DEVICE", raising=False)
        yield


@pytest.fixture(scope="session")
def postgres():
    """URL of a PostgreSQL server's maintenance database: $GEMMTUNE_TEST_POSTGRES (what .ci/run
    starts), else a server started here for the session; under CI a missing server fails."""
    import os
    import tempfile

    import pgserver

    given = os.environ.get("GEMMTUNE_TEST_POSTGRES")
    if given:
        yield given
        return
    # Not under pytest's tmp_path: as root the server runs as user postgres, who must reach it.
    where = Path(tempfile.mkdtemp(prefix="gemmtune-pg-"))
    try:
        url = pgserver.start(where)
    except pgserver.Unavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no PostgreSQL server under CI: {e}")
        pytest.skip(f"no PostgreSQL server: {e}")
    yield url
    pgserver.stop(where)
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_tuned_cache():
    # best_config memoises per process; each test must read its own database afresh.
    from gemmtune.db.tuned import clear_cache

    clear_cache()
    yield
    clear_cache()


@pytest.fixture(autouse=True)
def _poisoned_results():
    # Every result a test checks starts as NaN, where a call would leave it uninitialised: an
    # element a kernel leaves unwritten fails instead of holding what the memory held.
    # tests/test_host_memory.py checks the call as it runs outside.
    from gemmtune.call.host import poisoned

    with poisoned():
        yield


@pytest.fixture
def add_result():
    """``add_result(db, **columns)``: append a hand-made row to ``results`` (an ok row of a
    made-up study by default) and return its id."""
    from gemmtune.db.store import Store

    def add(db: Path, **columns) -> int:
        row = dict(study="hand-made", trial=0, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                   precision="s", m=64, n=64, k=64, kernel="xgemm_k5",
                   params={"TSM": 32, "TSN": 64, "TSK": 16, "WPTN": 4, "PAD": 1, "TRANSPOSEX": 16, "TRANSPOSEY": 8},
                   status="ok", gflops=100.0, time_ms=1.0, kernel_time_ms=0.9, ci_low_ms=0.95, ci_high_ms=1.05,
                   min_ms=0.9, repeats=10, samples_ms=[1.0 + i / 100 for i in range(-5, 5)], compile_s=0.1,
                   trial_s=0.5, baseline=False)
        row.update(columns)
        if row["status"] != "ok":  # a failed trial has no timing
            for column in ("gflops", "time_ms", "kernel_time_ms", "ci_low_ms", "ci_high_ms", "min_ms",
                           "repeats", "samples_ms"):
                if column not in columns:
                    row[column] = None
        store = Store(f"sqlite:///{db}")
        try:
            return store.add(**row)
        finally:
            store.close()

    return add


# OpenCL implementations the tests of tests/test_implementations.py run on, by platform name:
# PoCL (the distribution's, else pip's) and Intel's CPU runtime (the `intel` extra, which
# gemmtune registers itself). $GEMMTUNE_TEST_IMPLEMENTATIONS (pocl,intel: what .ci/run sets)
# names those that must be there, and leaves the others out; unset, every one there runs and a
# missing one is skipped (under CI=true, failed).
IMPLEMENTATIONS = {"pocl": "Portable Computing Language", "intel": "Intel(R) OpenCL"}


def implementation_device(name: str):
    """The first device of implementation ``name`` (a key of IMPLEMENTATIONS); None where
    there is none."""
    from gemmtune.devices.opencl import list_devices

    return next((d for d in list_devices() if d.platform == IMPLEMENTATIONS[name]), None)


@pytest.fixture(scope="session", params=sorted(IMPLEMENTATIONS))
def implementation(request):
    """The DeviceInfo of each OpenCL implementation in turn."""
    import os

    chosen = [name.strip() for name in os.environ.get("GEMMTUNE_TEST_IMPLEMENTATIONS", "").split(",") if name.strip()]
    if chosen and request.param not in chosen:
        pytest.skip(f"GEMMTUNE_TEST_IMPLEMENTATIONS leaves out {request.param}")
    dev = implementation_device(request.param)
    if dev is None:
        why = (f"no {IMPLEMENTATIONS[request.param]} device: pip install -e '.[pocl,test]' installs it "
               "(see docs/implementations.md)")
        if chosen or os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return dev
