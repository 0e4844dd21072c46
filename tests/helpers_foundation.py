"""Shared helpers of the tests: hand-made devices and spaces, numpy references, SQL reads.

The constraint rules here are written again from the issue's text, on purpose independently of
gemmtune.families, so that the tests compare the library against the specification rather than
against itself.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from pathlib import Path

import numpy as np

from gemmtune.devices.info import DeviceInfo

REPO = Path(__file__).resolve().parents[1]

# Bytes per element, as the issue states them for constraint 4 (s, d, c, z).
BYTES = {"s": 4, "d": 8, "c": 8, "z": 16}
DTYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
PARAMS = ("TSM", "TSN", "TSK", "WPTN", "PAD", "TRANSPOSEX", "TRANSPOSEY", "TRANSPOSEW")

# Four configurations, all valid on PoCL, differing in tile shape (TSM != TSN included).
TINY_SPACE = """
[xgemm_k5]
TSM = [16, 32]
TSN = [16, 32]
TSK = [16]
WPTN = [2]
PAD = [1]
TRANSPOSEX = [8]
TRANSPOSEY = [8]
"""

# 32 configurations (tiles, K-slices, work per item, padding): room for a sampler to choose.
SMALL_SPACE = """
[xgemm_k5]
TSM = [16, 32]
TSN = [16, 32]
TSK = [8, 16]
WPTN = [1, 2]
PAD = [0, 1]
TRANSPOSEX = [8]
TRANSPOSEY = [8]
"""


def make_device(**changes) -> DeviceInfo:
    """A hand-made device; by default GPU-like (48 KiB local memory, 1024 work-items)."""
    fields = dict(
        index=0, platform_index=0, device_index=0, platform="Test platform", name="test device",
        vendor="Test", type="GPU", opencl_version="OpenCL 3.0", driver_version="1.0",
        compute_units=8, max_clock_mhz=1000, global_mem_bytes=8 << 30, local_mem_bytes=48 * 1024,
        max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64), double_precision=True,
    )
    fields.update(changes)
    return DeviceInfo(**fields)


GPU_LIKE = make_device()
POCL_LIKE = make_device(type="CPU", name="pocl-like", local_mem_bytes=512 * 1024,
                        max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096))
NO_DOUBLES = make_device(name="no-fp64", double_precision=False)


def rule_checks(p: dict, dev: DeviceInfo, code: str) -> dict[int, bool]:
    """Constraints 1-5 of the issue, each True when ``p`` obeys it on ``dev`` in precision ``code``.

    RTSN is TSN // WPTN, as the kernel's integer macro computes it; it only matters for
    configurations that already break constraint 1.
    """
    nbytes = BYTES[code]
    tsm, tsn, tsk, wptn, pad = (p[k] for k in ("TSM", "TSN", "TSK", "WPTN", "PAD"))
    tx, ty, tw = p["TRANSPOSEX"], p["TRANSPOSEY"], p.get("TRANSPOSEW", 1)
    rtsn = tsn // wptn
    wis = dev.max_work_item_sizes
    wgs = tsm * rtsn
    return {
        1: tsn % wptn == 0,
        2: tsm <= wis[0] and rtsn <= wis[1] and wgs <= dev.max_work_group_size,
        3: wgs > 0 and (tsk * tsm) % wgs == 0 and (tsk * tsn) % wgs == 0,
        4: (tsk * tsm + tsn * (tsk + pad)) * nbytes <= dev.local_mem_bytes,
        # pad.cl's tile is TRANSPOSEY * TRANSPOSEW rows of TRANSPOSEX + 1 elements (the +1 avoids
        # bank conflicts); each work-item moves TRANSPOSEW of them
        5: tx * ty <= dev.max_work_group_size and ty * tw * (tx + 1) * nbytes <= dev.local_mem_bytes,
    }


def broken_rules(p: dict, dev: DeviceInfo, code: str) -> list[int]:
    return [n for n, ok in rule_checks(p, dev, code).items() if not ok]


def product(values: dict[str, list[int]]) -> list[dict[str, int]]:
    names = list(values)
    return [dict(zip(names, combo)) for combo in itertools.product(*values.values())]


def toml_space(table: dict[str, list[int]], family: str = "xgemm_k5") -> str:
    lines = [f"[{family}]"] + [f"{k} = [{', '.join(map(str, v))}]" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def cl_defaults() -> dict[str, tuple[int, str]]:
    """``#ifndef NAME`` / ``#define NAME value // comment`` blocks of the shipped .cl files,
    read line by line (a different method from gemmtune.families' regex)."""
    found = {}
    for name in ("common.cl", "pad.cl", "xgemm_k5.cl"):
        lines = (REPO / "kernels" / name).read_text().splitlines()
        for first, second, third in zip(lines, lines[1:], lines[2:]):
            words = first.split()
            if len(words) == 2 and words[0] == "#ifndef" and third.strip() == "#endif":
                code, _, comment = second.partition("//")
                define = code.split()
                if len(define) == 3 and define[:2] == ["#define", words[1]] and re.fullmatch(r"-?\d+", define[2]):
                    found[words[1]] = (int(define[2]), comment.strip())
    return found


def uniform(shape, dtype, rng: np.random.Generator) -> np.ndarray:
    """Uniform in [0.25, 1) with a random sign (real and imaginary parts): never zero."""
    def part():
        return rng.uniform(0.25, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)

    x = part()
    if np.dtype(dtype).kind == "c":
        x = x + 1j * part()
    return x.astype(dtype)


def op(x: np.ndarray, flag: str) -> np.ndarray:
    return {"N": x, "T": x.T, "C": x.conj().T}[flag]


def numpy_product(a, b, c, alpha, beta, ta, tb):
    """alpha * op(a) @ op(b) + beta * c in complex128 / float64, and each element's term scale."""
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    opa, opb = op(a.astype(wide), ta), op(b.astype(wide), tb)
    value = alpha * (opa @ opb)
    scale = abs(alpha) * (np.abs(opa) @ np.abs(opb))
    if beta != 0:
        value = value + beta * c.astype(wide)
        scale = scale + abs(beta) * np.abs(c.astype(wide))
    return value, scale


def worst_case_tolerance(dtype, k: int, scale: np.ndarray) -> float:
    """A bound no summation order can exceed, so a correct kernel cannot exceed it: a real dot
    product of length k errs by at most gamma_k ~ k*u times the sum of its terms' magnitudes
    (Higham, Accuracy and Stability of Numerical Algorithms, Thm 3.5); a complex one sums 2k real
    products per component (and |ar*br| + |ai*bi| <= |a||b|); alpha, beta and the final sum add a
    few roundings. A factor 2 covers gamma's denominator and complex magnitudes. One term dropped
    or doubled moves an element by at least 1/16 (``uniform`` entries are at least 0.25 in
    magnitude), while this is at most 2 * (2k + 8) * u * k < 0.022 for k <= 300 in single
    precision (scale <= k). Loose for large k: gemmtune.measure.verify.compare is the sharp check."""
    u = np.finfo(dtype).eps / 2
    return float(2 * (2 * k + 8) * u * scale.max())


def sql(db: Path, query: str, *args) -> list[dict]:
    """Rows of a query on a SQLite file, as dicts: the tests' own reading, not gemmtune's."""
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(query, args)]
    finally:
        con.close()
