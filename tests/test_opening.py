"""The opening (``search.opening``): what a search and a replay measure first, composed once,
and ``Config.key``, by which it tells configurations apart."""

from __future__ import annotations

from gemmtune.search.opening import opening
from gemmtune.space import Config, config_key

SIZES = [16, 32, 64, 128]   # test_replay's synthetic landscape's tile sizes


def cfg(kernel: str = "xgemm_k5", **params) -> Config:
    return Config.of(kernel, params)


def test_a_configurations_key_ignores_the_order_of_its_parameters():
    ab, ba = cfg(MWG=32, NWG=64), Config("xgemm_k5", (("NWG", 64), ("MWG", 32)))
    assert ab != ba   # a Config keeps its parameters' order
    assert ab.key == ba.key == config_key("xgemm_k5", {"NWG": 64, "MWG": 32})
    assert ab.key != cfg("xgemm_rt", MWG=32, NWG=64).key != cfg(MWG=32, NWG=32).key


def test_the_opening_is_the_baseline_then_the_nearby_then_the_seeds():
    base, near, other, seed = cfg(MWG=16, NWG=16), cfg(MWG=32), cfg(MWG=64), cfg(MWG=128)
    reordered_base = Config("xgemm_k5", base.items[::-1])
    assert opening(base, [near, reordered_base, other], [seed]) == [base, near, other, seed]
    assert opening(None, [near], [seed]) == [near, seed]
    # A seed is never the baseline again, whatever the order of its parameters.
    assert opening(base, [], [reordered_base, seed]) == [base, seed]


def test_the_opening_leaves_out_what_was_measured_and_what_is_not_allowed():
    base, near, other, seed = cfg(MWG=16), cfg(MWG=32), cfg(MWG=64), cfg(MWG=128)
    measured = {base.key, near.key}
    assert opening(base, [near, other], [seed], measured) == [other, seed]
    assert opening(base, [near, other], [seed], allowed=lambda c: c != other) == [base, near, seed]


def test_the_nearby_shapes_are_read_through_the_searchs_own_store(tmp_path, monkeypatch):
    """A search reads the nearest tuned shapes' bests through the store it opened: the same
    configurations as from its URL, and no second store (and engine) opened for them."""
    from test_replay import gpu, landscape

    from gemmtune.db import tuned
    from gemmtune.db import store as store_module
    from gemmtune.precision import get_precision

    db = tmp_path / "t.db"
    landscape(db, lambda c: 100.0 + SIZES.index(c.params["TSM"]), m=256)
    landscape(db, lambda c: 50.0, study="other", m=1024)
    url, dev, prec = f"sqlite:///{db}", gpu(), get_precision("s")
    from_url = tuned.nearby_configs(url, dev, prec, 512, 512, 512)
    store = store_module.Store(url)
    opened = []
    monkeypatch.setattr(store_module.Store, "__init__", lambda *args, **kw: opened.append(args))
    try:
        assert tuned.nearby_configs(store, dev, prec, 512, 512, 512) == from_url and len(from_url) == 2
        assert not opened and store.engine is not None
    finally:
        monkeypatch.undo()
        store.close()

