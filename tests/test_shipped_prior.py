"""The results shipped with the package as a prior for the learned model (``gemmtune.models.shipped_prior``)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_replay import SYNTHETIC, gpu, landscape  # noqa: E402

from gemmtune.db.store import Store  # noqa: E402
from gemmtune.families import FAMILIES  # noqa: E402
from gemmtune.devices.info import read_device_info  # noqa: E402
from gemmtune.models import (
    learned,  # noqa: E402
    shipped_prior,
)
from gemmtune.models.analytic import spearman  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.search import replay as rp
from gemmtune.search.prior import PriorModels, other_rows, search_prior, sources  # noqa: E402
from gemmtune.db.tuned import shipped_config  # noqa: E402

H200 = "NVIDIA H200"


def h200():
    """The H200's own description (limits, matrix instructions), which the rows were measured on."""
    return read_device_info(Path(__file__).resolve().parent.parent / "docs" / "landscapes" / "nvidia-h200.json")


def test_the_h200_rows_are_shipped_and_each_is_a_configuration_of_todays_kernels():
    dev = gpu(H200)
    rows = shipped_prior.rows_for(dev)
    assert len(rows) > 10_000 and rows.study.nunique() >= 10
    assert rows.study.str.startswith(shipped_prior.PREFIX).all()
    assert (rows.id < 0).all() and rows.id.is_unique            # never a database row's id
    assert (rows.device == dev.key).all() and set(rows.status) <= {"ok", "slow"} and (rows.gflops > 0).all()
    assert all(shipped_config(r.kernel, r.params) is not None for r in rows.itertuples())
    # On the H200 itself every row is trained on but those a constraint added since the
    # landscapes were recorded rules out (z tiles whose accumulators take over half a
    # work-item's registers), a few hundredths.
    rows = shipped_prior.rows_for(h200())
    ruled_out = sum(FAMILIES[r.kernel].broken(shipped_config(r.kernel, r.params).params, h200(),
                                              get_precision(r.precision)) is not None for r in rows.itertuples())
    x, y = learned.training_rows(rows, h200())
    assert len(y) == len(rows) - ruled_out and ruled_out < len(rows) / 100
    assert set(rows.precision) == {"s", "d", "c", "z"}
    assert shipped_prior.file_name(H200) == "prior-nvidia-h200.csv.gz"


def test_other_devices_have_none_and_their_searches_learn_from_the_database_alone(tmp_path):
    db = tmp_path / "other.db"
    landscape(db, lambda c: 100.0 * c.params["TSN"], study="elsewhere")
    store = Store(f"sqlite:///{db}", create=False)
    try:
        dev = gpu()   # the device the landscape was recorded on
        assert shipped_prior.rows_for(dev).empty
        mine = search_prior(store, dev, "new")
        assert len(mine) == len(SYNTHETIC) and mine.equals(other_rows(store, dev.key, "new"))
    finally:
        store.close()


def test_a_search_learns_from_the_shipped_rows_and_a_replay_does_not(tmp_path):
    """A search on an H200 adds the shipped rows to its database's; a replay judges each landscape
    with a model of the database's other studies alone, so never one that learned from it."""
    dev = gpu(H200)
    url = f"sqlite:///{tmp_path / 'h200.db'}"
    store = Store(url)
    try:
        for study, size in (("mine", 512), ("other", 1024)):
            for i, config in enumerate(SYNTHETIC):
                store.add(study=study, trial=i, device=dev.key, device_name=dev.name, precision="s", m=size, n=size,
                          k=size, kernel=config.kernel, params=config.params, status="ok", gflops=10.0 + i,
                          time_ms=1.0, baseline=i == 0, created_at="2026-12-03T00:00:00+00:00")
        prior = search_prior(store, dev, "mine")
    finally:
        store.close()
    shipped = shipped_prior.rows_for(dev)
    assert set(prior.study) == {"other", *shipped.study}
    assert len(prior) == len(SYNTHETIC) + len(shipped)
    judged = rp.other_studies(rp.load_landscape(url, "mine"))
    assert set(judged.study) == {"other"}


def test_an_empty_database_on_that_device_seeds_from_the_model_of_the_shipped_rows(tmp_path):
    dev = gpu(H200)
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(url).close()
    store = Store(url, create=False)
    try:
        prior = search_prior(store, dev, "first-search")
    finally:
        store.close()
    priors = PriorModels(url, [dev])
    fitted = priors.model(prior, dev, None)
    assert fitted is not None and priors.model(prior, dev, None) is fitted   # fitted once, on the thread
    assert PriorModels(url, [gpu()]).model(None, gpu(), None) is None


def test_the_shipped_rows_teach_a_model_that_ranks_landscapes_it_never_saw():
    """Each of two shipped landscapes (s and z) left out, the model of the others ranks its
    correct configurations' measured speeds: a model that learned nothing, or from rows filed
    under the wrong problem, would not."""
    dev = h200()
    rows = shipped_prior.rows_for(dev)
    studies = sorted(rows.study.unique())
    for wanted in ("s", "z"):
        left_out = next(s for s in studies if rows[rows.study == s].precision.iloc[0] == wanted)
        fitted = learned.prior_model(rows[rows.study != left_out], dev)
        held = rows[(rows.study == left_out) & (rows.status == "ok")]
        x, y = learned.training_rows(held, dev)
        predicted, _ = fitted.predict(x)
        assert spearman(-predicted, -y) > 0.5, left_out
        assert spearman(-np.random.default_rng(0).permutation(predicted), -y) < 0.2


def test_a_first_search_on_a_device_with_shipped_rows_seeds_from_their_model(tmp_path, monkeypatch):
    """On PoCL, with rows of this device shipped (written by tools/make_prior.py from a grid at
    another size): a search on an empty database fits its seeds' model to them; without them it
    has none."""
    import subprocess

    from click.testing import CliRunner

    from gemmtune.cli import cli

    space = tmp_path / "k5.toml"
    space.write_text("[xgemm_k5]\nTSM = [8, 16, 32]\nTSN = [16, 32]\nTSK = [8, 16]\nWPTN = [2, 4]\nPAD = [1]\n"
                     "TRANSPOSEX = [8]\nTRANSPOSEY = [8]\n")   # 20 valid: more rows than a model needs
    common = ["--device", "0", "--space", str(space), "--time-cap", "0.05", "--early-stop", "0", "-q"]
    source = tmp_path / "source.db"
    grid = CliRunner().invoke(cli, ["search", "--sampler", "grid", "--size", "32", "--db", f"sqlite:///{source}",
                                    *common])
    assert grid.exit_code == 0, grid.output
    name = Store(f"sqlite:///{source}", create=False).frame().device_name.iloc[0]
    prior_file = tmp_path / "prior.csv.gz"
    subprocess.run([sys.executable, "tools/make_prior.py", "--device-name", name, "-o", str(prior_file), str(source)],
                   cwd=Path(__file__).resolve().parents[1], check=True, capture_output=True)
    shipped = shipped_prior.read(prior_file)
    assert len(shipped) >= learned.MIN_ROWS
    fitted_models = []
    seeds = learned.seeds
    monkeypatch.setattr(learned, "seeds", lambda *a, **kw: fitted_models.append(a[4] if len(a) > 4 else kw.get(
        "fitted")) or seeds(*a, **kw))
    for with_rows in (True, False):
        monkeypatch.setattr(shipped_prior, "_read", lambda device_name: shipped if with_rows else None)
        db = f"sqlite:///{tmp_path / f'first-{with_rows}.db'}"
        found = CliRunner().invoke(cli, ["search", "--size", "48", "--trials", "3", "--seed", "1", "--db", db, *common])
        assert found.exit_code == 0, found.output
        assert len(Store(db, create=False).frame()) == 3
    assert len(fitted_models) == 2
    assert fitted_models[0] is not None and fitted_models[1] is None


def h100():
    """An H100 as it described itself: no rows of its own are shipped; it is of the H200's kind."""
    return read_device_info(Path(__file__).resolve().parent.parent / "docs" / "landscapes" / "nvidia-h100.json")


def test_a_device_of_the_h200s_kind_learns_from_its_rows_as_its_own():
    dev = h100()
    assert dev.name != H200 and shipped_prior.source(dev) == H200
    assert [d.name for d in shipped_prior.shipped_devices()] == [H200]
    rows, borrowed, own = shipped_prior.rows_for(dev), shipped_prior.borrowed(dev), shipped_prior.rows_for(h200())
    assert len(rows) == len(own) and rows.drop(columns=["device", "device_name"]).equals(
        own.drop(columns=["device", "device_name"]))
    assert (rows.device == dev.key).all() and (rows.device_name == dev.name).all()
    assert borrowed.equals(rows)
    assert shipped_prior.borrowed(h200()).empty   # its own: a replay never adds them


@pytest.mark.parametrize("field, value", [("vendor", "Advanced Micro Devices, Inc."), ("type", "CPU"),
                                          ("local_mem_bytes", 166912), ("registers_per_group", 0),
                                          ("max_work_group_size", 256), ("fp64_matrix", False)])
def test_a_device_of_another_kind_borrows_nothing(field, value):
    """An A100 (164 KiB of local memory), a GPU without FP64 matrix instructions, another vendor's:
    each differs from the H200 in what decides which kernels run and how many at once."""
    dev = replace(h100(), **{field: value})
    assert shipped_prior.source(dev) is None
    assert shipped_prior.rows_for(dev).empty and shipped_prior.borrowed(dev).empty


def test_a_search_on_a_device_of_that_kind_learns_from_the_borrowed_rows_and_a_replay_at_other_problems(tmp_path):
    """A search on an H100 adds the H200's shipped rows to its database's; a replay of an H100
    landscape adds them too, but none at the replayed problem (s 1024^3, which the H200 rows hold)."""
    dev = h100()
    url = f"sqlite:///{tmp_path / 'h100.db'}"
    store = Store(url)
    try:
        for i, config in enumerate(SYNTHETIC):
            store.add(study="mine", trial=i, device=dev.key, device_name=dev.name, precision="s", m=1024, n=1024,
                      k=1024, kernel=config.kernel, params=config.params, status="ok", gflops=10.0 + i,
                      time_ms=1.0, baseline=i == 0, created_at="2026-12-06T00:00:00+00:00")
        prior = search_prior(store, dev, "new")
        own = search_prior(store, h200(), "new")   # the same database on the H200: its own rows shipped
    finally:
        store.close()
    shipped = shipped_prior.rows_for(dev)
    assert len(prior) == len(SYNTHETIC) + len(shipped) and (prior.device == dev.key).all()
    a_model = learned.CostModel(0)   # what the summary asks of it: that there is one
    assert sources(prior, dev, a_model) == {"database_rows": len(SYNTHETIC), "shipped_rows": len(shipped),
                                            "shipped_for": H200, "borrowed": True, "enough": True}   # the summary's
    assert sources(own, h200(), a_model)["borrowed"] is False and sources(own, h200(), a_model)["shipped_for"] == H200
    assert sources(prior, dev, None)["enough"] is False
    land = rp.load_landscape(url, "mine")
    judged = rp.other_studies(land, dev)
    at_1024 = (shipped.precision == "s") & (shipped.m == 1024) & (shipped.n == 1024) & (shipped.k == 1024)
    assert at_1024.any() and set(judged.study) == set(shipped.study[~at_1024])
    assert len(judged) == (~at_1024).sum()
    assert rp.other_studies(land).empty   # without its description: the database's rows alone
