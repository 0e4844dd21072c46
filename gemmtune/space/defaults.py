"""Shipped fallback configurations (configs/defaults.toml), always valid on the device asked."""

from __future__ import annotations

import math
import tomllib
from functools import lru_cache

import numpy as np

from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.devices.info import DeviceInfo
from gemmtune.precision import Precision
from gemmtune.files.shipped import configs_dir
from gemmtune.space import Config, load_space, make_config, require_precision


# Where nothing was tuned, a problem gets the default of its shape's class (defaults.toml says
# which configurations serve which class, and docs/performance.md what they were measured on).
TINY_VOLUME = 2**18     # m * n * k at most this (64^3): "tiny"
BATCH_TINY_VOLUME = 2**15   # a batch's problems at most this (32^3): "batch_tiny"
SMALL_VOLUME = 2**27    # at most this: "small"
MEDIUM_VOLUME = 2**31   # at most this: "medium"; above: "large"
SKINNY = 64             # m (or n) at most this with K at least LONG_K: "skinny_m" ("skinny_n")
LONG_K = 1024
# m or n is 1 and the problem is not tiny: "vector"
# A class without an entry of its own takes this one's.
# A batch (more than one problem a launch) is a class of its own whatever its problems' shape:
# "batch_tiny" (each problem at most BATCH_TINY_VOLUME), "batch_small" (at most TINY_VOLUME) or
# "batch_medium": a GPU's best tiles for batches of 32^3 and of 64^3 problems differ twofold each
# way. Without an entry, tiny takes the small class's, small the tiny class's and medium the
# views' (``default_config`` then goes on to the views' family, which takes batches, where the one
# found does not).
FALLBACK = {"tiny": "small", "small": "medium", "medium": "large", "skinny_m": "medium", "skinny_n": "medium",
            "vector": "skinny_m", "batch_tiny": "batch_small", "batch_small": "tiny", "batch_medium": "views"}
SHAPE_CLASSES = ("large", "tiny", "small", "medium", "skinny_m", "skinny_n", "vector", "views", "batch_tiny",
                 "batch_small", "batch_medium")


def shape_class(m: int, n: int, k: int, batch: int = 1) -> str:
    if batch > 1:
        volume = m * n * k
        return "batch_tiny" if volume <= BATCH_TINY_VOLUME else "batch_small" if volume <= TINY_VOLUME \
            else "batch_medium"
    if min(m, n) == 1 and m * n * k > TINY_VOLUME:
        return "vector"
    if min(m, n) <= SKINNY and k >= LONG_K:
        return "skinny_m" if m <= n else "skinny_n"
    volume = m * n * k
    for name, most in (("tiny", TINY_VOLUME), ("small", SMALL_VOLUME), ("medium", MEDIUM_VOLUME)):
        if volume <= most:
            return name
    return "large"


def class_entry(found: dict, cls: str):
    """The configuration of class ``cls`` among ``found``, or of the class it falls back to."""
    while cls not in found:
        cls = FALLBACK.get(cls, "large")
    return found[cls]


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads((configs_dir() / "defaults.toml").read_text(encoding="utf-8"))


AVX2_TABLE = "CPU-256"   # the defaults of a CPU whose compiler targets 256-bit vectors


def table_name(dev: DeviceInfo) -> str:
    """The table of defaults.toml a device takes: its type's, or CPU-256 for a CPU whose compiler
    targets 256-bit vectors (AVX2), on which the CPU table's blocks, sized for AVX-512's
    registers, would not fit."""
    return AVX2_TABLE if dev.type == "CPU" and dev.vector_bytes == 32 else dev.type


def shipped_defaults(device_type: str, prec: Precision) -> dict[str, Config]:
    """Per shape class, the configuration defaults.toml gives for a table (a device type, or
    ``table_name``'s variant of one), before any validity check. ``[TYPE.p]`` is the large
    class; its sub-tables ``[TYPE.p.CLASS]`` the others (see ``class_entry`` for a class without
    one)."""
    table = _table()
    entry = dict(table.get(device_type, table["OTHER"])[prec.code])
    classes = {name: entry.pop(name) for name in SHAPE_CLASSES[1:] if name in entry}
    space = load_space(device=device_type.split("-")[0])
    found = {}
    for name, e in (("large", entry), *classes.items()):
        e = dict(e)
        kernel = e.pop("KERNEL")
        found[name] = make_config(space, kernel, e)
    return found


def shipped_default(device_type: str, prec: Precision, cls: str = "large") -> Config:
    """The configuration defaults.toml gives for a device type and shape class."""
    return class_entry(shipped_defaults(device_type, prec), cls)


def distance(a: Config, b: Config) -> float:
    """Distance between two configurations of one family: summed log2 ratios of their values."""
    if a.kernel != b.kernel:
        return math.inf
    return float(_log_steps(a.params, b.params))


def _log_steps(pa, pb):
    """Summed |log2| ratios of the values ``pa`` and ``pb`` share: numbers, or ``pb`` columns of
    a space's points (one distance each), in the same order of operations either way, so that
    equal distances compare equal whichever form measured them."""
    return sum(abs(np.log2((pa[k] + 1) / (pb[k] + 1))) for k in pa if k in pb)  # +1: PAD may be 0


def nearest_valid(config: Config, dev: DeviceInfo, prec: Precision) -> Config | None:
    """The valid configuration of ``config``'s family nearest to it (the first in the space's
    order among equals), None where none is. Measured chunk by chunk on columns: a GPU's space
    holds millions of valid points, and listing them as configurations took over a minute."""
    space = load_space(device=dev).family(config.kernel)
    best = None
    for cols in space.valid_chunks(dev, prec):
        d = _log_steps(config.params, cols)
        j = int(np.argmin(d))
        if best is None or d[j] < best[0]:
            best = (d[j], {name: c[j:j + 1] for name, c in cols.items()})
    return None if best is None else space.to_configs(best[1])[0]


def default_config(dev: DeviceInfo, prec: Precision, shape: tuple[int, int, int] | None = None,
                   views: bool = False, batch: int = 1) -> Config:
    """The shipped default for this device's type and the class of ``shape`` (None: large) and
    ``batch``, or, where that breaks a constraint here, the valid configuration of its family
    nearest to it (in log2 steps per parameter). ``views``: of a family that reads operands at
    offsets; a batch (``batch`` > 1): of a family that takes batches."""
    require_precision(dev, prec)
    found = shipped_defaults(table_name(dev), prec)
    config = class_entry(found, shape_class(*shape, batch) if shape else "batch_medium" if batch > 1 else "large")

    def fits(c: Config) -> bool:
        family = FAMILIES[c.kernel]
        return (family.takes_views or not views) and (family.takes_batch or batch == 1)

    if not fits(config):
        config = class_entry(found, "views")
    # Repaired within its family; where nothing of that family fits the device, the nearest
    # configuration of the other classes' families.
    for candidate in (config, *(c for c in found.values() if c.kernel != config.kernel)):
        if not fits(candidate):
            continue
        if FAMILIES[candidate.kernel].broken(candidate.params, dev, prec) is None:
            return candidate
        nearest = nearest_valid(candidate, dev, prec)
        if nearest is not None:
            return nearest
    raise GemmtuneError(f"no configuration of the shipped space is valid on device {dev.index} ({dev.name}) "
                        f"for precision {prec.code}")
