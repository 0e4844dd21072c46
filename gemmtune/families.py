"""Kernel families: a kernel source plus what gemmtune needs to know to launch it.

A family's tunable parameters, their defaults and one-line descriptions are read from the
``#ifndef NAME / #define NAME value // comment`` blocks of its ``.cl`` file, so the kernel
source stays the single place where a parameter is declared. The constraints that bind them
are declared here, each next to the geometry it protects, and mirrored in the ``.cl`` file's
comments. Nothing here imports OpenCL.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np

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


def transpose_columns(p: Params):
    """Input columns of pad.cl's transpose tile."""
    return p["TRANSPOSEY"] * p["TRANSPOSEW"]


def transpose_local_bytes(p: Params, prec: Precision) -> int:
    """Local memory of pad.cl's transpose tile: TRANSPOSEY * TRANSPOSEW rows of TRANSPOSEX + 1
    elements."""
    return transpose_columns(p) * (p["TRANSPOSEX"] + 1) * prec.bytes


# Constraint checks are written with & and elementwise arithmetic only, so the same function
# tests one configuration (ints) or a whole Cartesian product at once (numpy columns).

def fits_work_group(x, y, dev):
    """Whether work-groups of x by y work-items fit ``dev``'s limits: the work-item sizes along
    dimensions 0 and 1, and the work-group size."""
    return (x <= dev.max_work_item_sizes[0]) & (y <= dev.max_work_item_sizes[1]) & (x * y <= dev.max_work_group_size)


def _safe(x):
    """x, or 1 where x is 0: a divisor that cannot fail (the rule that needs x > 0 says so)."""
    return np.maximum(x, 1)


TRANSPOSE_FITS = Constraint(
    5, "transpose tile",
    "TRANSPOSEX <= max work-item size[0], TRANSPOSEY <= max work-item size[1], "
    "TRANSPOSEX * TRANSPOSEY <= max work-group size, its local tile of "
    "TRANSPOSEY * TRANSPOSEW x (TRANSPOSEX + 1) elements fits local memory",
    lambda p, dev, prec: (
        fits_work_group(p["TRANSPOSEX"], p["TRANSPOSEY"], dev)
        & (transpose_local_bytes(p, prec) <= dev.local_mem_bytes)
    ),
)


# Stream-K shares the last round's tiles out only when it leaves at least this share of the
# work-groups of a round idle: sharing costs a pass over the parts of the split tiles.
IDLE_WORTH_SHARING = 0.1


@dataclass(frozen=True)
class Split:
    """How a launch cuts the tiles of its last round along K (xgemm_rt's STREAMK).

    Each tile before ``first`` is one work-group, in whole rounds; after them come ``pieces``,
    one work-group each, as (tile, first K-slice, end K-slice, slot): slot -1 for a whole tile,
    else where the part's sum goes. ``fixups`` lists each split tile as (tile, first slot,
    parts), its parts in consecutive slots in the order of their K-slices.
    """
    first: int
    pieces: tuple[tuple[int, int, int, int], ...] = ()
    fixups: tuple[tuple[int, int, int], ...] = ()

    @property
    def slots(self) -> int:
        return sum(parts for _, _, parts in self.fixups)


def stream_k_pieces(first: int, tiles: int, slices: int, runs: int) -> Split:
    """Tiles ``first`` to ``tiles`` cut into ``runs`` equal runs of K-slices, taken tile by tile:
    each run's stretch of a tile is a piece. A run that ends in one tile and goes on in the next
    makes two pieces, whose lengths add up to the run's: listed longest first, the work-groups
    that finish first take the longest of the short pieces left, and every compute unit ends
    after about one run."""
    per_run = -(-(tiles - first) * slices // runs)
    cuts = []
    for start in range(first * slices, tiles * slices, per_run):
        end = min(start + per_run, tiles * slices)
        while start < end:
            tile, s0 = divmod(start, slices)
            s1 = min(slices, s0 + end - start)
            cuts.append((tile, s0, s1))
            start += s1 - s0
    parts = [(tile, s0) for tile, s0, s1 in cuts if s1 - s0 < slices]   # tile by tile, in K order
    slots = {part: slot for slot, part in enumerate(parts)}
    fixups = []
    for tile, group in itertools.groupby(parts, key=lambda part: part[0]):
        group = list(group)
        fixups.append((tile, slots[group[0]], len(group)))
    pieces = [(tile, s0, s1, slots.get((tile, s0), -1)) for tile, s0, s1 in cuts]
    pieces.sort(key=lambda p: (p[1] - p[2], p[0], p[1]))
    return Split(first, tuple(pieces), tuple(fixups))


@dataclass(frozen=True)
class Family:
    """How to launch one kernel source: geometry, local memory and constraints."""

    name: str
    source_file: str
    kernel_name: str
    tile_params: tuple[str, str, str]   # parameters whose values Mp, Np, Kp must be multiples of
    constraints: tuple[Constraint, ...]
    may_be_zero: frozenset[str] = frozenset()   # parameters for which 0 is meaningful
    workspace: bool = False   # the main kernel takes (split_from, pieces, work) after ldc: see split

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

    def store_conflicts(self, p: Params, prec: Precision) -> tuple[int, int]:
        """How many ways the stores of the A and B slices into local memory conflict on a GPU's
        32 banks of 4 bytes (1: none), for the performance model."""
        return 1, 1

    def b_k_fast(self, p: Params) -> bool:
        """Whether the kernel reads B as Kp x Np (k fastest) rather than Np x Kp."""
        return bool(p.get("BKFAST", 0))

    def padded_shape(self, p: Params, m: int, n: int, k: int) -> tuple[int, int, int]:
        tm, tn, tk = (p[name] for name in self.tile_params)
        return _roundup(m, tm), _roundup(n, tn), _roundup(k, tk)

    def work_group_size(self, p: Params) -> int:
        x, y = self.local_size(p)
        return x * y

    def broken(self, p: Params, dev: DeviceInfo, prec: Precision) -> Constraint | None:
        """The first constraint ``p`` breaks on this device, or None."""
        return next((c for c in self.constraints if not bool(c.check(p, dev, prec))), None)


class TiledK5(Family):
    """The tutorial's kernel 5 (kernels/xgemm_k5.cl): TSM x RTSN work-items per TSM x TSN tile."""

    def local_size(self, p):
        return p["TSM"], p["TSN"] // p["WPTN"]

    def global_size(self, p, mp, np_, split=None):
        return mp, np_ // p["WPTN"]

    def local_mem_bytes(self, p, prec):
        return (p["TSK"] * p["TSM"] + p["TSN"] * (p["TSK"] + p["PAD"])) * prec.bytes

    def store_conflicts(self, p, prec):
        # Consecutive work-items store Bsub[n][k] for consecutive n: rows TSK + PAD elements
        # apart, what PAD is for. A's stores go to consecutive addresses.
        words = prec.bytes // 4
        return 1, max(1, math.gcd((p["TSK"] + p["PAD"]) * words, 32) // words)


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
                   lambda p, dev, prec: fits_work_group(p["TSM"], p["TSN"] // p["WPTN"], dev)),
        Constraint(3, "loads per thread", "(TSK * TSM) % (TSM * RTSN) == 0 and "
                   "(TSK * TSN) % (TSM * RTSN) == 0",
                   lambda p, dev, prec: (_wgs(p) > 0)
                   & ((p["TSK"] * p["TSM"]) % _safe(_wgs(p)) == 0)
                   & ((p["TSK"] * p["TSN"]) % _safe(_wgs(p)) == 0)),
        Constraint(4, "local memory", "(TSK * TSM + TSN * (TSK + PAD)) * bytes per element <= "
                   "local memory size",
                   lambda p, dev, prec: XGEMM_K5.local_mem_bytes(p, prec) <= dev.local_mem_bytes),
        TRANSPOSE_FITS,
    ),
    may_be_zero=frozenset({"PAD"}),
)


class RegisterTiled(Family):
    """kernels/xgemm_rt.cl: MDIMC x NDIMC work-items, WPTM x WPTN results each."""

    def local_size(self, p):
        return p["MDIMC"], p["NDIMC"]

    def global_size(self, p, mp, np_, split=None):
        if split is None:
            return mp // p["MWG"] * p["MDIMC"], np_ // p["NWG"] * p["NDIMC"]
        # one-dimensional: a work-group per tile before the split ones, then one per piece
        return (split.first + len(split.pieces)) * p["MDIMC"], p["NDIMC"]

    def split(self, p, mp, np_, kp, compute_units):
        if not p["STREAMK"]:
            return None
        tiles, slices = (mp // p["MWG"]) * (np_ // p["NWG"]), kp // p["KWG"]
        shared, rounds = self.shared_tiles(p, mp, np_, compute_units)
        return stream_k_pieces(tiles - shared, tiles, slices, rounds) if shared else Split(tiles)

    def shared_tiles(self, p, mp, np_, compute_units) -> tuple[int, int]:
        """With STREAMK: how many of the last tiles ``split`` cuts into pieces (0: none), and
        the work-groups that run at once, which the pieces keep busy until they end together."""
        tiles = (mp // p["MWG"]) * (np_ // p["NWG"])
        rounds = p["STREAMK"] * compute_units     # work-groups running at once, by assumption
        last = tiles % rounds                      # tiles of the last, partial round
        if last == 0 or last > (1 - IDLE_WORTH_SHARING) * rounds:
            return 0, rounds
        if tiles >= rounds + last and 2 * last < rounds:
            # Shared out alone, so few tiles would make short runs, each a pipeline filled and
            # drained for little work: the last whole round joins them.
            last += rounds
        return last, rounds

    @staticmethod
    def fixup_width(p) -> int:
        """Elements of C per work-item of xgemm_fixup (its FIXV): 4, 2 or 1, as MWG allows."""
        return 4 if p["MWG"] % 4 == 0 else 2 if p["MWG"] % 2 == 0 else 1

    def workspace_bytes(self, p, prec, split) -> int:
        """Bytes of `work`: a tile of partial sums per slot."""
        return 0 if split is None else split.slots * p["MWG"] * p["NWG"] * prec.bytes

    def local_mem_bytes(self, p, prec):
        pipe = p["PIPE"]
        buffers = 1 + (pipe >= 2) + (pipe >= 5) * (pipe - 5)   # PIPE 2-4: 2; 5, 6, 7: 2, 3, 4
        return p["STAGE"] * buffers * p["KWG"] * (p["MWG"] + p["NWG"] + 2 * p["PADL"]) * prec.bytes

    def store_conflicts(self, p, prec):
        return p["STAGE"], p["STAGE"]   # k-major slices store without conflicts; nothing is stored unstaged


def _rt_unstaged(p: Params):
    return (p["STAGE"] == 1) | ((p["STAGE"] == 0) & (p["PIPE"] == 0) & (p["PADL"] == 0) & (p["VWG"] == 1)
                                & (p["BKFAST"] == 0))


def _rt_async(p: Params):
    return (p["PIPE"] <= 7) & ((p["PIPE"] < 5) | (p["BKFAST"] != 2))


def _rt_vectors(p: Params):
    per_load = p["VWG"] * p["MDIMC"] * p["NDIMC"]
    return ((p["MWG"] % p["VWG"] == 0) & (p["NWG"] % p["VWG"] == 0)
            & ((p["BKFAST"] == 0) | (p["KWG"] % p["VWG"] == 0))
            & ((p["KWG"] * p["MWG"]) % per_load == 0) & ((p["KWG"] * p["NWG"]) % per_load == 0)
            & ((p["BKFAST"] != 2) | ((p["KWG"] * p["NWG"]) % (per_load * p["VWG"]) == 0)))


def _rt_local_vectors(p: Params):
    wptm, wptn = p["MWG"] // p["MDIMC"], p["NWG"] // p["NDIMC"]
    return ((p["MWG"] % p["MDIMC"] == 0) & (p["NWG"] % p["NDIMC"] == 0)
            & (wptm % p["VLM"] == 0) & (wptn % p["VLN"] == 0)
            & (p["PADL"] % p["VWG"] == 0) & (p["PADL"] % p["VLM"] == 0) & (p["PADL"] % p["VLN"] == 0))


def _rt_warp(p: Params):
    w = p["WARPM"]
    ws = _safe(w)
    fits = ((p["MDIMC"] * p["NDIMC"]) % 32 == 0) & (32 % ws == 0) & (p["MDIMC"] % ws == 0) \
        & (p["NDIMC"] % _safe(32 // ws) == 0)
    return (w == 0) | fits


def _rt_matrix(p: Params, dev: DeviceInfo, prec: Precision):
    wptm, wptn = p["MWG"] // _safe(p["MDIMC"]), p["NWG"] // _safe(p["NDIMC"])
    fits = (bool(prec.needs_double and dev.fp64_matrix)
            & (p["MDIMC"] % 8 == 0) & (p["NDIMC"] % 4 == 0) & (wptm % 2 == 0) & (wptn % 2 == 0)
            & (p["KWG"] % 8 == 0) & (p["STAGE"] == 1) & (p["PIPE"] != 4)
            & (p["VLM"] == 1) & (p["VLN"] == 1) & (p["UNROLL"] == 1) & (p["WARPM"] == 0))
    return (p["MMA"] == 0) | ((p["MMA"] == 1) & fits)


XGEMM_RT = RegisterTiled(
    name="xgemm_rt",
    source_file="xgemm_rt.cl",
    kernel_name="xgemm",
    tile_params=("MWG", "NWG", "KWG"),
    constraints=(
        Constraint(1, "work per thread", "MWG % MDIMC == 0 and NWG % NDIMC == 0",
                   lambda p, dev, prec: (p["MWG"] % p["MDIMC"] == 0) & (p["NWG"] % p["NDIMC"] == 0)),
        Constraint(2, "work-group", "MDIMC <= max work-item size[0], NDIMC <= max work-item size[1], "
                   "MDIMC * NDIMC <= max work-group size",
                   lambda p, dev, prec: fits_work_group(p["MDIMC"], p["NDIMC"], dev)),
        Constraint(3, "vector loads", "MWG and NWG (and KWG if BKFAST) multiples of VWG; KWG * MWG "
                   "and KWG * NWG multiples of VWG * MDIMC * NDIMC (of VWG * VWG * MDIMC * NDIMC if "
                   "BKFAST == 2)", lambda p, dev, prec: _rt_vectors(p)),
        Constraint(4, "local vectors", "WPTM % VLM == 0, WPTN % VLN == 0, PADL a multiple of VWG, "
                   "VLM and VLN", lambda p, dev, prec: _rt_local_vectors(p)),
        Constraint(5, "local memory", "STAGE * (PIPE - 3 if PIPE >= 5 else 2 if PIPE >= 2 else 1) * KWG * "
                   "(MWG + NWG + 2 * PADL) * bytes per element <= local memory size",
                   lambda p, dev, prec: XGEMM_RT.local_mem_bytes(p, prec) <= dev.local_mem_bytes),
        Constraint(6, "unroll", "KWG % UNROLL == 0; PIPE 4 unrolls the slice itself: UNROLL == 1 and KWG "
                   "even (two alternating operand sets)",
                   lambda p, dev, prec: (p["KWG"] % p["UNROLL"] == 0)
                   & ((p["PIPE"] != 4) | ((p["UNROLL"] == 1) & (p["KWG"] % 2 == 0)))),
        Constraint(7, "warp sub-tile", "WARPM == 0, or MDIMC * NDIMC % 32 == 0 and WARPM divides 32 "
                   "and MDIMC, and 32 / WARPM divides NDIMC", lambda p, dev, prec: _rt_warp(p)),
        Constraint(8, "registers", "WPTM * WPTN * bytes per element / 4 <= 128: the accumulators "
                   "leave room in a 255-register budget",
                   lambda p, dev, prec: (p["MWG"] // p["MDIMC"]) * (p["NWG"] // p["NDIMC"]) * prec.bytes // 4 <= 128),
        Constraint(9, "transpose tile", TRANSPOSE_FITS.text, TRANSPOSE_FITS.check),
        Constraint(10, "staging", "STAGE == 1, or STAGE == 0 with PIPE == 0, PADL == 0, VWG == 1 and "
                   "BKFAST == 0: unstaged, those do not apply, and B is read n-fastest",
                   lambda p, dev, prec: _rt_unstaged(p)),
        Constraint(11, "asynchronous copies", "PIPE <= 7, and BKFAST 0 or 1 with PIPE 5-7: B goes by "
                   "asynchronous copies as it is in global memory, or through registers a vector of a "
                   "column at a time (BKFAST 1), not in BKFAST 2's blocks",
                   lambda p, dev, prec: _rt_async(p)),
        Constraint(12, "matrix instructions", "MMA == 0, or MMA == 1 with: d or z on a device with FP64 matrix "
                   "instructions, MDIMC % 8 == 0 and NDIMC % 4 == 0 (8 x 4 work-items per group of 32), "
                   "WPTM and WPTN even and KWG % 8 == 0 (whole 16 x 8 x 8 blocks), STAGE == 1, PIPE != 4, "
                   "and VLM == VLN == UNROLL == 1, WARPM == 0, which do not apply to it",
                   _rt_matrix),
    ),
    may_be_zero=frozenset({"PADL", "WARPM", "PIPE", "BKFAST", "STAGE", "MMA", "STREAMK"}),
    workspace=True,
)


FAMILIES: dict[str, Family] = {f.name: f for f in (XGEMM_K5, XGEMM_RT)}
