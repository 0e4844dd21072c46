"""The Python API against hostile but plausible input: views outside their buffers, offsets
that are not whole elements, an output that overlaps an input, scalars that are not finite
numbers of the precision, problems larger than the device, a missing queue or configuration.

Each is refused with a GemmtuneError before anything runs, and nothing is written; the legal
cases beside them are checked against numpy in double precision on fresh random data, with the
output poisoned with NaN first. One build of the direct family per precision serves them all.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import DTYPES  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune import inputs  # noqa: E402
from gemmtune.call import compute
from gemmtune.cli import cli  # noqa: E402
from gemmtune.devices.opencl import open_device  # noqa: E402
from gemmtune.errors import GemmtuneError, OperandError  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.measure.verify import Reference, compare, random_matrix  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_tuned_results")

# The direct family reads views in place; small tiles, so the tiny shapes here cover edges.
DIRECT = dict(KERNEL="xgemm_direct", MWG=16, NWG=16, KWG=8, MDIMC=8, NDIMC=4, PADL=1, KSPLIT=4)
BAD_SCALARS = [float("nan"), float("inf"), -float("inf"), complex(1, float("nan")), None, "2", np.array([1.0, 2.0]),
               np.array(2.0), True, [1.0], 10**400]


@pytest.fixture(scope="module")
def queue():
    _, device = open_device(0)
    return cl.CommandQueue(cl.Context([device]))


@pytest.fixture(scope="module")
def gemm_s(queue):
    return gemmtune.Gemm(queue, "s", config=DIRECT)


def sentinel(queue, shape, dtype=np.float32) -> cla.Array:
    """A device array of random bytes' worth of values, to tell any write from none."""
    rng = np.random.default_rng()
    return cla.to_device(queue, rng.uniform(-1, 1, shape).astype(dtype))


def assert_unchanged(before: np.ndarray, after: np.ndarray):
    # Bytes, not values: NaN never equals itself.
    assert before.view(np.uint8).tobytes() == after.view(np.uint8).tobytes()


def check(result, prec, a, b, c0, alpha, beta, ta="N", tb="N"):
    outcome = compare(result, Reference.compute(prec, a, b, c0, alpha, beta, ta, tb), prec)
    assert outcome.passed, outcome


# ---------------------------------------------------------------- views against their buffers

def test_views_beyond_their_buffer_are_refused_and_nothing_is_written(queue, gemm_s):
    """The issue's case: a 30 x 10 view over a 4 x 10 buffer, as c (the write side) and as a
    (the read side), and a view whose offset pushes its last element out."""
    small = sentinel(queue, (4, 10))
    before = small.get()
    a, b, c = sentinel(queue, (30, 10)), sentinel(queue, (10, 10)), sentinel(queue, (30, 10))
    long_view = cla.Array(queue, (30, 10), np.float32, strides=(40, 4), data=small.base_data)
    shifted = cla.Array(queue, (4, 10), np.float32, data=small.base_data, offset=4)
    with pytest.raises(OperandError, match=r"c \(30x10.*ends at byte 1200, beyond its buffer's 160 bytes"):
        gemm_s(a, b, long_view)
    with pytest.raises(OperandError, match=r"a \(30x10.*beyond its buffer"):
        gemm_s(long_view, b, c)
    with pytest.raises(OperandError, match=r"c \(4x10.*offset 4 bytes\) ends at byte 164"):
        gemm_s(a[:4], b, shifted)
    assert_unchanged(before, small.get())


def test_a_cached_call_checks_its_offset_again(queue, gemm_s):
    """A first call prepares the operation for these shapes and strides; a second one with the
    same shapes and strides but a byte offset of 2, or its last row past the buffer's end, is
    refused all the same (it ran at element offset 0)."""
    prec = get_precision("s")
    rng = np.random.default_rng()
    m, n, k = 6, 5, 7
    a, b = random_matrix(prec, (m, k), rng), random_matrix(prec, (k, n), rng)
    whole = np.full((m + 2, n + 3), np.nan, np.float32)
    dc = cla.to_device(queue, whole)
    gemm_s(cla.to_device(queue, a), cla.to_device(queue, b), dc[1:1 + m, 1:1 + n], alpha=0.5)
    out = dc.get()
    check(out[1:1 + m, 1:1 + n], prec, a, b, None, 0.5, 0.0)
    before = dc.get()
    same_strides = dict(shape=(m, n), dtype=np.float32, strides=dc.strides, data=dc.base_data)
    with pytest.raises(OperandError, match="offset .2 bytes. is not a whole number of 4-byte elements"):
        gemm_s(cla.to_device(queue, a), cla.to_device(queue, b), cla.Array(queue, offset=2, **same_strides))
    past_end = 3 * dc.strides[0]   # three rows down, the view's last row is one beyond the buffer
    with pytest.raises(OperandError, match="beyond its buffer"):
        gemm_s(cla.to_device(queue, a), cla.to_device(queue, b), cla.Array(queue, offset=past_end, **same_strides))
    assert_unchanged(before, dc.get())


@pytest.mark.parametrize("strides, match", [
    ((0, 4), "rows must be whole elements apart and not overlap"),
    ((-40, 4), "rows must be whole elements apart and not overlap"),
    ((20, 4), "rows must be whole elements apart and not overlap"),   # rows of 10 elements, 5 apart
    ((42, 4), "rows must be whole elements apart"),
    ((40, 8), "within a row must be adjacent"),
    ((40, 0), "within a row must be adjacent"),
])
def test_strides_that_are_not_a_matrix_view_are_refused(queue, gemm_s, strides, match):
    buffer = sentinel(queue, (40, 10))
    before = buffer.get()
    view = cla.Array(queue, (3, 10), np.float32, strides=strides, data=buffer.base_data, offset=200)
    b, c = sentinel(queue, (10, 4)), sentinel(queue, (3, 4))
    with pytest.raises(OperandError, match=match):
        gemm_s(view, b, c)
    with pytest.raises(OperandError, match=match):
        gemm_s(sentinel(queue, (3, 3)), sentinel(queue, (3, 10)), view)
    assert_unchanged(before, buffer.get())


@pytest.mark.parametrize("code", ["s", "z"])
def test_legal_views_are_right_and_write_nothing_outside_c(queue, code):
    """Views with offsets and rows further apart than their length, c in the middle of a
    NaN-poisoned buffer whose every other byte must stay as it was."""
    prec, dtype = get_precision(code), DTYPES[code]
    rng = np.random.default_rng()
    g = gemmtune.Gemm(queue, code, config=DIRECT)
    m, n, k = 9, 7, 11
    big_a, big_b = random_matrix(prec, (m + 3, k + 4), rng), random_matrix(prec, (k + 2, n + 5), rng)
    big_c = np.full((m + 3, n + 6), prec.nan, dtype)
    dc = cla.to_device(queue, big_c)
    alpha = 0.75 - 0.5j if prec.is_complex else 0.75
    g(cla.to_device(queue, big_a)[2:2 + m, 1:1 + k], cla.to_device(queue, big_b)[1:1 + k, 3:3 + n],
      dc[2:2 + m, 4:4 + n], alpha=alpha)
    out = dc.get()
    check(out[2:2 + m, 4:4 + n], prec, big_a[2:2 + m, 1:1 + k], big_b[1:1 + k, 3:3 + n], None, alpha, 0.0)
    outside = np.ones(out.shape, bool)
    outside[2:2 + m, 4:4 + n] = False
    assert_unchanged(big_c[outside], out[outside])


# ---------------------------------------------------------------- aliasing

def test_c_sharing_elements_with_a_or_b_is_refused(queue, gemm_s):
    d = sentinel(queue, (40, 20))
    before = d.get()
    with pytest.raises(OperandError, match="c shares elements with a"):
        gemm_s(d[:20, :20], d[:20, :20], d[:20, :20])
    with pytest.raises(OperandError, match="c shares elements with a"):   # the overlapping slices
        gemm_s(d[0:30, 0:20], sentinel(queue, (20, 10)), d[10:40, 5:15])
    with pytest.raises(OperandError, match="c shares elements with b"):
        gemm_s(sentinel(queue, (10, 5)), d[0:5, 0:10], d[4:14, 9:19])
    # A sub-buffer is another cl_mem over the same memory.
    whole = sentinel(queue, (64, 64))
    sub = whole.base_data.get_sub_region(whole.nbytes // 2, whole.nbytes // 2)
    c = cla.Array(queue, (16, 16), np.float32, strides=(64 * 4, 4), data=sub, offset=8 * 4)
    with pytest.raises(OperandError, match="c shares elements with a"):
        gemm_s(whole[32:48, 16:32], sentinel(queue, (16, 16)), c)   # c is whole[32:48, 8:24]
    assert_unchanged(before, d.get())


def test_disjoint_views_of_one_buffer_and_a_read_twice_are_legal(queue, gemm_s):
    """c interleaved with a (columns side by side, rows of one buffer), and a passed as b too:
    nothing is both read and written, so the product is right."""
    prec = get_precision("s")
    rng = np.random.default_rng()
    host = random_matrix(prec, (12, 24), rng)
    host[:, 12:] = np.nan
    d = cla.to_device(queue, host)
    gemm_s(d[:, :12], d[:, :12], d[:, 12:], alpha=1.5)
    out = d.get()
    check(out[:, 12:], prec, host[:, :12], host[:, :12], None, 1.5, 0.0)
    assert_unchanged(host[:, :12], out[:, :12])


def test_gemm_on_numpy_takes_c_sharing_memory_with_a_as_its_copy(queue):
    """gemm copies every operand to the device and returns a new array: c may be a itself."""
    prec = get_precision("d")
    rng = np.random.default_rng()
    a = random_matrix(prec, (8, 8), rng)
    kept = a.copy()
    got = gemmtune.gemm(a, a.T, a, alpha=2.0, beta=-1.0, config=DIRECT)
    check(got, prec, kept, kept.T, kept, 2.0, -1.0)
    assert_unchanged(kept, a)


# ---------------------------------------------------------------- scalars

@pytest.mark.parametrize("bad", BAD_SCALARS, ids=lambda value: repr(value)[:24])
@pytest.mark.parametrize("name", ["alpha", "beta"])
def test_bad_scalars_are_refused_on_every_path(queue, gemm_s, name, bad):
    x = np.ones((3, 3), np.float32)
    with pytest.raises(OperandError, match=name):
        gemmtune.gemm(x, x, x, **{"alpha": 1.0, "beta": 1.0, name: bad}, config=DIRECT)
    with pytest.raises(OperandError, match=name):
        compute.verify_config(0, get_precision("s"), 3, 3, 3, config=DIRECT, **{"beta": 1.0, name: bad})
    dc = sentinel(queue, (3, 3))
    gemm_s(cla.to_device(queue, x), cla.to_device(queue, x), dc, alpha=1.0, beta=0.5)   # scalars checked once...
    before = dc.get()
    with pytest.raises(OperandError, match=name):   # ... and whatever comes next, again
        gemm_s(cla.to_device(queue, x), cla.to_device(queue, x), dc, **{"alpha": 1.0, "beta": 0.5, name: bad})
    assert_unchanged(before, dc.get())


@pytest.mark.parametrize("code, value, match", [
    ("s", 1e300, "outside the range of precision s"),
    ("s", np.float64(4e38), "outside the range of precision s"),
    ("s", 1e-300, "outside the range of precision s"),   # 0 in float32: a product of zeros
    ("s", 2 + 1j, "complex but the operands are real"),
    ("d", np.complex128(1), "complex but the operands are real"),
    ("c", complex(0, 1e39), "outside the range of precision c"),
])
def test_scalars_the_precision_cannot_hold_are_refused(queue, code, value, match):
    x = np.ones((3, 3), DTYPES[code])
    with pytest.raises(OperandError, match=match):
        gemmtune.gemm(x, x, alpha=value, config=DIRECT)
    with pytest.raises(OperandError, match=match):
        gemmtune.Gemm(queue, code, config=DIRECT)(*(cla.to_device(queue, x) for _ in range(3)), beta=value)


def test_scalars_numbers_of_every_kind_are_taken(queue):
    prec = get_precision("z")
    rng = np.random.default_rng()
    a, b, c = (random_matrix(prec, (4, 4), rng) for _ in range(3))
    for alpha, beta in ((2, np.float32(0.5)), (np.complex64(1 - 1j), np.int64(-3)), (1.0e100, 1e-300)):
        check(gemmtune.gemm(a, b, c, alpha=alpha, beta=beta, config=DIRECT), prec, a, b, c, alpha, beta)


@pytest.mark.parametrize("option, value, match", [
    ("--alpha", "1e300", "alpha = 1e\\+300 is outside the range of precision s"),
    ("--beta", "nan", "beta must be finite"),
    ("--alpha", "-inf", "alpha must be finite"),
    ("--alpha", "1e-40", "alpha = 1e-40 is outside the range of precision s"),
])
def test_verify_refuses_scalars_the_precision_cannot_hold(option, value, match):
    """It reported "passed False" for --alpha 1e300, as if the kernel were broken."""
    result = CliRunner().invoke(cli, ["verify", "--size", "8", "--precision", "s", option, value])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert re.search(match, lines[0]), lines[0]
    assert "passed" not in result.output


# ---------------------------------------------------------------- memory, queue, configuration

@pytest.fixture
def no_buffers(monkeypatch):
    """Any device allocation fails the test: an estimate must refuse first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a buffer was allocated")
    monkeypatch.setattr(cl, "Buffer", refuse)


def test_gemm_estimates_memory_before_allocating(monkeypatch, no_buffers):
    dev = compute.get_device(0)
    monkeypatch.setattr(dev, "info", dataclasses.replace(dev.info, global_mem_bytes=2**20, max_alloc_bytes=2**18))
    x = np.ones((256, 300), np.float32)   # 300 KiB: more than one allocation may hold
    with pytest.raises(GemmtuneError, match=r"300x256 in precision s needs a buffer of 0\.3 MiB for a, "
                                            r"more than device 0 allows in one allocation \(0\.2 MiB\)"):
        gemmtune.gemm(x, x.T, config=DIRECT, device=0)
    y = np.ones((256, 200), np.float32)   # 200 KiB each, and C of 256 KiB: 0.64 MiB, under 1 MiB
    z = np.ones((512, 200), np.float32)   # C of 1 MiB: 1.4 MiB in all
    with pytest.raises(GemmtuneError, match=r"needs 1\.1 MiB of device memory \(a 0\.4 MiB, b 0\.2 MiB, "
                                            r"c 0\.5 MiB\), more than the 1\.0 MiB of device 0"):
        gemmtune.gemm(z, y.T, config=DIRECT, device=0)


def test_gemm_estimates_host_memory_before_allocating(monkeypatch, no_buffers):
    """The result, contiguous copies of strided operands and, on a CPU device, its buffers: not
    those of the operands and the result, which it uses in place."""
    monkeypatch.setattr(inputs, "available_host_bytes", lambda: 2**20)
    x = np.ones((256, 256), np.float32)   # 256 KiB
    assert compute.get_device(0).info.type == "CPU"
    with pytest.raises(GemmtuneError, match=r"256x256 times 256x256 in precision s needs 1\.5 MiB of host memory "
                                            r"\(result 0\.2 MiB, contiguous a 0\.2 MiB, device work 1\.0 MiB\), "
                                            r"more than the 1\.0 MiB available"):   # work: the parts of K
        gemmtune.gemm(x.T, x, config=DIRECT, device=0)


def test_batched_gemm_estimates_host_memory_before_allocating(monkeypatch, no_buffers):
    """A batch's stacks and result and, on a CPU device, its buffers but those it uses in place
    (the stacked operands and the result): the device's scratch alone."""
    monkeypatch.setattr(inputs, "available_host_bytes", lambda: 2**20)
    x = np.ones((8, 128, 128), np.float32)   # 512 KiB
    with pytest.raises(GemmtuneError, match=r"^8x128x128 times 8x128x128 in precision s needs 1\.5 MiB of host memory "
                                            r"\(result 0\.5 MiB, stacked a 0\.5 MiB, stacked b 0\.5 MiB, "
                                            r"device work 0\.0 MiB\), more than the 1\.0 MiB available$"):
        gemmtune.gemm(x, x, config=DIRECT, device=0)


def test_gemm_refuses_a_problem_beyond_the_device(no_buffers):
    """The issue's case on the real device's figures: the operands (broadcast, so that the test
    itself holds none of them) would take 64 GiB each."""
    huge = np.broadcast_to(np.float32(1), (2**17, 2**17))
    with pytest.raises(GemmtuneError, match="GiB of device memory|one allocation"):
        gemmtune.gemm(huge, huge, config=DIRECT, device=0)


def _fails(error):
    def allocate(*args, **kwargs):
        raise error
    return allocate


# Real pyopencl errors, made as its own calls make them (there is no public constructor).
@pytest.mark.parametrize("error, match", [
    (cl.MemoryError(cl._cl._ErrorRecord("clCreateBuffer", cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE, "")),
     "device ran out of memory .clCreateBuffer: MEM_OBJECT_ALLOCATION_FAILURE"),
    (cl.RuntimeError(cl._cl._ErrorRecord("clEnqueueNDRangeKernel", cl.status_code.OUT_OF_HOST_MEMORY, "")),
     "device ran out of memory .clEnqueueNDRangeKernel: OUT_OF_HOST_MEMORY"),
    (MemoryError("Unable to allocate 7 GiB"), "host ran out of memory .Unable to allocate 7 GiB"),
])
def test_a_failed_allocation_is_an_error(monkeypatch, error, match):
    """Drivers may allocate lazily or run out of host memory behind an estimate that passed."""
    x = np.ones((4, 4), np.float32)
    gemmtune.gemm(x, x, config=DIRECT)   # built and cached, so only the allocation fails
    monkeypatch.setattr(cl, "Buffer", _fails(error))
    with pytest.raises(GemmtuneError, match=match):
        gemmtune.gemm(x, x, config=DIRECT)


def test_gemm_object_needs_a_queue(queue):
    for bad in (None, queue.context, "0"):
        with pytest.raises(GemmtuneError, match="queue must be a pyopencl.CommandQueue"):
            gemmtune.Gemm(bad)


@pytest.mark.parametrize("config, match", [
    ({}, "the configuration is empty"),
    ("TSM=16", "config must be a dict of kernel parameters or a Config, got str"),
    ([("TSM", 16)], "config must be a dict"),
])
def test_config_empty_or_not_a_mapping_is_refused(queue, config, match):
    x = np.ones((3, 3), np.float32)
    with pytest.raises(GemmtuneError, match=match):
        gemmtune.gemm(x, x, config=config)
    with pytest.raises(GemmtuneError, match=match):
        gemmtune.Gemm(queue, "s", config=config)


# ---------------------------------------------------------------- numpy operands

@pytest.mark.parametrize("a, b, match", [
    (np.ones((3, 3), np.int64), np.ones((3, 3), np.int64), "unsupported dtype int64"),
    (np.ones((3, 3), object), np.ones((3, 3), object), "unsupported dtype object"),
    (np.ones((3, 3), np.float16), np.ones((3, 3), np.float16), "unsupported dtype float16"),
    ([[1.0, 2.0], [3.0]], np.ones((2, 2)), "a is not an array numpy can take"),
    (np.ones(3, np.float32), np.ones((3, 3), np.float32), "a must be at least 2-D, got 1-D"),
    (np.ones((3, 3), np.float32), np.ones((2, 4, 3), np.float32), "inner dimensions differ"),   # a batch of b
    (np.ones((3, 4), np.float32), np.ones((3, 4), np.float32), "inner dimensions differ"),
    (np.ones((3, 3), np.float32), np.ones((3, 3), np.float64), "share one dtype"),
])
def test_gemm_refuses_operands_it_cannot_take(a, b, match):
    with pytest.raises(OperandError, match=match):
        gemmtune.gemm(a, b, config=DIRECT)


def test_gemm_refuses_a_bad_transpose_flag_and_c_of_another_shape(queue, gemm_s):
    x = np.ones((3, 3), np.float32)
    with pytest.raises(OperandError, match="trans_a: bad transpose flag 'X'"):
        gemmtune.gemm(x, x, trans_a="X", config=DIRECT)
    with pytest.raises(OperandError, match="does not broadcast to the result"):   # a batch of c
        gemmtune.gemm(x, x, np.ones((3, 3, 2), np.float32), beta=1.0, config=DIRECT)
    with pytest.raises(OperandError, match="c must be 3x3, got 3x2"):
        gemmtune.gemm(x, x, x[:, :2], beta=1.0, config=DIRECT)
    with pytest.raises(OperandError, match="beta = 1.0 needs c"):
        gemmtune.gemm(x, x, beta=1.0, config=DIRECT)
    with pytest.raises(OperandError, match="trans_b: bad transpose flag 2"):
        gemm_s(*(cla.to_device(queue, x) for _ in range(3)), trans_b=2)


def test_gemm_takes_strided_and_fortran_ordered_operands(queue):
    prec = get_precision("s")
    rng = np.random.default_rng()
    big = random_matrix(prec, (20, 30), rng)
    a = big[::2, 1::3]                                    # 10 x 10, neither rows nor elements adjacent
    b = np.asfortranarray(random_matrix(prec, (10, 15), rng))
    c = big[5:15, ::2]                                    # 10 x 15, every other element
    got = gemmtune.gemm(a, b, c, alpha=-1.0, beta=0.5, config=DIRECT)
    check(got, prec, a, b, c, -1.0, 0.5)


@pytest.mark.parametrize("m, k, n", [(0, 3, 4), (3, 0, 4), (3, 4, 0)])
def test_size_zero_dimensions(queue, gemm_s, m, k, n):
    prec = get_precision("s")
    rng = np.random.default_rng()
    a, b, c = random_matrix(prec, (m, k), rng), random_matrix(prec, (k, n), rng), random_matrix(prec, (m, n), rng)
    got = gemmtune.gemm(a, b, c, beta=2.0, config=DIRECT)
    assert got.shape == (m, n)
    np.testing.assert_array_equal(got, 2 * c)
    dc = cla.to_device(queue, c)
    gemm_s(cla.to_device(queue, a), cla.to_device(queue, b), dc, beta=2.0)
    np.testing.assert_array_equal(dc.get(), 2 * c)


def test_buffers_whose_flags_forbid_the_access_are_refused(queue, gemm_s):
    mf = cl.mem_flags
    x = np.ones((4, 4), np.float32)

    def made(flags):
        return cla.Array(queue, (4, 4), np.float32, data=cl.Buffer(queue.context, flags | mf.COPY_HOST_PTR, hostbuf=x))

    with pytest.raises(OperandError, match="c's buffer was made read-only, and c is written"):
        gemm_s(made(mf.READ_ONLY), made(mf.READ_ONLY), made(mf.READ_ONLY))
    with pytest.raises(OperandError, match="b's buffer was made write-only, and b is read"):
        gemm_s(made(mf.READ_ONLY), made(mf.WRITE_ONLY), made(mf.READ_WRITE))


@pytest.mark.parametrize("sizes, match", [
    ((-1, 3, 3), "m must be an integer from 0, got -1"),
    ((3, 2.5, 3), "n must be an integer from 0, got 2.5"),
    ((3, 3, "3"), "k must be an integer from 0, got '3'"),
    ((True, 3, 3), "m must be an integer from 0, got True"),
])
def test_verify_config_refuses_sizes_that_are_not_counts(sizes, match):
    with pytest.raises(OperandError, match=match):
        compute.verify_config(0, "s", *sizes, config=DIRECT)


def test_verify_config_takes_a_precision_code_and_empty_products():
    for m, n, k in ((3, 4, 5), (0, 3, 3), (3, 3, 0)):
        assert compute.verify_config(0, "s", m, n, k, config=DIRECT, beta=0.5).passed
