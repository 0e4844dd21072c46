"""Kernel families: a kernel source plus what gemmtune needs to know to launch it.

A family's tunable parameters, their defaults and one-line descriptions are read from the
``#ifndef NAME / #define NAME value // comment`` blocks of its ``.cl`` file, so the kernel
source stays the single place where a parameter is declared. The constraints that bind them
are declared here, each next to the geometry it protects, and mirrored in the ``.cl`` file's
comments. Nothing here imports OpenCL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from gemmtune.info import DeviceInfo
from gemmtune.precision import Precision
from gemmtune.resources import load_kernel_source

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


def _roundup(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def transpose_local_bytes(p: Params, prec: Precision) -> int:
    """Local memory of pad.cl's transpose tile: TRANSPOSEY rows of TRANSPOSEX + 1 elements."""
    return p["TRANSPOSEY"] * (p["TRANSPOSEX"] + 1) * prec.bytes


TRANSPOSE_FITS = Constraint(
    5, "transpose tile",
    "TRANSPOSEX <= max work-item size[0], TRANSPOSEY <= max work-item size[1], "
    "TRANSPOSEX * TRANSPOSEY <= max work-group size, its local tile fits local memory",
    lambda p, dev, prec: (
        p["TRANSPOSEX"] <= dev.max_work_item_sizes[0]
        and p["TRANSPOSEY"] <= dev.max_work_item_sizes[1]
        and p["TRANSPOSEX"] * p["TRANSPOSEY"] <= dev.max_work_group_size
        and transpose_local_bytes(p, prec) <= dev.local_mem_bytes
    ),
)


@dataclass(frozen=True)
class Family:
    """How to launch one kernel source: geometry, local memory and constraints."""

    name: str
    source_file: str
    kernel_name: str
    tile_params: tuple[str, str, str]   # parameters whose values Mp, Np, Kp must be multiples of
    constraints: tuple[Constraint, ...]
    may_be_zero: frozenset[str] = frozenset()   # parameters for which 0 is meaningful

    def local_size(self, p: Params) -> tuple[int, int]:
        raise NotImplementedError

    def global_size(self, p: Params, mp: int, np_: int) -> tuple[int, int]:
        raise NotImplementedError

    def local_mem_bytes(self, p: Params, prec: Precision) -> int:
        raise NotImplementedError

    @cached_property
    def parameters(self) -> dict[str, tuple[int, str]]:
        return kernel_parameters(load_kernel_source(self.source_file))

    @property
    def defaults(self) -> Params:
        return {name: default for name, (default, _) in self.parameters.items()}

    def padded_shape(self, p: Params, m: int, n: int, k: int) -> tuple[int, int, int]:
        tm, tn, tk = (p[name] for name in self.tile_params)
        return _roundup(m, tm), _roundup(n, tn), _roundup(k, tk)

    def work_group_size(self, p: Params) -> int:
        x, y = self.local_size(p)
        return x * y

    def broken(self, p: Params, dev: DeviceInfo, prec: Precision) -> Constraint | None:
        """The first constraint ``p`` breaks on this device, or None."""
        return next((c for c in self.constraints if not c.check(p, dev, prec)), None)


class TiledK5(Family):
    """The tutorial's kernel 5 (kernels/xgemm_k5.cl): TSM x RTSN work-items per TSM x TSN tile."""

    def local_size(self, p):
        return p["TSM"], p["TSN"] // p["WPTN"]

    def global_size(self, p, mp, np_):
        return mp, np_ // p["WPTN"]

    def local_mem_bytes(self, p, prec):
        return (p["TSK"] * p["TSM"] + p["TSN"] * (p["TSK"] + p["PAD"])) * prec.bytes


def _wgs(p: Params) -> int:
    return p["TSM"] * (p["TSN"] // p["WPTN"])


XGEMM_K5 = TiledK5(
    name="xgemm_k5",
    source_file="xgemm_k5.cl",
    kernel_name="xgemm",
    tile_params=("TSM", "TSN", "TSK"),
    constraints=(
        Constraint(1, "WPTN divides TSN", "TSN % WPTN == 0",
                   lambda p, dev, prec: p["TSN"] % p["WPTN"] == 0),
        Constraint(2, "work-group", "TSM <= max work-item size[0], RTSN = TSN / WPTN <= max "
                   "work-item size[1], TSM * RTSN <= max work-group size",
                   lambda p, dev, prec: (
                       p["TSM"] <= dev.max_work_item_sizes[0]
                       and p["TSN"] // p["WPTN"] <= dev.max_work_item_sizes[1]
                       and _wgs(p) <= dev.max_work_group_size)),
        Constraint(3, "loads per thread", "(TSK * TSM) % (TSM * RTSN) == 0 and "
                   "(TSK * TSN) % (TSM * RTSN) == 0",
                   lambda p, dev, prec: _wgs(p) > 0
                   and (p["TSK"] * p["TSM"]) % _wgs(p) == 0
                   and (p["TSK"] * p["TSN"]) % _wgs(p) == 0),
        Constraint(4, "local memory", "(TSK * TSM + TSN * (TSK + PAD)) * bytes per element <= "
                   "local memory size",
                   lambda p, dev, prec: XGEMM_K5.local_mem_bytes(p, prec) <= dev.local_mem_bytes),
        TRANSPOSE_FITS,
    ),
    may_be_zero=frozenset({"PAD"}),
)

FAMILIES: dict[str, Family] = {f.name: f for f in (XGEMM_K5,)}
