"""On a GPU: the code paths that only a GPU's OpenCL compiles (NVIDIA's cp.async and FP64
matrix instructions through inline PTX), and the direct family there, against numpy.

Deselected by default (``-m 'not gpu'`` in pyproject.toml); on a machine with a GPU OpenCL
device run ``python -m pytest -m gpu`` ($GEMMTUNE_TEST_GPU picks the device index, else the
first GPU). Each check runs on fresh random operands with C poisoned with NaN where beta is 0.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import DTYPES, uniform  # noqa: E402
from test_direct import OPS, SPREAD, check, run_direct  # noqa: E402
from test_thin import run_thin  # noqa: E402

from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.measure.verify import Reference, compare  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    from gemmtune.devices.opencl import list_devices

    found = [d for d in list_devices() if d.type == "GPU"]
    index = os.environ.get("GEMMTUNE_TEST_GPU")
    chosen = next((d for d in found if str(d.index) == index), found[0] if found else None)
    assert chosen is not None, "no GPU OpenCL device: run the gpu suite on a machine with one"
    return chosen


@pytest.fixture(scope="module")
def queue(gpu):
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device

    _, dev = open_device(gpu.index)
    ctx = cl.Context([dev])
    return cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)


@pytest.mark.parametrize("ta, tb", OPS)
def test_direct_every_op_on_the_gpu(queue, ta, tb):
    for m, n, k in ((1, 1, 1), (7, 13, 5), (65, 33, 100), (130, 3, 1000)):
        result, expected, _, _ = run_direct(queue, "s", m, n, k, ta, tb)
        check("s", result, expected)


@pytest.mark.parametrize("code", ["d", "z"])
@pytest.mark.parametrize("ta, tb", SPREAD)
def test_direct_views_on_the_gpu(queue, code, ta, tb):
    for beta in (0.0, 0.5):
        result, expected, (untouched, before), _ = run_direct(queue, code, 37, 29, 300, ta, tb, pad=(3, 1, 5),
                                                              offsets=(7, 2, 13), beta=beta)
        check(code, result, expected)
        np.testing.assert_array_equal(untouched, before)


@pytest.mark.parametrize("ta, tb", OPS)
def test_thin_every_op_on_the_gpu(queue, ta, tb):
    """Vectors both ways with K long enough for parts, a few rows, and a dot product."""
    for m, n, k in ((1, 4099, 3000), (4099, 1, 3000), (1, 1, 5000), (5, 700, 300), (700, 6, 2100)):
        result, expected, _, _ = run_thin(queue, "s", m, n, k, ta, tb)
        check("s", result, expected)


@pytest.mark.parametrize("code", ["d", "c", "z"])
@pytest.mark.parametrize("ta, tb", SPREAD)
def test_thin_views_on_the_gpu(queue, code, ta, tb):
    for shape in ((1, 777, 1500), (777, 3, 1500)):
        for beta in (0.0, 0.5):
            result, expected, (untouched, before), _ = run_thin(queue, code, *shape, ta, tb, pad=(3, 1, 5),
                                                                offsets=(7, 2, 13), beta=beta)
            check(code, result, expected)
            np.testing.assert_array_equal(untouched, before)


def _gemm(queue, gpu, config, code, m, n, k, ta="N", tb="N", beta=0.0):
    """One GemmOperation of ``config`` on fresh column-major operands, checked against numpy."""
    import pyopencl as cl

    from gemmtune.launch.operation import GemmOperation
    from gemmtune.space import load_space

    dtype, prec = DTYPES[code], get_precision(code)
    rng = np.random.default_rng([m, n, k])
    a = np.asfortranarray(uniform((m, k) if ta == "N" else (k, m), dtype, rng))
    b = np.asfortranarray(uniform((k, n) if tb == "N" else (n, k), dtype, rng))
    c0 = np.asfortranarray(uniform((m, n), dtype, rng))
    c = c0.copy(order="F") if beta else np.full((m, n), np.nan, dtype, order="F")
    alpha = 0.75 if code in "sd" else 0.5 - 0.25j
    op = GemmOperation(queue, config, load_space().family(config.kernel).source, prec, m, n, k, ta, tb)
    mf = cl.mem_flags
    bufs = [cl.Buffer(queue.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x) for x in (a, b, c)]
    op.enqueue(*bufs, alpha, beta)[-1].wait()
    cl.enqueue_copy(queue, c, bufs[2])
    outcome = compare(c, Reference.compute(prec, a, b, c0 if beta else None, alpha, beta, ta, tb), prec)
    assert outcome.passed, (config, m, n, k, ta, tb, outcome)
    return op


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
@pytest.mark.parametrize("cls", ["large", "small", "medium", "skinny_m", "skinny_n", "vector", "views"])
def test_shipped_gpu_defaults_on_the_gpu(queue, gpu, code, cls):
    """The shipped GPU defaults of every shape class: s's cp.async pipeline and stream-K, d's and
    z's FP64 matrix instructions where the device has them, the direct family for views, on
    shapes that are not tile multiples, transposed, and long enough for stream-K's pieces."""
    from gemmtune.space.defaults import default_config, shipped_default

    prec = get_precision(code)
    shape = {"large": (2000, 1000, 1500), "small": (200, 100, 300), "medium": (700, 900, 800),
             "skinny_m": (3, 900, 2000), "skinny_n": (900, 3, 2000), "vector": (1, 4096, 4096),
             "views": (200, 100, 300)}[cls]
    config = default_config(gpu, prec, shape, views=cls == "views")
    assert config == shipped_default("GPU", prec, cls) or not gpu.fp64_matrix
    for shape, ops in (((1000, 1000, 1000), ("N", "N")), ((997, 301, 509), ("T", "N")), ((64, 1500, 70), ("N", "T"))):
        _gemm(queue, gpu, config, code, *shape, *ops, beta=0.0)
    _gemm(queue, gpu, config, code, 333, 222, 111, "C" if code in "cz" else "T", "N", beta=1.5)


@pytest.mark.parametrize("code", ["d", "z"])
def test_fp64_matrix_instructions_and_their_fallback_agree(queue, gpu, code):
    """MMA 1 with the instructions (the device's build) and, forced off by a device that lacks
    them, the same tile multiplied element by element: both right."""
    from gemmtune.space.defaults import default_config

    prec = get_precision(code)
    with_mma = default_config(gpu, prec)
    without = default_config(dataclasses.replace(gpu, fp64_matrix=False), prec)
    for config in {with_mma, without}:
        _gemm(queue, gpu, config, code, 1031, 517, 263)


# The matrix-instruction variants the search may choose, each built as the device builds it:
# 4 local buffers with stream-K, z with the padding that keeps its 16-byte reads free of bank
# conflicts (PADL 2), and tiles whose local memory is above the 48 KiB the device reports.
MMA_VARIANTS = [
    ("d", dict(MWG=64, NWG=64, KWG=16, MDIMC=8, NDIMC=8, VWG=2, PIPE=7, PADL=2, MMA=1, STREAMK=2)),
    ("z", dict(MWG=64, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=1, PIPE=7, PADL=2, MMA=1)),
    ("z", dict(MWG=64, NWG=128, KWG=8, MDIMC=8, NDIMC=32, VWG=1, PIPE=6, PADL=2, MMA=1)),
    ("d", dict(MWG=128, NWG=128, KWG=16, MDIMC=16, NDIMC=16, VWG=2, PIPE=6, PADL=4, MMA=1)),
    # tiles in bands of tile rows, with and without stream-K
    ("d", dict(MWG=128, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=2, PIPE=6, PADL=4, MMA=1, STREAMK=2, BANDM=3)),
    ("z", dict(MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=16, VWG=2, PIPE=7, PADL=2, MMA=1, BANDM=5)),
    # 16 x 8 x 4 instructions, each step's fragments read while the one before multiplies
    ("d", dict(MWG=128, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=2, PIPE=6, PADL=4, MMA=2, STREAMK=2)),
    ("d", dict(MWG=64, NWG=64, KWG=16, MDIMC=8, NDIMC=8, VWG=2, PIPE=5, PADL=2, MMA=2)),
    ("z", dict(MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=16, VWG=2, PIPE=7, PADL=2, MMA=2, STREAMK=2)),
    # d in 3 buffers: three steps' fragments, four steps a slice; B through registers
    ("d", dict(MWG=64, NWG=64, KWG=16, MDIMC=8, NDIMC=8, VWG=2, PIPE=6, PADL=2, MMA=2)),
    ("d", dict(MWG=128, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VWG=2, PIPE=6, PADL=4, MMA=2, BKFAST=1)),
]


@pytest.mark.parametrize("code, given", MMA_VARIANTS, ids=["d-pipe7-streamk", "z-padl2-pipe7", "z-72k", "d-99k",
                                                           "d-band3-streamk", "z-band5", "d-ahead-streamk",
                                                           "d-ahead-k16-pipe5", "z-ahead-pipe7",
                                                           "d-three-sets-k16", "d-three-sets-bkfast1"])
def test_matrix_instruction_variants_on_the_gpu(queue, gpu, code, given):
    from gemmtune.call.compute import resolve_config

    fixed = dict(KERNEL="xgemm_rt", VLM=1, VLN=1, UNROLL=1, WARPM=0, STAGE=1, BKFAST=0)
    config = resolve_config({**fixed, **given}, gpu, get_precision(code))
    for shape, ops in (((1031, 517, 263), ("N", "N")), ((640, 704, 2048), ("T", "N")), ((65, 130, 9), ("N", "T"))):
        _gemm(queue, gpu, config, code, *shape, *ops)
    _gemm(queue, gpu, config, code, 333, 222, 111, "C" if code == "z" else "T", "N", beta=1.5)


@pytest.mark.parametrize("code, given", [
    ("d", dict(KERNEL="xgemm_rt", MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=32, VWG=2, VLM=1, VLN=1, PIPE=7,
               PADL=4, UNROLL=1, BKFAST=1, WARPM=0, STAGE=1, MMA=2, STREAMK=2, BANDM=16)),
    ("z", dict(KERNEL="xgemm_k5", TSM=16, TSN=16, TSK=16, WPTN=4, PAD=4, TRANSPOSEX=32, TRANSPOSEY=16, TRANSPOSEW=1)),
    ("s", dict(KERNEL="xgemm_k5", TSM=64, TSN=32, TSK=16, WPTN=4, PAD=2, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=1)),
])
def test_groups_of_512_run_although_the_driver_reports_256(queue, gpu, code, given):
    """NVIDIA's driver reports a work-group limit of 256 for every kernel, a one-line kernel
    too; a kernel declared for 512 work-items (its compiler fits the registers to them) runs
    right: d's matrix instructions in 16 x 32, the transpose pass in 32 x 16, k5 in 64 x 8."""
    import pyopencl as cl

    from gemmtune.call.compute import resolve_config

    config = resolve_config(given, gpu, get_precision(code))
    op = _gemm(queue, gpu, config, code, 1031, 517, 263)
    sizes = {kernel.function_name: int(np.prod(launch.local_size)) for kernel, launch, _ in op.launches}
    assert max(sizes.values()) == 512, sizes
    reported = {kernel.function_name: kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                                                 queue.device) for kernel, _, _ in op.launches}
    assert min(reported.values()) < 512, reported   # why the limit trusts the declared size there
    _gemm(queue, gpu, config, code, 640, 704, 2048, "T", "N")


def test_registers_keep_spilling_tiles_out_of_the_space(gpu):
    """A work-item of 1024 gets 64 of the H200's 65,536 registers: d's 8 x 8 accumulators (128
    registers) spilled 5-8 KB a work-item, and with three fragment sets the product came out
    wrong. The space refuses such tiles (constraint 8) where the driver gives the registers."""
    from gemmtune.call.compute import resolve_config
    from gemmtune.errors import GemmtuneError
    from gemmtune.families import XGEMM_RT

    assert gpu.fp64_matrix and gpu.registers_per_group == 65536, "this check needs an H200 (or its registers)"
    given = dict(KERNEL="xgemm_rt", MWG=256, NWG=256, KWG=8, MDIMC=32, NDIMC=32, VWG=2, VLM=1, VLN=1, PIPE=6,
                 PADL=4, UNROLL=1, BKFAST=1, WARPM=0, STAGE=1, MMA=2, STREAMK=2, BANDM=16)
    with pytest.raises(GemmtuneError, match="breaks constraint 8 \\(registers"):
        resolve_config(given, gpu, get_precision("d"))
    params = {**{k: v for k, v in given.items() if k != "KERNEL"}, "TRANSPOSEX": 16, "TRANSPOSEY": 16, "TRANSPOSEW": 1}
    assert XGEMM_RT.broken(params, gpu, get_precision("d")).number == 8
    assert XGEMM_RT.broken(params, dataclasses.replace(gpu, registers_per_group=0), get_precision("d")) is None


def helpers_round_trip(device_index, queue, config, code: str, problem) -> None:
    """A compiler builds ``config`` for ``problem`` and sends, with the product's binary, the
    binaries of the programs its plan builds apart; a trial from them verifies against numpy."""
    import pyopencl as cl

    from gemmtune.execution.messages import BuildJob, Job
    from gemmtune.execution.processes import Compilers
    from gemmtune.execution.timing_worker import _trial
    from gemmtune.families import FAMILIES
    from gemmtune.space import shipped_families
    from gemmtune.measure.timing import TimingPolicy

    prec = get_precision(code)
    source = shipped_families().family(config.kernel).source
    compilers = Compilers(str(device_index), 1, 300)
    try:
        worker = compilers.idle()
        worker.submit(BuildJob(config, source, code, problem), 300)
        assert worker.connection.poll(300)
        built = compilers.collect(worker)
    finally:
        compilers.close()
    plan = FAMILIES[config.kernel].plan(config.params, prec, problem, queue.device, queue.device.max_compute_units)
    apart = dict.fromkeys(launch.defines for launch in plan.launches if launch.defines is not None)
    assert built.status == "ok" and built.binary, built.detail
    assert [d for d, _ in built.helpers] == [*apart] and all(binary for _, binary in built.helpers)
    job = Job(config, source, code, problem.m, problem.n, problem.k, TimingPolicy(max_seconds=0.05), built.binary,
              trans_a=problem.trans_a, trans_b=problem.trans_b, helpers=built.helpers)
    outcome = _trial(cl, queue, {}, job)
    assert outcome.status == "ok" and outcome.check.passed, outcome.detail


def test_the_kernels_built_apart_go_to_the_timing_worker_as_binaries_on_the_gpu(queue, gpu):
    """On NVIDIA the binary carries a build: both preparation kernels and stream-K's fix-up
    (built apart from the product, once per what they depend on) go along with the candidate."""
    from gemmtune.call.compute import resolve_config
    from gemmtune.launch.plan import Problem

    given = dict(KERNEL="xgemm_rt", MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=16, VWG=2, VLM=1, VLN=1, UNROLL=1, WARPM=0,
                 STAGE=1, BKFAST=0, PIPE=7, PADL=2, MMA=2, STREAMK=2)
    problem = Problem(1031, 517, 263, "T", "T")   # A transposed, B copied: both kernels of pad.cl
    helpers_round_trip(gpu.index, queue, resolve_config(given, gpu, get_precision("z")), "z", problem)


@pytest.mark.parametrize("code", ["c", "z"])
@pytest.mark.parametrize("ta, tb", [("N", "N"), ("C", "T")])
def test_the_3m_product_on_the_gpu(queue, tmp_path, code, ta, tb):
    """complex_algorithm="3m" on the GPU's real families (the s and d defaults of a large and an
    odd shape), on views with offsets, against numpy normwise (3M's accuracy is normwise)."""
    import pyopencl.array as cla

    from gemmtune.call.compute import Gemm

    prec = get_precision(code)
    rng = np.random.default_rng()
    gemm = Gemm(queue, code, db=f"sqlite:///{tmp_path / 'none.db'}", complex_algorithm="3m")
    op = {"N": lambda x: x, "T": lambda x: x.T, "C": lambda x: x.conj().T}
    eps = np.finfo(np.float32 if code == "c" else np.float64).eps
    for m, n, k in ((1024, 768, 1536), (333, 517, 129)):
        a_shape, b_shape = ((m, k) if ta == "N" else (k, m)), ((k, n) if tb == "N" else (n, k))
        big = [uniform((r + 2, c + 3), prec.dtype, rng) for r, c in (a_shape, b_shape, (m, n))]
        big[2][1:1 + m, 3:3 + n] = np.nan   # beta is 0: c's view is never read
        d = [cla.to_device(queue, x) for x in big]
        a, b = d[0][1:1 + a_shape[0], 2:2 + a_shape[1]], d[1][2:2 + b_shape[0], 1:1 + b_shape[1]]
        gemm(a, b, d[2][1:1 + m, 3:3 + n], alpha=0.5 + 2j, trans_a=ta, trans_b=tb)
        wide = [x.astype(np.complex128) for x in big]
        ref = ((0.5 + 2j) * op[ta](wide[0][1:1 + a_shape[0], 2:2 + a_shape[1]])
               @ op[tb](wide[1][2:2 + b_shape[0], 1:1 + b_shape[1]]))
        got = d[2].get()
        assert np.isfinite(got[1:1 + m, 3:3 + n]).all()
        assert np.linalg.norm(got[1:1 + m, 3:3 + n] - ref) <= 8 * (k + 2) * eps * np.linalg.norm(ref)
        outside = np.ones(big[2].shape, bool)
        outside[1:1 + m, 3:3 + n] = False
        assert np.array_equal(got[outside], big[2][outside])


def _batched(queue, gpu, given: dict, code: str, count: int, m: int, n: int, k: int, ta: str, tb: str) -> None:
    """``count`` problems through one batched plan of ``given``: gemm on stacks (b shared, beta with
    a broadcast c), then Gemm on a list of views (the table) into a NaN-poisoned pool, every problem
    against numpy."""
    import pyopencl.array as cla

    from gemmtune.call import compute

    dtype, prec = DTYPES[code], get_precision(code)
    rng = np.random.default_rng([count, m, n, k])
    alpha = 0.75 if code in "sd" else 0.5 - 0.25j
    a = uniform((count, m, k) if ta == "N" else (count, k, m), dtype, rng)
    b = uniform((k, n) if tb == "N" else (n, k), dtype, rng)
    c = uniform((1, n), dtype, rng)
    got = compute.gemm(a, b, c, alpha=alpha, beta=-1.5, trans_a=ta, trans_b=tb, config=given, device=gpu.index)
    for z in range(count):
        ref = Reference.compute(prec, a[z], b, np.broadcast_to(c, (m, n)), alpha, -1.5, ta, tb)
        outcome = compare(got[z], ref, prec)
        assert outcome.passed, (given, z, outcome)
    da, db = cla.to_device(queue, a), cla.to_device(queue, b)
    pool = cla.to_device(queue, np.full((count * (m + 1), n + 2), np.nan, dtype))
    outs = [pool[z * (m + 1):z * (m + 1) + m, 1:1 + n] for z in range(count)][::-1]
    compute.Gemm(queue, code, config=given)([da[z] for z in range(count)], db, outs, alpha=alpha, trans_a=ta,
                                            trans_b=tb)
    after = pool.get()
    for z in range(count):
        r = (count - 1 - z) * (m + 1)
        outcome = compare(after[r:r + m, 1:1 + n], Reference.compute(prec, a[z], b, None, alpha, 0.0, ta, tb), prec)
        assert outcome.passed, (given, z, outcome)
    written = np.zeros(after.shape, bool)
    for z in range(count):
        written[z * (m + 1):z * (m + 1) + m, 1:1 + n] = True
    assert np.isnan(after[~written]).all()


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_batched_gpu_defaults_on_the_gpu(queue, gpu, code):
    """The shipped GPU defaults of xgemm_rt (s's cp.async pipeline and stream-K, d's and z's FP64
    matrix instructions where the device has them) as batches: the batch along dimension 2, or
    with stream-K in the tile numbers; tile remainders, a batch's last round cut along K."""
    from gemmtune.space.defaults import default_config

    prec = get_precision(code)
    for shape in ((2000, 1000, 1500), (200, 100, 300)):
        config = default_config(gpu, prec, shape)
        if config.kernel != "xgemm_rt":
            continue
        given = {"KERNEL": config.kernel, **config.params}
        _batched(queue, gpu, given, code, 7, 129, 65, 300, "N", "N")
        _batched(queue, gpu, given, code, 50, 64, 64, 64, "T", "N")
        _batched(queue, gpu, given, code, 3, 333, 222, 111, "N", "C" if code in "cz" else "T")


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
@pytest.mark.parametrize("shape, count, ops", [((16, 16, 16), 700, "NN"), ((13, 15, 9), 300, "TC"),
                                               ((32, 32, 32), 500, "NN"), ((29, 31, 17), 300, "TN"),
                                               ((64, 64, 64), 200, "NT"), ((47, 64, 33), 100, "TT"),
                                               ((96, 96, 96), 60, "NT"), ((48, 48, 48), 90, "NC"),
                                               ((128, 128, 128), 40, "NN"), ((200, 100, 300), 7, "NC"),
                                               ((20, 20, 20), 600, "TN"), ((40, 37, 45), 600, "NC"),
                                               ((48, 24, 40), 600, "NT"), ((48, 48, 48), 600, "NN"),
                                               ((600, 520, 500), 3, "NT")])
def test_the_batch_classes_defaults_on_the_gpu(queue, gpu, code, shape, count, ops):
    """The shipped entries of batch_micro, batch_tiny, batch_small, batch_medium and batch_large (or the
    classes they fall back to), whole tiles and remainders, and those a batch's fit takes instead
    of its class's (96³: batch_tiny's, 48³: batch_micro's), as the batched call takes them; in
    batches of 600 (over 4 a compute unit on a GPU of up to 150), the direct tiles of whole
    problems (``whole_tile``)."""
    from gemmtune.space.defaults import default_config

    config = default_config(gpu, get_precision(code), shape, batch=count)
    ta, tb = ops[0], ops[1] if code in "cz" or ops[1] != "C" else "T"
    _batched(queue, gpu, {"KERNEL": config.kernel, **config.params}, code, count, *shape, ta, tb)


@pytest.mark.parametrize("code, given", MMA_VARIANTS[:3] + MMA_VARIANTS[6:9],
                         ids=["d-pipe7-streamk", "z-padl2-pipe7", "z-72k", "d-ahead-streamk", "d-ahead-k16-pipe5",
                              "z-ahead-pipe7"])
def test_batched_matrix_instructions_on_the_gpu(queue, gpu, code, given):
    from gemmtune.call.compute import resolve_config

    fixed = dict(KERNEL="xgemm_rt", VLM=1, VLN=1, UNROLL=1, WARPM=0, STAGE=1, BKFAST=0)
    config = resolve_config({**fixed, **given}, gpu, get_precision(code))
    _batched(queue, gpu, {"KERNEL": config.kernel, **config.params}, code, 9, 200, 130, 96, "T", "N")
