"""The command line, through click's CliRunner on gemmtune.cli.cli, on the PoCL device.

Bad input must end as exit code 2 with exactly one line, "Error: ...", on stderr and no
traceback. Cli.main always calls sys.exit; CliRunner records the code.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import BYTES, PARAMS, REPO, broken_rules, product, toml_space  # noqa: E402

import gemmtune.call.compute  # noqa: E402
from gemmtune.cli import cli, emit  # noqa: E402
from gemmtune.devices.opencl import list_devices, resolve_device  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.files.shipped import configs_dir  # noqa: E402
from gemmtune.space import describe, load_space  # noqa: E402
from gemmtune.space.valid import count_valid, iter_valid_configs, valid_configs  # noqa: E402
from gemmtune.measure.verify import Check  # noqa: E402

DEVICE_KEYS = {"index", "platform", "name", "vendor", "type", "opencl_version", "driver_version",
               "compute_units", "max_clock_mhz", "global_mem_bytes", "local_mem_bytes",
               "max_work_group_size", "max_work_item_sizes", "double_precision", "fp64_matrix", "registers_per_group",
               "vector_registers", "vector_bytes", "fallbacks"}
SPACE_KEYS = {*PARAMS, "kernel", "local_mem_bytes", "work_group_size"}
CHECK_KEYS = {"max_rel_error", "norm_rel_error", "tolerance", "passed", "componentwise_error"}
ISSUE_EXAMPLE = ["verify", "--device", "0", "--precision", "z", "--m", "33", "--n", "7", "--k", "129",
                 "--config", "TSM=16,TSN=32,TSK=8,WPTN=4,PAD=1"]


pytestmark = pytest.mark.usefixtures("no_tuned_results")


def run(args, env=None, code=0):
    result = CliRunner().invoke(cli, args, env=env)
    assert "Traceback" not in result.output
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def run_error(args, env=None) -> str:
    """Run a command that must fail on bad input; return its one error line."""
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


@pytest.fixture
def k5_space(tmp_path) -> Path:
    """The shipped [xgemm_k5] table alone (the shipped file may hold other families too)."""
    table = tomllib.loads((REPO / "configs" / "space.toml").read_text())["xgemm_k5"]
    path = tmp_path / "k5.toml"
    path.write_text(toml_space(table))
    return path


def k5_configs() -> list[dict]:
    return product(tomllib.loads((REPO / "configs" / "space.toml").read_text())["xgemm_k5"])


# ---------------------------------------------------------------- devices

def test_devices_json():
    found = json.loads(run(["devices", "--format", "json"]).stdout)
    assert isinstance(found, list) and found
    assert [d["index"] for d in found] == list(range(len(found)))
    for d in found:
        assert set(d) == DEVICE_KEYS
        for k in ("platform", "name", "vendor", "opencl_version", "driver_version"):
            assert isinstance(d[k], str) and d[k], k
        for k in ("index", "compute_units", "max_clock_mhz", "global_mem_bytes", "local_mem_bytes",
                  "max_work_group_size"):
            assert type(d[k]) is int and d[k] >= 0, k
        assert d["type"] in {"CPU", "GPU", "ACCELERATOR"}
        assert d["max_work_item_sizes"] and all(type(x) is int and x > 0 for x in d["max_work_item_sizes"])
        assert type(d["double_precision"]) is bool and type(d["fp64_matrix"]) is bool
    assert found == [d.to_json() for d in list_devices()]


def test_devices_table():
    out = run(["devices"]).stdout
    lines, _, notes = out.strip().partition("\n\n")   # the table, then a line per substituted value
    lines = lines.splitlines()
    assert lines[0].split()[0] == "index"
    assert len(lines) == 1 + len(list_devices())
    assert len(notes.splitlines()) == sum(len(d.fallbacks) for d in list_devices())
    for d, line in zip(list_devices(), lines[1:]):
        assert line.split()[0] == str(d.index) and d.name in line
        # a CPU's register file, as its compiler targets it (16 x 32 B for AVX2, 32 x 64 B for AVX-512)
        if d.type == "CPU":
            assert d.vector_registers in (16, 32) and d.vector_bytes in (16, 32, 64)
            assert line.rstrip().endswith(f"{d.vector_registers} x {d.vector_bytes} B")


# ---------------------------------------------------------------- space

def test_space_count_of_the_shipped_space_is_quick_and_small():
    # count_valid agrees with len(valid_configs) on reduced shipped spaces (test_space); listing
    # the whole shipped space for the comparison would take a minute and a gigabyte.
    # The GPU space (millions of configurations) on the PoCL device, whose own space is small.
    gpu_space = str(configs_dir() / "space.toml")
    expected = count_valid(load_space(gpu_space), resolve_device(0), get_precision("s"))
    # The command in a process of its own, whose peak memory its parent reads once it ends.
    probe = ("import resource, subprocess, sys, time; t = time.monotonic(); "
             f"out = subprocess.run([sys.executable, '-m', 'gemmtune', 'space', '--count', '--space', {gpu_space!r}], check=True, "
             "capture_output=True, text=True).stdout; "
             "print(out.strip(), time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    count, seconds, peak_kib = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                                              text=True).stdout.split()
    # What the drivers take (Intel's runtime about 90 MiB once loaded), from a process that
    # opens the device and counts nothing
    opened = ("import resource, subprocess, sys; subprocess.run([sys.executable, '-c', "
              "'from gemmtune.devices.opencl import open_device; open_device(0)'], check=True); "
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    drivers_kib = int(subprocess.run([sys.executable, "-c", opened], check=True, capture_output=True, text=True).stdout)
    assert int(count) == expected > 1_000_000
    assert int(peak_kib) - drivers_kib < 80 * 1024, "the count should not hold the configurations"
    # Listing them took a minute; counting, 2-3 s (the bound leaves room for a busy machine).
    assert float(seconds) < 30


def test_space_streams_its_first_rows_at_once_and_stops_quietly_when_the_reader_does():
    first = next(iter_valid_configs(load_space(device=resolve_device(0)), resolve_device(0), get_precision("s")))
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gemmtune", "space", "--format", "csv"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        header, row = proc.stdout.readline(), proc.stdout.readline()
        waited = time.monotonic() - start
        proc.stdout.close()   # as `| head -2` does: the next write finds no reader
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == ""
    finally:
        proc.kill()
        proc.wait()
    # Listing the 2.36 million configurations before the first row took over a minute.
    assert waited < 20
    names = header.strip().split(",")
    expected = describe(first, get_precision("s"))
    assert {k: v for k, v in zip(names, row.strip().split(",")) if v} == {k: str(v) for k, v in expected.items()}


@pytest.mark.parametrize("code", ["s", "z"])
@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_space_streamed_is_what_the_list_printed(k5_space, code, fmt):
    """The streamed output, byte for byte, is what emit() printed from the whole list."""
    prec = get_precision(code)
    rows = [describe(c, prec) for c in valid_configs(load_space(k5_space), resolve_device(0), prec)]
    listed = CliRunner().invoke(click.command()(lambda: emit(rows, fmt))).stdout
    assert run(["space", "--precision", code, "--space", str(k5_space), "--format", fmt]).stdout == listed


def test_space_of_two_families_gives_each_row_its_own_parameters(tmp_path):
    k5 = dict(TSM=[16, 32], TSN=[16, 64], TSK=[8, 16], WPTN=[2], PAD=[0, 1], TRANSPOSEX=[8], TRANSPOSEY=[8])
    rt = dict(MWG=[32, 64], NWG=[32], KWG=[16], MDIMC=[8, 16], NDIMC=[8], VWG=[1, 2], STAGE=[0, 1],
              TRANSPOSEX=[16], TRANSPOSEY=[8], TRANSPOSEW=[1])
    path = tmp_path / "two.toml"
    path.write_text(toml_space(k5) + toml_space(rt, "xgemm_rt"))
    prec = get_precision("s")
    expected = [describe(c, prec) for c in valid_configs(load_space(path), resolve_device(0), prec)]
    assert {r["kernel"] for r in expected} == {"xgemm_k5", "xgemm_rt"}
    base = ["space", "--space", str(path), "--format"]
    assert json.loads(run([*base, "json"]).stdout) == expected
    parsed = list(csv.DictReader(io.StringIO(run([*base, "csv"]).stdout)))
    assert [{k: v for k, v in r.items() if v != ""} for r in parsed] == [
        {k: str(v) for k, v in r.items()} for r in expected]
    table = run([*base, "table"]).stdout.splitlines()
    names = table[0].split()
    assert len(table) == 1 + len(expected)
    for line, r in zip(table[1:], expected):
        assert dict(zip(names, line.split())) == {n: str(r[n]) if n in r else "-" for n in names}


HEAVY = ("optuna", "pandas", "sqlalchemy", "scipy", "matplotlib")


@pytest.mark.parametrize("args", [[], ["--help"], ["search", "--trials", "0"], ["verify", "--trans-a", "X"],
                                  ["verify", "--config", "TSM"], ["bench", "--sizes", "x"]])
def test_start_up_and_bad_input_import_no_heavy_module(args):
    # Each of these took 1-2 s more on a 2-core machine; a new import at the top of a module on
    # the way to gemmtune.cli would bring it back.
    child = ("import atexit, sys\n"
             f"atexit.register(lambda: print('heavy:', *sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
             "import gemmtune.cli\n"
             f"sys.argv = ['gemmtune', *{args!r}]\n"
             "gemmtune.cli.main() if len(sys.argv) > 1 else None\n")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert done.returncode == (0 if args in ([], ["--help"]) else 2), done.stderr
    assert done.stdout.splitlines()[-1] == "heavy:"


@pytest.mark.parametrize("code", ["s", "z"])
def test_space_count_matches_json_and_library(k5_space, code):
    expected = len(valid_configs(load_space(k5_space), resolve_device(0), get_precision(code)))
    base = ["space", "--precision", code, "--size", "64", "--space", str(k5_space)]
    assert int(run([*base, "--count"]).stdout) == expected > 0
    rows = json.loads(run([*base, "--format", "json"]).stdout)
    assert len(rows) == expected
    assert all(set(r) == SPACE_KEYS for r in rows)


@pytest.mark.parametrize("code", ["s", "c"])
def test_space_json_csv_rows(k5_space, code):
    dev = resolve_device(0)
    base = ["space", "--precision", code, "--space", str(k5_space), "--size", "100"]
    rows = json.loads(run([*base, "--format", "json"]).stdout)
    assert all(set(r) == SPACE_KEYS for r in rows)
    # The valid set is the issue's rules applied to the product of the table, on this device.
    params = [{k: r[k] for k in PARAMS} for r in rows]
    expected = [p for p in k5_configs() if not broken_rules(p, dev, code)]
    assert sorted(map(sorted, map(dict.items, params))) == sorted(map(sorted, map(dict.items, expected)))
    for r in rows:
        assert r["kernel"] == "xgemm_k5"
        assert r["work_group_size"] == r["TSM"] * r["TSN"] // r["WPTN"]
        assert r["local_mem_bytes"] == (r["TSK"] * r["TSM"] + r["TSN"] * (r["TSK"] + r["PAD"])) * BYTES[code]
    parsed = list(csv.DictReader(io.StringIO(run([*base, "--format", "csv"]).stdout)))
    assert parsed == [{k: str(v) for k, v in r.items()} for r in rows]
    assert int(run([*base, "--count"]).stdout) == len(rows)
    table = run(base).stdout.strip().splitlines()
    assert set(table[0].split()) == SPACE_KEYS and len(table) == 1 + len(rows)


def _explain_expected(dev, code):
    broken = [broken_rules(p, dev, code) for p in k5_configs()]
    return Counter(b[0] for b in broken if b), Counter(n for b in broken for n in b), len(broken)


def test_space_explain_json(tmp_path):
    # A device-independent space whose constraints 1 and 3 remove something on any device.
    dev, code = resolve_device(0), "s"
    table = dict(TSM=[8, 16], TSN=[12, 16], TSK=[2, 16], WPTN=[1, 2, 3], PAD=[0, 1], TRANSPOSEX=[8], TRANSPOSEY=[8])
    path = tmp_path / "small.toml"
    path.write_text(toml_space(table))
    got = json.loads(run(["space", "--space", str(path), "--explain", "--format", "json"]).stdout)
    configs = product(table)
    broken = [broken_rules(p, dev, code) for p in configs]
    first, every = Counter(b[0] for b in broken if b), Counter(n for b in broken for n in b)
    assert first[1] and first[3], "test space should exercise constraints 1 and 3"
    assert got["total"] == len(configs)
    assert got["valid"] == len(configs) - sum(first.values())
    assert {c["constraint"]: (c["removed"], c["broken"]) for c in got["constraints"]} == {
        n: (first[n], every[n]) for n in range(1, 6)}


def test_space_explain_table(k5_space):
    dev = resolve_device(0)
    out = run(["space", "--space", str(k5_space), "--explain"]).stdout
    first, every, total = _explain_expected(dev, "s")
    # One row per constraint, in order, after the header; the counts are whole cells of the row.
    rows = out.strip().splitlines()[1:6]
    for n, row in zip(range(1, 6), rows):
        cells = row.split()
        assert str(n) in cells and str(first[n]) in cells and str(every[n]) in cells, row
    valid = total - sum(first.values())
    assert f"{total} configurations" in out and f"{valid} valid" in out


def test_space_size_and_m_n_k_give_the_same_space(k5_space):
    base = ["space", "--space", str(k5_space), "--format", "json"]
    by_size = run([*base, "--size", "7"]).stdout
    assert json.loads(by_size)
    assert by_size == run([*base, "--m", "7", "--n", "7", "--k", "7"]).stdout


@pytest.mark.parametrize("args, shape", [
    (["--size", "5"], (5, 5, 5)),
    (["--m", "3", "--n", "4", "--k", "30"], (3, 4, 30)),
    (["--size", "5", "--k", "7"], (5, 5, 7)),   # --m/--n/--k override single dimensions
    ([], (1024, 1024, 1024)),
])
def test_shape_options_reach_the_library(monkeypatch, args, shape):
    seen = []

    def spy(device, prec, m, n, k, **kwargs):
        seen.append((m, n, k))
        return Check(0.0, 0.0, 0.0, 1e-6, True)

    monkeypatch.setattr(gemmtune.call.compute, "verify_config", spy)
    run(["verify", *args])
    assert seen == [shape]


# ---------------------------------------------------------------- choosing a device

def test_device_spec_forms_and_environment(k5_space):
    base = ["space", "--count", "--space", str(k5_space)]
    count = run(base).stdout
    assert int(count) > 0
    assert run([*base, "--device", "0"]).stdout == count
    assert run([*base, "--device", "0:0"]).stdout == count
    assert run(base, env={"GEMMTUNE_DEVICE": "0:0"}).stdout == count
    # An explicit --device wins over the environment.
    assert run([*base, "--device", "0"], env={"GEMMTUNE_DEVICE": "99"}).stdout == count


@pytest.mark.parametrize("env, args", [
    ({"GEMMTUNE_DEVICE": "99"}, []),
    ({"GEMMTUNE_DEVICE": "x:y"}, []),
    (None, ["--device", "99"]),
    (None, ["--device", "0:99"]),
    (None, ["--device", "x:y"]),
], ids=["env-index", "env-spec", "index", "platform-device", "garbage"])
@pytest.mark.parametrize("command", ["space", "verify"])
def test_unknown_device(command, env, args):
    line = run_error([command, *args, "--size", "8"], env=env)
    # The message names the devices there are.
    for d in list_devices():
        assert d.name in line


# ---------------------------------------------------------------- bad input

SPACE_FILES = {
    "bad-toml": "[xgemm_k5\nTSM = [16]\n",
    "zero": "[xgemm_k5]\nTSM = [16, 0]\n",
    "negative": "[xgemm_k5]\nTSN = [-8]\n",
    "fraction": "[xgemm_k5]\nTSK = [1.5]\n",
    "string": "[xgemm_k5]\nWPTN = [\"2\"]\n",
    "bool": "[xgemm_k5]\nTRANSPOSEX = [true]\n",
    "unknown-family": "[nosuchkernel]\nTSM = [16]\n",
    "unknown-parameter": "[xgemm_k5]\nTSQ = [16]\n",
}


@pytest.mark.parametrize("name", SPACE_FILES)
def test_bad_space_file(tmp_path, name):
    path = tmp_path / f"{name}.toml"
    path.write_text(SPACE_FILES[name])
    run_error(["space", "--space", str(path)])


def test_unreadable_space_file(tmp_path):
    line = run_error(["space", "--space", str(tmp_path / "missing.toml")])
    assert "missing.toml" in line


@pytest.mark.parametrize("args, needle", [
    (["space", "--size", "0"], "--size"),
    (["space", "--m", "0"], "--m"),
    (["space", "--n", "-4"], "--n"),
    (["space", "--k", "x"], "--k"),
    (["space", "--precision", "q"], "--precision"),
    (["verify", "--size", "0"], "--size"),
    (["verify", "--precision", "h"], "--precision"),
    (["verify", "--size", "8", "--config", "TSM"], "TSM"),
    (["verify", "--size", "8", "--config", "TSM=abc"], "TSM"),
    (["verify", "--size", "8", "--config", "TSM=16,,=4"], "=4"),
    (["verify", "--size", "8", "--config", "TSQ=16"], "TSQ"),
    (["verify", "--size", "8", "--config", "TSM=0"], "TSM"),
    (["verify", "--size", "8", "--config", "WPTN=-1"], "WPTN"),
    (["devices", "--format", "xml"], "--format"),
])
def test_bad_input(args, needle):
    assert needle in run_error(args)


@pytest.mark.parametrize("config, number", [("TSN=24,WPTN=16", 1), ("TSM=16,TSN=32,TSK=4,WPTN=4", 3)])
def test_verify_refuses_a_configuration_outside_the_space(config, number):
    line = run_error(["verify", "--size", "8", "--config", config])
    assert f"constraint {number}" in line


# ---------------------------------------------------------------- verify

def test_verify_issue_example():
    out = run(ISSUE_EXAMPLE).stdout
    assert any(line.split() == ["passed", "True"] for line in out.splitlines()), out
    got = json.loads(run([*ISSUE_EXAMPLE, "--format", "json"]).stdout)
    assert set(got) == CHECK_KEYS
    assert got["passed"] is True
    assert all(isinstance(got[k], float) for k in CHECK_KEYS - {"passed"})
    assert 0 <= got["componentwise_error"] <= got["tolerance"]
    assert 0 <= got["norm_rel_error"] <= got["tolerance"]
    # Double precision is judged at double precision: a kernel that computed in single precision
    # (errors ~1e-7) must fail.
    assert got["tolerance"] < 2.0**-24


@pytest.mark.parametrize("args", [
    ["--precision", "s", "--m", "17", "--n", "33", "--k", "65"],
    ["--precision", "c", "--size", "19", "--trans-a", "C", "--trans-b", "T", "--alpha", "0.5", "--beta", "-1.5"],
    ["--precision", "d", "--m", "2", "--n", "3", "--k", "300", "--trans-a", "T", "--beta", "2"],
])
def test_verify_default_config(args):
    got = json.loads(run(["verify", *args, "--format", "json", "--seed", "3"]).stdout)
    assert got["passed"] is True and got["componentwise_error"] <= got["tolerance"]


@pytest.mark.parametrize("defect", ["wrong element", "NaN element"])
def test_verify_failing_check_exits_1(monkeypatch, defect):
    real = gemmtune.call.compute.gemm

    def broken_gemm(*args, **kwargs):
        c = real(*args, **kwargs)
        c[1, 2] = np.nan if defect == "NaN element" else c[1, 2] * 1.01 + 0.01
        return c

    monkeypatch.setattr(gemmtune.call.compute, "gemm", broken_gemm)
    result = run([*ISSUE_EXAMPLE, "--format", "json"], code=1)
    assert json.loads(result.stdout)["passed"] is False
    assert "Error" not in result.output


def test_help_lists_the_commands():
    out = run(["--help"]).stdout
    for command in ("devices", "space", "verify"):
        assert command in out


def test_a_device_that_builds_nothing_stops_the_search_before_any_trial(tmp_path):
    # PoCL refuses every build given an option it does not know; a PoCL whose LLVM cannot name
    # the processor fails every build alike ("unknown target CPU 'generic'").
    db = tmp_path / "r.db"
    line = run_error(["search", "--device", "0", "--timeout", "5", "--db", f"sqlite:///{db}"],
                     env={"POCL_EXTRA_BUILD_FLAGS": "-Xclang"})
    assert line.startswith("Error: device 0 (") and line.endswith(
        "cannot build an OpenCL program: Invalid build option: -Xclang"), line
    assert not db.exists()   # nothing written


def test_a_pocl_that_cannot_name_the_processor_is_told_what_to_install():
    from gemmtune.execution.child import cannot_build

    log = ("clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\n"
           "Build on <pyopencl.Device 'pthread-AMD EPYC' on 'Portable Computing Language'>:\n\n"
           "error: unknown target CPU 'generic'\nDevice pthread-AMD EPYC failed to build the program\n\n(options: -I x)")
    text = cannot_build(1, "pthread-AMD EPYC", log)
    assert text.startswith("device 1 (pthread-AMD EPYC) cannot build an OpenCL program: "
                           "error: unknown target CPU 'generic'; ")
    assert "apt-get install pocl-opencl-icd" in text
    other = cannot_build(0, "GPU", "Build on <GPU>:\n\n:1:1: error: unknown type name 'kernal'\n")
    assert other == "device 0 (GPU) cannot build an OpenCL program: :1:1: error: unknown type name 'kernal'"
