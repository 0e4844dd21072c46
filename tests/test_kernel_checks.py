"""Each constraint is stated once, in the family's module; where the kernel relies on one, its
`#error` check must say the same. For every such constraint: a configuration that breaks it and
no other (by the family's own rules, on a device generous enough that no device limit bites)
must fail to build with the kernel's own message, and the family's defaults must build."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import make_device  # noqa: E402

from gemmtune.families import FAMILIES  # noqa: E402
from gemmtune.precision import get_precision  # noqa: E402
from gemmtune.space import Config  # noqa: E402

ROOMY = make_device(local_mem_bytes=1 << 20, max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096),
                    fp64_matrix=True)

# (family, precision, changes to its defaults, the constraints that break). xgemm_rt's
# constraint 4 (local vectors) needs whole results per work-item too, so it breaks with 1.
CASES = [
    ("xgemm_k5", "s", {"TSN": 48, "WPTN": 32}, [1]),
    ("xgemm_k5", "s", {"TSM": 8, "TSN": 8, "TSK": 4, "WPTN": 1}, [3]),
    ("xgemm_rt", "s", {"MWG": 96, "MDIMC": 64, "NDIMC": 4, "VLM": 1, "VWG": 1}, [1, 4]),
    ("xgemm_rt", "s", {"KWG": 8}, [3]),
    ("xgemm_rt", "s", {"STAGE": 0, "PIPE": 2, "VWG": 1, "VLM": 1, "VLN": 1}, [10]),
    ("xgemm_rt", "s", {"PIPE": 3}, [11]),
    ("xgemm_rt", "s", {"MMA": 1, "VLM": 1, "VLN": 1}, [12]),
    ("xgemm_direct", "s", {"MWG": 12}, [1]),
    ("xgemm_direct", "s", {"KWG": 4, "MWG": 8, "NWG": 8, "MDIMC": 8, "NDIMC": 8}, [3]),
    ("xgemm_thin", "s", {"WGS": 96}, [1]),
    ("xgemm_thin", "s", {"RB": 8, "WPT": 8}, [3]),
]


@pytest.fixture(scope="module")
def context():
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device

    return cl.Context([open_device(0)[1]])


@pytest.mark.parametrize("kernel, code, changes, numbers", CASES,
                         ids=[f"{k}-constraint-{n[0]}" for k, _, _, n in CASES])
def test_a_kernel_refuses_what_its_constraint_forbids(context, kernel, code, changes, numbers):
    from gemmtune.launch.operation import BuildError, build, defines
    from gemmtune.space import shipped_families

    family, prec = FAMILIES[kernel], get_precision(code)
    config = Config.of(kernel, {**family.defaults, **changes})
    broken = [c.number for c in family.constraints if not bool(c.check(config.params, ROOMY, prec))]
    assert broken == numbers, broken
    source = shipped_families().family(kernel).source
    with pytest.raises(BuildError) as e:
        build(context, source, defines(config, prec))
    assert f"{kernel}:" in e.value.log


@pytest.mark.parametrize("kernel", sorted({k for k, _, _, _ in CASES}))
def test_the_defaults_break_nothing_and_build(context, kernel):
    from gemmtune.launch.operation import build, defines
    from gemmtune.space import shipped_families

    family, prec = FAMILIES[kernel], get_precision("s")
    config = Config.of(kernel, family.defaults)
    assert family.broken(config.params, dataclasses.replace(ROOMY, fp64_matrix=False), prec) is None
    build(context, shipped_families().family(kernel).source, defines(config, prec))


def test_a_program_without_kernels_is_a_failed_build(context):
    """What a driver's kernel cache once returned for a program that had built: no kernels.
    A build error (one failed trial), not INVALID_KERNEL_NAME later at the launch."""
    import pyopencl as cl

    from gemmtune.launch.operation import BuildError, build

    with pytest.raises(BuildError, match="no kernels"):
        build(context, "void helper(__global float* x) { x[0] = 1.0f; }\n", {"NOTHING": 1})
    program = build(context, "__kernel void f(__global float* x) { x[0] = 1.0f; }\n", {"NOTHING": 1})
    assert program.get_info(cl.program_info.NUM_KERNELS) == 1
