"""The direct family (kernels/xgemm_direct.cl) and the launch plans, on PoCL, against numpy.

The direct kernel reads the caller's operands in place: every op(), leading dimensions above
the rows, element offsets, ragged edges, and K cut into parts. Each (precision, op pair) is one
build, so the op pairs are all nine for s and a spread of them for the others; each build then
runs every shape, with K short (one part, C written by the kernel) and long (several parts,
summed by the second kernel). Output is poisoned with NaN wherever beta is 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import DTYPES, make_device, uniform  # noqa: E402

from gemmtune.families import FAMILIES, XGEMM_DIRECT, XGEMM_K5, XGEMM_RT  # noqa: E402
from gemmtune.launch.plan import Problem  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.space import load_space, make_config  # noqa: E402
from gemmtune.measure.verify import Reference, compare  # noqa: E402

# 8 x 4 work-items, 2 x 4 results each; K-slices of 8; at most 4 parts.
CONFIG = dict(MWG=16, NWG=16, KWG=8, MDIMC=8, NDIMC=4, PADL=1, KSPLIT=4)
# (m, n, k): one element; ragged on every side; K of one slice and a bit; K long enough for parts.
SHAPES = [(1, 1, 1), (7, 13, 5), (17, 33, 9), (5, 3, 100)]
OPS = [(ta, tb) for ta in "NTC" for tb in "NTC"]
SPREAD = [("N", "N"), ("T", "C"), ("C", "T"), ("N", "T")]


@pytest.fixture(scope="module")
def queue():
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device

    _, dev = open_device(0)
    ctx = cl.Context([dev])
    return cl.CommandQueue(ctx)


def stored(m, k, op):
    return (m, k) if op == "N" else (k, m)


def run_direct(queue, code, m, n, k, ta, tb, pad=(0, 0, 0), offsets=(0, 0, 0), alpha=1.5, beta=0.0, seed=0,
               kernel="xgemm_direct", config=CONFIG):
    """One GEMM of column-major operands with ``pad`` extra rows (leading dimension above the
    rows) and element ``offsets`` into their buffers, by a family that reads them in place
    (``kernel``, ``config``); returns (result, expected, (C outside the view, before), launches)."""
    import pyopencl as cl

    from gemmtune.launch.operation import GemmOperation

    dtype, prec = DTYPES[code], get_precision(code)
    rng = np.random.default_rng([seed, m, n, k, ord(ta), ord(tb)])
    shapes = {"A": stored(m, k, ta), "B": stored(k, n, tb), "C": (m, n)}
    host, bufs, full = {}, {}, {}
    for (name, (rows, cols)), extra, off in zip(shapes.items(), pad, offsets):
        ld = rows + extra
        whole = uniform((off + ld * cols,), dtype, rng)
        if name == "C" and beta == 0:
            whole[off:] = np.nan   # C is never read with beta == 0: anything unwritten shows
        full[name] = whole
        host[name] = whole[off:].reshape(cols, ld).T[:rows]   # the column-major view
        bufs[name] = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=whole)
    expected = Reference.compute(prec, host["A"], host["B"], None if beta == 0 else host["C"].copy(),
                                 alpha, beta, ta, tb)
    problem = Problem(m, n, k, ta, tb, shapes["A"][0] + pad[0], shapes["B"][0] + pad[1], m + pad[2], views=True)
    op = GemmOperation(queue, make_config(load_space(), kernel, config), load_space().family(kernel).source,
                       prec, m, n, k, problem=problem)
    op.enqueue(bufs["A"], bufs["B"], bufs["C"], alpha, beta, offsets=offsets)[-1].wait()
    out = np.empty_like(full["C"])
    cl.enqueue_copy(queue, out, bufs["C"])
    result = out[offsets[2]:].reshape(n, m + pad[2]).T[:m]
    untouched = np.concatenate([out[:offsets[2]], out[offsets[2]:].reshape(n, m + pad[2])[:, m:].ravel()])
    before = np.concatenate([full["C"][:offsets[2]], full["C"][offsets[2]:].reshape(n, m + pad[2])[:, m:].ravel()])
    return result, expected, (untouched, before), len(op.launches)


def check(code, result, expected):
    outcome = compare(np.asfortranarray(result), expected, get_precision(code))
    assert outcome.passed, outcome


@pytest.mark.parametrize("ta, tb", OPS)
def test_direct_s_every_op(queue, ta, tb):
    for m, n, k in SHAPES:
        result, expected, _, launches = run_direct(queue, "s", m, n, k, ta, tb)
        check("s", result, expected)
        # More than one K-slice (KWG = 8) makes parts, summed by the second kernel.
        assert launches == (1 if k <= 8 else 2)


@pytest.mark.parametrize("code", ["d", "c", "z"])
@pytest.mark.parametrize("ta, tb", SPREAD)
def test_direct_other_precisions(queue, code, ta, tb):
    check_scalars_and_shapes(queue, code, ta, tb, SHAPES)


def check_scalars_and_shapes(queue, code, ta, tb, shapes, **family):
    """Complex or real alpha, and beta 0 (C poisoned) or not, on every shape."""
    alpha, beta = (0.5 - 1j, 0.25 + 0.5j) if code in "cz" else (-0.75, 1.25)
    for m, n, k in shapes:
        for b in (0.0, beta):
            result, expected, _, _ = run_direct(queue, code, m, n, k, ta, tb, alpha=alpha, beta=b, **family)
            check(code, result, expected)


@pytest.mark.parametrize("code", ["s", "z"])
@pytest.mark.parametrize("parts", [False, True])
def test_direct_reads_views_and_writes_nothing_outside_c(queue, code, parts):
    """Leading dimensions above the rows and offsets into each buffer, for C too: what lies
    between C's columns and before its first element keeps its value, NaN or not."""
    m, n, k = (9, 11, 100) if parts else (9, 11, 6)
    for beta in (0.0, 0.5):
        result, expected, (untouched, before), launches = run_direct(
            queue, code, m, n, k, "T", "N", pad=(3, 1, 5), offsets=(7, 2, 13), beta=beta)
        check(code, result, expected)
        assert launches == (2 if parts else 1)
        np.testing.assert_array_equal(untouched, before)


@pytest.mark.parametrize("family, shape", [("xgemm_direct", (9, 11, 100)), ("xgemm_thin", (1, 40, 3000))])
def test_candidates_share_one_build_of_the_sum_of_parts(queue, family, shape):
    """The sum of K's parts is built apart, once per precision: two candidates with parts
    launch it from one program, and each product's program holds the product alone."""
    import pyopencl as cl

    from itertools import islice

    from gemmtune.launch.operation import GemmOperation
    from gemmtune.space import Space
    from gemmtune.space.valid import iter_valid_configs

    s, space = get_precision("s"), load_space()
    problem = Problem(*shape)
    # the family's valid configurations streamed, the first two that cut K taken
    own = iter_valid_configs(Space([space.family(family)]), _pocl_info(), s)
    cut = list(islice((c for c in own if len(FAMILIES[family].plan(
        c.params, s, problem, queue.device, queue.device.max_compute_units).launches) == 2), 2))
    ops = [GemmOperation(queue, c, space.family(family).source, s, *shape) for c in cut]
    programs = [[kernel.get_info(cl.kernel_info.PROGRAM).int_ptr for kernel, _, _ in op.launches] for op in ops]
    assert len(ops) == 2 and programs[0][1] == programs[1][1] and programs[0][0] != programs[1][0]
    assert [op.program.get_info(cl.program_info.KERNEL_NAMES) for op in ops] == [FAMILIES[family].kernel_name] * 2


def test_the_kernels_error_checks_agree_with_constraints_1_and_3(queue):
    """The kernel refuses to build what constraints 1 and 3 forbid: the family's rules and the
    kernel's #error checks say the same."""
    from gemmtune.launch.operation import BuildError, build, defines
    from gemmtune.space import Config

    prec = get_precision("s")
    source = load_space().family("xgemm_direct").source
    for broken, number in (({"MWG": 12}, 1), ({"KWG": 4, "MWG": 8, "NWG": 8, "MDIMC": 8, "NDIMC": 8}, 3)):
        config = Config.of("xgemm_direct", {**XGEMM_DIRECT.defaults, **broken})
        dev = _pocl_info()
        assert XGEMM_DIRECT.broken(config.params, dev, prec).number == number
        with pytest.raises(BuildError) as e:
            build(queue.context, source, defines(config, prec))
        assert "xgemm_direct:" in e.value.log
    build(queue.context, source, defines(Config.of("xgemm_direct", XGEMM_DIRECT.defaults), prec))


def _pocl_info():
    from gemmtune.devices.opencl import resolve_device

    return resolve_device(0)


# ---------------------------------------------------------------- launch plans (no OpenCL)

LIMITS = type("Limits", (), {"max_work_group_size": 1024, "max_work_item_sizes": (1024, 1024, 64)})()


def kernels_of(plan):
    return [launch.kernel for launch in plan.launches]


def test_direct_plan_cuts_k_only_where_it_is_long_and_c_is_small():
    p, s = {**XGEMM_DIRECT.defaults, "KSPLIT": 16, "KWG": 16}, get_precision("s")
    assert XGEMM_DIRECT.parts(p, s, 1, 4096, 4096) == (16, 256)
    assert XGEMM_DIRECT.parts(p, s, 64, 64, 100) == (7, 16)      # 7 slices: a part each
    assert XGEMM_DIRECT.parts(p, s, 4096, 4096, 4096) == (1, 4096)   # 16 parts of 4096^2 would not fit
    assert XGEMM_DIRECT.parts({**p, "KSPLIT": 1}, s, 1, 4096, 4096) == (1, 4096)
    plan = XGEMM_DIRECT.plan(p, s, Problem(1, 4096, 4096), LIMITS, 132)
    assert kernels_of(plan) == ["xgemm_direct", "xgemm_direct_sum"] and plan.kernel_launches == 2
    assert plan.launches[0].global_size[2] == 16
    assert [sc.nbytes for sc in plan.scratch] == [16 * 4096 * 4]


def test_direct_plan_refuses_a_leading_dimension_below_the_rows():
    with pytest.raises(ValueError, match="leading dimension of B"):
        XGEMM_DIRECT.plan(XGEMM_DIRECT.defaults, get_precision("s"), Problem(8, 8, 8, "N", "T", ldb=4), LIMITS, 1)


@pytest.mark.parametrize("family", [XGEMM_K5, XGEMM_RT])
def test_padded_plans_prepare_only_what_the_kernel_cannot_read(family):
    """Packed tile multiples go straight to the main kernel; a leading dimension above the rows,
    a transpose or a ragged edge costs a preparation pass, and the main kernel then reads the
    padded copy."""
    p, s = dict(family.defaults), get_precision("s")
    if family is XGEMM_RT:
        p["STREAMK"] = 0
    mp = 256
    b_layout = "N" if family.b_k_fast(p) else "T"
    packed = family.plan(p, s, Problem(mp, mp, mp, "N", b_layout), LIMITS, 132)
    assert kernels_of(packed) == ["xgemm"] and packed.scratch_bytes == (4 if family is XGEMM_RT else 0)
    strided = family.plan(p, s, Problem(mp, mp, mp, "N", b_layout, lda=mp + 1), LIMITS, 132)
    assert kernels_of(strided) == ["pad_copy", "xgemm"]
    assert strided.launches[0].args[2] == mp + 1 and strided.launches[1].args[5] == "a_padded"
    assert strided.kernel_launches == 1
    ragged = family.plan(p, s, Problem(mp - 1, mp, mp, "T", b_layout), LIMITS, 132)
    assert kernels_of(ragged) == ["pad_transpose", "xgemm"]
    if family is XGEMM_K5:
        with pytest.raises(ValueError, match="offset 0"):
            family.plan(p, s, Problem(mp, mp, mp, views=True), LIMITS, 132)
    else:   # xgemm_rt plans views as a batch of one: A and B copied from their offsets, C at its own
        viewed = family.plan(p, s, Problem(mp, mp, mp, views=True), LIMITS, 132)
        assert kernels_of(viewed) == ["pad_copy", "pad_transpose", "xgemm"]
        assert "offset_c" in viewed.launches[-1].args and "a_padded" in viewed.launches[-1].args


def test_every_family_plans_a_launch_for_its_defaults():
    for family in FAMILIES.values():
        plan = family.plan(family.defaults, get_precision("d"), Problem(33, 17, 9, "T", "C"), LIMITS, 8)
        assert plan.launches[-plan.kernel_launches].kernel == family.kernel_name


# ---------------------------------------------------------------- Gemm on pyopencl views

@pytest.mark.usefixtures("no_tuned_results")
@pytest.mark.parametrize("code", ["s", "z"])
def test_gemm_on_views_in_place(queue, code):
    """Gemm takes slices of larger device arrays for a, b and c, with offsets and row strides,
    writes c's view only, and binds new buffers on a later call of the same layout."""
    import pyopencl.array as cla

    import gemmtune

    dtype, prec = DTYPES[code], get_precision(code)
    g = gemmtune.Gemm(queue, code)
    rng = np.random.default_rng(5)
    m, n, k = 13, 10, 21
    for call in range(2):   # the second call: new buffers, same layout, cached operation
        big_a = uniform((k + 4, m + 6), dtype, rng)
        big_b = uniform((k + 3, n + 5), dtype, rng)
        big_c = np.full((m + 2, n + 7), np.nan, dtype)
        a = cla.to_device(queue, big_a)[2:2 + k, 3:3 + m]        # op(a) = a.T: m x k
        b = cla.to_device(queue, big_b)[1:1 + k, 4:4 + n]
        c_dev = cla.to_device(queue, big_c)
        c = c_dev[1:1 + m, 5:5 + n]
        alpha = 0.5 if call == 0 else -2.0
        g(a, b, c, alpha=alpha, trans_a=True)
        out = c_dev.get()
        expected = Reference.compute(prec, big_a[2:2 + k, 3:3 + m], big_b[1:1 + k, 4:4 + n], None, alpha, 0.0, "T", "N")
        outcome = compare(out[1:1 + m, 5:5 + n], expected, prec)
        assert outcome.passed, outcome
        outside = np.ones(out.shape, bool)
        outside[1:1 + m, 5:5 + n] = False
        assert np.isnan(out[outside]).all()
    assert len(g._calls) == 1


@pytest.mark.usefixtures("no_tuned_results")
def test_gemm_refuses_strided_rows(queue):
    import pyopencl.array as cla

    import gemmtune

    a = cla.zeros(queue, (8, 16), np.float32)
    b = cla.zeros(queue, (8, 8), np.float32)
    c = cla.zeros(queue, (8, 8), np.float32)
    with pytest.raises(ValueError, match="within a row must be adjacent"):
        gemmtune.Gemm(queue, "s")(a[:, ::2], b, c)


@pytest.mark.usefixtures("no_tuned_results")
def test_views_take_the_direct_default_where_the_class_default_cannot_read_them():
    from gemmtune.space.defaults import default_config

    s = get_precision("s")
    # A GPU's large default is tiled and reads operands at offset 0 only.
    gpu = make_device()
    large = default_config(gpu, s, (4096, 4096, 4096))
    assert not FAMILIES[large.kernel].takes_views
    assert default_config(gpu, s, (4096, 4096, 4096), views=True).kernel == "xgemm_direct"
    # On PoCL's CPU device xgemm_cpu serves every class and views: it reads them itself, and
    # small problems ran 20-40 times faster with it than with the direct family.
    dev = _pocl_info()
    assert {default_config(dev, s, shape, views=views).kernel for shape in ((100, 100, 100), (4096, 4096, 4096))
            for views in (False, True)} == {"xgemm_cpu"}
