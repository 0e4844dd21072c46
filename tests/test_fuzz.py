"""Fuzzing the command line: its options, the space files and the database rows it reads.

Hypothesis draws the inputs (derandomized: the same cases on every run, so a failure is
reproducible), about 250 in all. Whatever comes in, a command ends with exit code 0, 1 (a
failed check) or 2 (bad input, one ``Error:`` line on stderr), never with a traceback, and a
command that fails has written nothing. Problems stay tiny, or impossibly large so that they
are refused before anything is allocated.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import TINY_SPACE  # noqa: E402

from gemmtune.cli import cli  # noqa: E402
from gemmtune.db.store import Store  # noqa: E402

FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DIRECTIVE = re.compile(r"#(if|elif|else|endif|define|ifndef|error)\b")


def invoke(args, allowed=(0, 1, 2)):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert "Traceback" not in result.output, (args, result.output)
    assert result.exit_code in allowed, (args, result.exit_code, result.output)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (args, result.stderr)
        assert result.stdout == "", (args, result.stdout)
    return result


def garbage(alphabet: str, size: int = 12):
    return st.text(alphabet=alphabet, max_size=size)


# Dimensions: tiny, or so large that any product of them is refused before allocating.
dimension = st.one_of(st.integers(-2, 40), st.just(10**11), garbage("0123456789-+.xe ", 5))
number = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-3, 3),
                   garbage("0123456789.-+eEinfa", 6))
seed = st.one_of(st.integers(-3, 5), st.sampled_from([2**32 - 1, 2**32, -2**63, 2**64]), garbage("0123456789-x", 4))
config_item = st.tuples(st.sampled_from(["TSM", "TSN", "TSK", "WPTN", "PAD", "KERNEL", "FOO", "", " tsm"]),
                        st.sampled_from(["16", "0", "-1", "abc", "", "1e3", "16.0", "99999999999", "xgemm_k5",
                                         "xgemm_rt", "64 -DFOO=1"]),
                        st.sampled_from(["=", "", "=="]))
config = st.one_of(st.lists(config_item, max_size=4).map(lambda items: ",".join(f"{n}{s}{v}" for n, v, s in items)),
                   garbage("TSMNKWPAD=,;:_ -0123456789", 20))
study = st.one_of(st.text(max_size=12), st.sampled_from(["s\n#define X 1", "a b", "x" * 201, "ok-name_1.2:3+4=5@6"]))


def flatten(options: dict) -> list[str]:
    return [part for name, value in options.items() for part in (name, value)]


verify_options = st.fixed_dictionaries({}, optional={
    "--m": dimension, "--n": dimension, "--k": dimension, "--size": dimension,
    "--precision": st.sampled_from(["s", "d", "c", "z", "q", "S", ""]),
    "--config": config, "--alpha": number, "--beta": number, "--seed": seed,
    "--trans-a": st.sampled_from(["N", "T", "C", "X", ""]), "--trans-b": st.sampled_from(["N", "T", "C"]),
    "--device": st.sampled_from(["0", "0:0", "99", "x", "", "-1"]),
    "--format": st.sampled_from(["table", "json", "xml"]),
}).map(flatten)


@settings(FUZZ, max_examples=70)
@given(verify_options)
def test_verify_options(args):
    result = invoke(["verify", "--size", "12", *args])   # dimensions not drawn stay small
    if result.exit_code == 0:
        assert "passed" in result.stdout


# ---------------------------------------------------------------- space files

toml_value = st.one_of(
    st.lists(st.one_of(st.integers(-2, 64), st.sampled_from([16, 32, 8, 1])), max_size=3),
    st.integers(-2, 64), st.sampled_from(['"16"', "true", "1.5", "[]", "[[16]]", "{a = 1}", '"x.cl"', "[16, \"a\"]"]),
)
toml_key = st.sampled_from(["TSM", "TSN", "TSK", "WPTN", "PAD", "TRANSPOSEX", "TRANSPOSEY", "TRANSPOSEW", "FOO",
                            "PRECISION", "source", "tsm"])


@st.composite
def space_file(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=40))
    parts = []
    for _ in range(draw(st.integers(0, 2))):
        parts.append(f"[{draw(st.sampled_from(['xgemm_k5', 'xgemm_k5', 'xgemm_rt', 'nosuch', 'xgemm_k5.x']))}]")
        for key, value in draw(st.dictionaries(toml_key, toml_value, max_size=4)).items():
            if key == "source":
                value = draw(st.sampled_from(['"plain.cl"', '"missing.cl"', '"xgemm_k5.cl"', "3", '"../"']))
            elif isinstance(value, list):
                value = "[" + ", ".join(map(str, value)) + "]"
            parts.append(f"{key} = {value}")
    return "\n".join(parts) + "\n"


@settings(FUZZ, max_examples=70)
@given(space_file(), st.sampled_from([["--count"], ["--explain", "--format", "json"], ["--format", "csv"]]),
       st.sampled_from(["s", "d", "z"]))
def test_space_files(text, mode, precision):
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "space.toml"
        path.write_text(text, encoding="utf-8")
        (Path(where) / "plain.cl").write_text("__kernel void xgemm(__global float *c) { c[0] = 1; }\n")
        result = invoke(["space", "--space", path, "--precision", precision, "--size", "16", *mode], allowed=(0, 2))
        if result.exit_code == 0 and mode == ["--count"]:
            assert int(result.stdout) >= 0


# ---------------------------------------------------------------- search: refused, and nothing written

BAD_SEARCH = [
    ["--seed", "-1"], ["--seed", str(2**32)], ["--study", "two words"], ["--study", "s\n#define X 1"],
    ["--db", "postgresql://u:pw@127.0.0.1:1/x"], ["--db", "nosuch://x"], ["--db", "sqlite:////no/such/dir/r.db"],
    ["--space", "bad.toml"], ["--space", "plain.toml"], ["--space", "missing.toml"], ["--device", "99"],
    ["--device", "0,0"], ["--trials", "0"], ["--size", "0"], ["--m", "x"], ["--timeout", "0"],
    ["--early-stop", "1"], ["--jobs", "-1"], ["--heartbeat-grace", "0.5"], ["--precision", "q"],
    ["--sampler", "foo"], ["--size", str(10**11)], ["--trial-timeout", "-1"], ["--time-cap", "nan"],
]
search_options = st.fixed_dictionaries({}, optional={
    "--m": dimension, "--n": dimension, "--k": dimension, "--precision": st.sampled_from(["s", "d", "z", "q"]),
    "--seed": seed, "--study": study, "--trials": st.sampled_from(["1", "0", "-3", "x"]),
    "--sampler": st.sampled_from(["tpe", "random", "grid", "x"]), "--format": st.sampled_from(["table", "json"]),
    "--early-stop": number, "--jobs": st.sampled_from(["0", "1", "-1"]),
}).map(flatten)


@settings(FUZZ, max_examples=40)
@given(search_options, st.sampled_from(BAD_SEARCH))
def test_a_search_with_bad_input_writes_nothing(args, bad):
    with tempfile.TemporaryDirectory() as where:
        where = Path(where)
        (where / "bad.toml").write_text("[xgemm_k5\n")
        (where / "plain.toml").write_text('[xgemm_k5]\nsource = "plain.cl"\n')
        (where / "plain.cl").write_text("__kernel void xgemm(__global float *c) { c[0] = 1; }\n")
        (where / "tiny.toml").write_text(TINY_SPACE)
        before = sorted(where.iterdir())
        bad = [str(where / b) if b.endswith(".toml") else b for b in bad]
        invoke(["search", "--db", f"sqlite:///{where / 'r.db'}", "--space", where / "tiny.toml", "-q", *args, *bad],
               allowed=(2,))
        assert sorted(where.iterdir()) == before


# ---------------------------------------------------------------- database rows

PARAMS = {"TSM": 16, "TSN": 16, "TSK": 16, "WPTN": 2, "PAD": 1, "TRANSPOSEX": 8, "TRANSPOSEY": 8}
anything = st.one_of(st.none(), st.integers(-2**40, 2**40), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=8))
params = st.one_of(
    st.just(json.dumps(PARAMS)),
    st.dictionaries(st.sampled_from(list(PARAMS) + ["FOO", "TRANSPOSEW"]),
                    st.one_of(st.sampled_from([16, 32, 8, 0, -1, True, 2**40]), st.text(max_size=4)),
                    max_size=8).map(lambda p: json.dumps({**PARAMS, **p})),
    st.text(max_size=20), st.sampled_from(["[]", "null", "{", '{"TSM": [16]}', "1e999"]),
)
present = anything.filter(lambda x: x is not None and x == x)   # SQLite stores NaN as NULL
samples = st.one_of(st.none(), st.just("[1.0, 1.1, 0.9, 1.05]"), st.text(max_size=10),
                    st.lists(st.floats(allow_nan=True), max_size=4).map(json.dumps))
FIELDS = {   # what may go wrong in each column
    "study": st.text(max_size=6),
    "trial": st.one_of(st.integers(-1, 5), present),
    "device": st.sampled_from(["P | GPU\n#define X 1 | */", "Q | CPU ??/ | 2\\", ""]),
    "device_name": st.sampled_from(["x */ #define Y 1", "\u00e9\r\n#error", ""]),
    "precision": st.sampled_from(["c", "z", "q", 3, ""]),
    "m": present, "n": st.sampled_from([24, "16", 0, -3]), "k": st.sampled_from([16.5, "x", 10**12]),
    "kernel": st.sampled_from(["xgemm_rt", "evil", 7]),
    "params": params,
    "status": st.sampled_from(["compile_error", "slow", "lost", "weird", 1]),
    "gflops": anything, "time_ms": anything, "ci_low_ms": anything, "ci_high_ms": anything,
    "trial_s": anything, "compile_s": anything, "samples_ms": samples,
    "baseline": st.sampled_from([0, 1, "yes", 2.5]),
    "created_at": st.sampled_from(["", "x"]),
}


@st.composite
def row(draw):
    """A row as a search writes it, in one of a few shapes and speeds, with up to three columns
    replaced by anything: most rows are usable, so that the readers' real work is fuzzed too."""
    gflops = draw(st.floats(0.5, 1000))
    good = {"study": "fz", "trial": draw(st.integers(0, 50)), "device": draw(st.sampled_from(["P | GPU | 1",
            "P | GPU | 2"])), "device_name": "GPU", "precision": draw(st.sampled_from(["s", "d"])),
            "m": draw(st.sampled_from([16, 24])), "n": 16, "k": 16, "kernel": "xgemm_k5",
            "params": json.dumps({**PARAMS, "TSM": draw(st.sampled_from([16, 32])), "PAD": draw(st.integers(0, 2))}),
            "status": "ok", "gflops": gflops, "time_ms": 1 / gflops, "ci_low_ms": 0.9 / gflops,
            "ci_high_ms": 1.1 / gflops, "trial_s": 0.5, "compile_s": 0.1,
            "samples_ms": json.dumps([1 / gflops] * 4), "baseline": draw(st.sampled_from([0, 0, 1])),
            "created_at": "2026-12-01T00:00:00+00:00"}
    for name in draw(st.lists(st.sampled_from(list(FIELDS)), max_size=3, unique=True)):
        good[name] = draw(FIELDS[name])
    return good


readers = st.sampled_from([
    ["report"], ["report", "--format", "json"], ["report", "--format", "csv"], ["report", "--format", "markdown"],
    ["report", "--top", "2", "--format", "json"], ["report", "--model"], ["report", "--precision", "s", "--size", "16"],
    ["export", "-o", "OUT"], ["export", "--format", "header", "-o", "OUT"],
    ["replay", "--study", "fz", "--samplers", "random", "--seeds", "1", "--format", "json"],
])


@settings(FUZZ, max_examples=70)
@given(st.lists(row(), min_size=1, max_size=6), readers)
def test_database_rows(rows, reader):
    with tempfile.TemporaryDirectory() as where:
        db = Path(where) / "r.db"
        Store(f"sqlite:///{db}").close()
        with sqlite3.connect(db) as con:   # straight into the table: SQLite keeps any type
            for r in rows:
                r = {**r, "gemmtune_version": "0"}
                con.execute(f"INSERT INTO results ({', '.join(r)}) VALUES ({', '.join('?' * len(r))})",
                            [x if not isinstance(x, int) or abs(x) < 2**63 else str(x) for x in r.values()])
        out = Path(where) / "out"
        args = [str(out) if a == "OUT" else a for a in reader]
        result = invoke([args[0], "--db", f"sqlite:///{db}", *args[1:]], allowed=(0, 2))
        if reader[0] == "export":
            assert result.exit_code == 0 and out.exists()
            text = out.read_text()
            if "header" in reader:
                for line in text.split("\n"):
                    assert line == "" or line.startswith("//") or DIRECTIVE.match(line), repr(line)
                    assert not line.endswith("\\") and "*/" not in line
            else:
                json.loads(text)
        elif reader[0] == "report":
            assert result.exit_code == 0
