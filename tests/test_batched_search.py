"""Batches in the search, the results table and what reads it (docs/batched.md): ``search
--batch`` and a shapes file's batch column, the ``batch`` column of ``results`` (old databases
read as batch 1), ``best_config``'s fallbacks by shape and batch, the batched classes' defaults,
and how a timing worker verifies a batch.

The one search runs a space of four xgemm_cpu configurations and one of xgemm_k5 (which takes no
batch) on PoCL, three trials, so that what is checked is the bookkeeping; every result the
search records was compared with numpy first (the timing worker's check, tested here too).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import make_device  # noqa: E402
from test_workload import rows, search  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune.db import tuned  # noqa: E402
from gemmtune.call.batched import batch_config  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.db.rows import screen  # noqa: E402
from gemmtune.db.store import Store  # noqa: E402
from gemmtune.space.defaults import default_config, shape_class, shipped_default  # noqa: E402
from gemmtune.devices.opencl import resolve_device  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.execution.timing_worker import batch_reference, check_batch_result, checked_problems  # noqa: E402
from gemmtune.families import FAMILIES  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.space import Config  # noqa: E402
from gemmtune.measure.verify import Reference, compare, random_matrix  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_tuned_results")

SPACE = """
[xgemm_cpu]
VW = [8, 16]
MV = [1]
NR = [4]
KU = [1]
KC = [0]
NB = [1]
ORDER = [0]
PACKA = [0, 1]
PACKB = [0]
WGS = [1]

[xgemm_k5]
TSM = [16]
TSN = [16]
TSK = [16]
WPTN = [2]
PAD = [1]
TRANSPOSEX = [16]
TRANSPOSEY = [8]
"""
K5 = Config.of("xgemm_k5", dict(TSM=16, TSN=16, TSK=16, WPTN=2, PAD=1, TRANSPOSEX=16, TRANSPOSEY=8))


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """One batched search through a shapes file's batch column: 40 problems of 12 x 10 x 9, op(B) T."""
    tmp = tmp_path_factory.mktemp("batched")
    space, db = tmp / "space.toml", tmp / "b.db"
    space.write_text(SPACE)
    shapes = tmp / "w.csv"
    shapes.write_text("m,n,k,precision,trans_a,trans_b,batch\n12,10,9,s,N,T,40\n")
    result = search("--space", str(space), "--db", f"sqlite:///{db}", "--trials", "3", "--shapes", str(shapes),
                    "--format", "json")
    return json.loads(result.stdout), db   # one study: its object


def test_search_measures_the_batch_with_families_that_take_one(searched):
    summary, db = searched
    assert summary["batch"] == 40 and summary["study"].endswith("-12x10x9-NT-batch40")
    recorded = rows(db)
    assert len(recorded) == 3
    flops = get_precision("s").flops(12, 10, 9) * 40
    for r in recorded:
        # only xgemm_cpu: the space's xgemm_k5 plans one problem a launch
        assert r["kernel"] == "xgemm_cpu" and r["batch"] == 40 and r["status"] == "ok", r
        assert (r["m"], r["n"], r["k"], r["trans_a"], r["trans_b"]) == (12, 10, 9, "N", "T")
        # the objective is the whole batch's GFLOP/s, from one batched launch's time
        assert r["gflops"] == pytest.approx(flops / (r["time_ms"] * 1e-3) / 1e9)
        # verified: recorded errors (the largest element's relative one may be large where an
        # element of the product is near 0; the norm's is not)
        assert r["max_rel_error"] is not None and r["norm_rel_error"] < 1e-5
    assert summary["best"]["gflops"] == max(r["gflops"] for r in recorded)


def test_best_config_asks_for_the_batch_then_the_nearest_then_defaults(searched, tmp_path):
    summary, searched_db = searched
    db = tmp_path / "copy.db"
    shutil.copy(searched_db, db)   # with a row of its own, apart from the other tests' database
    url = f"sqlite:///{db}"
    prec = get_precision("s")
    dev = resolve_device(0)
    best = Config.of(summary["best"]["kernel"], summary["best"]["params"])
    store = Store(url)
    store.add(study="single", trial=0, device=dev.key, device_name=dev.name, precision="s", m=12, n=10, k=9,
              trans_a="N", trans_b="T", kernel=K5.kernel, params=K5.params, status="ok", gflops=1e6, baseline=False)
    store.close()
    tuned.clear_cache()
    found = tuned.best_config(12, 10, 9, "s", device=dev, db=url, trans_b="T", batch=40)
    assert (found.source, found.config, found.batch) == ("tuned", best, 40)
    # one problem: its own tuned row, of a family that takes no batch
    one = tuned.best_config(12, 10, 9, "s", device=dev, db=url, trans_b="T")
    assert (one.source, one.config, one.batch) == ("tuned", tuned.shipped_config(K5.kernel, K5.params), 1)
    # a batch of 3 is nearer batch 1 than 40 in log size, but xgemm_k5 takes no batch
    near = tuned.best_config(12, 10, 9, "s", device=dev, db=url, trans_b="T", batch=3)
    assert (near.source, near.config, near.batch) == ("nearest", best, 40)
    assert tuned.nearby_configs(url, dev, prec, 12, 10, 9, "NT", batch=3) == [best]
    with pytest.raises(GemmtuneError, match="batch must be a whole number"):
        tuned.best_config(12, 10, 9, "s", device=dev, db=url, batch=0)
    # A batched call takes the batch's tuned row: gemm's row-major c (10 x 12) = a^T b per problem is
    # the column-major 12 x 10 x 9 problem with op(B) T that was searched.
    assert batch_config(None, dev, prec, (12, 10, 9), ("N", "T"), url, 40) == best
    rng = np.random.default_rng()
    a, b = random_matrix(prec, (40, 9, 10), rng), random_matrix(prec, (40, 9, 12), rng)
    got = gemmtune.gemm(a, b, trans_a=True, device=0, db=url)   # its own output, poisoned with NaN first
    opa, opb = np.swapaxes(a, 1, 2).astype(np.float64), b.astype(np.float64)
    check = compare(got, Reference(np.matmul(opa, opb), np.matmul(np.abs(opa), np.abs(opb)), 9), prec)
    assert check.passed, check
    tuned.clear_cache()


def test_a_database_without_the_batch_column_reads_as_batch_1(tmp_path):
    """A database of an earlier version: opened read-only its rows are batch 1; opened to write,
    the column is added and its old rows stay batch 1."""
    db, url = tmp_path / "old.db", f"sqlite:///{tmp_path / 'old.db'}"
    dev = make_device(type="CPU", local_mem_bytes=1 << 20, max_work_group_size=4096, max_work_item_sizes=(4096,) * 3)
    cpu = shipped_default("CPU", get_precision("s"), "tiny")
    store = Store(url)
    store.add(study="old", trial=0, device=dev.key, device_name=dev.name, precision="s", m=16, n=16, k=16,
              trans_a="N", trans_b="N", kernel=cpu.kernel, params=cpu.params, status="ok", gflops=5.0, baseline=False)
    store.close()
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE results DROP COLUMN batch")
    con.commit()
    con.close()
    old = Store(url, create=False)
    frame = old.frame()
    old.close()
    assert screen(frame).rows.batch.tolist() == [1]
    tuned.clear_cache()
    assert tuned.best_config(16, 16, 16, "s", device=dev, db=url).source == "tuned"
    assert tuned.best_config(16, 16, 16, "s", device=dev, db=url, batch=100).source == "nearest"
    store = Store(url)   # to write: the column is added
    store.add(study="new", trial=0, device=dev.key, device_name=dev.name, precision="s", m=16, n=16, k=16,
              trans_a="N", trans_b="N", batch=100, kernel=cpu.kernel, params=cpu.params, status="ok", gflops=9.0,
              baseline=False)
    assert screen(store.frame()).rows.batch.tolist() == [1, 100]
    store.close()
    assert [r["batch"] for r in rows(db)] == [None, 100]
    tuned.clear_cache()
    assert tuned.best_config(16, 16, 16, "s", device=dev, db=url, batch=100).source == "tuned"
    tuned.clear_cache()


def test_batched_classes_take_families_that_take_batches():
    assert shape_class(16, 16, 16, 10_000) == shape_class(1, 1, 4096, 2) == "batch_micro"
    assert shape_class(17, 16, 16, 2) == shape_class(32, 32, 32, 2) == "batch_tiny"
    assert shape_class(33, 32, 32, 2) == shape_class(64, 64, 64, 1000) == "batch_small"
    assert shape_class(256, 256, 256, 50) == shape_class(65, 64, 64, 2) == "batch_medium"
    assert shape_class(512, 512, 512, 2) == "batch_medium"
    assert shape_class(513, 512, 512, 2) == shape_class(4096, 4096, 16, 2) == "batch_large"
    assert shape_class(16, 16, 16, 1) == "tiny"
    cpu = make_device(type="CPU", local_mem_bytes=1 << 20, max_work_group_size=4096, max_work_item_sizes=(4096,) * 3)
    gpu = make_device(type="GPU", local_mem_bytes=48 << 10, max_work_group_size=1024,
                      max_work_item_sizes=(1024, 1024, 64))
    for code in "sdcz":
        prec = get_precision(code)
        for shape, batch in (((16, 16, 16), 10_000), ((64, 64, 64), 1000), ((256, 256, 256), 50)):
            for dev in (cpu, gpu):
                config = default_config(dev, prec, shape, batch=batch)
                assert FAMILIES[config.kernel].takes_batch, (dev.type, code, shape, config)
            assert default_config(cpu, prec, shape, batch=batch) == shipped_default(
                "CPU", prec, shape_class(*shape, batch))


def test_a_batch_is_verified_whole_or_by_a_sample_with_its_ends(monkeypatch):
    rng = np.random.default_rng()
    assert checked_problems(40, 12, 10, 9, rng).tolist() == list(range(40))
    sample = checked_problems(10_000, 256, 256, 256, rng)
    assert len(sample) == 16 and sample[0] == 0 and sample[-1] == 9_999 and np.all(np.diff(sample) > 0)
    prec = get_precision("z")
    for ta, tb in (("N", "N"), ("T", "C"), ("C", "N")):
        # stored column-major, i.e. as numpy's transposes: a is (batch, k, m) for op N, (batch, m, k) else
        a = random_matrix(prec, (5, 7, 4) if ta == "N" else (5, 4, 7), rng)
        b = random_matrix(prec, (5, 3, 7) if tb == "N" else (5, 7, 3), rng)
        ref = batch_reference(prec, a, b, ta, tb)
        assert ref.k == 7   # the inner dimension, which the tolerance grows with, not a stack's rows
        # verify's own reference takes stacks alike (bench's check of a batch): op() of the last two axes
        stacked = Reference.compute(prec, np.swapaxes(a, 1, 2), np.swapaxes(b, 1, 2), None, 1.0, 0.0, ta, tb)
        assert stacked.k == 7 and np.array_equal(np.swapaxes(stacked.value, 1, 2), ref.value)
        for z in range(5):
            opa = {"N": a[z].T, "T": a[z], "C": a[z].conj()}[ta].astype(np.complex128)
            opb = {"N": b[z].T, "T": b[z], "C": b[z].conj()}[tb].astype(np.complex128)
            assert np.allclose(ref.value[z], (opa @ opb).T)
    s = get_precision("s")
    a, b = random_matrix(s, (100, 9, 12), rng), random_matrix(s, (100, 10, 9), rng)
    checked = np.array([0, 17, 99])
    ref = batch_reference(s, a[checked], b[checked], "N", "N")
    good = np.swapaxes(np.matmul(np.swapaxes(a, 1, 2).astype(np.float64),
                                 np.swapaxes(b, 1, 2).astype(np.float64)), 1, 2).astype(np.float32)
    assert check_batch_result(good, ref, checked, s).passed
    unwritten = good.copy()
    unwritten[50, 3, 4] = np.nan   # a problem the sample leaves out
    assert not check_batch_result(unwritten, ref, checked, s).passed
    wrong = good.copy()
    wrong[99] *= 1.01              # the last problem, always checked
    assert not check_batch_result(wrong, ref, checked, s).passed


@pytest.mark.parametrize("args, match", [
    (["--shapes", "16,16,16,s,N,N,8", "--batch", "4"], "leave --batch out"),
    (["--size", "16", "--batch", "0"], "--batch"),
])
def test_bad_batches_are_one_error_line(tmp_path, args, match):
    result = search("--db", f"sqlite:///{tmp_path / 'x.db'}", "--trials", "1", *args, code=2)
    assert result.stderr.startswith("Error: ") and match in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "x.db").exists()


def test_a_space_without_a_family_that_takes_batches_is_refused(tmp_path):
    space = tmp_path / "k5.toml"
    space.write_text(SPACE[SPACE.index("[xgemm_k5]"):])
    result = search("--space", str(space), "--db", f"sqlite:///{tmp_path / 'x.db'}", "--trials", "1",
                    "--size", "16", "--batch", "4", code=2)
    assert "no kernel family of" in result.stderr and "takes a batch" in result.stderr


def test_report_and_export_carry_the_batch(searched, tmp_path):
    summary, db = searched
    url = f"sqlite:///{db}"
    report = CliRunner().invoke(cli, ["report", "--db", url, "--format", "json"])
    assert report.exit_code == 0, report.output
    (row,) = json.loads(report.stdout)
    assert (row["m"], row["n"], row["k"], row["ops"], row["batch"]) == (12, 10, 9, "NT", 40)
    assert row["gflops"] == pytest.approx(summary["best"]["gflops"])
    table = CliRunner().invoke(cli, ["report", "--db", url, "--format", "markdown"]).stdout.splitlines()
    header, cells = ([c.strip() for c in line.split("|")] for line in (table[0], table[2]))
    assert cells[header.index("batch")] == "40"
    exported = json.loads(CliRunner().invoke(cli, ["export", "--db", url, "--format", "json"]).stdout)
    assert [(e["batch"], e["kernel"]) for e in exported["entries"]] == [(40, summary["best"]["kernel"])]
    # a C header describes single-problem builds: a batch's configuration is left out of it
    header = CliRunner().invoke(cli, ["export", "--db", url, "--format", "header"])
    assert header.exit_code == 0 and "#ifndef GEMMTUNE_TUNED_H" in header.stdout
    assert summary["study"] not in header.stdout   # a tuned block names its study


def test_a_batch_searches_the_families_that_take_one_with_operands_in_place_on_a_cpu():
    from gemmtune.search.loop import batch_space, shipped_batch_space

    cpu = make_device(type="CPU", local_mem_bytes=1 << 20, max_work_group_size=4096, max_work_item_sizes=(4096,) * 3)
    (family,) = batch_space(shipped_batch_space(cpu)).families
    # small problems' packing passes, one work-group per problem, cost more than their product
    assert family.family.name == "xgemm_cpu" and set(family.values["PACKA"]) == {0, 1}
    assert batch_space(shipped_batch_space(cpu)).allows(shipped_default("CPU", get_precision("s"), "batch_small"))
    gpu = make_device(type="GPU", local_mem_bytes=48 << 10, max_work_group_size=1024,
                      max_work_item_sizes=(1024, 1024, 64))
    names = [f.family.name for f in batch_space(shipped_batch_space(gpu)).families]
    assert "xgemm_direct" in names and "xgemm_k5" not in names and "xgemm_thin" not in names


def test_a_batch_takes_the_tile_that_fits_its_problems():
    """A GPU's batch takes its class's default unless that tile covers more than FIT_PADDING
    times the problems' area; then the first smaller class's that covers at most that, else the
    one that covers least. A CPU's kernel pads nothing: its batches keep their class's."""
    from gemmtune.space.defaults import FIT_PADDING, batch_fit, padding

    gpu = make_device(type="GPU", local_mem_bytes=226 << 10, fp64_matrix=True, compute_units=132)
    cpu = make_device(type="CPU", local_mem_bytes=1 << 20, max_work_group_size=4096, max_work_item_sizes=(4096,) * 3)
    for code in "sdcz":
        prec = get_precision(code)
        entry = {cls: shipped_default("GPU", prec, cls) for cls in ("batch_micro", "batch_tiny", "batch_small",
                                                                      "batch_medium", "batch_large")}
        # batch_large: d's large entry without stream-K; the others take their batch_medium entry
        if code == "d":
            large = shipped_default("GPU", prec, "large")
            assert {k for k, v in large.params.items() if entry["batch_large"].params[k] != v} == {"STREAMK"}
        else:
            assert entry["batch_large"] == entry["batch_medium"]
        assert entry["batch_micro"].kernel == "xgemm_direct" and entry["batch_micro"].params["MWG"] == 16
        expected = {(16, 16, 16): "batch_micro", (48, 48, 48): "batch_micro",      # 64 x 64 covers 1.78 times
                    (96, 96, 96): "batch_tiny",                                     # 128 x 64: 1.78; 32 x 32: 1
                    (128, 128, 128): "batch_medium", (300, 200, 150): "batch_medium",   # 1.64: kept
                    (64, 64, 64): "batch_small", (32, 32, 32): "batch_tiny", (8, 8, 512): "batch_micro",
                    (1024, 1024, 1024): "batch_large", (600, 520, 500): "batch_large",   # 1.18: kept
                    (700, 40, 5000): "batch_small"}                                     # 64 x 64: 1.61
        for shape, cls in expected.items():
            assert default_config(gpu, prec, shape, batch=100) == entry[cls], (code, shape)
            assert padding(entry[cls], *shape[:2]) <= FIT_PADDING or shape == (8, 8, 512)
            assert default_config(cpu, prec, shape, batch=100) == shipped_default("CPU", prec, shape_class(*shape, 100))
        # 100 problems are below WHOLE_GROUPS_PER_UNIT a compute unit; 1,000 are not: a batch whose
        # fitted tile takes several work-groups a problem, or pads more than FIT_PADDING, takes the
        # direct tile of its whole problem (24 and below: 8 x 8 work-items, slices of 8; above:
        # 16 x 8 work-items, slices of 16, the tile a multiple of 16)
        whole = {(48, 48, 48): (48, 48, 16, 8, 16), (40, 40, 40): (48, 48, 16, 8, 16), (20, 20, 20): (24, 24, 8, 8, 8),
                 (8, 8, 512): (8, 8, 8, 8, 8), (48, 24, 40): (48, 32, 16, 8, 16), (12, 40, 7): (16, 48, 16, 8, 16),
                 (12, 12, 12): (16, 16, 8, 8, 8)}
        for shape, (mwg, nwg, mdimc, ndimc, kwg) in whole.items():
            got = default_config(gpu, prec, shape, batch=1000)
            assert got == Config.of("xgemm_direct", {**entry["batch_micro"].params, "MWG": mwg, "NWG": nwg,
                                                     "MDIMC": mdimc, "NDIMC": ndimc, "KWG": kwg}), (code, shape)
            assert FAMILIES[got.kernel].broken(got.params, gpu, prec) is None
            assert default_config(gpu, prec, shape, batch=100) != got
            assert default_config(cpu, prec, shape, batch=1000) == shipped_default("CPU", prec, shape_class(*shape, 2))
        # one work-group a problem, padding at most FIT_PADDING: kept; larger than WHOLE: kept
        for shape in ((16, 16, 16), (32, 32, 32), (28, 28, 28), (64, 64, 64), (56, 56, 56), (49, 49, 49), (96, 96, 96)):
            assert default_config(gpu, prec, shape, batch=1000) == default_config(gpu, prec, shape, batch=100), shape
    # a GPU whose work-groups hold 64 work-items takes no whole tile: its largest would not fit
    narrow = make_device(type="GPU", local_mem_bytes=226 << 10, compute_units=132, max_work_group_size=64)
    s = get_precision("s")
    assert default_config(narrow, s, (48, 48, 48), batch=1000) == default_config(narrow, s, (48, 48, 48), batch=100)
    assert default_config(narrow, s, (48, 48, 48), batch=1000).kernel == "xgemm_direct"
    # the rule itself, on made-up tiles
    tiles = {"batch_medium": 128, "batch_small": 64, "batch_tiny": 32, "batch_micro": 16}
    made = {cls: Config.of("xgemm_direct", {**FAMILIES["xgemm_direct"].defaults, "MWG": t, "NWG": t, "MDIMC": 8,
                                            "NDIMC": 8}) for cls, t in tiles.items()}
    assert padding(made["batch_medium"], 96, 96) == pytest.approx(128 * 128 / 96 ** 2)
    assert batch_fit(made.get, "batch_medium", 100, 100) is made["batch_medium"]   # 1.64: its own
    assert batch_fit(made.get, "batch_medium", 96, 96) is made["batch_tiny"]       # the first that fits
    assert batch_fit(made.get, "batch_small", 8, 300) is made["batch_micro"]       # none fits: least covered
    assert batch_fit(made.get, "batch_micro", 4, 4) is made["batch_micro"]         # nothing smaller
    same = {cls: Config.of("xgemm_direct", {**made["batch_small"].params, "PADL": i}) for i, cls in enumerate(tiles)}
    assert batch_fit(same.get, "batch_small", 8, 8) is same["batch_small"]         # a tie keeps its own
