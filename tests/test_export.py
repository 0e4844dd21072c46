"""gemmtune export: the JSON layout and the C header, round-tripped against the results table,
best_config, and the kernel sources compiled and run through pyopencl."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest
from click.testing import CliRunner

from helpers_foundation import sql

import gemmtune
from gemmtune.cli import cli
from gemmtune.space.defaults import shipped_default
from gemmtune.devices.opencl import open_device, resolve_device
from gemmtune.export import device_macro
from gemmtune.families import FAMILIES
from gemmtune.launch.operation import GemmOperation
from gemmtune.precision import get_precision
from gemmtune.files.shipped import load_kernel_source
from gemmtune.space import RESERVED, Config
from gemmtune.measure.verify import Reference, compare, random_matrix

FANCY = "Test | Fancy GPU 9000 | 1.0"
KERNEL = "xgemm_k5"


def best_by_sql(db: Path) -> dict[tuple, dict]:
    rows = sql(db, "SELECT * FROM results r WHERE status = 'ok' AND gflops = (SELECT MAX(gflops) FROM results x "
                   "WHERE x.status = 'ok' AND x.device = r.device AND x.precision = r.precision "
                   "AND x.m = r.m AND x.n = r.n AND x.k = r.k)")
    return {(r["device"], r["precision"], r["m"], r["n"], r["k"]): r for r in rows}


def export(*args, db: Path, expect: int = 0):
    result = CliRunner().invoke(cli, ["export", "--db", f"sqlite:///{db}", *args])
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


@pytest.fixture(scope="module")
def context():
    _, device = open_device(0)
    return cl.Context([device])


def test_json_has_the_best_row_of_every_shape(results_db, tmp_path):
    path = tmp_path / "tuned.json"
    assert export("--format", "json", "-o", str(path), db=results_db).stdout == ""
    doc = json.loads(path.read_text())
    assert doc["gemmtune_version"] == gemmtune.__version__
    expected = best_by_sql(results_db)
    got = {(e["device"], e["precision"], e["m"], e["n"], e["k"]): e for e in doc["entries"]}
    assert sorted(got) == sorted(expected) and len(got) == 3
    for key, entry in got.items():
        row = expected[key]
        assert entry["params"] == json.loads(row["params"]) and entry["kernel"] == row["kernel"]
        assert entry["gflops"] == pytest.approx(row["gflops"], rel=1e-12)
        assert entry["device_name"] == row["device_name"]
        # Round trip: what best_config hands out for that shape is what was exported.
        tuned = gemmtune.best_config(entry["m"], entry["n"], entry["k"], entry["precision"],
                                     db=f"sqlite:///{results_db}")
        assert (tuned.kernel, tuned.params, tuned.source) == (entry["kernel"], entry["params"], "tuned")
    assert json.loads(export("--precision", "d", db=results_db).stdout)["entries"] == \
        [e for e in doc["entries"] if e["precision"] == "d"]


def test_exported_parameters_drive_gemm_correctly(results_db):
    doc = json.loads(export(db=results_db).stdout)
    rng = np.random.default_rng(31)
    for entry in doc["entries"]:
        prec = get_precision(entry["precision"])
        a, b = random_matrix(prec, (21, 30), rng), random_matrix(prec, (30, 11), rng)
        result = gemmtune.gemm(a, b, config={"KERNEL": entry["kernel"], **entry["params"]})
        assert compare(result, Reference.compute(prec, a, b, None, 1.0, 0.0), prec).passed


def test_rows_the_shipped_kernels_cannot_use_are_left_out(results_copy, add_result):
    pocl = resolve_device(0)
    before = json.loads(export(db=results_copy).stdout)["entries"]
    add_result(results_copy, device=pocl.key, m=24, n=24, k=24, gflops=1e9,
               params={"TSM": 16, "TSN": 16, "TSK": 16, "WPTN": 2, "PAD": 1, "TRANSPOSEX": 8, "TRANSPOSEY": 8,
                       "FAULT": 1})
    assert json.loads(export(db=results_copy).stdout)["entries"] == before


def test_nothing_to_export_is_said_and_the_header_keeps_the_defaults(tmp_path):
    missing = tmp_path / "none.db"
    result = export(db=missing)
    assert json.loads(result.stdout)["entries"] == [] and result.stderr.startswith("No results")
    header = export("--format", "header", db=missing).stdout
    assert "GEMMTUNE_DEVICE_TYPE_GPU" in header and not missing.exists()
    # The GPU defaults of d and z copy asynchronously and multiply with FP64 matrix instructions:
    # the header says what turns cp.async and those instructions on.
    assert "#define PIPE 7" in header and "defines CP_ASYNC=1" in header
    assert "#define MMA 2" in header and "defines MMA_F64=1" in header
    result = CliRunner().invoke(cli, ["export", "--db", "sqlite:////nonexistent-dir/x.db"])
    assert result.exit_code == 2 and result.stderr.startswith("Error:") and result.stdout == ""


# ---------------------------------------------------------------- the C header

def probe(context, prefix: str, header: str, kernel: str) -> dict:
    """The values the kernel parameters and GEMMTUNE_* macros get in a program of the header
    and the real source of ``kernel``'s family, built WITHOUT -D options: only the header (or
    the source's own #ifndef defaults, which it must override) can set them."""
    family = FAMILIES[kernel]
    names = [name for name in family.defaults if name not in RESERVED]
    body = "".join(f"  out[{i}] = {name};\n" for i, name in enumerate(names))
    n = len(names)
    source = (prefix + header + "\n" + load_kernel_source(family.source_file)
              + f"\n__kernel void probe(__global int* out) {{\n{body}"
              f"  out[{n}] = GEMMTUNE_TUNED;\n  out[{n + 1}] = PRECISION;\n"
              f"  for (int i = 0; i < 16; i++) {{ out[{n + 2} + i] = GEMMTUNE_KERNEL_SOURCE[i]; }}\n}}\n")
    program = cl.Program(context, source).build()
    # the preparation kernels too, where the family's source includes them
    prepares = {"pad_copy", "pad_transpose"} if "void pad_copy" in load_kernel_source(family.source_file) else set()
    assert {family.kernel_name, "probe", *prepares} <= {k.function_name for k in program.all_kernels()}
    queue = cl.CommandQueue(context)
    out = np.zeros(n + 2 + 16, dtype=np.int32)
    buf = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, out.nbytes)
    program.probe(queue, (1,), None, buf)
    cl.enqueue_copy(queue, out, buf)
    text = bytes(int(c) for c in out[n + 2:]).split(b"\0")[0].decode()
    return {"params": {name: int(v) for name, v in zip(names, out)}, "GEMMTUNE_TUNED": int(out[n]),
            "PRECISION": int(out[n + 1]), "GEMMTUNE_KERNEL_SOURCE": text}


def header_choice_by_sql(db: Path) -> dict[tuple[str, str], dict]:
    """Per device and precision, the best row of the largest shape (m*n*k)."""
    return {(r["device"], r["precision"]): r for r in sql(db, """
        SELECT * FROM results r WHERE status = 'ok'
          AND m * n * k = (SELECT MAX(m * n * k) FROM results x WHERE x.status = 'ok'
                           AND x.device = r.device AND x.precision = r.precision)
          AND gflops = (SELECT MAX(gflops) FROM results x WHERE x.status = 'ok' AND x.device = r.device
                        AND x.precision = r.precision AND x.m = r.m AND x.n = r.n AND x.k = r.k)""")}


def test_header_selects_each_tuned_block_and_computes_correctly(results_copy, add_result, context, tmp_path):
    # Another machine's results, whose best is at the smaller shape: the largest shape's wins.
    add_result(results_copy, m=64, n=64, k=64, gflops=500.0,
               params={"TSM": 64, "TSN": 64, "TSK": 32, "WPTN": 8, "PAD": 2, "TRANSPOSEX": 16, "TRANSPOSEY": 16})
    add_result(results_copy, m=128, n=128, k=128, gflops=400.0,
               params={"TSM": 32, "TSN": 128, "TSK": 32, "WPTN": 8, "PAD": 4, "TRANSPOSEX": 32, "TRANSPOSEY": 8})
    path = tmp_path / "gemmtune_tuned.h"
    export("--format", "header", "-o", str(path), db=results_copy)
    header = path.read_text()
    chosen = header_choice_by_sql(results_copy)
    assert {key for key, _ in chosen} == {resolve_device(0).key, FANCY}
    for (device, code), row in chosen.items():
        assert device_macro(device) in header  # listed in the header's comment for the includer
        prec = get_precision(code)
        prefix = f"#define {device_macro(device)}\n#define PRECISION {prec.cl_define}\n"
        values = probe(context, prefix, header, row["kernel"])
        # The hand-made rows predate TRANSPOSEW: the header gives them its default.
        expected = {"TRANSPOSEW": 1, **json.loads(row["params"])}
        assert values["params"] == expected and values["GEMMTUNE_KERNEL_SOURCE"] == "xgemm_k5.cl"
        assert values["GEMMTUNE_TUNED"] == 1 and values["PRECISION"] == prec.cl_define
        if device == FANCY:
            assert (row["m"], expected["TSN"]) == (128, 128)
            continue
        # The header and the kernel sources, built together, compute correctly on fresh data.
        queue = cl.CommandQueue(context)
        rng = np.random.default_rng(41)
        m, n, k = 29, 50, 37   # column-major C (m x n) <- A (m x k) B (k x n): row-major arrays (k, m), (n, k)
        a, b = random_matrix(prec, (k, m), rng), random_matrix(prec, (n, k), rng)
        op = GemmOperation(queue, Config.of(KERNEL, expected), prefix + header + "\n" + load_kernel_source("xgemm_k5.cl"),
                           prec, m, n, k)
        mf = cl.mem_flags
        a_buf = cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        b_buf = cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
        for beta, c0 in ((0.0, np.full((n, m), np.nan, dtype=prec.dtype)), (-1.5, random_matrix(prec, (n, m), rng))):
            c_buf = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c0)
            op.enqueue(a_buf, b_buf, c_buf, 2.0, beta)
            result = np.empty_like(c0)
            cl.enqueue_copy(queue, result, c_buf)
            check = compare(result, Reference.compute(prec, b, a, None if beta == 0 else c0, 2.0, beta), prec)
            assert check.passed, check


@pytest.mark.parametrize("defines, device_type, precision", [
    ("#define GEMMTUNE_DEVICE_TYPE_CPU\n#define PRECISION 64\n", "CPU", "d"),
    ("#define GEMMTUNE_DEVICE_TYPE_GPU\n", "GPU", "s"),               # PRECISION defaults to 32
    ("#define PRECISION 3232\n", "OTHER", "c"),
    ("#define GEMMTUNE_DEVICE_TYPE_CPU\n#define PRECISION 6464\n#define {pocl}\n", "CPU", "z"),  # not tuned in z
])
def test_header_falls_back_to_the_shipped_defaults(results_db, context, tmp_path, defines, device_type, precision):
    """A CPU's entry is the table of the vectors its compiler targets, which the header tells
    from the compiler's macros: the table gemmtune.gemm takes on this device."""
    from gemmtune.space.defaults import table_name

    header = export("--format", "header", db=results_db).stdout
    table = table_name(resolve_device(0)) if device_type == "CPU" else device_type
    expected = shipped_default(table, get_precision(precision))
    values = probe(context, defines.format(pocl=device_macro(resolve_device(0).key)), header, expected.kernel)
    assert values["params"] == expected.params
    assert values["GEMMTUNE_KERNEL_SOURCE"] == FAMILIES[expected.kernel].source_file
    assert values["GEMMTUNE_TUNED"] == 0 and values["PRECISION"] == get_precision(precision).cl_define
