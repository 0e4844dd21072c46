"""The register-tiled family (kernels/xgemm_rt.cl), and stream-K's split of the last round."""

from __future__ import annotations

import itertools
import math

import numpy as np

from gemmtune.families.base import (FIXUP, MODE, PADDING, TILE, WIDTH, Constraint, Params, _safe, register_budget,
                                    work_group_fits, part_defines, work_per_item)
from gemmtune.families.padded import TRANSPOSE_FITS, TRANSPOSE_RANGES, Padded, batch_build
from gemmtune.families.split import Split
from gemmtune.devices.info import DeviceInfo
from gemmtune.launch.plan import ALPHA, BETA, C, OFFSET_C, Launch, Scratch
from gemmtune.precision import Precision

# Stream-K shares the last round's tiles out only when it leaves at least this share of the
# work-groups of a round idle: sharing costs a pass over the parts of the split tiles.
IDLE_WORTH_SHARING = 0.1


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


class RegisterTiled(Padded):
    """kernels/xgemm_rt.cl: MDIMC x NDIMC work-items, WPTM x WPTN results each."""

    def local_size(self, p):
        return p["MDIMC"], p["NDIMC"]

    def global_size(self, p, mp, np_, split=None):
        if split is None:
            return mp // p["MWG"] * p["MDIMC"], np_ // p["NWG"] * p["NDIMC"]
        # one-dimensional: a work-group per tile before the split ones, then one per piece
        return (split.first + len(split.pieces)) * p["MDIMC"], p["NDIMC"]

    def split(self, p, mp, np_, kp, compute_units, problems: int = 1):
        """``problems``: a batch's, whose tiles are numbered problem after problem (the batched
        kernel's tile numbers), so that only the batch's last round is cut."""
        if not p["STREAMK"]:
            return None
        tiles, slices = problems * (mp // p["MWG"]) * (np_ // p["NWG"]), kp // p["KWG"]
        shared, rounds = self._shared(p, tiles, compute_units)
        return stream_k_pieces(tiles - shared, tiles, slices, rounds) if shared else Split(tiles)

    def shared_tiles(self, p, mp, np_, compute_units) -> tuple[int, int]:
        """With STREAMK: how many of the last tiles ``split`` cuts into pieces (0: none), and
        the work-groups that run at once, which the pieces keep busy until they end together."""
        return self._shared(p, (mp // p["MWG"]) * (np_ // p["NWG"]), compute_units)

    def _shared(self, p, tiles: int, compute_units: int) -> tuple[int, int]:
        if not p["STREAMK"]:
            return 0, 0
        rounds = p["STREAMK"] * compute_units     # work-groups running at once, by assumption
        last = tiles % rounds                      # tiles of the last, partial round
        if last == 0 or last > (1 - IDLE_WORTH_SHARING) * rounds:
            return 0, rounds
        if tiles >= rounds + last and 2 * last < rounds:
            # Shared out alone, so few tiles would make short runs, each a pipeline filled and
            # drained for little work: the last whole round joins them.
            last += rounds
        return last, rounds

    def matrix_instructions(self, p, dev, prec):
        return bool(p["MMA"] and dev.fp64_matrix and prec.needs_double)

    @staticmethod
    def fixup_width(p) -> int:
        """Elements of C per work-item of xgemm_fixup (its FIXV): 4, 2 or 1, as MWG allows."""
        return 4 if p["MWG"] % 4 == 0 else 2 if p["MWG"] % 2 == 0 else 1

    def workspace_bytes(self, p, prec, split) -> int:
        """Bytes of `work`: a tile of partial sums per slot."""
        return 0 if split is None else split.slots * p["MWG"] * p["NWG"] * prec.bytes

    def operand_alignment(self, p):
        return p["VWG"]   # its global loads are vectors of VWG elements

    def main_launches(self, p, prec, problem, padded, operands, compute_units, batch=None):
        mp, np_, kp = padded
        a, lda, b, ldb = operands
        # Batched, the problem is dimension 2 of the grid; with STREAMK the grid's one dimension
        # numbers the tiles of the whole batch, so that its last round, not each problem's, is cut.
        problems = problem.batch if batch else 1
        split = self.split(p, mp, np_, kp, compute_units, problems)
        table = split.pieces if split and split.pieces else ((0, 0, 0, -1),)
        scratch = [Scratch("pieces", table=table),
                   Scratch("work", max(prec.bytes, self.workspace_bytes(p, prec, split)))]
        size, local = self.global_size(p, mp, np_, split), self.local_size(p)
        if batch and split is None:
            size, local = (*size, problems), (*local, 1)
        launches = [Launch(self.kernel_name, size, local,
                           (problem.m, problem.n, kp, ALPHA, BETA, a, lda, b, ldb, C, problem.ldc,
                            split.first if split else 0, "pieces", "work", *((OFFSET_C, *batch) if batch else ())))]
        if split and split.fixups:
            scratch.append(Scratch("fixups", table=tuple((*f, 0) for f in split.fixups)))
            per_tile = p["MWG"] * p["NWG"] // self.fixup_width(p)   # a work-item per FIXV elements of a tile
            defines, batch_args = batch_build(problem)
            launches.append(Launch("xgemm_fixup", (len(split.fixups) * per_tile,), (math.gcd(per_tile, 256),),
                                   (problem.m, problem.n, ALPHA, BETA, C, problem.ldc, "fixups", "work",
                                    *((OFFSET_C, *batch_args) if batch else ())),
                                   defines=part_defines(FIXUP, prec, MWG=p["MWG"], NWG=p["NWG"], BANDM=p["BANDM"],
                                                        **defines)))
        return tuple(scratch), tuple(launches)

    def local_mem_bytes(self, p, prec):
        pipe = p["PIPE"]
        buffers = 1 + (pipe >= 2) + (pipe >= 5) * (pipe - 5)   # PIPE 2: 2; 5, 6, 7: 2, 3, 4
        return p["STAGE"] * buffers * p["KWG"] * (p["MWG"] + p["NWG"] + 2 * p["PADL"]) * prec.bytes

    def store_conflicts(self, p, prec):
        return p["STAGE"], p["STAGE"]   # k-major slices store without conflicts; nothing is stored unstaged


def _rt_unstaged(p: Params):
    return (p["STAGE"] == 1) | ((p["STAGE"] == 0) & (p["PIPE"] == 0) & (p["PADL"] == 0) & (p["VWG"] == 1)
                                & (p["BKFAST"] == 0))


def _rt_async(p: Params):
    pipe = p["PIPE"]
    known = np.isin(pipe, (0, 1, 2, 5, 6, 7))
    return known & ((pipe < 5) | (p["BKFAST"] != 2))


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
            & (p["KWG"] % 8 == 0) & (p["STAGE"] == 1)
            & (p["VLM"] == 1) & (p["VLN"] == 1) & (p["UNROLL"] == 1) & (p["WARPM"] == 0))
    return (p["MMA"] == 0) | ((p["MMA"] == 1) & fits) | ((p["MMA"] == 2) & fits & (p["PIPE"] >= 5))


XGEMM_RT = RegisterTiled(
    name="xgemm_rt",
    source_file="xgemm_rt.cl",
    kernel_name="xgemm",
    tile_params=("MWG", "NWG", "KWG"),
    constraints=(
        work_per_item(1),
        work_group_fits(2),
        Constraint(3, "vector loads", "MWG and NWG (and KWG if BKFAST) multiples of VWG; KWG * MWG "
                   "and KWG * NWG multiples of VWG * MDIMC * NDIMC (of VWG * VWG * MDIMC * NDIMC if "
                   "BKFAST == 2)", lambda p, dev, prec: _rt_vectors(p)),
        Constraint(4, "local vectors", "WPTM % VLM == 0, WPTN % VLN == 0, PADL a multiple of VWG, "
                   "VLM and VLN", lambda p, dev, prec: _rt_local_vectors(p)),
        Constraint(5, "local memory", "STAGE * (PIPE - 3 if PIPE >= 5 else 2 if PIPE >= 2 else 1) * KWG * "
                   "(MWG + NWG + 2 * PADL) * bytes per element <= local memory size",
                   lambda p, dev, prec: XGEMM_RT.local_mem_bytes(p, prec) <= dev.local_mem_bytes),
        Constraint(6, "unroll", "KWG % UNROLL == 0",
                   lambda p, dev, prec: p["KWG"] % p["UNROLL"] == 0),
        Constraint(7, "warp sub-tile", "WARPM == 0, or MDIMC * NDIMC % 32 == 0 and WARPM divides 32 "
                   "and MDIMC, and 32 / WARPM divides NDIMC", lambda p, dev, prec: _rt_warp(p)),
        register_budget(8),
        Constraint(9, "transpose tile", TRANSPOSE_FITS.text, TRANSPOSE_FITS.check),
        Constraint(10, "staging", "STAGE == 1, or STAGE == 0 with PIPE == 0, PADL == 0, VWG == 1 and "
                   "BKFAST == 0: unstaged, those do not apply, and B is read n-fastest",
                   lambda p, dev, prec: _rt_unstaged(p)),
        Constraint(11, "asynchronous copies", "PIPE is 0, 1, 2, 5, 6 or 7, and BKFAST 0 or 1 with PIPE 5 to 7: B "
                   "goes by asynchronous copies as it is in global memory, or through registers a vector of a "
                   "column at a time (BKFAST 1), not in BKFAST 2's blocks",
                   lambda p, dev, prec: _rt_async(p)),
        Constraint(12, "matrix instructions", "MMA == 0, or MMA 1 or 2 with: d or z on a device with FP64 matrix "
                   "instructions, MDIMC % 8 == 0 and NDIMC % 4 == 0 (8 x 4 work-items per group of 32), "
                   "WPTM and WPTN even and KWG % 8 == 0 (whole 16 x 8 x 8 blocks), STAGE == 1, "
                   "and VLM == VLN == UNROLL == 1, WARPM == 0, which do not apply to it; with MMA 2, PIPE 5 to 7",
                   _rt_matrix),
    ),
    ranges={"MWG": TILE, "NWG": TILE, "KWG": TILE, "MDIMC": TILE, "NDIMC": TILE, "VWG": (1, 16), "VLM": WIDTH,
            "VLN": WIDTH, "PIPE": MODE, "PADL": PADDING, "UNROLL": WIDTH, "BKFAST": (0, 2), "WARPM": (0, TILE[1]),
            "STAGE": MODE, "MMA": MODE, "STREAMK": (0, 64), "BANDM": (0, TILE[1]), **TRANSPOSE_RANGES},
    takes_batch=True,
)


