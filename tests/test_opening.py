"""The opening (``search.opening``): what a search and a replay measure first, composed once,
and ``Config.key``, by which it tells configurations apart."""

from __future__ import annotations

from gemmtune.search.opening import opening
from gemmtune.space import Config, config_key


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
