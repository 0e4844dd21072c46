"""Batched plans of xgemm_rt (docs/kernels.md, "Batches"): the batch as dimension 2 of every
launch (with STREAMK, folded into the tile numbers), each problem's operands prepared apart
(one copy of an operand all problems share) or read in place, stream-K's fix-up per problem.

Each case is one GemmOperation over operands laid out in one buffer each, the gaps between the
problems and the output poisoned with NaN, every problem compared with numpy in float64 or
complex128 on fresh random data. Few builds: one small configuration per precision, and the
main kernel does not depend on op(), so every op pair and shape reuses it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import DTYPES, uniform  # noqa: E402
from test_family_rt import CONFIGS  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune.devices.opencl import open_device  # noqa: E402
from gemmtune.families import FAMILIES, XGEMM_RT  # noqa: E402
from gemmtune.launch.operation import GemmOperation, defines  # noqa: E402
from gemmtune.launch.plan import Problem  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.space import load_space, make_config  # noqa: E402
from gemmtune.measure.verify import Reference, compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_tuned_results")

# The small configurations of test_family_rt (CONFIGS, one a precision), batched; stream-K in
# rounds of 3 work-groups per compute unit, over the batch's tiles.
STREAMK = ("s", {**CONFIGS["s"], "STREAMK": 3})


def config(params: dict):
    return make_config(load_space(), "xgemm_rt", params)


@pytest.fixture(scope="module")
def queue():
    _, device = open_device(0)
    return cl.CommandQueue(cl.Context([device]))


def stored(rows: int, cols: int, op: str) -> tuple[int, int]:
    return (rows, cols) if op == "N" else (cols, rows)


def run_batch(queue, cfg, code: str, m: int, n: int, k: int, ta: str = "N", tb: str = "N", count: int = 3,
              shared: str = "", views: bool = False, table: bool = False, alpha=1.0, beta=0.0, units=None,
              gap: int = 0, extra_ld: int = 0):
    """``count`` problems C_z <- alpha op(A_z) op(B_z) + beta C_z, column-major, through one
    GemmOperation of ``cfg``: each operand's problems in one buffer, ``gap`` NaNs apart (their
    leading dimensions ``extra_ld`` past their rows), from offsets 5, 3, 7 with ``views``; in the
    table form in reverse order; ``shared`` ('a' or 'b'): that operand stored once (stride 0).
    Every problem is checked against numpy, and every element of C outside them unchanged."""
    dtype, prec = DTYPES[code], get_precision(code)
    rng = np.random.default_rng([m, n, k, count, "NTC".index(ta), "NTC".index(tb), table, views])
    shapes = {"a": stored(m, k, ta), "b": stored(k, n, tb), "c": (m, n)}
    lds = {x: shapes[x][0] + extra_ld for x in "abc"}
    sizes = {x: lds[x] * shapes[x][1] + gap for x in "abc"}
    firsts = dict(zip("abc", (5, 3, 7) if views else (0, 0, 0)))
    copies = {x: 1 if x == shared else count for x in "abc"}
    order = list(range(count))[::-1] if table else list(range(count))
    flat, starts, matrices = {}, {}, {}
    for x in "abc":
        flat[x] = np.full(firsts[x] + copies[x] * sizes[x], np.nan, dtype)
        starts[x] = [firsts[x] + (0 if copies[x] == 1 else order[z] * sizes[x]) for z in range(count)]
        matrices[x] = []
        for z in range(count):
            mat = uniform(shapes[x], dtype, rng)
            if x == "c" and beta == 0:
                mat = np.full(shapes[x], np.nan, dtype)   # beta 0 never reads C: poisoned
            if z < copies[x]:
                view = flat[x][starts[x][z]:starts[x][z] + lds[x] * shapes[x][1]].reshape(shapes[x][1], lds[x]).T
                view[:shapes[x][0]] = mat
            matrices[x].append(mat if z < copies[x] else matrices[x][0])
    strides = tuple(0 if table or copies[x] == 1 else sizes[x] for x in "abc")
    problem = Problem(m, n, k, ta, tb, lds["a"], lds["b"], lds["c"], views or table, batch=count, strides=strides,
                      table=table)
    op = GemmOperation(queue, cfg, load_space().family("xgemm_rt").source, prec, m, n, k, problem=problem,
                       compute_units=units)
    ctx, mf = queue.context, cl.mem_flags
    bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=flat[x]) for x in "abc"]
    offsets, offsets_table = (firsts["a"], firsts["b"], firsts["c"]), None
    if table:
        rows = np.array([[starts[x][z] for x in "abc"] for z in range(count)], np.int32)
        offsets_table, offsets = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rows), (0, 0, 0)
    before = flat["c"].copy()
    op.enqueue(*bufs, alpha, beta, None, offsets, offsets_table)[-1].wait()
    cl.enqueue_copy(queue, flat["c"], bufs[2])
    written = np.zeros(flat["c"].shape, bool)
    for z in range(count):
        where = np.arange(starts["c"][z], starts["c"][z] + lds["c"] * n).reshape(n, lds["c"]).T[:m]
        got = flat["c"][where]
        written[where] = True
        ref = Reference.compute(prec, matrices["a"][z], matrices["b"][z], matrices["c"][z] if beta else None,
                                alpha, beta, ta, tb)
        check = compare(got, ref, prec)
        assert check.passed, (code, m, n, k, ta, tb, z, check)
    assert np.array_equal(flat["c"][~written], before[~written], equal_nan=True)
    return op


@pytest.mark.parametrize("code", "sdcz")
def test_every_op_and_edge_sizes_in_one_launch(queue, code):
    """Strided batches of every op pair, alpha and beta, shapes of 1, primes and tile remainders,
    a shared a or b (one copy prepared for all)."""
    cfg = config(CONFIGS[code])
    ops = "NTC" if code in "cz" else "NT"
    scalars = [(1.0, 0.0), (-0.75, 1.25)] if code in "sd" else [(0.5 - 1.25j, 0.0), (1j, -0.75 + 0.5j)]
    for i, (ta, tb) in enumerate((ta, tb) for ta in ops for tb in ops):
        alpha, beta = scalars[i % 2]
        for (m, n, k), shared in (((1, 1, 1), ""), ((17, 5, 13), "ab"[i % 2]), ((33, 31, 9), "")):
            op = run_batch(queue, cfg, code, m, n, k, ta, tb, count=3, shared=shared, alpha=alpha, beta=beta)
            assert op.plan.launches[-1].global_size[2] == 3   # the batch is dimension 2 of the product
            assert all(len(launch.global_size) == 3 for launch in op.plan.launches)


def test_views_and_the_table_of_offsets(queue):
    """d at offsets and leading dimensions beyond the rows with gaps between the problems, then
    the array form: problems in reverse order in their buffers, found from the table."""
    cfg = config(CONFIGS["d"])
    for table in (False, True):
        for ta, tb, shared in (("N", "T", ""), ("T", "N", "a"), ("T", "T", "b")):
            if table and shared:
                continue   # the table form has no stride 0: every problem has its offsets
            op = run_batch(queue, cfg, "d", 19, 7, 23, ta, tb, count=4, shared=shared, views=True, table=table,
                           alpha=0.5, beta=-1.5, gap=3, extra_ld=2)
            assert [launch.kernel for launch in op.plan.launches] == ["pad_transpose" if ta == "T" else "pad_copy",
                                                                     "pad_copy" if tb == "T" else "pad_transpose",
                                                                     "xgemm"]
            args = op.plan.launches[-1].args
            assert args[-1] == "batch_offsets" if table else args[-3:] == op.problem.strides
            assert not shared or op.problem.strides["ab".index(shared)] == 0


def test_operands_read_in_place_and_copies_shared(queue):
    """Tile multiples: s's A (MWG 32) and B (k-fastest, BKFAST 1) are read in place at strides
    of whole vectors; with a stride that is not (offsets 1 apart), each problem is prepared."""
    cfg = config(CONFIGS["s"])
    op = run_batch(queue, cfg, "s", 32, 16, 8, count=5, alpha=1.5, beta=0.25)
    assert [launch.kernel for launch in op.plan.launches] == ["xgemm"]
    assert op.plan.launches[0].args[-5:-3] == (-1, -1)   # packed_a, packed_b: the caller's operands
    op = run_batch(queue, cfg, "s", 32, 16, 8, count=5, shared="a", gap=1)
    # b's problems 129 elements apart: not whole vectors of 4, so prepared; a shared, read as it is
    assert [launch.kernel for launch in op.plan.launches] == ["pad_copy", "xgemm"]
    assert op.plan.launches[0].global_size[2] == 5 and op.plan.launches[1].args[-5:-3] == (-1, 8 * 16)
    op = run_batch(queue, cfg, "s", 31, 16, 8, count=5, shared="a")
    # a shared and padded: copied once, every problem reading that copy (packed_a 0)
    assert op.plan.launches[0].global_size[2] == 1 and op.plan.launches[-1].args[-5:-3] == (0, -1)


@pytest.mark.parametrize("units", [1, 2])
def test_stream_k_cuts_the_batch_s_last_round(queue, units):
    """Tiles numbered over the batch: 3 problems of 3 x 2 tiles on 3 x units work-groups at once
    leave a last round the problems' tiles share; the fix-up adds each split tile's parts into
    its own problem's C."""
    code, params = STREAMK
    cfg = config(params)
    m, n, k = 5 * 32 - 5, 16 - 3, 8 * 7 - 2   # 5 tiles a problem, 20 in all
    op = run_batch(queue, cfg, code, m, n, k, "T", "N", count=4, units=units, alpha=-0.5, beta=1.5, views=True)
    mp, np_, kp = XGEMM_RT.padded_shape(cfg.params, m, n, k)
    split = XGEMM_RT.split(cfg.params, mp, np_, kp, units, 4)
    # the last 2 tiles (of problem 3) shared by 3 work-groups at once, the last 8 (of problems 2 and 3) by 6
    cut = [tile for tile, _, _ in split.fixups]
    assert min(cut) >= 20 - 2 - 6 * (units - 1) and {tile // 5 for tile in cut} == ({3} if units == 1 else {2, 3})
    assert op.plan.scratch[-1].table == tuple((*f, 0) for f in split.fixups)
    assert [launch.kernel for launch in op.plan.launches][-2:] == ["xgemm", "xgemm_fixup"]
    assert len(op.plan.launches[-2].global_size) == 2   # one dimension of tiles (and NDIMC)
    run_batch(queue, cfg, code, m, n, k, "N", "T", count=4, units=units, table=True)


def test_single_problems_build_and_launch_as_before():
    """BATCH is defined only for a batch (or one problem at offsets), so a single problem's
    programs and arguments are those of an unbatched launch; a batch adds its arguments last."""
    prec = get_precision("s")
    dev = type("Dev", (), {"max_work_group_size": 256, "max_work_item_sizes": (256, 256, 256)})()
    cfg = config(STREAMK[1])
    p = cfg.params
    single = XGEMM_RT.plan(p, prec, Problem(37, 29, 41, "T", "N"), dev, 2)
    assert "BATCH" not in defines(cfg, prec, Problem(37, 29, 41, "T", "N"))
    for launch in single.launches:
        assert "BATCH" not in dict(launch.defines or ()) and len(launch.global_size) <= 2
    assert [len(launch.args) for launch in single.launches] == [8, 8, 14, 8]
    batch = XGEMM_RT.plan(p, prec, Problem(37, 29, 41, "T", "N", batch=4, strides=(0, 29 * 41, 37 * 29)), dev, 2)
    assert defines(cfg, prec, Problem(37, 29, 41, batch=2, strides=(1, 1, 1)))["BATCH"] == 1
    for launch in batch.launches:
        assert launch.args[-3:] == (0, 29 * 41, 37 * 29)
        assert launch.kernel == "xgemm" or dict(launch.defines)["BATCH"] == 1
    assert FAMILIES["xgemm_rt"].takes_batch and not FAMILIES["xgemm_k5"].takes_batch
    with pytest.raises(ValueError, match="one problem"):
        FAMILIES["xgemm_k5"].plan(FAMILIES["xgemm_k5"].defaults, prec, Problem(4, 4, 4, batch=2), dev, 2)


def test_gemm_and_gemm_class_take_rt_batches(queue):
    """The public calls with an xgemm_rt configuration: gemm broadcasting as numpy.matmul, Gemm
    on 3-D views at offsets (a shared b) and on lists of views (the table)."""
    prec, rng = get_precision("c"), np.random.default_rng()
    given = {"KERNEL": "xgemm_rt", **CONFIGS["c"]}
    a, b = uniform((2, 3, 9, 5), np.complex64, rng), uniform((3, 5, 6), np.complex64, rng)
    c = uniform((1, 6), np.complex64, rng)
    got = gemmtune.gemm(a, b, c, alpha=0.5j, beta=2.0, config=given, device=0)
    assert got.shape == (2, 3, 9, 6)
    for i in range(2):
        for j in range(3):
            ref = Reference.compute(prec, a[i, j], b[j], np.broadcast_to(c, (9, 6)), 0.5j, 2.0)
            assert compare(got[i, j], ref, prec).passed, (i, j)
    host_a, host_b = uniform((5, 7, 4), np.complex64, rng), uniform((4, 3), np.complex64, rng)
    big = cla.to_device(queue, np.full((5, 9, 4), np.nan, np.complex64))
    da, db = cla.to_device(queue, host_a), cla.to_device(queue, host_b)
    shared_b = cla.Array(queue, (5, 4, 3), np.complex64, strides=(0, *db.strides), data=db.base_data)
    gemm = gemmtune.Gemm(queue, "c", config=given)
    gemm(da, shared_b, big[:, 1:8, 1:4], trans_a="N")
    after = big.get()
    for z in range(5):
        assert compare(after[z, 1:8, 1:4], Reference.compute(prec, host_a[z], host_b, None, 1.0, 0.0), prec).passed
    assert np.isnan(after[:, 0]).all() and np.isnan(after[:, 8]).all() and np.isnan(after[:, :, 0]).all()
    pool = cla.to_device(queue, np.full((30, 4), np.nan, np.complex64))
    outs = [pool[r:r + 7, 1:4] for r in (20, 0, 10)]
    gemm([da[z] for z in (3, 1, 4)], db, outs, alpha=-1.0)
    result = pool.get()
    for r, z in zip((20, 0, 10), (3, 1, 4)):
        assert compare(result[r:r + 7, 1:4], Reference.compute(prec, host_a[z], host_b, None, -1.0, 0.0),
                       prec).passed
    # a list of one: one problem at offsets, planned as a batch of one with strides 0
    small = cla.to_device(queue, np.full((9, 5), np.nan, np.complex64))
    gemm([da[2]], db, [small[2:9, 1:4]], alpha=2.0)
    assert gemm.last_operation.plan.launches[-1].args[-3:] == (0, 0, 0)
    assert gemm.last_operation.plan.launches[-1].global_size[2] == 1
    after = small.get()
    assert compare(after[2:9, 1:4], Reference.compute(prec, host_a[2], host_b, None, 2.0, 0.0), prec).passed
    after[2:9, 1:4] = np.nan
    assert np.isnan(after).all()


def test_matrix_instructions_batched():
    """MMA 2's pipeline, spelled out where the device has no FP64 matrix instructions: Intel's
    runtime where it is there (PoCL takes minutes over its barriers), else device 0."""
    from conftest import implementation_device

    intel = implementation_device("intel")
    _, device = open_device(intel.index if intel else 0)
    context = cl.Context([device])
    q = cl.CommandQueue(context)
    cfg = config(dict(MWG=32, NWG=32, KWG=8, MDIMC=8, NDIMC=8, VWG=1, VLM=1, VLN=1, PIPE=6, PADL=4, UNROLL=1,
                      BKFAST=0, WARPM=0, STAGE=1, MMA=2, STREAMK=2, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=2))
    # 3 tiles a problem, 9 in all, 2 at once: the last is cut along K
    op = run_batch(q, cfg, "d", 70, 20, 24, "T", "N", count=3, units=1, alpha=0.25, beta=-1.0)
    assert op.plan.launches[-1].kernel == "xgemm_fixup"
    run_batch(q, cfg, "d", 32, 32, 16, "N", "T", count=2, shared="b", views=True)
