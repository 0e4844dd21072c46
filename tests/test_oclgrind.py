"""Every kernel under Oclgrind, the OpenCL device simulator that checks each memory access.

For every family and precision, a few configurations run small and edge shapes (M, N or K of 1,
primes, tile remainders, leading dimensions above the rows, element offsets for the families
that read views, every op pair) with Oclgrind's checks on: out-of-bounds accesses (always on),
data races in local and global memory (uniform writes too), and errors of OpenCL API calls.
Anything Oclgrind writes fails the case that caused it, as does a result numpy disagrees with
(float64 / complex128, C poisoned with NaN) or a write outside C's view. Oclgrind interprets
every work-item, so the shapes are tiny and each family and precision is one process
(tests/oclgrind_run.py) running all its cases: the whole module takes about a minute of CPU time.

Debian's ``oclgrind`` package provides the simulator; without it the module skips, and fails
under CI (``CI=true``), which installs it. docs/kernels.md ("Under Oclgrind") says what it
checks and what it cannot.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemmtune.families import FAMILIES
from gemmtune.files.shipped import load_kernel_source

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "oclgrind_run.py"
MARK = "@@case "
# Out-of-bounds accesses are checked whatever the options; these add the rest.
CHECKS = ("--data-races", "--uniform-writes", "--check-api")

OPS = ["".join(pair) for pair in itertools.product("NTC", repeat=2)]
# (m, n, k): one element; primes below, across and above the tiles; one side 1; K long enough
# to be cut into parts by the families that cut it.
SHAPES = [(1, 1, 1), (7, 13, 5), (17, 3, 11), (33, 17, 9), (1, 19, 4), (6, 1, 23), (5, 3, 133)]
# The padded families' main kernels read an operand in place only where it is packed, of tile
# multiples and in the kernel's own layout: these shapes, packed, NN and NT, reach that path too.
WHOLE_TILES = [(16, 16, 16), (32, 32, 16)]

# Configurations per family, small and valid on Oclgrind's device (32 KiB of local memory, 1024
# work-items); each precision runs every one. The register-tiled family's cover its code paths:
# B read n-fastest or k-fastest (BKFAST 0, 1, 2), each pipeline (PIPE 0, 1, 2, 5, 6, 7), staged
# or not, vector loads and local reads of 1, 2 and 4, warp sub-tiles, stream-K with its fix-up.
RT = dict(MWG=16, NWG=16, KWG=8, MDIMC=4, NDIMC=4, VWG=1, VLM=1, VLN=1, PIPE=0, PADL=0, UNROLL=1, BKFAST=0,
          WARPM=0, STAGE=1, MMA=0, STREAMK=0, BANDM=0, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=1)
CONFIGS = {
    "xgemm_k5": [dict(TSM=16, TSN=16, TSK=8, WPTN=2, PAD=1, TRANSPOSEX=8, TRANSPOSEY=8, TRANSPOSEW=1)],
    "xgemm_rt": [
        {**RT, "VWG": 2, "VLM": 2, "VLN": 4, "PIPE": 2, "PADL": 4, "BKFAST": 1, "TRANSPOSEW": 2},
        {**RT, "MWG": 32, "MDIMC": 8, "VLM": 4, "VLN": 2, "PIPE": 1, "BKFAST": 2, "VWG": 2, "WARPM": 8,
         "STREAMK": 2, "TRANSPOSEX": 16},
        {**RT, "PIPE": 6, "VWG": 2, "VLN": 2, "BKFAST": 1, "STREAMK": 2},
        {**RT, "PIPE": 7, "VLM": 2, "UNROLL": 8, "BANDM": 16, "STREAMK": 2},
        {**RT, "PIPE": 5, "VWG": 4, "VLM": 4, "VLN": 4, "NWG": 32, "NDIMC": 8, "KWG": 16},
        {**RT, "STAGE": 0},
    ],
    "xgemm_direct": [dict(MWG=16, NWG=16, KWG=8, MDIMC=8, NDIMC=4, PADL=1, KSPLIT=4),
                     dict(MWG=8, NWG=16, KWG=16, MDIMC=4, NDIMC=8, PADL=0, KSPLIT=1)],
    "xgemm_thin": [dict(WGS=32, WPT=2, KU=2, RB=2, KSPLIT=4), dict(WGS=64, WPT=1, KU=1, RB=4, KSPLIT=1)],
    # VW fills a 32-byte register with a precision's parts (constraint 5); complex VW 1 is packed
    # interleaved, VW > 1 planar.
    "xgemm_cpu": [dict(MV=2, NR=4, KU=4, NB=1, KC=0, WGS=1, ORDER=0, PACKA=1, PACKB=0),
                  dict(MV=1, NR=2, KU=2, NB=2, KC=4, WGS=4, ORDER=1, PACKA=0, PACKB=1)],
}
CPU_VW = {"s": (8, 8), "d": (4, 4), "c": (8, 1), "z": (4, 1)}   # per configuration above
PRECISIONS = "sdcz"

# Each kernel a family's plans enqueue, by (family, kernel name): every one must run somewhere.
KERNELS = {("xgemm_k5", "xgemm"), ("xgemm_k5", "pad_copy"), ("xgemm_k5", "pad_transpose"),
           ("xgemm_rt", "xgemm"), ("xgemm_rt", "pad_copy"), ("xgemm_rt", "pad_transpose"),
           ("xgemm_rt", "xgemm_fixup"), ("xgemm_direct", "xgemm_direct"), ("xgemm_direct", "xgemm_direct_sum"),
           ("xgemm_thin", "xgemm_thin"), ("xgemm_thin", "xgemm_thin_sum"), ("xgemm_cpu", "xgemm"),
           ("xgemm_cpu", "xgemm_pack_a"), ("xgemm_cpu", "xgemm_pack_b")}

# What Oclgrind cannot check of our kernels, each asserted to fail still: when one starts to
# work, the test says so, and the option joins CHECKS. (option, why) Every configuration above
# builds there: xgemm_rt's local reads, which went through a union that clang lowered to
# integers Oclgrind cannot run, take their elements from the vector itself (LANE, in
# kernels/xgemm_rt_checks.cl).
CANNOT_CHECK = [
    ("--uninitialized", "its uninitialised-value plugin stops at LLVM's freeze instruction, which clang emits "
                        "for our loops (OCLGRIND FATAL ERROR ... Unsupported instruction: freeze)"),
]


def oclgrind() -> str:
    found = shutil.which("oclgrind")
    if found is None:
        message = "oclgrind is not installed (Debian's package oclgrind)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI installs it")
        pytest.skip(message)
    return found


def case(kernel: str, code: str, config: dict, shape, ops: str, number: int, packed=False) -> dict:
    """One GEMM, the ``number``-th: views (leading dimensions above the rows, and offsets where
    the family reads views) on every other one unless ``packed``, beta 0 (C poisoned) on two of
    three."""
    views = number % 2 == 0 and not packed
    pad = (2, 1, 3) if views else (0, 0, 0)
    offsets = (5, 1, 2) if views and FAMILIES[kernel].takes_views else (0, 0, 0)
    m, n, k = shape
    return dict(id=f"{kernel}-{code}-{json.dumps(config, separators=(',', '='))}-{m}x{n}x{k}-{ops}-{number}",
                kernel=kernel, precision=code, config=config, m=m, n=n, k=k, ops=ops, pad=pad, offsets=offsets,
                alpha=-0.5 if number % 3 == 1 else 1.5, beta=0.75 if number % 3 == 2 else 0.0)


def cases(kernel: str, code: str) -> list[dict]:
    """Every configuration over every shape; the op pairs in turn, so that each configuration meets
    all nine."""
    out = []
    for c, config in enumerate(CONFIGS[kernel]):
        if kernel == "xgemm_cpu":
            config = {**config, "VW": CPU_VW[code][c]}
        shapes = SHAPES + (WHOLE_TILES if not FAMILIES[kernel].takes_views else [])
        for i, shape in enumerate(shapes):
            for j in range(2):
                if shape in WHOLE_TILES:   # packed, as the kernel reads them: no preparation pass
                    out.append(case(kernel, code, config, shape, "NT" if j else "NN", len(out), packed=True))
                else:
                    out.append(case(kernel, code, config, shape, OPS[(2 * i + j + c) % len(OPS)], len(out)))
    return out


# What Oclgrind's compiler prints of a build with warnings (their text is in the build log, and
# no warning of clang's is a defect Oclgrind finds: "loop not unrolled" is one): not a report.
COMPILER_NOTE = re.compile(r"^\d+ warnings? generated\.$", re.MULTILINE)


def reports(stderr: str) -> tuple[str, dict[str, str]]:
    """What the simulator wrote before the first case, and during each case (by id): every line
    but the compiler's notes."""
    before, *parts = COMPILER_NOTE.sub("", stderr).split(MARK)
    during = {}
    for part in parts:
        name, _, text = part.partition("\n")
        during[name] = text.strip()
    return before.strip(), during


def run_cases(items: list[dict], options=CHECKS, timeout=300) -> tuple[dict[str, dict], str, dict[str, str]]:
    """Run the cases in one process under Oclgrind with ``options``: each case's outcome, what the
    simulator said before the cases, and what it said during each."""
    env = {**os.environ, "PYOPENCL_NO_CACHE": "1", "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([oclgrind(), *options, sys.executable, str(RUNNER)], input=json.dumps(items),
                          capture_output=True, text=True, timeout=timeout, env=env)
    outcomes = {o["id"]: o for o in map(json.loads, done.stdout.splitlines())}
    before, during = reports(done.stderr)
    assert done.returncode == 0 and len(outcomes) == len(items), (
        f"the run stopped (exit {done.returncode}) after {len(outcomes)} of {len(items)} cases:\n{done.stderr[-4000:]}")
    return outcomes, before, during


def failures(items, outcomes, during) -> list[str]:
    found = []
    for item in items:
        o, said = outcomes[item["id"]], during.get(item["id"], "")
        if said:
            found.append(f"{item['id']}: Oclgrind reported\n{said[:3000]}")
        if "exception" in o:
            found.append(f"{item['id']}: {o['exception']}\n{o['log'][-2000:]}")
        elif not o["passed"] or o["outside_written"]:
            found.append(f"{item['id']}: componentwise error {o['error']}, "
                         f"{o['outside_written']} elements written outside C's view")
    return found


def clean_outcomes(items: list[dict]) -> dict[str, dict]:
    """Each case's outcome, once every case ran clean under Oclgrind and computed the right C."""
    outcomes, before, during = run_cases(items)
    assert not before, f"Oclgrind reported while the device opened:\n{before}"
    found = failures(items, outcomes, during)
    assert not found, f"{len(found)} of {len(items)} cases failed:\n" + "\n\n".join(found[:5])
    return outcomes


def test_every_family_has_cases():
    assert set(CONFIGS) == set(FAMILIES) == {family for family, _ in KERNELS}


@pytest.mark.parametrize("kernel", list(CONFIGS))
@pytest.mark.parametrize("code", PRECISIONS)
def test_every_kernel_runs_clean_under_oclgrind(kernel, code):
    items = cases(kernel, code)
    outcomes = clean_outcomes(items)
    launched = {name for o in outcomes.values() for name in o["launches"]}
    assert {name for family, name in KERNELS if family == kernel} <= launched
    if not FAMILIES[kernel].takes_views:   # the product on the caller's operands, unprepared
        assert any(not {"pad_copy", "pad_transpose"} & set(o["launches"]) for o in outcomes.values())


def batched(kernel: str, code: str, config: dict, shape, count: int, number: int, packed=False, ops=None) -> dict:
    """``case``'s GEMM, the ``number``-th, as a batch of ``count`` problems one after another in
    each buffer: views on every other one unless ``packed``, op pairs in turn unless ``ops``."""
    item = case(kernel, code, config, shape, ops or OPS[number % len(OPS)], number, packed=packed)
    return {**item, "id": f"{item['id']}-batch{count}", "batch": count}


@pytest.mark.parametrize("code", "sz")
def test_batches_of_the_cpu_family_run_clean_under_oclgrind(code):
    """Batches of xgemm_cpu, strided in one buffer per operand with views: large enough that each
    work-item computes whole problems (its problems' blocks walked a launch's width apart), and
    too small for that (a work-item a block); packed and in place, every op pair in turn."""
    items = []
    for c, config in enumerate(CONFIGS["xgemm_cpu"]):
        config = {**config, "VW": CPU_VW[code][c]}
        for j, count in enumerate((3, 8 * config["WGS"] * 4 + 1)):
            items.append(batched("xgemm_cpu", code, config, (13, 11, 9), count, 2 * c + j))
    outcomes = clean_outcomes(items)
    products = [(item["config"]["WGS"], outcomes[item["id"]]["global_sizes"][-1]) for item in items]
    assert any(size[:2] == [wgs, 1] for wgs, size in products)         # whole problems a work-item
    assert any(size[:2] != [wgs, 1] for wgs, size in products)         # a work-item a block


def direct_batches(code: str) -> list[dict]:
    """Batches of xgemm_direct over both configurations: ragged shapes (primes, tile remainders, M
    or N of 1, a K the first configuration cuts into 4 parts alone), views at offsets on every
    other one, every op pair across them."""
    shapes = [(7, 13, 5, 3), (17, 3, 11, 4), (33, 17, 9, 2), (1, 19, 4, 3), (5, 3, 133, 3)]
    # and a GPU's tile of a whole problem (space/defaults.py whole_tile): 48 x 32 on 16 x 8
    # work-items over 40 x 23 problems
    whole = dict(MWG=48, NWG=32, KWG=16, MDIMC=16, NDIMC=8, PADL=1, KSPLIT=1)
    return [batched("xgemm_direct", code, config, (m, n, k), count, len(shapes) * c + i)
            for c, config in enumerate(CONFIGS["xgemm_direct"]) for i, (m, n, k, count) in enumerate(shapes)] + [
        batched("xgemm_direct", code, whole, (40, 23, 37), 2, 2 * len(shapes))]


@pytest.mark.parametrize("code", PRECISIONS)
def test_batches_of_the_direct_family_run_clean_under_oclgrind(code):
    """Batches of xgemm_direct, strided in one buffer per operand: the problem is dimension 2 of
    the one launch, and K is not cut into parts (KSPLIT 4 changes nothing)."""
    items = direct_batches(code)
    outcomes = clean_outcomes(items)
    for item in items:
        o = outcomes[item["id"]]
        assert o["launches"] == ["xgemm_direct"] and o["global_sizes"][0][2] == item["batch"], o
    assert {o["ops"] for o in items} == set(OPS) and any(any(o["offsets"]) for o in items)


# xgemm_rt's batches: without stream-K (the problem is dimension 2 of the grid), and with it (one
# dimension numbering the batch's tiles problem after problem) in rounds of 5 work-groups per compute
# unit, so that on Oclgrind's one the split last round runs over tiles of two problems, after whole
# tiles, and in rounds of 2: an odd number of tiles splits the last problem's last tile, an even one
# nothing.
RT_BATCH = [CONFIGS["xgemm_rt"][0], {**CONFIGS["xgemm_rt"][1], "STREAMK": 5}, CONFIGS["xgemm_rt"][3]]


def rt_batches(code: str) -> list[dict]:
    """Batches of xgemm_rt: ragged shapes, whose operands are prepared a copy per problem (views
    of leading dimensions above the rows on every other one), and packed shapes of whole tiles
    read in place at the batch's strides (each configuration's B layout: BKFAST 1 and 2 read B
    k-fastest, so NN; BKFAST 0, NT), or B alone prepared (the other op)."""
    plans = [  # (configuration, (m, n, k, count), ...); ops=... for whole tiles, packed
        (0, [(7, 13, 5, 3), (33, 17, 9, 2), (17, 3, 11, 3), (32, 32, 16, 3, "NN"), (16, 16, 16, 2, "NT")]),
        (1, [(33, 17, 9, 3), (33, 17, 23, 4), (1, 19, 4, 5), (32, 32, 16, 4, "NN"), (32, 16, 16, 3, "TN")]),
        (2, [(7, 13, 29, 3), (17, 3, 11, 4), (6, 1, 23, 3), (16, 16, 16, 5, "NT"), (16, 32, 16, 2, "NN")]),
    ]
    items = []
    for c, shapes in plans:
        for m, n, k, count, *ops in shapes:
            items.append(batched("xgemm_rt", code, RT_BATCH[c], (m, n, k), count, len(items),
                                 packed=bool(ops), ops=ops[0] if ops else None))
    return items


def rt_split(item: dict):
    """The stream-K split of ``item``'s batch on Oclgrind's one compute unit, and its tiles per problem."""
    p = item["config"]   # every parameter of the family's
    mp, np_, kp = FAMILIES["xgemm_rt"].padded_shape(p, item["m"], item["n"], item["k"])
    return FAMILIES["xgemm_rt"].split(p, mp, np_, kp, 1, item["batch"]), (mp // p["MWG"]) * (np_ // p["NWG"])


@pytest.mark.parametrize("code", PRECISIONS)
def test_batches_of_the_rt_family_run_clean_under_oclgrind(code):
    """Batches of xgemm_rt, strided in one buffer per operand: the operands prepared a copy per
    problem or read in place, and with stream-K the batch's tiles numbered problem after problem,
    the split ones (and xgemm_fixup's) in the last problems."""
    items = rt_batches(code)
    outcomes = clean_outcomes(items)
    prepared, in_place, split_over = set(), 0, set()
    for item in items:
        o = outcomes[item["id"]]
        passes = [size for name, size in zip(o["launches"], o["global_sizes"]) if name.startswith("pad_")]
        prepared |= {name for name in o["launches"] if name.startswith("pad_")}
        assert all(size[2] == item["batch"] for size in passes), o   # a copy per problem
        in_place += not passes
        if item["config"]["STREAMK"]:
            split, per_problem = rt_split(item)
            assert o["global_sizes"][len(passes)][0] // item["config"]["MDIMC"] == split.first + len(split.pieces)
            assert ("xgemm_fixup" in o["launches"]) == bool(split.fixups), o
            split_over.add(len({tile // per_problem for tile, *_ in split.fixups}))
        else:
            assert o["global_sizes"][-1][2] == item["batch"], o
    assert prepared == {"pad_copy", "pad_transpose"} and in_place >= 2
    assert {0, 1, 2} <= split_over   # stream-K splitting nothing, one problem's tile, tiles of two problems
    assert {"T", "C"} <= set("".join(item["ops"] for item in items))


@pytest.mark.parametrize("code", "sz")
def test_shared_operands_of_a_batch_run_clean_under_oclgrind(code):
    """A batch whose A or B is one matrix for every problem (a batch stride of 0, as gemm's
    broadcast operand), on each family that takes batches: every problem reads the one copy, and
    xgemm_rt prepares it once, not a copy per problem."""
    families = [("xgemm_direct", CONFIGS["xgemm_direct"][0]), ("xgemm_rt", RT_BATCH[0]), ("xgemm_rt", RT_BATCH[1]),
                ("xgemm_cpu", {**CONFIGS["xgemm_cpu"][0], "VW": CPU_VW[code][0]})]
    items = []
    for kernel, config in families:
        for shared in "AB":
            item = batched(kernel, code, config, (33, 17, 9), 4, len(items))
            items.append({**item, "id": f"{item['id']}-shared{shared}", "shared": shared})
    outcomes = clean_outcomes(items)
    for item in items:
        o = outcomes[item["id"]]
        if item["kernel"] == "xgemm_rt":   # 33 x 17 x 9 fills no tile: both operands prepared
            copies = sorted(size[2] for name, size in zip(o["launches"], o["global_sizes"]) if name.startswith("pad_"))
            assert copies == [1, item["batch"]], o


def planted(tmp_path: Path, old: str, new: str) -> Path:
    source = load_kernel_source("xgemm_direct.cl")
    assert source.count(old) == 1, f"xgemm_direct.cl changed: cannot plant a fault at {old!r}"
    path = tmp_path / "planted.cl"
    path.write_text(source.replace(old, new))
    return path


def test_a_planted_out_of_bounds_write_is_caught(tmp_path):
    """The check itself: xgemm_direct with C's store index shifted one element writes past the
    end of a C that fills its buffer (ldc = M, no offset), which Oclgrind reports, and the same
    parsing as the real cases charges the report to that case."""
    source = planted(tmp_path, "STORE_AXPBY(out[n * ld_out + m],", "STORE_AXPBY(out[n * ld_out + m + 1],")
    config = CONFIGS["xgemm_direct"][1]
    items = [dict(case("xgemm_direct", "s", config, (7, 5, 3), "NN", 1), id="planted", source=str(source)),
             dict(case("xgemm_direct", "s", config, (7, 5, 3), "NN", 1), id="clean")]
    outcomes, before, during = run_cases(items)
    assert not before
    assert re.search(r"Invalid write of size 4 at global memory address", during["planted"]), during["planted"]
    assert "xgemm_direct" in during["planted"]
    assert [f.split(":")[0] for f in failures(items, outcomes, during)] == ["planted", "planted"]
    assert not during["clean"] and outcomes["clean"]["passed"]


def test_a_planted_local_memory_race_is_caught(tmp_path):
    """The race check: the barrier after the slices' stores into local memory removed, work-items
    read what others are still writing."""
    source = load_kernel_source("xgemm_direct.cl")
    first = source.index("barrier(CLK_LOCAL_MEM_FENCE);")
    path = tmp_path / "racy.cl"
    path.write_text(source[:first] + source[first + len("barrier(CLK_LOCAL_MEM_FENCE);"):])
    items = [dict(case("xgemm_direct", "s", CONFIGS["xgemm_direct"][0], (17, 13, 20), "NN", 1), id="racy",
                  source=str(path))]
    _, _, during = run_cases(items)
    assert re.search(r"data race at local memory", during["racy"]), during["racy"]


@pytest.mark.parametrize("option, why", CANNOT_CHECK)
def test_what_oclgrind_cannot_check_still_fails(option, why):
    items = [case("xgemm_direct", "s", CONFIGS["xgemm_direct"][1], (7, 5, 3), "NN", 1)]
    outcomes, _, during = run_cases(items, options=(option,))
    assert "OCLGRIND FATAL ERROR" in during[items[0]["id"]] and "freeze" in during[items[0]["id"]], (
        f"Oclgrind {option} now works with our kernels ({why} no longer holds): add it to CHECKS")
    assert not outcomes[items[0]["id"]].get("passed")
