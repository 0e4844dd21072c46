"""The thin family (kernels/xgemm_thin.cl): matrix-vector products on operands in place, on PoCL,
against numpy in float64/complex128 with C poisoned (NaN) wherever beta is 0.

Which side is thin (rows or columns of C) and whether the wide operand is K-fastest (a
work-group reduces each result) or not (each work-item walks K) follow from the shape and the
op pair, so every op pair runs on shapes thin either way; K long enough is cut into parts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_direct import (LIMITS, OPS, SPREAD, check, check_scalars_and_shapes, kernels_of, queue,  # noqa: E402,F401
                         run_direct)

from gemmtune.families import FAMILIES, XGEMM_THIN  # noqa: E402
from gemmtune.families.thin import SHORTEST_PART, layout  # noqa: E402
from gemmtune.launch.plan import Problem  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402

# 32 work-items, 2 results each, 2 k-steps at once, 2 thin rows per pass, at most 4 parts.
CONFIG = dict(WGS=32, WPT=2, KU=2, RB=2, KSPLIT=4)
# Vectors each way; a dot product; a few rows or columns, ragged against RB and the work-group's
# results; K long enough for parts; and a square problem, which the family serves too.
SHAPES = [(1, 37, 600), (37, 1, 600), (1, 1, 300), (3, 70, 9), (70, 3, 9), (5, 130, 530), (12, 12, 12)]


def run_thin(queue, code, m, n, k, ta, tb, **kw):
    return run_direct(queue, code, m, n, k, ta, tb, kernel="xgemm_thin", config=CONFIG, **kw)


@pytest.mark.parametrize("ta, tb", OPS)
def test_thin_s_every_op(queue, ta, tb):
    for m, n, k in SHAPES:
        result, expected, _, launches = run_thin(queue, "s", m, n, k, ta, tb)
        check("s", result, expected)
        if (m, n) == (1, 1):   # one result: as many parts as KSPLIT allows, summed by a second kernel
            assert launches == 2


@pytest.mark.parametrize("code", ["d", "c", "z"])
@pytest.mark.parametrize("ta, tb", SPREAD)
def test_thin_other_precisions(queue, code, ta, tb):
    check_scalars_and_shapes(queue, code, ta, tb, SHAPES, kernel="xgemm_thin", config=CONFIG)


@pytest.mark.parametrize("code", ["s", "z"])
@pytest.mark.parametrize("shape", [(1, 37, 1100), (37, 2, 6)])
@pytest.mark.parametrize("ta, tb", [("N", "N"), ("C", "T")])
def test_thin_reads_views_and_writes_nothing_outside_c(queue, code, shape, ta, tb):
    for beta in (0.0, 0.5):
        result, expected, (untouched, before), _ = run_thin(queue, code, *shape, ta, tb, pad=(3, 1, 5),
                                                            offsets=(7, 2, 13), beta=beta)
        check(code, result, expected)
        np.testing.assert_array_equal(untouched, before)


# ---------------------------------------------------------------- plans (no OpenCL)

def test_the_thin_side_and_the_wide_operands_fast_index_follow_the_shape_and_ops():
    row = layout(Problem(1, 4096, 512, "N", "N"))          # C is a row: X is B, k-fastest
    assert (row.rows, row.length, row.x[0], row.dot) == (1, 4096, "B", True)
    assert layout(Problem(1, 4096, 512, "N", "T")).dot is False
    col = layout(Problem(4096, 1, 512, "N", "N"))          # C is a column: X is A, m-fastest
    assert (col.rows, col.length, col.x[0], col.dot) == (1, 4096, "A", False)
    assert col.y_strides == (4096, 1) and col.v_strides == (512, 1)
    conj = layout(Problem(4096, 2, 512, "C", "T", ldb=9))
    assert conj.dot and conj.conj_x and not conj.conj_v and conj.v_strides == (1, 9)


def test_thin_cuts_k_only_where_the_results_leave_the_device_idle():
    s, p = get_precision("s"), {**XGEMM_THIN.defaults, "WGS": 128, "WPT": 2, "KSPLIT": 64, "RB": 1}
    resident = 2 * 132 * 1024   # LIMITS' work-groups of 1024, two per compute unit, 132 units
    column = layout(Problem(4096, 1, 4096))   # 16 work-groups of 128 work-items: cut K
    assert XGEMM_THIN.parts(p, s, column, 4096, resident) == (64, 64)
    assert XGEMM_THIN.parts({**p, "KSPLIT": 16}, s, column, 4096, resident) == (16, 256)
    assert XGEMM_THIN.parts(p, s, column, 3 * SHORTEST_PART, resident) == (3, SHORTEST_PART)   # never short
    row = layout(Problem(1, 8192, 4096))      # a work-group per 2 results: 4096 of them already
    assert XGEMM_THIN.parts(p, s, row, 4096, resident) == (1, 4096)
    plan = XGEMM_THIN.plan(p, s, Problem(4096, 1, 4096), LIMITS, 132)
    assert kernels_of(plan) == ["xgemm_thin", "xgemm_thin_sum"] and plan.kernel_launches == 2
    assert plan.launches[0].global_size == (16 * 128, 1, 64)
    assert [sc.nbytes for sc in plan.scratch] == [64 * 4096 * 4]
    assert kernels_of(XGEMM_THIN.plan(p, s, Problem(1, 8192, 4096), LIMITS, 132)) == ["xgemm_thin"]


def test_thin_plans_refuse_a_leading_dimension_below_the_rows():
    with pytest.raises(ValueError, match="leading dimension of A"):
        XGEMM_THIN.plan(XGEMM_THIN.defaults, get_precision("s"), Problem(8, 1, 8, lda=4), LIMITS, 1)


def test_thin_constraints_hold_the_kernels_limits():
    s, dev = get_precision("s"), type("Dev", (), {"max_work_group_size": 256, "max_work_item_sizes": (256, 256, 64),
                                                  "local_mem_bytes": 48 << 10})()
    ok = {**XGEMM_THIN.defaults, "WGS": 256, "WPT": 8, "RB": 4}
    assert XGEMM_THIN.broken(ok, dev, s) is None
    assert XGEMM_THIN.broken({**ok, "WGS": 96}, dev, s).number == 1
    assert XGEMM_THIN.broken({**ok, "WGS": 512, "WPT": 1}, dev, s).number == 2
    assert XGEMM_THIN.broken({**ok, "RB": 8}, dev, s).number == 3
    assert XGEMM_THIN.broken(ok, dev, get_precision("z")).number == 4   # 32 x 256 double2 sums: 128 KiB
    assert FAMILIES["xgemm_thin"].takes_views
