"""What a shared database holds cannot act through gemmtune's output, and no output file is
left half-written or written through a link.

Names are written straight into ``results`` as another program sharing the database could:
formulas a spreadsheet would run, pipes and newlines that would forge Markdown rows, and terminal
escape sequences. Files are written into places that fail (a full file system, a failing
writer), through symbolic links, and onto things that are not regular files.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from gemmtune.files import output
from gemmtune.cli import cli
from gemmtune.errors import GemmtuneError

PARAMS = {"TSM": 32, "TSN": 64, "TSK": 16, "WPTN": 4, "PAD": 1, "TRANSPOSEX": 16, "TRANSPOSEY": 8}
FORMULAS = ["=cmd|' /C calc'!A0", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1+1", "\r=1+1",
            "\uff1d1+1"]
FORGING = ["a|b", "a\n| forged | row |", "x\\|y", "x\\", "ok\r\n|---|", "<img src=x onerror=alert(1)>",
           "![t](http://example.invalid/t.png)"]
ESCAPES = ["\x1b[2J\x1b]0;title\x07", "\x9b31m", "right\u202eleft", "zero\u200bwidth", "del\x7f", "nul\x00",
           "line\u2028sep"]
HOSTILE = FORMULAS + FORGING + ESCAPES


def invoke(args, code=0):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == code, (args, result.output, result.exception)
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def hostile_db(tmp_path, add_result) -> Path:
    """One study per hostile name, each at its own shape, with that name as study and device name."""
    db = tmp_path / "hostile.db"
    for i, name in enumerate(HOSTILE):
        add_result(db, study=name, device=f"P | {name} | {i}", device_name=name, m=16 + i, n=16, k=16,
                   params=PARAMS, gflops=100.0 + i)
    return db


def report(db: Path, *args, code=0):
    return invoke(["report", "--db", f"sqlite:///{db}", *args], code)


def printable(text: str) -> bool:
    return all(c.isprintable() for c in text.split("\n"))


# ---------------------------------------------------------------- cells

@pytest.mark.parametrize("top", [[], ["--top", "1"]])
def test_csv_cells_cannot_start_a_formula_and_keep_the_name(hostile_db, top):
    text = report(hostile_db, *top, "--format", "csv").stdout
    assert printable(text.replace("\r\n", "\n"))
    records = list(csv.DictReader(io.StringIO(text)))
    assert len(records) == len(HOSTILE)
    for record in records:
        for value in record.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r", "\uff1d")), record
    shown = sorted(r["study"] for r in records)
    expected = sorted(("'" if n.startswith(("=", "+", "-", "@", "\uff1d")) else "") + output.table_cell(n)
                      for n in HOSTILE)
    assert shown == expected and sorted(r["device_name"] for r in records) == expected
    # a name that only looked dangerous after its leading tab or return stays recognisable
    assert "\\t=1+1" in shown and "'=cmd|' /C calc'!A0" in shown


def markdown_cells(line: str) -> list[str]:
    """The cells of a pipe-table row as GitHub Flavored Markdown splits it: at every pipe not
    escaped by a backslash (a backslash escapes the character after it, a backslash too)."""
    assert line.startswith("|") and line.endswith("|"), line
    cells, cell = [], ""
    for token in re.findall(r"\\.|[^\\|]|\|", line[1:-1]):
        if token == "|":
            cells.append(cell)
            cell = ""
        else:
            cell += token
    return cells + [cell]


@pytest.mark.parametrize("top", [[], ["--top", "1"]])
def test_markdown_rows_cannot_be_forged(hostile_db, top):
    lines = report(hostile_db, *top, "--format", "markdown").stdout.splitlines()
    assert len(lines) == 2 + len(HOSTILE) and printable("\n".join(lines))
    width = len(markdown_cells(lines[0]))
    header = [c.strip() for c in markdown_cells(lines[0])]
    studies = []
    for line in lines[2:]:
        cells = markdown_cells(line)
        assert len(cells) == width, line
        assert not re.search(r"(?<!\\)(\\\\)*[<\[]", line), line   # no HTML, link or image starts
        studies.append(re.sub(r"\\(.)", r"\1", cells[header.index("study")].strip()))
    assert sorted(studies) == sorted(output.table_cell(n).strip() for n in HOSTILE)


def test_table_output_holds_no_control_character(hostile_db):
    for args in ([], ["--top", "2"], ["--model"]):
        result = report(hostile_db, *args)
        out = result.stdout
        assert printable(out) and "\x1b" not in out + result.stderr and "\x9b" not in out
        assert len(out.splitlines()) == 1 + len(HOSTILE)   # every row on its line
        assert "\\x1b[2J" in out and "right\\u202eleft" in out   # the names are there, escaped


def test_json_output_escapes_every_control_character_and_keeps_the_names(hostile_db):
    text = report(hostile_db, "--format", "json").stdout
    assert all(32 <= ord(c) < 127 or c == "\n" for c in text)
    assert sorted(r["study"] for r in json.loads(text)) == sorted(HOSTILE)


def test_every_command_table_escapes_its_cells(capsys):
    from gemmtune.cli.base import emit

    rows = [{"name": name, "value": i} for i, name in enumerate(HOSTILE)]
    emit(rows, "table")
    table = capsys.readouterr().out
    assert printable(table) and len(table.splitlines()) == 1 + len(HOSTILE)
    emit(rows, "csv")
    records = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["value"] for r in records] == [str(i) for i in range(len(HOSTILE))]
    assert not any(r["name"].startswith(("=", "+", "-", "@", "\t", "\r")) for r in records)
    emit(rows, "json")
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == HOSTILE


def test_replay_names_from_the_database_reach_the_terminal_escaped(tmp_path, add_result):
    db = tmp_path / "grid.db"
    study, device = "grid\x1b]0;owned\x07", "GPU\x1b[2J"
    for tsm, gflops in ((32, 100.0), (64, 50.0)):
        add_result(db, study=study, device_name=device, params={**PARAMS, "TSM": tsm}, gflops=gflops)
    out = invoke(["replay", "--db", f"sqlite:///{db}", "--study", study, "--samplers", "random",
                  "--seeds", "1"]).stdout
    assert printable(out) and "grid\\x1b]0;owned\\x07" in out and "GPU\\x1b[2J" in out


def test_the_cell_functions():
    assert output.table_cell("plain name é 1.0") == "plain name é 1.0"
    assert output.table_cell("a\nb\x1b\x85\u202e") == "a\\nb\\x1b\\x85\\u202e"
    assert output.markdown_cell("a|b\\c\n") == "a\\|b\\\\c\\\\n"
    assert output.markdown_cell("<a>[b]") == "\\<a\\>\\[b\\]"
    assert [output.csv_cell(s) for s in ("=1", "-1", "@x", "x=1", "\t=1", "")] == ["'=1", "'-1", "'@x", "x=1",
                                                                                    "\\t=1", ""]
    frame = output.cells(pd.DataFrame({"=name": ["=x", None], "n": [1, 2]}), "csv")
    assert list(frame.columns) == ["'=name", "n"] and frame["'=name"].tolist()[0] == "'=x"
    assert frame.n.tolist() == [1, 2]


# ---------------------------------------------------------------- files

@pytest.fixture
def db(tmp_path, add_result) -> Path:
    db = tmp_path / "results.db"
    for m, gflops in ((16, 100.0), (32, 150.0)):
        add_result(db, m=m, params=PARAMS, gflops=gflops)
    return db


def only_error(result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def test_a_failing_plot_leaves_the_previous_plot_whole(db, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    where = tmp_path / "plots"
    where.mkdir()
    png = where / "plot.png"
    report(db, "--plot", str(png))
    before = png.read_bytes()
    assert before.startswith(b"\x89PNG")

    def half(self, f, **kwargs):
        f.write(before[: len(before) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half)
    result = report(db, "--plot", str(png), code=2)
    assert "No space left on device" in only_error(result) and str(png) in result.stderr
    assert png.read_bytes() == before and leftovers(where, {"plot.png"}) == []


def test_a_full_file_system_leaves_the_previous_export_and_plot_whole(db, tmp_path):
    where = tmp_path / "full"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        old = b"previous contents\n"
        header, png = where / "tuned.h", where / "plot.png"
        header.write_bytes(old)
        png.write_bytes(old)
        (where / "filler").write_bytes(b"\0" * 48 * 1024)   # the ~40 KB header no longer fits
        assert "No space left" in only_error(invoke(["export", "--db", f"sqlite:///{db}", "--format", "header",
                                                     "-o", str(header)], 2))
        assert "No space left" in only_error(report(db, "--plot", str(png), code=2))
        assert header.read_bytes() == old and png.read_bytes() == old
        assert leftovers(where, {"tuned.h", "plot.png", "filler"}) == []
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.mark.parametrize("command", [["export", "-o"], ["export", "--format", "header", "-o"], ["report", "--plot"]])
def test_a_symbolic_link_is_refused_and_left_as_it_was(db, tmp_path, command):
    target = tmp_path / "target"
    target.write_text("kept\n")
    # a link to a file, and one to a device as /dev/stdout is (which, replaced, broke a root shell's output)
    for link, to in ((tmp_path / "out", str(target)), (tmp_path / "stdout", "/dev/null")):
        link.symlink_to(to)
        result = invoke([command[0], "--db", f"sqlite:///{db}", *command[1:], str(link)], 2)
        assert "symbolic link" in only_error(result) and result.stdout == ""
        assert link.is_symlink() and os.readlink(link) == to
    assert target.read_text() == "kept\n" and stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("command", [["export", "-o"], ["report", "--plot"]])
def test_what_is_not_a_regular_file_is_refused_and_left_as_it_was(db, tmp_path, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/null")):
        result = invoke([command[0], "--db", f"sqlite:///{db}", *command[1:], str(path)], 2)
        assert "not a regular file" in only_error(result) and result.stdout == ""
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    assert only_error(invoke(["report", "--db", f"sqlite:///{db}", "--plot", "-"], 2)).startswith(
        "Error: --plot needs a file name")


def test_export_to_dash_is_standard_output(db):
    assert [e["m"] for e in json.loads(invoke(["export", "--db", f"sqlite:///{db}", "-o", "-"]).stdout)["entries"]] \
        == [16, 32]


def test_write_file_replaces_whole_keeps_permissions_and_cleans_up(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    path.chmod(0o640)
    output.write_file(path, "new\n")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o640

    def fails(f):
        f.write(b"half")
        raise ValueError("the writer failed")

    with pytest.raises(ValueError, match="the writer failed"):
        output.write_file(path, fails)
    assert path.read_text() == "new\n" and leftovers(tmp_path, {"out.txt"}) == []
    if os.geteuid() == 0:   # a file root replaces stays its owner's
        os.chown(path, 12345, 23456)
        output.write_file(path, "again\n")
        assert (path.stat().st_uid, path.stat().st_gid) == (12345, 23456) and path.read_text() == "again\n"
    with pytest.raises(GemmtuneError, match="No such file or directory"):
        output.write_file(tmp_path / "missing" / "out.txt", b"x")


def test_make_prior_refuses_a_link_as_gemmtune_does(tmp_path, add_result):
    import sys

    db = tmp_path / "one.db"
    add_result(db, params=PARAMS)
    target = tmp_path / "target"
    target.write_text("kept\n")
    link = tmp_path / "prior.csv.gz"
    link.symlink_to(target)
    done = subprocess.run([sys.executable, "tools/make_prior.py", "--device-name", "Fancy GPU 9000", "-o", str(link),
                           str(db)], cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stdout == "" and "symbolic link" in only_error(done)
    assert link.is_symlink() and target.read_text() == "kept\n"
