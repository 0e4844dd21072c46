"""What gemmtune knows about a device, as plain data (no OpenCL objects)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from gemmtune.errors import GemmtuneError


@dataclass(frozen=True)
class DeviceInfo:
    index: int                 # flat index over all platforms, as `gemmtune devices` lists it
    platform_index: int
    device_index: int          # index within its platform (PYOPENCL_CTX's P:D)
    platform: str
    name: str
    vendor: str
    type: str                  # CPU, GPU, ACCELERATOR or OTHER
    opencl_version: str
    driver_version: str
    compute_units: int
    max_clock_mhz: int
    global_mem_bytes: int
    local_mem_bytes: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    double_precision: bool
    max_alloc_bytes: int = 0
    fp64_matrix: bool = False  # matrix instructions on doubles that kernels reach (xgemm_rt's MMA)
    registers_per_group: int = 0   # 32-bit registers a work-group's items share; 0 where the driver does not say
    # A CPU's vector registers as its OpenCL compiler targets them (16 of 32 bytes: AVX2); 0
    # where not known, for which the CPU family assumes AVX-512's 32 of 64 bytes
    vector_registers: int = 0
    vector_bytes: int = 0

    @property
    def key(self) -> str:
        """Stable identity of a device model and driver, used to key results."""
        return f"{self.platform} | {self.name} | {self.driver_version}"

    @classmethod
    def from_json(cls, d: dict) -> "DeviceInfo":
        """The inverse of ``to_json`` (the device's indices on its own machine are not kept)."""
        return cls(**{**d, "platform_index": 0, "device_index": 0,
                      "max_work_item_sizes": tuple(d["max_work_item_sizes"])})

    def to_json(self) -> dict:
        d = asdict(self)
        d["max_work_item_sizes"] = list(self.max_work_item_sizes)
        for private in ("platform_index", "device_index", "max_alloc_bytes"):
            d.pop(private)
        return d


def read_device_info(info_file: str | Path, name: str | None = None) -> DeviceInfo:
    """The device ``info_file`` describes (what ``gemmtune devices --format json`` printed on its
    machine): the entry named ``name``, or the only one; GemmtuneError otherwise."""
    try:
        entries = json.loads(Path(info_file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GemmtuneError(f"cannot read device description {info_file}: {getattr(e, 'strerror', None) or e}") from None
    entries = entries if isinstance(entries, list) else [entries]
    named = [e for e in entries if isinstance(e, dict) and name is not None and e.get("name") == name]
    chosen = named[0] if named else entries[0] if len(entries) == 1 else None
    if not isinstance(chosen, dict):
        raise GemmtuneError(f"device description {info_file} has no device named {name!r}" if name is not None
                            else f"device description {info_file} describes {len(entries)} devices, not one")
    try:
        return DeviceInfo.from_json(chosen)
    except (TypeError, KeyError) as e:
        raise GemmtuneError(f"device description {info_file} is not what `gemmtune devices --format json` "
                            f"prints: {e}") from None


def _usable_cores() -> list[int] | None:
    """The cores this process may run on (taskset and cpusets count); None where the platform
    cannot tell."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return None


def forking_is_safe() -> bool:
    """Whether a search, which runs threads, may fork a child that goes on in Python: on Linux.
    Elsewhere fork is missing or, as on macOS, unsafe with threads. Proposals made ahead
    (``search.ahead``) and the valid set counted aside (``ValidConfigs.count_aside``) need it."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def host_cores() -> int:
    """How many cores this process may run on: unlike os.cpu_count(), taskset and cpusets count."""
    cores = _usable_cores()
    return max(1, len(cores)) if cores is not None else os.cpu_count() or 1


def core_plan(workers: int, per_worker: int = 8) -> tuple[list[tuple[int, ...]], tuple[int, ...]] | None:
    """Cores for several timing workers sharing this host, and what is left for the compilers.

    Each worker gets a disjoint block of at most ``per_worker`` cores, together at most half of
    them, so that compilers never preempt the host side of a measurement (with fewer than two
    cores per worker, a core each and the compilers anywhere: an empty rest). None where the
    platform cannot pin or there are fewer cores than workers."""
    cores = _usable_cores()
    if cores is None or workers < 1 or len(cores) < workers:
        return None
    share = min(per_worker, len(cores) // (2 * workers)) or len(cores) // workers
    return [tuple(cores[i * share:(i + 1) * share]) for i in range(workers)], tuple(cores[workers * share:])
