"""The search space, its constraints and the shipped defaults (pure Python, except the PoCL check
of configs/defaults.toml).

Each constraint test loads a small space whose values are chosen so that some configurations
break that constraint and no other: if the library dropped or changed the constraint, the valid
set would differ from the one the test derives from the issue's rules (helpers_foundation).
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import tomllib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import (  # noqa: E402
    BYTES, GPU_LIKE, NO_DOUBLES, PARAMS, POCL_LIKE, REPO, broken_rules, cl_defaults, make_device,
    product, toml_space,
)

from gemmtune.space.defaults import FALLBACK, default_config, shipped_default  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.devices.info import forking_is_safe  # noqa: E402
from gemmtune.families import FAMILIES, XGEMM_K5, kernel_parameters  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.files.shipped import load_kernel_source  # noqa: E402
import gemmtune.space as space_module  # noqa: E402
import gemmtune.space.valid as valid_module  # noqa: E402
from gemmtune.space import (  # noqa: E402
    Config, check_config, load_space, make_config, parse_space, shipped_families)
from gemmtune.space.valid import (  # noqa: E402
    ValidConfigs, count_valid, explain, iter_valid_configs, sample_valid, valid_configs)

# Every parameter at a small value that breaks nothing on the devices below; each test widens
# only the parameters its constraint is about.
BASE = dict(TSM=[8], TSN=[8], TSK=[8], WPTN=[1], PAD=[0], TRANSPOSEX=[8], TRANSPOSEY=[8], TRANSPOSEW=[1])


def key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def write_space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(text)
    return path


def k5_counts(space, dev, prec) -> dict[int, tuple[int, int]]:
    """explain() for the xgemm_k5 family: constraint number -> (removed, broken)."""
    return {c.constraint.number: (c.removed, c.broken) for c in explain(space, dev, prec)
            if c.constraint in XGEMM_K5.constraints}


def check_against_rules(space, dev, code: str, configs: list[dict]) -> None:
    """valid_configs, explain and check_config agree with the issue's rules on ``configs``."""
    prec = get_precision(code)
    valid = valid_configs(space, dev, prec)
    assert len(valid) == len({key(c.params) for c in valid}), "duplicate configurations"
    assert {key(c.params) for c in valid} == {key(p) for p in configs if not broken_rules(p, dev, code)}

    broken = [broken_rules(p, dev, code) for p in configs]
    first = Counter(b[0] for b in broken if b)
    every = Counter(n for b in broken for n in b)
    assert k5_counts(space, dev, prec) == {n: (first[n], every[n]) for n in range(1, 6)}

    for p, b in zip(configs, broken):
        if b:
            with pytest.raises(GemmtuneError, match=rf"constraint {b[0]}\b"):
                check_config(Config.of("xgemm_k5", p), dev, prec)


def only_breaking(n: int, configs: list[dict], dev, code: str) -> list[dict]:
    return [p for p in configs if broken_rules(p, dev, code) == [n]]


def run_constraint_case(tmp_path, table, dev, code, n) -> list[dict]:
    """Load ``table`` as a space file, compare with the rules, and return the configurations that
    break constraint ``n`` alone (never empty, or the test could not catch a dropped constraint)."""
    space = load_space(write_space(tmp_path, toml_space(table)))
    configs = product(table)
    assert space.size == len(configs)
    check_against_rules(space, dev, code, configs)
    alone = only_breaking(n, configs, dev, code)
    assert alone, f"test space has no configuration that breaks constraint {n} alone"
    assert any(not broken_rules(p, dev, code) for p in configs), "test space has no valid configuration"
    return alone


# ---------------------------------------------------------------- constraints 1-5

def test_constraint_1_wptn_divides_tsn(tmp_path):
    # TSM != TSN so that "WPTN divides TSM" would give another set; WPTN = 3 divides 12 and 24 only.
    table = {**BASE, "TSM": [8, 16], "TSN": [12, 16, 24], "TSK": [24, 48], "WPTN": [1, 2, 3, 4, 8]}
    alone = run_constraint_case(tmp_path, table, GPU_LIKE, "s", 1)
    assert any((p["TSN"], p["WPTN"]) == (12, 8) for p in alone)
    valid = [p for p in product(table) if not broken_rules(p, GPU_LIKE, "s")]
    assert any(p["TSM"] % p["WPTN"] for p in valid)


def _work_group_parts(p, dev):
    rtsn = p["TSN"] // p["WPTN"]
    return {"dim0": p["TSM"] <= dev.max_work_item_sizes[0], "dim1": rtsn <= dev.max_work_item_sizes[1],
            "total": p["TSM"] * rtsn <= dev.max_work_group_size}


def test_constraint_2_work_group(tmp_path):
    # Small limits make each of the three parts of the rule break on its own:
    # TSM=64 > 32 (dimension 0), RTSN=32 > 16 (dimension 1), 32 x 16 = 512 > 256 (total).
    dev = make_device(max_work_item_sizes=(32, 16, 16), max_work_group_size=256, local_mem_bytes=1 << 20)
    table = {**BASE, "TSM": [8, 32, 64], "TSN": [4, 8, 16, 32], "TSK": [32, 64]}
    alone = run_constraint_case(tmp_path, table, dev, "s", 2)
    for part in ("dim0", "dim1", "total"):
        assert any([k for k, ok in _work_group_parts(p, dev).items() if not ok] == [part] for p in alone), part
    # The limits are inclusive: TSM = 32 with RTSN = 8 is exactly 256 work-items, and valid.
    space = load_space(write_space(tmp_path, toml_space(table)))
    valid = {key(c.params) for c in valid_configs(space, dev, get_precision("s"))}
    assert key({**{k: v[0] for k, v in BASE.items()}, "TSM": 32, "TSN": 8, "TSK": 32}) in valid


def test_constraint_3_loads_per_thread(tmp_path):
    table = {**BASE, "TSM": [8, 16, 32], "TSN": [8, 16, 32], "TSK": [4, 8, 16], "WPTN": [1, 2, 4]}
    alone = run_constraint_case(tmp_path, table, GPU_LIKE, "s", 3)

    def parts(p):
        wgs = p["TSM"] * p["TSN"] // p["WPTN"]
        return (p["TSK"] * p["TSM"]) % wgs == 0, (p["TSK"] * p["TSN"]) % wgs == 0

    # Both tiles count: some configurations split only A's tile unevenly, others only B's.
    assert any(parts(p) == (False, True) for p in alone)
    assert any(parts(p) == (True, False) for p in alone)


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_constraint_4_local_memory(tmp_path, code):
    # 8 KiB of local memory: for each precision some configuration needs exactly that much
    # (the limit is inclusive), and PAD alone pushes some configurations over it.
    dev = make_device(local_mem_bytes=8192)
    table = {**BASE, "TSM": [16, 32], "TSN": [16, 32], "TSK": [16, 32], "WPTN": [1, 2, 4], "PAD": [0, 1, 3]}
    alone = run_constraint_case(tmp_path, table, dev, code, 4)

    def need(p):
        return (p["TSK"] * p["TSM"] + p["TSN"] * (p["TSK"] + p["PAD"])) * BYTES[code]

    configs = product(table)
    assert any(need(p) == 8192 and not broken_rules(p, dev, code) for p in configs)
    assert any(not broken_rules({**p, "PAD": 0}, dev, code) for p in alone)


@pytest.mark.parametrize("limit", ["local memory", "work-group"])
def test_constraint_5_transpose_tile(tmp_path, limit):
    if limit == "local memory":
        # 1088 bytes = 16 rows of 17 floats: 16x16 fits exactly, and so does 16x8 moving 2 each;
        # 8x32 (32 * 9 * 4 = 1152) does not, though 32x8 (8 * 33 * 4 = 1056) does, and 8x32
        # without the +1 column would; 32x8 moving 2 each (16 rows of 33) does not.
        dev = make_device(local_mem_bytes=1088, max_work_group_size=4096, max_work_item_sizes=(4096,) * 3)
    else:
        dev = make_device(max_work_group_size=128, local_mem_bytes=1 << 20)
    table = {**BASE, "TRANSPOSEX": [8, 16, 32], "TRANSPOSEY": [8, 16, 32], "TRANSPOSEW": [1, 2]}
    alone = run_constraint_case(tmp_path, table, dev, "s", 5)
    fits_wg = [p["TRANSPOSEX"] * p["TRANSPOSEY"] <= dev.max_work_group_size for p in alone]
    assert not any(fits_wg) if limit == "work-group" else all(fits_wg)
    space = load_space(write_space(tmp_path, toml_space(table)))
    valid = {(c.params["TRANSPOSEX"], c.params["TRANSPOSEY"], c.params["TRANSPOSEW"])
             for c in valid_configs(space, dev, get_precision("s"))}
    if limit == "local memory":
        assert {(16, 16, 1), (32, 8, 1), (16, 8, 2)} <= valid
        assert not {(8, 32, 1), (32, 8, 2), (16, 16, 2)} & valid
    else:
        # moving more elements per work-item does not change the work-group
        assert {(8, 16, 1), (16, 8, 1), (8, 16, 2), (16, 8, 2)} <= valid
        assert not {(16, 16, 1), (16, 16, 2)} & valid


@pytest.fixture(scope="module")
def k5_space(tmp_path_factory):
    """The shipped [xgemm_k5] table alone, read here with tomllib (the shipped file may hold
    other families, whose large spaces would only slow these tests down)."""
    table = tomllib.loads((REPO / "configs" / "space.toml").read_text())["xgemm_k5"]
    path = tmp_path_factory.mktemp("k5") / "space.toml"
    path.write_text(toml_space(table))
    return table, load_space(path)


@pytest.mark.parametrize("code", ["d", "z"])
def test_constraint_6_doubles_need_fp64(k5_space, code):
    prec, space = get_precision(code), k5_space[1]
    config = make_config(space, "xgemm_k5", {})
    for call in (lambda: valid_configs(space, NO_DOUBLES, prec), lambda: explain(space, NO_DOUBLES, prec),
                 lambda: check_config(config, NO_DOUBLES, prec), lambda: default_config(NO_DOUBLES, prec)):
        with pytest.raises(GemmtuneError, match="double"):
            call()
    # The same device is fine in single precision, and a device with doubles is fine in this one.
    assert valid_configs(space, NO_DOUBLES, get_precision({"d": "s", "z": "c"}[code]))
    assert valid_configs(space, GPU_LIKE, prec)


@pytest.mark.parametrize("dev", [GPU_LIKE, POCL_LIKE], ids=["gpu-like", "pocl-like"])
@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_shipped_space_follows_the_rules(k5_space, dev, code):
    """The shipped xgemm_k5 space: the product of configs/space.toml's lists."""
    table, space = k5_space
    assert set(table) == set(PARAMS)
    configs = product(table)
    assert space.size == len(configs) == load_space().family("xgemm_k5").size
    prec = get_precision(code)
    valid = valid_configs(space, dev, prec)
    assert {key(c.params) for c in valid} == {key(p) for p in configs if not broken_rules(p, dev, code)}
    broken = [broken_rules(p, dev, code) for p in configs]
    first = Counter(b[0] for b in broken if b)
    every = Counter(n for b in broken for n in b)
    assert k5_counts(space, dev, prec) == {n: (first[n], every[n]) for n in range(1, 6)}
    assert len(configs) - sum(first.values()) == len(valid) > 0


@pytest.mark.parametrize("dev", [GPU_LIKE, POCL_LIKE], ids=["gpu-like", "pocl-like"])
def test_a_point_of_the_space_that_breaks_no_constraint_is_valid(k5_space, dev):
    """The search tells valid proposals by this rule instead of a set of the valid ones."""
    _, space = k5_space
    prec = get_precision("s")
    valid = valid_configs(space, dev, prec)
    ruled = [c for c in space.configs() if space.allows(c) and FAMILIES[c.kernel].broken(c.params, dev, prec) is None]
    assert ruled == valid and 0 < len(valid) < space.size
    c = valid[0]
    assert not space.allows(Config.of(c.kernel, {**c.params, "TSM": 48}))                        # not a listed value
    assert not space.allows(Config.of(c.kernel, {k: v for k, v in c.params.items() if k != "PAD"}))   # one missing
    assert not space.allows(Config.of(c.kernel, {**c.params, "MWG": 64}))                          # one too many
    assert not space.allows(Config.of("xgemm_rt", c.params))                                      # not its family


# ---------------------------------------------------------------- space files

@pytest.mark.parametrize("text, match", [
    ("[xgemm_k5\nTSM = [16]\n", "TOML"),
    ("[xgemm_k5]\nTSM = [16,\n", "TOML"),
    ("[nosuchkernel]\nTSM = [16]\n", "nosuchkernel"),
    ("[xgemm_k5]\nFOO = [1, 2]\n", "FOO"),
    ("[xgemm_k5]\nTSM = [16, 0]\n", "TSM"),
    ("[xgemm_k5]\nTSM = 0\n", "TSM"),
    ("[xgemm_k5]\nTSN = [-16]\n", "TSN"),
    ("[xgemm_k5]\nTSK = [8.5]\n", "TSK"),
    ("[xgemm_k5]\nTSK = [16.0]\n", "TSK"),
    ("[xgemm_k5]\nWPTN = [\"4\"]\n", "WPTN"),
    ("[xgemm_k5]\nWPTN = [true]\n", "WPTN"),
    ("[xgemm_k5]\nTRANSPOSEX = [false]\n", "TRANSPOSEX"),
    ("[xgemm_k5]\nPAD = [-1]\n", "PAD"),
    ("[xgemm_k5]\nPAD = [0, true]\n", "PAD"),
], ids=["unclosed-table", "unclosed-list", "unknown-family", "unknown-parameter", "zero", "zero-scalar",
        "negative", "fraction", "float", "string", "bool", "bool-false", "negative-pad", "bool-pad"])
def test_bad_space_file(tmp_path, text, match):
    with pytest.raises(GemmtuneError, match=match):
        load_space(write_space(tmp_path, text))


def test_unreadable_space_file(tmp_path):
    missing = tmp_path / "missing.toml"
    with pytest.raises(GemmtuneError, match="missing.toml"):
        load_space(missing)


def test_pad_zero_is_allowed(tmp_path):
    space = load_space(write_space(tmp_path, "[xgemm_k5]\nPAD = [0, 2]\n"))
    assert sorted({c.params["PAD"] for c in space.configs()}) == [0, 2]
    assert any(c.params["PAD"] == 0 for c in valid_configs(space, GPU_LIKE, get_precision("s")))


def test_left_out_parameters_take_the_cl_defaults(tmp_path):
    defaults = {k: v for k, (v, _) in cl_defaults().items() if k != "PRECISION"}
    space = load_space(write_space(tmp_path, "[xgemm_k5]\nTSM = [16, 32]\nPAD = [0]\n"))
    configs = list(space.configs())
    assert space.size == len(configs) == 2
    assert [c.params for c in configs] == [{**defaults, "TSM": tsm, "PAD": 0} for tsm in (16, 32)]


def test_kernel_parameters_of_the_kernel_file():
    """The #ifndef defaults of xgemm_k5.cl and the files it includes, as a line-by-line read of
    the .cl files gives them; each has a one-line comment."""
    expected = cl_defaults()
    assert set(expected) == {*PARAMS, "PRECISION"}
    params = kernel_parameters(load_kernel_source("xgemm_k5.cl"))
    assert params == expected
    assert all(comment for _, comment in params.values())
    assert XGEMM_K5.defaults == {k: v for k, (v, _) in expected.items()}
    # The shipped default build is itself valid: the .cl file compiles on its own.
    assert not broken_rules(XGEMM_K5.defaults, GPU_LIKE, "s")


def test_kernel_parameters_reads_only_ifndef_blocks():
    source = ("#ifndef FOO\n#define FOO 12   // the foo\n#endif\n"
              "#define BAR 3   // derived, not tunable\n"
              "#ifndef BAZ\n  #define BAZ -7\n#endif\n"
              "#ifndef QUX\n#define OTHER 5\n#endif\n")
    assert kernel_parameters(source) == {"FOO": (12, "the foo"), "BAZ": (-7, "")}


# ---------------------------------------------------------------- configurations

def test_make_config_fills_defaults():
    space = load_space()
    defaults = {k: v for k, (v, _) in cl_defaults().items() if k != "PRECISION"}
    assert make_config(space, None, {}).params == defaults
    config = make_config(space, "xgemm_k5", {"TSN": 16, "PAD": 0})
    assert config.kernel == "xgemm_k5"
    assert config.params == {**defaults, "TSN": 16, "PAD": 0}


@pytest.mark.parametrize("kernel, given, match", [
    (None, {"TSX": 16}, "TSX"),
    (None, {"PRECISION": 64}, "PRECISION"),
    (None, {"TSM": 0}, "TSM"),
    (None, {"WPTN": -2}, "WPTN"),
    (None, {"TSK": True}, "TSK"),
    ("nosuchkernel", {}, "nosuchkernel"),
])
def test_make_config_rejects(kernel, given, match):
    with pytest.raises(GemmtuneError, match=match):
        make_config(load_space(), kernel, given)


def test_check_config_accepts_a_valid_configuration():
    config = make_config(load_space(), None, {"TSM": 16, "TSN": 32, "TSK": 8, "WPTN": 4, "PAD": 1})
    assert not broken_rules(config.params, GPU_LIKE, "z")
    check_config(config, GPU_LIKE, get_precision("z"))  # no exception


# ---------------------------------------------------------------- shipped defaults

def _defaults_toml() -> dict:
    return tomllib.loads((REPO / "configs" / "defaults.toml").read_text())


def _entries():
    table = _defaults_toml()
    return [(t, code) for t in table for code in table[t]]


def _entry_config(device_type: str, code: str, cls: str = "large") -> Config:
    """The [TYPE.p] table (the large class), or its sub-table [TYPE.p.CLASS]."""
    entry = dict(_defaults_toml()[device_type][code])
    while cls != "large" and cls not in entry:   # as gemmtune.space.defaults.class_entry falls back
        cls = FALLBACK.get(cls, "large")
    if cls != "large":
        entry = dict(entry[cls])
    entry = {k: v for k, v in entry.items() if not isinstance(v, dict)}
    return make_config(load_space(device=device_type.split("-")[0]), entry.pop("KERNEL"), entry)   # CPU-256: CPU


def test_defaults_file_covers_every_type_precision_and_shape_class():
    from gemmtune.space.defaults import SHAPE_CLASSES

    table = _defaults_toml()
    assert {"CPU", "GPU", "OTHER"} <= set(table)
    assert all(set(table[t]) == set("sdcz") for t in table)
    # Sub-tables name known classes only, and every type and precision has a family that reads
    # operands in place for views: a "views" entry, or on a CPU the large entry itself: xgemm_cpu
    # reads views and serves every class but the tiny one (20-40 times the direct family's speed
    # on small problems), which takes xgemm_cpu without packing.
    for t in table:
        for code in "sdcz":
            classes = {k for k, v in table[t][code].items() if isinstance(v, dict)}
            assert classes <= set(SHAPE_CLASSES[1:]), (t, code, classes)
            if t.startswith("CPU"):   # and batches of problems, of xgemm_cpu too
                assert classes - {"batch_tiny", "batch_small", "batch_medium"} == {"tiny"}
                assert _entry_config(t, code).kernel == "xgemm_cpu"
                assert all(_entry_config(t, code, cls).kernel == "xgemm_cpu" for cls in classes)
                assert _entry_config(t, code, "tiny").kernel == "xgemm_cpu"
            else:
                assert "views" in classes, (t, code, classes)
            assert FAMILIES[_entry_config(t, code, "views").kernel].takes_views


def _class_entries():
    table = _defaults_toml()
    return [(t, code, cls) for t in table for code in table[t]
            for cls, v in table[t][code].items() if isinstance(v, dict)]


@pytest.mark.parametrize("device_type, code, cls", _class_entries())
def test_every_shape_class_default_is_valid_on_pocl_and_a_gpu(device_type, code, cls):
    config = _entry_config(device_type, code, cls)
    assert config == shipped_default(device_type, get_precision(code), cls)
    gpu = dataclasses.replace(GPU_LIKE, fp64_matrix=True)
    for dev in (_pocl_as(device_type), gpu):
        if config.params.get("MMA") and not dev.fp64_matrix:
            # The device's feature: without it, such an entry breaks constraint 12 alone.
            assert FAMILIES[config.kernel].broken(config.params, dev, get_precision(code)).number == 12
            continue
        if dev is gpu and (device_type, code, cls) in MORE_LOCAL_MEMORY:
            # Found where a work-group gets 226 KiB: valid there; with 48 KiB, the same tile in
            # fewer local buffers.
            assert FAMILIES[config.kernel].broken(config.params, dev, get_precision(code)).number == 5
            assert not breaks(config, H200_LIKE, code)
            shape = {"batch_small": (64, 64, 64), "batch_medium": (128, 128, 128)}[cls]
            fallback = default_config(dev, get_precision(code), shape, batch=2)
            assert {k for k in config.params if fallback.params[k] != config.params[k]} == {"PIPE"}
            continue
        assert not breaks(config, dev, code)


# Class entries that take more than 48 KiB of local memory (as the large z entry does)
MORE_LOCAL_MEMORY = {("GPU", "d", "batch_medium"), ("GPU", "z", "batch_small"), ("GPU", "z", "batch_medium")}


def test_a_class_without_an_entry_takes_the_next_larger_ones():
    from gemmtune.space.defaults import class_entry, shape_class, shipped_defaults

    found = shipped_defaults("GPU", get_precision("d"))
    assert "small" not in found and "skinny_m" not in found
    assert class_entry(found, "small") == class_entry(found, "skinny_m") == found["medium"] != found["large"]
    assert shape_class(100, 100, 100) == "small" and shape_class(768, 768, 768) == "medium"
    assert shape_class(2048, 2048, 2048) == "large" and shape_class(6144, 6144, 128) == "large"
    assert shape_class(2, 4096, 4096) == "skinny_m" and shape_class(4096, 64, 1024) == "skinny_n"
    assert shape_class(1, 4096, 4096) == shape_class(4096, 1, 100) == "vector" and shape_class(1, 64, 64) == "tiny"
    assert shape_class(4096, 65, 1024) == "medium" and shape_class(4096, 8, 100) == "small"
    assert shape_class(64, 64, 64) == "tiny" and shape_class(16, 16, 16) == "tiny" and shape_class(65, 64, 64) == "small"
    # The GPU has no tiny entry: a tiny problem takes the small one's; the CPU has one of its own.
    assert class_entry(shipped_defaults("GPU", get_precision("s")), "tiny") == shipped_defaults("GPU", get_precision("s"))["small"]
    cpu = shipped_defaults("CPU", get_precision("s"))
    assert class_entry(cpu, "tiny") == cpu["tiny"] != cpu["large"] and cpu["tiny"].params["PACKA"] == 0
    # Vectors: the thin family on a GPU; a CPU has no entry of its own and takes its skinny one's.
    assert all(shipped_defaults("GPU", get_precision(c))["vector"].kernel == "xgemm_thin" for c in "sdcz")
    assert class_entry(cpu, "vector") == class_entry(cpu, "skinny_m")


def breaks(config: Config, dev, code: str) -> bool:
    """Whether ``config`` breaks a constraint. For xgemm_k5 by the issue's rules (and the library
    must agree); other families' entries are judged by their own constraints in the library."""
    library = FAMILIES[config.kernel].broken(config.params, dev, get_precision(code)) is not None
    if config.kernel == "xgemm_k5":
        assert library == bool(broken_rules(config.params, dev, code)), config
    return library


# A CPU table's entries are for the register file it is chosen by (gemmtune.space.defaults.table_name).
REGISTER_FILES = {"CPU": (32, 64), "CPU-256": (16, 32)}


def _pocl_as(table: str):
    """The PoCL device, with the register file of ``table`` where that is a CPU table."""
    from gemmtune.devices.opencl import resolve_device

    dev = resolve_device(0)
    if table in REGISTER_FILES:
        dev = dataclasses.replace(dev, vector_registers=REGISTER_FILES[table][0], vector_bytes=REGISTER_FILES[table][1])
    return dev


@pytest.mark.parametrize("device_type, code", _entries())
def test_every_shipped_default_is_valid_on_pocl(device_type, code):
    dev = _pocl_as(device_type)
    config = _entry_config(device_type, code)
    assert config == shipped_default(device_type, get_precision(code))
    if config.params.get("MMA"):
        # FP64 matrix instructions are a feature of the device (the H200's): with them, PoCL's
        # limits hold the entry; without them, it breaks constraint 12 alone.
        assert FAMILIES[config.kernel].broken(config.params, dev, get_precision(code)).number == 12
        dev = dataclasses.replace(dev, fp64_matrix=True)
    assert not breaks(config, dev, code)
    check_config(config, dev, get_precision(code))


# The H200 as gemmtune sees it: FP64 matrix instructions, 226 KiB of local memory per work-group.
H200_LIKE = dataclasses.replace(GPU_LIKE, fp64_matrix=True, local_mem_bytes=226 * 1024)


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_gpu_defaults_are_valid_on_a_gpu_like_device(code):
    config = _entry_config("GPU", code)
    assert not breaks(config, H200_LIKE, code)
    # A device on which the shipped entry is valid gets it unchanged.
    assert default_config(H200_LIKE, get_precision(code)) == config
    # Only z's takes more than 48 KiB of local memory; with 48 KiB a GPU gets the nearest
    # configuration that fits, fewer local buffers of the same tile.
    small = dataclasses.replace(H200_LIKE, local_mem_bytes=48 * 1024)
    assert bool(breaks(config, small, code)) == (code == "z")
    fallback = default_config(small, get_precision(code))
    assert not breaks(fallback, small, code)
    changed = {k for k in config.params if fallback.params[k] != config.params[k]}
    assert changed == ({"PIPE"} if code == "z" else set())
    assert fallback.params["PIPE"] < config.params["PIPE"] or code != "z"


@pytest.mark.parametrize("code", ["d", "z"])
def test_a_gpu_without_fp64_matrix_instructions_gets_the_same_tile_without_them(code):
    config = _entry_config("GPU", code)
    gpu = dataclasses.replace(H200_LIKE, fp64_matrix=False)
    assert config.params["MMA"] == 2 and breaks(config, gpu, code)
    # The nearest valid configuration: one step away, the same tile multiplied work-item by work-item.
    assert default_config(gpu, get_precision(code)) == Config.of(config.kernel, {**config.params, "MMA": 0})


@pytest.mark.parametrize("device_type, registers, table", [
    ("ACCELERATOR", (0, 0), "OTHER"), ("CPU", (0, 0), "CPU"), ("CPU", (32, 64), "CPU"), ("CPU", (16, 32), "CPU-256")])
def test_default_config_picks_the_table_of_the_device_type(device_type, registers, table):
    dev = make_device(type=device_type, local_mem_bytes=1 << 20, max_work_group_size=4096,
                      max_work_item_sizes=(4096,) * 3, vector_registers=registers[0], vector_bytes=registers[1])
    for code in "sdcz":
        for cls in ("large", "tiny"):
            config = _entry_config(table, code, cls)
            assert not breaks(config, dev, code), (code, cls)
            shape = (16, 16, 16) if cls == "tiny" else None
            assert default_config(dev, get_precision(code), shape) == config


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_blocks_sized_for_avx512_break_the_register_budget_of_avx2(code):
    """Why a CPU compiled for 256-bit vectors has a table of its own: the CPU table's large
    entries hold more vectors than its 16 registers (s: 31 registers of 64 bytes, 62 of 32)."""
    avx2 = make_device(type="CPU", local_mem_bytes=1 << 20, max_work_group_size=4096,
                       max_work_item_sizes=(4096,) * 3, vector_registers=16, vector_bytes=32)
    config = _entry_config("CPU", code)
    assert FAMILIES[config.kernel].broken(config.params, avx2, get_precision(code)).number == 2


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
@pytest.mark.parametrize("device_type", ["GPU", "OTHER"])
def test_default_config_repairs_a_default_that_breaks_a_constraint(device_type, code):
    # 4 KiB of local memory and 64 work-items: too little for every shipped entry.
    dev = make_device(type=device_type, local_mem_bytes=4096, max_work_group_size=64,
                      max_work_item_sizes=(64, 64, 64))
    assert breaks(_entry_config(device_type, code), dev, code), "entry fits: nothing to repair"
    config = default_config(dev, get_precision(code))
    assert not breaks(config, dev, code)
    check_config(config, dev, get_precision(code))
    assert config in valid_configs(load_space(device=dev), dev, get_precision(code))


@pytest.mark.parametrize("code", ["s", "d", "c", "z"])
def test_cpu_defaults_need_no_local_memory_nor_large_work_groups(code):
    """xgemm_cpu's defaults fit a CPU device with next to nothing: one work-item per group,
    no local memory. (The device's register file is not known here: AVX-512's is assumed.)"""
    dev = make_device(type="CPU", local_mem_bytes=4096, max_work_group_size=1, max_work_item_sizes=(1, 1, 1))
    config = default_config(dev, get_precision(code))
    assert config == _entry_config("CPU", code) and config.kernel == "xgemm_cpu"
    assert default_config(dev, get_precision(code), (100, 100, 100)) == config
    assert default_config(dev, get_precision(code), (32, 4096, 4096), views=True) == config


# ---------------------------------------------------------------- spaces per device type

def test_each_device_type_gets_its_shipped_space():
    from gemmtune.devices.opencl import resolve_device

    cpu = load_space(device=resolve_device(0))
    assert resolve_device(0).type == "CPU"
    assert cpu.origin == "configs/space-cpu.toml" and [f.family.name for f in cpu.families] == ["xgemm_cpu"]
    assert load_space(device=POCL_LIKE).origin == "configs/space-cpu.toml"
    gpu = load_space(device=GPU_LIKE)
    assert gpu.origin == "configs/space.toml"
    assert [f.family.name for f in gpu.families] == ["xgemm_k5", "xgemm_rt", "xgemm_direct", "xgemm_thin"]
    # without a device (or for a type of no space of its own), the GPU space
    assert load_space().origin == load_space(device="ACCELERATOR").origin == "configs/space.toml"
    # records of any shipped family stay readable whatever the device
    assert {f.family.name for f in shipped_families().families} == set(FAMILIES)


@pytest.mark.parametrize("table", sorted(REGISTER_FILES))
def test_the_cpu_space_follows_the_measurements(table):
    dev = _pocl_as(table)
    registers, register_bytes = REGISTER_FILES[table]
    fs = load_space(device=dev).family("xgemm_cpu")
    assert fs.values["PACKA"] == [1] and fs.values["WGS"] == [1]
    # 32 and 64 bytes of a real part; complex elements whole (1) too; with AVX2's 16 registers, the
    # 64-byte parts of c and z (two registers each, twice) leave no room for a block of the space
    wide = registers == 32
    widths = {"s": {8, 16}, "d": {4, 8}, "c": {1, 8, 16} if wide else {1, 8}, "z": {1, 4, 8} if wide else {1, 4}}
    for code in "sdcz":
        valid = fs.valid(dev, get_precision(code))
        assert {c.params["VW"] for c in valid} == widths[code]
        assert all(c.params["PACKB"] == 1 for c in valid if c.params["ORDER"] == 1)
        for c in valid:
            parts = 2 if code in "cz" and c.params["VW"] > 1 else 1   # real and imaginary vectors
            per_vector = -(-c.params["VW"] * BYTES[code] // parts // register_bytes)
            assert (c.params["MV"] * c.params["NR"] + c.params["MV"] + 1) * per_vector * parts <= registers


def test_space_command_takes_the_device_space_unless_one_is_given(tmp_path, k5_space):
    from click.testing import CliRunner

    from gemmtune.cli import cli
    from gemmtune.devices.opencl import resolve_device

    dev, prec = resolve_device(0), get_precision("d")
    shipped = CliRunner().invoke(cli, ["space", "--precision", "d", "--count"])
    assert shipped.exit_code == 0, shipped.output
    assert int(shipped.output) == count_valid(load_space(device=dev), dev, prec) > 0
    path = tmp_path / "k5.toml"
    path.write_text(toml_space(k5_space[0]))
    given = CliRunner().invoke(cli, ["space", "--precision", "d", "--count", "--space", str(path)])
    assert given.exit_code == 0, given.output
    assert int(given.output) == count_valid(k5_space[1], dev, prec) != int(shipped.output)
    listed = CliRunner().invoke(cli, ["space", "--precision", "d", "--format", "csv"])
    assert listed.exit_code == 0 and "xgemm_cpu" in listed.output and "xgemm_k5" not in listed.output


# ---------------------------------------------------------------- counting, streaming, sampling

# A register-tiled table small enough to list, with values that break most of its constraints.
RT_SMALL = dict(MWG=[16, 32, 64], NWG=[16, 64], KWG=[8, 16], MDIMC=[8, 16], NDIMC=[8, 32], VWG=[1, 2],
                VLM=[1, 2], VLN=[1, 4], PIPE=[0, 2, 5], PADL=[0, 4], UNROLL=[1, 8], WARPM=[0, 8],
                BKFAST=[0, 2], STAGE=[0, 1], MMA=[0, 1], STREAMK=[0], TRANSPOSEX=[8, 32], TRANSPOSEY=[8],
                TRANSPOSEW=[1])
K5_SMALL = {**BASE, "TSM": [8, 16, 32, 64], "TSN": [8, 16, 32, 64], "TSK": [8, 16], "WPTN": [1, 2, 4],
            "PAD": [0, 1]}
TIGHT = make_device(name="tight", local_mem_bytes=4096, max_work_group_size=128,
                    max_work_item_sizes=(64, 32, 32))
# Most points break a constraint on TIGHT (one in a few hundred is valid): sample_valid's draws
# mostly miss, which is its other path.
K5_SPARSE = {**BASE, "TSM": [8, 16, 32, 64, 128, 256], "TSN": [8, 16, 32, 64, 128, 256],
             "TSK": [8, 16, 32, 64, 128, 256], "WPTN": [1, 2, 4, 8, 16], "PAD": [0, 1, 2, 3, 4, 5, 6, 7],
             "TRANSPOSEX": [8, 16, 32, 64], "TRANSPOSEY": [8, 16, 32, 64]}


def two_family_space(tmp_path) -> Path:
    return write_space(tmp_path, toml_space(K5_SMALL) + toml_space(RT_SMALL, "xgemm_rt"))


@pytest.mark.parametrize("dev", [GPU_LIKE, POCL_LIKE, TIGHT], ids=["gpu-like", "pocl-like", "tight"])
@pytest.mark.parametrize("code", ["s", "z"])
def test_count_iteration_and_view_agree_with_the_list(tmp_path, dev, code):
    space = load_space(two_family_space(tmp_path))
    prec = get_precision(code)
    listed = valid_configs(space, dev, prec)
    assert 0 < len(listed) < space.size, "the test space should keep some points and drop others"
    assert count_valid(space, dev, prec) == len(listed)
    assert list(iter_valid_configs(space, dev, prec)) == listed
    view = ValidConfigs(space, dev, prec)
    assert len(view) == len(listed) and bool(view)
    picks = [0, 1, len(listed) // 3, len(listed) // 2, -2, -1]
    assert [view[i] for i in picks] == [listed[i] for i in picks]
    assert view.take(picks[::-1]) == [listed[i] for i in picks[::-1]]
    with pytest.raises(IndexError):
        view[len(listed)]
    assert listed[-1] in view and listed[0] in view
    invalid = next(c for c in space.configs() if c not in set(listed))
    assert invalid not in view


# BANDM and STREAMK, which no constraint reads, each at several values: the valid set is counted
# and listed with one mask for all their values.
RT_FREE = {**RT_SMALL, "STREAMK": [0, 2], "BANDM": [0, 4, 16]}


@pytest.mark.parametrize("chunk_rows", [1 << 16, 300, 5], ids=["one-chunk", "tail-split", "tiny"])
@pytest.mark.parametrize("dev", [GPU_LIKE, TIGHT], ids=["gpu-like", "tight"])
def test_parameters_no_constraint_reads_share_one_mask(tmp_path, monkeypatch, chunk_rows, dev):
    monkeypatch.setattr(space_module, "CHUNK_ROWS", chunk_rows)
    space = load_space(write_space(tmp_path, toml_space(K5_SMALL) + toml_space(RT_FREE, "xgemm_rt")))
    prec = get_precision("d")
    rt = space.family("xgemm_rt")
    assert rt.free_parameters(dev, prec) == {"STREAMK", "BANDM"}
    assert space.family("xgemm_k5").free_parameters(dev, prec) == set()
    # The list, the count and the view against each configuration checked on its own, in order.
    every = [c for fs in space.families for c in fs.configs()
             if FAMILIES[c.kernel].broken(c.params, dev, prec) is None]
    assert 0 < len(every) < space.size
    assert valid_configs(space, dev, prec) == every
    assert count_valid(space, dev, prec) == len(every)
    view = ValidConfigs(space, dev, prec)
    picks = random.Random(3).sample(range(len(every)), 40)
    assert view.take(picks) == [every[i] for i in picks]
    # Each value of a free parameter keeps the same others.
    by_band = Counter(c.params["BANDM"] for c in every if c.kernel == "xgemm_rt")
    assert len(set(by_band.values())) == 1 and set(by_band) == {0, 4, 16}


@pytest.mark.parametrize("rows", [1, 7, 100, 1 << 16])
def test_chunks_in_any_size_cover_the_product_in_order(tmp_path, rows):
    fs = load_space(write_space(tmp_path, toml_space(K5_SMALL))).families[0]
    chunks = list(fs.chunks(rows))
    assert len(chunks) == fs.chunk_count(fs.layout(rows)) and all(len(c["TSM"]) <= rows for c in chunks)
    for j in (0, len(chunks) // 2, len(chunks) - 1):   # a chunk on its own is the same chunk
        alone = fs.chunk(j, fs.layout(rows))
        assert alone.keys() == chunks[j].keys() and all((alone[k] == chunks[j][k]).all() for k in alone)
    points = [tuple(int(c[k][i]) for k in fs.values) for c in chunks for i in range(len(c["TSM"]))]
    assert points == [tuple(c.params.values()) for c in fs.configs()]
    index = np.array([0, 5, fs.size - 1])
    got = fs.points(index)
    assert [tuple(int(got[k][i]) for k in fs.values) for i in range(3)] == [points[i] for i in index]


def test_a_space_with_nothing_valid_counts_zero(tmp_path):
    # TSN = 8 with WPTN = 16 breaks constraint 1 everywhere.
    space = load_space(write_space(tmp_path, toml_space({**BASE, "TSN": [8], "WPTN": [16]})))
    prec = get_precision("s")
    assert count_valid(space, GPU_LIKE, prec) == 0 == len(ValidConfigs(space, GPU_LIKE, prec))
    assert not ValidConfigs(space, GPU_LIKE, prec)
    assert sample_valid(space, GPU_LIKE, prec, 3, random.Random(0)) == []


def test_counting_refuses_doubles_where_the_device_has_none(tmp_path):
    space = load_space(write_space(tmp_path, toml_space(K5_SMALL)))
    for call in (lambda: count_valid(space, NO_DOUBLES, get_precision("d")),
                 lambda: ValidConfigs(space, NO_DOUBLES, get_precision("z")),
                 lambda: sample_valid(space, NO_DOUBLES, get_precision("d"), 1, random.Random(0))):
        with pytest.raises(GemmtuneError, match="double precision"):
            call()


@pytest.mark.parametrize("chunk_rows", [1 << 20, 64], ids=["enumerated", "drawn"])
def test_sample_valid_draws_distinct_valid_configurations(tmp_path, monkeypatch, chunk_rows):
    # A product up to CHUNK_ROWS points is listed and sampled; a larger one is drawn from.
    monkeypatch.setattr(space_module, "CHUNK_ROWS", chunk_rows)
    space = load_space(two_family_space(tmp_path))
    prec = get_precision("s")
    listed = valid_configs(space, POCL_LIKE, prec)
    n = len(listed) // 3
    got = sample_valid(space, POCL_LIKE, prec, n, random.Random(5))
    assert len(got) == n == len(set(got))
    assert set(got) <= set(listed)
    assert {c.kernel for c in got} == {"xgemm_k5", "xgemm_rt"}, "both families should be drawn from"
    # Uniform over the valid set, not its first n: the positions drawn spread over the list.
    position = {c: i for i, c in enumerate(listed)}
    spots = sorted(position[c] for c in got)
    assert spots[0] < len(listed) // 10 and spots[-1] > len(listed) * 9 // 10
    assert abs(sum(spots) / n - len(listed) / 2) < len(listed) / 10
    assert sample_valid(space, POCL_LIKE, prec, n, random.Random(5)) == got
    assert sample_valid(space, POCL_LIKE, prec, n, random.Random(6)) != got
    # No more valid configurations than asked for: every one of them, in order.
    assert sample_valid(space, POCL_LIKE, prec, len(listed) + 5, random.Random(5)) == listed


def test_sample_valid_where_few_points_are_valid(tmp_path):
    space = load_space(write_space(tmp_path, toml_space(K5_SPARSE)))
    prec = get_precision("s")
    assert space.size > space_module.CHUNK_ROWS, "the space should be drawn from, not listed"
    listed = valid_configs(space, TIGHT, prec)
    assert 0 < len(listed) * valid_module.DRAWS_PER_PICK < space.size
    got = sample_valid(space, TIGHT, prec, len(listed) // 2, random.Random(1))
    assert len(got) == len(listed) // 2 == len(set(got)) and set(got) <= set(listed)
    assert sample_valid(space, TIGHT, prec, len(listed), random.Random(1)) == listed
    # A large share valid: found by drawing, without walking the product.
    many = sample_valid(space, GPU_LIKE, prec, 50, random.Random(2))
    assert len(set(many)) == 50 and all(not broken_rules(c.params, GPU_LIKE, "s") for c in many)


def test_count_of_a_reduced_shipped_space_matches_the_list():
    # The shipped tables with every list cut to its first two values: small enough to list.
    shipped = tomllib.loads((REPO / "configs" / "space.toml").read_text())
    text = "".join(toml_space({k: v[:2] for k, v in table.items()}, family) for family, table in shipped.items())
    space = parse_space(text, "reduced", REPO / "configs")
    for dev, code in ((POCL_LIKE, "s"), (GPU_LIKE, "d"), (dataclasses.replace(GPU_LIKE, fp64_matrix=True), "z")):
        prec = get_precision(code)
        listed = valid_configs(space, dev, prec)
        assert count_valid(space, dev, prec) == len(listed) > 0
        assert list(iter_valid_configs(space, dev, prec)) == listed


@pytest.mark.parametrize("fails", [False, True], ids=["counted-aside", "counter-died"])
def test_a_count_started_aside_is_the_count(tmp_path, monkeypatch, fails):
    monkeypatch.setattr(space_module, "CHUNK_ROWS", 64)   # a product larger than a chunk: counted aside
    space = load_space(two_family_space(tmp_path))
    prec = get_precision("d")
    listed = valid_configs(space, GPU_LIKE, prec)
    if fails:   # the forked counter dies before it answers: len counts for itself
        monkeypatch.setattr(valid_module, "_count_into", lambda valid, send, parent: os._exit(3))
    view = ValidConfigs(space, GPU_LIKE, prec)
    view.count_aside()
    assert view._aside is not None
    process = view._aside[1]
    assert len(view) == len(listed)
    assert view._aside is None and not process.is_alive()
    assert process.exitcode == (3 if fails else 0)
    picks = [0, len(listed) // 2, -1]
    assert view.take(picks) == [listed[i] for i in picks]


def test_a_fork_of_the_search_counts_for_itself(tmp_path, monkeypatch):
    # The proposing process is a fork of the search: it must not read the count meant for the
    # search's summary off their shared pipe.
    monkeypatch.setattr(space_module, "CHUNK_ROWS", 64)
    space = load_space(two_family_space(tmp_path))
    prec = get_precision("s")
    view = ValidConfigs(space, GPU_LIKE, prec)
    view.count_aside()
    monkeypatch.setattr(view, "_aside", (os.getpid() + 1, *view._aside[1:]))   # as seen by a fork
    process, receive = view._aside[1:]
    assert len(view) == count_valid(space, GPU_LIKE, prec)
    assert receive.poll(10)   # the count is still there for the process that started it
    process.join(5)


def test_a_random_unmeasured_pick_from_a_large_valid_set_never_counts_it(tmp_path, monkeypatch):
    from gemmtune.search.candidates import Unmeasured

    monkeypatch.setattr(space_module, "CHUNK_ROWS", 64)
    space = load_space(two_family_space(tmp_path))
    prec = get_precision("s")
    listed = valid_configs(space, GPU_LIKE, prec)
    picker = Unmeasured()
    picker.valid = ValidConfigs(space, GPU_LIKE, prec)
    picker.rng = random.Random(5)
    # All but three measured: the draws are mostly rejected, and the last ones come from the list.
    picker.measured = {c.key: ("ok", 1.0) for c in listed[3:]}
    assert picker.random_unmeasured() in listed[:3]
    picker.measured = {c.key: ("ok", 1.0) for c in listed[: len(listed) // 2]}
    picks = [picker.random_unmeasured() for _ in range(50)]
    assert picker.valid._counts is None   # drawn from the product, never counted
    assert set(picks) <= set(listed[len(listed) // 2:]) and len(set(picks)) > 10


def test_a_pick_from_a_small_valid_set_is_by_position(tmp_path, monkeypatch):
    # A product within one chunk is cheap to count: a pick is the list's, seed for seed.
    monkeypatch.setattr(space_module, "CHUNK_ROWS", 1 << 20)
    space = load_space(two_family_space(tmp_path))
    prec = get_precision("s")
    assert space.size <= space_module.CHUNK_ROWS
    listed = valid_configs(space, GPU_LIKE, prec)
    view = ValidConfigs(space, GPU_LIKE, prec)
    assert [view.pick(random.Random(seed)) for seed in range(20)] == [random.Random(seed).choice(listed)
                                                                       for seed in range(20)]


def test_off_linux_the_count_is_not_started_aside(tmp_path, monkeypatch):
    # Forking a process with threads is safe on Linux alone: elsewhere len counts when asked.
    monkeypatch.setattr(space_module, "CHUNK_ROWS", 64)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not forking_is_safe()
    space = load_space(two_family_space(tmp_path))
    view = ValidConfigs(space, GPU_LIKE, get_precision("s"))
    view.count_aside()
    assert view._aside is None
    assert len(view) == count_valid(space, GPU_LIKE, get_precision("s"))
