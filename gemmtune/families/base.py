"""What every kernel family declares: parameters (read from its ``.cl`` file), constraints,
geometry, and the launch plan of a problem. Nothing here imports OpenCL.

A family's tunable parameters, their defaults and one-line descriptions are read from the
``#ifndef NAME / #define NAME value // comment`` blocks of its ``.cl`` file, so the kernel
source stays the single place where a parameter is declared. The constraints that bind them
are declared in the family's module, each next to the geometry it protects; the kernel's
``#error`` checks mirror them (tests/test_kernel_checks.py builds configurations that break each).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from gemmtune.errors import GemmtuneError
from gemmtune.devices.info import DeviceInfo
from gemmtune.launch.plan import Plan, Problem
from gemmtune.precision import Precision
from gemmtune.files.shipped import load_kernel_source

if TYPE_CHECKING:
    from gemmtune.families.split import Split

_PARAMETER = re.compile(
    r"#ifndef[ \t]+(\w+)[ \t]*\n[ \t]*#define[ \t]+\1[ \t]+(-?\d+)[ \t]*(?://[ \t]*(.*))?\n[ \t]*#endif"
)


def kernel_parameters(source: str) -> dict[str, tuple[int, str]]:
    """Integer parameters declared with ``#ifndef`` defaults: name -> (default, comment)."""
    return {m.group(1): (int(m.group(2)), (m.group(3) or "").strip()) for m in _PARAMETER.finditer(source)}


Params = dict[str, int]


@dataclass(frozen=True)
class Constraint:
    number: int
    name: str
    text: str                                               # the rule, as people read it
    check: Callable[[Params, DeviceInfo, Precision], bool]  # True when the configuration obeys it


# The values a parameter may take, lowest and highest, declared with each family as CLBlast's
# xgemm.hpp declares its parameters beside their constraints. They keep every value a kernel's
# int arithmetic and a launch plan can hold: KC = 2^40 reached the kernel as int 0, a loop step
# of zero, and verify never returned. A parameter a family does not declare (one of a custom
# source's own) ranges over UNDECLARED.
FLAG = (0, 1)
MODE = (0, 64)          # a mode or a count whose meaningful values a constraint names
TILE = (1, 4096)        # tile sides, work-items along a dimension, K's chunks and parts
WIDTH = (1, 256)        # vector widths, unroll factors, results per work-item
PADDING = (0, 64)
UNDECLARED = (1, 1 << 16)


# common.cl's PART: which kernels of a file a build holds
PRODUCT, PREPARATION, FIXUP = 1, 2, 3


def part_defines(part: int, prec: Precision, **own: int) -> tuple[tuple[str, int], ...]:
    """The defines of a build apart from the product (PREPARATION or FIXUP): the precision, the
    part and what else its kernels read, so that every candidate sharing those shares the build."""
    return (("PRECISION", prec.cl_define), ("PART", part), *own.items())


def _roundup(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


# Constraint checks are written with & and elementwise arithmetic only, so the same function
# tests one configuration (ints) or a whole Cartesian product at once (numpy columns).

def fits_work_group(x, y, dev):
    """Whether work-groups of x by y work-items fit ``dev``'s limits: the work-item sizes along
    dimensions 0 and 1, and the work-group size."""
    return (x <= dev.max_work_item_sizes[0]) & (y <= dev.max_work_item_sizes[1]) & (x * y <= dev.max_work_group_size)


def work_per_item(number: int) -> Constraint:
    """MWG x NWG tiles over MDIMC x NDIMC work-items, each a whole number of results."""
    return Constraint(number, "work per thread", "MWG % MDIMC == 0 and NWG % NDIMC == 0",
                      lambda p, dev, prec: (p["MWG"] % p["MDIMC"] == 0) & (p["NWG"] % p["NDIMC"] == 0))


def work_group_fits(number: int) -> Constraint:
    return Constraint(number, "work-group", "MDIMC <= max work-item size[0], NDIMC <= max work-item size[1], "
                      "MDIMC * NDIMC <= max work-group size",
                      lambda p, dev, prec: fits_work_group(p["MDIMC"], p["NDIMC"], dev))


def register_budget(number: int) -> Constraint:
    """The accumulators of (MWG / MDIMC) x (NWG / NDIMC) results take at most half the registers
    a work-item gets: 256, or the group's share where the driver says how many a group has.
    NVIDIA's compiler fits a kernel to its declared group by spilling: 1024 work-items of the
    H200's 65,536 registers get 64 each, and 64 accumulators of doubles spilled 5-8 KB a
    work-item there (one such d kernel computed wrong)."""
    def fits(p, dev, prec):
        per_item = 256
        if dev.registers_per_group:
            per_item = np.minimum(256, dev.registers_per_group // _safe(p["MDIMC"] * p["NDIMC"]))
        wptm, wptn = p["MWG"] // _safe(p["MDIMC"]), p["NWG"] // _safe(p["NDIMC"])
        return wptm * wptn * prec.bytes // 4 <= per_item // 2

    return Constraint(number, "registers", "WPTM * WPTN * bytes per element / 4 <= R / 2: the accumulators "
                      "take at most half of the R registers a work-item gets, R = 256, or (NVIDIA) "
                      "min(256, registers per group / (MDIMC * NDIMC))", fits)


def _safe(x):
    """x, or 1 where x is 0: a divisor that cannot fail (the rule that needs x > 0 says so)."""
    return np.maximum(x, 1)


@dataclass(frozen=True)
class Family:
    """How to launch one kernel source: geometry, local memory and constraints."""

    name: str
    source_file: str
    kernel_name: str
    tile_params: tuple[str, str, str]   # parameters whose values Mp, Np, Kp must be multiples of
    constraints: tuple[Constraint, ...]
    ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict, hash=False)   # name -> (lowest, highest)
    takes_views: bool = False   # reads operands at element offsets, in place (Problem.views)
    takes_batch: bool = False   # plans a batch of problems as one launch (Problem.batch, docs/batched.md)

    @property
    def may_be_zero(self) -> frozenset[str]:
        """The parameters for which 0 is meaningful."""
        return frozenset(name for name, (low, _) in self.ranges.items() if low == 0)

    def value_range(self, name: str) -> tuple[int, int]:
        """The lowest and highest value parameter ``name`` may take (``UNDECLARED`` for a
        parameter the family does not declare)."""
        return self.ranges.get(name, UNDECLARED)

    def check_value(self, name: str, value, where: str) -> None:
        """The one rule for a parameter's value wherever a configuration comes in (space files,
        --config, gemm(config=...), recorded rows), checked before anything is built or listed."""
        low, high = self.value_range(name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise GemmtuneError(f"{where}: {value!r} is not an integer from {low} to {high}, the range of {name}")

    def plan(self, p: Params, prec: Precision, problem: Problem, device, compute_units: int) -> Plan:
        """What to enqueue for ``problem``: see gemmtune.launch.plan. ``device`` has the work-group
        limits (``max_work_group_size``, ``max_work_item_sizes``); ``compute_units`` is what a
        split of the work assumes."""
        raise NotImplementedError

    def build_defines(self, p: Params, prec: Precision, problem: Problem) -> dict[str, int]:
        """Defines beyond the parameters that a build for ``problem`` needs (the same for every
        problem of a family that reads operands only through its arguments)."""
        return {}

    def local_size(self, p: Params) -> tuple[int, int]:
        raise NotImplementedError

    def global_size(self, p: Params, mp: int, np_: int, split: Split | None = None) -> tuple[int, int]:
        raise NotImplementedError

    def split(self, p: Params, mp: int, np_: int, kp: int, compute_units: int) -> Split | None:
        """How an Mp x Np x Kp product splits tiles along K on a device with that many compute
        units; None for a kernel or configuration that never does."""
        return None

    def local_mem_bytes(self, p: Params, prec: Precision) -> int:
        raise NotImplementedError

    @cached_property
    def parameters(self) -> dict[str, tuple[int, str]]:
        return kernel_parameters(load_kernel_source(self.source_file))

    @property
    def defaults(self) -> Params:
        return {name: default for name, (default, _) in self.parameters.items()}

    def pass_elements(self, p: Params, problem: Problem) -> tuple[int, ...]:
        """For the model: the elements each preparation pass of ``problem`` reads and writes."""
        return ()

    def matrix_instructions(self, p: Params, dev: DeviceInfo, prec: Precision) -> bool:
        """For the model: whether ``p`` multiplies with the device's matrix instructions."""
        return False

    def shared_tiles(self, p: Params, mp: int, np_: int, compute_units: int) -> tuple[int, int]:
        """For the model: how many of the last tiles are cut along K into pieces that end
        together (0: none), and the work-groups that run at once."""
        return 0, 0

    def store_conflicts(self, p: Params, prec: Precision) -> tuple[int, int]:
        """How many ways the stores of the A and B slices into local memory conflict on a GPU's
        32 banks of 4 bytes (1: none), for the performance model."""
        return 1, 1

    def tile(self, p: Params) -> tuple[int, int, int]:
        """The tile of C (TM x TN) a work-group computes, and its step along K (TK): the values
        of ``tile_params``, unless the family's tile is a product of parameters."""
        tm, tn, tk = (p[name] for name in self.tile_params)
        return tm, tn, tk

    def padded_shape(self, p: Params, m: int, n: int, k: int) -> tuple[int, int, int]:
        tm, tn, tk = self.tile(p)
        return _roundup(m, tm), _roundup(n, tn), _roundup(k, tk)

    def work_group_size(self, p: Params) -> int:
        x, y = self.local_size(p)
        return x * y

    def broken(self, p: Params, dev: DeviceInfo, prec: Precision) -> Constraint | None:
        """The first constraint ``p`` breaks on this device, or None."""
        return next((c for c in self.constraints if not bool(c.check(p, dev, prec))), None)


