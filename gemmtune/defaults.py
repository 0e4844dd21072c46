"""Shipped fallback configurations (configs/defaults.toml), always valid on the device asked."""

from __future__ import annotations

import math
import tomllib
from functools import lru_cache

from gemmtune.families import FAMILIES
from gemmtune.info import DeviceInfo
from gemmtune.precision import Precision
from gemmtune.resources import configs_dir
from gemmtune.space import Config, load_space, make_config, require_precision, valid_configs


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads((configs_dir() / "defaults.toml").read_text(encoding="utf-8"))


def shipped_default(device_type: str, prec: Precision) -> Config:
    """The configuration defaults.toml gives for a device type, before any validity check."""
    table = _table()
    entry = dict(table.get(device_type, table["OTHER"])[prec.code])
    kernel = entry.pop("KERNEL")
    return make_config(load_space(), kernel, entry)


def distance(a: Config, b: Config) -> float:
    """Distance between two configurations of one family: summed log2 ratios of their values."""
    if a.kernel != b.kernel:
        return math.inf
    pa, pb = a.params, b.params
    return sum(abs(math.log2((pa[k] + 1) / (pb[k] + 1))) for k in pa if k in pb)  # +1: PAD may be 0


def default_config(dev: DeviceInfo, prec: Precision) -> Config:
    """The shipped default for this device's type, or, where that breaks a constraint here,
    the valid configuration of the shipped space nearest to it (in log2 steps per parameter)."""
    require_precision(dev, prec)
    config = shipped_default(dev.type, prec)
    if FAMILIES[config.kernel].broken(config.params, dev, prec) is None:
        return config
    candidates = valid_configs(load_space(), dev, prec)
    return min(candidates, key=lambda c: distance(config, c))
