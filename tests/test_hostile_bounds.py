"""Bounded resources: parameter values within the ranges the families declare, wherever a
configuration comes in; a space's size bounded before anything enumerates it; children that die
with their search; compiler processes no more than the host's cores.

Each hostile case runs in a process of its own with a timeout, so that a regression fails
instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.space import MAX_POINTS, Config, check_config, load_space, make_config, parse_space, shipped_families

HUGE = 2**40
QUICK_S = 60   # far longer than any of these takes when it works; a hang fails at this


def gemmtune(*args, timeout=QUICK_S, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemmtune", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def python(code: str, timeout=QUICK_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr and not result.stdout
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ---------------------------------------------------------------- parameter ranges

def test_every_family_declares_a_range_for_each_parameter_holding_its_default():
    for family in FAMILIES.values():
        declared = {name: default for name, (default, _) in family.parameters.items() if name != "PRECISION"}
        assert set(family.ranges) == set(declared), family.name
        for name, default in declared.items():
            low, high = family.value_range(name)
            assert 0 <= low <= default <= high < 2**31, (family.name, name)


def test_a_value_past_its_range_is_refused_at_the_bound_by_every_python_entry():
    low, high = FAMILIES["xgemm_cpu"].value_range("KC")
    space = shipped_families()
    assert make_config(space, "xgemm_cpu", {"KC": high}).params["KC"] == high
    for value in (high + 1, low - 1, HUGE, 2**63 - 1, 2.0, True, "8"):
        with pytest.raises(GemmtuneError, match=f"from {low} to {high}, the range of KC"):
            make_config(space, "xgemm_cpu", {"KC": value})
    # a Config built by hand skips make_config: the device's check holds it to the same range
    from gemmtune.devices.opencl import resolve_device
    from gemmtune.precision import get_precision

    config = Config.of("xgemm_cpu", {**space.family("xgemm_cpu").defaults, "KC": HUGE})
    with pytest.raises(GemmtuneError, match="the range of KC"):
        check_config(config, resolve_device(0), get_precision("s"))


@pytest.mark.parametrize("value", [HUGE, 2**31, 2**63 - 1])
def test_space_files_hold_values_to_the_same_ranges(tmp_path, value):
    with pytest.raises(GemmtuneError, match=r"\[xgemm_cpu\] KC: \d+ is not an integer from 0 to 65536"):
        parse_space(f"[xgemm_cpu]\nKC = [0, {value}]\n", "hostile.toml", tmp_path)
    path = tmp_path / "space.toml"
    path.write_text(f"[xgemm_rt]\nMWG = [{value}]\n")
    one_error_line(gemmtune("space", "--space", str(path), "--count"), "MWG", "1 to 4096")


def test_verify_and_bench_refuse_a_huge_value_at_once():
    config = f"VW=8,MV=1,NR=4,KC={HUGE}"
    one_error_line(gemmtune("verify", "--size", "24", "--config", config), "KC", "0 to 65536")
    one_error_line(gemmtune("bench", "--sizes", "24", "--baseline", f"config:{config}"), "KC", "0 to 65536")


def test_gemm_refuses_a_huge_value_as_a_dict_and_as_a_config():
    code = f"""
import numpy as np, gemmtune
from gemmtune.errors import GemmtuneError
from gemmtune.space import Config, shipped_families
a = np.ones((4, 4), np.float32)
full = {{**shipped_families().family("xgemm_cpu").defaults, "KC": {HUGE}}}
for config in ({{"KERNEL": "xgemm_cpu", "KC": {HUGE}}}, Config.of("xgemm_cpu", full)):
    try:
        gemmtune.gemm(a, a, config=config, device=0)
    except GemmtuneError as e:
        assert "the range of KC" in str(e), e
    else:
        raise SystemExit("accepted")
print("refused")
"""
    result = python(code)
    assert result.returncode == 0 and result.stdout.strip() == "refused", result.stderr


def test_recorded_rows_are_held_to_the_same_ranges():
    from gemmtune.db.rows import config_of

    _, high = FAMILIES["xgemm_cpu"].value_range("KC")
    assert isinstance(config_of("xgemm_cpu", json.dumps({"KC": high})), Config)
    for value in (high + 1, 2**31 - 1, HUGE):   # rows once took anything up to 2^31 - 1
        assert config_of("xgemm_cpu", json.dumps({"KC": value})) == \
            "with a value that is not an integer the parameter can take"


# ---------------------------------------------------------------- the space's size

def huge_space(tmp_path) -> Path:
    """Five parameters of 1,000 values each: 10^15 points, which nothing may count or list."""
    path = tmp_path / "huge.toml"
    path.write_text("[xgemm_rt]\n" + "".join(f"{name} = {list(range(1, 1001))}\n"
                                             for name in ("MWG", "NWG", "KWG", "MDIMC", "NDIMC")))
    return path


@pytest.mark.parametrize("command", [["space", "--count"], ["space"], ["space", "--explain"],
                                     ["search", "--size", "24", "--trials", "1"]])
def test_a_huge_space_is_refused_before_anything_enumerates_it(tmp_path, command):
    args = [*command, "--space", str(huge_space(tmp_path))]
    if command[0] == "search":
        args += ["--db", f"sqlite:///{tmp_path / 'r.db'}"]
    one_error_line(gemmtune(*args), f"{1000**5:,} configurations", f"{MAX_POINTS:,}")
    assert not (tmp_path / "r.db").exists()


def test_the_shipped_spaces_fit_the_bound():
    assert all(load_space(device=kind).size <= MAX_POINTS / 8 for kind in ("GPU", "CPU"))


# ---------------------------------------------------------------- children die with their search

def _children() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[1].split()   # after the command's name, which may hold spaces
        if fields[0] != "Z":   # a zombie has ended: only its entry is left
            found[int(entry)] = int(fields[1])
    return found


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def descendants(pid: int) -> set[int]:
    parents = _children()
    found, more = set(), {pid}
    while more:
        more = {child for child, parent in parents.items() if parent in more} - found
        found |= more
    return found


def assert_none_outlive(process: subprocess.Popen, children: set[int]) -> None:
    """Kill ``process`` outright (SIGKILL: no handler of its own runs) and assert that none of
    ``children`` is alive 10 s later."""
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)
    deadline = time.monotonic() + 10
    while (alive := children & set(_children())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive, {pid: _command(pid)[:200] for pid in alive}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the search forks its counter on Linux only")
def test_no_child_outlives_a_search_killed_outright(tmp_path):
    # A product of 2^30 points, which the forked counter counts for minutes while the search runs
    space = tmp_path / "long.toml"
    ranges = {"MWG": 64, "NWG": 64, "KWG": 16, "MDIMC": 16, "NDIMC": 16}
    space.write_text("[xgemm_rt]\n" + "".join(f"{name} = {list(range(1, n + 1))}\n" for name, n in ranges.items())
                     + "VWG = [1, 2, 4, 8]\nVLM = [1, 2, 4, 8]\nVLN = [1, 2, 4, 8]\n")
    search = subprocess.Popen([sys.executable, "-m", "gemmtune", "search", "--space", str(space), "--size", "24",
                               "--device", "0", "--jobs", "1", "--timeout", "600", "-q",
                               "--db", f"sqlite:///{tmp_path / 'r.db'}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # the timing worker and a compiler (spawned), and the counter (forked: the search's command line)
        deadline, seen, forked = time.monotonic() + 120, set(), set()
        while not (forked and len(seen) >= 3) and search.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = descendants(search.pid)
            forked = {pid for pid in seen if _command(pid) == _command(search.pid)}
        assert forked and len(seen) >= 3, (seen, search.poll())
        assert_none_outlive(search, seen)
    finally:
        if search.poll() is None:
            search.kill()
        search.wait()
        search.stderr.close()


# ---------------------------------------------------------------- compiler processes

def test_jobs_beyond_the_cores_are_refused_before_any_process_starts(tmp_path):
    from gemmtune.execution.processes import Compilers
    from gemmtune.devices.info import host_cores
    from gemmtune.inputs import check_jobs
    from gemmtune.search import SearchRequest, run_search

    most = host_cores()
    for jobs in (None, 0, most):
        check_jobs(jobs)
    for jobs in (-1, most + 1, 1000):
        with pytest.raises(GemmtuneError, match=f"--jobs must be from 0 to {most}, the cores"):
            check_jobs(jobs)
    before = descendants(os.getpid())
    with pytest.raises(GemmtuneError, match="--jobs"):
        Compilers("0", most + 1, 60)
    with pytest.raises(GemmtuneError, match="--jobs"):
        run_search(SearchRequest(device="0", precision="s", m=24, n=24, k=24, trials=1, jobs=1000,
                                 db=f"sqlite:///{tmp_path / 'api.db'}"))
    assert descendants(os.getpid()) == before
    from gemmtune.search.replay import replay

    with pytest.raises(GemmtuneError, match=f"--jobs must be from 0 to {most}"):
        replay(None, jobs=1000)   # refused before the landscape is read
    one_error_line(gemmtune("search", "--size", "24", "--trials", "1", "--jobs", "1000",
                            "--db", f"sqlite:///{tmp_path / 'r.db'}"), "--jobs", f"0 to {most}", "1000")
    assert not list(tmp_path.glob("*.db"))


# ---------------------------------------------------------------- listings

def test_a_listing_past_the_bound_is_refused_before_anything_is_written():
    from gemmtune.cli import tune
    from gemmtune.files.shipped import configs_dir

    # the GPU space on this device: millions valid, once listed until the disk filled
    result = gemmtune("space", "--device", "0", "--space", str(configs_dir() / "space.toml"), "--format", "csv")
    one_error_line(result, f"more than {tune.LISTED:,} configurations are valid", "--limit")


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_limit_lists_the_first_rows_and_says_there_are_more(tmp_path, monkeypatch, fmt):
    from click.testing import CliRunner

    from gemmtune.cli import cli, tune

    path = tmp_path / "k5.toml"
    path.write_text("[xgemm_k5]\nTSM = [16, 32]\nTSN = [16, 32]\n")   # four valid here
    base = ["space", "--device", "0", "--space", str(path), "--format", fmt]

    def listed(*args):
        result = CliRunner().invoke(cli, [*base, *args])
        rows = json.loads(result.stdout) if fmt == "json" else result.stdout.splitlines()[1:]
        return result, [json.dumps(r) for r in rows] if fmt == "json" else rows

    _, every = listed("--limit", "0")
    assert len(every) == 4
    for limit in (1, 3):
        result, rows = listed("--limit", str(limit))
        assert result.exit_code == 0 and rows == every[:limit]
        assert result.stderr.strip() == f"Listed the first {limit}; more are valid."
    result, rows = listed("--limit", "4")
    assert rows == every and not result.stderr
    monkeypatch.setattr(tune, "LISTED", 3)
    result = CliRunner().invoke(cli, base)
    assert result.exit_code == 2 and not result.stdout
    assert result.stderr.startswith("Error: more than 3 configurations are valid")
    monkeypatch.setattr(tune, "LISTED", 4)
    assert listed()[1] == every


def test_the_documented_ranges_are_the_declared_ones():
    text = (Path(__file__).resolve().parent.parent / "docs/kernels.md").read_text()
    table = text[text.index("| Ranges | Parameters |"):].split("\n\n")[0].splitlines()[2:]
    documented = {}
    for row in table:
        span, names = row.strip("|").split("|")
        low, high = map(int, span.replace(",", "").split(" to "))
        documented[(low, high)] = set(re.findall(r"`(\w+)`", names))
    for family in FAMILIES.values():
        for name, span in family.ranges.items():
            assert name in documented.get(span, ()), (family.name, name, span)
