"""--strategy names what chooses a search's trials (replay's --strategies, the strategies it
compares); --sampler and --samplers, the names they had first, stay as aliases that mean the same."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers_foundation import TINY_SPACE, make_device

import gemmtune.search
from gemmtune import strategies
from gemmtune.cli import cli
from gemmtune.cli.base import DEFAULT_TIMEOUT
from gemmtune.db.store import Store
from gemmtune.space import Config

FAST = ["--time-cap", "0.05", "-q", "--early-stop", "0"]


def requested(monkeypatch, *args) -> gemmtune.search.SearchRequest:
    """The SearchRequest that ``gemmtune search ARGS`` hands to the search, the search itself not run."""
    seen = []
    monkeypatch.setattr(gemmtune.search, "run_search", lambda req, progress: seen.append(req) or [])
    result = CliRunner().invoke(cli, ["search", "--size", "64", *args])
    assert result.exit_code == 0, result.output
    return seen[0]


@pytest.mark.parametrize("name", ["grid", "random", "tpe"])
def test_search_takes_strategy_and_sampler_alike(monkeypatch, name):
    by_strategy, by_sampler = (requested(monkeypatch, option, name, "--seed", "5") for option in ("--strategy", "--sampler"))
    assert by_strategy == by_sampler and by_strategy.sampler == name
    # grid measures the whole space, with no default time budget, by either spelling
    assert (by_strategy.trials, by_strategy.timeout) == (None, None if name == "grid" else DEFAULT_TIMEOUT)


def test_search_without_the_option_takes_the_default_strategy(monkeypatch):
    assert requested(monkeypatch).sampler == strategies.DEFAULT != "grid"


@pytest.mark.parametrize("option", ["--strategy", "--sampler"])
def test_an_unknown_strategy_is_one_error_line_by_either_spelling(option):
    result = CliRunner().invoke(cli, ["search", "--size", "64", option, "nope"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "--strategy" in lines[0] and "nope" in lines[0]


def test_help_documents_strategy_and_names_sampler_as_its_alias():
    text = " ".join(CliRunner().invoke(cli, ["search", "--help"]).output.split())
    assert "--strategy, --sampler" in text and "--sampler is an alias" in text
    text = " ".join(CliRunner().invoke(cli, ["replay", "--help"]).output.split())
    assert "--strategies, --samplers" in text and "--samplers is an alias" in text


def test_a_grid_search_by_either_spelling_is_one_study(tmp_path):
    """--strategy grid measures every valid configuration once (each verified against numpy by
    the timing worker: status ok); --sampler grid then goes on with the same study and finds
    nothing left."""
    space, db = tmp_path / "tiny.toml", tmp_path / "g.db"
    space.write_text(TINY_SPACE)
    common = ["search", "--size", "33", "--space", str(space), "--db", f"sqlite:///{db}", "--format", "json", *FAST]
    first = CliRunner().invoke(cli, [*common, "--strategy", "grid"])
    assert first.exit_code == 0, first.output
    con = sqlite3.connect(db)
    try:
        statuses = [s for (s,) in con.execute("SELECT status FROM results")]
    finally:
        con.close()
    assert json.loads(first.stdout)["trials"] == len(statuses) == 4 and set(statuses) == {"ok"}
    again = CliRunner().invoke(cli, [*common, "--sampler", "grid"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["trials"] == 0 and json.loads(again.stdout)["study"] == json.loads(first.stdout)["study"]


def _landscape(db: Path) -> str:
    """A hand-made exhaustive study of 27 configurations, each a distinct speed: nothing to measure."""
    store = Store(f"sqlite:///{db}")
    try:
        for i, (tsm, tsn, tsk) in enumerate((a, b, c) for a in (16, 32, 64) for b in (16, 32, 64) for c in (8, 16, 32)):
            config = Config.of("xgemm_k5", {"TSM": tsm, "TSN": tsn, "TSK": tsk, "WPTN": 4, "PAD": 1,
                                            "TRANSPOSEX": 16, "TRANSPOSEY": 16})
            gflops = float(tsm * tsn + 7 * tsk)
            store.add(study="land", trial=i, device="Test | Fancy GPU 9000 | 1.0", device_name="Fancy GPU 9000",
                      precision="s", m=256, n=256, k=256, kernel=config.kernel, params=config.params, status="ok",
                      gflops=gflops, time_ms=2 * 256**3 / gflops / 1e6, baseline=i == 0,
                      created_at="2026-11-30T00:00:00+00:00")
    finally:
        store.close()
    return f"sqlite:///{db}"


def test_replay_takes_strategies_and_samplers_alike(tmp_path):
    url = _landscape(tmp_path / "land.db")
    device = tmp_path / "device.json"
    device.write_text(json.dumps(make_device(platform="Test", name="Fancy GPU 9000", global_mem_bytes=2**32).to_json()))
    runs = [CliRunner().invoke(cli, ["replay", "--db", url, "--study", "land", option, "default,random,tpe", "--seeds", "3",
                                     "--target", "1", "--device-info", str(device), "--format", "json"])
            for option in ("--strategies", "--samplers")]
    assert all(r.exit_code == 0 for r in runs), [r.output for r in runs]
    by_strategies, by_samplers = (json.loads(r.stdout) for r in runs)
    assert by_strategies == by_samplers
    assert [s["sampler"] for s in by_strategies["samplers"]] == ["default", "random", "tpe"]
    # every replay reached the one best, within the 27 configurations
    assert all(1 <= t <= 27 for s in by_strategies["samplers"] for t in s["trials"])
