"""The scripts in tools/ run and print what they promise (their figures are measurements, so the
tests check their form and their arithmetic, not their size)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.usefixtures("no_tuned_results")
def test_call_cost_prints_the_call_beside_an_empty_launch_and_their_ratio():
    out = run("tools/call_cost.py", "--size", "8", "--calls", "50")
    figures = {name: float(value) for name, value in
               re.findall(r"^(Gemm call|Gemm call \+ finish|trivial launch|call / trivial)\s+([\d.]+)", out, re.M)}
    assert set(figures) == {"Gemm call", "Gemm call + finish", "trivial launch", "call / trivial"}, out
    assert all(v > 0 for v in figures.values())
    # The ratio is of the printed medians (rounded to two decimals there).
    assert figures["call / trivial"] == pytest.approx(figures["Gemm call"] / figures["trivial launch"], rel=0.02)


def test_cpu_probe_verifies_and_times_a_configuration():
    out = run("tools/cpu_probe.py", "-D", "VW=8", "-D", "MV=1", "-D", "NR=4", "--precision", "s,d",
              "--sizes", "48", "--repeats", "2", "--no-numpy")
    rows = [line for line in out.splitlines() if re.match(r"^[sd]\s+48\^3\s+kernel", line)]
    assert len(rows) == 2 and all(" ok " in row for row in rows), out
    assert all(float(re.search(r"kernel\s+([\d.]+) GFLOP/s", row).group(1)) > 0 for row in rows)
