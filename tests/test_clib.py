"""gemmtune export --format c: the generated C library, compiled with the system's C compiler
against the ICD loader and driven through ctypes with pyopencl's context, queue and buffers;
its plans compared with the families' Python plans; its selection with best_config's."""

from __future__ import annotations

import ctypes as C
import dataclasses
import itertools
import os
import random
import shutil
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest
from click.testing import CliRunner

from gemmtune.export import clib
from gemmtune.export.clib.binding import COL_MAJOR, OPS, ROW_MAJOR, Facts, Plan, load, offsets, scalar, scalars
from gemmtune.cli import cli
from gemmtune.db.store import Store
from gemmtune.space.defaults import default_config
from gemmtune.devices.opencl import open_device
from gemmtune.families import FAMILIES
from gemmtune.devices.info import DeviceInfo
from gemmtune.launch.operation import build_options, defines
from gemmtune.launch.plan import CALL_ARGUMENTS, Problem
from gemmtune.precision import PRECISIONS
from gemmtune.space import Config, make_config, shipped_families
from gemmtune.db.tuned import best_config, clear_cache
from gemmtune.measure.verify import Reference, compare, random_matrix

CC = shutil.which("cc") or "gcc"   # .ci/run installs gcc, cmake and the OpenCL headers and loader
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
ROW, COL = ROW_MAJOR, COL_MAJOR
HERE = Path(__file__).parent


def compile_library(directory: Path) -> Path:
    out = directory / "libgemmtune.so"
    subprocess.run([CC, *WARNINGS, "-O2", "-fPIC", "-shared", str(directory / "gemmtune.c"), "-o", str(out),
                    "-lOpenCL", "-lm"], check=True, capture_output=True, text=True)
    return out


# ---------------------------------------------------------------- what the library is made from

def cfg(kernel: str, **params) -> Config:
    return make_config(shipped_families(), kernel, params)


RT = dict(MWG=8, NWG=8, KWG=4, MDIMC=4, NDIMC=4, VWG=1, VLM=1, VLN=1, PIPE=0, PADL=0, UNROLL=1, BKFAST=0, WARPM=0,
          STAGE=1, MMA=0, BANDM=0, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=1)
# Per family (column-major problems): a configuration with every pass its plan can have (packing,
# padding and transposes, K cut into parts and summed, stream-K's pieces and fixup)
CASES = [
    ("s", (37, 29, 41, "N", "T"), cfg("xgemm_cpu", VW=8, MV=1, NR=4, KU=2, NB=1, KC=0, WGS=1, ORDER=1, PACKA=1,
                                       PACKB=1)),
    ("c", (13, 11, 9, "C", "N"), cfg("xgemm_cpu", VW=8, MV=1, NR=2, KU=1, NB=1, KC=0, WGS=2, ORDER=0, PACKA=1,
                                      PACKB=0)),
    ("z", (17, 13, 40, "T", "C"), cfg("xgemm_direct", MWG=8, NWG=8, KWG=4, MDIMC=4, NDIMC=4, PADL=0, KSPLIT=3)),
    ("d", (3, 67, 131, "N", "T"), cfg("xgemm_thin", WGS=16, WPT=2, KU=2, RB=2, KSPLIT=4)),
    ("d", (71, 5, 97, "C", "N"), cfg("xgemm_thin", WGS=8, WPT=1, KU=1, RB=1, KSPLIT=1)),
    *(("c", (19, 21, 17, ta, tb), cfg("xgemm_k5", TSM=8, TSN=8, TSK=4, WPTN=2, PAD=1, TRANSPOSEX=8, TRANSPOSEY=8,
                                        TRANSPOSEW=1)) for ta in "NTC" for tb in "NTC"),
    ("s", (23, 19, 29, "T", "N"), cfg("xgemm_rt", **{**RT, "BKFAST": 1})),
]
STREAM_K = cfg("xgemm_rt", **{**RT, "STREAMK": 1})
DEVICES = (0, 1)
BROKEN = ((41, 43, 47, "N", "N"), cfg("xgemm_direct", MWG=16, NWG=16, MDIMC=8, NDIMC=8))


def stream_k_case(info: DeviceInfo) -> tuple:
    """A d problem whose plan on this device cuts its last tiles into pieces summed by xgemm_fixup."""
    for n in range(9, 200, 8):
        problem = Problem(21, n, 37, "N", "C")
        plan = FAMILIES["xgemm_rt"].plan(STREAM_K.params, PRECISIONS["d"], problem, info, info.compute_units)
        if any(launch.kernel == "xgemm_fixup" for launch in plan.launches):
            return "d", (21, n, 37, "N", "C"), STREAM_K
    raise AssertionError("no problem splits on this device")


# Intel's runtime has the cases in s and c alone (its d and z come from the device's defaults)
SINGLE = {"s": "s", "d": "s", "c": "c", "z": "c"}


def cases(device: int, info: DeviceInfo) -> list[tuple]:
    """The tuned cases of a device: CASES and its stream-K problem, on device 1 in s and c."""
    found = [*CASES, stream_k_case(info)]
    return found if device == 0 else [(SINGLE[prec], problem, config) for prec, problem, config in found]


class Opened:
    def __init__(self, index: int):
        self.info, self.device = open_device(index)
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)


def add_row(store: Store, info: DeviceInfo, prec: str, problem, config: Config, gflops: float) -> None:
    m, n, k, ta, tb = problem
    store.add(study="clib", trial=0, device=info.key, device_name=info.name, precision=prec, m=m, n=n, k=k,
              trans_a=ta, trans_b=tb, kernel=config.kernel, params=dict(config.params), status="ok", gflops=gflops,
              time_ms=1.0, kernel_time_ms=0.9, ci_low_ms=0.95, ci_high_ms=1.05, min_ms=0.9, repeats=3,
              samples_ms=[1.0, 1.0, 1.0], compile_s=0.1, trial_s=0.5, baseline=False)


@pytest.fixture(scope="module")
def opened():
    return {index: Opened(index) for index in DEVICES}


@pytest.fixture(scope="module")
def built(tmp_path_factory, opened):
    """The results database (the cases tuned on both devices, both described),
    the library exported from it by the command line, and the library compiled."""
    where = tmp_path_factory.mktemp("clib")
    db = f"sqlite:///{where / 'results.db'}"
    store = Store(db)
    try:
        zero = opened[0].info
        for index in DEVICES:
            info = opened[index].info
            store.save_device(info)
            for i, (prec, problem, config) in enumerate(cases(index, info)):
                assert FAMILIES[config.kernel].broken(config.params, info, PRECISIONS[prec]) is None, config
                add_row(store, info, prec, problem, config, 100.0 + i)
        # a worse row of the first problem, which is not the one chosen
        add_row(store, zero, CASES[0][0], CASES[0][1], cfg("xgemm_cpu"), 1.0)
        # a problem whose best row breaks a constraint here (a work-group of 8192): its next best counts
        add_row(store, zero, "s", BROKEN[0], cfg("xgemm_direct", MWG=64, NWG=128, MDIMC=64, NDIMC=128), 1000.0)
        add_row(store, zero, "s", BROKEN[0], BROKEN[1], 10.0)
    finally:
        store.close()
    out = where / "lib"
    result = CliRunner().invoke(cli, ["export", "--db", db, "--format", "c", "-o", str(out)])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return db, out, load(compile_library(out))


@pytest.fixture(scope="module")
def handles(built, opened):
    _, _, lib = built
    made = {}
    for index, dev in opened.items():
        handle = C.c_void_p()
        assert lib.gemmtune_create(dev.context.int_ptr, dev.device.int_ptr, C.byref(handle)) == 0
        made[index] = handle
    yield made
    for handle in made.values():
        assert lib.gemmtune_release(handle) == 0


# ---------------------------------------------------------------- calls

class Operand:
    """A matrix (its numpy value) stored in a device buffer as BLAS stores it: at ``offset``, its
    rows (column-major) or columns (row-major) ``ld`` apart, the rest of the buffer random."""

    def __init__(self, ctx, prec, value: np.ndarray, layout: int, offset: int, extra: int, rng):
        rows, cols = value.shape
        self.ld = max(1, rows if layout == COL else cols) + extra   # BLAS: at least 1
        self.offset, self.layout, self.shape = offset, layout, value.shape
        lines = cols if layout == COL else rows
        self.host = random_matrix(PRECISIONS[prec], (offset + self.ld * max(lines, 1),), rng)
        self.view()[...] = value
        self.buffer = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=self.host)

    def view(self, host=None):
        host = self.host if host is None else host
        rows, cols = self.shape
        lines, length = (cols, rows) if self.layout == COL else (rows, cols)
        block = host[self.offset:self.offset + self.ld * lines].reshape(lines, self.ld)[:, :length]
        return block.T if self.layout == COL else block


def run_case(lib, handle, dev: Opened, prec: str, problem, layout: int, offsets=(0, 0, 0), extra=(0, 0, 0),
             alpha=1.5 - 0.5j, beta=0.0, seed=0):
    """One call for the column-major ``problem``, in ``layout`` (row-major: the same problem as
    C^T = op(B)^T op(A)^T); the result checked against numpy and nothing outside C's view written."""
    m, n, k, ta, tb = problem
    if layout == ROW:   # the row-major call whose column-major problem this is
        m, n, ta, tb = n, m, tb, ta
    p = PRECISIONS[prec]
    alpha, beta = (alpha, beta) if p.is_complex else (alpha.real, beta.real)
    rng = np.random.default_rng(seed)
    a = random_matrix(p, (m, k) if ta == "N" else (k, m), rng)
    b = random_matrix(p, (k, n) if tb == "N" else (n, k), rng)
    c = random_matrix(p, (m, n), rng) if beta != 0 else np.full((m, n), p.nan)
    ops = [Operand(dev.context, prec, x, layout, off, ex, rng) for x, off, ex in zip((a, b, c), offsets, extra)]
    before = ops[2].host.copy()
    event = C.c_void_p()
    status = getattr(lib, f"gemmtune_{prec}gemm")(
        handle, dev.queue.int_ptr, layout, OPS[ta], OPS[tb], m, n, k, scalar(prec, alpha),
        ops[0].buffer.int_ptr, ops[0].offset, ops[0].ld, ops[1].buffer.int_ptr, ops[1].offset, ops[1].ld,
        scalar(prec, beta), ops[2].buffer.int_ptr, ops[2].offset, ops[2].ld, C.byref(event))
    assert status == 0, (lib.gemmtune_status_message(status), lib.gemmtune_last_error(handle))
    # the call's last event (released with the Python object) ends it, on an out-of-order queue too
    cl.Event.from_int_ptr(event.value, retain=False).wait()
    after = np.empty_like(ops[2].host)
    cl.enqueue_copy(dev.queue, after, ops[2].buffer)
    dev.queue.finish()
    outside = np.ones(after.shape, bool)
    ops[2].view(outside)[...] = False
    np.testing.assert_array_equal(after[outside], before[outside])
    check = compare(ops[2].view(after), Reference.compute(p, a, b, c, alpha, beta, ta, tb), p)
    assert check.passed, (prec, problem, layout, check)


def plan_of(lib, handle, prec: str, problem, views=False, batch=1) -> tuple[str, dict, str]:
    m, n, k, ta, tb = problem
    plan = Plan()
    lda, ldb = (m if ta == "N" else k), (k if tb == "N" else n)
    strides = offsets([lda * (k if ta == "N" else m), ldb * (n if tb == "N" else k), m * n])
    status = lib.gemmtune_plan_batched(handle, prec.encode(), OPS[ta], OPS[tb], m, n, k, lda, ldb, m, int(views),
                                       batch, strides, 0, C.byref(plan))
    assert status == 0, lib.gemmtune_status_message(status)
    try:
        params = {plan.param_names[i].decode(): plan.param_values[i] for i in range(plan.nparams)}
        return plan.family.decode(), params, plan.source.decode()
    finally:
        lib.gemmtune_plan_release(C.byref(plan))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CASES) + 1))
def test_every_family_computes_what_numpy_does(built, handles, opened, device, case):
    """Each tuned case, selected as tuned, in both layouts; at views where the family reads them,
    leading dimensions beyond the rows everywhere, beta 0 (C poisoned) and not."""
    _, _, lib = built
    dev = opened[device]
    prec, problem, config = cases(device, dev.info)[case]
    assert plan_of(lib, handles[device], prec, problem) == (config.kernel, dict(config.params), "tuned")
    views = FAMILIES[config.kernel].takes_views
    offsets = (3, 5, 7) if views else (0, 0, 0)
    run_case(lib, handles[device], dev, prec, problem, COL, offsets, (2, 0, 3), seed=case)
    run_case(lib, handles[device], dev, prec, problem, ROW, offsets, (0, 4, 1), beta=0.5 + 2j, seed=case)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prec, problem", [("s", (1, 37, 23, "N", "N")), ("d", (29, 1, 31, "T", "C")),
                                           ("c", (31, 7, 1, "C", "T")), ("z", (5, 3, 11, "N", "C"))])
def test_untuned_problems_take_the_nearest_or_the_default(built, handles, opened, device, prec, problem):
    """best_config's choice for problems not tuned (the nearest, or the default where nothing of the
    precision is), M or N of 1
    and K of 1 among them, with views and without."""
    db, _, lib = built
    dev = opened[device]
    clear_cache()
    expected = best_config(*problem[:3], prec, device=dev.info, db=db, trans_a=problem[3], trans_b=problem[4])
    assert plan_of(lib, handles[device], prec, problem) == (expected.kernel, expected.params, expected.source)
    views = expected.config if FAMILIES[expected.kernel].takes_views else default_config(
        dev.info, PRECISIONS[prec], problem[:3], views=True)
    assert plan_of(lib, handles[device], prec, problem, views=True)[:2] == (views.kernel, views.params)
    run_case(lib, handles[device], dev, prec, problem, ROW, (1, 2, 3), (1, 1, 1), beta=-1 + 0.5j, seed=device)
    run_case(lib, handles[device], dev, prec, problem, COL, seed=device + 1)


def test_an_out_of_order_queue_runs_the_launches_in_order(built, handles, opened):
    """Plans of several launches (packing, K's parts and their sum, padding with stream-K's fixup)
    on an out-of-order queue: each kernel waits for the one before it."""
    _, _, lib = built
    dev = opened[0]
    queue = cl.CommandQueue(dev.context, properties=cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
    unordered = SimpleNamespace(context=dev.context, queue=queue)
    for prec, problem, config in (CASES[0], CASES[2], stream_k_case(dev.info)):
        assert len(FAMILIES[config.kernel].plan(config.params, PRECISIONS[prec], Problem(*problem), dev.info,
                                                dev.info.compute_units).launches) >= 2
        run_case(lib, handles[0], unordered, prec, problem, COL, seed=3)


def test_a_best_row_that_breaks_a_constraint_gives_way_to_the_next(built, handles, opened):
    db, _, lib = built
    clear_cache()
    expected = best_config(*BROKEN[0][:3], "s", device=opened[0].info, db=db)
    assert (expected.config, expected.source) == (BROKEN[1], "tuned")
    assert plan_of(lib, handles[0], "s", BROKEN[0]) == (BROKEN[1].kernel, BROKEN[1].params, "tuned")


@pytest.mark.parametrize("device", DEVICES)
def test_k_zero_scales_c_and_m_or_n_zero_does_nothing(built, handles, opened, device):
    _, _, lib = built
    dev = opened[device]
    for prec in "sz":
        run_case(lib, handles[device], dev, prec, (5, 7, 0, "N", "T"), COL, (2, 0, 1), (0, 0, 2))   # zeros
        run_case(lib, handles[device], dev, prec, (5, 7, 0, "C", "N"), ROW, (0, 0, 3), beta=2 - 1j)
    c = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, 64)
    event = C.c_void_p()
    assert lib.gemmtune_sgemm(handles[device], dev.queue.int_ptr, COL, OPS["N"], OPS["N"], 0, 3, 2, 1.0, None, 0, 1,
                              None, 0, 2, 0.0, c.int_ptr, 0, 1, C.byref(event)) == 0
    assert event.value   # a marker, for a caller that waits on it
    cl.Event.from_int_ptr(event.value, retain=False).wait()


def test_bad_arguments_are_statuses(built, handles, opened):
    _, _, lib = built
    dev, handle = opened[0], handles[0]
    buf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, 4 * 100)

    def call(h=handle, layout=COL, ta=OPS["N"], tb=OPS["N"], m=4, n=4, k=4, a=buf, lda=4, b=buf, ldb=4, c=buf,
             ldc=4, offset=0):
        return lib.gemmtune_sgemm(h, dev.queue.int_ptr, layout, ta, tb, m, n, k, 1.0, a and a.int_ptr, offset, lda,
                                  b and b.int_ptr, 0, ldb, 0.0, c and c.int_ptr, 0, ldc, None)

    expected = {-1: call(h=None), -2: call(layout=7), -3: call(ta=0), -4: call(m=-1), -5: call(lda=3),
                -6: call(a=None)}
    assert expected == {status: status for status in expected}
    assert call(ldc=3, layout=ROW) == -5 and call(k=-2) == -4 and call(offset=-1) == -4
    assert lib.gemmtune_last_error(handle) == lib.gemmtune_status_message(-4)   # the last failure's
    assert call(k=30, ldb=30) == -6                        # B's 30 x 4 run past the buffer's 100 elements
    assert call(m=10, n=11, lda=10, ldc=10) == -6          # C runs past its buffer
    assert call(m=1 << 20, n=1 << 12, lda=1 << 20, ldc=1 << 20, k=1) == -7   # past what an int indexes
    assert call(m=1 << 62, lda=1 << 62, ldc=1 << 62) == -7 and call(offset=1 << 40) == -7   # no overflow on the way
    messages = [lib.gemmtune_status_message(status) for status in range(-14, 1)]
    assert len(set(messages)) == 15 and lib.gemmtune_status_message(-15) == b"unknown status" not in messages
    out = C.c_void_p()
    assert lib.gemmtune_create(None, None, C.byref(out)) == -1 and not out.value
    assert lib.gemmtune_create(dev.context.int_ptr, dev.device.int_ptr, None) == -13
    assert lib.gemmtune_release(None) == -1
    assert lib.gemmtune_last_error(None) == b"no handle"


# ---------------------------------------------------------------- batches

def run_batched(lib, handle, dev: Opened, prec: str, problem, layout: int, count: int = 3, shared: str = "",
                array: bool = False, seed: int = 0) -> None:
    """``count`` problems of the column-major ``problem`` in one call, in ``layout``: strided
    (``shared``: a or b stored once, stride 0; problems 2 elements apart, which stay unwritten),
    or the array form (problems in a shuffled order, two values of alpha and beta alternating, so
    two launches). Each problem checked against numpy, C's gaps unchanged."""
    m, n, k, ta, tb = problem
    if layout == ROW:
        m, n, ta, tb = n, m, tb, ta
    p = PRECISIONS[prec]
    rng = np.random.default_rng(seed)
    shapes = {"a": (m, k) if ta == "N" else (k, m), "b": (k, n) if tb == "N" else (n, k), "c": (m, n)}
    lds = {x: max(1, shape[0] if layout == COL else shape[1]) for x, shape in shapes.items()}   # BLAS: at least 1
    alphas = [(1.5 - 0.5j, -0.75 + 2j)[z % 2 if array else 0] for z in range(count)]
    betas = [(0.0, 0.5 + 1j)[z % 2] if array else 0.0 for z in range(count)]
    if not p.is_complex:
        alphas, betas = [a.real for a in alphas], [b.real for b in betas]
    copies = {x: 1 if x == shared else count for x in "abc"}
    order = rng.permutation(count) if array else np.arange(count)
    flat, starts, values = {}, {}, {}
    for x, (rows, cols) in shapes.items():
        size = rows * cols + 2
        flat[x] = random_matrix(p, (1 + copies[x] * size,), rng)
        starts[x] = [1 + (0 if copies[x] == 1 else int(order[z]) * size) for z in range(count)]
        values[x] = []
        for z in range(count):
            value = random_matrix(p, (rows, cols), rng) if z < copies[x] else values[x][0]
            if x == "c" and betas[z] == 0:
                value = np.full((rows, cols), p.nan)
            flat[x][starts[x][z]:starts[x][z] + rows * cols] = (value.T if layout == COL else value).ravel()
            values[x].append(value)
    bufs = {x: cl.Buffer(dev.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=flat[x])
            for x in "abc"}
    event = C.c_void_p()
    common = (handle, dev.queue.int_ptr, layout, OPS[ta], OPS[tb], m, n, k)
    if array:
        status = getattr(lib, f"gemmtune_{prec}gemm_batched")(
            *common, scalars(prec, alphas), bufs["a"].int_ptr, offsets(starts["a"]), lds["a"], bufs["b"].int_ptr,
            offsets(starts["b"]), lds["b"], scalars(prec, betas), bufs["c"].int_ptr, offsets(starts["c"]), lds["c"],
            count, C.byref(event))
    else:
        strides = {x: starts[x][1] - starts[x][0] if count > 1 else 0 for x in "abc"}
        status = getattr(lib, f"gemmtune_{prec}gemm_strided_batched")(
            *common, scalar(prec, alphas[0]), bufs["a"].int_ptr, 1, lds["a"], strides["a"], bufs["b"].int_ptr, 1,
            lds["b"], strides["b"], scalar(prec, betas[0]), bufs["c"].int_ptr, 1, lds["c"], strides["c"], count,
            C.byref(event))
    assert status == 0, (lib.gemmtune_status_message(status), lib.gemmtune_last_error(handle))
    cl.Event.from_int_ptr(event.value, retain=False).wait()
    dev.queue.finish()
    after = np.empty_like(flat["c"])
    cl.enqueue_copy(dev.queue, after, bufs["c"])
    written = np.zeros(after.shape, bool)
    for z in range(count):
        start, (rows, cols) = starts["c"][z], shapes["c"]
        got = after[start:start + rows * cols].reshape((cols, rows) if layout == COL else (rows, cols))
        written[start:start + rows * cols] = True
        c = None if betas[z] == 0 else values["c"][z]
        ref = Reference.compute(p, values["a"][z], values["b"][z], c, alphas[z], betas[z], ta, tb)
        check = compare(got.T if layout == COL else got, ref, p)
        assert check.passed, (prec, problem, layout, z, check)
    np.testing.assert_array_equal(after[~written], flat["c"][~written])


@pytest.mark.parametrize("device", DEVICES)
def test_batches_of_every_family_that_takes_them(built, handles, opened, device):
    """The tuned cases of the families that take batches (packed CPU kernels, the direct kernel,
    xgemm_rt's passes and stream-K's fix-up), strided with a shared a or b and in the array form,
    row- and column-major: each batch the family of its problem's tuned row."""
    _, _, lib = built
    dev = opened[device]
    found = cases(device, dev.info)
    chosen = [found[0], found[2], found[-2], found[-1]]   # cpu, direct, rt, rt with stream-K
    assert [config.kernel for _, _, config in chosen] == ["xgemm_cpu", "xgemm_direct", "xgemm_rt", "xgemm_rt"]
    for i, (prec, problem, config) in enumerate(chosen):
        assert plan_of(lib, handles[device], prec, problem)[:2] == (config.kernel, dict(config.params))
        run_batched(lib, handles[device], dev, prec, problem, COL, count=4, shared="ab"[i % 2], seed=i)
        run_batched(lib, handles[device], dev, prec, problem, ROW, count=3, array=True, seed=i)


def test_batches_of_one_none_and_of_an_untuned_shape(built, handles, opened):
    """A batch of one (the problem at its offsets), of none (nothing to do), K = 0 (each C scaled),
    and a shape no row of a batching family is near: the views default (a family that batches)."""
    _, _, lib = built
    dev = opened[0]
    run_batched(lib, handles[0], dev, "s", (6, 5, 4, "T", "N"), COL, count=1)
    run_batched(lib, handles[0], dev, "z", (6, 5, 4, "N", "C"), ROW, count=1, array=True)
    run_batched(lib, handles[0], dev, "d", (3, 67, 131, "N", "T"), COL, count=3)   # thin's tuned shape
    run_batched(lib, handles[0], dev, "c", (5, 4, 0, "N", "N"), ROW, count=3, array=True)
    event = C.c_void_p()
    for count in (0, 5):
        assert lib.gemmtune_sgemm_strided_batched(handles[0], dev.queue.int_ptr, COL, OPS["N"], OPS["N"], 4, 4 * (
            count == 0), 4, 1.0, None, 0, 4, 16, None, 0, 4, 16, 0.0, None, 0, 4, 16, count, C.byref(event)) == 0
        cl.Event.from_int_ptr(event.value, retain=False).wait()   # a marker


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_takes_the_configuration_python_gives_it(built, handles, opened, device):
    """batched.batch_config's choice: the nearest tuned problem of a family that takes batches
    (thin's and k5's tuned shapes give way), else the default of the batch's class."""
    from gemmtune.call.batched import batch_config

    db, _, lib = built
    dev = opened[device]
    clear_cache()
    for prec, problem in (("s", (37, 29, 41, "N", "T")), ("d", (3, 67, 131, "N", "T")), ("c", (19, 21, 17, "T", "C")),
                          ("z", (16, 16, 16, "N", "N")), ("d", (300, 200, 100, "T", "N"))):
        if PRECISIONS[prec].needs_double and not dev.info.double_precision:
            continue
        for batch in (2, 1000):
            expected = batch_config(None, dev.info, PRECISIONS[prec], problem[:3], problem[3:], db, batch)
            family, params, _ = plan_of(lib, handles[device], prec, problem, batch=batch)
            assert (family, params) == (expected.kernel, dict(expected.params)), (device, prec, problem, batch)
            assert FAMILIES[family].takes_batch


def test_a_batch_takes_the_tile_that_fits_its_problems_as_python_does(opened, tmp_path):
    """gt_batch_fit is space/defaults.py's batch_fit: PoCL's device, described to the export as a
    GPU (its key and name kept, so that the library takes it for that device), gets the GPU's
    batch defaults, and a batch whose class's tile covers its problems badly a smaller class's,
    as default_config gives them. Its one tuned row is of a family that takes no batch."""
    dev = opened[0]
    info = dataclasses.replace(dev.info, type="GPU", local_mem_bytes=226 << 10, max_work_group_size=1024,
                               fp64_matrix=True)
    db = f"sqlite:///{tmp_path / 'gpu.db'}"
    store = Store(db)
    try:
        store.save_device(info)
        add_row(store, info, "s", (64, 64, 64, "N", "N"), cfg("xgemm_k5"), 100.0)
    finally:
        store.close()
    result = CliRunner().invoke(cli, ["export", "--db", db, "--format", "c", "-o", str(tmp_path / "lib")])
    assert result.exit_code == 0, result.output
    lib = load(compile_library(tmp_path / "lib"))
    handle = C.c_void_p()
    assert lib.gemmtune_create(dev.context.int_ptr, dev.device.int_ptr, C.byref(handle)) == 0
    try:
        fitted, widened = 0, {50: 0, 3: 0}
        for prec in "sdcz":
            for (m, n, k), batch in itertools.product(
                    ((16, 16, 16), (48, 48, 48), (96, 96, 96), (128, 128, 128), (300, 200, 150), (8, 8, 512),
                     (1000, 20, 20), (20, 1000, 20), (20, 20, 20), (40, 40, 40), (48, 24, 40), (12, 48, 9),
                     (600, 520, 500)), (50, 3)):
                expected = default_config(info, PRECISIONS[prec], (m, n, k), batch=batch)
                family, params, source = plan_of(lib, handle, prec, (m, n, k, "N", "N"), batch=batch)
                assert (family, params, source) == (expected.kernel, dict(expected.params), "default"), (prec, m, n, batch)
                fitted += family == "xgemm_direct" or params.get("MWG") == 32
                widened[batch] += params.get("MWG") in (24, 48) or params.get("NWG") in (24, 48)
        # all but 128³, 300 x 200 x 150 and 600 x 520 x 500 (batch_large) to smaller tiles than their class's; in batches of 50 (25 a
        # compute unit) 48³, 20³, 40³, 48 x 24 and 12 x 48 to tiles of their whole problems, in
        # batches of 3 (below 4 a compute unit) none
        assert fitted == 4 * 2 * 10 and widened == {50: 4 * 5, 3: 0}
    finally:
        assert lib.gemmtune_release(handle) == 0


def test_bad_batches_are_statuses(built, handles, opened):
    _, _, lib = built
    dev, handle = opened[0], handles[0]
    buf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, 4 * 100)

    def strided(count=3, strides=(16, 16, 16), offset=0):
        return lib.gemmtune_sgemm_strided_batched(handle, dev.queue.int_ptr, COL, OPS["N"], OPS["N"], 4, 4, 4, 1.0,
                                                  buf.int_ptr, offset, 4, strides[0], buf.int_ptr, 0, 4, strides[1],
                                                  0.0, buf.int_ptr, 0, 4, strides[2], count, None)

    assert strided(strides=(16, 16, 0)) == -14          # every problem's C the same
    assert strided(count=-1) == -14 and strided(strides=(-16, 16, 16)) == -14
    assert lib.gemmtune_last_error(handle) == lib.gemmtune_status_message(-14)
    assert strided(count=7) == -6                       # the last problem's 4 x 4 past the buffer's 100 elements
    assert strided(count=2, strides=(1 << 31, 0, 16)) == -7
    good = offsets([0, 16])
    ones = scalars("s", [1.0, 1.0])

    def array(a=good, c=good, alphas=ones, count=2):
        return lib.gemmtune_sgemm_batched(handle, dev.queue.int_ptr, COL, OPS["N"], OPS["N"], 4, 4, 4, alphas,
                                          buf.int_ptr, a, 4, buf.int_ptr, good, 4, ones, buf.int_ptr, c, 4, count,
                                          None)

    assert array(a=None) == -14 and array(alphas=None) == -14 and array(count=-2) == -14
    assert array(c=offsets([0, -1])) == -4 and array(c=offsets([0, 90])) == -6 and array(a=offsets([1 << 31, 0])) == -7


# ---------------------------------------------------------------- the plans, against Python's

def fake(name: str, device_type: str, units: int, group: int, items: tuple) -> DeviceInfo:
    return DeviceInfo(index=0, platform_index=0, device_index=0, platform="Fake", name=name, vendor="Fake",
                      type=device_type, opencl_version="OpenCL 3.0", driver_version="1", compute_units=units,
                      max_clock_mhz=1000, global_mem_bytes=1 << 36, local_mem_bytes=1 << 16,
                      max_work_group_size=group, max_work_item_sizes=items, double_precision=True)


FAKES = (fake("many units", "GPU", 132, 1024, (1024, 1024, 64)), fake("host", "CPU", 2, 4096, (4096, 4096, 4096)),
         fake("small groups", "OTHER", 3, 64, (64, 64, 64)))


def python_plan(config: Config, prec, problem: Problem, dev: DeviceInfo) -> dict:
    plan = FAMILIES[config.kernel].plan(config.params, prec, problem, dev, dev.compute_units)
    return {"options": " ".join(build_options(defines(config, prec, problem))),
            "scratch": [(s.name, 0 if s.table is not None else s.nbytes,
                         [list(row) for row in s.table] if s.table is not None else None) for s in plan.scratch],
            "launches": [(l.kernel, l.gemm, list(l.global_size), list(l.local_size), list(l.args),
                          " ".join(f"{k}={v}" for k, v in l.defines or ())) for l in plan.launches]}


def c_plan(lib, config: Config, prec, problem: Problem, dev: DeviceInfo) -> dict | int:
    names = list(config.params)
    facts = Facts(dev.max_work_group_size, (C.c_size_t * 3)(*dev.max_work_item_sizes[:3]), dev.compute_units)
    plan = Plan()
    status = lib.gemmtune_plan_config_batched(config.kernel.encode(), len(names), (C.c_char_p * len(names))(
        *(n.encode() for n in names)), (C.c_int * len(names))(*config.params.values()), C.byref(facts),
        prec.code.encode(), OPS[problem.trans_a], OPS[problem.trans_b], problem.m, problem.n, problem.k, problem.lda,
        problem.ldb, problem.ldc, int(problem.views), problem.batch, offsets(problem.strides), int(problem.table),
        C.byref(plan))
    if status:
        return status
    try:
        scratch = [plan.scratch[i] for i in range(plan.nscratch)]
        names = [s.name.decode() for s in scratch]

        def arg(a):
            return a.value if a.kind == 0 else names[a.value] if a.kind == 1 else CALL_ARGUMENTS[a.value]

        launches = [plan.launches[i] for i in range(plan.nlaunches)]
        return {"options": plan.options.decode(),
                "scratch": [(s.name.decode(), 0 if s.table else s.nbytes,
                             [s.table[r * s.cols:(r + 1) * s.cols] for r in range(s.rows)] if s.table else None)
                            for s in scratch],
                "launches": [(l.kernel.decode(), bool(l.gemm), list(l.global_size[:l.dims]),
                              list(l.local_size[:l.dims]), [arg(a) for a in l.args[:l.nargs]], l.defines.decode())
                             for l in launches]}
    finally:
        lib.gemmtune_plan_release(C.byref(plan))


def problems(rng: random.Random, count: int):
    for _ in range(count):
        big = rng.random() < 0.3
        m, n, k = (rng.choice((rng.randint(1, 40), rng.randint(100, 3000) if big else rng.randint(41, 300)))
                   for _ in range(3))
        ta, tb = rng.choice("NTC"), rng.choice("NTC")
        lda = (m if ta == "N" else k) + rng.choice((0, 0, rng.randint(1, 9)))
        ldb = (k if tb == "N" else n) + rng.choice((0, 0, rng.randint(1, 9)))
        yield Problem(m, n, k, ta, tb, lda, ldb, m + rng.choice((0, 0, 5)), rng.random() < 0.3)


def batched(rng: random.Random, problem: Problem) -> Problem:
    """``problem`` as a batch: strided (a or b shared at stride 0, or gaps between the problems),
    or the array form's table."""
    count = rng.choice((2, 3, 17, 40))
    if rng.random() < 0.3:
        return dataclasses.replace(problem, views=True, batch=count, table=True)
    spans = (problem.lda * (problem.k if problem.trans_a == "N" else problem.m),
             problem.ldb * (problem.n if problem.trans_b == "N" else problem.k), problem.ldc * problem.n)
    strides = tuple(rng.choice((0, span, span + rng.randint(1, 5))) if i < 2 else span + rng.choice((0, 3))
                    for i, span in enumerate(spans))
    return dataclasses.replace(problem, batch=count, strides=strides)


def drawn(fs, dev: DeviceInfo, prec, rng: random.Random, count: int = 10, draws: int = 1000) -> list[Config]:
    """Up to ``count`` valid configurations of a family, drawn from its space's values (counting
    the valid set of a family that has few on a device takes seconds)."""
    found = []
    for _ in range(draws):
        config = Config.of(fs.family.name, {name: rng.choice(values) for name, values in fs.values.items()})
        if FAMILIES[config.kernel].broken(config.params, dev, prec) is None:
            found.append(config)
            if len(found) == count:
                break
    return found


def test_plans_are_pythons(built):
    """Every family's plan from C (kernels, sizes, arguments, build defines, scratch buffers and
    tables) is the one Family.plan makes, over valid configurations drawn on three devices (one
    with 132 compute units, where stream-K cuts tiles) and problems of every op, odd shapes,
    leading dimensions and views, each also as a batch where the family takes batches."""
    from gemmtune.families.cpu import whole_problems

    *_, lib = built
    rng = random.Random(7)
    seen: dict[str, int] = {}
    seen_batched: set[tuple[str, str]] = set()
    whole = 0   # batches whose work-items compute whole problems (families/cpu.py)
    space = shipped_families()
    for dev in FAKES:
        for prec in PRECISIONS.values():
            for fs in space.families:
                for config in drawn(fs, dev, prec, rng):
                    family = FAMILIES[config.kernel]
                    for problem in problems(rng, 6):
                        for each in (problem, *((batched(rng, problem),) if family.takes_batch else ())):
                            ours = c_plan(lib, config, prec, each, dev)
                            if each.views and not (family.takes_views or family.takes_batch):
                                assert ours == -9   # xgemm_k5 reads one problem's operands from offset 0 only
                                with pytest.raises(ValueError):
                                    family.plan(config.params, prec, each, dev, dev.compute_units)
                                continue
                            assert ours == python_plan(config, prec, each, dev), (dev.name, prec.code, config, each)
                            for launch in ours["launches"]:
                                seen[launch[0]] = seen.get(launch[0], 0) + 1
                                if each.batched:
                                    seen_batched.add((config.kernel, launch[0]))
                            whole += config.kernel == "xgemm_cpu" and whole_problems(each, dev.compute_units,
                                                                                     config.params["WGS"])
    # every kernel a plan can enqueue was compared
    assert set(seen) >= {"xgemm", "xgemm_pack_a", "xgemm_pack_b", "xgemm_direct", "xgemm_direct_sum", "xgemm_thin",
                         "xgemm_thin_sum", "pad_copy", "pad_transpose", "xgemm_fixup"}, seen
    assert seen["xgemm_fixup"] >= 20, seen
    assert whole >= 5, whole
    assert seen_batched >= {("xgemm_cpu", "xgemm"), ("xgemm_cpu", "xgemm_pack_a"), ("xgemm_cpu", "xgemm_pack_b"),
                            ("xgemm_direct", "xgemm_direct"), ("xgemm_rt", "xgemm"), ("xgemm_rt", "pad_copy"),
                            ("xgemm_rt", "pad_transpose"), ("xgemm_rt", "xgemm_fixup")}, seen_batched


def test_plan_config_refuses_what_is_not_a_configuration(built):
    *_, lib = built
    dev = FAKES[0]
    good = cfg("xgemm_direct")
    assert c_plan(lib, Config.of("xgemm_nope", {}), PRECISIONS["s"], Problem(4, 4, 4), dev) == -9
    assert c_plan(lib, Config.of("xgemm_direct", {**good.params, "NOPE": 1}), PRECISIONS["s"], Problem(4, 4, 4), dev) == -9
    assert c_plan(lib, good, PRECISIONS["s"], Problem(4, 4, 4, lda=3), dev) == -5
    for name in ("MDIMC", "KWG", "MWG"):   # divisors: 0 is out of their range, as is 1 << 30
        for value in (0, 1 << 30):
            broken = Config.of("xgemm_direct", {**good.params, name: value})
            assert c_plan(lib, broken, PRECISIONS["s"], Problem(4, 4, 4), dev) == -9
    assert c_plan(lib, good, PRECISIONS["s"], Problem(1 << 31, 4, 4), dev) == -7


# ---------------------------------------------------------------- building it as a user does

EXAMPLE = HERE / "data" / "clib"


def run_example(program: Path, info: DeviceInfo) -> None:
    result = subprocess.run([str(program), str(info.platform_index), str(info.device_index)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.startswith(f"{info.name}: sgemm 67x45x31, largest error")


def test_the_example_builds_with_cmake_and_with_the_makefile_rule(built, opened, tmp_path):
    """docs/c.md's ways: the CMake file beside the user's (a static library), the export built
    on its own with its example, and the plain Makefile rule."""
    _, out, _ = built
    build = tmp_path / "build"
    for step in (["cmake", "-S", str(EXAMPLE), "-B", str(build), f"-DGEMMTUNE_DIR={out}",
                  "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror"],
                 ["cmake", "--build", str(build)]):
        result = subprocess.run(step, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (result.stdout, result.stderr)
    assert (build / "gemmtune" / "libgemmtune.a").exists()
    run_example(build / "example", opened[0].info)
    # the export built on its own, as the README's From C checks it, with its example
    alone = tmp_path / "alone"
    for step in (["cmake", "-S", str(out), "-B", str(alone), "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror"],
                 ["cmake", "--build", str(alone)]):
        result = subprocess.run(step, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (result.stdout, result.stderr)
    run_example(alone / "gemmtune_example", opened[0].info)
    # docs/c.md's Makefile, with the example for app.c and the export where it says gemmtune_c
    docs = (HERE.parent / "docs" / "c.md").read_text(encoding="utf-8")
    makefile = docs.split("```make\n", 1)[1].split("```", 1)[0]
    (tmp_path / "app.c").write_text((out / "example.c").read_text())
    (tmp_path / "Makefile").write_text(makefile.replace("gemmtune_c", str(out)))
    result = subprocess.run(["make", "-C", str(tmp_path), "app", f"CFLAGS={' '.join(WARNINGS)}"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, (result.stdout, result.stderr)
    run_example(tmp_path / "app", opened[0].info)


HOSTILE = 'Evil "GPU" \\ ??/ ??= */ /* \n#error x\r\t\u00e9\U0001F600'


def test_the_docs_example_compiles(built, tmp_path):
    _, out, _ = built
    text = (HERE.parent / "docs" / "c.md").read_text(encoding="utf-8")
    example = tmp_path / "multiply.c"
    example.write_text(text.split("```c\n", 1)[1].split("```", 1)[0])
    subprocess.run([CC, *WARNINGS, f"-I{out}", "-c", str(example), "-o", str(tmp_path / "multiply.o")], check=True,
                   timeout=120)


def test_names_from_the_database_cannot_break_the_c_file(tmp_path):
    """A device name (as a database may hold it) with quotes, backslashes, trigraphs, comment
    delimiters, a newline and UTF-8 compiles cleanly and reaches C byte for byte, so that the
    device of that name finds its configurations; the database URL lands in a comment."""
    config = cfg("xgemm_direct")
    entries = [{"device": f"P | {HOSTILE} | 1", "device_name": HOSTILE, "precision": "s", "m": 8, "n": 8, "k": 8,
                "ops": "NN", "config": config}]
    clib.write(clib.generate(entries, {}, "sqlite:////tmp/x */ #error ??/\n.db"), tmp_path)
    probe = tmp_path / "probe.c"
    probe.write_text('#include "gemmtune.c"\n#include <stdio.h>\nint main(void) {\n'
                     '  const unsigned char *s = (const unsigned char *)gt_devices[0].name;\n'
                     '  while (*s) printf("%02x", *s++);\n  return GT_NDEVICES == 1 ? 0 : 1;\n}\n')
    subprocess.run([CC, *WARNINGS, "-Wno-unused-function", f"-I{tmp_path}", str(probe), "-o", str(tmp_path / "probe"),
                    "-lOpenCL", "-lm"], check=True, timeout=300)
    out = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True).stdout
    assert bytes.fromhex(out) == HOSTILE.encode("utf-8")


def test_export_c_refuses_what_is_not_a_directory(tmp_path):
    db = f"sqlite:///{tmp_path / 'none.db'}"
    a_file = tmp_path / "file"
    a_file.write_text("kept\n")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    for output, message in (("-", "give -o DIR"), (str(a_file), "is not a directory"),
                            (str(a_file / "below"), "cannot write"), (str(link), "symbolic link")):
        result = CliRunner().invoke(cli, ["export", "--db", db, "--format", "c", "-o", output])
        assert result.exit_code == 2 and result.stdout == "", result.output
        error = result.stderr.strip()
        assert error.startswith("Error: ") and message in error and "\n" not in error, error
    assert a_file.read_text() == "kept\n" and not (tmp_path / "gemmtune.c").exists()
    # nothing tuned: the shipped defaults alone, said on stderr
    result = CliRunner().invoke(cli, ["export", "--db", db, "--format", "c", "-o", str(tmp_path / "lib")])
    assert result.exit_code == 0 and "shipped defaults only" in result.stderr
    assert sorted(p.name for p in (tmp_path / "lib").iterdir()) == sorted(clib.FILES)


def test_the_launches_in_the_docs_are_the_plans():
    """docs/kernels.md's launches are Family.plan's (write_launch_docs rewrites them)."""
    text = (HERE.parent / "docs" / "kernels.md").read_text(encoding="utf-8")
    assert clib.launch_docs() in text, ("docs/kernels.md's launches differ from the plans: run "
                                        "python -c \"import gemmtune.export.clib as c; c.write_launch_docs('docs/kernels.md')\"")


def test_a_device_the_export_does_not_hold_gets_its_types_defaults(opened, tmp_path):
    """Exported from a database without results: PoCL's CPU takes the defaults of the CPU-256
    table (which fit any CPU's registers) by shape class, views included, and computes right."""
    from gemmtune.space.defaults import class_entry, shape_class, shipped_defaults

    result = CliRunner().invoke(cli, ["export", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--format", "c", "-o",
                                      str(tmp_path)])
    assert result.exit_code == 0, result.output
    lib = load(compile_library(tmp_path))
    dev = opened[0]
    handle = C.c_void_p()
    assert lib.gemmtune_create(dev.context.int_ptr, dev.device.int_ptr, C.byref(handle)) == 0
    try:
        for prec, problem in (("s", (1, 1, 1, "N", "N")), ("d", (300, 300, 300, "T", "N")),
                              ("c", (2000, 2000, 2000, "N", "C")), ("z", (1, 2, 2048, "C", "T"))):
            found = shipped_defaults(clib.TYPE_TABLES["CPU"], PRECISIONS[prec])
            expected = class_entry(found, shape_class(*problem[:3]))
            assert plan_of(lib, handle, prec, problem) == (expected.kernel, expected.params, "default")
            views = expected if FAMILIES[expected.kernel].takes_views else class_entry(found, "views")
            assert plan_of(lib, handle, prec, problem, views=True)[:2] == (views.kernel, views.params)
        run_case(lib, handle, dev, "c", (9, 7, 5, "C", "N"), ROW, (1, 0, 2), (0, 1, 0), beta=1j)
    finally:
        assert lib.gemmtune_release(handle) == 0


def test_the_benchmark_prints_both_device_times_and_the_host_cost(tmp_path):
    """tools/clib_bench.py on something small (its figures are measurements: their form and
    arithmetic are checked, not their size)."""
    done = subprocess.run([sys.executable, str(HERE.parent / "tools" / "clib_bench.py"), "--size", "32", "--repeats",
                           "3", "--calls", "50", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--batch", "20"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = {name.strip(): float(value) for name, value in
               re.findall(r"^(device time, C call|device time, Gemm|C / Gemm|trivial launch|beyond its enqueues)"
                          r"\s+(-?[\d.]+)", done.stdout, re.M)}
    assert len(figures) == 5 and figures["device time, Gemm"] > 0, done.stdout
    assert figures["C / Gemm"] == pytest.approx(figures["device time, C call"] / figures["device time, Gemm"],
                                                rel=0.05)
    batch = {name.strip(): float(value) for name, value in
             re.findall(r"^(batch of 20, one call|batch of 20, single calls|single calls / batch)\s+([\d.]+)",
                        done.stdout, re.M)}
    assert len(batch) == 3 and batch["batch of 20, one call"] > 0, done.stdout
    assert batch["single calls / batch"] == pytest.approx(
        batch["batch of 20, single calls"] / batch["batch of 20, one call"], rel=0.05)


@pytest.mark.gpu
@pytest.mark.parametrize("prec", list(PRECISIONS))
def test_the_gpu_defaults_on_a_gpu(prec, tmp_path):
    """On a GPU (``python -m pytest -m gpu``; $GEMMTUNE_TEST_GPU picks it): the shipped GPU
    defaults (xgemm_rt with stream-K, FP64 matrix instructions in d where the GPU has them) from
    an export without results, on problems whose last tiles stream-K cuts, every op, both layouts,
    and at views (which take the views' default)."""
    from gemmtune.devices.opencl import list_devices

    gpus = [d for d in list_devices() if d.type == "GPU"]
    chosen = next((d for d in gpus if str(d.index) == os.environ.get("GEMMTUNE_TEST_GPU")), gpus[0] if gpus else None)
    assert chosen is not None, "no GPU OpenCL device: run the gpu suite on a machine with one"
    dev = Opened(chosen.index)
    result = CliRunner().invoke(cli, ["export", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--format", "c", "-o",
                                      str(tmp_path)])
    assert result.exit_code == 0, result.output
    lib = load(compile_library(tmp_path))
    handle = C.c_void_p()
    assert lib.gemmtune_create(dev.context.int_ptr, dev.device.int_ptr, C.byref(handle)) == 0
    try:
        split = []
        for size in range(520, 2100, 40):
            problem = (size, size + 24, 300, "N", "N")
            plan = Plan()
            assert lib.gemmtune_plan(handle, prec.encode(), OPS["N"], OPS["N"], *problem[:3], size, 300, size, 0,
                                     C.byref(plan)) == 0
            kernels = [plan.launches[i].kernel for i in range(plan.nlaunches)]
            lib.gemmtune_plan_release(C.byref(plan))
            if b"xgemm_fixup" in kernels:
                split.append(problem)
                if len(split) == 2:
                    break
        assert split, "no problem up to 2100 has stream-K's fixup with the GPU default"
        for i, (ta, tb) in enumerate(("NN", "TC", "CT")):
            m, n, k, _, _ = split[i % len(split)]
            run_case(lib, handle, dev, prec, (m, n, k, ta, tb), (COL, ROW)[i % 2], seed=i)
        run_case(lib, handle, dev, prec, (97, 65, 33, "C", "N"), ROW, (5, 3, 1), (2, 0, 1), beta=0.5 - 1j)
    finally:
        assert lib.gemmtune_release(handle) == 0
