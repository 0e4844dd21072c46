"""The scripts in tools/ run and print what they promise (their figures are measurements, so the
tests check their form and their arithmetic, not their size)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def test_make_prior_writes_the_rows_a_search_learns_from_and_the_same_bytes_twice(tmp_path):
    """The prior file holds exactly the ok and slow rows of the named device, each study's
    problem intact, and reads back as ``shipped_prior`` reads the shipped one."""
    from gemmtune.db.store import Store
    from gemmtune.models import shipped_prior
    from gemmtune.space import Config

    db = tmp_path / "land.db"
    store = Store(f"sqlite:///{db}")
    configs = [Config.of("xgemm_k5", {"TSM": m, "TSN": 32, "TSK": 8, "WPTN": 4, "PAD": 1, "TRANSPOSEX": 16,
                                      "TRANSPOSEY": 16, "TRANSPOSEW": 1}) for m in (16, 32, 64)]
    for device_name, study, statuses in (("Some GPU", "a", ("ok", "slow", "wrong_result")),
                                         ("Other GPU", "b", ("ok", "ok", "ok"))):
        for i, (config, status) in enumerate(zip(configs, statuses)):
            store.add(study=study, trial=i, device=f"P | {device_name} | 1", device_name=device_name, precision="d",
                      m=96, n=64, k=32, trans_a="T", kernel=config.kernel, params=config.params, status=status,
                      gflops=10.0 * (i + 1) + 0.04, time_ms=1.0, created_at="2026-12-03T00:00:00+00:00")
    store.close()
    out, again = tmp_path / "prior-some-gpu.csv.gz", tmp_path / "again.csv.gz"
    run("tools/make_prior.py", "--device-name", "Some GPU", "-o", str(out), str(db))
    run("tools/make_prior.py", "--device-name", "Some GPU", "-o", str(again), str(db))
    assert out.read_bytes() == again.read_bytes()
    rows = shipped_prior.read(out)
    assert list(rows.columns) == list(shipped_prior.COLUMNS)
    assert list(rows.status) == ["ok", "slow"] and list(rows.gflops) == [10.0, 20.0]
    assert (rows.study == "a").all() and (rows.precision == "d").all() and (rows.trans_a == "T").all()
    assert list(rows[["m", "n", "k"]].iloc[0]) == [96, 64, 32]


@pytest.mark.parametrize("case", ["no such device", "no such file", "not a database"])
def test_make_prior_answers_bad_input_with_one_error_line_and_writes_nothing(tmp_path, case):
    from gemmtune.db.store import Store

    db = tmp_path / "land.db"
    Store(f"sqlite:///{db}").close()
    if case == "not a database":
        db.write_text("not sqlite")
    args = [str(tmp_path / "missing.db")] if case == "no such file" else [str(db)]
    out = tmp_path / "prior.csv.gz"
    done = subprocess.run([sys.executable, "tools/make_prior.py", "--device-name", "Some GPU", "-o", str(out), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not list(tmp_path.glob("prior*"))


def test_proposal_cost_prints_the_cost_per_measured_trial_as_the_study_grows():
    out = run("tools/proposal_cost.py", "--device-info", "docs/landscapes/nvidia-h200.json", "-p", "z",
              "--trials", "90", "--every", "30")
    assert out.splitlines()[0].startswith("NVIDIA H200, z 1280x1792x1024: ")
    rows = [tuple(float(x.replace(",", "")) for x in line.split()) for line in out.splitlines()
            if re.match(r"^\s+\d+\s+\d+\s", line)]
    assert [r[0] for r in rows] == [30, 60, 90], out
    in_study = [0] + [r[1] for r in rows]
    for (measured, study, per_measured, ms, best), before in zip(rows, in_study):
        assert study >= measured and ms > 0 and best > 0
        assert per_measured == pytest.approx((study - before) / 30, abs=0.05)   # its own arithmetic
    assert [r[4] for r in rows] == sorted(r[4] for r in rows)   # the best so far never falls
    outcomes = dict((reason.strip(), int(count)) for reason, count in
                    re.findall(r"(?:, |outcome: )([a-z :-]+?) (\d+)", out.splitlines()[-1]))
    assert outcomes["measured"] == 90 and sum(outcomes.values()) == rows[-1][1], out


def test_trial_cost_stores_tells_and_records_each_trial_and_prints_the_medians(tmp_path):
    import optuna

    db = tmp_path / "cost.db"
    out = run("tools/trial_cost.py", "--trials", "40", "--db", f"sqlite:///{db}")
    figures = dict((name, float(ms)) for name, ms in
                   re.findall(r"^(store|claim|tell|record|total)\s+([\d.]+)$", out, re.M))
    assert list(figures) == ["store", "claim", "tell", "record", "total"]
    assert out.startswith("median ms per trial over 20 trials")
    assert all(ms > 0 for ms in figures.values())
    assert figures["total"] == pytest.approx(sum(figures.values()) - figures["total"], abs=0.02)
    # What it timed is what a search writes: every trial finished in the study, a results row each.
    trials = optuna.load_study(study_name="trial-cost", storage=f"sqlite:///{db}").trials
    state = optuna.trial.TrialState
    assert [t.state for t in trials] == [state.PRUNED if i % 10 == 9 else state.COMPLETE for i in range(40)]
    assert [t.value for t in trials][:3] == [100.0, 101.0, 102.0]
    from gemmtune.db.store import Store

    store = Store(f"sqlite:///{db}", create=False)
    try:
        rows = store.frame(study="trial-cost")
    finally:
        store.close()
    assert len(rows) == 40 and (rows.status == "ok").sum() == 36
    assert (rows[rows.status == "ok"].gflops > 0).all() and rows[rows.status != "ok"].gflops.isna().all()
    again = subprocess.run([sys.executable, "tools/trial_cost.py", "--trials", "40", "--db", f"sqlite:///{db}"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and again.stderr.startswith("Error: ") and "already holds" in again.stderr


@pytest.mark.parametrize("args", [["--trials", "20"], ["--trials", "30", "-p", "q"]])
def test_trial_cost_answers_bad_input_with_one_error_line_and_writes_nothing(tmp_path, args):
    db = tmp_path / "cost.db"
    done = subprocess.run([sys.executable, "tools/trial_cost.py", *args, "--db", f"sqlite:///{db}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith("Error: ") and len(done.stderr.splitlines()) == 1
    assert not db.exists()


def test_build_cost_builds_one_at_a_time_then_side_by_side():
    out = run("tools/build_cost.py", "--size", "128", "--configs", "3", "--at-once", "2")
    rows = re.findall(r"^\| (\d+) \| (\d+) \| ([\d.]+) \| (–|[\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert out.splitlines()[0].endswith(", s 128^3, 7 configurations drawn, 1 to a program"), out
    assert [(int(p), int(b)) for p, b, *_ in rows] == [(1, 3), (2, 4)], out
    assert all(float(build) > 0 and float(rate) > 0 for _, _, build, _, rate in rows)
    # PoCL keeps its builds for every process: there is no binary to load after them.
    assert [load for *_, load, _ in rows] == ["–", "–"]


def test_build_cost_counts_candidates_built_several_to_a_program():
    out = run("tools/build_cost.py", "--size", "128", "--configs", "2", "--at-once", "1", "--together", "2")
    rows = re.findall(r"^\| (\d+) \| (\d+) \| ([\d.]+) \| (–|[\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert out.splitlines()[0].endswith(", s 128^3, 6 configurations drawn, 2 to a program"), out
    assert [(int(p), int(c)) for p, c, *_ in rows] == [(1, 2), (1, 4)], out
    assert all(float(build) > 0 and float(rate) > 0 for _, _, build, _, rate in rows)


def test_build_cost_together_builds_each_candidate_with_its_own_parameters():
    """Two xgemm_rt candidates in one program: each kernel is there under its own name, built for
    its own work-group (reqd_work_group_size(MDIMC, NDIMC, 1)). A copy that kept the macros of
    the one before would be built for the first one's work-group; one whose names were not
    renamed would not build."""
    import random

    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.operation import build, defines
    from gemmtune.launch.plan import Problem
    from gemmtune.precision import get_precision
    from gemmtune.space import load_space
    from gemmtune.space.valid import sample_valid

    build_cost = _tool("build_cost")
    info, dev = open_device("0")
    prec, space = get_precision("s"), load_space(None, dev)
    drawn = [c for c in sample_valid(space, info, prec, 200, random.Random(3)) if c.kernel == "xgemm_rt"]
    group = lambda c: (c.params["MDIMC"], c.params["NDIMC"], 1)  # noqa: E731
    pair = [drawn[0], next(c for c in drawn if group(c) != group(drawn[0]))]
    parts = [(space.family(c.kernel).source, defines(c, prec, Problem(128, 128, 128))) for c in pair]
    source, suffixes = build_cost.together(parts, build_cost.shared_defines(dev))
    program = build(cl.Context([dev]), source, {})
    assert set(program.get_info(cl.program_info.KERNEL_NAMES).split(";")) >= {"xgemm__0", "xgemm__1"}
    for config, suffix in zip(pair, suffixes):
        kernel = cl.Kernel(program, "xgemm" + suffix)
        assert tuple(kernel.get_work_group_info(cl.kernel_work_group_info.COMPILE_WORK_GROUP_SIZE, dev)) == group(config)


@pytest.mark.parametrize("args", [["--at-once", "0"], ["--configs", "-1"], ["--size", "0"], ["-p", "q"],
                                  ["--device", "99"], ["--together", "0"]])
def test_build_cost_answers_bad_input_with_one_error_line(args):
    done = subprocess.run([sys.executable, "tools/build_cost.py", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stderr.startswith("Error: ") and len(done.stderr.splitlines()) == 1


def test_pipeline_bench_runs_the_search_over_stand_in_workers_of_the_described_device(tmp_path):
    db = tmp_path / "pipe.db"
    out = run("tools/pipeline_bench.py", "-p", "d", "--size", "512", "--timeout", "4", "--device-ms", "20",
              "--build-ms", "30", "--jobs", "2", "--binary-kb", "64", "--db", f"sqlite:///{db}")
    assert re.search(r"^device\s+NVIDIA CUDA \| NVIDIA H200 \| ", out, re.M), out   # the described device, not this one
    trials = int(re.search(r"^this run\s+(\d+) trials", out, re.M).group(1))
    busy, build, proposal, process = map(int, re.search(
        r"busy (\d+)% of the wall time; nothing to measure, waiting for a build (\d+)%, for a proposal (\d+)%, "
        r"for this process (\d+)%", out).groups())
    assert 0 < busy <= 100 and build + proposal + process <= 100 - busy + 2
    # A stand-in trial takes 20 ms: no more trials than 4 s of them, and each one a results row.
    assert 0 < trials <= 4 / 0.020 + 2
    from gemmtune.db.store import Store

    store = Store(f"sqlite:///{db}", create=False)
    try:
        rows = store.frame()
    finally:
        store.close()
    assert len(rows) == trials and set(rows.status) == {"ok"} and set(rows.device_name) == {"NVIDIA H200"}


@pytest.mark.parametrize("args", [["--device-ms", "0"], ["--jobs", "0"], ["--binary-kb", "-1"],
                                  ["--device-info", "no-such.json"]])
def test_pipeline_bench_answers_bad_input_with_one_error_line(tmp_path, args):
    done = subprocess.run([sys.executable, "tools/pipeline_bench.py", *args, "--db", f"sqlite:///{tmp_path / 'p.db'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith("Error: ") and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "p.db").exists()


def _tool(name: str):
    """A script of tools/ as a module."""
    import importlib

    sys.path.insert(0, str(REPO / "tools"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "tools"))


def test_replay_bench_writes_the_landscapes_the_docs_replay_from_the_repository(tmp_path):
    """The benchmark's database holds every recorded row of the 25 landscapes, the older grids'
    baselines, and the H200's description and peaks, which the models' features depend on."""
    from gemmtune.db.store import Store
    from gemmtune.devices.info import read_device_info
    from gemmtune.models import shipped_prior
    from gemmtune.search import replay

    bench = _tool("replay_bench")
    db = tmp_path / "land.db"
    landscapes = bench.LANDSCAPES
    grids = shipped_prior.read(landscapes / "grids-nvidia-h200.csv.gz")
    shipped = shipped_prior.read(REPO / "configs/prior-nvidia-h200.csv.gz")
    assert bench.build(db) == len(grids) + len(shipped)
    assert not list(tmp_path.glob("*.partial"))
    store = Store(f"sqlite:///{db}", create=False)
    rows = store.frame()
    dev = read_device_info(landscapes / "nvidia-h200.json")
    assert store.latest_peaks(dev.key) == json.loads((landscapes / "nvidia-h200-peaks.json").read_text())
    assert store.device_info(dev.key) == dev
    store.close()
    assert rows.study.nunique() == 25 and set(rows.device_name) == {"NVIDIA H200"}
    assert rows.groupby("study").size().to_dict() == {**grids.groupby("study").size().to_dict(),
                                                      **shipped.groupby("study").size().to_dict()}
    baselines = rows[rows.baseline == 1]
    assert sorted(baselines.study) == sorted(set(grids.study)) and set(baselines.trial) == {0}
    land = replay.load_landscape(f"sqlite:///{db}", "grid-d3")
    assert land.baseline is not None and land.peaks["d"] == 32679
    assert land.best == pytest.approx(grids[grids.study == "grid-d3"].gflops.astype(float).max())


def test_replay_bench_writes_another_devices_landscapes_without_the_h200s_prior_or_peaks(tmp_path):
    """The H100's landscapes: its own description, no peaks measured (the models use its nominal
    ones, as a search there does), no rows of the H200 in the database: a replay adds the
    H200's shipped rows it borrows, at other problems."""
    from gemmtune.db.store import Store
    from gemmtune.devices.info import read_device_info
    from gemmtune.models import shipped_prior
    from gemmtune.search import replay

    bench = _tool("replay_bench")
    assert {"nvidia-h100", "nvidia-h200"} <= set(bench.devices())
    db = tmp_path / "h100.db"
    recorded = shipped_prior.read(bench.LANDSCAPES / "landscapes-nvidia-h100.csv.gz")
    assert bench.build(db, device="nvidia-h100") == len(recorded)
    store = Store(f"sqlite:///{db}", create=False)
    rows = store.frame()
    dev = read_device_info(bench.LANDSCAPES / "nvidia-h100.json")
    assert store.device_info(dev.key) == dev and store.latest_peaks(dev.key) == {}
    store.close()
    assert set(rows.device_name) == {"NVIDIA H100 80GB HBM3"} and rows.study.nunique() == 10
    assert (rows.groupby("study").baseline.sum() == 1).all()   # each measured its baseline first
    land = replay.load_landscape(f"sqlite:///{db}", "land-z-1024")
    assert replay.device_for(land) == dev and land.peaks == {}
    assert land.best == pytest.approx(recorded[recorded.study == "land-z-1024"].gflops.astype(float).max())
    others = replay.other_studies(land, dev)   # with the H200's shipped rows, which it borrows
    assert "land-z-1024" not in set(others.study) and set(others.device) == {dev.key}
    z1024 = (others.precision == "z") & (others.m == 1024) & (others.n == 1024) & (others.k == 1024)
    assert not z1024.any() and others.study.str.startswith(shipped_prior.PREFIX).any()


def test_replay_bench_replays_each_landscape_once_and_judges_the_bar(tmp_path):
    db = tmp_path / "two.db"
    assert _tool("replay_bench").build(db, {"grid-z2", "grid-z3"}) == 48 + 56
    args = ["tools/replay_bench.py", "--db", str(db), "--samplers", "default,random", "--seeds", "3"]
    one = subprocess.run([sys.executable, *args, "--studies", "grid-z3"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert one.returncode == 0, one.stderr
    assert sorted(json.loads((tmp_path / "two.json").read_text())) == ["grid-z3|default|0.95|3", "grid-z3|random|0.95|3"]
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["grid-z2: default, random"]   # grid-z3's figures were kept
    figures = json.loads((tmp_path / "two.json").read_text())
    assert sorted(figures) == sorted(f"{s}|{p}|0.95|3" for s in ("grid-z2", "grid-z3") for p in ("default", "random"))
    for entry in figures.values():
        assert len(entry["trials"]) == 3 and entry["median"] == float(np.median(entry["trials"]))
    rows = [line for line in done.stdout.splitlines() if line.startswith("| grid-z")]
    assert [r.split(" | ")[0] for r in rows] == ["| grid-z2", "| grid-z3"]
    again = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stderr == "" and again.stdout == done.stdout   # nothing replayed twice


def test_replay_bench_keeps_another_forests_figures_apart_and_the_stock_ones_for_every_forest(tmp_path):
    """--forest-seed refits the learned model with other trees: the default's figures for that
    forest are new, the stock samplers' (which learn nothing) are not replayed again."""
    db = tmp_path / "two.db"
    _tool("replay_bench").build(db, {"grid-d3", "grid-z3"})   # two problems: each teaches the other's model
    args = [sys.executable, "tools/replay_bench.py", "--db", str(db), "--samplers", "default,random", "--seeds", "3",
            "--studies", "grid-z3"]
    first = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    other = subprocess.run([*args, "--forest-seed", "7"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0 and other.returncode == 0, other.stderr
    assert other.stderr.splitlines() == ["grid-z3: default"]
    figures = json.loads((tmp_path / "two.json").read_text())
    assert sorted(figures) == ["grid-z3|default|0.95|3", "grid-z3|default|0.95|3|forest 7", "grid-z3|random|0.95|3"]
    ours, theirs = figures["grid-z3|default|0.95|3"], figures["grid-z3|default|0.95|3|forest 7"]
    assert ours["learned_spearman"] != theirs["learned_spearman"]   # other trees, other predictions
    row = next(line for line in other.stdout.splitlines() if line.startswith("| grid-z3"))
    medians = [cell.split(" (")[0] for cell in row.split(" | ")[2:4]]   # quartiles after them
    assert medians == [f"{theirs['median']:g}", f"{figures['grid-z3|random|0.95|3']['median']:g}"]


@pytest.mark.parametrize("default, stock, verdict", [(3, [10, 7], "met"), (3.5, [7, 30], "met"),
                                                     (4, [7, 9], "missed"), (1, [1.5, 40], "out of reach")])
def test_replay_bench_bar_is_half_the_best_stock_median(default, stock, verdict):
    assert _tool("replay_bench").verdict(default, stock) == verdict


def test_replay_bench_table_shows_quartiles_the_geometric_mean_and_the_count():
    bench = _tool("replay_bench")
    done = {}
    for study, medians in (("a", {"default": 2, "random": 8}), ("b", {"default": 8, "random": 2}),
                           ("c", {"default": 1})):   # c: random not replayed
        for sampler, median in medians.items():
            done[bench.key(study, sampler, 0.95, 5)] = {
                "study": study, "sampler": sampler, "median": median, "q1": median, "q3": median + (study == "a"),
                "recorded": 10, "learned_spearman": 0.5, "precision": "d", "ok": 10, "trials": []}
    done[bench.key("d", "random", 0.99, 5)] = {**done[bench.key("a", "random", 0.95, 5)], "study": "d"}  # another target
    text = bench.table(done, ["default", "random"], 5, 0.95)
    assert "| a | 10 | 2 (2–3) | 8 (8–9) | 0.50 | met |" in text
    assert "| b | 10 | 8 | 2 | 0.50 | missed |" in text
    assert "| c | 10 | 1 | – | 0.50 |  |" in text and "| d |" not in text
    assert "| **geometric mean** (2 with every sampler) | | 4.00 | 4.00 | | |" in text
    assert text.endswith("The bar: met at 1, missed at 1 of 2.")


@pytest.mark.parametrize("case", ["figures not JSON", "no landscapes", "not a database", "unknown landscape",
                                  "negative forest seed", "unknown sampler with another forest",
                                  "unknown device"])
def test_replay_bench_answers_bad_input_with_one_error_line(tmp_path, case):
    from gemmtune.db.store import Store

    db = tmp_path / "land.db"
    if case == "not a database":
        db.write_text("not sqlite")
    else:
        Store(f"sqlite:///{db}").close()
    if case in ("figures not JSON", "unknown landscape", "unknown sampler with another forest"):
        _tool("replay_bench").build(db.with_name("two.db"), {"grid-z2"})
        db = db.with_name("two.db")
    if case == "figures not JSON":
        (tmp_path / "two.json").write_text("{not json")
    only = ["--studies", "grid-z9"] if case == "unknown landscape" else []
    if case == "negative forest seed":
        db, only = tmp_path / "new.db", ["--forest-seed", "-1"]
    if case == "unknown device":
        db, only = tmp_path / "new.db", ["--device", "nvidia-h300"]
    sampler = "random"
    if case == "unknown sampler with another forest":
        sampler, only = "tpe-unknown", ["--forest-seed", "3"]
    done = subprocess.run([sys.executable, "tools/replay_bench.py", "--db", str(db), "--samplers", sampler,
                           "--seeds", "1", *only], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert case not in ("negative forest seed", "unknown device") or not db.exists()   # nothing half-written
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_model_bench_within_a_landscape_finds_its_structure_and_not_noise(tmp_path):
    """Trees fitted to four fifths of a landscape rank the fifth where speed follows the
    parameters, and do not where it is noise."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_replay import gpu, landscape

    from gemmtune.search import replay

    db = tmp_path / "two.db"
    rng = np.random.default_rng(5)
    landscape(db, lambda c: 100.0 * c.params["TSN"] / (1 + c.params["TSK"] / 8) + c.params["TSM"], study="structured")
    landscape(db, lambda c: float(rng.uniform(100, 200)), study="noise")
    within = _tool("model_bench").within
    assert within(replay.load_landscape(f"sqlite:///{db}", "structured"), gpu(), 5, 0) > 0.8
    assert abs(within(replay.load_landscape(f"sqlite:///{db}", "noise"), gpu(), 5, 0)) < 0.4


def test_model_bench_prints_both_figures_per_landscape_and_counts_them(tmp_path):
    db = tmp_path / "two.db"
    _tool("replay_bench").build(db, {"grid-d3", "grid-z3"})
    out = run("tools/model_bench.py", "--db", str(db), "--folds", "4")
    rows = re.findall(r"^\| (grid-[dz]3) \| (\d+) \| (-?[\d.]+) \| (-?[\d.]+) \|$", out, re.M)
    assert [r[0] for r in rows] == ["grid-d3", "grid-z3"] and [int(r[1]) for r in rows] == [88, 56], out
    left, own = (sum(float(r[i]) >= 0.7 for r in rows) for i in (2, 3))
    assert all(-1 <= float(r[i]) <= 1 for r in rows for i in (2, 3))
    assert out.rstrip().endswith(f"At least 0.7: {left} of 2 left out, {own} of 2 within.")
    assert "(4-fold)" in out


def test_model_bench_shows_a_dash_where_no_other_problem_taught_a_model():
    text = _tool("model_bench").table([("alone", 40, None, 0.91), ("taught", 50, 0.75, 0.6)], 5)
    assert "| alone | 40 | – | 0.91 |" in text and "| taught | 50 | 0.75 | 0.60 |" in text
    assert text.endswith("At least 0.7: 1 of 2 left out, 1 of 2 within.")


@pytest.mark.parametrize("args", [["--folds", "1"], ["--forest-seed", "-2"], ["--device", "nvidia-h300"]])
def test_model_bench_answers_bad_input_with_one_error_line(tmp_path, args):
    _fails_with_one_error_line("tools/model_bench.py", tmp_path / "new.db", args)


def test_breed_bench_breeds_past_each_samples_best(tmp_path):
    """With a model fitted to two landscapes, breeding from each sample ends at least as high as
    the sample's best, and higher somewhere: a sample of thousands misses the model's best."""
    db = tmp_path / "two.db"
    _tool("replay_bench").build(db, {"grid-d3", "grid-z3"})
    out = run("tools/breed_bench.py", "--db", str(db), "-p", "d", "--shape", "1536,2304,1280", "--samples", "2")
    rows = re.findall(r"^\| (\d) \| (-?[\d.]+) \| (-?[\d.]+) \| (\d+) \| ([\d.]+), ([\d.]+) \| (\S+) .*\|$", out, re.M)
    assert [r[0] for r in rows] == ["0", "1"], out
    assert all(float(r[2]) >= float(r[1]) and int(r[3]) > 0 and r[6] == "xgemm_rt" for r in rows), out
    assert any(float(r[2]) > float(r[1]) for r in rows), out


@pytest.mark.parametrize("args", [["--samples", "0"], ["--shape", "64,64"], ["--shape", "0,64,64"], ["--shape", "8,8,8,d"],
                                  ["--shape", "8,8,8;9,9,9"], ["-p", "q"],
                                  ["--device", "nvidia-h300"]])
def test_breed_bench_answers_bad_input_with_one_error_line(tmp_path, args):
    _fails_with_one_error_line("tools/breed_bench.py", tmp_path / "new.db", args)


def test_breed_bench_names_its_own_option_in_a_shape_error(tmp_path):
    done = subprocess.run([sys.executable, "tools/breed_bench.py", "--db", str(tmp_path / "new.db"), "--shape", "0,8,8"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith("Error: --shape '0,8,8': m must be"), done.stderr


def _fails_with_one_error_line(tool: str, db: Path, args: list[str]) -> None:
    """``tool --db db args`` exits 2 with one ``Error:`` line, and writes no database."""
    done = subprocess.run([sys.executable, tool, "--db", str(db), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "" and not db.exists()
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr



@pytest.mark.usefixtures("no_tuned_results")
def test_complex3m_accuracy_shows_3m_losing_a_small_imaginary_part():
    def errors(ratio: str) -> dict[str, tuple[float, float]]:
        out = run("tools/complex3m_accuracy.py", "--size", "96", "--precision", "z", "--ratio", ratio)
        found = re.findall(r"(standard|3m)  real part (\S+)  imaginary part (\S+)  componentwise (\S+)", out)
        assert len(found) == 2, out
        return {name: (float(real), float(imag)) for name, real, imag, _ in found}

    even, skewed = errors("1"), errors("1e-6")
    # As large imaginary as real parts: both products are accurate to a few units of double.
    assert max(max(e) for e in even.values()) < 1e-13
    # Imaginary parts a millionth of the real ones: 3M's T3 - T1 - T2 cancels, the standard
    # product's imaginary part does not; the real parts stay alike.
    assert skewed["3m"][1] > 1e3 * skewed["standard"][1] and skewed["standard"][1] < 1e-13
    assert skewed["3m"][0] < 1e-13
    bad = subprocess.run([sys.executable, "tools/complex3m_accuracy.py", "--ratio", "nan"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: ") and len(bad.stderr.splitlines()) == 1
