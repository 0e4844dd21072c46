"""gemmtune.gemm on a CPU device computes in the numpy arrays' own memory (gemmtune/call/host.py):
operands read where they lie, at any offset from the device's alignment, the result written
into an aligned array of gemm's own (or ``out``), on each OpenCL implementation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import DTYPES, numpy_product, uniform, worst_case_tolerance  # noqa: E402

import gemmtune  # noqa: E402
from gemmtune.call.compute import get_device  # noqa: E402
from gemmtune.call.host import HostCall, aligned_empty, alignment, in_host_memory  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402

DIRECT = {"KERNEL": "xgemm_direct"}   # reads views: operands at an element offset
K5 = {"KERNEL": "xgemm_k5"}           # reads operands from offset 0 only


def shifted(x: np.ndarray, shift: int, align: int) -> np.ndarray:
    """A copy of ``x`` whose first byte lies ``shift`` bytes past a multiple of ``align``."""
    raw = aligned_empty((x.nbytes + align + shift,), np.uint8, align)
    y = raw[shift:shift + x.nbytes].view(x.dtype).reshape(x.shape)
    y[...] = x
    assert y.ctypes.data % align == shift
    return y


def host_address(buffer: cl.Buffer) -> int:
    return buffer.get_host_array((buffer.size,), np.uint8).ctypes.data


def check(result, a, b, c=None, alpha=1.0, beta=0.0, ta="N", tb="N"):
    ref, scale = numpy_product(a, b, c, alpha, beta, ta, tb)
    assert result.shape == ref.shape and not np.isnan(result).any()
    k = a.shape[-1] if ta == "N" else a.shape[-2]
    assert np.abs(result - ref).max() <= worst_case_tolerance(result.dtype, k, scale)


def check_normwise(result, a, b, c=None, alpha=1.0, beta=0.0, ta="N", tb="N"):
    """The 3M product's bound: normwise, not componentwise."""
    ref, _ = numpy_product(a, b, c, alpha, beta, ta, tb)
    assert result.shape == ref.shape and not np.isnan(result).any()
    k = a.shape[-1] if ta == "N" else a.shape[-2]
    assert np.linalg.norm(result - ref) <= 8 * (k + 2) * np.finfo(result.dtype).eps * np.linalg.norm(ref)


@pytest.fixture
def buffers_made(monkeypatch) -> list:
    """The flags of every OpenCL buffer made from here on, in order."""
    made = []
    real = cl.Buffer

    def buffer(*args, **kwargs):
        made.append(args[1] if len(args) > 1 else kwargs.get("flags"))
        return real(*args, **kwargs)

    monkeypatch.setattr(cl, "Buffer", buffer)
    return made


@pytest.mark.parametrize("code", "sdcz")
def test_operands_at_every_offset_from_the_alignment(implementation, code):
    """Every element offset from the device's alignment an operand may start at (numpy's own
    arrays start 16 bytes past one), and a byte offset no element size divides, which is copied."""
    dev = get_device(implementation.index)
    align, dtype = alignment(dev.queue.device), np.dtype(DTYPES[code])
    assert in_host_memory(dev.queue.device) and align > dtype.itemsize
    rng = np.random.default_rng()
    m, n, k = 37, 29, 19
    for shift in [*range(0, align, dtype.itemsize), 1]:
        a = shifted(uniform((m, k), dtype, rng), shift, align)
        b = shifted(uniform((k, n), dtype, rng), (align - shift) % align, align)
        c = shifted(uniform((m, n), dtype, rng), shift, align)
        before = c.copy()
        check(gemmtune.gemm(a, b, device=implementation.index), a, b)
        result = gemmtune.gemm(a, b.T, c, alpha=0.5, beta=-1.5, trans_b=True, device=implementation.index)
        check(result, a, b.T, before, 0.5, -1.5, "N", "T")
        assert np.array_equal(c, before)   # c is read, never written


def test_operand_buffers_are_built_over_the_arrays(implementation):
    """In place, an operand's buffer is the array's own memory from the aligned address at or
    below it, with the element offset of its first element; a family that reads from offset 0
    only, or an operand no element offset reaches, gets a copy."""
    dev = get_device(implementation.index)
    align = alignment(dev.queue.device)
    x = shifted(np.arange(64, dtype=np.float32), 48, align)
    views = HostCall(dev.context, dev.queue, in_place=True, views=True)
    buffer, at = views.operand(x)
    assert buffer.get_info(cl.mem_info.FLAGS) & cl.mem_flags.USE_HOST_PTR
    assert host_address(buffer) == x.ctypes.data - 48 and at == 12
    copied = [HostCall(dev.context, dev.queue, in_place=True, views=False).operand(x),
              views.operand(shifted(np.arange(64, dtype=np.float32), 2, align)),
              HostCall(dev.context, dev.queue, in_place=False, views=True).operand(x)]
    for buffer, at in copied:
        assert not buffer.get_info(cl.mem_info.FLAGS) & cl.mem_flags.USE_HOST_PTR and at == 0
    aligned = shifted(np.arange(64, dtype=np.float32), 0, align)
    buffer, at = HostCall(dev.context, dev.queue, in_place=True, views=False).operand(aligned)
    assert host_address(buffer) == aligned.ctypes.data and at == 0


@pytest.mark.parametrize("config", [DIRECT, K5, None], ids=["direct", "k5", "default"])
def test_families_with_and_without_views_on_misaligned_operands(config):
    rng = np.random.default_rng()
    align = alignment(get_device(0).queue.device)
    for shift in (0, 4, 20):
        a = shifted(uniform((70, 33), np.float32, rng), shift, align)
        b = shifted(uniform((33, 45), np.float32, rng), shift, align)
        check(gemmtune.gemm(a, b, config=config, device=0), a, b)


def test_out_is_written_in_place_unless_it_overlaps_an_operand(implementation):
    """An aligned ``out`` is the result's buffer itself; one that is also an operand (numpy.matmul
    copes with that) is not: the product must read the operand's values from before the call."""
    dev = get_device(implementation.index)
    align = alignment(dev.queue.device)
    rng = np.random.default_rng()
    a, b = (shifted(uniform((48, 48), np.float64, rng), 0, align) for _ in range(2))
    out = shifted(np.full((48, 48), np.nan), 0, align)
    assert gemmtune.gemm(a, b, out=out, device=implementation.index) is out
    check(out, a, b)
    first, second = a.copy(), b.copy()
    assert gemmtune.gemm(a, b, out=a, device=implementation.index) is a
    check(a, first, second)
    assert gemmtune.gemm(b, b, out=b, device=implementation.index) is b
    check(b, second, second)


def test_batched_operands_in_place_with_a_shared_one(implementation):
    """numpy.matmul's stacks, one operand a single matrix shared by every problem (stride 0),
    each at an offset from the alignment."""
    dev = get_device(implementation.index)
    align = alignment(dev.queue.device)
    rng = np.random.default_rng()
    for code in "sz":
        dtype = DTYPES[code]
        a = shifted(uniform((5, 21, 13), dtype, rng), 16, align)
        b = shifted(uniform((13, 17), dtype, rng), 32, align)
        out = np.full((5, 21, 17), np.nan, dtype)
        assert gemmtune.gemm(a, b, out=out, device=implementation.index) is out
        check(out, a, b)
        c = shifted(uniform((17, 21), dtype, rng), 48, align)
        result = gemmtune.gemm(b.T, a.swapaxes(1, 2), c, beta=2.0, device=implementation.index)
        check(result, b.T, a.swapaxes(1, 2), c, 1.0, 2.0)
        assert get_precision(code).dtype == result.dtype


def test_a_device_with_memory_of_its_own_gets_copies(monkeypatch, buffers_made):
    """Where the device does not compute in the host's memory (a discrete GPU), the operands are
    copied to it and the result back: the same call, on PoCL told it has memory of its own, and
    no buffer of the call is over a host array."""
    import gemmtune.call.batched as batched
    import gemmtune.call.compute as compute

    for module in (compute, batched):
        monkeypatch.setattr(module, "in_host_memory", lambda device: False)
    rng = np.random.default_rng()
    align = alignment(get_device(0).queue.device)
    for code in "dc":
        dtype = DTYPES[code]
        a, b = shifted(uniform((33, 20), dtype, rng), 0, align), uniform((20, 17), dtype, rng)
        c = uniform((33, 17), dtype, rng)
        check(gemmtune.gemm(a, b, device=0), a, b)
        check(gemmtune.gemm(a, b, c, alpha=-0.5, beta=1.5, device=0), a, b, c, -0.5, 1.5)
        stack = uniform((4, 20, 17), dtype, rng)
        out = np.full((4, 33, 17), np.nan, dtype)
        assert gemmtune.gemm(a, stack, c, beta=2.0, out=out, device=0) is out   # read back into out itself
        check(out, a, stack, c, 1.0, 2.0)
    square = uniform((20, 20), np.complex64, rng)
    check_normwise(gemmtune.gemm(square, square, complex_algorithm="3m", device=0), square, square)
    assert buffers_made and not any(flags & cl.mem_flags.USE_HOST_PTR for flags in buffers_made)


def test_a_driver_refusing_the_deprecated_query_gets_copies():
    """CL_DEVICE_HOST_UNIFIED_MEMORY is deprecated since OpenCL 2.0: a driver that refuses it,
    or reports an alignment beyond a page, is treated as a device with memory of its own."""
    from types import SimpleNamespace

    class Refusing:
        mem_base_addr_align = 1024

        @property
        def host_unified_memory(self):
            raise cl.LogicError("clGetDeviceInfo", cl.status_code.INVALID_VALUE, "deprecated")

    assert not in_host_memory(Refusing())
    assert not in_host_memory(SimpleNamespace(host_unified_memory=1, mem_base_addr_align=8 * 2**16))
    assert in_host_memory(SimpleNamespace(host_unified_memory=1, mem_base_addr_align=1024))
    assert not in_host_memory(SimpleNamespace(host_unified_memory=0, mem_base_addr_align=1024))


HELD = 7.0   # what "uninitialised" memory holds in the tests below: finite, never a right answer


@pytest.fixture
def memory_holding_a_value(monkeypatch):
    """Every fresh aligned array of gemm's holds HELD, as reused memory would hold something."""
    import gemmtune.call.host as host

    real = host.aligned_empty

    def held(shape, dtype, align):
        x = real(shape, dtype, align)
        x.fill(HELD)
        return x

    monkeypatch.setattr(host, "aligned_empty", held)


@pytest.mark.usefixtures("memory_holding_a_value")
def test_a_fresh_result_starts_as_nan_only_where_poisoned(implementation):
    """A call's fresh result is not filled first, as numpy's is not (the fill cost a batch of small
    problems up to half its time); within ``poisoned`` it starts as NaN. The kernels write every
    element all the same: the calls below, outside ``poisoned``, in every precision, 2-D and
    batched, would keep HELD wherever they missed one."""
    from gemmtune.call.host import is_poisoned, poisoned

    dev = get_device(implementation.index)
    assert is_poisoned()   # tests/conftest.py: every test's results start as NaN
    for on in (False, True):
        with poisoned(on), HostCall(dev.context, dev.queue, True, True) as call:
            call.result((5, 3), get_precision("d"))
            assert np.isnan(call.host).all() if on else (call.host == HELD).all()
    rng = np.random.default_rng()
    with poisoned(False):
        assert not is_poisoned()
        for code in "sdcz":
            dtype = DTYPES[code]
            a, b = uniform((37, 19), dtype, rng), uniform((19, 29), dtype, rng)
            check(gemmtune.gemm(a, b, device=implementation.index), a, b)
            stack_a, stack_b = uniform((6, 21, 13), dtype, rng), uniform((6, 13, 10), dtype, rng)
            check(gemmtune.gemm(stack_a, stack_b, device=implementation.index),
                  stack_a, stack_b)
    assert is_poisoned()   # the block's setting ends with it


def test_a_device_with_memory_of_its_own_fills_its_result_only_where_poisoned(monkeypatch):
    """On the copy path the result's device buffer is filled with NaN within ``poisoned`` and left
    as it is outside."""
    import gemmtune.call.compute as compute
    from gemmtune.call.host import poisoned

    fills = []
    real = cl.enqueue_fill_buffer

    def fill(queue, buffer, pattern, offset, size, **kwargs):
        fills.append(pattern)
        return real(queue, buffer, pattern, offset, size, **kwargs)

    monkeypatch.setattr(compute, "in_host_memory", lambda device: False)
    monkeypatch.setattr("gemmtune.call.host.cl.enqueue_fill_buffer", fill)
    rng = np.random.default_rng()
    a, b = uniform((33, 20), np.float64, rng), uniform((20, 17), np.float64, rng)
    for on in (False, True):
        fills.clear()
        with poisoned(on):
            check(gemmtune.gemm(a, b, device=0), a, b)
        assert len(fills) == on and all(np.isnan(p) for p in fills)


def test_verify_config_checks_a_result_that_started_as_nan(monkeypatch):
    """``gemmtune verify`` (verify_config) poisons its result whatever its caller does, so that
    an element the configuration leaves unwritten fails the check."""
    import gemmtune.call.compute as compute
    from gemmtune.call.host import is_poisoned, poisoned

    seen = []
    real = compute.gemm

    def spy(*args, **kwargs):
        seen.append(is_poisoned())
        return real(*args, **kwargs)

    monkeypatch.setattr(compute, "gemm", spy)
    with poisoned(False):
        assert compute.verify_config(0, "s", 20, 12, 9, config=DIRECT).passed
    assert seen == [True]


@pytest.mark.parametrize("code", "cz")
def test_the_3m_product_reads_and_writes_the_arrays_in_place(implementation, code, buffers_made):
    """complex_algorithm="3m" on numpy arrays takes the same buffers: operands at element offsets
    from the alignment read where they lie, an aligned ``out`` written in place, c at beta != 0,
    and an ``out`` that is an operand still right."""
    dev = get_device(implementation.index)
    align, dtype = alignment(dev.queue.device), np.dtype(DTYPES[code])
    rng = np.random.default_rng()
    m, n, k = 23, 17, 30

    a = shifted(uniform((m, k), dtype, rng), dtype.itemsize, align)
    b = shifted(uniform((n, k), dtype, rng), 3 * dtype.itemsize % align, align)
    out = shifted(np.full((m, n), np.nan, dtype), 0, align)
    got = gemmtune.gemm(a, b, trans_b="C", out=out, complex_algorithm="3m", device=implementation.index)
    assert got is out
    check_normwise(out, a, b, tb="C")
    # a, b and the result over the arrays (the split parts and the three products are scratch)
    assert len(buffers_made) > 3 and all(flags & cl.mem_flags.USE_HOST_PTR for flags in buffers_made[:3])
    c = uniform((m, n), dtype, rng)
    check_normwise(gemmtune.gemm(a, b, c, alpha=0.5 - 1j, beta=2j, trans_b="T", complex_algorithm="3m",
                                 device=implementation.index), a, b, c, 0.5 - 1j, 2j, "N", "T")
    square = shifted(uniform((k, k), dtype, rng), 0, align)
    before = square.copy()
    assert gemmtune.gemm(square, square, out=square, complex_algorithm="3m", device=implementation.index) is square
    check_normwise(square, before, before)
