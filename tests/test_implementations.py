"""Every OpenCL implementation: what drivers report wrongly, and a representative run on each.

The first tests need no OpenCL: a device whose driver reports 0 MHz and 0 compute units (and
worse) goes through the model, the space, the seeds, the defaults and the report. The rest run
on each implementation of the ``implementation`` fixture (tests/conftest.py): PoCL and Intel's
CPU runtime. They are few and small, each precision once: the whole suite runs on PoCL already.
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import DTYPES, SMALL_SPACE, make_device, numpy_product, uniform, worst_case_tolerance  # noqa: E402

from gemmtune.cli import cli  # noqa: E402
from gemmtune.devices.info import DeviceInfo  # noqa: E402
from gemmtune.precision import PRECISIONS, get_precision  # noqa: E402

# A driver at its worst: nothing it reports about size or speed is usable.
ZEROS = dict(compute_units=0, max_clock_mhz=0, local_mem_bytes=0, max_work_group_size=0,
             max_work_item_sizes=(0, 0, 0), global_mem_bytes=0)


def fake_cl_device(kind: str = "GPU", **reported):
    """An object that answers what devices/opencl.py asks of a pyopencl Device, reporting ``reported``."""
    import pyopencl as cl

    values = dict(type=getattr(cl.device_type, kind), name="Fake", vendor="Fake", version="OpenCL 3.0",
                  driver_version="0.1", max_compute_units=0, max_clock_frequency=0, global_mem_size=0,
                  local_mem_size=0, max_work_group_size=0, max_work_item_sizes=[0, 0, 0], double_fp_config=0,
                  max_mem_alloc_size=0, extensions="", int_ptr=1)
    values.update(reported)
    return SimpleNamespace(platform=SimpleNamespace(name="Fake platform"), **values)


def test_a_driver_reporting_zeros_is_described_with_fallbacks_it_names():
    from gemmtune.devices import opencl as device

    info = device._info(3, 0, 0, device.cl.get_platforms()[0], fake_cl_device())
    assert info.compute_units == 1 and info.max_clock_mhz > 0 and info.local_mem_bytes > 0
    assert info.max_work_group_size > 0 and info.global_mem_bytes > 0
    assert len(info.max_work_item_sizes) == 3 and min(info.max_work_item_sizes) > 0
    assert set(info.substituted) == {"compute_units", "max_clock_mhz", "local_mem_bytes", "max_work_group_size",
                                     "max_work_item_sizes", "global_mem_bytes"}
    assert info.substituted["max_clock_mhz"].startswith("reported 0; ")
    # the plans' compute units are judged the same way
    assert device.compute_units(fake_cl_device()) == 1
    # what a driver reports well is kept, with no fallback named
    good = device._info(0, 0, 0, device.cl.get_platforms()[0], fake_cl_device(
        max_compute_units=4, max_clock_frequency=1500, global_mem_size=1 << 33, local_mem_size=65536,
        max_work_group_size=1024, max_work_item_sizes=[1024, 1024, 64]))
    assert (good.compute_units, good.max_clock_mhz, good.local_mem_bytes, good.fallbacks) == (4, 1500, 65536, ())


def test_a_cpu_reporting_zeros_takes_the_hosts_cores_and_clock():
    from gemmtune.devices.info import host_clock_mhz, host_cores

    dev = make_device(type="CPU", **ZEROS)
    assert dev.compute_units == host_cores()
    assert dev.max_clock_mhz == (host_clock_mhz() or 1000)
    # the description keeps its fallbacks through JSON (a stored description, a prior's)
    again = DeviceInfo.from_json(json.loads(json.dumps(dev.to_json())))
    assert again == dev and again.to_json()["fallbacks"] == dev.substituted


def test_absurd_values_are_replaced_and_small_real_ones_kept():
    absurd = make_device(max_clock_mhz=10**9, compute_units=-3, local_mem_bytes=1 << 40, max_work_item_sizes=(64,))
    assert absurd.max_clock_mhz == 1000 and absurd.compute_units == 1
    assert absurd.local_mem_bytes == 32 * 1024 and absurd.max_work_item_sizes == (64, 1024, 1024)
    small = make_device(type="CPU", local_mem_bytes=4096, max_work_group_size=1, max_work_item_sizes=(1, 1, 1))
    assert small.fallbacks == () and small.max_work_group_size == 1


def test_disagreeing_fp64_reports_are_settled_by_a_build(monkeypatch):
    from gemmtune.devices import opencl as device

    monkeypatch.setattr(device, "_probe", lambda d, source: "")   # no double kernel builds
    says_yes = fake_cl_device(double_fp_config=63)                 # but no cl_khr_fp64
    assert device.double_precision(says_yes) == (False, "double_fp_config says True, the extensions False; "
                                                        "a double kernel does not build")
    monkeypatch.setattr(device, "_probe", lambda d, source: "twice")
    info = device._info(0, 0, 0, device.cl.get_platforms()[0], fake_cl_device(extensions="cl_khr_fp64"))
    assert info.double_precision and "double_precision" in info.substituted


@pytest.mark.parametrize("kind", ["CPU", "GPU"])
def test_model_space_seeds_and_defaults_on_a_device_reporting_zeros(kind, tmp_path):
    from gemmtune.space.defaults import default_config
    from gemmtune.models import analytic, learned
    from gemmtune.bench.peak import PeakSizes
    from gemmtune.space import load_space
    from gemmtune.space.valid import ValidConfigs

    dev = make_device(type=kind, **ZEROS)
    # the CPU's shipped space; a small one for the GPU, whose shipped one takes minutes to sample
    (tmp_path / "small.toml").write_text(SMALL_SPACE)
    space = load_space(device=dev) if kind == "CPU" else load_space(str(tmp_path / "small.toml"))
    for code in "sdcz":
        prec = get_precision(code)
        valid = ValidConfigs(space, dev, prec).sample(300, random.Random(1))
        assert valid, code
        # (on the GPU, whose shipped defaults outgrow the assumed limits, their repair would
        # search the whole shipped space)
        defaults = [default_config(dev, prec, (100, 90, 80))] if kind == "CPU" else []
        for config in (*defaults, *valid[:20]):
            p = analytic.predict(config, dev, prec, 100, 90, 80)
            assert math.isfinite(p.time_s) and p.time_s > 0 and p.gflops > 0
        # stored peaks that are no measurement (0, negative) are not used
        assert analytic.resolve_peaks(dev, prec, {code: 0.0, "bandwidth": -1.0}) == analytic.resolve_peaks(dev, prec)
        assert analytic.best_tilings(valid, dev, prec, 100, 90, 80, count=3)
        assert learned.seeds(valid, learned.DeviceProblem(dev, prec, 100, 90, 80), count=3)
    assert PeakSizes().madd_items(dev) > 0 and PeakSizes().copy_bytes(dev) > 0


def test_stream_k_plans_on_a_driver_reporting_zero_compute_units(monkeypatch):
    """gemm and Gemm split stream-K's last tiles over the judged compute units, not the reported
    0 (which made the split divide by zero)."""
    import pyopencl as cl
    import pyopencl.array as cla

    import gemmtune
    from gemmtune.devices.opencl import open_device

    monkeypatch.setattr(cl.Device, "max_compute_units", property(lambda self: 0))
    config = dict(MWG=16, NWG=16, KWG=8, MDIMC=4, NDIMC=4, VWG=1, VLM=1, VLN=1, PIPE=6, PADL=0, UNROLL=1,
                  BKFAST=0, WARPM=0, STAGE=1, STREAMK=1, TRANSPOSEX=8, TRANSPOSEY=8)
    rng = np.random.default_rng(11)
    m, n, k = 11, 16 * 7 - 3, 35      # row-major: the column-major problem is 109 x 11, 7 tiles of M
    a, b = uniform((m, k), np.float32, rng), uniform((k, n), np.float32, rng)
    value, scale = numpy_product(a, b, None, 1.0, 0.0, "N", "N")
    tolerance = worst_case_tolerance(np.float32, k, scale)
    got = gemmtune.gemm(a, b, np.full((m, n), np.nan, np.float32), config=config, device=0)
    np.testing.assert_allclose(got, value, rtol=0, atol=tolerance)
    _, cl_dev = open_device(0)
    context = cl.Context([cl_dev])
    queue = cl.CommandQueue(context)
    c = cla.to_device(queue, np.full((m, n), np.nan, np.float32))
    gemmtune.Gemm(queue, "s", config=config)(cla.to_device(queue, a), cla.to_device(queue, b), c)
    np.testing.assert_allclose(c.get(), value, rtol=0, atol=tolerance)


def test_report_with_a_stored_description_of_zeros(tmp_path, add_result):
    dev = make_device(type="CPU", name="Zero CPU", platform="Zero", driver_version="0")
    db = tmp_path / "r.db"
    add_result(db, device=dev.key, device_name=dev.name, kernel="xgemm_cpu",
               params={"VW": 8, "MV": 1, "NR": 4, "KU": 1, "NB": 1, "KC": 0, "WGS": 1, "ORDER": 0,
                       "PACKA": 1, "PACKB": 0})
    from gemmtune.db.store import Store

    store = Store(f"sqlite:///{db}")
    store.save_device(dev)
    store.close()
    raw = {**dev.to_json(), **ZEROS, "max_work_item_sizes": [0, 0, 0]}
    raw.pop("fallbacks")                     # as an older gemmtune or another tool stored it
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE devices SET info = ?", (json.dumps(raw),))
    result = CliRunner().invoke(cli, ["report", "--db", f"sqlite:///{db}", "--model", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows and all(r["predicted_gflops"] > 0 for r in rows)


# ---------------------------------------------------------------- on each implementation

pytestmark = pytest.mark.usefixtures("no_tuned_results")
SHAPES = {"s": ((33, 17, 9), "N", "N"), "d": ((65, 31, 47), "T", "N"), "c": ((19, 40, 21), "N", "C"),
          "z": ((1, 30, 20), "T", "T")}


@pytest.mark.parametrize("code", "sdcz")
def test_shipped_defaults_are_right_through_gemm_Gemm_and_verify(implementation, code):
    import pyopencl as cl

    import gemmtune
    from gemmtune.call.compute import verify_config
    from gemmtune.devices.opencl import open_device

    (m, n, k), ta, tb = SHAPES[code]
    dtype, rng = DTYPES[code], np.random.default_rng([m, n, k, "sdcz".index(code)])
    a = uniform((m, k) if ta == "N" else (k, m), dtype, rng)
    b = uniform((k, n) if tb == "N" else (n, k), dtype, rng)
    poisoned = np.full((m, n), np.nan, dtype=dtype)     # beta = 0: must not be read
    got = gemmtune.gemm(a, b, poisoned, alpha=-1.5, beta=0.0, trans_a=ta, trans_b=tb, device=implementation.index)
    value, scale = numpy_product(a, b, poisoned, -1.5, 0.0, ta, tb)
    np.testing.assert_allclose(got, value, rtol=0, atol=worst_case_tolerance(dtype, k, scale))

    # Gemm on views with offsets into larger device arrays; outside c's view stays NaN
    import pyopencl.array as cla

    _, cl_dev = open_device(implementation.index)
    # the context kept: Intel's runtime frees a context its queue outlives (docs/implementations.md)
    context = cl.Context([cl_dev])
    queue = cl.CommandQueue(context)
    big_c = np.full((m + 2, n + 3), np.nan, dtype=dtype)
    c = uniform((m, n), dtype, rng)
    big_c[1:1 + m, 2:2 + n] = c
    a_dev = cla.to_device(queue, np.pad(a, ((1, 0), (2, 0))))[1:, 2:]
    c_dev = cla.to_device(queue, big_c)
    gemmtune.Gemm(queue, code)(a_dev, cla.to_device(queue, b), c_dev[1:1 + m, 2:2 + n], alpha=0.75, beta=-1.25,
                               trans_a=ta, trans_b=tb)
    out = c_dev.get()
    value, scale = numpy_product(a, b, c, 0.75, -1.25, ta, tb)
    np.testing.assert_allclose(out[1:1 + m, 2:2 + n], value, rtol=0, atol=worst_case_tolerance(dtype, k, scale))
    outside = np.ones(out.shape, bool)
    outside[1:1 + m, 2:2 + n] = False
    assert np.isnan(out[outside]).all()

    check = verify_config(implementation.index, PRECISIONS[code], m, n, k, trans_a=ta, trans_b=tb, seed=3)
    assert check.passed, check


@pytest.mark.parametrize("code, whole", [("s", True), ("d", True), ("s", False)])
def test_batches_of_the_cpu_family_on_each_implementation(implementation, code, whole):
    """A batch through gemm with the shipped batch defaults: many small problems, each
    work-item computing whole ones (its problems' blocks walked a launch's width apart), or too
    few for that, a work-item a block. Every problem against numpy in double precision."""
    from gemmtune.call.batched import batch_config
    from gemmtune.families import FAMILIES
    from gemmtune.families.cpu import whole_problems
    from gemmtune.launch.plan import Problem

    import gemmtune

    prec, rng = get_precision(code), np.random.default_rng()
    m, n, k = 37, 29, 23                          # ragged blocks of every default
    units = implementation.compute_units
    count = units * 8 * 3 + 5 if whole else 3
    problem = Problem(n, m, k, "T", "N", batch=count)   # column-major C^T = b a^T, as gemm hands it on
    config = batch_config(None, implementation, prec, (n, m, k), ("T", "N"), None, count)
    assert config.kernel == "xgemm_cpu" and whole_problems(problem, units, config.params["WGS"]) == whole
    plan = FAMILIES["xgemm_cpu"].plan(config.params, prec, problem, implementation, units)
    assert (plan.launches[-1].global_size[:2] == (config.params["WGS"], 1)) == whole
    a = uniform((count, m, k), DTYPES[code], rng)
    b = uniform((count, n, k), DTYPES[code], rng)       # op(b) = b^T of each problem
    got = gemmtune.gemm(a, b, trans_b=True, device=implementation.index)
    wide = np.matmul(a.astype(np.float64), np.swapaxes(b.astype(np.float64), -1, -2))
    scale = np.matmul(np.abs(a.astype(np.float64)), np.abs(np.swapaxes(b.astype(np.float64), -1, -2)))
    np.testing.assert_allclose(got, wide, rtol=0, atol=worst_case_tolerance(DTYPES[code], k, scale))


def test_search_runs_to_the_end_and_its_results_report_export_and_compute(implementation, tmp_path):
    import gemmtune

    db = f"sqlite:///{tmp_path / 'r.db'}"
    result = CliRunner().invoke(cli, ["search", "--device", str(implementation.index), "--db", db, "-q",
                                      "--m", "24", "--n", "20", "--k", "16", "--precision", "d", "--trials", "3",
                                      "--time-cap", "0.05", "--seed", "2"])
    assert result.exit_code == 0, result.output
    report = CliRunner().invoke(cli, ["report", "--db", db, "--model", "--format", "json"])
    assert report.exit_code == 0, report.output
    (row,) = json.loads(report.stdout)
    assert row["device"] == implementation.key and row["gflops"] > 0 and row["predicted_gflops"] > 0
    header = tmp_path / "tuned.h"
    export = CliRunner().invoke(cli, ["export", "--db", db, "--output", str(header)])
    assert export.exit_code == 0, export.output
    assert "xgemm" in header.read_text()
    # the tuned configuration, as gemm finds it in the database, is right
    rng = np.random.default_rng(5)
    a, b = uniform((24, 16), np.float64, rng), uniform((16, 20), np.float64, rng)
    got = gemmtune.gemm(a, b, np.full((24, 20), np.nan), device=implementation.index, db=db)
    np.testing.assert_allclose(got, a @ b, rtol=0, atol=worst_case_tolerance(np.float64, 16, np.abs(a) @ np.abs(b)))


def test_peak_measures_without_passing_on_build_remarks(implementation):
    import warnings

    from gemmtune.bench.peak import PeakSizes, run_peak
    from gemmtune.measure.timing import TimingPolicy

    sizes = PeakSizes(iterations=256, copy_mib=1, policy=TimingPolicy(warmup=1, max_repeats=6, max_seconds=0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # Intel's runtime remarks on every build
        run = run_peak(implementation.index, "s,z", sizes=sizes, save=False)
    assert [p.quantity for p in run.peaks] == ["s", "z", "bandwidth"] and all(p.value > 0 for p in run.peaks)


def test_a_cpu_register_file_is_what_its_compiler_targets(implementation):
    from gemmtune.space.defaults import table_name
    from gemmtune.devices.opencl import HOST_REGISTER_FILES, host_register_file

    file = (implementation.vector_registers, implementation.vector_bytes)
    assert file in [f for _, f in HOST_REGISTER_FILES]
    if implementation.platform == "Intel(R) OpenCL":
        # SPIR in its front end, the host's instruction set in its back end
        assert file == host_register_file() and "vector_registers" in implementation.substituted
    assert table_name(implementation) == ("CPU-256" if file[1] == 32 else "CPU")


def test_a_spir_compilers_register_file_follows_its_target_arch(monkeypatch):
    from gemmtune.devices.opencl import host_register_file, spir_register_file

    monkeypatch.delenv("CL_CONFIG_CPU_TARGET_ARCH", raising=False)
    assert spir_register_file()[:2] == host_register_file()
    for arch, file in (("core-avx2", (16, 32)), ("skx", (32, 64)), ("corei7", (16, 16))):
        monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", arch)
        count, size, why = spir_register_file()
        assert (count, size) == file and arch in why


# ---------------------------------------------------------------- finding Intel's runtime

def _platforms(env: dict) -> list[str]:
    code = "from gemmtune.devices.opencl import list_devices; print('\\n'.join(d.platform for d in list_devices()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "Traceback" not in out.stderr, out.stderr
    return out.stdout.split("\n")


def test_intel_runtime_is_found_beside_the_systems_drivers_and_can_be_turned_off(tmp_path):
    from gemmtune.devices.icd import pip_intel_opencl

    if pip_intel_opencl() is None:
        if os.environ.get("CI") == "true" or "intel" in os.environ.get("GEMMTUNE_TEST_IMPLEMENTATIONS", ""):
            pytest.fail("intel-opencl-rt is not installed: the test extra installs it")
        pytest.skip("intel-opencl-rt is not installed")
    base = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_VENDORS", "GEMMTUNE_INTEL_OPENCL")}
    found = _platforms(base)
    assert "Intel(R) OpenCL" in found and "Portable Computing Language" in found
    # Intel's after the drivers of the system's vendors directory: their indices do not move
    assert found.index("Intel(R) OpenCL") > found.index("Portable Computing Language")
    assert "Intel(R) OpenCL" not in _platforms({**base, "GEMMTUNE_INTEL_OPENCL": "0"})
    # where gemmtune's cache cannot be written, a temporary directory serves
    (tmp_path / "gemmtune").write_text("a file where the cache's directory would be")
    assert _platforms({**base, "XDG_CACHE_HOME": str(tmp_path)}) == found
    # a vendors directory a parent made and something removed since is made again
    made = {**base, "OCL_ICD_VENDORS": str(Path(os.environ["OCL_ICD_VENDORS"]).parent / "0000000000000000")}
    assert _platforms(made) == found
    # a library that is not there breaks nothing
    assert _platforms({**base, "GEMMTUNE_INTEL_OPENCL": "/nonexistent/libintelocl.so"}) == \
        _platforms({**base, "GEMMTUNE_INTEL_OPENCL": "0"})
