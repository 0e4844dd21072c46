"""Shipped fallback configurations (configs/defaults.toml), always valid on the device asked."""

from __future__ import annotations

import math
import tomllib
from functools import lru_cache

from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.info import DeviceInfo
from gemmtune.precision import Precision
from gemmtune.resources import configs_dir
from gemmtune.space import Config, load_space, make_config, require_precision


# Where nothing was tuned, a problem gets the default of its shape's class. Small problems and
# problems thin in M or N are served best by one launch of the direct family, without the
# preparation passes and large tiles of the tiled ones (docs/performance.md, shapes).
SMALL_VOLUME = 2**27   # m * n * k at most this: "small"
SKINNY = 64            # m or n at most this, with K at least LONG_K: "skinny" (K may be cut into parts)
LONG_K = 1024
SHAPE_CLASSES = ("large", "small", "skinny")


def shape_class(m: int, n: int, k: int) -> str:
    if min(m, n) <= SKINNY:
        return "skinny" if k >= LONG_K else "small"
    if m * n * k <= SMALL_VOLUME:
        return "small"
    return "large"


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads((configs_dir() / "defaults.toml").read_text(encoding="utf-8"))


def shipped_defaults(device_type: str, prec: Precision) -> dict[str, Config]:
    """Per shape class, the configuration defaults.toml gives for a device type, before any
    validity check. ``[TYPE.p]`` is the large class; its sub-tables ``[TYPE.p.CLASS]`` the
    others (a class without one takes the large default)."""
    table = _table()
    entry = dict(table.get(device_type, table["OTHER"])[prec.code])
    classes = {name: entry.pop(name) for name in SHAPE_CLASSES[1:] if name in entry}
    found = {}
    for name, e in (("large", entry), *classes.items()):
        e = dict(e)
        kernel = e.pop("KERNEL")
        found[name] = make_config(load_space(device=device_type), kernel, e)
    return found


def shipped_default(device_type: str, prec: Precision, cls: str = "large") -> Config:
    """The configuration defaults.toml gives for a device type and shape class."""
    found = shipped_defaults(device_type, prec)
    return found.get(cls, found["large"])


def distance(a: Config, b: Config) -> float:
    """Distance between two configurations of one family: summed log2 ratios of their values."""
    if a.kernel != b.kernel:
        return math.inf
    pa, pb = a.params, b.params
    return sum(abs(math.log2((pa[k] + 1) / (pb[k] + 1))) for k in pa if k in pb)  # +1: PAD may be 0


def default_config(dev: DeviceInfo, prec: Precision, shape: tuple[int, int, int] | None = None,
                   views: bool = False) -> Config:
    """The shipped default for this device's type and the class of ``shape`` (None: large),
    or, where that breaks a constraint here, the valid configuration of its family nearest to
    it (in log2 steps per parameter). ``views``: of a family that reads operands at offsets."""
    require_precision(dev, prec)
    found = shipped_defaults(dev.type, prec)
    config = found.get(shape_class(*shape) if shape else "large", found["large"])
    if views and not FAMILIES[config.kernel].takes_views:
        config = next(c for c in found.values() if FAMILIES[c.kernel].takes_views)
    # Repaired within its family; where nothing of that family fits the device, the nearest
    # configuration of the other classes' families.
    for candidate in (config, *(c for c in found.values() if c.kernel != config.kernel)):
        if views and not FAMILIES[candidate.kernel].takes_views:
            continue
        if FAMILIES[candidate.kernel].broken(candidate.params, dev, prec) is None:
            return candidate
        valid = load_space(device=dev).family(candidate.kernel).valid(dev, prec)
        if valid:
            return min(valid, key=lambda c: distance(candidate, c))
    raise GemmtuneError(f"no configuration of the shipped space is valid on device {dev.index} ({dev.name}) "
                        f"for precision {prec.code}")
