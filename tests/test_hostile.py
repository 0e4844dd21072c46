"""What a database may hold cannot reach the compiler or a header as code, nor crash a reader.

Rows are written straight into ``results`` (as another program or a hand edit sharing the
database could), with names that try to start a directive or end a comment in the exported
header, and with configurations no shipped kernel has. The header is run through the C
preprocessor for every block it selects.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import TINY_SPACE  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.devices.opencl import resolve_device  # noqa: E402
from gemmtune.export import comment_text, device_macro  # noqa: E402
from gemmtune.db.tuned import best_config  # noqa: E402

HOSTILE = [
    "st\n#define PWNED_NEWLINE 1",
    "x */ #define PWNED_CLOSE 1 /* y",
    "x \\\n#define PWNED_CONTINUED 1",
    "x ??/\n#define PWNED_TRIGRAPH 1",
    "x\r#define PWNED_RETURN 1",
    "x\u2028#define PWNED_SEPARATOR 1",
    '"; #define PWNED_QUOTE 1 //',
    "x // \\\n#define PWNED_COMMENT 1",
    "x\\",
    "\u00e9\u00e8 \x1b[31m #undef GEMMTUNE_TUNED_H",
]
PARAMS = {"TSM": 16, "TSN": 16, "TSK": 16, "WPTN": 2, "PAD": 1, "TRANSPOSEX": 8, "TRANSPOSEY": 8}
DIRECTIVE = re.compile(r"#(if|elif|else|endif|define|ifndef|error)\b")


def invoke(args, code=0):
    result = CliRunner().invoke(cli, args)
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


@pytest.fixture
def hostile_db(tmp_path, add_result) -> Path:
    db = tmp_path / "hostile.db"
    for i, name in enumerate(HOSTILE):
        add_result(db, study=name, device=f"Plat {name} | {name} {i} | drv {name}", device_name=name,
                   m=16, n=16, k=16, params=PARAMS, gflops=100.0 + i)
    return db


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (apt-get install gcc)")
def test_a_header_from_hostile_names_holds_no_injected_directive(hostile_db, tmp_path):
    header = tmp_path / "tuned.h"
    invoke(["export", "--db", f"sqlite:///{hostile_db}", "--format", "header", "-o", str(header)])
    text = header.read_text()
    lines = text.split("\n")
    # Every line is a comment or one of the header's own directives, and no comment continues.
    for line in lines:
        assert line == "" or line.startswith("//") or DIRECTIVE.match(line), repr(line)
        assert not line.endswith("\\") and "??/" not in line and "/*" not in line and "*/" not in line
    assert "PWNED" in text   # the names are there, as comments
    keys = json.loads(invoke(["export", "--db", f"sqlite:///{hostile_db}"]).stdout)["entries"]
    assert len({e["device"] for e in keys}) == len(HOSTILE)
    for entry in [None, *keys]:
        defines = ["-DGEMMTUNE_DEVICE_TYPE_GPU"] if entry is None else [f"-D{device_macro(entry['device'])}"]
        out = subprocess.run(["cc", "-E", "-dM", "-trigraphs", "-x", "c", *defines, str(header)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        macros = dict((line.split(" ", 2) + [""])[1:3] for line in out.stdout.splitlines())
        given = defines[0][2:]
        assert not [m for m in macros if "PWNED" in m and m != given]
        assert macros["GEMMTUNE_TUNED"] == ("0" if entry is None else "1")
        assert macros["GEMMTUNE_TUNED_H"] == ""
        if entry is not None:
            assert macros["TSM"] == "16" and macros["GEMMTUNE_KERNEL"] == '"xgemm_k5"'
        full = subprocess.run(["cc", "-E", "-P", "-trigraphs", "-x", "c", *defines, str(header)],
                              capture_output=True, text=True)
        assert "PWNED" not in full.stdout.replace(given, "") and "#" not in full.stdout


def test_hostile_names_round_trip_through_the_json_export(hostile_db, tmp_path):
    out = tmp_path / "tuned.json"
    invoke(["export", "--db", f"sqlite:///{hostile_db}", "-o", str(out)])
    raw = out.read_bytes()
    assert all(32 <= b < 127 or b == 10 for b in raw)   # ASCII, every control character escaped
    entries = json.loads(raw)["entries"]
    assert sorted(e["study"] for e in entries) == sorted(HOSTILE)
    assert sorted(e["device_name"] for e in entries) == sorted(HOSTILE)


def test_comment_text_keeps_ordinary_names_and_defuses_the_rest():
    assert comment_text("NVIDIA H200 (sm_90), driver 580.159.03") == "NVIDIA H200 (sm_90), driver 580.159.03"
    for name in HOSTILE:
        safe = comment_text(name)
        assert all(" " <= c <= "~" for c in safe) and "\\" not in safe and "?" not in safe
        assert "*/" not in safe and "/*" not in safe
    assert "*/" not in comment_text("*/*/**//") and "/*" not in comment_text("/*/*/")


@pytest.mark.parametrize("study", ["st\n#define PWNED 1", "a b", "x/y", "quote'", "", "s" * 201, "caf\u00e9"])
def test_study_names_outside_the_safe_set_are_refused_before_anything_is_written(study, tmp_path):
    db = tmp_path / "new.db"
    result = invoke(["search", "--db", f"sqlite:///{db}", "--study", study, "--size", "16", "--trials", "1"], code=2)
    lines = result.stderr.splitlines()
    # An empty value is refused as every option's is (not taken for "no name given").
    expected = "Error: Invalid value for '--study': empty" if study == "" else "Error: bad study name"
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert not db.exists()


# ---------------------------------------------------------------- rows no reader may use

def tampered(key: str) -> list[dict]:
    """Rows faster than anything real, none a configuration a shipped kernel could run."""
    base = dict(device=key, m=16, n=16, k=16, gflops=1e9, time_ms=1e-6, study="tampered")
    return [
        {**base, "params": '{"TSM": 16, "TSN": '},                    # not JSON
        {**base, "params": "[16, 16]"},                                # not an object
        {**base, "kernel": "xgemm_evil", "params": PARAMS},
        {**base, "params": {**PARAMS, "TSM": "64 -DFOO=1"}},
        {**base, "params": {**PARAMS, "FOO": 1}},
        {**base, "params": {**PARAMS, "TSM": True}},
        {**base, "params": {**PARAMS, "TSM": 0}},
        {**base, "params": {**PARAMS, "TSM": 2**40}},
        {**base, "params": {**PARAMS, "TSM": 16.5}},
        {**base, "params": PARAMS, "precision": "q"},
        {**base, "params": PARAMS, "m": 0},
        {**base, "params": PARAMS, "gflops": None},
    ]


@pytest.fixture
def tampered_db(tmp_path, add_result):
    db = tmp_path / "tampered.db"
    key = resolve_device(0).key
    good = {**PARAMS, "TSM": 32}
    add_result(db, device=key, m=16, n=16, k=16, params=good, gflops=5.0, study="tampered", trial=1)
    add_result(db, device=key, m=16, n=16, k=16, params=PARAMS, gflops=4.0, study="tampered", trial=2,
               baseline=True)
    for i, row in enumerate(tampered(key)):
        add_result(db, **row, trial=10 + i)
    return db, good


def test_every_reader_skips_the_same_tampered_rows(tampered_db):
    db, good = tampered_db
    url = f"sqlite:///{db}"
    bad = len(tampered("k"))

    result = invoke(["report", "--db", url, "--format", "json"])
    summary = json.loads(result.stdout)
    assert len(summary) == 1 and summary[0]["params"] == good
    assert summary[0]["trials"] == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Skipped {bad} recorded rows"), result.stderr
    for why in ("not JSON", "unknown kernel", "not an integer", "does not declare", "unknown precision", "shape",
                "finite speed"):
        assert why in lines[0]

    result = invoke(["export", "--db", url])
    entries = json.loads(result.stdout)["entries"]
    assert [e["params"] for e in entries] == [{**good, "TRANSPOSEW": 1}]
    assert result.stderr.startswith(f"Skipped {bad} recorded rows")

    tuned = best_config(16, 16, 16, "s", device=0, db=url)
    assert tuned.source == "tuned" and tuned.params == {**good, "TRANSPOSEW": 1}

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16), dtype=np.float32), rng.standard_normal((16, 16), dtype=np.float32)
    assert np.allclose(gemmtune.gemm(a, b, device=0, db=url), a @ b, rtol=1e-4, atol=1e-4)

    rows = json.loads(invoke(["bench", "--db", url, "--sizes", "16", "--baseline", "numpy", "--time-cap", "0.02",
                              "--format", "json"]).stdout)["rows"]
    ours = next(r for r in rows if r["contender"] == "gemmtune")
    assert ours["source"] == "tuned" and "TSM=32" in ours["config"] and ours["verified"] is True

    replayed = json.loads(invoke(["replay", "--db", url, "--study", "tampered", "--samplers", "random",
                                  "--seeds", "2", "--format", "json"]).stdout)
    assert replayed["recorded"] == 2 and replayed["best_gflops"] == 5.0


def test_a_study_of_tampered_rows_only_is_refused_with_the_reason(tmp_path, add_result):
    db = tmp_path / "only.db"
    for i, row in enumerate(tampered(resolve_device(0).key)):
        add_result(db, **row, trial=i)
    result = invoke(["replay", "--db", f"sqlite:///{db}", "--study", "tampered"], code=2)
    assert "Skipped" in result.stderr and "not a valid configuration" in result.stderr
    result = invoke(["report", "--db", f"sqlite:///{db}"])
    assert result.stdout.startswith("No results")
    assert result.stderr.startswith(f"Skipped {len(tampered('k'))} recorded rows")


def test_a_search_sharing_a_study_with_tampered_rows_runs(tmp_path, add_result):
    space = tmp_path / "tiny.toml"
    space.write_text(TINY_SPACE)
    db = tmp_path / "shared.db"
    for i, row in enumerate(tampered(resolve_device(0).key)):
        add_result(db, **{**row, "study": "shared"}, trial=100 + i)
    result = invoke(["search", "--db", f"sqlite:///{db}", "--space", str(space), "--study", "shared", "--size", "16",
                     "--trials", "1", "--no-seed", "-q", "--time-cap", "0.05", "--format", "json"])
    assert json.loads(result.stdout)["best"]["gflops"] < 1e9


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (apt-get install gcc)")
def test_devices_whose_keys_differ_only_in_punctuation_get_macros_of_their_own(tmp_path, add_result):
    """Both keys spell GEMMTUNE_DEVICE_LAB_GPU_1_0; the header gives the second another macro,
    lists which is which, and each selects its own device's configuration."""
    db, header = tmp_path / "two.db", tmp_path / "tuned.h"
    tsm = {"Lab | GPU | 1.0": 16, "Lab | GPU | 1-0": 32}
    for device, value in tsm.items():
        add_result(db, device=device, device_name="GPU", m=16, n=16, k=16, params={**PARAMS, "TSM": value})
    invoke(["export", "--db", f"sqlite:///{db}", "--format", "header", "-o", str(header)])
    listed = re.findall(r"^//   (GEMMTUNE_DEVICE_\w+)\n//       (.+) \(precisions", header.read_text(), re.MULTILINE)
    assert len(listed) == 2 and len({macro for macro, _ in listed}) == 2
    for macro, device in listed:
        out = subprocess.run(["cc", "-E", "-dM", "-x", "c", f"-D{macro}", str(header)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        macros = dict((line.split(" ", 2) + [""])[1:3] for line in out.stdout.splitlines())
        assert macros["GEMMTUNE_TUNED"] == "1" and macros["TSM"] == str(tsm[device])


@pytest.mark.parametrize("name, value", [("TSM", True), ("TSM", 1.5), ("TSM", "16"), ("TSM 1\n#define X", 1),
                                         ("1TSM", 1), ("TSM", "16\n#define X 1")])
def test_a_define_that_is_not_an_identifier_and_an_integer_is_refused(name, value):
    """The last guard before a header is written: whatever got past the configuration checks,
    only a C identifier with an integer, or a string of the expected form, becomes a #define."""
    from gemmtune.errors import GemmtuneError
    from gemmtune.export import _FILE_NAME, _define, _string

    with pytest.raises(GemmtuneError, match="refusing to export"):
        _define(name, value)
    if (isinstance(value, str) and not _FILE_NAME.fullmatch(value)) or not name.isidentifier():
        with pytest.raises(GemmtuneError, match="refusing to export"):
            _string(name, str(value), _FILE_NAME)
    assert _define("TSM", 16) == "#define TSM 16" and _string("SRC", "xgemm_k5.cl", _FILE_NAME) == '#define SRC "xgemm_k5.cl"'
