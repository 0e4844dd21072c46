"""The register-tiled kernel family xgemm_rt: its constraints (pure Python), its results on the
PoCL CPU device against numpy, and `gemmtune space --explain` for it.

The constraint rules are written again here from the comments of kernels/xgemm_rt_checks.cl and the
table in docs/kernels.md, independently of gemmtune.families. Each constraint test loads a small space
file in which some configurations break that constraint and no other, so that dropping or
changing the constraint in the library changes the valid set or the counts of `explain`.

PoCL compiles each (configuration, precision) for seconds with a cold cache, so the kernel
tests use four small configurations, one per precision, each combining several of the family's
features, plus one that differs from another only in BKFAST. Within one build every shape,
transpose and alpha/beta case is cheap.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import (  # noqa: E402
    BYTES, DTYPES, GPU_LIKE, POCL_LIKE, broken_rules, make_device, numpy_product, product, toml_space, uniform,
    worst_case_tolerance,
)

import gemmtune  # noqa: E402
from gemmtune.cli import cli  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.families import XGEMM_RT  # noqa: E402
from gemmtune.precision import get_precision, precision_of  # noqa: E402
from gemmtune.space import Config, check_config, load_space, make_config  # noqa: E402
from gemmtune.space.valid import explain, valid_configs  # noqa: E402
from gemmtune.measure.verify import Reference, compare  # noqa: E402

RT_PARAMS = ("MWG", "NWG", "KWG", "MDIMC", "NDIMC", "VWG", "VLM", "VLN", "PIPE", "PADL", "UNROLL",
             "BKFAST", "WARPM", "STAGE", "MMA", "STREAMK", "BANDM", "TRANSPOSEX", "TRANSPOSEY", "TRANSPOSEW")


# ---------------------------------------------------------------- the rules, from the .cl comments

def rt_parts(p: dict, dev, code: str) -> dict[int, dict[str, bool]]:
    """Each constraint of xgemm_rt as its named parts, True when ``p`` obeys the part.

    WPTM = MWG / MDIMC and WPTN = NWG / NDIMC. "WPTM % VLM == 0" needs WPTM to be a whole
    multiple of VLM, i.e. MWG a multiple of MDIMC * VLM; the register count of constraint 8 uses
    the kernel's integer macros. Both only differ between readings for configurations that
    already break constraint 1.
    """
    nbytes = BYTES[code]
    mwg, nwg, kwg, mdimc, ndimc = (p[k] for k in ("MWG", "NWG", "KWG", "MDIMC", "NDIMC"))
    vwg, vlm, vln, pipe, padl = (p[k] for k in ("VWG", "VLM", "VLN", "PIPE", "PADL"))
    unroll, bkfast, warpm, tx, ty = (p[k] for k in ("UNROLL", "BKFAST", "WARPM", "TRANSPOSEX", "TRANSPOSEY"))
    # A configuration written before TRANSPOSEW or MMA existed means the kernel's defaults.
    stage, tw, mma = p["STAGE"], p.get("TRANSPOSEW", 1), p.get("MMA", 0)
    wis = dev.max_work_item_sizes
    wgs = mdimc * ndimc
    nbuf = pipe - 3 if pipe >= 5 else 2 if pipe >= 2 else 1   # PIPE 5, 6, 7: asynchronous copies, 2, 3, 4 buffers
    return {
        1: {"MWG % MDIMC": mwg % mdimc == 0, "NWG % NDIMC": nwg % ndimc == 0},
        2: {"dim0": mdimc <= wis[0], "dim1": ndimc <= wis[1], "total": wgs <= dev.max_work_group_size},
        3: {"MWG % VWG": mwg % vwg == 0, "NWG % VWG": nwg % vwg == 0,
            "KWG % VWG if BKFAST": not bkfast or kwg % vwg == 0,
            "A slice": (kwg * mwg) % (vwg * wgs) == 0, "B slice": (kwg * nwg) % (vwg * wgs) == 0,
            "B blocks if BKFAST 2": bkfast != 2 or (kwg * nwg) % (vwg * vwg * wgs) == 0},
        4: {"WPTM % VLM": mwg % (mdimc * vlm) == 0, "WPTN % VLN": nwg % (ndimc * vln) == 0,
            "PADL % VWG": padl % vwg == 0, "PADL % VLM": padl % vlm == 0, "PADL % VLN": padl % vln == 0},
        5: {"local": stage * nbuf * kwg * ((mwg + padl) + (nwg + padl)) * nbytes <= dev.local_mem_bytes},
        6: {"KWG % UNROLL": kwg % unroll == 0},
        7: {"warp": warpm == 0 or (wgs % 32 == 0 and 32 % warpm == 0 and mdimc % warpm == 0
                                   and ndimc % (32 // warpm) == 0)},
        # half of what a work-item gets: 256, or its share of the group's registers where known
        8: {"registers": (mwg // mdimc) * (nwg // ndimc) * nbytes
            <= 4 * ((min(256, dev.registers_per_group // wgs) if dev.registers_per_group else 256) // 2)},
        9: {"dim0": tx <= wis[0], "dim1": ty <= wis[1], "total": tx * ty <= dev.max_work_group_size,
            "local": ty * tw * (tx + 1) * nbytes <= dev.local_mem_bytes},
        10: {"STAGE 0 or 1": stage in (0, 1), "PIPE 0 unstaged": stage == 1 or pipe == 0, "PADL 0 unstaged": stage == 1 or padl == 0,
             "VWG 1 unstaged": stage == 1 or vwg == 1, "BKFAST 0 unstaged": stage == 1 or bkfast == 0},
        11: {"PIPE 0, 1, 2, 5, 6 or 7": pipe in (0, 1, 2, 5, 6, 7), "BKFAST 0 or 1 if PIPE 5 to 7": pipe < 5 or bkfast != 2},
        12: {"MMA 0, 1 or 2": mma in (0, 1, 2), "MMA 2 copies asynchronously": mma != 2 or pipe >= 5, "d or z": not mma or code in "dz", "device": not mma or dev.fp64_matrix,
             "8 x 4 groups": not mma or (mdimc % 8 == 0 and ndimc % 4 == 0),
             "whole blocks": not mma or ((mwg // mdimc) % 2 == 0 and (nwg // ndimc) % 2 == 0 and kwg % 8 == 0),
             "staged": not mma or stage == 1,
             "the rest fixed": not mma or (vlm == 1 and vln == 1 and unroll == 1 and warpm == 0)},
    }


def rt_broken(p: dict, dev, code: str) -> list[int]:
    return [n for n, parts in rt_parts(p, dev, code).items() if not all(parts.values())]


def failing_parts(p: dict, dev, code: str, n: int) -> list[str]:
    return [name for name, ok in rt_parts(p, dev, code)[n].items() if not ok]


def key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


# Every parameter at a small value that breaks nothing on the devices below; each test widens
# only the parameters its constraint is about.
BASE = dict(MWG=[16], NWG=[16], KWG=[8], MDIMC=[4], NDIMC=[4], VWG=[1], VLM=[1], VLN=[1], PIPE=[0],
            PADL=[0], UNROLL=[1], BKFAST=[0], WARPM=[0], STAGE=[1], MMA=[0], STREAMK=[0], BANDM=[0], TRANSPOSEX=[8], TRANSPOSEY=[8],
            TRANSPOSEW=[1])


def rt_counts(space, dev, prec) -> dict[int, tuple[int, int]]:
    """explain() for the xgemm_rt family: constraint number -> (removed, broken)."""
    rows = [c for c in explain(space, dev, prec) if c.kernel == "xgemm_rt"]
    assert [c.constraint for c in rows] == list(XGEMM_RT.constraints)
    return {c.constraint.number: (c.removed, c.broken) for c in rows}


def run_constraint_case(tmp_path, table: dict, dev, code: str, n: int, also: tuple = ()) -> list[dict]:
    """Load ``table`` as a space file; check valid_configs, explain and check_config against the
    rules; return the configurations that break constraint ``n`` alone (never empty), or ``n``
    and the constraints ``also`` that cannot hold without it."""
    assert list(table) == list(RT_PARAMS)
    path = tmp_path / "space.toml"
    path.write_text(toml_space(table, "xgemm_rt"))
    space = load_space(path)
    configs = product(table)
    assert space.size == len(configs)
    prec = get_precision(code)

    valid = valid_configs(space, dev, prec)
    assert all(c.kernel == "xgemm_rt" for c in valid)
    assert len(valid) == len({key(c.params) for c in valid}), "duplicate configurations"
    assert {key(c.params) for c in valid} == {key(p) for p in configs if not rt_broken(p, dev, code)}

    broken = [rt_broken(p, dev, code) for p in configs]
    first = Counter(b[0] for b in broken if b)
    every = Counter(m for b in broken for m in b)
    assert rt_counts(space, dev, prec) == {m: (first[m], every[m]) for m in range(1, 13)}

    for p, b in zip(configs, broken):
        if b:
            with pytest.raises(GemmtuneError, match=rf"constraint {b[0]}\b"):
                check_config(Config.of("xgemm_rt", p), dev, prec)
    alone = [p for p, b in zip(configs, broken) if b == [n, *also]]
    assert alone, f"test space has no configuration that breaks constraint {n} alone"
    assert any(not b for b in broken), "test space has no valid configuration"
    return alone


def valid_keys(tmp_path, table, dev, code) -> set[tuple]:
    path = tmp_path / "space.toml"
    path.write_text(toml_space(table, "xgemm_rt"))
    return {key(c.params) for c in valid_configs(load_space(path), dev, get_precision(code))}


def point(table: dict, **values) -> dict:
    """One configuration: the first value of each list of ``table``, except ``values``."""
    return {**{k: v[0] for k, v in table.items()}, **values}


def test_family_parameters_are_the_cl_defaults():
    assert [k for k in XGEMM_RT.parameters if k != "PRECISION"] == list(RT_PARAMS)
    assert XGEMM_RT.may_be_zero == {"PADL", "WARPM", "PIPE", "BKFAST", "STAGE", "MMA", "STREAMK", "BANDM"}
    # The .cl file's own defaults are a valid configuration on a GPU-like device, in s.
    assert not rt_broken(XGEMM_RT.defaults, GPU_LIKE, "s")
    assert [c.number for c in XGEMM_RT.constraints] == list(range(1, 13))


# ---------------------------------------------------------------- constraints 1-9

def test_constraint_1_work_per_thread(tmp_path):
    # MDIMC != NDIMC and MWG != NWG, so that a rule pairing MWG with NDIMC gives another set.
    table = {**BASE, "MWG": [8, 12, 16, 24], "NWG": [8, 16, 20], "KWG": [48], "MDIMC": [2, 4, 8],
             "NDIMC": [2, 4, 8]}
    # A fractional WPTM is no multiple of VLM: breaking constraint 1 breaks 4 as well, so only
    # explain's counts (under the first constraint broken) tell whether 1 is there and right.
    alone = run_constraint_case(tmp_path, table, GPU_LIKE, "s", 1, also=(4,))
    for p in alone:
        assert set(failing_parts(p, GPU_LIKE, "s", 4)) <= {"WPTM % VLM", "WPTN % VLN"}
    parts = [failing_parts(p, GPU_LIKE, "s", 1) for p in alone]
    assert ["MWG % MDIMC"] in parts and ["NWG % NDIMC"] in parts
    valid = valid_keys(tmp_path, table, GPU_LIKE, "s")
    assert key(point(table, MWG=12, NWG=20, MDIMC=4, NDIMC=2)) in valid   # 12 % 2, but 20 % 4 == 0
    assert key(point(table, MWG=12, NWG=16, MDIMC=4, NDIMC=8)) in valid   # MWG % NDIMC != 0: fine


def test_constraint_2_work_group(tmp_path):
    # MDIMC = 16 > 8 (dimension 0), NDIMC = 8 > 4 (dimension 1), 8 x 4 = 32 > 16 (total).
    dev = make_device(max_work_item_sizes=(8, 4, 4), max_work_group_size=16, local_mem_bytes=1 << 20)
    table = {**BASE, "MWG": [16, 32], "NWG": [16, 32], "KWG": [32], "MDIMC": [2, 4, 8, 16],
             "NDIMC": [1, 2, 4, 8], "TRANSPOSEX": [4], "TRANSPOSEY": [4]}
    alone = run_constraint_case(tmp_path, table, dev, "s", 2)
    parts = [failing_parts(p, dev, "s", 2) for p in alone]
    for part in ("dim0", "dim1", "total"):
        assert [part] in parts, part
    # The limits are inclusive: 4 x 4 = 16 work-items, and MDIMC = 8 alone in dimension 0.
    valid = valid_keys(tmp_path, table, dev, "s")
    assert key(point(table, MDIMC=4, NDIMC=4)) in valid
    assert key(point(table, MDIMC=8, NDIMC=2)) in valid
    assert key(point(table, MDIMC=2, NDIMC=8)) not in valid


def test_constraint_3_vector_loads(tmp_path):
    table = {**BASE, "MWG": [8, 12, 16], "NWG": [8, 16, 20], "KWG": [2, 6, 8], "MDIMC": [2, 4],
             "NDIMC": [2, 4], "VWG": [1, 2, 4, 8], "BKFAST": [0, 1, 2]}
    alone = run_constraint_case(tmp_path, table, POCL_LIKE, "s", 3)
    parts = [failing_parts(p, POCL_LIKE, "s", 3) for p in alone]
    for part in ("MWG % VWG", "NWG % VWG", "KWG % VWG if BKFAST", "A slice", "B slice", "B blocks if BKFAST 2"):
        assert [part] in parts, part
    # KWG = 6 is split by 4-wide loads only when B is staged n-fastest (BKFAST = 0): with B read
    # k-fastest, a column of the slice (6 elements) is no whole number of 4-wide vectors.
    valid = valid_keys(tmp_path, table, POCL_LIKE, "s")
    six = point(table, MWG=16, NWG=16, KWG=6, MDIMC=2, NDIMC=2, VWG=4)
    assert key({**six, "BKFAST": 0}) in valid and key({**six, "BKFAST": 1}) not in valid
    assert key({**six, "VWG": 2, "BKFAST": 1}) in valid
    # With 2 x 2 blocks transposed in registers, the 16 x 6 slice of B holds 24 blocks: six for
    # each of four work-items, but not a whole number for each of 16.
    assert key({**six, "VWG": 2, "BKFAST": 2}) in valid
    assert key({**six, "VWG": 2, "BKFAST": 2, "MDIMC": 4, "NDIMC": 4}) not in valid
    assert key({**six, "VWG": 2, "BKFAST": 1, "MDIMC": 4, "NDIMC": 4}) in valid


def test_constraint_4_local_vectors(tmp_path):
    table = {**BASE, "MWG": [16, 32], "NWG": [16], "KWG": [16], "MDIMC": [4, 8], "NDIMC": [4, 8],
             "VWG": [1, 2, 4], "VLM": [1, 2, 4, 8], "VLN": [1, 2, 4], "PADL": [0, 1, 2, 4, 8]}
    alone = run_constraint_case(tmp_path, table, POCL_LIKE, "s", 4)
    parts = [failing_parts(p, POCL_LIKE, "s", 4) for p in alone]
    for part in ("WPTM % VLM", "WPTN % VLN", "PADL % VWG", "PADL % VLM", "PADL % VLN"):
        assert [part] in parts, part
    valid = valid_keys(tmp_path, table, POCL_LIKE, "s")
    # VLM = WPTM (blocked) and VLM = 1 (strided) are both fine; VLM > WPTM is not.
    blocked = point(table, MWG=32, MDIMC=8, NDIMC=4, VLM=4, VLN=4)  # WPTM = WPTN = 4
    assert key(blocked) in valid and key({**blocked, "VLM": 1, "VLN": 1}) in valid
    assert key({**blocked, "VLM": 8}) not in valid
    # PADL keeps rows aligned: 4 with 4-wide vectors, not 2.
    assert key({**blocked, "VWG": 4, "PADL": 4}) in valid
    assert key({**blocked, "VWG": 4, "PADL": 2}) not in valid
    assert key({**blocked, "VWG": 2, "VLM": 1, "VLN": 1, "PADL": 2}) in valid


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_constraint_5_local_memory(tmp_path, code):
    # 9216 bytes = 32 * 72 floats: KWG * (MWG + NWG + 2 * PADL) with 32 x 32 tiles and PADL = 4
    # fits exactly, single-buffered, for KWG = 32, 16, 16, 8 in s, d, c, z.
    dev = make_device(local_mem_bytes=9216)
    table = {**BASE, "MWG": [16, 32], "NWG": [16, 32], "KWG": [8, 16, 32], "PIPE": [0, 1, 2, 5, 6],
             "PADL": [0, 4], "MDIMC": [8], "NDIMC": [8]}
    alone = run_constraint_case(tmp_path, table, dev, code, 5)
    nbytes = BYTES[code]
    valid = valid_keys(tmp_path, table, dev, code)
    exact = point(table, MWG=32, NWG=32, KWG=128 // nbytes, PIPE=0, PADL=4)
    assert exact["KWG"] * (32 + 32 + 2 * 4) * nbytes == dev.local_mem_bytes
    assert key(exact) in valid                               # the limit is inclusive
    assert key({**exact, "PIPE": 1}) in valid                # a register prefetch needs no more
    assert key({**exact, "PIPE": 2}) not in valid            # double buffers need twice as much
    if exact["KWG"] > 8:
        assert key({**exact, "PIPE": 2, "KWG": exact["KWG"] // 2}) in valid   # half as deep: fits again
    assert key({**exact, "PADL": 0, "PIPE": 0}) in valid
    # Asynchronous copies need 2 (PIPE 5) or 3 (PIPE 6) buffers: 2 fit at half the depth, 3 do not.
    assert key({**exact, "PIPE": 5}) not in valid
    if exact["KWG"] > 8:
        assert key({**exact, "PIPE": 5, "KWG": exact["KWG"] // 2}) in valid
        assert key({**exact, "PIPE": 6, "KWG": exact["KWG"] // 2}) not in valid
    # PADL counts once per slice (A and B): some configurations fit only without it.
    assert any(key({**p, "PADL": 0}) in valid for p in alone if p["PADL"] == 4)


@pytest.mark.parametrize("dev", [GPU_LIKE, POCL_LIKE], ids=["gpu-like", "pocl-like"])
def test_constraint_5_bytes_per_element(tmp_path, dev):
    """The same space on one device keeps fewer configurations the wider the element."""
    table = {**BASE, "MWG": [32, 64, 128, 256], "NWG": [64, 128, 256], "KWG": [16, 32], "MDIMC": [8],
             "NDIMC": [8], "PIPE": [0, 2], "PADL": [0, 4]}
    configs = product(table)
    valid = {}
    for code in "sdcz":
        valid[code] = valid_keys(tmp_path, table, dev, code)
        assert valid[code] == {key(p) for p in configs if not rt_broken(p, dev, code)}, code
    assert valid["z"] < valid["d"] == valid["c"] < valid["s"]
    assert valid["z"]


def test_constraint_6_unroll(tmp_path):
    table = {**BASE, "KWG": [4, 8, 12, 16], "UNROLL": [1, 2, 3, 4, 8]}
    alone = run_constraint_case(tmp_path, table, GPU_LIKE, "d", 6)
    assert {(p["KWG"], p["UNROLL"]) for p in alone} == {(4, 3), (4, 8), (8, 3), (16, 3), (12, 8)}
    valid = valid_keys(tmp_path, table, GPU_LIKE, "d")
    assert key(point(table, KWG=12, UNROLL=3)) in valid and key(point(table, KWG=16, UNROLL=8)) in valid


def test_constraint_7_warp_sub_tile(tmp_path):
    table = {**BASE, "MWG": [64], "NWG": [16], "KWG": [64], "MDIMC": [2, 4, 8, 16, 64],
             "NDIMC": [1, 2, 4, 8, 16], "WARPM": [0, 1, 2, 8, 64]}
    alone = run_constraint_case(tmp_path, table, GPU_LIKE, "s", 7)
    valid = valid_keys(tmp_path, table, GPU_LIKE, "s")
    configs = product(table)
    # WARPM = 0 is always allowed, even where the work-group is no multiple of 32.
    for p in configs:
        if p["WARPM"] == 0:
            assert (key(p) in valid) == (not rt_broken(p, GPU_LIKE, "s")), p
            assert 7 not in rt_broken(p, GPU_LIKE, "s")
    assert key(point(table, MDIMC=4, NDIMC=2, WARPM=0)) in valid          # 8 work-items
    # Each part, alone: WARPM must divide MDIMC; 32 / WARPM must divide NDIMC (not MDIMC); WARPM
    # must divide 32.
    assert key(point(table, MDIMC=4, NDIMC=8, WARPM=8)) not in valid       # 4 % 8
    assert key(point(table, MDIMC=16, NDIMC=2, WARPM=8)) not in valid      # 2 % 4
    assert key(point(table, MDIMC=64, NDIMC=1, WARPM=64)) not in valid     # 32 % 64
    assert key(point(table, MDIMC=8, NDIMC=4, WARPM=8)) in valid           # 8 x 4: one group
    assert key(point(table, MDIMC=2, NDIMC=16, WARPM=2)) in valid
    assert key(point(table, MDIMC=16, NDIMC=2, WARPM=2)) not in valid      # 2 % (32 / 2)
    assert key(point(table, MDIMC=2, NDIMC=16, WARPM=1)) not in valid      # 16 % (32 / 1)
    assert len(alone) >= 3


def test_constraint_6_holds_for_every_pipeline(tmp_path):
    # PIPE 4, which unrolled the slice itself, is gone: UNROLL divides KWG whatever the schedule.
    table = {**BASE, "KWG": [4, 6, 7, 8], "PIPE": [0, 2, 6], "UNROLL": [1, 2]}
    alone = run_constraint_case(tmp_path, table, GPU_LIKE, "s", 6)
    assert {(p["KWG"], p["UNROLL"]) for p in alone} == {(7, 2)}
    valid = valid_keys(tmp_path, table, GPU_LIKE, "s")
    for pipe in (0, 2, 6):
        assert key(point(table, KWG=6, PIPE=pipe, UNROLL=2)) in valid
        assert key(point(table, KWG=7, PIPE=pipe, UNROLL=1)) in valid


def test_constraint_10_staging(tmp_path):
    dev = make_device(local_mem_bytes=2048)
    table = {**BASE, "MWG": [16, 64], "NWG": [16], "KWG": [8], "VWG": [1, 2], "PIPE": [0, 1], "PADL": [0, 2],
             "BKFAST": [0, 1], "STAGE": [0, 1, 2]}
    alone = run_constraint_case(tmp_path, table, dev, "s", 10)
    parts = [failing_parts(p, dev, "s", 10) for p in alone]
    assert ["STAGE 0 or 1"] in [failing_parts(p, dev, "s", 10) for p in product(table) if p["STAGE"] == 2]
    for part in ("PIPE 0 unstaged", "PADL 0 unstaged", "VWG 1 unstaged", "BKFAST 0 unstaged"):
        assert [part] in parts, part
    valid = valid_keys(tmp_path, table, dev, "s")
    assert key(point(table, STAGE=0)) in valid and key(point(table, STAGE=1)) in valid
    # Unstaged, the slices take no local memory; staged, 8 x (64 + 16) floats need 2,560 bytes.
    wide = point(table, MWG=64, PIPE=0, PADL=0)
    assert key({**wide, "STAGE": 1}) not in valid and key({**wide, "STAGE": 0}) in valid


def test_constraint_11_asynchronous_copies(tmp_path):
    table = {**BASE, "PIPE": [0, 1, 2, 3, 4, 5, 6, 7, 8], "BKFAST": [0, 1, 2]}
    alone = run_constraint_case(tmp_path, table, GPU_LIKE, "s", 11)
    parts = [failing_parts(p, GPU_LIKE, "s", 11) for p in alone]
    for part in ("PIPE 0, 1, 2, 5, 6 or 7", "BKFAST 0 or 1 if PIPE 5 to 7"):
        assert [part] in parts, part
    valid = valid_keys(tmp_path, table, GPU_LIKE, "s")
    for pipe in (3, 4):   # never best, so no longer in the kernel
        assert key(point(table, PIPE=pipe)) not in valid
    for pipe in (5, 6, 7):
        # B as given goes through registers a vector at a time; BKFAST 2's blocks are not built for it
        assert key(point(table, PIPE=pipe)) in valid and key(point(table, PIPE=pipe, BKFAST=1)) in valid
        assert key(point(table, PIPE=pipe, BKFAST=2)) not in valid
    assert key(point(table, PIPE=8)) not in valid
    assert key(point(table, PIPE=2, BKFAST=1)) in valid and key(point(table, PIPE=2, BKFAST=2)) in valid


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_constraint_12_matrix_instructions(tmp_path, code):
    mma_device = make_device(fp64_matrix=True)
    table = {**BASE, "MWG": [16, 24, 32], "NWG": [8, 16], "KWG": [8, 12], "MDIMC": [4, 8], "NDIMC": [2, 4],
             "VLM": [1, 2], "PIPE": [0, 2, 6], "UNROLL": [1, 2], "WARPM": [0, 4], "STAGE": [0, 1], "MMA": [0, 1, 2, 3]}
    if code in "dz":
        alone = run_constraint_case(tmp_path, table, mma_device, code, 12)
        parts = [failing_parts(p, mma_device, code, 12) for p in alone]
        for part in ("MMA 0, 1 or 2", "MMA 2 copies asynchronously", "8 x 4 groups", "whole blocks", "staged",
                     "the rest fixed"):
            assert [part] in parts, part
    valid = valid_keys(tmp_path, table, mma_device, code)
    # One group of 32 as 8 x 4 work-items, each holding 2 x 2 results of one 16 x 8 block.
    block = point(table, MWG=16, NWG=8, KWG=8, MDIMC=8, NDIMC=4, PIPE=2, STAGE=1)
    assert key(block) in valid
    assert (key({**block, "MMA": 1}) in valid) == (code in "dz")            # doubles only
    assert key({**block, "MMA": 2}) not in valid                            # no asynchronous copies
    assert (key({**block, "MMA": 2, "PIPE": 6}) in valid) == (code in "dz")
    if code in "dz":
        assert key({**block, "MMA": 1, "KWG": 12}) not in valid             # 12 is no whole block of k
        assert key({**block, "MMA": 1, "MWG": 24}) not in valid             # WPTM = 3: half a block
        assert key({**block, "MMA": 1, "MWG": 32}) in valid                 # two blocks along M
        assert key({**block, "MMA": 1, "MDIMC": 4}) not in valid            # 4 x 8 is no group of 8 x 4
        assert key({**block, "MMA": 1, "PIPE": 0, "STAGE": 0}) not in valid and key({**block, "PIPE": 0, "STAGE": 0}) in valid
        assert key({**block, "MMA": 1, "UNROLL": 2}) not in valid
        # The same configuration needs a device that has the instructions.
        assert key({**block, "MMA": 1}) not in valid_keys(tmp_path, table, GPU_LIKE, code)
        assert 12 in rt_broken({**block, "MMA": 1}, GPU_LIKE, code)


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_constraint_8_registers(tmp_path, code):
    table = {**BASE, "MWG": [16, 32, 64], "NWG": [16, 32, 64], "KWG": [16], "MDIMC": [2, 4],
             "NDIMC": [2, 4]}
    run_constraint_case(tmp_path, table, POCL_LIKE, code, 8)
    valid = valid_keys(tmp_path, table, POCL_LIKE, code)
    # At most 128 32-bit registers of accumulators: 128 floats, 64 doubles or complex floats,
    # 32 complex doubles; the limit is inclusive.
    limit = 512 // BYTES[code]
    wpt = {(p["MWG"] // p["MDIMC"]) * (p["NWG"] // p["NDIMC"]) for p in product(table)}
    assert limit in wpt and limit * 2 in wpt
    for p in product(table):
        results = (p["MWG"] // p["MDIMC"]) * (p["NWG"] // p["NDIMC"])
        assert (key(p) in valid) == (results <= limit), p


@pytest.mark.parametrize("code", ["s", "d", "z"])
def test_constraint_8_counts_the_registers_a_group_shares(tmp_path, code):
    # Where the driver says how many registers a group shares (NVIDIA: 65,536 on the H200), a
    # work-item of 512 gets 128 and one of 1024 gets 64: half of that for accumulators.
    table = {**BASE, "MWG": [64, 128, 256], "NWG": [64, 128, 256], "KWG": [16], "MDIMC": [8, 16, 32],
             "NDIMC": [8, 16, 32]}
    roomy = make_device(local_mem_bytes=1 << 20)
    h200 = dataclasses.replace(roomy, registers_per_group=65536)
    run_constraint_case(tmp_path, table, h200, code, 8)
    unknown, known = (valid_keys(tmp_path, table, dev, code) for dev in (roomy, h200))
    assert known < unknown
    for p in product(table):
        items = p["MDIMC"] * p["NDIMC"]
        registers = (p["MWG"] // p["MDIMC"]) * (p["NWG"] // p["NDIMC"]) * BYTES[code] // 4
        if key(p) in unknown:
            assert (key(p) in known) == (registers <= min(256, 65536 // items) // 2), p
    # 1024 work-items of 8 x 8 doubles: 128 registers of accumulators where 64 fit (the H200
    # spilled 5-8 KB a work-item of such d kernels); 512 of 8 x 4 take 64 of their 128.
    wide = point(table, MWG=256, NWG=256, MDIMC=32, NDIMC=32)
    narrow = point(table, MWG=128, NWG=128, MDIMC=16, NDIMC=32)
    assert key(wide) not in known and (key(wide) in unknown) == (code != "z")
    assert (key(narrow) in known) == (code != "z")


def test_constraint_8_scales_with_bytes_per_element(tmp_path):
    table = {**BASE, "MWG": [16, 32, 64], "NWG": [16, 32, 64], "KWG": [16], "MDIMC": [2, 4], "NDIMC": [2, 4]}
    s, z = (valid_keys(tmp_path, table, POCL_LIKE, code) for code in "sz")
    assert z < s
    eight_by_sixteen = point(table, MWG=32, NWG=64, MDIMC=4, NDIMC=4)   # 8 x 16 = 128 results
    assert key(eight_by_sixteen) in s and key(eight_by_sixteen) not in z


@pytest.mark.parametrize("limit, code", [("local memory", "s"), ("local memory", "d"), ("local memory", "z"),
                                         ("work-group", "c")])
def test_constraint_9_transpose_tile(tmp_path, limit, code):
    table = {**BASE, "MWG": [8], "NWG": [8], "KWG": [4], "MDIMC": [2], "NDIMC": [2],
             "TRANSPOSEX": [2, 4, 8, 16, 32, 64, 128], "TRANSPOSEY": [1, 4, 8, 16, 32, 64], "TRANSPOSEW": [1, 2]}
    if limit == "local memory":
        # Dimension 0 <= 64, dimension 1 <= 32; local memory for 543 elements: 16 x 32 needs
        # 32 * 17 = 544 (too many), though 32 x 16 needs 16 * 33 = 528 and fits.
        dev = make_device(max_work_item_sizes=(64, 32, 64), max_work_group_size=4096,
                          local_mem_bytes=543 * BYTES[code])
        expected_parts = ("dim0", "dim1", "local")
    else:
        dev = make_device(max_work_item_sizes=(64, 32, 64), max_work_group_size=128, local_mem_bytes=1 << 20)
        expected_parts = ("dim0", "dim1", "total")
    alone = run_constraint_case(tmp_path, table, dev, code, 9)
    parts = [failing_parts(p, dev, code, 9) for p in alone]
    for part in expected_parts:
        assert [part] in parts, part
    keys = [dict(k) for k in valid_keys(tmp_path, table, dev, code)]
    valid = {(k["TRANSPOSEX"], k["TRANSPOSEY"]) for k in keys if k["TRANSPOSEW"] == 1}
    valid2 = {(k["TRANSPOSEX"], k["TRANSPOSEY"]) for k in keys if k["TRANSPOSEW"] == 2}
    assert (128, 1) not in valid and (2, 64) not in valid      # each dimension within its limit
    if limit == "local memory":
        assert (32, 16) in valid and (16, 32) not in valid and (64, 8) in valid and (8, 32) in valid
        # moving 2 elements each doubles the tile's rows: 32 x 8 (16 * 33 = 528) still fits; 16 x 16
        # (32 * 17 = 544) is one element over, and 32 x 16 and 64 x 8 are further over
        assert {(32, 8), (8, 16)} <= valid2 and not {(16, 16), (32, 16), (64, 8)} & valid2
    else:
        assert {(16, 8), (8, 16), (64, 1), (4, 32)} <= valid and (16, 16) not in valid
        assert valid2 == valid     # the work-group is the same


# ---------------------------------------------------------------- gemm on PoCL

# One configuration per precision, each combining features (WPTM = MWG / MDIMC, WPTN = NWG / NDIMC):
CONFIGS = {
    # B k-fastest, double-buffered, 4-wide loads, A blocked (VLM = WPTM = 4), B strided (VLN = 1),
    # padded local rows, 8 x 4 warp sub-tiles.
    "s": dict(MWG=32, NWG=16, KWG=8, MDIMC=8, NDIMC=4, VWG=4, VLM=4, VLN=1, PIPE=2, PADL=4, UNROLL=1,
              BKFAST=1, WARPM=8, STAGE=1, TRANSPOSEX=8, TRANSPOSEY=8),
    # B n-fastest (transposed), no prefetch, scalar loads, A strided (VLM = 1 < WPTM = 4), B
    # blocked (VLN = WPTN = 4), no padding, row-major work-items, rectangular transpose tile whose
    # work-items move 4 elements each.
    "d": dict(MWG=16, NWG=32, KWG=16, MDIMC=4, NDIMC=8, VWG=1, VLM=1, VLN=4, PIPE=0, PADL=0, UNROLL=1,
              BKFAST=0, WARPM=0, STAGE=1, TRANSPOSEX=16, TRANSPOSEY=8, TRANSPOSEW=4),
    # B k-fastest, register prefetch, 2-wide loads, A blocked (VLM = WPTM = 2), 64 work-items in
    # two 8 x 4 sub-tiles.
    "c": dict(MWG=16, NWG=32, KWG=8, MDIMC=8, NDIMC=8, VWG=2, VLM=2, VLN=1, PIPE=1, PADL=0, UNROLL=1,
              BKFAST=1, WARPM=8, STAGE=1, TRANSPOSEX=8, TRANSPOSEY=16),
    # B k-fastest in 2 x 2 blocks transposed in registers, double-buffered (K = 129 and 300 give
    # an odd and an even number of slices), 2-wide
    # loads, A strided, B in chunks of 2 (WPTN = 4), padded; transposes move 3 elements per work-item.
    "z": dict(MWG=16, NWG=16, KWG=8, MDIMC=4, NDIMC=4, VWG=2, VLM=1, VLN=2, PIPE=2, PADL=4, UNROLL=1,
              BKFAST=2, WARPM=0, STAGE=1, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=3),
}
# Two extra builds: the c configuration with B read n-fastest instead, for BKFAST's effect; the d
# configuration reading its operands from global memory (STAGE 0), for STAGE's.
FLIPPED = ("c", {**CONFIGS["c"], "BKFAST": 0})
UNSTAGED = ("d", {**CONFIGS["d"], "STAGE": 0})
# More with asynchronous copies into 3, 4 and 2 local buffers (PIPE 6, 7 and 5) (on PoCL a load and a store each,
# so what they test is the rotation of the buffers: K = 1 and 3 leave the prologue short of slices).
ASYNC3 = ("d", {**CONFIGS["d"], "PIPE": 6})
ASYNC4 = ("s", {**CONFIGS["s"], "PIPE": 7, "BKFAST": 0})
ASYNC2 = ("c", {**FLIPPED[1], "PIPE": 5})
# And B as given (BKFAST = 1), through registers one slice ahead into the k-major slice while A
# goes by asynchronous copies: z (16-byte elements) into 2 buffers, and s into 3 with stream-K
# (pieces that start part-way along K read B from there).
ASYNC2_KFAST = ("z", {**CONFIGS["z"], "BKFAST": 1, "PIPE": 5})
ASYNC3_KFAST_SHARED = ("s", {**CONFIGS["s"], "PIPE": 6, "STREAMK": 2})
# Stream-K: the last round's tiles, in rounds of 3 work-groups per compute unit (2 for c, with
# asynchronous copies), split along K: with so few tiles, every tile of these shapes but those
# of a single K-slice ((1, 1, 1) and (130, 2, 3)) is split, on any number of compute units.
SHARED = ("s", {**CONFIGS["s"], "STREAMK": 3})
SHARED_ASYNC = ("c", {**FLIPPED[1], "PIPE": 5, "STREAMK": 2})
CASES = [(code, config) for code, config in CONFIGS.items()] + [FLIPPED, UNSTAGED, ASYNC3, ASYNC2,
                                                                ASYNC2_KFAST, ASYNC3_KFAST_SHARED,
                                                                SHARED, SHARED_ASYNC, ASYNC4]
CASE_IDS = ["s-bkfast1-pipe2", "d-bkfast0-pipe0", "c-bkfast1-pipe1", "z-bkfast2-pipe2", "c-bkfast0-pipe1",
            "d-unstaged", "d-async3", "c-async2",
            "z-bkfast1-async2", "s-bkfast1-async3-streamk2", "s-streamk3", "c-async2-streamk2", "s-async4"]

# (m, n, k): C is m x n. (32, 32, 32) is a multiple of every tile above, so operands that are
# already in the kernel's layout go to it directly, without a padding pass.
SHAPES = [(1, 1, 1), (33, 7, 129), (3, 5, 300), (130, 2, 3), (32, 32, 32)]

# Exact binary fractions; c is None (beta = 0: gemm poisons C with NaN), NaN (beta = 0 must
# ignore it) or random.
REAL_SCALARS = [(1.0, 0.0, None), (-1.5, 0.0, "nan"), (0.75, -1.25, "random")]
COMPLEX_SCALARS = REAL_SCALARS + [(0.5 - 1.25j, -0.75 + 0.5j, "random"), (1j, 0.0, None)]


def rt(config: dict) -> dict:
    return {"KERNEL": "xgemm_rt", **config}


def test_test_configurations_cover_the_features():
    from gemmtune.devices.opencl import resolve_device

    dev = resolve_device(0)
    for code, config in CASES:
        assert not rt_broken(config, dev, code), (code, config)
        assert not rt_broken(config, GPU_LIKE, code), (code, config)   # small enough for any GPU too
        assert config["UNROLL"] == 1 and 16 <= config["MWG"] <= 32 and 16 <= config["NWG"] <= 32
    configs = [c for _, c in CASES]

    def seen(name):
        return {c[name] for c in configs}

    assert seen("BKFAST") == {0, 1, 2} and seen("PIPE") == {0, 1, 2, 5, 6, 7} and seen("WARPM") == {0, 8}
    assert seen("PADL") == {0, 4} and seen("VWG") == {1, 2, 4} and seen("STAGE") == {0, 1}
    assert {c.get("STREAMK", 0) for c in configs} == {0, 2, 3}
    # TRANSPOSEW left out (a configuration recorded before it existed) is one element per work-item
    assert {c.get("TRANSPOSEW") for c in configs} == {None, 3, 4}
    assert any(c["VLM"] == 1 < c["MWG"] // c["MDIMC"] for c in configs)              # strided
    assert any(c["VLM"] == c["MWG"] // c["MDIMC"] > 1 for c in configs)              # blocked
    assert {code for code, _ in CASES} == set("sdcz")


def run_case(code: str, config: dict, shape, ta: str, tb: str, alpha, beta, c_kind, rng, device=None):
    dtype = DTYPES[code]
    m, n, k = shape
    a = uniform((m, k) if ta == "N" else (k, m), dtype, rng)
    b = uniform((k, n) if tb == "N" else (n, k), dtype, rng)
    c = {None: None, "nan": np.full((m, n), np.nan, dtype=dtype), "random": uniform((m, n), dtype, rng)}[c_kind]
    got = gemmtune.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb, config=rt(config), device=device)
    return a, b, c, got


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("code, config", CASES, ids=CASE_IDS)
def test_gemm_matches_numpy(code, config, shape):
    check_every_case(code, config, shape)


# Tiles dealt in bands of BANDM tile rows (the kernel's M is numpy's n): d's 16 x 32 tiles over 7 x 3
# tiles make bands of 3, 3 and 1 rows; with stream-K, s's 32 x 16 tiles over 5 x 4 make bands of
# 2, 2 and 1 whose last tiles are cut along K, so the pieces and xgemm_fixup must find the same tiles.
BANDED = [("d", {**CONFIGS["d"], "BANDM": 3}, (70, 100, 40)),
          ("s", {**SHARED[1], "BANDM": 2}, (50, 130, 20)),
          ("z", {**CONFIGS["z"], "BANDM": 4}, (33, 65, 9))]


@pytest.mark.parametrize("code, config, shape", BANDED, ids=["d-band3", "s-band2-streamk3", "z-band4"])
def test_gemm_in_bands_of_tile_rows_matches_numpy(code, config, shape):
    from gemmtune.devices.opencl import resolve_device

    assert not rt_broken(config, resolve_device(0), code)
    m, n, _ = shape
    tiles_m, tiles_n = -(-n // config["MWG"]), -(-m // config["NWG"])
    assert tiles_m % config["BANDM"] and tiles_n > 1   # a last band narrower than the others
    check_every_case(code, config, shape)


# MMA 1 is valid only on devices with FP64 matrix instructions, which PoCL lacks; the fixture
# below tells gemmtune's constraint check that device 0 has them. Built for PoCL (no MMA_F64),
# the kernel then spells each instruction out through local memory, from the same fragments:
# what these cases check is which values each lane loads, which blocks each group of 32 owns,
# and where each result goes. Two groups each: along N for d, along M for z; z reads B as given
# (BKFAST 1), staged k-major as with the transpose pass, and splits its tiles along K (STREAMK 2).
MMA_CASES = [
    ("d", dict(MWG=32, NWG=32, KWG=16, MDIMC=8, NDIMC=8, VWG=2, VLM=1, VLN=1, PIPE=6, PADL=4, UNROLL=1,
               BKFAST=0, WARPM=0, STAGE=1, MMA=1, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=2)),
    ("z", dict(MWG=32, NWG=16, KWG=8, MDIMC=16, NDIMC=4, VWG=1, VLM=1, VLN=1, PIPE=2, PADL=0, UNROLL=1,
               BKFAST=1, WARPM=0, STAGE=1, MMA=1, STREAMK=2, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=1)),
    # Two groups along N, each 32 x 16, with 4 local buffers; z's padding for its 16-byte reads.
    ("d", dict(MWG=32, NWG=32, KWG=8, MDIMC=8, NDIMC=8, VWG=1, VLM=1, VLN=1, PIPE=7, PADL=2, UNROLL=1,
               BKFAST=0, WARPM=0, STAGE=1, MMA=1, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=2)),
    # MMA 2's steps of 4 values of k read ahead, across the barrier: four steps a slice in 3
    # buffers; one slice of two steps in 2 buffers, B through registers, tiles split along K, one
    # group of 32 with two blocks of 16 rows (z reads the next step's fragments between them); and
    # 4 buffers, where every fourth slice's copies wrap around.
    ("d", dict(MWG=32, NWG=32, KWG=16, MDIMC=8, NDIMC=8, VWG=2, VLM=1, VLN=1, PIPE=6, PADL=4, UNROLL=1,
               BKFAST=0, WARPM=0, STAGE=1, MMA=2, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=2)),
    ("z", dict(MWG=32, NWG=16, KWG=8, MDIMC=8, NDIMC=4, VWG=1, VLM=1, VLN=1, PIPE=5, PADL=0, UNROLL=1,
               BKFAST=1, WARPM=0, STAGE=1, MMA=2, STREAMK=2, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=1)),
    ("d", dict(MWG=32, NWG=32, KWG=8, MDIMC=8, NDIMC=8, VWG=1, VLM=1, VLN=1, PIPE=7, PADL=2, UNROLL=1,
               BKFAST=0, WARPM=0, STAGE=1, MMA=2, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=2)),
    # d in 3 buffers keeps three steps' fragments: with two steps a slice, every slice's first
    # reads follow the barrier and its second ones are two steps ahead, as in the shipped d.
    ("d", dict(MWG=32, NWG=32, KWG=8, MDIMC=8, NDIMC=8, VWG=1, VLM=1, VLN=1, PIPE=6, PADL=4, UNROLL=1,
               BKFAST=0, WARPM=0, STAGE=1, MMA=2, STREAMK=2, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=2)),
]


@pytest.fixture
def fp64_matrix_device(monkeypatch):
    """The device the spelled-out instructions run on, told it has FP64 matrix instructions:
    Intel's runtime where it is there (the `intel` extra of the test dependencies), else device 0.
    PoCL makes a loop over the work-items of each stretch between barriers and copies the code
    after a barrier in a conditional block for each way into it; these pipelines hold many such
    barriers, and PoCL 3.1 took 10 to 90 s of one core over each kernel where Intel's compiler
    takes about a second."""
    from conftest import implementation_device
    from gemmtune.call import compute

    intel = implementation_device("intel")
    dev = compute.get_device(intel.index if intel else None)
    assert not dev.info.fp64_matrix
    monkeypatch.setattr(dev, "info", dataclasses.replace(dev.info, fp64_matrix=True))
    return intel.index if intel else None


# gemm hands numpy's row-major product to the kernel transposed: the kernel's M is the n of these
# shapes. 32 x 32 x 32 and 20 x 45 x 24 give it rows beyond the first 8 of a block, and the
# latter a partial second tile along M.
@pytest.mark.parametrize("shape", [*SHAPES, (20, 45, 24)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("code, config", MMA_CASES, ids=["d-mma-pipe6", "z-mma-bkfast1", "d-mma-pipe7",
                                                          "d-ahead-k16", "z-ahead-pipe5", "d-ahead-pipe7",
                                                          "d-ahead-three-sets"])
def test_gemm_with_matrix_instructions_matches_numpy(fp64_matrix_device, code, config, shape):
    from gemmtune.devices.opencl import resolve_device

    assert rt_broken(config, resolve_device(0), code) == [12]
    assert not rt_broken(config, make_device(fp64_matrix=True), code)
    check_every_case(code, config, shape, device=fp64_matrix_device)


def check_every_case(code: str, config: dict, shape, device=None) -> None:
    dtype = DTYPES[code]
    prec = precision_of(dtype)
    complex_ = code in "cz"
    flags = ["N", "T", "C"] if complex_ else ["N", "T"]
    m, n, k = shape
    rng = np.random.default_rng([m, n, k, "sdcz".index(code), config["BKFAST"]])
    for ta in flags:
        for tb in flags:
            for alpha, beta, c_kind in COMPLEX_SCALARS if complex_ else REAL_SCALARS:
                case = f"{code} {shape} trans_a={ta} trans_b={tb} alpha={alpha} beta={beta} c={c_kind}"
                a, b, c, got = run_case(code, config, shape, ta, tb, alpha, beta, c_kind, rng, device)
                assert got.dtype == dtype and got.shape == (m, n), case
                assert np.all(np.isfinite(got)), case
                value, scale = numpy_product(a, b, c, alpha, beta, ta, tb)
                np.testing.assert_allclose(got, value, rtol=0, atol=worst_case_tolerance(dtype, k, scale),
                                           err_msg=case)
                check = compare(got, Reference.compute(prec, a, b, c, alpha, beta, ta, tb), prec)
                assert check.passed, (case, check)


def finish(split, rounds: int) -> int:
    """When the last of ``rounds`` work-groups running at once ends, in K-slices, if each takes
    the next piece in the list as soon as it is free (as a GPU hands out work-groups)."""
    ends = [0] * rounds
    for _, s0, s1, _ in split.pieces:
        heapq.heappush(ends, heapq.heappop(ends) + s1 - s0)
    return max(ends)


def check_pieces(split, tiles: int, slices: int) -> None:
    """Every K-slice of every tile from split.first on in exactly one piece; whole tiles stored
    directly (slot -1), the parts of each split tile in consecutive slots in K order, as fixups says."""
    covered = sorted((t, s) for t, s0, s1, _ in split.pieces for s in range(s0, s1))
    assert covered == [(t, s) for t in range(split.first, tiles) for s in range(slices)]
    parts = sorted((t, s0, slot) for t, s0, s1, slot in split.pieces if s1 - s0 < slices)
    assert all(slot == -1 for t, s0, s1, slot in split.pieces if s1 - s0 == slices)
    assert [slot for _, _, slot in parts] == list(range(len(parts))) == list(range(split.slots))
    assert split.fixups == tuple((t, min(sl for u, _, sl in parts if u == t), sum(1 for u, _, _ in parts if u == t))
                                 for t in sorted({t for t, _, _ in parts}))


def test_stream_k_cuts_the_last_tiles_into_pieces_that_end_together():
    # 128 x 128 tiles, 2 work-groups on each of 132 compute units (264 a round), as on the H200.
    p = make_config(load_space(), "xgemm_rt", dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, STREAMK=2)).params
    # (Mp, Np, Kp, first tile cut, when the last work-group ends in K-slices after the whole rounds)
    cases = [
        (4096, 4096, 4096, 792, 450),     # 1,024 tiles: 3 rounds, 232 of 512 slices in 264 runs of 450
        (8192, 8192, 8192, 3960, 528),    # 4,096 tiles: 15 rounds, 136 (above half a round) of 1,024
        (4096, 3200, 4096, 528, 528),     # 800 tiles: 3 rounds and 8, too few alone: a round joins them
        (1024, 1024, 16384, 0, 497),      # 64 tiles, fewer than a round: all cut, about 4 pieces each
    ]
    for mp, np_, kp, first, end in cases:
        split = XGEMM_RT.split(p, mp, np_, kp, 132)
        tiles, slices = (mp // 128) * (np_ // 128), kp // 8
        assert split.first == first and finish(split, 264) == end == -(-(tiles - first) * slices // 264)
        check_pieces(split, tiles, slices)
        assert XGEMM_RT.global_size(p, mp, np_, split) == ((first + len(split.pieces)) * 16, 16)
        assert XGEMM_RT.workspace_bytes(p, get_precision("s"), split) == split.slots * 128 * 128 * 4
    # 4096^3: a run of 450 slices ends in one tile and goes on in the next, 494 pieces
    assert len(XGEMM_RT.split(p, 4096, 4096, 4096, 132).pieces) == 494
    # Nothing cut: 4224 x 4096 is 1,056 tiles, 4 whole rounds; 2048^3 is 256, 8 short of a round
    # (3 %: not worth a pass over the parts)
    for mp, np_, tiles in ((4224, 4096, 1056), (2048, 2048, 256)):
        split = XGEMM_RT.split(p, mp, np_, mp, 132)
        assert (split.first, split.pieces, split.fixups) == (tiles, (), ())
    assert XGEMM_RT.split({**p, "STREAMK": 0}, 4096, 4096, 4096, 132) is None
    assert XGEMM_RT.global_size({**p, "STREAMK": 0}, 4096, 4096) == (32 * 16, 32 * 16)


# 16 x 16 tiles of 8-deep K-slices: (what the case has, compute units it is split for, tiles
# along the kernel's M, slices)
STREAM_K_SHAPES = [
    ("whole-pieces", 3, 7, 5),   # 3 tiles alone, then whole tiles and parts in the list of pieces
    ("three-parts", 3, 1, 3),    # one tile, in three parts
    ("parts-only", 4, 7, 6),     # 4 tiles alone, then 3 tiles in 2 parts each
]


STREAM_K_CONFIG = dict(MWG=16, NWG=16, KWG=8, MDIMC=4, NDIMC=4, VWG=1, VLM=1, VLN=1, PIPE=6, PADL=0, UNROLL=1,
                       BKFAST=0, WARPM=0, STAGE=1, STREAMK=1, TRANSPOSEX=8, TRANSPOSEY=8)


@pytest.mark.parametrize("case, units, tiles, slices", STREAM_K_SHAPES, ids=[s[0] for s in STREAM_K_SHAPES])
@pytest.mark.parametrize("code", ["s", "c"])
def test_stream_k_adds_up_the_parts_of_split_tiles(code, case, units, tiles, slices):
    """GemmOperation split for a given number of compute units, so that the pieces are known:
    each case's kind of piece is there, and the products match numpy."""
    p = make_config(load_space(), "xgemm_rt", STREAM_K_CONFIG).params
    split = XGEMM_RT.split(p, 16 * tiles, 16, 8 * slices, units)
    check_pieces(split, tiles, slices)
    kind = {"whole-pieces": split.first > 0 and any(slot == -1 for *_, slot in split.pieces),
            "three-parts": any(parts == 3 for *_, parts in split.fixups),
            "parts-only": split.first > 0 and all(slot >= 0 for *_, slot in split.pieces)}
    assert kind[case] and split.fixups
    check_stream_k(code, STREAM_K_CONFIG, units, 16 * tiles - 3, 8 * slices - 5)


def test_candidates_share_one_build_of_the_preparation_and_fixup_kernels():
    """Two stream-K configurations that differ in the product alone (KWG, UNROLL): pad.cl's and
    xgemm_fixup's kernels come from programs built once for both, each product's program holds
    the product alone, and both compute right (C poisoned with NaN)."""
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.operation import GemmOperation

    _, dev = open_device(0)
    queue = cl.CommandQueue(cl.Context([dev]))
    s, source = get_precision("s"), load_space().family("xgemm_rt").source
    m, n, k, units = 16 * 7 - 3, 11, 8 * 5 - 5, 3
    ops = [GemmOperation(queue, make_config(load_space(), "xgemm_rt", {**STREAM_K_CONFIG, **more}), source, s,
                         m, n, k, "T", "T", compute_units=units) for more in ({}, {"KWG": 16, "UNROLL": 2})]
    programs = []
    for op in ops:
        assert [launch.kernel for _, launch, _ in op.launches] == ["pad_transpose", "pad_copy", "xgemm", "xgemm_fixup"]
        programs.append([kernel.get_info(cl.kernel_info.PROGRAM).int_ptr for kernel, _, _ in op.launches])
        assert op.program.get_info(cl.program_info.KERNEL_NAMES) == "xgemm"
    assert programs[0][0] == programs[0][1] == programs[1][0] == programs[1][1]   # pad.cl's, once
    assert programs[0][3] == programs[1][3] and programs[0][2] != programs[1][2]
    rng = np.random.default_rng()
    mf = cl.mem_flags
    a, b = np.asfortranarray(uniform((k, m), np.float32, rng)), np.asfortranarray(uniform((n, k), np.float32, rng))
    value, scale = numpy_product(a, b, None, 1.5, 0.0, "T", "T")
    for op in ops:
        c = np.full((m, n), np.nan, np.float32, order="F")
        bufs = [cl.Buffer(queue.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x) for x in (a, b, c)]
        op.enqueue(*bufs, 1.5, 0.0)[-1].wait()
        cl.enqueue_copy(queue, c, bufs[2])
        assert np.all(np.isfinite(c))
        np.testing.assert_allclose(c, value, rtol=0, atol=worst_case_tolerance(np.float32, k, scale))


# xgemm_fixup adds FIXV elements per work-item, as many of 4, 2, 1 as divide MWG: 4 above, and
# 2 and 1 here. One work-item along M (MDIMC = 1) also checks the asynchronous copies' advancing
# addresses, which PoCL once got wrong there.
@pytest.mark.parametrize("mwg, mdimc, width", [(6, 2, 2), (3, 1, 1)], ids=["fixv2", "fixv1"])
def test_stream_k_fixup_takes_as_many_elements_as_mwg_allows(mwg, mdimc, width):
    config = {**STREAM_K_CONFIG, "MWG": mwg, "MDIMC": mdimc}
    assert XGEMM_RT.fixup_width(make_config(load_space(), "xgemm_rt", config).params) == width
    check_stream_k("s", config, 3, 2 * mwg - 1, 8 * 4 - 3)   # 2 tiles of 4 slices in 3 runs


def check_stream_k(code: str, config: dict, units: int, m: int, k: int) -> None:
    """The product of (m x k) and (k x 11) through a GemmOperation split for ``units`` compute
    units, repeated on fresh operands and with beta (C poisoned with NaN where beta is 0),
    against numpy."""
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.operation import GemmOperation

    n = 11
    _, dev = open_device(0)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    dtype = DTYPES[code]
    cfg = make_config(load_space(), "xgemm_rt", config)
    op = GemmOperation(queue, cfg, load_space().family("xgemm_rt").source, precision_of(dtype), m, n, k,
                       compute_units=units)
    mp, np_, kp = XGEMM_RT.padded_shape(cfg.params, m, n, k)
    split = XGEMM_RT.split(cfg.params, mp, np_, kp, units)
    assert split.fixups and op.plan.launches[-2].global_size == XGEMM_RT.global_size(cfg.params, mp, np_, split)
    assert [launch.kernel for launch in op.plan.launches[-2:]] == ["xgemm", "xgemm_fixup"]
    assert op.kernel_events == 2
    rng = np.random.default_rng([units, m, k])
    mf = cl.mem_flags
    for alpha, beta in ((1.5, 0.0), (-0.5, 0.0), (0.75, -1.25) if code == "s" else (0.5 - 1j, 0.25 + 0.5j)):
        a = np.asfortranarray(uniform((m, k), dtype, rng))
        b = np.asfortranarray(uniform((k, n), dtype, rng))
        c0 = np.asfortranarray(uniform((m, n), dtype, rng)) if beta else None
        c = np.full((m, n), np.nan, dtype, order="F") if c0 is None else c0.copy(order="F")
        a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
        c_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
        events = op.enqueue(a_buf, b_buf, c_buf, alpha, beta)
        assert len(events) == 4   # A padded, B transposed, xgemm, xgemm_fixup
        cl.enqueue_copy(queue, c, c_buf)
        value, scale = numpy_product(a, b, c0, alpha, beta, "N", "N")
        assert np.all(np.isfinite(c))
        np.testing.assert_allclose(c, value, rtol=0, atol=worst_case_tolerance(dtype, k, scale))


@pytest.mark.parametrize("shape", [(33, 7, 129), (32, 32, 32)], ids=["33x7x129", "32x32x32"])
def test_result_does_not_depend_on_bkfast(shape):
    """Same operands through B staged n-fastest (after a transpose pass) and k-fastest (read as
    given): the same sums in the same order, so the same answer up to rounding."""
    code, k_fast = "c", CONFIGS["c"]
    n_fast = FLIPPED[1]
    assert {k for k in k_fast if k_fast[k] != n_fast[k]} == {"BKFAST"}
    dtype = DTYPES[code]
    m, n, k = shape
    rng = np.random.default_rng(99)
    for ta, tb in (("N", "N"), ("T", "N"), ("N", "T"), ("C", "C")):
        a = uniform((m, k) if ta == "N" else (k, m), dtype, rng)
        b = uniform((k, n) if tb == "N" else (n, k), dtype, rng)
        c = uniform((m, n), dtype, rng)
        results = [gemmtune.gemm(a, b, c, alpha=0.5 + 0.25j, beta=-1.0, trans_a=ta, trans_b=tb, config=rt(cfg))
                   for cfg in (k_fast, n_fast)]
        _, scale = numpy_product(a, b, c, 0.5 + 0.25j, -1.0, ta, tb)
        # Two roundings per element of difference at most: far below what any wrong term gives.
        u = np.finfo(dtype).eps / 2
        assert np.all(np.abs(results[0] - results[1]) <= 4 * u * scale), (ta, tb)
        assert np.all(np.isfinite(results[0]))


@pytest.mark.parametrize("config, number", [
    (dict(MWG=16, MDIMC=3), 1),                                                # 16 % 3
    (dict(MWG=16, NWG=16, KWG=6, MDIMC=2, NDIMC=2, VWG=4, VLM=1, VLN=1, BKFAST=1), 3),  # 6 % 4
    (dict(MWG=16, NWG=16, KWG=8, MDIMC=4, NDIMC=4, VWG=4, VLM=2, VLN=1, PADL=2), 4),    # 2 % 4
    (dict(MWG=16, NWG=16, KWG=8, MDIMC=4, NDIMC=8, VWG=1, VLM=1, VLN=1, UNROLL=3), 6),  # 8 % 3
    (dict(MWG=32, NWG=32, KWG=16, MDIMC=4, NDIMC=8, VWG=1, VLM=1, VLN=1, WARPM=8, UNROLL=1), 7),  # 4 % 8
    (dict(MWG=64, NWG=64, KWG=8, MDIMC=4, NDIMC=4, VWG=1, VLM=1, VLN=1, WARPM=0, UNROLL=1), 8),   # 16 x 16
    (dict(MWG=16, NWG=16, KWG=8, MDIMC=4, NDIMC=4, VWG=1, VLM=1, VLN=1, WARPM=0, UNROLL=1, PIPE=5, BKFAST=2), 11),
    (dict(MWG=16, NWG=8, KWG=8, MDIMC=8, NDIMC=4, VWG=1, VLM=1, VLN=1, WARPM=0, UNROLL=1, MMA=1), 12),  # PoCL lacks them
], ids=["c1", "c3-bkfast", "c4-padl", "c6", "c7", "c8", "c11", "c12"])
def test_invalid_rt_config_names_the_constraint(config, number):
    from gemmtune.devices.opencl import resolve_device
    from gemmtune.space import make_config

    full = make_config(load_space(), "xgemm_rt", config).params
    assert rt_broken(full, resolve_device(0), "z")[0] == number
    a = np.ones((4, 4), np.complex128)
    with pytest.raises(GemmtuneError, match=rf"constraint {number}\b"):
        gemmtune.gemm(a, a, config=rt(config))


# ---------------------------------------------------------------- gemmtune space --explain

def explain_json(args) -> dict:
    result = CliRunner().invoke(cli, ["space", "--device", "0", *args, "--explain", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def count(args) -> int:
    result = CliRunner().invoke(cli, ["space", "--device", "0", *args, "--count"])
    assert result.exit_code == 0, result.output
    return int(result.stdout.strip())


@pytest.mark.parametrize("code", ["s", "z"])
def test_space_explain_lists_rt_constraints(tmp_path, code):
    from gemmtune.devices.opencl import resolve_device

    rt_table = {**BASE, "MWG": [16, 32, 64], "NWG": [16, 64], "KWG": [6, 8, 16], "MDIMC": [2, 4, 8],
                "NDIMC": [4, 8], "VWG": [1, 4], "VLM": [1, 4], "PIPE": [1, 2, 6, 9], "PADL": [0, 2],
                "UNROLL": [1, 4], "BKFAST": [0, 1], "WARPM": [0, 8], "STAGE": [0, 1], "TRANSPOSEX": [16, 128]}
    k5_table = dict(TSM=[16, 32], TSN=[16, 24], TSK=[8], WPTN=[2, 16], PAD=[0], TRANSPOSEX=[8], TRANSPOSEY=[8])
    path = tmp_path / "space.toml"
    path.write_text(toml_space(k5_table, "xgemm_k5") + toml_space(rt_table, "xgemm_rt"))
    args = ["--space", str(path), "--precision", code]
    doc = explain_json(args)

    dev = resolve_device(0)
    configs = product(rt_table)
    broken = [rt_broken(p, dev, code) for p in configs]
    first = Counter(b[0] for b in broken if b)
    every = Counter(n for b in broken for n in b)
    rows = [r for r in doc["constraints"] if r["kernel"] == "xgemm_rt"]
    assert [r["constraint"] for r in rows] == list(range(1, 13))
    counts = {r["constraint"]: (r["removed"], r["broken"]) for r in rows}
    assert counts == {n: (first[n], every[n]) for n in range(1, 13)}
    assert [r["name"] for r in rows] == [c.name for c in XGEMM_RT.constraints]
    assert all(r["rule"] for r in rows)
    assert sum(r["removed"] for r in rows) > 0 and len(set(first)) >= 5   # the space exercises several
    k5_rows = [r for r in doc["constraints"] if r["kernel"] == "xgemm_k5"]
    assert [r["constraint"] for r in k5_rows] == [1, 2, 3, 4, 5]
    assert len(doc["constraints"]) == 17

    rt_valid = sum(not b for b in broken)
    k5_valid = sum(not broken_rules(p, dev, code) for p in product(k5_table))
    assert rt_valid > 0 and 0 < k5_valid < len(product(k5_table))
    assert doc["total"] == len(configs) + len(product(k5_table))
    assert doc["valid"] == doc["total"] - sum(r["removed"] for r in doc["constraints"])
    assert doc["valid"] == count(args) == rt_valid + k5_valid


def test_space_explain_of_the_shipped_space_counts_both_families():
    # the GPU space, given: on PoCL's CPU device the shipped space would be the CPU one
    from gemmtune.files.shipped import configs_dir

    gpu = ["--precision", "d", "--space", str(configs_dir() / "space.toml")]
    doc = explain_json(gpu)
    kernels = [r["kernel"] for r in doc["constraints"]]
    assert kernels.count("xgemm_rt") == 12 and kernels.count("xgemm_k5") == 5
    assert doc["total"] == load_space().size
    assert doc["valid"] == count(gpu)
    rt_removed = sum(r["removed"] for r in doc["constraints"] if r["kernel"] == "xgemm_rt")
    assert 0 < rt_removed < load_space().family("xgemm_rt").size


# ---------------------------------------------------------------- the kernel sources' shape

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
_CODE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b")


def unbalanced_arms(text: str) -> list[str]:
    """Each conditional arm (and the file outside them) whose `{` and `}` do not pair up, as
    "line N: ...": comments and string literals (PTX templates have braces) are left out."""
    text = _CODE.sub(lambda m: "\n" * m.group().count("\n"), text)
    depth = [0]                 # brace balance of the file, then of each open arm
    starts = [1]
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        directive = _DIRECTIVE.match(line)
        if directive:
            kind = directive.group(1)
            if kind in ("elif", "else", "endif"):
                assert len(depth) > 1, f"line {number}: #{kind} without #if"
                if depth[-1]:
                    problems.append(f"line {starts[-1]}: an arm ending on line {number} leaves {depth[-1]:+d} braces")
                depth.pop()
                starts.pop()
            if kind != "endif":
                depth.append(0)
                starts.append(number)
            continue
        depth[-1] += line.count("{") - line.count("}")
    assert len(depth) == 1, "unterminated #if"
    if depth[0]:
        problems.append(f"the file leaves {depth[0]:+d} braces")
    return problems


def test_kernel_files_are_short_and_no_conditional_arm_splits_a_brace():
    sources = sorted(KERNELS.glob("*.cl"))
    assert {"xgemm_rt.cl", "xgemm_rt_checks.cl", "xgemm_rt_copy.cl", "xgemm_rt_compute.cl", "xgemm_rt_mma.cl",
            "xgemm_rt_pipe.cl", "xgemm_rt_streamk.cl"} <= {path.name for path in sources}
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 400, path.name
        assert unbalanced_arms(text) == [], path.name


def test_the_brace_check_finds_a_brace_opened_in_one_arm_and_closed_after_it():
    assert unbalanced_arms("#if A\n  {\n#else\n  {\n#endif\n}\n") == [
        "line 1: an arm ending on line 3 leaves +1 braces", "line 3: an arm ending on line 5 leaves +1 braces",
        "the file leaves -1 braces"]
    assert unbalanced_arms('#if A\n  x = "{"; // {\n#elif B\n  { }\n#endif\n') == []
    assert unbalanced_arms("#ifndef A\n#define B { \\\n  }\n#endif\n") == []
