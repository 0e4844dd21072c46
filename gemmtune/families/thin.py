"""The thin family (kernels/xgemm_thin.cl): C with one side short (a vector, or a few rows or
columns) as matrix-vector products on the operands in place; one launch, two where K is cut.

It serves every shape, but reads the wide operand once per RB rows of the thin side, so it pays
only where that side is short: the search learns where, per shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemmtune.families.base import (FIXUP, PRODUCT, TILE, WIDTH, Constraint, Family, Params, _roundup, fits_work_group,
                                    part_defines)
from gemmtune.launch.plan import (A, ALPHA, B, BETA, C, OFFSET_A, OFFSET_B, OFFSET_C, Launch, Plan, Problem, Scratch,
                                  check_leading_dimensions)
from gemmtune.precision import Precision

PARTS_BYTES = 64 << 20   # the parts' sums: no more parts than fit this many bytes
# K is cut until there are work-items enough to keep the device's memory busy: two of its
# largest work-groups per compute unit (2,048 on an H200's SM, what it holds at once)...
RESIDENT_GROUPS = 2
SHORTEST_PART = 64       # ...into parts of at least this many k's
SUM_GROUP = 64           # work-items per work-group of xgemm_thin_sum


@dataclass(frozen=True)
class Layout:
    """A problem as xgemm_thin sees it: Y (R x L) <- V (R x K) · X (L x K)^T, each operand at a
    buffer (A, B or C) and strides in elements."""
    rows: int            # R: the thin side, the smaller of m and n
    length: int          # L: the wide side
    x: tuple[str, str]   # the wide operand's buffer and offset argument
    v: tuple[str, str]
    ldx: int
    v_strides: tuple[int, int]
    y_strides: tuple[int, int]
    dot: bool            # X is k-fastest in memory
    conj_x: bool
    conj_v: bool


def layout(problem: Problem) -> Layout:
    m, n = problem.m, problem.n
    ta, tb = problem.trans_a, problem.trans_b
    if m <= n:   # rows of C are thin: V is op(A) (m x k), X is op(B)^T (n x k)
        return Layout(m, n, (B, OFFSET_B), (A, OFFSET_A), problem.ldb,
                      (1, problem.lda) if ta == "N" else (problem.lda, 1), (1, problem.ldc),
                      dot=tb == "N", conj_x=tb == "C", conj_v=ta == "C")
    # columns of C are thin: V is op(B)^T (n x k), X is op(A) (m x k)
    return Layout(n, m, (A, OFFSET_A), (B, OFFSET_B), problem.lda,
                  (problem.ldb, 1) if tb == "N" else (1, problem.ldb), (problem.ldc, 1),
                  dot=ta != "N", conj_x=ta == "C", conj_v=tb == "C")


class Thin(Family):
    def local_size(self, p):
        return p["WGS"], 1

    def tile(self, p):
        # For the model: a work-group's results (RB rows by WGS * WPT along the wide side).
        return p["RB"], p["WGS"] * p["WPT"], 1

    def local_mem_bytes(self, p, prec):
        return p["RB"] * p["WPT"] * p["WGS"] * prec.bytes   # the reduction of DOT problems

    def build_defines(self, p, prec, problem):
        lay = layout(problem)
        # PART 1: the product alone; xgemm_thin_sum is built apart, once per precision
        return {"DOT": int(lay.dot), "CONJX": int(lay.conj_x), "CONJV": int(lay.conj_v), "PART": PRODUCT}

    def groups(self, p: Params, lay: Layout) -> tuple[int, int]:
        per_group = p["WPT"] if lay.dot else p["WGS"] * p["WPT"]
        return -(-lay.length // per_group), -(-lay.rows // p["RB"])

    def parts(self, p: Params, prec: Precision, lay: Layout, k: int, resident: int) -> tuple[int, int]:
        """How many parts K is cut into, and the length of each: enough for ``resident``
        work-items, within KSPLIT, SHORTEST_PART and PARTS_BYTES."""
        along, rows = self.groups(p, lay)
        wanted = -(-resident // (along * rows * p["WGS"]))
        most = PARTS_BYTES // (lay.rows * lay.length * prec.bytes)
        parts = int(max(1, min(p["KSPLIT"], wanted, k // SHORTEST_PART, most)))
        length = -(-k // parts)
        return -(-k // length), length

    def plan(self, p, prec, problem, device, compute_units):
        check_leading_dimensions(problem, self.name)
        lay = layout(problem)
        resident = RESIDENT_GROUPS * compute_units * device.max_work_group_size
        parts, length = self.parts(p, prec, lay, problem.k, resident)
        along, rows = self.groups(p, lay)
        work = Scratch("work", prec.bytes * (parts * lay.rows * lay.length if parts > 1 else 1))
        launches = [Launch(self.kernel_name, (along * p["WGS"], rows, parts), (p["WGS"], 1, 1),
                           (lay.length, lay.rows, problem.k, ALPHA, BETA, *lay.x, lay.ldx, *lay.v, *lay.v_strides,
                            C, OFFSET_C, *lay.y_strides, length, "work"))]
        if parts > 1:
            launches.append(Launch("xgemm_thin_sum", (_roundup(lay.rows * lay.length, SUM_GROUP),), (SUM_GROUP,),
                                   (lay.length, lay.rows, parts, ALPHA, BETA, C, OFFSET_C, *lay.y_strides, "work"),
                                   defines=part_defines(FIXUP, prec)))
        return Plan((work,), tuple(launches))


def _power_of_two(x):
    return (x & (x - 1)) == 0


XGEMM_THIN = Thin(
    name="xgemm_thin",
    source_file="xgemm_thin.cl",
    kernel_name="xgemm_thin",
    tile_params=("RB", "WPT", "KU"),
    constraints=(
        Constraint(1, "reduction", "WGS a power of two", lambda p, dev, prec: _power_of_two(np.asarray(p["WGS"]))),
        Constraint(2, "work-group", "WGS <= max work-item size[0] and max work-group size",
                   lambda p, dev, prec: fits_work_group(p["WGS"], 1, dev)),
        Constraint(3, "registers", "RB * WPT <= 32 sums per work-item", lambda p, dev, prec: p["RB"] * p["WPT"] <= 32),
        Constraint(4, "local memory", "RB * WPT * WGS * bytes per element <= local memory size",
                   lambda p, dev, prec: XGEMM_THIN.local_mem_bytes(p, prec) <= dev.local_mem_bytes),
    ),
    ranges={"WGS": TILE, "WPT": WIDTH, "KU": (1, 64), "RB": WIDTH, "KSPLIT": TILE},
    takes_views=True,
)
