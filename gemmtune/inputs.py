"""Limits on what commands and library calls accept, checked before any work starts.

Each check raises GemmtuneError naming the value and what it must be, so that bad input ends
as one ``Error:`` line (exit code 2) instead of a traceback, a failed check or an allocation
that takes the machine's memory first. Nothing here imports OpenCL.
"""

from __future__ import annotations

import math
import os
import re

from gemmtune.errors import GemmtuneError
from gemmtune.devices.info import DeviceInfo, host_cores
from gemmtune.launch.plan import INDEX_LIMIT
from gemmtune.precision import Precision, require_precision

SEED_MAX = 2**32 - 1   # numpy's and Optuna's samplers take seeds 0 .. 2**32 - 1

# Study names end up in SQL rows, Optuna's tables, file names people derive from them and
# comments of the exported C header: letters, digits and a few marks that mean nothing to any
# of them.
STUDY_CHARACTERS = "A-Z a-z 0-9 _ . : + = @ -"
STUDY_NAME = re.compile(r"[A-Za-z0-9_.:+=@-]{1,200}")


def check_seed(seed, option: str = "--seed") -> None:
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise GemmtuneError(f"{option} must be an integer from 0 to {SEED_MAX}, got {seed!r}")


def check_finite(name: str, value) -> None:
    """alpha and beta: a NaN or an infinity makes every element of C NaN or infinite, which no
    check can tell from a broken kernel."""
    try:
        finite = all(math.isfinite(x) for x in (complex(value).real, complex(value).imag))
    except (TypeError, ValueError):
        raise GemmtuneError(f"{name} must be a number, got {value!r}") from None
    if not finite:
        raise GemmtuneError(f"{name} must be finite, got {value}")


def check_study_name(name: str | None) -> None:
    """A study name given for a new search (reading takes any name that is stored)."""
    if name is None:
        return
    if not STUDY_NAME.fullmatch(name):
        raise GemmtuneError(f"bad study name {name!r}: use 1 to 200 of the characters {STUDY_CHARACTERS}")


def device_bytes(prec: Precision, m: int, n: int, k: int) -> int:
    """Device memory of one product: A, B, C and, at worst, padded copies of A and B."""
    return prec.bytes * (2 * (m * k + k * n) + m * n)


def host_bytes(prec: Precision, m: int, n: int, k: int) -> int:
    """Host memory of checking one product against numpy: the operands, C and its copy in the
    precision, and the reference in double precision (its value and the scale of its terms,
    with the operands converted and taken in absolute value on the way)."""
    wide = prec.reference_dtype.itemsize
    return prec.bytes * (m * k + k * n + 3 * m * n) + wide * (2 * (m * k + k * n) + 3 * m * n)


def available_host_bytes() -> int | None:
    """Memory the host can give now (MemAvailable), else its physical memory; None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_problem(dev: DeviceInfo, prec: Precision, m: int, n: int, k: int, host: bool = True,
                  batch: int = 1) -> None:
    """A product, or ``batch`` of them stacked in each operand's buffer, that fits ``dev`` (its
    memory and its largest allocation) and the kernels' int indices and, with ``host``, the
    host's memory for checking it; GemmtuneError saying which does not."""
    require_precision(dev, prec)
    what = f"{m}x{n}x{k} in precision {prec.code}" if batch == 1 else \
        f"a batch of {batch} {m}x{n}x{k} in precision {prec.code}"
    elements = batch * max(m * k, k * n, m * n)   # of the largest operand
    if batch > 1 and elements >= INDEX_LIMIT:
        raise GemmtuneError(f"{what} stacks {elements} elements in one operand; the kernels index at most "
                            f"{INDEX_LIMIT - 1}")
    need = batch * device_bytes(prec, m, n, k)
    if need > dev.global_mem_bytes:
        raise GemmtuneError(f"{what} needs about {need / 2**30:.1f} GiB, "
                            f"more than the {dev.global_mem_bytes / 2**30:.1f} GiB of device {dev.index}")
    largest = prec.bytes * elements
    if dev.max_alloc_bytes and largest > dev.max_alloc_bytes:
        raise GemmtuneError(f"{what} needs a {largest / 2**20:.0f} MiB buffer, "
                            f"more than device {dev.index} allows in one allocation "
                            f"({dev.max_alloc_bytes / 2**20:.0f} MiB)")
    free = available_host_bytes() if host else None
    if free is not None and batch * host_bytes(prec, m, n, k) > free:
        raise GemmtuneError(f"{what} needs about {batch * host_bytes(prec, m, n, k) / 2**30:.1f} GiB of host "
                            f"memory to check, more than the {free / 2**30:.1f} GiB available")


def check_jobs(jobs: int | None) -> None:
    """Processes working side by side (``--jobs``: a search's compilers, a replay's): 0 up to one
    per core this process may run on (``info.host_cores``: its affinity, cpusets and taskset
    included), refused above. Each keeps a core busy, so more only share the cores: --jobs 1000
    started a thousand compiler processes and a load average of 76."""
    most = host_cores()
    if jobs is not None and not 0 <= jobs <= most:
        raise GemmtuneError(f"--jobs must be from 0 to {most}, the cores this process may run on "
                            f"(a process per core at most), got {jobs}")
