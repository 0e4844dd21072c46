"""Batched GEMM (docs/batched.md): ``gemm`` on stacks of matrices as numpy.matmul takes them,
``Gemm`` on 3-D arrays and on lists of views, each batch one launch of xgemm_direct or xgemm_cpu (xgemm_rt's: test_batched_rt.py).

Every result is compared with numpy in float64 or complex128 on fresh random data, the output
poisoned with NaN first (or beta's c of random values); bad input is refused with a
GemmtuneError before anything runs. Few builds: small tiles, one configuration per family.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_foundation import DTYPES  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune.devices.opencl import open_device  # noqa: E402
from gemmtune.errors import GemmtuneError, OperandError  # noqa: E402
from gemmtune.families import FAMILIES  # noqa: E402
from gemmtune.launch.plan import INDEX_LIMIT, Problem  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.measure.verify import Reference, compare, random_matrix  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_tuned_results")

DIRECT = dict(KERNEL="xgemm_direct", MWG=16, NWG=16, KWG=8, MDIMC=8, NDIMC=4, PADL=1, KSPLIT=4)
CPU = dict(KERNEL="xgemm_cpu", VW=8, MV=1, NR=3, KU=2, NB=1, KC=0, WGS=1, ORDER=1, PACKA=1, PACKB=1)


def reference(prec, a, b, c, alpha, beta, ta="N", tb="N") -> Reference:
    """alpha op(a) op(b) + beta c over the last two dimensions, broadcast, in float64/complex128."""
    rd = prec.reference_dtype

    def op(x, flag):
        x = x.astype(rd)
        return x if flag == "N" else np.swapaxes(x.conj() if flag == "C" else x, -1, -2)

    opa, opb = op(a, ta), op(b, tb)
    value, scale = alpha * np.matmul(opa, opb), abs(alpha) * np.matmul(np.abs(opa), np.abs(opb))
    if beta != 0:
        value, scale = value + beta * c.astype(rd), scale + abs(beta) * np.abs(c.astype(rd))
    return Reference(value, scale, opa.shape[-1])


def assert_close(result, ref, prec):
    assert result.shape == ref.value.shape
    check = compare(result, ref, prec)
    assert check.passed, check


@pytest.fixture(scope="module")
def queue():
    _, device = open_device(0)
    return cl.CommandQueue(cl.Context([device]))


def test_plans_batch_1_as_before_and_the_batch_as_dimension_2():
    prec = get_precision("s")
    dev = type("Dev", (), {"max_work_group_size": 256, "max_work_item_sizes": (256, 256, 256),
                           "local_mem_bytes": 32768})()
    for name, params in (("xgemm_direct", DIRECT), ("xgemm_cpu", CPU)):
        family, p = FAMILIES[name], {k: v for k, v in params.items() if k != "KERNEL"}
        single = Problem(37, 29, 41, "T", "N")
        assert family.plan(p, prec, single, dev, 4) == family.plan(
            p, prec, Problem(37, 29, 41, "T", "N", batch=1, strides=(9, 9, 9)), dev, 4)
        assert "BATCH" not in family.build_defines(p, prec, single)
        batch = Problem(37, 29, 41, "T", "N", batch=5, strides=(0, 29 * 41, 37 * 29))
        assert family.build_defines(p, prec, batch)["BATCH"] == 1
        for launch in family.plan(p, prec, batch, dev, 64).launches:
            # the CPU product takes the batch and its problems per work-item (one each, with 64 units)
            tail = (5, 1) if (name, launch.kernel) == ("xgemm_cpu", "xgemm") else ()
            assert launch.global_size[2] == 5 and launch.local_size[2] == 1
            assert launch.args[len(launch.args) - len(tail) - 3:] == (0, 29 * 41, 37 * 29, *tail)
        table = Problem(37, 29, 41, batch=5, table=True)
        assert family.build_defines(p, prec, table)["BATCH"] == 2
        assert "batch_offsets" in family.plan(p, prec, table, dev, 4).launches[-1].args[-3:]
        # every problem of a strided batch within the kernels' int indices
        huge = Problem(37, 29, 41, batch=3, strides=(0, 0, INDEX_LIMIT // 2))
        with pytest.raises(GemmtuneError, match="indexes at most"):
            family.plan(p, prec, huge, dev, 4)
    assert FAMILIES["xgemm_rt"].takes_batch and not FAMILIES["xgemm_k5"].takes_batch


@pytest.mark.parametrize("code", "sdcz")
def test_gemm_broadcasts_as_matmul(code):
    """Batch dimensions of 1 and missing ones, beta with a broadcast c, out=."""
    prec, rng = get_precision(code), np.random.default_rng()
    a, b = random_matrix(prec, (2, 1, 5, 6), rng), random_matrix(prec, (3, 6, 7), rng)
    c = random_matrix(prec, (3, 1, 7), rng)
    out = np.full((2, 3, 5, 7), np.nan, DTYPES[code])
    got = gemmtune.gemm(a, b, c, alpha=0.5, beta=-1.5, config=DIRECT, device=0, out=out)
    assert got is out
    assert_close(out, reference(prec, a, b, np.broadcast_to(c, out.shape), 0.5, -1.5), prec)
    # one matrix for every problem (stride 0), on the side of b and of a
    shared = gemmtune.gemm(a[:, 0], b[0], config=DIRECT, device=0)
    assert_close(shared, reference(prec, a[:, 0], b[0], None, 1.0, 0.0), prec)
    assert np.matmul(a[:, 0], b[0]).shape == shared.shape


@pytest.mark.parametrize("device", [0, 1])
def test_gemm_batched_default_configuration(device):
    """The shipped default on PoCL and on Intel's runtime: every op of a, conjugates in z."""
    prec, rng = get_precision("z"), np.random.default_rng()
    a, b = random_matrix(prec, (4, 9, 5), rng), random_matrix(prec, (4, 11, 9), rng)
    got = gemmtune.gemm(a, b, trans_a="C", trans_b=True, device=device)
    assert_close(got, reference(prec, a, b, None, 1.0, 0.0, "C", "T"), prec)
    s = get_precision("s")
    a, b = random_matrix(s, (7, 3, 13, 10), rng), random_matrix(s, (10, 6), rng)
    assert_close(gemmtune.gemm(a, b, device=device), reference(s, a, b, None, 1.0, 0.0), s)


@pytest.mark.parametrize("device", [0, 1])
@pytest.mark.parametrize("code", "sdcz")
def test_the_whole_problem_tiles_a_gpu_takes_compute_what_numpy_does(device, code):
    """The direct tiles of whole problems a GPU's batches take (``whole_tile``; an H100 as it
    described itself), run on PoCL and on Intel's runtime: 24 x 24 on 8 x 8 work-items, 48 x 32
    and 48 x 48 on 16 x 8, tiles overhanging their problems, ops transposed and conjugated."""
    from gemmtune.devices.info import read_device_info
    from gemmtune.space.defaults import default_config

    h100 = read_device_info(Path(__file__).resolve().parent.parent / "docs" / "landscapes" / "nvidia-h100.json")
    prec, rng = get_precision(code), np.random.default_rng()
    for (m, n, k), ops, tile in (((20, 20, 20), "TN", (24, 24)), ((48, 24, 40), "NC", (48, 32)),
                                 ((40, 37, 45), "CT", (48, 48))):
        config = default_config(h100, prec, (m, n, k), batch=600)
        assert (config.kernel, config.params["MWG"], config.params["NWG"]) == ("xgemm_direct", *tile)
        ta, tb = (op if code in "cz" or op != "C" else "T" for op in ops)
        a = random_matrix(prec, (30, m, k) if ta == "N" else (30, k, m), rng)
        b = random_matrix(prec, (30, k, n) if tb == "N" else (30, n, k), rng)
        got = gemmtune.gemm(a, b, alpha=0.75, trans_a=ta, trans_b=tb, config={"KERNEL": config.kernel, **config.params},
                            device=device)
        assert_close(got, reference(prec, a, b, None, 0.75, 0.0, ta, tb), prec)


@pytest.mark.parametrize("ta", "NTC")
@pytest.mark.parametrize("tb", "NTC")
def test_gemm_class_on_3d_views_every_op(queue, ta, tb):
    """d, 3-D arrays at offsets in larger buffers, a shared a (stride 0), alpha and beta."""
    prec, rng = get_precision("d"), np.random.default_rng()
    m, n, k, count = 6, 5, 11, 4
    a_shape = (m, k) if ta == "N" else (k, m)
    b_shape = (k, n) if tb == "N" else (n, k)
    big_b = random_matrix(prec, (count + 1, b_shape[0] + 2, b_shape[1] + 3), rng)
    big_c = random_matrix(prec, (count, m + 1, n + 2), rng)
    a_host = random_matrix(prec, a_shape, rng)
    da, db, dc = (cla.to_device(queue, x) for x in (a_host, big_b, big_c))
    b, c = db[1:, 2:, 1:1 + b_shape[1]], dc[:, 1:, 2:]
    a = cla.Array(queue, (count, *a_shape), a_host.dtype, strides=(0, *da.strides), data=da.base_data)
    gemmtune.Gemm(queue, "d", config=DIRECT)(a, b, c, alpha=-0.75, beta=0.5, trans_a=ta, trans_b=tb)
    expected = reference(prec, np.broadcast_to(a_host, (count, *a_shape)), big_b[1:, 2:, 1:1 + b_shape[1]],
                         big_c[:, 1:, 2:], -0.75, 0.5, ta, tb)
    after = dc.get()
    assert_close(after[:, 1:, 2:], expected, prec)
    assert np.array_equal(after[:, 0], big_c[:, 0]) and np.array_equal(after[:, :, :2], big_c[:, :, :2])


@pytest.mark.parametrize("code", "sc")
def test_gemm_class_cpu_family_packs_each_problem(queue, code):
    prec, rng = get_precision(code), np.random.default_rng()
    a, b = random_matrix(prec, (5, 7, 9), rng), random_matrix(prec, (5, 9, 4), rng)
    da, db = cla.to_device(queue, a), cla.to_device(queue, b)
    dc = cla.to_device(queue, np.full((5, 7, 4), np.nan, DTYPES[code]))
    gemmtune.Gemm(queue, code, config=CPU)(da, db, dc)
    assert_close(dc.get(), reference(prec, a, b, None, 1.0, 0.0), prec)


def test_cpu_family_computes_several_tiny_problems_per_work_item(queue):
    """Tiny problems go several to a work-item (a work-group's start costs more than their
    work), the last work-item's share ragged; every problem checked against numpy."""
    from gemmtune.families.cpu import problems_per_item

    prec, rng = get_precision("d"), np.random.default_rng()
    count, m, n, k = 37, 5, 6, 7
    config = {**CPU, "NB": 2}   # a work-item's block, 8 x 6, covers a problem (column-major 6 x 5)
    p = {k_: v for k_, v in config.items() if k_ != "KERNEL"}
    per_item = problems_per_item(p, Problem(n, m, k, batch=count), queue.device.max_compute_units)
    assert 1 < per_item < count and count % per_item, per_item
    plan = FAMILIES["xgemm_cpu"].plan(p, prec, Problem(n, m, k, batch=count, strides=(42, 35, 30)), queue.device,
                                      queue.device.max_compute_units)
    assert plan.launches[-1].global_size[2] == -(-count // per_item)
    a, b = random_matrix(prec, (count, m, k), rng), random_matrix(prec, (count, k, n), rng)
    c = random_matrix(prec, (count, m, n), rng)
    da, db, dc = cla.to_device(queue, a), cla.to_device(queue, b), cla.to_device(queue, c)
    gemmtune.Gemm(queue, "d", config=config)(da, db, dc, alpha=1.5, beta=-0.5)
    assert_close(dc.get(), reference(prec, a, b, c, 1.5, -0.5), prec)


@pytest.mark.parametrize("code, ops, extra", [
    ("s", "NN", {}), ("d", "TN", {"ORDER": 0, "PACKB": 0}), ("c", "CT", {"WGS": 2}), ("z", "NC", {"PACKA": 0, "VW": 1}),
    ("s", "TT", {"ORDER": 0, "PACKA": 0, "PACKB": 0, "WGS": 3}),
])
def test_cpu_family_work_items_walk_whole_problems_of_many_blocks(queue, code, ops, extra):
    """Small problems in a batch that keeps every compute unit busy: each work-item walks every
    block of several whole problems (a launch one work-group wide), rows and columns ragged; a
    batch too small for that launches a work-item a block, as for one problem. Every problem
    of both checked against numpy."""
    from gemmtune.families.cpu import problems_per_item, whole_problems

    prec, rng = get_precision(code), np.random.default_rng()
    units = queue.device.max_compute_units
    config = {**CPU, **extra}
    p = {k_: v for k_, v in config.items() if k_ != "KERNEL"}
    m, n, k = 13, 11, 9                       # column-major 11 x 13: two row blocks, four column blocks
    ta, tb = ops
    for count in (p["WGS"] * units * 8 * 3 + 5, 3):   # three problems a work-item, or a block each
        whole = count > 3
        problem = Problem(n, m, k, tb, ta, batch=count)
        assert whole_problems(problem, units, p["WGS"]) == whole
        plan = FAMILIES["xgemm_cpu"].plan(p, prec, problem, queue.device, units)
        per_item = problems_per_item(p, problem, units)
        assert (plan.launches[-1].global_size[:2] == (p["WGS"], 1)) == whole
        assert (per_item > 1) == whole and plan.launches[-1].global_size[2] == -(-count // per_item)
        a = random_matrix(prec, (count, *((m, k) if ta == "N" else (k, m))), rng)
        b = random_matrix(prec, (count, *((k, n) if tb == "N" else (n, k))), rng)
        c = random_matrix(prec, (count, m, n), rng)
        da, db, dc = cla.to_device(queue, a), cla.to_device(queue, b), cla.to_device(queue, c)
        gemmtune.Gemm(queue, code, config=config)(da, db, dc, alpha=1.5, beta=-0.5, trans_a=ta, trans_b=tb)
        assert_close(dc.get(), reference(prec, a, b, c, 1.5, -0.5, ta, tb), prec)


@pytest.mark.parametrize("config", [DIRECT, CPU], ids=["direct", "cpu"])
def test_gemm_class_array_form(queue, config):
    """Lists of views at irregular offsets, of two buffers of c: two launches, each with its table."""
    prec, rng = get_precision("s"), np.random.default_rng()
    m, n, k = 5, 6, 7
    host_a, host_b = random_matrix(prec, (40, 9), rng), random_matrix(prec, (30, 8), rng)
    pool_a, pool_b = cla.to_device(queue, host_a), cla.to_device(queue, host_b)
    pools_c = [cla.to_device(queue, np.full((20, 8), np.nan, np.float32)) for _ in range(2)]
    where_a = [np.s_[r:r + m, s:s + k] for r, s in ((0, 0), (33, 2), (11, 1), (20, 0))]
    where_b = [np.s_[r:r + k, s:s + n] for r, s in ((3, 2), (0, 0), (3, 2), (21, 1))]
    where_c = [(0, np.s_[0:m, 0:n]), (1, np.s_[7:7 + m, 1:1 + n]), (0, np.s_[m:2 * m, 2:2 + n]),
               (0, np.s_[14:19, 0:6])]
    gemmtune.Gemm(queue, "s", config=config)([pool_a[w] for w in where_a], [pool_b[w] for w in where_b],
                                             [pools_c[i][w] for i, w in where_c])
    results = [pool.get() for pool in pools_c]
    written = [np.zeros((20, 8), bool) for _ in pools_c]
    for wa, wb, (i, wc) in zip(where_a, where_b, where_c):
        assert_close(results[i][wc], reference(prec, host_a[wa], host_b[wb], None, 1.0, 0.0), prec)
        written[i][wc] = True
    assert all(np.isnan(r[~w]).all() for r, w in zip(results, written))


def test_k_0_and_a_batch_of_one(queue):
    prec, rng = get_precision("d"), np.random.default_rng()
    c = random_matrix(prec, (3, 4, 5), rng)
    got = gemmtune.gemm(np.zeros((3, 4, 0)), np.zeros((3, 0, 5)), c, beta=2.0, config=DIRECT, device=0)
    assert np.array_equal(got, 2.0 * c)
    dc = cla.to_device(queue, c)
    gemmtune.Gemm(queue, "d", config=DIRECT)(cla.zeros(queue, (3, 4, 0), np.float64),
                                             cla.zeros(queue, (3, 0, 5), np.float64), dc, beta=-1.0)
    assert np.array_equal(dc.get(), -c)
    a, b = random_matrix(prec, (1, 4, 3), rng), random_matrix(prec, (1, 3, 5), rng)
    assert_close(gemmtune.gemm(a, b, config=DIRECT, device=0), reference(prec, a, b, None, 1.0, 0.0), prec)


def test_bad_batches_are_refused(queue):
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 4, 4)).astype(np.float32)
    with pytest.raises(OperandError, match="do not broadcast"):
        gemmtune.gemm(x, rng.standard_normal((2, 4, 4)).astype(np.float32), device=0)
    with pytest.raises(OperandError, match="one dtype"):
        gemmtune.gemm(x, x.astype(np.float64), device=0)
    with pytest.raises(OperandError, match="out must be"):
        gemmtune.gemm(x, x, device=0, out=np.empty((3, 4, 5), np.float32))
    # a configuration of a family that launches one problem at a time names those that batch
    k5 = {"TSM": 16, "TSN": 16, "TSK": 16, "WPTN": 2, "PAD": 1}
    with pytest.raises(OperandError, match="xgemm_k5 launches one problem at a time; a batch needs one of .*xgemm_rt"):
        gemmtune.gemm(x, x, device=0, config=k5)
    gemm = gemmtune.Gemm(queue, "s", config=DIRECT)
    da = cla.to_device(queue, x)
    before = np.full((3, 4, 4), 7, np.float32)
    dc = cla.to_device(queue, before)
    shared_c = cla.Array(queue, (3, 4, 4), np.float32, strides=(0, 16, 4), data=dc.base_data)
    overlapping_c = cla.Array(queue, (3, 4, 4), np.float32, strides=(8, 16, 4), data=dc.base_data)
    for c, message in ((shared_c, "share elements"), (overlapping_c, "share elements")):
        with pytest.raises(OperandError, match=message):
            gemm(da, da, c)
    with pytest.raises(OperandError, match="holds 2 problems"):
        gemm(cla.to_device(queue, x[:2]), da, dc)
    with pytest.raises(OperandError, match="shares elements with a"):
        gemm(dc, da, dc)
    with pytest.raises(OperandError, match="beyond its buffer"):
        gemm(da, da, cla.Array(queue, (3, 4, 4), np.float32, strides=(80, 16, 4), data=dc.base_data))
    with pytest.raises(OperandError, match="2-D float32"):
        gemm(da, da.astype(np.float64), dc)
    with pytest.raises(OperandError, match="another problem's c"):
        gemm([da[0], da[1]], [da[1], da[2]], [dc[0], dc[0]])
    with pytest.raises(OperandError, match="all have one shape"):
        gemm([da[0], da[1, :3]], da[2], [dc[0], dc[1]])
    assert np.array_equal(dc.get(), before)



def _counting(monkeypatch, name: str) -> list:
    """Calls of ``gemmtune.call.batched``'s ``name`` (an operand check), counted."""
    from gemmtune.call import batched

    calls, check = [], getattr(batched, name)
    monkeypatch.setattr(batched, name, lambda *args: calls.append(args[0]) or check(*args))
    return calls


def test_a_repeated_strided_call_skips_its_checks_and_a_changed_one_is_refused(queue, monkeypatch):
    """A call whose operands equal the last one's in all their checks read (buffer, shape, strides,
    offset) reuses what they gave; an offset moved onto a, past the buffer's end, or the same view
    of a smaller buffer is refused all the same, nothing written; a valid new offset is honoured."""
    prec, rng = get_precision("s"), np.random.default_rng()
    checks = _counting(monkeypatch, "batch_view")
    host = np.full((7, 4, 4), np.nan, np.float32)
    host[:3] = random_matrix(prec, (3, 4, 4), rng)
    b = random_matrix(prec, (3, 4, 4), rng)
    pool, db = cla.to_device(queue, host), cla.to_device(queue, b)
    da = cla.Array(queue, (3, 4, 4), np.float32, data=pool.base_data)

    def c_at(problem, buffer=pool.base_data, extra=0):
        return cla.Array(queue, (3, 4, 4), np.float32, data=buffer, offset=problem * 64 + extra)

    gemm = gemmtune.Gemm(queue, "s", config=DIRECT)
    expected = reference(prec, host[:3], b, None, 2.0, 0.0)
    for _ in range(2):   # the second call's views are new objects of equal buffer, shape and offset
        pool.set(host)
        gemm(da, db, c_at(3), alpha=2.0)
        got = pool.get()
        assert_close(got[3:6], expected, prec)
        assert np.isnan(got[6]).all() and len(checks) == 3
    before = pool.get()
    small = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 7 * 64 - 4)
    for c, message in ((c_at(2), "shares elements with a"), (c_at(4, extra=4), "beyond its buffer"),
                       (c_at(4, small), "beyond its buffer")):
        with pytest.raises(OperandError, match=message):
            gemm(da, db, c, alpha=2.0)
    with pytest.raises(OperandError):
        gemm(da, db, c_at(3), alpha=float("nan"))   # the scalars, checked on every call
    assert np.array_equal(pool.get(), before, equal_nan=True)
    gemm(da, db, c_at(4), alpha=2.0)
    got = pool.get()
    assert_close(got[4:7], expected, prec)
    assert np.array_equal(got[:4], before[:4], equal_nan=True)


def test_a_repeated_pointer_array_call_skips_its_checks_and_follows_a_changed_one(queue, monkeypatch):
    """The list form's last call is reused where every view equals the last one's; c's views
    swapped, or two problems sharing a c, are checked and planned again (offsets' table too)."""
    prec, rng = get_precision("s"), np.random.default_rng()
    checks = _counting(monkeypatch, "view")
    a, b = random_matrix(prec, (2, 5, 3), rng), random_matrix(prec, (2, 3, 4), rng)
    da, db = cla.to_device(queue, a), cla.to_device(queue, b)
    pool = cla.to_device(queue, np.full((3, 5, 4), np.nan, np.float32))
    gemm = gemmtune.Gemm(queue, "s", config=DIRECT)
    expected = [reference(prec, a[z], b[z], None, 1.0, 0.0) for z in range(2)]
    for order, views in (((0, 1), 6), ((0, 1), 6), ((1, 0), 12)):
        pool.fill(np.float32(np.nan))
        gemm([da[0], da[1]], [db[0], db[1]], [pool[order[0]], pool[order[1]]])
        got = pool.get()
        for z in range(2):
            assert_close(got[order[z]], expected[z], prec)
        assert np.isnan(got[2]).all() and len(checks) == views
    with pytest.raises(OperandError, match="another problem's c"):
        gemm([da[0], da[1]], [db[0], db[1]], [pool[1], pool[1]])

def test_shapes_take_a_batch_column(tmp_path):
    from gemmtune.shapes import Shape, load_shapes

    assert load_shapes("4,5,6;4,5,6,d,T,N,300") == [Shape(4, 5, 6), Shape(4, 5, 6, "d", "T", "N", 300)]
    (tmp_path / "s.csv").write_text("m,n,k,batch\n4,5,6,7\n4,5,6,\n")
    assert load_shapes(str(tmp_path / "s.csv")) == [Shape(4, 5, 6, batch=7), Shape(4, 5, 6)]
    (tmp_path / "s.toml").write_text("[[shape]]\nm = 4\nn = 5\nk = 6\nbatch = 2\n")
    assert load_shapes(str(tmp_path / "s.toml")) == [Shape(4, 5, 6, batch=2)]
    assert str(Shape(4, 5, 6, "s", batch=2)) == "2 x s4x5x6"
    for bad in ("4,5,6,s,N,N,0", "4,5,6,s,N,N,x", "4,5,6,s,N,N,2.5"):
        with pytest.raises(GemmtuneError, match="batch must be"):
            load_shapes(bad)


def test_clblast_strided_batched(queue):
    """CLBlast's XgemmStridedBatched through gemmtune.bench.clblast, the bench's baseline, against numpy."""
    from gemmtune.bench import clblast

    try:
        lib = clblast.load()
    except clblast.ClblastError as e:
        if __import__("os").environ.get("CI") == "true":
            pytest.fail(f"CLBlast is missing under CI (install Debian's libclblast1): {e}")
        pytest.skip(f"CLBlast is not installed here (Debian: libclblast1): {e}")
    prec, rng = get_precision("d"), np.random.default_rng()
    m, n, k, count = 5, 4, 3, 6
    # column-major: A (m x k, ld m) per problem, B (n x k, ld n) shared and transposed, C (m x n)
    a, b = random_matrix(prec, (count, k, m), rng), random_matrix(prec, (k, n), rng)
    da, db = cla.to_device(queue, a), cla.to_device(queue, b)
    dc = cla.to_device(queue, np.full((count, n, m), np.nan))
    lib.gemm(queue, "d", "N", "T", m, n, k, 2.0, da, m, db, n, 0.0, dc, m, batch=(count, k * m, 0, m * n)).wait()
    expected = reference(prec, np.swapaxes(a, -1, -2), np.broadcast_to(b, (count, k, n)), None, 2.0, 0.0)
    assert_close(np.swapaxes(dc.get(), -1, -2), expected, prec)


def test_bench_batches_against_numpy(tmp_path):
    import json

    from click.testing import CliRunner

    from gemmtune.cli import cli

    shapes = tmp_path / "batches.csv"
    shapes.write_text("m,n,k,precision,trans_a,trans_b,batch\n6,5,4,s,T,N,30\n")
    for args in (["--shapes", str(shapes)], ["--sizes", "6", "-p", "c", "--batch", "20"]):
        result = CliRunner().invoke(cli, ["bench", "--device", "0", "--time-cap", "0.05", "--baseline", "numpy",
                                          "--format", "json", *args])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)["rows"]
        assert [r["contender"] for r in rows] == ["gemmtune", "numpy"] and rows[0]["verified"] is True
        assert rows[0]["batch"] == (30 if "--shapes" in args else 20) and rows[0]["gflops"] > 0
    result = CliRunner().invoke(cli, ["bench", "--device", "0", "--shapes", str(shapes), "--batch", "3"])
    assert result.exit_code == 2 and result.output.startswith("Error: --batch goes with --sizes")
