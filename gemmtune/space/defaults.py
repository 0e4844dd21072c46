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
BATCH_MICRO_VOLUME = 2**12  # a batch's problems at most this (16^3): "batch_micro"
BATCH_TINY_VOLUME = 2**15   # at most this (32^3): "batch_tiny"
SMALL_VOLUME = 2**27    # at most this: "small"
MEDIUM_VOLUME = 2**31   # at most this: "medium"; above: "large"
SKINNY = 64             # m (or n) at most this with K at least LONG_K: "skinny_m" ("skinny_n")
LONG_K = 1024
# m or n is 1 and the problem is not tiny: "vector"
# A class without an entry of its own takes this one's.
# A batch (more than one problem a launch) is a class of its own whatever its problems' shape:
# "batch_micro" (each problem at most BATCH_MICRO_VOLUME), "batch_tiny" (BATCH_TINY_VOLUME),
# "batch_small" (TINY_VOLUME), "batch_medium" (SMALL_VOLUME) or "batch_large": a GPU's best tiles
# for batches of 32^3 and of 64^3 problems differ twofold each way. Without an entry, micro takes
# the tiny class's, tiny the small class's, small the tiny (single) class's, medium the views' (
# ``default_config`` then goes on to the views' family, which takes batches, where the one found
# does not) and large the medium one's.
FALLBACK = {"tiny": "small", "small": "medium", "medium": "large", "skinny_m": "medium", "skinny_n": "medium",
            "vector": "skinny_m", "batch_micro": "batch_tiny", "batch_tiny": "batch_small", "batch_small": "tiny",
            "batch_medium": "views", "batch_large": "batch_medium"}
SHAPE_CLASSES = ("large", "tiny", "small", "medium", "skinny_m", "skinny_n", "vector", "views", "batch_micro",
                 "batch_tiny", "batch_small", "batch_medium", "batch_large")
# A batch's class is by its problems' volume, but a tile much larger than a problem computes
# mostly padding: a batch takes the default of the first class of smaller problems whose
# work-groups cover at most FIT_PADDING times its problems' m x n where its own class's cover
# more (none: the one that covers least). On an H100, torch.matmul's time over gemmtune's went
# from 0.64 to 1.01 (s) and 0.55 to 0.96 (d) for 1,000 x 96^3 (the 32 x 32 tile of batch_tiny
# instead of batch_medium's 128 x 64), and 0.53 to 1.49 / 0.39 to 1.49 for 20,000 x 16^3
# (docs/batched.md); 100 x 200 x 300 x 150, whose 128 x 64 tiles cover 1.64 times its area, ran
# 4-12 % slower on the 64 x 64 tiles that cover 1.37 times it.
BATCH_CLASSES = ("batch_large", "batch_medium", "batch_small", "batch_tiny", "batch_micro")   # larger problems first
FIT_PADDING = 1.7
# A batch of problems of at most WHOLE x WHOLE results moves more bytes than it computes: what it
# costs is reading the operands, and a tile smaller than the problem reads each panel once per
# tile. Where its fitted default takes several work-groups a problem (or one that pads more than
# FIT_PADDING), it takes the direct family's tile widened to the whole problem (``whole_tile``):
# on an H100, torch.matmul's time over gemmtune's went from 0.73 to 0.99 (s) and 0.56 to 0.90 (d)
# at 5,000 x 48^3, 0.67 / 0.48 to 0.90 / 0.78 at 5,000 x 40^3 and 0.72 / 0.42 to 1.46 / 1.03 at
# 20,000 x 24^3 (docs/batched.md). One work-group a problem needs problems enough to fill the
# device: at least WHOLE_GROUPS_PER_UNIT a compute unit, which keeps several in flight on each to
# hide the memory's latency (a rule of thumb: every batch measured had over 30 a unit).
WHOLE = 48
WHOLE_GROUPS_PER_UNIT = 4


def shape_class(m: int, n: int, k: int, batch: int = 1) -> str:
    if batch > 1:
        volume = m * n * k
        for name, most in (("batch_micro", BATCH_MICRO_VOLUME), ("batch_tiny", BATCH_TINY_VOLUME),
                           ("batch_small", TINY_VOLUME), ("batch_medium", SMALL_VOLUME)):
            if volume <= most:
                return name
        return "batch_large"
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
    ``batch`` (``class_default``); a batch of problems its class's tile fits badly takes a
    smaller class's (``batch_fit``)."""
    if shape is None:
        return class_default(dev, prec, "batch_medium" if batch > 1 else "large", views, batch > 1)
    cls = shape_class(*shape, batch)
    if batch == 1:
        return class_default(dev, prec, cls, views)
    fitted = batch_fit(lambda c: class_default(dev, prec, c, views, True), cls, shape[0], shape[1])
    if batch < WHOLE_GROUPS_PER_UNIT * max(1, dev.compute_units) or not whole_tiles_fit(dev, prec):
        return fitted
    return whole_tile(fitted, class_default(dev, prec, "batch_micro", views, True), shape[0], shape[1])


def padding(config: Config, m: int, n: int) -> float:
    """How many times an m x n problem's area the work-groups of ``config`` cover (1: no padding)."""
    if m * n == 0:
        return 1.0
    mp, np_, _ = FAMILIES[config.kernel].padded_shape(config.params, m, n, 1)
    return mp * np_ / (m * n)


def batch_fit(default_of, cls: str, m: int, n: int) -> Config:
    """A batch's default: ``default_of(cls)``, its class's, unless that covers more than
    FIT_PADDING times the problems' m x n; then the first of the classes of smaller problems
    whose default covers at most that, else the one of them all that covers least (the class's
    own on a tie). The exported C library (gt_batch_fit) makes the same choice."""
    best = default_of(cls)
    least = padding(best, m, n)
    if least <= FIT_PADDING:
        return best
    for smaller in BATCH_CLASSES[BATCH_CLASSES.index(cls) + 1:]:
        config = default_of(smaller)
        covers = padding(config, m, n)
        if covers <= FIT_PADDING:
            return config
        if covers < least:
            best, least = config, covers
    return best


def whole_tile(fitted: Config, micro: Config, m: int, n: int) -> Config:
    """``fitted``, a batch's default, where its problems are larger than WHOLE x WHOLE, ``micro``
    (the batch_micro class's default) is not of the direct family, or ``fitted`` computes a
    problem in one work-group and pads at most FIT_PADDING; else ``micro``'s tile widened to the
    problem: to a multiple of 8 on 8 x 8 work-items, slices of 8 deep, up to 24 x 24, and to a
    multiple of 16 on 16 x 8 work-items (each 3 x 6 results at most), slices of 16, above. The
    exported C library (gt_whole_tile) chooses alike."""
    if max(m, n) > WHOLE or min(m, n) < 1 or micro.kernel != "xgemm_direct":
        return fitted
    mt, nt, _ = FAMILIES[fitted.kernel].tile(fitted.params)
    if m <= mt and n <= nt and padding(fitted, m, n) <= FIT_PADDING:
        return fitted
    return _widened(micro, m, n)


def _widened(micro: Config, m: int, n: int) -> Config:
    step, threads, depth = (8, (8, 8), 8) if max(m, n) <= 24 else (16, (16, 8), 16)
    return Config.of(micro.kernel, {**micro.params, "MWG": -(-m // step) * step, "NWG": -(-n // step) * step,
                                    "MDIMC": threads[0], "NDIMC": threads[1], "KWG": depth})


@lru_cache(maxsize=64)
def whole_tiles_fit(dev: DeviceInfo, prec: Precision) -> bool:
    """Whether every tile ``whole_tile`` may widen to is valid here: the largest of each layout is
    (a smaller one takes less local memory and fewer registers on the same work-items)."""
    micro = class_default(dev, prec, "batch_micro", False, True)
    if micro.kernel != "xgemm_direct":
        return False
    family = FAMILIES[micro.kernel]
    return all(family.broken(_widened(micro, size, size).params, dev, prec) is None for size in (24, WHOLE))


@lru_cache(maxsize=512)   # a repair scans the family's valid space: seconds for a GPU's
def class_default(dev: DeviceInfo, prec: Precision, cls: str, views: bool = False, batched: bool = False) -> Config:
    """The shipped default for this device's type and shape class ``cls``, or, where that breaks
    a constraint here, the valid configuration of its family nearest to it (in log2 steps per
    parameter). ``views``: of a family that reads operands at offsets; ``batched``: of a family
    that takes batches."""
    require_precision(dev, prec)
    found = shipped_defaults(table_name(dev), prec)
    config = class_entry(found, cls)

    def fits(c: Config) -> bool:
        family = FAMILIES[c.kernel]
        return (family.takes_views or not views) and (family.takes_batch or not batched)

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
