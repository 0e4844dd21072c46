"""The search space: parameter values from a TOML file, filtered by the families' constraints.

The shipped space of a device (``configs/space-cpu.toml`` on a CPU, ``configs/space.toml``
elsewhere), or any file given with ``--space``, has one table per kernel family,
mapping each tunable parameter to the list of values it may take; a parameter left out stays
at the default its ``.cl`` file declares. A table may also name another ``source`` file, for
kernel development. The valid configurations are the Cartesian product of those lists, filtered
by the family's constraints on the given device and precision. Nothing here imports OpenCL.
Beside it in this package: the shipped defaults (``defaults.py``) and configurations written as
text (``text.py``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES, Constraint, Family, kernel_parameters
from gemmtune.devices.info import DeviceInfo
from gemmtune.files import parse_toml, read_text
from gemmtune.precision import Precision, require_precision
from gemmtune.files.shipped import configs_dir, load_kernel_source

RESERVED = {"PRECISION"}  # set by gemmtune itself, never tuned

MAX_POINTS = 1 << 30   # 8.9 times the shipped space.toml's product, which `space --count` counts in 7 s

# Points of the Cartesian product evaluated at once. With 2^16, a chunk's columns and the
# constraints' temporaries take about 10 MB instead of 150 with 2^20, and the 22 million points
# of the shipped space are counted no slower (1.9 s on a 2-core host).
CHUNK_ROWS = 1 << 16


class Layout:
    """How a family's product is cut into chunks (``FamilySpace.layout``): ``lead`` leading
    parameters fixed per chunk; the columns of the trailing ones (``tail``, of ``shape``), and
    the same with each ``free`` parameter at its first value only (``reduced``, of
    ``reduced_shape``), each built when first asked for."""

    def __init__(self, lead: int, trailing: list[tuple[str, np.ndarray]], free: frozenset[str]):
        self.lead, self.trailing = lead, trailing
        self.shape = tuple(len(v) for _, v in trailing)
        self.reduced_shape = tuple(1 if n in free else len(v) for n, v in trailing)
        self.free = free
        self.repeats = math.prod(self.shape) // math.prod(self.reduced_shape)   # points per point of ``reduced``

    def _grid(self, first_only: frozenset[str]) -> dict[str, np.ndarray]:
        grids = np.meshgrid(*(v[:1] if n in first_only else v for n, v in self.trailing), indexing="ij")
        return {n: g.ravel() for (n, _), g in zip(self.trailing, grids)}

    @cached_property
    def tail(self) -> dict[str, np.ndarray]:
        return self._grid(frozenset())

    @cached_property
    def reduced(self) -> dict[str, np.ndarray]:
        return self._grid(self.free) if self.reduced_shape != self.shape else self.tail


class _Reads(dict):
    """Columns that remember which of them were read."""

    def __init__(self, cols):
        super().__init__(cols)
        self.read: set[str] = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        self.read.add(name)
        return super().get(name, default)


@dataclass(frozen=True, slots=True)
class Config:
    """One point of the space: a kernel family and a value for each of its parameters."""

    kernel: str
    items: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, kernel: str, params: Mapping[str, int]) -> "Config":
        return cls(kernel, tuple((k, int(v)) for k, v in params.items()))

    @property
    def params(self) -> dict[str, int]:
        return dict(self.items)

    @property
    def key(self) -> tuple:
        """What identifies the configuration whatever the order of its parameters (``config_key``):
        two Configs of one point of the space compare unequal if built in other orders."""
        return (self.kernel, tuple(sorted(self.items)))

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.items)


def config_key(kernel: str, params: Mapping[str, int]) -> tuple:
    """``Config.key`` of a configuration given as its kernel and parameters (a row's, a trial's)."""
    return (kernel, tuple(sorted(params.items())))   # the same, whatever order params come in


@dataclass(frozen=True)
class FamilySpace:
    family: Family
    values: dict[str, list[int]]   # every tunable parameter of the source, in declaration order
    source: str                    # kernel source text, includes inlined
    source_name: str

    @cached_property
    def defaults(self) -> dict[str, int]:
        """The source's default of each tunable parameter, in declaration order."""
        declared = kernel_parameters(self.source)
        return {name: declared[name][0] for name in self.values}

    def complete(self, params: Mapping[str, int]) -> dict[str, int] | None:
        """A recorded configuration's parameters, in declaration order, with any the source
        declares but the record lacks at the source's default: such parameters were added to the
        kernel after the record was written, and their defaults are what the kernel did then.
        None if the record names a parameter that the source does not have."""
        if not set(params) <= set(self.values):
            return None
        return {**self.defaults, **params}

    def configs(self) -> Iterator[Config]:
        names = list(self.values)
        for combo in itertools.product(*self.values.values()):
            yield Config.of(self.family.name, dict(zip(names, combo)))

    def free_parameters(self, dev: DeviceInfo, prec: Precision) -> frozenset[str]:
        """The parameters no constraint reads on this device and precision: every point of the
        product is valid or not whatever their values (BANDM, which only orders the tiles).
        Found by watching the constraints read the columns of the product's first points."""
        cache = self.__dict__.setdefault("_free", {})   # the dataclass is frozen; its caches are not
        key = (dev, prec.code)
        if key not in cache:
            cols = _Reads(self.points(np.arange(min(self.size, 1024))))
            with np.errstate(divide="ignore", invalid="ignore"):
                self.checks(cols, dev, prec)
            cache[key] = frozenset(self.values) - cols.read
        return cache[key]

    def layout(self, rows: int | None = None, free: frozenset[str] = frozenset()) -> "Layout":
        """How ``chunks(rows, free)`` cuts the product: the leading parameters stay fixed within a
        chunk, the trailing ones vary within it; a free parameter counts as one value, since its
        values share one mask (``chunk_mask``)."""
        rows = rows or CHUNK_ROWS
        cache = self.__dict__.setdefault("_layouts", {})
        if (rows, free) not in cache:
            names = list(self.values)
            lists = [np.asarray(v, dtype=np.int64) for v in self.values.values()]
            lead, inner = len(lists), 1
            while lead > 0 and inner * (1 if names[lead - 1] in free else len(lists[lead - 1])) <= rows:
                lead -= 1
                inner *= 1 if names[lead] in free else len(lists[lead])
            cache[(rows, free)] = Layout(lead, list(zip(names[lead:], lists[lead:])), free)
        return cache[(rows, free)]

    def valid_layout(self, dev: DeviceInfo, prec: Precision) -> "Layout":
        """The layout the valid points are counted, listed and indexed in on this device."""
        return self.layout(free=self.free_parameters(dev, prec))

    def chunks(self, rows: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The Cartesian product in ``configs()`` order as one int64 column per parameter, at most
        ``rows`` points at a time (the whole product of the shipped space is tens of millions of
        points, of which a few percent are valid): the trailing parameters whose product fits
        vary within a chunk, built once; each chunk holds one combination of the leading ones."""
        layout = self.layout(rows)
        for j in range(self.chunk_count(layout)):
            yield self.chunk(j, layout)

    def chunk_count(self, layout: "Layout") -> int:
        return math.prod(len(v) for v in list(self.values.values())[:layout.lead])

    def _head(self, j: int, layout: "Layout", inner: int) -> dict[str, np.ndarray]:
        names, lists = list(self.values), list(self.values.values())
        head = np.unravel_index(j, [len(v) for v in lists[:layout.lead]]) if layout.lead else ()
        return {name: np.full(inner, lists[i][int(d)], dtype=np.int64) for i, (name, d) in enumerate(zip(names, head))}

    def chunk(self, j: int, layout: "Layout | None" = None) -> dict[str, np.ndarray]:
        """The ``j``-th chunk of ``chunks``, without the ones before it."""
        layout = layout or self.layout()
        return {**self._head(j, layout, math.prod(layout.shape)), **layout.tail}

    def chunk_mask(self, j: int, layout: "Layout", dev: DeviceInfo, prec: Precision, *, reduced: bool = False) -> np.ndarray:
        """``mask(chunk(j, layout))``, computed once for all the values of the layout's free
        parameters; ``reduced``: that mask alone, one point per combination of the others."""
        small = self.mask({**self._head(j, layout, math.prod(layout.reduced_shape)), **layout.reduced}, dev, prec)
        if reduced or layout.reduced_shape == layout.shape:
            return small
        return np.broadcast_to(small.reshape(layout.reduced_shape), layout.shape).ravel()

    def points(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """Columns of the points at these positions of ``configs()`` order."""
        digits = np.unravel_index(index, [len(v) for v in self.values.values()])
        return {name: np.asarray(v, dtype=np.int64)[d] for (name, v), d in zip(self.values.items(), digits)}

    def mask(self, cols: dict[str, np.ndarray], dev: DeviceInfo, prec: Precision) -> np.ndarray:
        """Which points of ``cols`` obey every constraint."""
        return np.logical_and.reduce([ok for _, ok in self.checks(cols, dev, prec)])

    def to_configs(self, cols: dict[str, np.ndarray]) -> list[Config]:
        # The configurations share their (name, value) pairs: a million configurations of 19
        # parameters take 0.3 GB so, 1.9 GB with a pair of their own each.
        pairs = [{v: (name, v) for v in values} for name, values in self.values.items()]
        rows = np.column_stack([cols[n] for n in self.values]).tolist()
        return [Config(self.family.name, tuple(map(dict.__getitem__, pairs, row))) for row in rows]

    def checks(self, cols: dict[str, np.ndarray], dev: DeviceInfo, prec: Precision) -> list[tuple[Constraint, np.ndarray]]:
        """Each constraint with the mask of the points of ``cols`` that obey it."""
        size = len(next(iter(cols.values())))
        return [(c, np.broadcast_to(np.asarray(c.check(cols, dev, prec), dtype=bool), (size,)))
                for c in self.family.constraints]

    def valid_chunks(self, dev: DeviceInfo, prec: Precision) -> Iterator[dict[str, np.ndarray]]:
        """The valid points, chunk by chunk in ``configs()`` order, as columns (empty chunks
        left out)."""
        layout = self.valid_layout(dev, prec)
        for j in range(self.chunk_count(layout)):
            mask = self.chunk_mask(j, layout, dev, prec)
            if mask.any():
                yield {name: c[mask] for name, c in self.chunk(j, layout).items()}

    def valid(self, dev: DeviceInfo, prec: Precision) -> list[Config]:
        return [c for cols in self.valid_chunks(dev, prec) for c in self.to_configs(cols)]

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.values.values())

    def allows(self, params: Mapping[str, int]) -> bool:
        """Whether ``params`` names every parameter of this space, each at one of its values."""
        return params.keys() == self.values.keys() and all(params[k] in v for k, v in self.values.items())


@dataclass(frozen=True)
class Space:
    families: list[FamilySpace]
    origin: str = field(default="configs/space.toml")

    def family(self, name: str) -> FamilySpace:
        for fs in self.families:
            if fs.family.name == name:
                return fs
        raise GemmtuneError(f"kernel family {name!r} is not in the space {self.origin} "
                            f"(it has: {', '.join(f.family.name for f in self.families)})")

    @property
    def size(self) -> int:
        return sum(fs.size for fs in self.families)

    def configs(self) -> Iterator[Config]:
        for fs in self.families:
            yield from fs.configs()

    def allows(self, config: Config) -> bool:
        """Whether ``config`` is a point of this space (valid on a device or not: see
        ``valid_configs``)."""
        fs = next((fs for fs in self.families if fs.family.name == config.kernel), None)
        return fs is not None and fs.allows(config.params)


def _value_list(name: str, value, family: Family, where: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise GemmtuneError(f"{where}: empty list of values")
    for v in values:
        family.check_value(name, v, where)
    return list(dict.fromkeys(values))


def parse_space(text: str, origin: str, base: Path | None = None) -> Space:
    doc = parse_toml(text, f"space file {origin}")
    if not doc:
        raise GemmtuneError(f"space file {origin} names no kernel family (known: {', '.join(FAMILIES)})")
    families = []
    for name, table in doc.items():
        if name not in FAMILIES:
            raise GemmtuneError(f"space file {origin}: unknown kernel family [{name}] "
                                f"(known: {', '.join(FAMILIES)})")
        if not isinstance(table, dict):
            raise GemmtuneError(f"space file {origin}: [{name}] must be a table of parameter lists")
        family = FAMILIES[name]
        table = dict(table)
        source_name = table.pop("source", family.source_file)
        if not isinstance(source_name, str):
            raise GemmtuneError(f"space file {origin}: [{name}] source must be a file name")
        if source_name != family.source_file and base is not None:
            source_name = str((base / source_name).resolve())
        try:
            source = load_kernel_source(source_name, base)
        except OSError as e:
            raise GemmtuneError(f"space file {origin}: [{name}] cannot read kernel source "
                                f"{source_name}: {e.strerror or e}") from None
        declared = {k: v for k, v in kernel_parameters(source).items() if k not in RESERVED}
        if not declared:
            raise GemmtuneError(f"space file {origin}: [{name}] kernel source {Path(source_name).name} declares "
                                "no parameters (#ifndef NAME / #define NAME value / #endif)")
        for key in table:
            if key not in declared:
                raise GemmtuneError(f"space file {origin}: [{name}] {key} is not a parameter of "
                                    f"{Path(source_name).name} (it has: {', '.join(declared)})")
        values = {k: _value_list(k, table.get(k, default), family, f"space file {origin}: [{name}] {k}")
                  for k, (default, _) in declared.items()}
        families.append(FamilySpace(family, values, source, source_name))
    if (size := sum(fs.size for fs in families)) > MAX_POINTS:   # before anything counts or lists it for hours
        raise GemmtuneError(f"space file {origin} has {size:,} configurations (the product of its value counts, "
                            f"summed over its families), more than the {MAX_POINTS:,} a space may have: "
                            "give its parameters fewer values")
    return Space(families, origin)


# The shipped space of each device type: what pays on a CPU (wide vectors, large register
# blocks, no local memory) has nothing in common with what pays on a GPU. Types not named here
# (GPU, ACCELERATOR, OTHER) get space.toml.
SHIPPED_SPACES = {"CPU": "space-cpu.toml"}
DEFAULT_SPACE = "space.toml"


def shipped_space_file(device=None) -> str:
    """The name of the shipped space file for ``device`` (a DeviceInfo, a device type, or None
    for code that has no device: the GPU space)."""
    kind = device if isinstance(device, str) or device is None else device.type
    return SHIPPED_SPACES.get(kind, DEFAULT_SPACE)


@lru_cache(maxsize=None)
def _shipped(name: str) -> Space:
    return parse_space((configs_dir() / name).read_text(encoding="utf-8"), f"configs/{name}")


def load_space(path: str | Path | None = None, device=None) -> Space:
    """The space in ``path``; without one, the shipped space of ``device`` (a DeviceInfo or a
    device type; None: the GPU space, configs/space.toml)."""
    if path is None:
        return _shipped(shipped_space_file(device))
    path = Path(path)
    return parse_space(read_text(path, "space file"), str(path), path.parent)


@lru_cache(maxsize=1)
def shipped_families() -> Space:
    """Every family of the shipped spaces, each as the first space that holds it names it: for
    reading records of any device type (their sources and defaults), not for searching."""
    families: dict[str, FamilySpace] = {}
    for name in (DEFAULT_SPACE, *SHIPPED_SPACES.values()):
        for fs in _shipped(name).families:
            families.setdefault(fs.family.name, fs)
    return Space(list(families.values()), "the shipped spaces")


def check_config(config: Config, dev: DeviceInfo, prec: Precision) -> None:
    """Raise GemmtuneError naming a value out of its range, else the first constraint broken."""
    require_precision(dev, prec)
    for name, value in config.items:
        FAMILIES[config.kernel].check_value(name, value, f"configuration {config}")
    broken = FAMILIES[config.kernel].broken(config.params, dev, prec)
    if broken is not None:
        raise GemmtuneError(f"configuration {config} breaks constraint {broken.number} "
                            f"({broken.name}: {broken.text}) on device {dev.index}")


def make_config(space: Space, kernel: str | None, given: Mapping[str, int]) -> Config:
    """A full configuration from some parameters; the rest take the kernel source's defaults."""
    fs = space.family(kernel) if kernel else space.families[0]
    defaults = fs.defaults
    unknown = [k for k in given if k not in defaults]
    if unknown:
        raise GemmtuneError(f"unknown parameter {unknown[0]} for kernel family {fs.family.name} "
                            f"(it has: {', '.join(defaults)})")
    for k, v in given.items():
        fs.family.check_value(k, v, f"kernel family {fs.family.name}")
    return Config.of(fs.family.name, {**defaults, **given})


def describe(config: Config, prec: Precision) -> dict:
    """A configuration as `gemmtune space --format json` prints it."""
    family = FAMILIES[config.kernel]
    p = config.params
    return {**p, "kernel": config.kernel,
            "local_mem_bytes": family.local_mem_bytes(p, prec),
            "work_group_size": family.work_group_size(p)}
