"""Hostile input files and option values end as one ``Error:`` line and exit code 2, at once.

Files nested deeper than a parser recurses, larger than any real one, with a CSV field past the
csv module's limit, a duplicate column, kernel sources that are not UTF-8 or include themselves
or a file outside their directories; numeric options that are nan, infinite, negative or absurd;
empty values given for options whose default is meant; a device description with fields of the
wrong type; and output that cannot be written (a full disk).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import TINY_SPACE  # noqa: E402

from gemmtune import files as user_files  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.files.shipped import load_kernel_source  # noqa: E402
from gemmtune.shapes import load_shapes  # noqa: E402
from gemmtune.space import load_space  # noqa: E402

DEEP = 200_000


def error(args, *words) -> str:
    """The one error line of a command that must refuse its input, checked for ``words``."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == "" and result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.output
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    return result.stderr


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'never.db'}"


def with_db(args: list[str], db: str) -> list[str]:
    """``args`` with ``--db db`` where the command takes one: nothing may be written anywhere."""
    takes = any("--db" in p.opts for p in cli.commands[args[0]].params)
    return [*args, "--db", db] if takes else args


# ---------------------------------------------------------------- files

@pytest.mark.parametrize("nest", ["x = " + "[" * DEEP, "x = " + "{a = " * DEEP])
def test_toml_nested_beyond_the_parser_is_refused_wherever_toml_is_read(tmp_path, db, nest):
    deep = tmp_path / "deep.toml"
    deep.write_text(nest)
    error(["search", "--shapes", str(deep), "--db", db], "shapes file", "nests", "too deeply")
    error(["space", "--space", str(deep)], "space file", "too deeply")
    error(["replay", "--study", "x", "--space", str(deep), "--db", db], "space file", "too deeply")


def test_a_file_larger_than_any_real_one_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(user_files, "MAX_FILE_BYTES", 1000)
    big = tmp_path / "big.csv"
    big.write_text("m,n,k\n" + "16,16,16\n" * 200)
    with pytest.raises(GemmtuneError, match="larger than"):
        load_shapes(str(big))
    with pytest.raises(GemmtuneError, match="cannot read space file .*larger than"):
        load_space(tmp_path / "big.csv")


def test_csv_fields_past_the_csv_limit_and_duplicate_columns_are_refused(tmp_path, db):
    wide = tmp_path / "wide.csv"
    wide.write_text("m,n,k,precision\n16,16,16," + "s" * (200 * 1024) + "\n")
    error(["search", "--shapes", str(wide), "--db", db], "shapes file", "not valid CSV", "field larger")
    twice = tmp_path / "twice.csv"
    twice.write_text("m,n,k,m\n16,16,16,32\n")
    error(["bench", "--shapes", str(twice), "--db", db], "shapes file", "names 'm' twice")
    long = tmp_path / "long.csv"   # within the csv limit: the message shows the value cut short
    long.write_text("m,n,k\n16,16," + "9x" * (60 * 1024) + "\n")
    assert len(error(["bench", "--shapes", str(long), "--db", db], "row 2: k must be a whole number")) < 200
    spaced = tmp_path / "spaced.csv"
    spaced.write_text("m, n, k, N\n16,16,16,N\n")   # the same column however spelt
    with pytest.raises(GemmtuneError, match="names 'n' twice"):
        load_shapes(str(spaced))


def space_with_source(tmp_path: Path, source: str, name: str = "mine.cl") -> Path:
    """A space file whose direct family builds ``source`` (text or bytes), beside it."""
    kernel = tmp_path / name
    kernel.write_bytes(source if isinstance(source, bytes) else source.encode())
    space = tmp_path / "space.toml"
    space.write_text(f'[xgemm_direct]\nsource = "{name}"\nWGD = [8]\n')
    return space


def test_a_kernel_source_that_is_not_utf8_is_refused(tmp_path):
    space = space_with_source(tmp_path, b"#ifndef WGD\n#define WGD 8 // \xff\xfe tile\n#endif\n")
    error(["space", "--space", str(space), "--count"], "kernel source", "mine.cl", "not UTF-8")


@pytest.mark.parametrize("files, chain", [
    ({"mine.cl": '#include "mine.cl"\n'}, "mine.cl -> mine.cl"),
    ({"mine.cl": '#include "./sub/../mine.cl"\n'}, "mine.cl -> mine.cl"),   # another spelling of itself
    ({"mine.cl": '#include "b.cl"\n', "b.cl": '#include "c.cl"\n', "c.cl": '#include "b.cl"\n'},
     "mine.cl -> b.cl -> c.cl -> b.cl"),
])
def test_a_kernel_source_including_itself_is_refused_with_the_chain(tmp_path, files, chain):
    (tmp_path / "sub").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    space = space_with_source(tmp_path, files["mine.cl"])
    error(["space", "--space", str(space), "--count"], "includes itself", chain)


@pytest.mark.parametrize("target", ["/dev/zero", "../outside.cl", "/etc/hostname"])
def test_an_include_outside_the_sources_directories_is_refused(tmp_path, target):
    (tmp_path / "outside.cl").write_text("#define NOTHING 1\n")
    (tmp_path / "in").mkdir()
    space = space_with_source(tmp_path / "in", f'#include "{target}"\n#ifndef WGD\n#define WGD 8 // t\n#endif\n')
    error(["space", "--space", str(space), "--count"], "kernel source", f'#include "{target}" is outside')


def test_includes_of_the_shipped_kernels_and_beside_the_source_still_inline_once(tmp_path):
    (tmp_path / "helper.cl").write_text('#include "common.cl"\n#define HELPER 1\n')
    (tmp_path / "mine.cl").write_text('#include "common.cl"\n#include "helper.cl"\n#include "helper.cl"\n')
    text = load_kernel_source(str(tmp_path / "mine.cl"))
    assert text.count("#define HELPER 1") == 1 and text == load_kernel_source("mine.cl", tmp_path)
    assert text.count("// common.cl: already included") == 1 and text.count("// helper.cl: already included") == 1
    assert load_kernel_source("common.cl") in text


# ---------------------------------------------------------------- numeric options

@pytest.mark.parametrize("args", [
    ["search", "--heartbeat-grace", "nan"], ["search", "--heartbeat-grace", "inf"],
    ["search", "--timeout", "nan"], ["search", "--timeout", "-1"], ["search", "--timeout", "1e300"],
    ["search", "--trial-timeout", "nan"], ["search", "--time-cap", "inf"], ["search", "--early-stop", "nan"],
    ["search", "--trials", "0"], ["search", "--trials", "99999999999"], ["search", "--seed", "-1"],
    ["search", "--size", "2147483648"], ["space", "--m", "-3"], ["verify", "--k", "99999999999999999999"],
    ["peak", "--iterations", "2147483648"], ["peak", "--copy-mib", str(2**40)], ["peak", "--time-cap", "nan"],
    ["bench", "--time-cap", "-inf"], ["report", "--top", "0"], ["report", "--size", str(2**31)],
    ["export", "--m", "0"], ["replay", "--study", "x", "--target", "nan"],
    ["replay", "--study", "x", "--seeds", str(2**33)], ["replay", "--study", "x", "--model-seeds", "0"],
])
def test_numeric_options_refuse_nan_infinities_and_absurd_values_naming_the_option(args, db):
    error(with_db(args, db), "Invalid value for", f"'{args[-2]}'")


def test_every_numeric_option_is_bounded_and_finite():
    """Any option added later takes the shared types (or an IntRange with both bounds), or this names it."""
    import click

    from gemmtune.cli.base import BoundedFloat

    unbounded = []
    for name, command in cli.commands.items():
        for param in command.params:
            kind = param.type
            bounded = isinstance(kind, BoundedFloat) or (
                isinstance(kind, click.IntRange) and None not in (kind.min, kind.max))
            if isinstance(kind, (click.types.IntParamType, click.types.FloatParamType)) and not bounded \
                    and param.name != "jobs":   # --jobs: capped to what the machine can run, elsewhere
                unbounded.append(f"{name} {param.opts[0]}")
    # verify's --alpha and --beta are checked as the library's gemm checks its scalars
    assert sorted(unbounded) == ["verify --alpha", "verify --beta"]


# ---------------------------------------------------------------- empty values

@pytest.mark.parametrize("args", [
    ["search", "--shapes", ""], ["bench", "--sizes", ""], ["bench", "--shapes", " "], ["verify", "--config", ""],
    ["search", "--study", ""], ["space", "--space", ""], ["peak", "--precision", ""], ["report", "--device", ""],
    ["replay", "--study", "x", "--samplers", ""], ["export", "-o", ""],
])
def test_an_empty_value_is_an_error_not_the_default(args, db):
    error(with_db(args, db), "Invalid value for", "empty")


def test_empty_values_reach_no_default_through_the_library_either():
    from gemmtune.cli.base import workload
    from gemmtune.space.text import parse_config

    with pytest.raises(GemmtuneError, match="names no problem"):
        workload("s", None, "")
    with pytest.raises(GemmtuneError, match="--sizes '': names no size"):
        workload("s", "", None)
    with pytest.raises(GemmtuneError, match="not both"):
        workload("s", "", "")
    with pytest.raises(GemmtuneError, match="empty --config"):
        parse_config("")


# ---------------------------------------------------------------- device descriptions

@pytest.mark.parametrize("field, value", [
    ("name", 7), ("type", ["CPU"]), ("driver_version", None), ("double_precision", "yes"),
    ("max_work_item_sizes", 5),
])
def test_a_device_description_with_a_field_of_the_wrong_type_is_refused(tmp_path, add_result, field, value):
    db = tmp_path / "r.db"
    add_result(db, study="grid")
    entry = {"index": 0, "platform": "Test", "name": "Fancy GPU 9000", "vendor": "T", "type": "GPU",
             "opencl_version": "OpenCL 3.0", "driver_version": "1.0", "compute_units": 8, "max_clock_mhz": 1000,
             "global_mem_bytes": 2**32, "local_mem_bytes": 2**15, "max_work_group_size": 256,
             "max_work_item_sizes": [256, 256, 64], "double_precision": True, field: value}
    info = tmp_path / "device.json"
    info.write_text(json.dumps([entry]))
    error(["replay", "--study", "grid", "--samplers", "random", "--seeds", "1", "--device-info", str(info),
           "--db", f"sqlite:///{db}"], "device description", str(info), "is not what")
    info.write_text("[" * DEEP)
    error(["replay", "--study", "grid", "--samplers", "random", "--seeds", "1", "--device-info", str(info),
           "--db", f"sqlite:///{db}"], "device description", "nests too deeply")


# ---------------------------------------------------------------- output that cannot be written

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [
    ["devices"], ["report", "--db", "sqlite:///{tmp}/none.db"],
    ["space", "--space", "{tmp}/tiny.toml", "--format", "csv"], ["space", "--space", "{tmp}/tiny.toml", "--count"],
])
def test_output_to_a_full_disk_is_one_error_line(tmp_path, args):
    (tmp_path / "tiny.toml").write_text(TINY_SPACE)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "gemmtune", *(a.format(tmp=tmp_path) for a in args)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "Error: cannot write the output: No space left on device\n", done.stderr


@pytest.mark.parametrize("field, value", [("timeout", float("nan")), ("timeout", float("inf")), ("timeout", -1.0),
                                          ("trial_timeout", float("nan")), ("grace", float("nan")),
                                          ("grace", float("inf")), ("early_stop", float("nan"))])
def test_the_library_refuses_what_the_options_bound(tmp_path, field, value):
    from gemmtune.errors import GemmtuneError
    from gemmtune.search import SearchRequest, run_search

    req = SearchRequest(device=0, m=8, n=8, k=8, trials=1, db=f"sqlite:///{tmp_path / 'r.db'}", **{field: value})
    with pytest.raises(GemmtuneError, match="must be"):
        run_search(req)
    assert not (tmp_path / "r.db").exists()   # refused before anything opened


def test_the_library_refuses_a_time_cap_that_is_not_a_number(tmp_path):
    from gemmtune.errors import GemmtuneError
    from gemmtune.search import SearchRequest, run_search
    from gemmtune.measure.timing import TimingPolicy

    req = SearchRequest(device=0, m=8, n=8, k=8, trials=1, db=f"sqlite:///{tmp_path / 'r.db'}",
                        policy=TimingPolicy(max_seconds=float("nan")))
    with pytest.raises(GemmtuneError, match="--time-cap"):
        run_search(req)
