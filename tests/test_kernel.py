"""gemmtune.gemm on the PoCL CPU device, checked against numpy, and the checker itself.

Each (configuration, precision) pair is one OpenCL build, which PoCL compiles for seconds when
its kernel cache is cold (more for large work-groups, and again for each new local size of the
padding kernel), so the configurations are few, small, and each covers several features; the
issue's own example configuration (TSM=16, TSN=32, PAD=1) is run by test_cli's verify tests.
Within one build every shape, transpose and alpha/beta case is cheap.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import DTYPES, broken_rules, numpy_product, uniform, worst_case_tolerance  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.precision import precision_of  # noqa: E402
from gemmtune.measure.verify import Reference, compare  # noqa: E402

CONFIGS = {
    # TSM > TSN, PAD = 0, WPTN = 1, rectangular transpose tile (8 x 16).
    "tsm8-tsn4-wptn1-pad0": dict(TSM=8, TSN=4, TSK=8, WPTN=1, PAD=0, TRANSPOSEX=8, TRANSPOSEY=16),
    # TSM < TSN, WPTN = 8 (RTSN = 2), odd PAD, rectangular transpose tile the other way (16 x 8
    # work-items, each moving 2 elements).
    "tsm8-tsn16-wptn8-pad3": dict(TSM=8, TSN=16, TSK=8, WPTN=8, PAD=3, TRANSPOSEX=16, TRANSPOSEY=8, TRANSPOSEW=2),
    # The shipped default for the device.
    "default": None,
}

# (m, n, k): C is m x n, the inner dimension is k. Every configuration and precision runs these.
SHAPES = [(1, 1, 1), (7, 13, 5), (33, 7, 129), (3, 5, 1000)]
# The long thin shape makes PoCL compile the padding kernel again for a large work-group (seconds
# each, cold), so it runs for each precision once and each configuration at least once, rather
# than for the whole product.
LONG_THIN = (257, 2, 3)
LONG_THIN_CASES = [("s", "default"), ("d", "tsm8-tsn4-wptn1-pad0"), ("c", "tsm8-tsn16-wptn8-pad3"),
                   ("z", "default")]

# Scalars are exact binary fractions, so casting them to the working precision loses nothing.
# c is None, NaN (with beta = 0 it must be ignored, as BLAS does) or random.
REAL_SCALARS = [(1.0, 0.0, None), (-1.5, 0.0, "nan"), (0.75, -1.25, "random")]
COMPLEX_SCALARS = REAL_SCALARS + [(0.5 - 1.25j, -0.75 + 0.5j, "random"), (1j, 0.0, "nan")]


pytestmark = pytest.mark.usefixtures("no_tuned_results")


def operands(rng, dtype, m, n, k, ta, tb):
    a = uniform((m, k) if ta == "N" else (k, m), dtype, rng)
    b = uniform((k, n) if tb == "N" else (n, k), dtype, rng)
    return a, b


def test_test_configurations_are_valid_on_pocl():
    from gemmtune.devices.opencl import resolve_device

    dev = resolve_device(0)
    for name, config in CONFIGS.items():
        if config is not None:
            for code in "sdcz":
                assert not broken_rules(config, dev, code), (name, code)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_gemm_matches_numpy(code, config, shape):
    check_gemm(code, CONFIGS[config], shape)


@pytest.mark.parametrize("code, config", LONG_THIN_CASES, ids=lambda x: x)
def test_gemm_matches_numpy_long_thin(code, config):
    check_gemm(code, CONFIGS[config], LONG_THIN)


def check_gemm(code, config, shape):
    """Every transpose pair and alpha/beta case of one configuration, precision and shape."""
    dtype = DTYPES[code]
    complex_ = code in "cz"
    m, n, k = shape
    flags = ["N", "T", "C"] if complex_ else ["N", "T"]
    rng = np.random.default_rng([m, n, k, "sdcz".index(code)])
    prec = precision_of(dtype)
    for ta in flags:
        for tb in flags:
            a, b = operands(rng, dtype, m, n, k, ta, tb)
            for alpha, beta, c_kind in COMPLEX_SCALARS if complex_ else REAL_SCALARS:
                case = f"trans_a={ta} trans_b={tb} alpha={alpha} beta={beta} c={c_kind}"
                c = {None: None, "nan": np.full((m, n), np.nan, dtype=dtype),
                     "random": uniform((m, n), dtype, rng)}[c_kind]
                if c is not None and complex_ and c_kind == "nan":
                    c = c + 1j * np.nan
                c_before = None if c is None else c.copy()
                got = gemmtune.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb, config=config)

                assert got.dtype == dtype and got.shape == (m, n), case
                assert np.all(np.isfinite(got)), case
                if c is not None:
                    np.testing.assert_array_equal(c, c_before, err_msg="c was modified")
                value, scale = numpy_product(a, b, c, alpha, beta, ta, tb)
                np.testing.assert_allclose(got, value, rtol=0, atol=worst_case_tolerance(dtype, k, scale),
                                           err_msg=case)
                check = compare(got, Reference.compute(prec, a, b, c, alpha, beta, ta, tb), prec)
                assert check.passed, (case, check)


def test_boolean_and_letter_transpose_flags_agree():
    rng = np.random.default_rng(7)
    a, b = uniform((5, 9), np.float32, rng), uniform((6, 5), np.float32, rng)
    by_bool = gemmtune.gemm(a, b, trans_a=True, trans_b=True)
    np.testing.assert_array_equal(by_bool, gemmtune.gemm(a, b, trans_a="T", trans_b="T"))
    np.testing.assert_allclose(by_bool, a.T.astype(np.float64) @ b.T, rtol=0, atol=1e-5)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(11)
    a, b, c = (uniform(s, np.complex64, rng) for s in ((4, 6), (6, 3), (4, 3)))
    saved = [x.copy() for x in (a, b, c)]
    gemmtune.gemm(a, b, c, alpha=2.0, beta=0.5 + 0.5j)
    for x, y in zip((a, b, c), saved):
        np.testing.assert_array_equal(x, y)


def test_non_contiguous_inputs():
    # Views (a transposed view, a strided slice) have numpy's meaning, not their memory layout.
    rng = np.random.default_rng(13)
    big = uniform((12, 14), np.float64, rng)
    a, b = big[::2, 1:8], big[:7, :10:2]   # 6 x 7 and 7 x 5, both strided
    got = gemmtune.gemm(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("a_shape, b_shape, c_shape, kwargs, match", [
    ((3, 4), (5, 2), None, {}, "inner"),
    ((3, 4), (4, 2), None, {"trans_a": True}, "inner"),
    ((3, 4), (2, 4), None, {}, "inner"),
    ((3, 4), (4, 2), (2, 3), {"beta": 1.0}, "c must be"),
    ((3, 4), (4, 2), (3, 3), {"beta": 1.0}, "c must be"),
    ((4,), (4, 2), None, {}, "2-D"),
    ((3, 4), (4,), None, {}, "b must be at least 2-D"),
    ((3, 4), (4, 2, 1), None, {}, "inner"),              # b is a stack of four 2x1 matrices
    ((2, 3, 4), (3, 4, 2), None, {}, "do not broadcast"),
])
def test_gemm_rejects_bad_shapes(a_shape, b_shape, c_shape, kwargs, match):
    a, b = np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)
    c = None if c_shape is None else np.ones(c_shape, np.float32)
    with pytest.raises(ValueError, match=match):
        gemmtune.gemm(a, b, c, **kwargs)


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64, None), (np.complex64, np.complex128, None),
                                    (np.float64, np.float64, np.float32), (np.float32, np.complex64, None)])
def test_gemm_rejects_mixed_dtypes(dtypes):
    da, db, dc = dtypes
    a, b = np.ones((3, 4), da), np.ones((4, 2), db)
    c = None if dc is None else np.ones((3, 2), dc)
    with pytest.raises(ValueError, match="dtype"):
        gemmtune.gemm(a, b, c, beta=1.0)


@pytest.mark.parametrize("config, number", [
    ({"TSN": 24, "WPTN": 16}, 1),                               # 16 does not divide 24
    ({"TSM": 16, "TSN": 32, "TSK": 4, "WPTN": 4}, 3),           # TSK=4 rows of A over RTSN=8
], ids=["constraint-1", "constraint-3"])
def test_invalid_config_names_the_constraint(config, number):
    from gemmtune.devices.opencl import resolve_device
    from gemmtune.space import load_space, make_config

    full = make_config(load_space(), None, config).params
    assert broken_rules(full, resolve_device(0), "s")[0] == number
    a = np.ones((4, 4), np.float32)
    with pytest.raises(GemmtuneError, match=rf"constraint {number}\b"):
        gemmtune.gemm(a, a, config=config)


def test_unknown_config_parameter():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(GemmtuneError, match="TSX"):
        gemmtune.gemm(a, a, config={"TSX": 16})


def test_programs_are_cached(monkeypatch):
    import pyopencl as cl

    built = []
    real = cl.Program

    def counting(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    rng = np.random.default_rng(17)
    a, b = uniform((9, 9), np.float32, rng), uniform((9, 9), np.float32, rng)
    config = CONFIGS["tsm8-tsn4-wptn1-pad0"]
    gemmtune.gemm(a, b, config=config)
    monkeypatch.setattr(cl, "Program", counting)
    for shape in ((9, 9), (17, 3)):
        x = uniform(shape, np.float32, rng)
        gemmtune.gemm(x, x.T.copy(), config=config)
    assert built == []


def test_a_cached_program_is_its_contexts_whichever_object_names_it():
    """The cache goes by the OpenCL context, not by the Python object naming it: two wrappers of
    one context share its program, and every program built is of the context it was asked for
    (keyed by the wrapper's id, a context made after another was freed could get that one's)."""
    import gc

    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.operation import build

    _, device = open_device(0)
    source = "__kernel void k(__global int* x) { x[0] = VALUE; }"
    context = cl.Context([device])
    program = build(context, source, {"VALUE": 7})
    assert build(cl.Context.from_int_ptr(context.int_ptr), source, {"VALUE": 7}) is program
    for _ in range(20):
        other = cl.Context([device])
        assert build(other, source, {"VALUE": 7}).get_info(cl.program_info.CONTEXT).int_ptr == other.int_ptr
        del other
        gc.collect()


def test_a_work_group_larger_than_the_built_kernel_allows_is_refused(monkeypatch):
    # How many work-items a built kernel runs per group depends on the registers its compiler
    # gave it (NVIDIA's driver launched larger groups with no error, wrongly); PoCL allows its
    # maximum to every kernel, so the limit is set here to one below the GEMM kernel's group and
    # then to the group itself.
    from gemmtune.launch import operation as kernels

    rng = np.random.default_rng(23)
    a, b = uniform((21, 10), np.float64, rng), uniform((10, 13), np.float64, rng)
    config = CONFIGS["tsm8-tsn16-wptn8-pad3"]   # TSM x TSN / WPTN = 8 x 2 work-items
    for limit in (15, 16):
        monkeypatch.setattr(kernels, "work_group_limit",
                            lambda kernel, device, limit=limit: limit if kernel.function_name == "xgemm" else 4096)
        if limit < 16:
            with pytest.raises(kernels.BuildError, match="xgemm as built runs at most 15 work-items per group .*not 16"):
                gemmtune.gemm(a, b, config=config)
        else:
            np.testing.assert_allclose(gemmtune.gemm(a, b, config=config), a @ b, rtol=1e-12)


# ---------------------------------------------------------------- the checker can fail

DEFECTS = ["one wrong element", "one NaN element", "dropped k-term"]


@pytest.mark.parametrize("k", [5, 129, 1000])
@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_compare_flags_defects(code, k):
    """A correct gemm result passes; the same result with a defect put in by hand does not.

    The defects are as small as real bugs get: one term counted twice in one element, one
    NaN, one term of the K sum missing everywhere. With |entries| >= 0.25 each term is at
    least 1/16 of the largest possible one, so each defect moves an element by at least
    1/(16 k) of its scale, above the tolerance for every k here."""
    dtype = DTYPES[code]
    prec = precision_of(dtype)
    rng = np.random.default_rng(k)
    m, n = 6, 5
    a, b = uniform((m, k), dtype, rng), uniform((k, n), dtype, rng)
    alpha = 1.0
    ref = Reference.compute(prec, a, b, None, alpha, 0.0)
    good = gemmtune.gemm(a, b, alpha=alpha)
    assert compare(good, ref, prec).passed

    wide = ref.value.dtype
    results = {}
    results["one wrong element"] = good.copy()
    results["one wrong element"][2, 3] += (a[2, 0].astype(wide) * b[0, 3]).astype(dtype)
    results["one NaN element"] = good.copy()
    results["one NaN element"][4, 1] = np.nan
    results["dropped k-term"] = (a[:, 1:].astype(wide) @ b[1:, :].astype(wide)).astype(dtype)
    for defect in DEFECTS:
        check = compare(results[defect], ref, prec)
        assert not check.passed, (defect, check)
    assert compare(results["one wrong element"], ref, prec).componentwise_error > compare(good, ref, prec).tolerance


def test_compare_edge_cases_across_pieces(monkeypatch):
    """Elements whose terms are all zero are exact, not 0/0 failures; a nonzero one there, an
    infinity or a NaN fails, in whichever piece of the threaded comparison it lands."""
    import gemmtune.measure.verify as verify

    monkeypatch.setattr(verify, "CHUNK", 7)  # many pieces, the last one short
    prec = precision_of(np.float32)
    rng = np.random.default_rng(5)
    a, b = uniform((9, 6), np.float32, rng), uniform((6, 8), np.float32, rng)
    a[3] = 0.0  # row 3 of the product: every term zero, reference and scale exactly 0
    ref = Reference.compute(prec, a, b, None, 1.0, 0.0)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert compare(exact, ref, prec).passed
    for where, value in [((3, 2), 1e-30), ((8, 7), np.inf), ((8, 7), np.nan), ((0, 0), -np.inf)]:
        bad = exact.copy()
        bad[where] = value
        check = compare(bad, ref, prec)
        assert not check.passed, (where, value, check)
    nan = exact.copy()
    nan[8, 7] = np.nan
    assert np.isnan(compare(nan, ref, prec).componentwise_error)


def test_a_binary_loads_as_the_timing_worker_will_and_a_bad_one_is_refused():
    # Compilers on a GPU load each binary they build once, so that the driver's own cache holds
    # what the timing worker will load; a binary the driver refuses raises, and is left to the
    # worker (which builds from source and says why).
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.space.defaults import default_config
    from gemmtune.launch.operation import build, defines, load_binary, program_binary
    from gemmtune.precision import get_precision
    from gemmtune.space import shipped_families

    info, dev = open_device(0)
    ctx = cl.Context([dev])
    prec = get_precision("s")
    config = default_config(info, prec)
    defs = defines(config, prec)
    binary = program_binary(build(ctx, shipped_families().family(config.kernel).source, defs))
    assert len(binary) > 0
    load_binary(ctx, binary, defs)
    with pytest.raises(cl.Error):
        load_binary(ctx, b"not a program binary" + binary[:16], defs)


class _FakeDevice:
    """What device_defines reads of a pyopencl Device."""

    def __init__(self, extensions: str, major: int | None, local_mem_size: int = 48 * 1024,
                 registers: int | None = None):
        self.extensions, self.local_mem_size = extensions, local_mem_size
        if major is not None:
            self.compute_capability_major_nv = major
        if registers is not None:
            self.registers_per_block_nv = registers


@pytest.mark.parametrize("extensions, major, expected", [
    ("cl_khr_fp64 cl_nv_device_attribute_query", 9, {"CP_ASYNC": 1, "MMA_F64": 1}),  # Hopper: mma.sync on doubles
    ("cl_khr_fp64 cl_nv_device_attribute_query", 8, {"CP_ASYNC": 1}),    # Ampere: the first with cp.async
    ("cl_khr_fp64 cl_nv_device_attribute_query", 7, {}),                 # Volta
    ("cl_khr_fp64", 9, {}),                                              # not NVIDIA's attributes
    ("cl_nv_device_attribute_query", None, {}),                          # a driver that lacks the query
])
def test_device_defines_only_offer_cp_async_where_it_exists(extensions, major, expected):
    from gemmtune.launch.operation import build_options, device_defines

    dev = _FakeDevice(extensions, major)
    assert device_defines(dev) == expected
    options = build_options({"MWG": 64}, dev)
    assert ("-DCP_ASYNC=1" in options) == bool(expected) and "-DMWG=64" in options
    assert ("-DMMA_F64=1" in options) == ("MMA_F64" in expected)


@pytest.mark.parametrize("extensions, major, reported, usable", [
    ("cl_khr_fp64 cl_nv_device_attribute_query", 9, 48 * 1024, 226 * 1024),   # Hopper: more than it reports
    ("cl_khr_fp64 cl_nv_device_attribute_query", 8, 48 * 1024, 48 * 1024),    # not measured: as reported
    ("cl_khr_fp64", 9, 64 * 1024, 64 * 1024),                                 # not NVIDIA's attributes
    ("cl_khr_fp64 cl_nv_device_attribute_query", 9, 256 * 1024, 256 * 1024),  # never less than reported
])
def test_local_memory_is_what_a_work_group_can_use(extensions, major, reported, usable):
    from gemmtune.devices.opencl import local_mem_bytes

    assert local_mem_bytes(_FakeDevice(extensions, major, reported)) == usable


def test_the_cpu_device_builds_without_device_defines():
    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.operation import device_defines

    info, dev = open_device(0)
    assert device_defines(dev) == {} and info.fp64_matrix is False and info.registers_per_group == 0


@pytest.mark.parametrize("extensions, registers, expected", [
    ("cl_khr_fp64 cl_nv_device_attribute_query", 65536, 65536),   # the H200
    ("cl_khr_fp64", 65536, 0),                                    # not NVIDIA's attributes
    ("cl_nv_device_attribute_query", None, 0),                    # a driver that lacks the query
])
def test_registers_per_group_only_where_the_driver_says(extensions, registers, expected):
    from gemmtune.devices.opencl import registers_per_group

    assert registers_per_group(_FakeDevice(extensions, 9, registers=registers)) == expected


class _FakeKernel:
    def __init__(self, declared, reported=256):
        self.declared, self.reported = declared, reported

    def get_work_group_info(self, param, device):
        import pyopencl as cl

        info = cl.kernel_work_group_info
        return {info.WORK_GROUP_SIZE: self.reported, info.COMPILE_WORK_GROUP_SIZE: self.declared}[param]


@pytest.mark.parametrize("extensions, declared, limit", [
    ("cl_nv_device_attribute_query", [32, 16, 1], 512),    # its compiler fits the declared group; the 256 reported is not a limit
    ("cl_nv_device_attribute_query", [32, 32, 1], 1024),
    ("cl_nv_device_attribute_query", [8, 8, 1], 256),      # never below what is reported
    ("cl_nv_device_attribute_query", [0, 0, 0], 256),      # nothing declared: what is reported
    ("cl_khr_fp64", [32, 16, 1], 256),                     # other drivers: what they report
])
def test_a_declared_group_size_is_the_limit_on_nvidia_only(extensions, declared, limit):
    from gemmtune.launch import operation as kernels

    dev = _FakeDevice(extensions, 9)
    assert kernels.work_group_limit(_FakeKernel(declared), dev) == limit
    items = int(np.prod([d or 1 for d in declared])) if any(declared) else 512
    if items > limit:
        with pytest.raises(kernels.BuildError, match=f"runs at most {limit} work-items per group"):
            kernels.check_work_group(_FakeKernel(declared), "xgemm", (items,), dev)
    else:
        kernels.check_work_group(_FakeKernel(declared), "xgemm", (items,), dev)


def test_device_time_leaves_the_hosts_latency_out():
    """A host that stalls between the transpose pass and the main kernel (a search compiling on
    every core) must not count in the operation's device time. The stall is in the span from
    the first command's start to the last one's end, so the test can tell."""
    import time

    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.operation import GemmOperation, device_time_ms
    from gemmtune.space import Config, load_space

    _, dev = open_device(0)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    prec = precision_of(np.float32)
    config = Config.of("xgemm_k5", CONFIGS["tsm8-tsn16-wptn8-pad3"])
    m, n, k = 40, 48, 56
    op = GemmOperation(queue, config, load_space(None).family("xgemm_k5").source, prec, m, n, k)
    assert [launch.kernel for _, launch, _ in op.launches] == ["pad_transpose", "xgemm"]   # B is transposed first
    stall = 0.3
    launch = op.launch

    def stalling_launch(index, wait_for):
        if index == 1:
            queue.finish()                   # the transpose pass has run before the stall begins
            time.sleep(stall)
        return launch(index, wait_for)

    op.launch = stalling_launch
    rng = np.random.default_rng(11)
    a = np.asfortranarray(uniform((m, k), np.float32, rng))
    b = np.asfortranarray(uniform((k, n), np.float32, rng))
    mf = cl.mem_flags
    a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    c = np.full((m, n), np.nan, np.float32, order="F")
    c_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
    events = op.enqueue(a_buf, b_buf, c_buf)
    events[-1].wait()
    assert len(events) == 2
    span = (events[-1].profile.end - events[0].profile.start) * 1e-9
    each = [(e.profile.end - e.profile.start) * 1e-9 for e in events]
    # the main kernel is enqueued after the stall and the transpose pass ended before it
    assert span >= 0.95 * stall > 10 * device_time_ms(events) * 1e-3, (span, each)
    assert device_time_ms(events) * 1e-3 == pytest.approx(sum(each))
    cl.enqueue_copy(queue, c, c_buf)
    check = compare(c, Reference.compute(prec, a, b, None, 1.0, 0.0), prec)
    assert check.passed, check


@pytest.mark.parametrize("limits, expected", [
    ((1024, (1024, 1024, 64)), (32, 8)),     # a GPU
    ((4096, (4096, 4096, 4096)), (32, 8)),   # PoCL
    ((128, (128, 128, 128)), (32, 2)),       # 256 work-items are too many
    ((256, (256, 4, 4)), (32, 2)),           # 8 along dimension 1 are
])
def test_pad_copy_takes_the_first_work_group_the_device_allows(limits, expected):
    from types import SimpleNamespace

    from gemmtune.families import copy_tile

    size, items = limits
    assert copy_tile(SimpleNamespace(max_work_group_size=size, max_work_item_sizes=items)) == expected


@pytest.mark.parametrize("tile", [(32, 8), (32, 2), (4, 1)])
def test_pad_copy_pads_and_conjugates_with_any_work_group(monkeypatch, tile):
    """A and B both go through pad_copy (A untransposed, B conjugated and already n x k), with
    shapes that need padding on every side and a work-group that leaves items past the edges."""
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.families import padded
    from gemmtune.launch.operation import GemmOperation
    from gemmtune.space import Config, load_space

    monkeypatch.setattr(padded, "COPY_TILES", (tile,))
    _, dev = open_device(0)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    prec = precision_of(np.complex64)
    config = Config.of("xgemm_k5", CONFIGS["tsm8-tsn16-wptn8-pad3"])
    m, n, k = 37, 29, 45
    op = GemmOperation(queue, config, load_space(None).family("xgemm_k5").source, prec, m, n, k,
                       trans_b="C")
    assert [(launch.kernel, launch.local_size) for _, launch, _ in op.launches[:2]] == [("pad_copy", tile)] * 2
    rng = np.random.default_rng(12)
    a = np.asfortranarray(uniform((m, k), np.complex64, rng))
    b = np.asfortranarray(uniform((n, k), np.complex64, rng))
    mf = cl.mem_flags
    a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    c = np.full((m, n), np.nan, np.complex64, order="F")
    c_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
    alpha = 0.75 - 0.5j
    op.enqueue(a_buf, b_buf, c_buf, alpha=alpha, beta=0.0)[-1].wait()
    cl.enqueue_copy(queue, c, c_buf)
    check = compare(c, Reference.compute(prec, a, b, None, alpha, 0.0, trans_b="C"), prec)
    assert check.passed, check
