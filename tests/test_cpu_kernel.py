"""kernels/xgemm_cpu.cl on the default OpenCL device (PoCL's CPU device in a plain install),
checked against numpy in float64 / complex128.

Each (configuration, precision) is one build; the configurations are few and each covers
several features (vector widths 1/4/8, packed and unpacked operands, both layouts of A and of
B, several work-items per work-group, K unrolled with a remainder, K in chunks, several column
blocks per work-item, both grid orders). Every build runs odd shapes, leading dimensions larger than the rows,
element offsets, C poisoned with NaN when beta is 0, and checks that nothing outside the M x N
block of C is written.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

from gemmtune.devices.opencl import open_device

KERNELS = Path(__file__).resolve().parent.parent / "kernels"

CONFIGS = {
    # K in chunks of 4 (17 = 4 + 4 + 4 + 4 + 1), two column blocks per work-item
    "vw4-unpacked": dict(VW=4, MV=2, NR=3, KU=2, NB=2, KC=4, WGS=1, ORDER=0, TRANSA=0, TRANSB=0, PACKA=0, PACKB=0),
    "vw8-packed-transposed": dict(VW=8, MV=1, NR=4, KU=4, NB=3, KC=8, WGS=1, ORDER=1, TRANSA=1, TRANSB=1, PACKA=1, PACKB=1),
    "vw1-wgs2": dict(VW=1, MV=3, NR=2, KU=1, NB=1, KC=0, WGS=2, ORDER=1, TRANSA=0, TRANSB=1, PACKA=1, PACKB=0),
}
PRECISIONS = {"s": (np.float32, 32), "d": (np.float64, 64), "c": (np.complex64, 3232), "z": (np.complex128, 6464)}
CASES = [("vw4-unpacked", "s"), ("vw4-unpacked", "d"), ("vw8-packed-transposed", "s"),
         ("vw8-packed-transposed", "d"), ("vw1-wgs2", "s"), ("vw1-wgs2", "z"),
         # complex in planar vectors, packing and product in one program (an exported header's)
         ("vw8-packed-transposed", "c"), ("vw8-packed-transposed", "z")]

# (m, n, k); 70 x 37 leaves a ragged block at both edges for every configuration, k = 0 leaves
# beta * C, and 1 x 1 x 1 is smaller than any block
SHAPES = [(1, 1, 1), (7, 13, 5), (65, 33, 17), (70, 37, 9), (5, 3, 0)]
SCALARS = [(1.0, 0.0), (-1.5, 0.75)]  # beta 0: C holds NaN, which must be ignored
PAD, OFFSET = 3, 5                    # ld = rows + PAD; each matrix starts OFFSET elements in
PACK_WG = 16                          # the packing kernels' work-group size (the kernel's PACK_WG)


@pytest.fixture(scope="module")
def device():
    _, dev = open_device(None)
    ctx = cl.Context([dev])
    return ctx, cl.CommandQueue(ctx)


def build(ctx, params, prec):
    options = ["-cl-mad-enable", f"-I{KERNELS}", f"-DPRECISION={prec}", *(f"-D{k}={v}" for k, v in params.items())]
    return cl.Program(ctx, (KERNELS / "xgemm_cpu.cl").read_text()).build(options=options)


def random_matrix(rng, dtype, rows, cols):
    """Column-major rows x cols with leading dimension rows + PAD, as a (cols, ld) array."""
    x = rng.uniform(-1, 1, (cols, rows + PAD))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.uniform(-1, 1, (cols, rows + PAD))
    return x.astype(dtype)


def logical(x, rows, cols):
    wide = np.complex128 if np.iscomplexobj(x) else np.float64
    return x.T[:rows, :cols].astype(wide)


def device_buffer(ctx, x):
    flat = np.concatenate([np.full(OFFSET, np.nan, x.dtype), x.ravel()])
    return cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=flat)


def run(ctx, queue, kernels, p, dtype, m, n, k, alpha, beta, rng):
    mr = p["MV"] * p["VW"]
    a = random_matrix(rng, dtype, *((k, m) if p["TRANSA"] else (m, k)))
    b = random_matrix(rng, dtype, *((n, k) if p["TRANSB"] else (k, n)))
    c = random_matrix(rng, dtype, m, n) if beta != 0 else np.full((n, m + PAD), np.nan, dtype)
    lda, ldb, ldc = a.shape[1], b.shape[1], c.shape[1]
    a_buf, b_buf, c_buf = device_buffer(ctx, a), device_buffer(ctx, b), device_buffer(ctx, c)
    i32 = np.int32
    packed = []
    for flag, name, rows, block, src, ld in (("PACKA", "xgemm_pack_a", m, mr, a_buf, lda),
                                             ("PACKB", "xgemm_pack_b", n, p["NR"], b_buf, ldb)):
        if p[flag]:
            blocks = -(-max(rows, 1) // block)
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, max(1, blocks * block * k) * np.dtype(dtype).itemsize)
            if k > 0:
                kernels[name](queue, (-(-k // PACK_WG) * PACK_WG, blocks), (PACK_WG, 1), i32(rows), i32(k), src, i32(OFFSET), i32(ld), buf)
            packed.append(buf)
    cols, rows, wgs = -(-max(n, 1) // (p["NR"] * p["NB"])), -(-max(m, 1) // mr), p["WGS"]
    gsize = (-(-rows // wgs) * wgs, cols) if p["ORDER"] else (-(-cols // wgs) * wgs, rows)
    kernels["xgemm"](queue, gsize, (p["WGS"], 1), i32(m), i32(n), i32(k), dtype(alpha), dtype(beta),
                  a_buf, i32(OFFSET), i32(lda), b_buf, i32(OFFSET), i32(ldb), c_buf, i32(OFFSET), i32(ldc), *packed)
    out = np.empty(OFFSET + c.size, dtype)
    cl.enqueue_copy(queue, out, c_buf)
    queue.finish()
    op_a = logical(a, k, m).T if p["TRANSA"] else logical(a, m, k)
    op_b = logical(b, n, k).T if p["TRANSB"] else logical(b, k, n)
    want = alpha * (op_a @ op_b) + (beta * logical(c, m, n) if beta != 0 else 0)
    return out, c, want


@pytest.mark.parametrize("config,code", CASES, ids=[f"{c}-{p}" for c, p in CASES])
def test_xgemm_cpu_matches_numpy(device, config, code):
    ctx, queue = device
    dtype, prec = PRECISIONS[code]
    params = CONFIGS[config]
    program = build(ctx, params, prec)
    kernels = {k.function_name: k for k in program.all_kernels()}
    rng = np.random.default_rng(25)
    eps = np.finfo(dtype).eps
    for m, n, k in SHAPES:
        for alpha, beta in SCALARS:
            out, c_in, want = run(ctx, queue, kernels, params, dtype, m, n, k, alpha, beta, rng)
            where = f"{m}x{n}x{k} alpha={alpha} beta={beta}"
            assert np.isnan(out[:OFFSET]).all(), f"{where}: wrote before C"
            body = out[OFFSET:].reshape(c_in.shape)
            got = logical(body, m, n)
            # entries of A and B are at most 1 in size (sqrt 2 complex): each of the k products
            # and the final scaling round once, and complex products round twice more
            bound = 4 * eps * (k * abs(alpha) * (2 if np.iscomplexobj(got) else 1) + abs(beta) + 1)
            assert np.isfinite(got).all(), f"{where}: NaN or inf in C"
            err = np.abs(got - want).max()
            assert err <= bound, f"{where}: error {err:.3g} > {bound:.3g}"
            margin = body[:, m:]
            assert (np.isnan(margin).all() if beta == 0 else np.array_equal(margin, c_in[:, m:])), \
                f"{where}: wrote rows between M and ldc"


# The widest vectors of each precision (512 bits: 16 floats, 8 doubles), A packed and read in
# place in both layouts: each way the product loads, stores and passes vectors.
WIDE = [(32, dict(VW=16, PACKA=0, TRANSA=0)), (32, dict(VW=16, PACKA=0, TRANSA=1)),
        (64, dict(VW=8, PACKA=1, TRANSA=0)), (3232, dict(VW=16, PACKA=1, TRANSA=1)),
        (6464, dict(VW=8, PACKA=1, TRANSA=0))]
BUILD_TWICE = """
import sys, warnings
import pyopencl as cl
from gemmtune.devices.opencl import open_device
warnings.simplefilter("ignore")
ctx = cl.Context([open_device(None)[1]])
source = open(sys.argv[1]).read()
for prec, params in {wide!r}:
    params = dict(MV=2, NR=4, KU=2, NB=1, KC=64, WGS=1, ORDER=0, TRANSB=0, PACKB=1, **params)
    options = ["-cl-mad-enable", "-I" + sys.argv[2], f"-DPRECISION={{prec}}", *(f"-D{{k}}={{v}}" for k, v in params.items())]
    program = cl.Program(ctx, source).build(options=options)
    print(prec, params["VW"], sorted(k.function_name for k in program.all_kernels()))
"""


def test_wide_vectors_load_from_the_kernel_cache(tmp_path):
    """Each build twice, in two processes sharing a fresh PoCL kernel cache: the second loads the
    first's binary. PoCL 3.0 compiling for a CPU without AVX-512 loaded a program that passed
    512-bit vectors to library calls (vload16, vstore8) with no kernels in it, so that every
    later search and gemm call on that machine failed to find xgemm."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path / "pocl"), "POCL_KERNEL_CACHE": "1"}
    command = [sys.executable, "-c", BUILD_TWICE.format(wide=WIDE), str(KERNELS / "xgemm_cpu.cl"), str(KERNELS)]
    first, second = (subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
                     for _ in range(2))
    want = "\n".join(f"{prec} {p['VW']} {sorted(['xgemm', 'xgemm_pack_b'] + ['xgemm_pack_a'] * p['PACKA'])}"
                     for prec, p in WIDE)
    assert first.strip() == want
    assert second.strip() == want


RUN_WIDE = """
import numpy as np, gemmtune
from gemmtune.devices.opencl import open_device
a = np.ones((64, 64), np.float32)
config = dict(KERNEL="xgemm_cpu", VW=16, MV=2, NR=4, KU=1, NB=1, KC=0, WGS=1, ORDER=0, PACKA=1, PACKB=0)
assert (gemmtune.gemm(a, a, device=0, config=config) == 64).all()
print(open_device(0)[1].name)
"""
# LLVM's names of x86 processors with AVX-512, as PoCL's device name carries them (pthread-NAME)
AVX512_TARGETS = re.compile(r"avx512|cascadelake|cooperlake|cannonlake|icelake|tigerlake|rocketlake|sapphirerapids|"
                            r"emeraldrapids|graniterapids|znver4|znver5")


def test_wide_vectors_stay_512_bits_wide_where_the_target_has_them(tmp_path):
    """PoCL's machine code of an s product of 16-float vectors multiplies and adds in 512-bit
    registers (zmm) where its target has AVX-512, and never where it has not. Without the
    kernel's inlined function of the vector type, LLVM split every such operation into two
    256-bit ones on skylake-avx512, the target PoCL picks for AMD's Zen 4 and 5."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path / "pocl"), "POCL_KERNEL_CACHE": "1"}
    name = subprocess.run([sys.executable, "-c", RUN_WIDE], env=env, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    (binary,) = (tmp_path / "pocl").rglob("xgemm.so")
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)], capture_output=True, text=True,
                          check=True).stdout
    fmas = re.findall(r"vfmadd\w*ps\s.*%([xyz])mm", code)
    assert fmas, code[:2000]
    if AVX512_TARGETS.search(name):
        assert fmas.count("z") >= 0.9 * len(fmas), (name, fmas.count("z"), len(fmas))
    else:
        assert "z" not in fmas, name
