"""The CPU family (kernels/xgemm_cpu.cl through gemmtune.families.cpu) on PoCL, against numpy.

Through GemmOperation, so the family's plan (pack kernels, scratch sizes, argument order) is
what runs: every op pair for s and z, a spread for d and c, ragged shapes, leading dimensions
above the rows, element offsets, alpha and beta, and C poisoned with NaN where beta is 0. Each
(configuration, precision, op pair) is one build; every build runs every shape.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import DTYPES, uniform  # noqa: E402

from gemmtune.families import XGEMM_CPU  # noqa: E402
from gemmtune.launch.plan import Problem  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.space import Config, shipped_families  # noqa: E402
from gemmtune.measure.verify import Reference, compare  # noqa: E402

# Small blocks so that the shapes below leave ragged rows and columns, several blocks per
# work-item (NB), K in chunks (KC) with an unroll remainder (KU); one configuration packs B and
# walks row blocks (ORDER 1), the other reads B in place.
BASE = dict(WGS=1, PACKA=1)
CONFIGS = {
    "packed-b": dict(MV=2, NR=3, KU=4, NB=2, KC=8, ORDER=1, PACKB=1, **BASE),
    "b-in-place": dict(MV=1, NR=5, KU=2, NB=3, KC=0, ORDER=0, PACKB=0, **BASE),
    # A read in place too (outside the shipped space, but a configuration of the family): op(A)
    # gathered row by row, conjugated there for op C
    "a-in-place": dict(MV=2, NR=3, KU=2, NB=1, KC=4, ORDER=0, WGS=1, PACKA=0, PACKB=0),
}
VW = {"s": 8, "d": 4, "c": 1, "z": 1}
PLANAR_VW = {"c": 16, "z": 8}   # complex in vectors of real and imaginary parts (A packed)
# (m, n, k): one element; ragged everywhere; K of several chunks plus a remainder.
SHAPES = [(1, 1, 1), (7, 13, 5), (37, 20, 19)]
OPS = [(ta, tb) for ta in "NTC" for tb in "NTC"]
SPREAD = [("N", "N"), ("T", "C"), ("C", "T"), ("N", "T")]


@pytest.fixture(scope="module")
def queue():
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device

    _, dev = open_device(0)
    return cl.CommandQueue(cl.Context([dev]))


def stored(rows, cols, op):
    return (rows, cols) if op == "N" else (cols, rows)


def config(code, name, vw=None):
    return Config.of("xgemm_cpu", {**XGEMM_CPU.defaults, **CONFIGS[name], "VW": vw or VW[code]})


def run_cpu(queue, code, name, m, n, k, ta, tb, pad=(0, 0, 0), offsets=(0, 0, 0), alpha=1.5, beta=0.0, vw=None):
    """One xgemm_cpu GEMM of column-major operands ``pad`` rows taller than they are, at element
    ``offsets`` into their buffers; the result, numpy's, and C's memory outside the result
    (after, before)."""
    import pyopencl as cl

    from gemmtune.launch.operation import GemmOperation

    dtype, prec = DTYPES[code], get_precision(code)
    rng = np.random.default_rng([m, n, k, ord(ta), ord(tb)])
    shapes = {"A": stored(m, k, ta), "B": stored(k, n, tb), "C": (m, n)}
    host, bufs, whole = {}, {}, {}
    for (key, (rows, cols)), extra, off in zip(shapes.items(), pad, offsets):
        x = uniform((off + (rows + extra) * cols,), dtype, rng)
        if key == "C" and beta == 0:
            x[:] = np.nan
        whole[key] = x
        host[key] = x[off:].reshape(cols, rows + extra).T[:rows]
        bufs[key] = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    expected = Reference.compute(prec, host["A"], host["B"], None if beta == 0 else host["C"].copy(),
                                 alpha, beta, ta, tb)
    problem = Problem(m, n, k, ta, tb, shapes["A"][0] + pad[0], shapes["B"][0] + pad[1], m + pad[2], views=True)
    op = GemmOperation(queue, config(code, name, vw), shipped_families().family("xgemm_cpu").source, prec, m, n, k,
                       problem=problem)
    op.enqueue(bufs["A"], bufs["B"], bufs["C"], alpha, beta, offsets=offsets)[-1].wait()
    out = np.empty_like(whole["C"])
    cl.enqueue_copy(queue, out, bufs["C"])
    ldc = m + pad[2]
    result = out[offsets[2]:].reshape(n, ldc).T[:m]

    def outside(x):
        return np.concatenate([x[:offsets[2]], x[offsets[2]:].reshape(n, ldc)[:, m:].ravel()])

    return result, expected, (outside(out), outside(whole["C"]))


def check(code, result, expected):
    outcome = compare(np.asfortranarray(result), expected, get_precision(code))
    assert outcome.passed, outcome


@pytest.mark.parametrize("code", ["s", "z"])
@pytest.mark.parametrize("ta, tb", OPS)
def test_cpu_every_op(queue, code, ta, tb):
    name = "a-in-place" if ta == "C" and tb != "C" else "packed-b" if (ta, tb) in SPREAD else "b-in-place"
    for m, n, k in SHAPES:
        result, expected, _ = run_cpu(queue, code, name, m, n, k, ta, tb)
        check(code, result, expected)


@pytest.mark.parametrize("code", ["d", "c"])
@pytest.mark.parametrize("ta, tb", SPREAD)
@pytest.mark.parametrize("name", ["packed-b", "b-in-place"])
def test_cpu_other_precisions_with_alpha_and_beta(queue, code, ta, tb, name):
    alpha, beta = (0.5 - 1j, 0.25 + 0.5j) if code in "cz" else (-0.75, 1.25)
    for m, n, k in SHAPES:
        for b in (0.0, beta):
            result, expected, _ = run_cpu(queue, code, name, m, n, k, ta, tb, alpha=alpha, beta=b)
            check(code, result, expected)


@pytest.mark.parametrize("code", ["s", "z"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_cpu_reads_views_and_writes_nothing_outside_c(queue, code, name):
    """Leading dimensions above the rows and offsets into every buffer: what lies before C and
    between its columns keeps its value, NaN or not."""
    for beta in (0.0, 0.5):
        result, expected, (after, before) = run_cpu(queue, code, name, 9, 11, 13, "T", "N",
                                                    pad=(3, 1, 5), offsets=(7, 2, 13), beta=beta)
        check(code, result, expected)
        np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("code", ["c", "z"])
@pytest.mark.parametrize("ta, tb", OPS)
def test_cpu_complex_in_planar_vectors(queue, code, ta, tb):
    """Complex precisions with VW > 1: op(A) packed into panels of real parts and imaginary
    parts (conjugated there for op C), two sets of accumulators interleaved back at the store;
    every op pair, alpha and beta, C poisoned where beta is 0, and views."""
    name = "packed-b" if (ta, tb) in SPREAD else "b-in-place"
    for m, n, k in SHAPES:
        for beta in (0.0, 0.25 + 0.5j):
            result, expected, _ = run_cpu(queue, code, name, m, n, k, ta, tb, alpha=0.5 - 1j, beta=beta,
                                          vw=PLANAR_VW[code])
            check(code, result, expected)
    result, expected, (after, before) = run_cpu(queue, code, name, 9, 11, 13, ta, tb, pad=(3, 1, 5),
                                                offsets=(7, 2, 13), beta=0.5, vw=PLANAR_VW[code])
    check(code, result, expected)
    np.testing.assert_array_equal(after, before)


def test_cpu_gemm_api_runs_the_family():
    """gemmtune.gemm with an xgemm_cpu configuration: numpy's row-major meaning, swapped onto
    the column-major kernel."""
    import gemmtune

    rng = np.random.default_rng(3)
    a, b = uniform((33, 21), np.float64, rng), uniform((17, 21), np.float64, rng)
    c = uniform((33, 17), np.float64, rng)
    cfg = {"KERNEL": "xgemm_cpu", "VW": 4, "MV": 2, "NR": 6, "KU": 4, "KC": 8, "NB": 2, "ORDER": 0, "PACKB": 0}
    got = gemmtune.gemm(a, b, c, alpha=2.0, beta=-1.0, trans_b=True, config=cfg)
    np.testing.assert_allclose(got, 2.0 * a @ b.T - c, rtol=1e-12, atol=1e-12)


def test_the_kernels_error_checks_agree_with_constraint_1(queue):
    """The kernel refuses to build what constraint 1 forbids: a vector width that is not a
    power of two up to 16, and vectors of complex elements read in place (A not packed)."""
    from gemmtune.devices.opencl import resolve_device
    from gemmtune.launch.operation import BuildError, build, defines

    source = shipped_families().family("xgemm_cpu").source
    dev = resolve_device(0)
    for code, vw, packa in (("s", 3, 1), ("c", 8, 0), ("z", 4, 0)):
        prec = get_precision(code)
        broken = Config.of("xgemm_cpu", {**XGEMM_CPU.defaults, "VW": vw, "MV": 1, "NR": 4, "PACKA": packa})
        assert XGEMM_CPU.broken(broken.params, dev, prec).number == 1
        with pytest.raises(BuildError) as e:
            build(queue.context, source, defines(broken, prec))
        assert "xgemm_cpu:" in e.value.log


# ---------------------------------------------------------------- constraints and plans (no OpenCL)

LIMITS = type("Limits", (), {"max_work_group_size": 4096, "max_work_item_sizes": (4096, 4096, 4096)})()


def test_register_budget_admits_the_measured_blocks_and_refuses_larger_ones():
    s, d = get_precision("s"), get_precision("d")
    best_s = {**XGEMM_CPU.defaults, "VW": 16, "MV": 2, "NR": 14}      # 28 + 2 + 1 = 31 registers
    assert XGEMM_CPU.broken(best_s, LIMITS, s) is None
    assert XGEMM_CPU.broken({**best_s, "MV": 3, "NR": 12}, LIMITS, s).number == 2   # 36 + 3 + 1
    # d at VW 16 takes two registers a vector: MV 2 x NR 14 would need 62
    assert XGEMM_CPU.broken({**best_s, "VW": 16}, LIMITS, d).number == 2
    assert XGEMM_CPU.broken({**best_s, "VW": 8}, LIMITS, d) is None
    assert XGEMM_CPU.broken({**best_s, "VW": 4}, LIMITS, s).number == 5   # 16 bytes: half a vector idle
    assert XGEMM_CPU.broken({**best_s, "VW": 8, "ORDER": 1, "PACKB": 0}, LIMITS, s).number == 4


def test_register_budget_is_the_device_compilers():
    """A CPU compiled for AVX2 has 16 registers of 32 bytes: a vector of 16 floats takes two."""
    s, c = get_precision("s"), get_precision("c")
    avx2 = type("Avx2", (), {**vars(type(LIMITS)), "vector_registers": 16, "vector_bytes": 32})()
    block = {**XGEMM_CPU.defaults, "VW": 8, "MV": 2, "NR": 6, "PACKA": 1}    # 12 + 2 + 1 = 15
    assert XGEMM_CPU.broken(block, avx2, s) is None
    assert XGEMM_CPU.broken({**block, "NR": 7}, avx2, s).number == 2        # 17
    assert XGEMM_CPU.broken({**block, "NR": 7}, LIMITS, s) is None          # AVX-512's 32
    assert XGEMM_CPU.broken({**block, "VW": 16, "MV": 1, "NR": 6}, avx2, s) is None   # (6 + 1 + 1) * 2
    assert XGEMM_CPU.broken({**block, "VW": 16, "MV": 1, "NR": 7}, avx2, s).number == 2
    assert XGEMM_CPU.broken({**block, "MV": 2, "NR": 2}, avx2, c) is None    # (4 + 2 + 1) * 2 parts
    assert XGEMM_CPU.broken({**block, "MV": 2, "NR": 3}, avx2, c).number == 2


def test_complex_vectors_count_real_and_imaginary_parts():
    c, z = get_precision("c"), get_precision("z")
    base = {**XGEMM_CPU.defaults, "PACKA": 1, "MV": 1, "NR": 14}
    # c at VW 16: vectors of 16 floats, twice: (14 + 1 + 1) * 2 = 32 registers
    assert XGEMM_CPU.broken({**base, "VW": 16}, LIMITS, c) is None
    assert XGEMM_CPU.broken({**base, "VW": 16, "MV": 2}, LIMITS, c).number == 2          # (28 + 2 + 1) * 2
    assert XGEMM_CPU.broken({**base, "VW": 8, "MV": 2, "NR": 6}, LIMITS, z) is None     # (12 + 2 + 1) * 2
    assert XGEMM_CPU.broken({**base, "VW": 16, "MV": 2, "NR": 6}, LIMITS, z).number == 2  # 128 bytes: 60
    # a vector fills 32 or 64 bytes of parts: c 8 or 16, z 4 or 8; VW 1 still takes whole elements
    for prec, fits, idle in ((c, (1, 8, 16), (2, 4)), (z, (1, 4, 8), (2,))):
        for vw in fits:
            assert XGEMM_CPU.broken({**base, "VW": vw, "NR": 4}, LIMITS, prec) is None, (prec.code, vw)
        for vw in idle:
            assert XGEMM_CPU.broken({**base, "VW": vw, "NR": 4}, LIMITS, prec).number == 5, (prec.code, vw)
    assert XGEMM_CPU.broken({**base, "VW": 8, "NR": 4, "PACKA": 0}, LIMITS, c).number == 1


def test_cpu_plan_packs_into_panels_and_passes_the_call_arguments():
    p = {**XGEMM_CPU.defaults, "VW": 8, "MV": 2, "NR": 6, "NB": 2, "PACKA": 1, "PACKB": 1, "ORDER": 0}
    s = get_precision("s")
    problem = Problem(37, 20, 19, "T", "N", lda=25, ldb=22, ldc=40, views=True)
    plan = XGEMM_CPU.plan(p, s, problem, LIMITS, 2)
    assert [launch.kernel for launch in plan.launches] == ["xgemm_pack_a", "xgemm_pack_b", "xgemm"]
    assert plan.kernel_launches == 1
    # ceil(37 / 16) = 3 panels of 16 rows, ceil(20 / 6) = 4 panels of 6 columns, each K long
    assert {sc.name: sc.nbytes for sc in plan.scratch} == {"Ap": 3 * 16 * 19 * 4, "Bp": 4 * 6 * 19 * 4}
    pack_a, pack_b, main = plan.launches
    assert pack_a.global_size == (32, 3) and pack_a.args == (37, 19, "A", "offset_a", 25, "Ap")
    assert pack_b.global_size == (32, 4) and pack_b.args == (20, 19, "B", "offset_b", 22, "Bp")
    # ceil(20 / (6 * 2)) = 2 column groups along dimension 0, 3 row blocks along dimension 1
    assert main.global_size == (2, 3) and main.local_size == (1, 1)
    assert main.args == (37, 20, 19, "alpha", "beta", "A", "offset_a", 25, "B", "offset_b", 22,
                         "C", "offset_c", 40, "Ap", "Bp")
    swapped = XGEMM_CPU.plan({**p, "ORDER": 1}, s, problem, LIMITS, 2).launches[-1]
    assert swapped.global_size == (3, 2)
    assert XGEMM_CPU.build_defines(p, s, problem) == {"TRANSA": 1, "TRANSB": 0, "PART": 1}
    # the packing kernels apart, built from what they depend on: the panel and op() of their operand
    assert dict(pack_a.defines) == {"PRECISION": 32, "PART": 2, "PACKA": 1, "PACKB": 0, "VW": 1, "MV": 16, "TRANSA": 1}
    assert dict(pack_b.defines) == {"PRECISION": 32, "PART": 2, "PACKA": 0, "PACKB": 1, "VW": 1, "MV": 1, "NR": 6,
                                    "TRANSB": 0}
    assert main.defines is None


def test_candidates_with_the_same_panels_share_one_build_of_the_packing_kernels(queue):
    """Two configurations that differ in the product alone: their packing kernels come from one
    program, built once; each product's program holds the product alone; both compute right."""
    import pyopencl as cl

    from gemmtune.launch.operation import GemmOperation

    s, source = get_precision("s"), shipped_families().family("xgemm_cpu").source
    base = {**XGEMM_CPU.defaults, "VW": 8, "MV": 2, "NR": 3, "NB": 1, "KC": 0, "PACKA": 1, "PACKB": 1, "ORDER": 0}
    ops = [GemmOperation(queue, Config.of("xgemm_cpu", {**base, "KU": ku}), source, s, 37, 20, 19, "C", "T")
           for ku in (1, 4)]
    programs = [[kernel.get_info(cl.kernel_info.PROGRAM).int_ptr for kernel, _, _ in op.launches] for op in ops]
    assert programs[0][:2] == programs[1][:2] and programs[0][2] != programs[1][2]
    for op in ops:
        assert op.program.get_info(cl.program_info.KERNEL_NAMES) == "xgemm"
    rng = np.random.default_rng()
    a, b = uniform((19, 37), np.float32, rng), uniform((20, 19), np.float32, rng)   # op(A) = A^H, op(B) = B^T
    expected = Reference.compute(s, a, b, None, 1.0, 0.0, "C", "T")
    for op in ops:
        bufs = [cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=np.asfortranarray(x))
                for x in (a, b, np.full((37, 20), np.nan, np.float32, order="F"))]
        op.enqueue(*bufs, 1.0, 0.0)[-1].wait()
        out = np.empty((37, 20), np.float32, order="F")
        cl.enqueue_copy(queue, out, bufs[2])
        check("s", out, expected)


def test_cpu_plan_without_k_packs_nothing_and_refuses_short_leading_dimensions():
    p = {**XGEMM_CPU.defaults, "PACKA": 1, "PACKB": 1}
    plan = XGEMM_CPU.plan(p, get_precision("d"), Problem(5, 3, 0), LIMITS, 2)
    assert [launch.kernel for launch in plan.launches] == ["xgemm"]   # beta * C only
    assert "Ap" in plan.launches[0].args and "Bp" in plan.launches[0].args
    with pytest.raises(ValueError, match="leading dimension of A"):
        XGEMM_CPU.plan(p, get_precision("d"), Problem(8, 8, 8, "N", "N", lda=4), LIMITS, 2)
