"""gemmtune replay: searches re-run against recorded results, on a real grid study and on
hand-made landscapes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers_foundation import make_device
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from gemmtune.cli import cli
from gemmtune.db.store import Store
from gemmtune.devices.info import DeviceInfo
from gemmtune.models import analytic
from gemmtune.precision import get_precision
from gemmtune.search import replay as rp
from gemmtune.space import Config
from gemmtune.strategies import MAX_FREE_PROPOSALS

# 16 points, 13 valid on PoCL (three break the loads-per-thread rule): invalid proposals happen.
GRID_SPACE = """
[xgemm_k5]
TSM = [16, 32]
TSN = [16, 32]
TSK = [8, 16]
WPTN = [2, 4]
PAD = [1]
TRANSPOSEX = [8]
TRANSPOSEY = [8]
"""
GRID_STUDY = "grid-24"


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> tuple[Path, Path]:
    """(database, space file) of an exhaustive grid study measured on PoCL at 24³."""
    where = tmp_path_factory.mktemp("replay")
    space, db = where / "grid.toml", where / "grid.db"
    space.write_text(GRID_SPACE)
    result = CliRunner().invoke(cli, ["search", "--sampler", "grid", "--size", "24", "--time-cap", "0.05", "-q", "--early-stop", "0",
                                      "--space", str(space), "--study", GRID_STUDY, "--db", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    return db, space


def recorded(db: Path, study: str) -> dict[tuple, tuple[str, float | None]]:
    """The study's rows, read independently of gemmtune: params (sorted) -> (status, gflops)."""
    con = sqlite3.connect(db)
    try:
        return {tuple(sorted(json.loads(p).items())): (s, g)
                for p, s, g in con.execute("SELECT params, status, gflops FROM results WHERE study = ?", (study,))}
    finally:
        con.close()


def gpu(name="Fancy GPU 9000") -> DeviceInfo:
    return make_device(platform="Test", name=name, global_mem_bytes=2**32)


def k5(tsm, tsn, tsk) -> Config:
    return Config.of("xgemm_k5", {"TSM": tsm, "TSN": tsn, "TSK": tsk, "WPTN": 4, "PAD": 1,
                                  "TRANSPOSEX": 16, "TRANSPOSEY": 16})


SYNTHETIC = [k5(a, b, c) for a in (16, 32, 64, 128) for b in (16, 32, 64, 128) for c in (8, 16, 32, 64)]


def recorded_as(c: Config) -> Config:
    """A SYNTHETIC row as replay spells it: the rows predate TRANSPOSEW, which takes its source
    default (one element per work-item), what the kernel did then."""
    return Config.of(c.kernel, {**c.params, "TRANSPOSEW": 1})


def spelled(c: Config) -> Config:
    """The inverse of recorded_as: a replayed configuration as its SYNTHETIC row wrote it."""
    return Config.of(c.kernel, {k: v for k, v in c.params.items() if k != "TRANSPOSEW"})


def landscape(db: Path, gflops, study="synthetic", baseline: Config | None = None, m=512) -> None:
    """Hand-made rows: every configuration of SYNTHETIC, with gflops(config) (None: failed)."""
    store = Store(f"sqlite:///{db}")
    try:
        for i, config in enumerate(SYNTHETIC):
            value = gflops(config)
            store.add(study=study, trial=i, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                      precision="s", m=m, n=m, k=m, kernel=config.kernel, params=config.params,
                      status="ok" if value is not None else "compile_error", gflops=value,
                      time_ms=None if value is None else 2 * m**3 / value / 1e6, baseline=config == baseline,
                      created_at="2026-11-30T00:00:00+00:00")
    finally:
        store.close()


def test_replay_tells_optuna_exactly_the_recorded_values(grid):
    db, _ = grid
    rows = recorded(db, GRID_STUDY)
    # Correct, measured in full or stopped early as clearly slow (search's --early-stop).
    assert len(rows) == 13 and all(s in ("ok", "slow") and g > 0 for s, g in rows.values())
    land = rp.load_landscape(f"sqlite:///{db}", GRID_STUDY)
    assert land.best == max(g for s, g in rows.values() if s == "ok")
    assert land.baseline is not None
    for sampler in ("tpe", "random"):
        for seed in range(3):
            run = rp.replay_once(land, sampler, seed, 1.0)
            trials = run.study.trials
            complete = [t for t in trials if t.state == TrialState.COMPLETE]
            assert complete, sampler
            for t in complete:
                assert t.value == rows[tuple(sorted(t.params.items()))][1]  # exactly, not approximately
            for t in trials:
                if t.state == TrialState.PRUNED:
                    assert tuple(sorted(t.params.items())) not in rows
            assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
            # The baseline is measured first, as in search; each configuration once.
            assert run.measured[0] == land.baseline
            assert len({str(c) for c in run.measured}) == len(run.measured) == run.trials
            assert rows[tuple(sorted(run.measured[-1].params.items()))][1] == land.best


def test_cli_json_counts_are_within_one_and_the_valid_count(grid):
    db, space = grid
    result = CliRunner().invoke(cli, ["replay", "--db", f"sqlite:///{db}", "--study", GRID_STUDY, "--seeds", "4",
                                      "--model-seeds", "3", "--space", str(space), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    ok = sum(s == "ok" for s, _ in recorded(db, GRID_STUDY).values())
    assert (out["study"], out["precision"], out["m"], out["recorded"], out["ok"]) == (GRID_STUDY, "s", 24, 13, ok)
    assert [s["sampler"] for s in out["samplers"]] == ["tpe", "random", "tpe-seeded", "learned", "optuna-tpe", "optuna-cmaes"]
    for s in out["samplers"]:
        assert len(s["trials"]) == s["seeds"] == 4
        assert all(1 <= t <= 13 for t in s["trials"])
        assert s["median"] == np.median(s["trials"]) and s["q1"] <= s["median"] <= s["q3"]
    assert -1 <= out["model_spearman"] <= 1  # the study's device is this machine's: the model knows it


def test_cli_table(grid):
    db, _ = grid
    result = CliRunner().invoke(cli, ["replay", "--db", f"sqlite:///{db}", "--study", GRID_STUDY, "--seeds", "2",
                                      "--samplers", "random", "--target", "0.5"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["sampler", "median"])
    assert lines[header + 1].split()[0] == "random" and len(lines) == header + 2
    assert "13 configurations recorded" in result.stdout and "0.5 x best" in result.stdout


def test_seeds_replayed_in_several_processes_count_as_in_one(tmp_path, monkeypatch):
    """Each seed replays alike in any process: the counts, seed by seed, do not depend on --jobs
    (three processes over seven seeds: each takes every third, the results put back in order)."""
    pools = []

    class Pool(rp.ProcessPoolExecutor):
        def __init__(self, workers, **kw):
            pools.append(workers)
            super().__init__(workers, **kw)

    monkeypatch.setattr(rp, "ProcessPoolExecutor", Pool)
    # --jobs is capped at the cores this process may run on; three processes even on two cores.
    monkeypatch.setattr("gemmtune.inputs.host_cores", lambda: 4)
    db = tmp_path / "j.db"
    landscape(db, lambda c: float(c.params["TSM"] * c.params["TSN"] + 3 * c.params["TSK"]))
    url = f"sqlite:///{db}"
    runs = [CliRunner().invoke(cli, ["replay", "--db", url, "--study", "synthetic", "--seeds", "7", "--target", "1",
                                     "--samplers", "default,random,optuna-tpe", "--device-info", str(info),
                                     "--jobs", jobs, "--format", "json"])
            for info in [_device_file(tmp_path)] for jobs in ("1", "3")]
    assert all(r.exit_code == 0 for r in runs), [r.output for r in runs]
    one, three = ({s["sampler"]: s["trials"] for s in json.loads(r.stdout)["samplers"]} for r in runs)
    assert pools == [3]   # --jobs 1 replays in this process
    assert one == three and len(set(one["random"])) > 1   # and the seeds differ: no seed replayed twice
    land = rp.load_landscape(url, "synthetic")
    assert one["random"] == [rp.replay_once(land, "random", s, 1.0).trials for s in range(7)]


def _device_file(tmp_path) -> Path:
    path = tmp_path / "device.json"
    path.write_text(json.dumps(gpu().to_json()))
    return path


def test_replays_are_deterministic_for_a_seed(tmp_path):
    db = tmp_path / "s.db"
    landscape(db, lambda c: float(c.params["TSM"] * c.params["TSN"] + c.params["TSK"]))
    land = rp.load_landscape(f"sqlite:///{db}", "synthetic")
    for sampler in ("tpe", "random"):
        a, b = (rp.replay_once(land, sampler, 7, 0.95) for _ in range(2))
        assert a.trials == b.trials and a.measured == b.measured
        assert [t.params for t in a.study.trials] == [t.params for t in b.study.trials]


def test_random_needs_about_half_the_space_to_find_a_unique_best(tmp_path):
    db = tmp_path / "u.db"
    rank = {str(c): i for i, c in enumerate(SYNTHETIC)}
    landscape(db, lambda c: 1.0 + (rank[str(c)] * 37) % 64)  # a permutation of 1..64: one best
    land = rp.load_landscape(f"sqlite:///{db}", "synthetic")
    n = len(land.configs)
    assert n == 64 and land.baseline is None
    counts = rp.replay(land, ["random"], seeds=40, target=1.0).trials["random"]
    assert all(1 <= c <= n for c in counts)
    # Uniformly random order without repeats: the best comes at (n + 1) / 2 on average; the
    # standard error of 40 replays is about n / sqrt(12 · 40) = 2.9 trials.
    assert abs(np.mean(counts) - (n + 1) / 2) < 4 * 2.9


def test_a_perfect_model_lets_seeded_tpe_find_the_best_first(tmp_path):
    db = tmp_path / "p.db"
    dev = gpu()
    s = get_precision("s")
    # Measured = predicted, and the top prediction (of several tied ones) made the unique best.
    top = analytic.rank(SYNTHETIC, dev, s, 512, 512, 512)[0]
    landscape(db, lambda c: analytic.predict(c, dev, s, 512, 512, 512).gflops * (1.1 if c == top else 1.0))
    land = rp.load_landscape(f"sqlite:///{db}", "synthetic")
    result = rp.replay(land, ["tpe-seeded", "tpe"], seeds=3, target=1.0, seed_count=10, device=dev)
    assert result.trials["tpe-seeded"] == [1, 1, 1]
    assert min(result.trials["tpe"]) > 1  # without the model, TPE does not just guess it
    assert result.model_spearman > 0.95
    # The device description can come from a file, as `gemmtune devices --format json` prints it.
    info = tmp_path / "devices.json"
    info.write_text(json.dumps([dev.to_json(), gpu("Other GPU").to_json()]))
    out = CliRunner().invoke(cli, ["replay", "--db", f"sqlite:///{db}", "--study", "synthetic", "--seeds", "2",
                                   "--samplers", "tpe-seeded", "--target", "1", "--device-info", str(info),
                                   "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["samplers"][0]["trials"] == [1, 1]


def test_failed_configurations_count_once_and_are_told_pruned(tmp_path):
    db = tmp_path / "f.db"
    failing = {str(c) for c in SYNTHETIC[::3]}
    landscape(db, lambda c: None if str(c) in failing else float(c.params["TSM"] + c.params["TSN"]))
    land = rp.load_landscape(f"sqlite:///{db}", "synthetic")
    run = rp.replay_once(land, "random", 3, 1.0)
    failed = [c for c in run.measured if str(spelled(c)) in failing]
    assert failed  # with a third of the space failing, some were measured on the way
    assert len(set(map(str, run.measured))) == len(run.measured)   # each measured once
    states = {tuple(sorted(t.params.items())): t.state for t in run.study.trials}
    assert all(states[tuple(sorted(c.params.items()))] == TrialState.PRUNED for c in failed)
    assert all(states[tuple(sorted(c.params.items()))] == TrialState.COMPLETE
               for c in run.measured if str(spelled(c)) not in failing)


def test_tpe_learns_where_configurations_fail(tmp_path, monkeypatch):
    """Half the space fails (as launches larger than a device runs do): told PRUNED, as search and
    replay tell a failure, TPE ranks them below every result and stops proposing them; told FAIL
    (Optuna's state for an exception), TPE never sees them and keeps measuring them."""
    import gemmtune.search.proposer as proposer

    db = tmp_path / "f.db"
    landscape(db, lambda c: None if c.params["TSM"] >= 64 else float(10 * c.params["TSN"] + c.params["TSK"] + c.params["TSM"]))
    land = rp.load_landscape(f"sqlite:///{db}", "synthetic")

    def failures_and_trials():
        runs = [rp.replay_once(land, "tpe", seed, 1.0) for seed in range(8)]
        return sum(c.params["TSM"] >= 64 for r in runs for c in r.measured), sum(r.trials for r in runs)

    failed, trials = failures_and_trials()
    monkeypatch.setattr(proposer, "FAILED", TrialState.FAIL)
    failed_blind, trials_blind = failures_and_trials()
    assert failed < failed_blind / 2 and trials < trials_blind


def test_slow_rows_are_told_their_estimate_but_never_reach_the_target(tmp_path):
    # As search records them: a "slow" candidate keeps its GFLOP/s estimate, which Optuna is told,
    # but it was stopped early and can never be best. Here, contrary to what search could record,
    # the slow estimates are the highest, so only the status keeps them from ending the replay.
    db = tmp_path / "slow.db"
    store = Store(f"sqlite:///{db}")
    for i, config in enumerate(SYNTHETIC[:16]):
        store.add(study="slow", trial=i, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                  precision="s", m=512, n=512, k=512, kernel=config.kernel, params=config.params,
                  status="slow" if i % 2 else "ok", gflops=100.0 + i if i % 2 else float(i), baseline=False)
    store.close()
    land = rp.load_landscape(f"sqlite:///{db}", "slow")
    assert land.best == 14.0
    for seed in range(4):
        run = rp.replay_once(land, "random", seed, 1.0)
        assert run.measured[-1] == recorded_as(SYNTHETIC[14])
        for t in run.study.trials:
            i = next(j for j, c in enumerate(SYNTHETIC) if recorded_as(c).params == t.params)
            assert t.state == TrialState.COMPLETE and t.value == (100.0 + i if i % 2 else float(i))


def test_free_proposals_end_in_a_random_unmeasured_pick(tmp_path):
    # One recorded configuration in a space of 64 points: nearly every proposal is invalid, and
    # after MAX_FREE_PROPOSALS of them in a row the recorded one is enqueued, as search does.
    db = tmp_path / "one.db"
    store = Store(f"sqlite:///{db}")
    store.add(study="lonely", trial=0, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
              precision="s", m=512, n=512, k=512, kernel="xgemm_k5", params=SYNTHETIC[5].params, status="ok",
              gflops=5.0, baseline=False)
    store.close()
    space = tmp_path / "space.toml"
    space.write_text("[xgemm_k5]\nTSM = [16, 32, 64, 128]\nTSN = [16, 32, 64, 128]\nTSK = [8, 16, 32, 64]\n"
                     "WPTN = [4]\nPAD = [1]\nTRANSPOSEX = [16]\nTRANSPOSEY = [16]\n")
    # Rebuilt from its one row, the space would have one point; the space file has all 64.
    assert rp.load_landscape(f"sqlite:///{db}", "lonely").space.size == 1
    land = rp.load_landscape(f"sqlite:///{db}", "lonely", space_file=space)
    # The row predates TRANSPOSEW: it takes the default (one element per work-item), as the space
    # does, so proposals of the space find it.
    assert "TRANSPOSEW" not in SYNTHETIC[5].params
    assert land.space.size == 64 and land.configs == [Config.of("xgemm_k5", {**SYNTHETIC[5].params, "TRANSPOSEW": 1})]
    for seed in range(3):
        run = rp.replay_once(land, "tpe", seed, 1.0)
        pruned = [t for t in run.study.trials if t.state == TrialState.PRUNED]
        assert run.trials == 1 and len(run.study.trials) == len(pruned) + 1
        assert len(pruned) <= MAX_FREE_PROPOSALS
        # The random sampler draws from the valid configurations alone: no proposal is wasted.
        run = rp.replay_once(land, "random", seed, 1.0)
        assert run.trials == 1 and [t.state for t in run.study.trials] == [TrialState.COMPLETE]


def test_rows_recorded_before_parameters_existed_replay_without_a_space_file(tmp_path):
    # xgemm_rt rows as runs before STAGE, TRANSPOSEW and MMA wrote them, and one with a parameter
    # the kernel has since lost. Rebuilt from the rows, the space gives the newer parameters their
    # source defaults, so the constraints (which read them) can judge every row.
    old = dict(MWG=32, NWG=32, KWG=8, MDIMC=8, NDIMC=8, VWG=1, VLM=1, VLN=1, PIPE=2, PADL=0, UNROLL=1,
               BKFAST=0, WARPM=0, TRANSPOSEX=16, TRANSPOSEY=16)
    rows = [({**old, "MWG": mwg}, g) for mwg, g in ((32, 3.0), (64, 5.0))] + [({**old, "ASYNC": 1}, 9.0)]
    db = tmp_path / "legacy.db"
    store = Store(f"sqlite:///{db}")
    for i, (params, g) in enumerate(rows):
        store.add(study="legacy", trial=i, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                  precision="d", m=512, n=512, k=512, kernel="xgemm_rt", params=params, status="ok",
                  gflops=g, baseline=False)
    store.close()
    # The ASYNC row is no configuration of the shipped kernel: skipped, as every reader skips it.
    land = rp.load_landscape(f"sqlite:///{db}", "legacy")
    assert len(land.configs) == 2 and land.best == 5.0
    assert land.skipped == "Skipped 1 recorded row that is not a valid configuration of a shipped kernel family: " \
                           "1 with parameters the kernel does not declare."
    con = sqlite3.connect(db)
    con.execute("DELETE FROM results WHERE params LIKE '%ASYNC%'")
    con.commit()
    con.close()
    land = rp.load_landscape(f"sqlite:///{db}", "legacy")
    fs = land.space.family("xgemm_rt")
    assert fs.values["STAGE"] == [1] and fs.values["TRANSPOSEW"] == [1] and fs.values["MMA"] == [0]
    assert fs.values["MWG"] == [32, 64] and land.space.size == 2
    assert land.configs == [Config.of("xgemm_rt", fs.complete({**old, "MWG": mwg})) for mwg in (32, 64)]
    run = rp.replay_once(land, "random", 0, 1.0)
    assert run.trials <= 2 and run.measured[-1].params["MWG"] == 64


def test_random_draws_only_valid_configurations_each_once(tmp_path):
    # A third of the space was never recorded (invalid for the replay): random proposes none of
    # it, and measures every recorded configuration once before it runs out.
    db = tmp_path / "third.db"
    gone = {str(c) for c in SYNTHETIC[::3]}
    store = Store(f"sqlite:///{db}")
    for i, config in enumerate(c for c in SYNTHETIC if str(c) not in gone):
        store.add(study="holes", trial=i, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                  precision="s", m=512, n=512, k=512, kernel=config.kernel, params=config.params, status="ok",
                  gflops=1.0 + i, baseline=False)
    store.close()
    space = tmp_path / "space.toml"
    space.write_text("[xgemm_k5]\nTSM = [16, 32, 64, 128]\nTSN = [16, 32, 64, 128]\nTSK = [8, 16, 32, 64]\n"
                     "WPTN = [4]\nPAD = [1]\nTRANSPOSEX = [16]\nTRANSPOSEY = [16]\n")
    land = rp.load_landscape(f"sqlite:///{db}", "holes", space_file=space)
    assert len(land.configs) == 64 - len(gone)
    run = rp.replay_once(land, "random", 5, 2.0)  # a target above the best: it runs out instead
    assert run.trials is None
    assert sorted(map(str, run.measured)) == sorted(map(str, land.configs))
    assert all(t.state == TrialState.COMPLETE for t in run.study.trials)


def test_cmaes_searches_the_positions_of_the_values_and_is_told_the_recorded_ones(tmp_path):
    # A smooth landscape with one best (TSM 64, TSN 32, TSK 16). CMA-ES drops categorical
    # parameters from its search (every proposal would be its random fallback's): it must see
    # each parameter as the position of its value.
    db = tmp_path / "smooth.db"
    def gflops(c):
        p = c.params
        return 100.0 - (np.log2(p["TSM"]) - 6) ** 2 - (np.log2(p["TSN"]) - 5) ** 2 - (np.log2(p["TSK"]) - 4) ** 2
    landscape(db, gflops)
    land = rp.load_landscape(f"sqlite:///{db}", "synthetic")
    run = rp.replay_once(land, "optuna-cmaes", 3, 1.0)
    best = max(land.configs, key=land.gflops)
    assert run.trials is not None and run.measured[-1] == best
    study = run.study
    space = study.sampler.infer_relative_search_space(study, study.trials[-1])
    values = land.space.family("xgemm_k5").values
    varied = {p for p, v in values.items() if len(v) > 1}
    assert varied == {"TSM", "TSN", "TSK"} and set(space) >= varied
    assert all(space[p] == IntDistribution(0, len(values[p]) - 1) for p in varied)
    for t in study.trials:
        if t.state == TrialState.COMPLETE:   # positions in, the recorded value of that configuration out
            config = Config.of("xgemm_k5", {p: values[p][t.params[p]] for p in values})
            assert t.value == land.gflops(config)


def test_ordinal_proposals_round_trip_every_configuration(tmp_path):
    from optuna.trial import FixedTrial

    from gemmtune.search.proposals import Proposals
    from gemmtune.space import load_space

    values = {"TSM": [16, 32, 64], "TSN": [16, 64], "TSK": [8, 32], "WPTN": [4], "PAD": [0, 1],
              "TRANSPOSEX": [16], "TRANSPOSEY": [16], "TRANSPOSEW": [1]}
    toml = tmp_path / "space.toml"
    toml.write_text("[xgemm_k5]\n" + "".join(f"{p} = {v}\n" for p, v in values.items()))
    space = load_space(toml)
    assert space.family("xgemm_k5").values == values
    ordinal, plain = Proposals(space, ordinal=True), Proposals(space)
    configs = [Config.of("xgemm_k5", {**{p: v[0] for p, v in values.items()}, "TSM": a, "TSN": b, "PAD": d})
               for a in values["TSM"] for b in values["TSN"] for d in values["PAD"]]
    for c in configs:
        params = ordinal.params(c)
        assert params["TSM"] == values["TSM"].index(c.params["TSM"]) and params["TSN"] in (0, 1)
        assert ordinal.decode(params) == c == plain.decode(plain.params(c))
        assert ordinal.suggest(FixedTrial(params)) == c
        assert all(isinstance(d, IntDistribution) for d in ordinal.distributions(c).values())
    assert ordinal.decode({**ordinal.params(configs[0]), "TSM": 3}) is None   # no fourth TSM
    assert ordinal.decode({**ordinal.params(configs[0]), "TSM": -1}) is None


@pytest.mark.parametrize("args, message", [
    ([], "Missing option '--study'"),
    (["--study", "nope"], "no results for study 'nope'"),
    (["--study", "synthetic", "--samplers", "tpe,annealing"], "unknown sampler 'annealing'"),
    (["--study", "synthetic", "--seeds", "0"], "--seeds"),
    (["--study", "synthetic", "--target", "1.5"], "--target"),
    (["--study", "synthetic", "--model-seeds", "0"], "--model-seeds"),
    (["--study", "synthetic", "--jobs", "-1"], "--jobs"),
    (["--study", "synthetic"], "--device-info"),  # tpe-seeded, and Fancy GPU 9000 is not here
    (["--study", "synthetic", "--device-info", "/nonexistent/d.json"], "cannot read device description"),
    (["--study", "synthetic", "--format", "xml"], "--format"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    db = tmp_path / "b.db"
    landscape(db, lambda c: float(c.params["TSM"]))
    result = CliRunner().invoke(cli, ["replay", "--db", f"sqlite:///{db}", "--seeds", "2", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], result.stderr


def test_a_missing_database_is_not_created(tmp_path):
    db = tmp_path / "none.db"
    result = CliRunner().invoke(cli, ["replay", "--db", f"sqlite:///{db}", "--study", "x", "--samplers", "random"])
    assert result.exit_code == 2 and "no results for study 'x'" in result.stderr
    assert not db.exists()


def test_the_model_uses_the_device_the_search_stored(tmp_path, add_result):
    # A study of a device that is not on this machine, whose description the search stored.
    from gemmtune.db.store import Store
    from gemmtune.search import replay as rp

    db = tmp_path / "far.db"
    dev = gpu("Far GPU")
    for i, tsm in enumerate((16, 32)):
        add_result(db, study="far", trial=i, device=dev.key, device_name=dev.name,
                   params={"TSM": tsm, "TSN": 32, "TSK": 16, "WPTN": 4, "PAD": 1, "TRANSPOSEX": 16, "TRANSPOSEY": 8},
                   gflops=100.0 * (i + 1))
    land = rp.load_landscape(f"sqlite:///{db}", "far")
    assert land.described is None and rp.device_for(land) is None
    store = Store(f"sqlite:///{db}")
    try:
        store.save_device(dev)
        store.save_device(dev)  # once only
    finally:
        store.close()
    land = rp.load_landscape(f"sqlite:///{db}", "far")
    assert rp.device_for(land) == dev


def test_default_starts_from_the_best_of_the_nearest_tuned_shape(tmp_path):
    """As search does: after the baseline, the nearest other tuned shape's best is measured
    before the model's seeds, so a tiling that carries over is found at once."""
    from gemmtune.families import FAMILIES

    dev, s = gpu(), get_precision("s")
    ranked = [c for c in analytic.rank(SYNTHETIC, dev, s, 512, 512, 512)
              if FAMILIES[c.kernel].broken(recorded_as(c).params, dev, s) is None]
    best = spelled(ranked[-1])   # the model's last pick: no seed finds it
    value = lambda c: 2000.0 if c == best else 1000.0 + SYNTHETIC.index(c)
    with_other, alone = tmp_path / "n.db", tmp_path / "alone.db"
    for db in (with_other, alone):
        landscape(db, value)
    landscape(with_other, lambda c: 900.0 if c == best else 100.0, study="other", m=1024)
    # and a study of the replayed shape itself, which must not be used
    landscape(with_other, lambda c: 5000.0 if c == SYNTHETIC[0] else 10.0, study="same-shape")

    land = rp.load_landscape(f"sqlite:///{with_other}", "synthetic")
    assert rp.recorded_nearby(land, dev) == [recorded_as(best)]
    assert rp.replay(land, ["default"], seeds=3, target=1.0, device=dev).trials["default"] == [1, 1, 1]
    land = rp.load_landscape(f"sqlite:///{alone}", "synthetic")
    assert rp.recorded_nearby(land, dev) == []
    assert min(rp.replay(land, ["default"], seeds=3, target=1.0, device=dev).trials["default"]) > 10


def test_the_model_never_learns_from_another_recording_of_the_replayed_problem(tmp_path):
    """A second study at the replayed problem (the same space recorded again) would teach the
    model the very values it is judged on; a search at a new problem has no rows there either.
    Studies at other problems, and at the same sizes in another precision, teach it."""
    db = tmp_path / "twins.db"
    value = lambda c: 1000.0 + SYNTHETIC.index(c)
    landscape(db, value)
    landscape(db, value, study="recorded-again")
    landscape(db, value, study="other-size", m=1024)
    store = Store(f"sqlite:///{db}")
    try:
        # today's search writes the ops, N and N; the rows above, as before they were recorded, none
        store.add(study="recorded-with-ops", trial=0, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                  precision="s", m=512, n=512, k=512, trans_a="N", trans_b="N", kernel=SYNTHETIC[0].kernel,
                  params=SYNTHETIC[0].params, status="ok", gflops=1000.0, time_ms=1.0, created_at="2026-12-06T00:00:00+00:00")
        store.add(study="in-double", trial=0, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                  precision="d", m=512, n=512, k=512, kernel=SYNTHETIC[0].kernel, params=SYNTHETIC[0].params,
                  status="ok", gflops=500.0, time_ms=1.0, created_at="2026-11-30T00:00:00+00:00")
    finally:
        store.close()
    land = rp.load_landscape(f"sqlite:///{db}", "synthetic")
    assert set(rp.other_studies(land).study) == {"other-size", "in-double"}
    assert set(rp.other_studies(rp.load_landscape(f"sqlite:///{db}", "recorded-again")).study) == {"other-size", "in-double"}


def test_model_seeds_take_what_the_model_cannot_see_from_the_nearest_tuned_shape(tmp_path):
    """As search picks them: of the configurations the model predicts alike (here those differing
    in TSK alone), each seed is the one nearest the nearest tuned shape's best."""
    dev = gpu()
    with_other, alone = tmp_path / "n.db", tmp_path / "alone.db"
    for db in (with_other, alone):
        landscape(db, lambda c: 1000.0 + SYNTHETIC.index(c))
    tuned_best = k5(32, 32, 64)
    landscape(with_other, lambda c: 900.0 if c == tuned_best else 100.0, study="other", m=1024)

    seeds = rp.model_seeds(rp.load_landscape(f"sqlite:///{with_other}", "synthetic"), dev, 10)
    assert len(seeds) == 10 and recorded_as(tuned_best) in seeds
    assert {c.params["TSK"] for c in seeds} == {64}
    seeds = rp.model_seeds(rp.load_landscape(f"sqlite:///{alone}", "synthetic"), dev, 10)
    assert len(seeds) == 10 and {c.params["TSK"] for c in seeds} == {8}   # the first of each, in rank order


def test_a_device_description_file_gives_the_named_device_or_its_only_one(tmp_path):
    import json

    from gemmtune.errors import GemmtuneError
    from gemmtune.devices.info import read_device_info

    a, b = gpu("A GPU"), gpu("B GPU")
    two, one = tmp_path / "two.json", tmp_path / "one.json"
    two.write_text(json.dumps([a.to_json(), b.to_json()]))
    one.write_text(json.dumps(b.to_json()))            # an entry alone, not in a list
    assert read_device_info(two, "B GPU") == b
    assert read_device_info(one) == b and read_device_info(one, "C GPU") == b   # the only one
    with pytest.raises(GemmtuneError, match="has no device named 'C GPU'"):
        read_device_info(two, "C GPU")
    with pytest.raises(GemmtuneError, match="describes 2 devices, not one"):
        read_device_info(two)


def test_a_replay_killed_outright_takes_its_processes_with_it(tmp_path):
    """--jobs 2 replays in a pool of spawned processes; SIGKILL of the replay leaves none of them."""
    import subprocess
    import sys
    import time

    from test_hostile_bounds import _command, assert_none_outlive, descendants

    db = tmp_path / "k.db"
    landscape(db, lambda c: float(c.params["TSM"] * c.params["TSN"] + 3 * c.params["TSK"]))
    replay = subprocess.Popen([sys.executable, "-m", "gemmtune", "replay", "--db", f"sqlite:///{db}",
                               "--study", "synthetic", "--seeds", "10000", "--target", "1", "--samplers", "random",
                               "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline, pool = time.monotonic() + 120, set()
        while len(pool) < 2 and replay.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)   # the pool's two workers (spawned: their command line names multiprocessing)
            pool = {pid for pid in descendants(replay.pid) if b"multiprocessing" in _command(pid)}
        assert len(pool) >= 2, (descendants(replay.pid), replay.poll())
        time.sleep(2)   # past their initializer, into the replays
        assert_none_outlive(replay, pool)
    finally:
        if replay.poll() is None:
            replay.kill()
        replay.wait()
        replay.stderr.close()
