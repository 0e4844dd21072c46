"""What gemmtune knows about a device, as plain data (no OpenCL objects)."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from gemmtune.errors import GemmtuneError
from gemmtune.files import read_text


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
    # What the driver reported that gemmtune does not use, and what it uses instead: (field, why)
    # pairs, filled in by ``__post_init__`` (``substitute``) and by ``opencl.py``'s probes
    fallbacks: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        # Every DeviceInfo, from a driver, a JSON file or a test, holds values the model, the
        # space and the plans may divide by: one place where reported values are judged.
        for name, value in substitute(self).items():
            object.__setattr__(self, name, value)

    @property
    def substituted(self) -> dict[str, str]:
        """The fields whose reported value was replaced, each with why and by what."""
        return dict(self.fallbacks)

    @property
    def key(self) -> str:
        """Stable identity of a device model and driver, used to key results."""
        return f"{self.platform} | {self.name} | {self.driver_version}"

    @classmethod
    def from_json(cls, d: dict) -> "DeviceInfo":
        """The inverse of ``to_json`` (the device's indices on its own machine are not kept)."""
        return cls(**{**d, "platform_index": 0, "device_index": 0,
                      "max_work_item_sizes": tuple(d["max_work_item_sizes"]),
                      "fallbacks": tuple((str(k), str(v)) for k, v in dict(d.get("fallbacks") or {}).items())})

    def to_json(self) -> dict:
        d = asdict(self)
        d["max_work_item_sizes"] = list(self.max_work_item_sizes)
        d["fallbacks"] = self.substituted
        for private in ("platform_index", "device_index", "max_alloc_bytes"):
            d.pop(private)
        return d


# Fallbacks for what a driver reports as 0, leaves out or makes absurd. Only the ranking of
# configurations on one device depends on the clock and the compute units, and a measured peak
# (`gemmtune peak`) replaces the nominal one they give wherever it is stored.
NOMINAL_CLOCK_MHZ = 1000
FALLBACK_WORK_GROUP = 256          # what every OpenCL GPU and CPU of the last decade runs
FALLBACK_LOCAL_BYTES = 32 * 1024   # OpenCL's minimum for a device that is not a custom one
FALLBACK_GLOBAL_BYTES = 1 << 30
# Beyond these a reported value is taken for garbage (an unset field, a unit mix-up).
PLAUSIBLE = {"compute_units": 1 << 20, "max_clock_mhz": 100_000, "global_mem_bytes": 1 << 50,
             "local_mem_bytes": 1 << 32, "max_work_group_size": 1 << 31}


def host_clock_mhz() -> int | None:
    """The host processor's clock, the highest a core reports in /proc/cpuinfo (Linux); None
    elsewhere or where it says none."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", text, re.MULTILINE)]
    return round(max(found)) if found and max(found) > 0 else None


def host_memory_bytes() -> int | None:
    """The host's physical memory; None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") or None
    except (AttributeError, ValueError, OSError):
        return None


def _bad(name: str, value) -> bool:
    return not isinstance(value, int) or value <= 0 or value > PLAUSIBLE.get(name, value)


def substitute(dev: DeviceInfo) -> dict[str, object]:
    """The fields of ``dev`` to replace, with their new values, ``fallbacks`` among them when
    anything is replaced. A CPU device is the host, so the host's cores, clock and memory stand
    in for its own; a value the host cannot give takes a nominal one."""
    cpu = dev.type == "CPU"
    new: dict[str, object] = {}
    why = dict(dev.fallbacks)

    def use(name: str, value, source: str) -> None:
        reported = getattr(dev, name)
        new[name] = value
        why[name] = f"reported {reported!r}; {value!r} used ({source})"

    if _bad("compute_units", dev.compute_units):
        cores = host_cores() if cpu else None
        use("compute_units", cores or 1, "the host's cores" if cores else "assumed")
    if _bad("max_clock_mhz", dev.max_clock_mhz):
        clock = host_clock_mhz() if cpu else None
        use("max_clock_mhz", clock or NOMINAL_CLOCK_MHZ, "the host's, /proc/cpuinfo" if clock else "nominal")
    if _bad("global_mem_bytes", dev.global_mem_bytes):
        memory = host_memory_bytes() if cpu else None
        use("global_mem_bytes", memory or FALLBACK_GLOBAL_BYTES, "the host's" if memory else "assumed")
    global_bytes = new.get("global_mem_bytes", dev.global_mem_bytes)
    if _bad("local_mem_bytes", dev.local_mem_bytes) or dev.local_mem_bytes > global_bytes:
        use("local_mem_bytes", FALLBACK_LOCAL_BYTES, "OpenCL's minimum")
    if _bad("max_work_group_size", dev.max_work_group_size):
        use("max_work_group_size", FALLBACK_WORK_GROUP, "assumed")
    group = new.get("max_work_group_size", dev.max_work_group_size)
    sizes = tuple(dev.max_work_item_sizes or ())
    fixed = tuple(s if isinstance(s, int) and 0 < s <= PLAUSIBLE["max_work_group_size"] else group
                  for s in (sizes + (0, 0, 0))[:max(3, len(sizes))])
    if fixed != sizes:
        use("max_work_item_sizes", fixed, "the work-group limit in each bad or missing dimension")
    if not isinstance(dev.max_alloc_bytes, int) or dev.max_alloc_bytes < 0:
        new["max_alloc_bytes"] = 0          # 0: not known, the global memory is the limit
    for name in ("vector_registers", "vector_bytes", "registers_per_group"):
        if not isinstance(getattr(dev, name), int) or getattr(dev, name) < 0:
            use(name, 0, "not known")
    if why != dict(dev.fallbacks):
        new["fallbacks"] = tuple(why.items())
    return new


def read_device_info(info_file: str | Path, name: str | None = None) -> DeviceInfo:
    """The device ``info_file`` describes (what ``gemmtune devices --format json`` printed on its
    machine): the entry named ``name``, or the only one; GemmtuneError otherwise."""
    try:
        entries = json.loads(read_text(info_file, "device description"))
    except (json.JSONDecodeError, RecursionError) as e:
        why = "it nests too deeply" if isinstance(e, RecursionError) else e
        raise GemmtuneError(f"cannot read device description {info_file}: {why}") from None
    entries = entries if isinstance(entries, list) else [entries]
    named = [e for e in entries if isinstance(e, dict) and name is not None and e.get("name") == name]
    chosen = named[0] if named else entries[0] if len(entries) == 1 else None
    if not isinstance(chosen, dict):
        raise GemmtuneError(f"device description {info_file} has no device named {name!r}" if name is not None
                            else f"device description {info_file} describes {len(entries)} devices, not one")
    # Numbers a driver got wrong are judged by DeviceInfo itself; names and flags of the wrong
    # type are a file that `devices` did not write.
    wrong = next((f"{k} is {type(chosen[k]).__name__}, not {kind.__name__}" for k, kind in _TEXT_AND_FLAGS.items()
                  if k in chosen and type(chosen[k]) is not kind), None)
    try:
        if wrong:
            raise TypeError(wrong)
        return DeviceInfo.from_json(chosen)
    except (TypeError, KeyError, ValueError) as e:
        raise GemmtuneError(f"device description {info_file} is not what `gemmtune devices --format json` "
                            f"prints: {e}") from None


_TEXT_AND_FLAGS = {"platform": str, "name": str, "vendor": str, "type": str, "opencl_version": str,
                   "driver_version": str, "double_precision": bool, "fp64_matrix": bool}


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
