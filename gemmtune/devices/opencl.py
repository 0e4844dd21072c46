"""OpenCL devices: one flat index over every platform, and the choice of one by spec."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from gemmtune.errors import GemmtuneError
from gemmtune.devices.icd import register_pip_runtimes
from gemmtune.devices.info import DeviceInfo

register_pip_runtimes()   # before the first OpenCL call, which reads the vendors directory
# pyopencl reads this variable unguarded when a program binary it cached cannot be loaded (as
# Intel's runtime refuses one cached for another instruction set): unset, that is a KeyError;
# empty, pyopencl builds from source, as it means to.
os.environ.setdefault("PYOPENCL_CACHE_FAILURE_FATAL", "")

import pyopencl as cl  # noqa: E402  (after the vendors directory is chosen)

NO_PLATFORM = ("no OpenCL platform found; install a CPU driver with "
               "\"pip install 'gemmtune[pocl]'\" or a GPU vendor's OpenCL driver")

_TYPES = [(cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
          (cl.device_type.ACCELERATOR, "ACCELERATOR")]


def _platforms() -> list[cl.Platform]:
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    if not platforms:
        raise GemmtuneError(NO_PLATFORM)
    return platforms


def _type_name(device: cl.Device) -> str:
    return next((name for bit, name in _TYPES if device.type & bit), "OTHER")


def _nv_attribute(d: cl.Device, name: str):
    """An attribute of NVIDIA's device query (cl_nv_device_attribute_query); None for other
    devices, or where the driver lacks the query."""
    try:
        if "cl_nv_device_attribute_query" in d.extensions:
            return getattr(d, name)
    except (AttributeError, cl.Error):
        pass
    return None


def nvidia_compute_capability(d: cl.Device) -> int | None:
    """The major compute capability of an NVIDIA device; None for other devices, or where the
    driver lacks NVIDIA's attribute query."""
    return _nv_attribute(d, "compute_capability_major_nv")


def keeps_source_builds(d: cl.Device) -> bool:
    """Whether the driver keeps what it builds from source in an on-disk cache that another
    process finds: PoCL does (~/.cache/pocl/kcache, keyed by the preprocessed source and the
    options), with each kernel's machine code for a launch's work-group size beside the program,
    unless POCL_KERNEL_CACHE=0 turns the cache off."""
    return d.platform.name == "Portable Computing Language" and os.environ.get("POCL_KERNEL_CACHE", "1") != "0"


def has_fp64_matrix(d: cl.Device) -> bool:
    """Whether kernels can multiply doubles with NVIDIA's mma.sync on 16 x 8 x 8 blocks
    (compute capability 9.0 and later): xgemm_rt's MMA."""
    return (nvidia_compute_capability(d) or 0) >= 9


# NVIDIA's OpenCL reports 48 KiB of local memory, what a CUDA kernel gets without asking for
# more, yet builds and runs kernels with more static local memory, up to about what the compute
# capability gives a block that asks. Measured on the H200 (9.0): 226 KiB built and ran right,
# 227 KiB did not build. Compute capabilities not measured keep what the driver reports.
NVIDIA_LOCAL_MEM_BYTES = {9: 226 * 1024}


def compute_units(d: cl.Device) -> int:
    """The compute units a split of the work assumes: the device's, judged as DeviceInfo judges
    every reported value (a driver reporting 0 gets the host's cores for a CPU, else 1)."""
    return _info(0, 0, 0, d.platform, d, probe=False).compute_units


def local_mem_bytes(d: cl.Device) -> int:
    """The local memory one work-group can use: what the device reports, or more where its
    driver is known to build and run more."""
    return max(d.local_mem_size, NVIDIA_LOCAL_MEM_BYTES.get(nvidia_compute_capability(d), 0))


def registers_per_group(d: cl.Device) -> int:
    """The registers a work-group's items share, where the driver says (NVIDIA's attribute
    query: 65,536 on the H200); 0 elsewhere."""
    return int(_nv_attribute(d, "registers_per_block_nv") or 0)


# What the compiler of a CPU device targets, from the macros its front end defines: one kernel
# named after the register file. What the device reports can say more than its compiler uses:
# PoCL 3.0 reported AVX-512's vector widths on a Zen 4 and compiled for a Zen 3 (AVX2), and
# blocks sized for 32 registers of 64 bytes then spilled and ran a fifth as fast.
# A front end that compiles to SPIR (Intel's CPU runtime) defines none of these: its back end
# compiles for the host's instruction set, which the host's flags then tell (Intel's runtime on
# an AVX-512 host: zmm registers in its code).
_REGISTER_FILE_PROBE = """
#if defined(__AVX512F__)
__kernel void registers_32_of_64(void) {}
#elif defined(__AVX__)
__kernel void registers_16_of_32(void) {}
#elif defined(__aarch64__)
__kernel void registers_32_of_16(void) {}
#elif defined(__SPIR__)
__kernel void registers_of_host(void) {}
#else
__kernel void registers_16_of_16(void) {}
#endif
"""
_register_files: dict[int, tuple[int, int, str]] = {}
# The host's flags (/proc/cpuinfo) to a register file, widest first.
HOST_REGISTER_FILES = (("avx512f", (32, 64)), ("avx", (16, 32)), ("asimd", (32, 16)), ("sse2", (16, 16)))


def host_register_file() -> tuple[int, int]:
    """The host processor's widest vector register file its flags in /proc/cpuinfo name (Linux);
    (0, 0) where they name none."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0, 0
    flags = set(re.findall(r"^(?:flags|Features)\s*:(.*)$", text, re.MULTILINE)[0].split()) \
        if re.search(r"^(?:flags|Features)\s*:", text, re.MULTILINE) else set()
    return next((file for flag, file in HOST_REGISTER_FILES if flag in flags), (0, 0))


# Intel's runtime compiles for the instruction set $CL_CONFIG_CPU_TARGET_ARCH names, where set.
INTEL_TARGET_ARCHS = {**dict.fromkeys(("corei7",), (16, 16)),
                      **dict.fromkeys(("corei7-avx", "core-avx-i", "core-avx2", "znver1", "znver2", "znver3"), (16, 32)),
                      **dict.fromkeys(("skx", "sapphirerapids", "core-avx10-1", "core-avx10-2", "znver4", "znver5",
                                       "znver6"), (32, 64))}


def spir_register_file() -> tuple[int, int, str]:
    """The register file a SPIR front end's back end compiles for: the one
    $CL_CONFIG_CPU_TARGET_ARCH names, else the host's; with where it comes from."""
    arch = os.environ.get("CL_CONFIG_CPU_TARGET_ARCH", "").strip().lower()
    count, size = INTEL_TARGET_ARCHS.get(arch) or host_register_file()
    if not count:
        return 0, 0, ""
    where = f"CL_CONFIG_CPU_TARGET_ARCH={arch}" if arch in INTEL_TARGET_ARCHS else "the host's flags"
    return count, size, f"the compiler targets SPIR, its back end the host: {count} x {size} B from {where}"


def vector_register_file(d: cl.Device) -> tuple[int, int]:
    """A CPU device's vector registers as its compiler targets them: (count, bytes each);
    (0, 0) for other devices or where the probe does not build."""
    return _register_file(d)[:2]


def _probe(d: cl.Device, source: str) -> str:
    """The kernel names of ``source`` built on ``d`` ("" where it does not build); the driver's
    remarks on a build that succeeds (Intel's runtime always makes some) are not the user's."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            return cl.Program(cl.Context([d]), source).build().get_info(cl.program_info.KERNEL_NAMES)
    except cl.Error:
        return ""


def _register_file(d: cl.Device) -> tuple[int, int, str]:
    """``vector_register_file`` and, where the compiler did not say, why the host's is taken."""
    if not d.type & cl.device_type.CPU:
        return 0, 0, ""
    if d.int_ptr not in _register_files:
        names = _probe(d, _REGISTER_FILE_PROBE)
        found = re.search(r"registers_(\d+)_of_(\d+)", names)
        if found:
            _register_files[d.int_ptr] = int(found[1]), int(found[2]), ""
        elif "registers_of_host" in names:
            _register_files[d.int_ptr] = spir_register_file()
        else:
            _register_files[d.int_ptr] = 0, 0, ""
    return _register_files[d.int_ptr]


_DOUBLE_PROBE = "__kernel void twice(__global double *x) { x[0] *= 2.0; }"


def double_precision(d: cl.Device) -> tuple[bool, str]:
    """Whether the device computes in double precision, and why where its reports disagree:
    its double_fp_config and its cl_khr_fp64 extension must say the same, else a double kernel
    that builds decides."""
    config, extension = bool(d.double_fp_config), "cl_khr_fp64" in d.extensions.split()
    if config == extension:
        return config, ""
    builds = bool(_probe(d, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + _DOUBLE_PROBE))
    return builds, (f"double_fp_config says {config}, the extensions {extension}; "
                    f"a double kernel {'builds' if builds else 'does not build'}")


def _info(index: int, pi: int, di: int, platform: cl.Platform, d: cl.Device, probe: bool = True) -> DeviceInfo:
    registers, register_bytes, registers_why = _register_file(d) if probe else (0, 0, "")
    doubles, doubles_why = double_precision(d) if probe else (bool(d.double_fp_config), "")
    notes = (("vector_registers", registers_why),) if registers_why else ()
    notes += (("double_precision", doubles_why),) if doubles_why else ()
    return DeviceInfo(
        index=index, platform_index=pi, device_index=di,
        platform=platform.name.strip(), name=d.name.strip(), vendor=d.vendor.strip(),
        type=_type_name(d), opencl_version=d.version.strip(), driver_version=d.driver_version.strip(),
        compute_units=d.max_compute_units, max_clock_mhz=d.max_clock_frequency,
        global_mem_bytes=d.global_mem_size, local_mem_bytes=local_mem_bytes(d),
        max_work_group_size=d.max_work_group_size, max_work_item_sizes=tuple(d.max_work_item_sizes),
        double_precision=doubles, max_alloc_bytes=d.max_mem_alloc_size,
        fp64_matrix=has_fp64_matrix(d), registers_per_group=registers_per_group(d),
        vector_registers=registers, vector_bytes=register_bytes, fallbacks=notes,
    )


def _enumerated() -> list[tuple[int, int, int, cl.Platform, cl.Device]]:
    """Every device with its flat index, platform index and index within its platform."""
    found = []
    for pi, platform in enumerate(_platforms()):
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue  # a platform with no usable device
        for di, d in enumerate(devices):
            found.append((len(found), pi, di, platform, d))
    return found


def _all() -> list[tuple[DeviceInfo, cl.Device]]:
    return [(_info(*entry), entry[-1]) for entry in _enumerated()]


def list_devices() -> list[DeviceInfo]:
    """Every device of every platform, numbered in platform order, then device order."""
    return [info for info, _ in _all()]


def device_spec(spec: str | int | None = None) -> str:
    """The spec in force: the argument, else $GEMMTUNE_DEVICE, else "0"."""
    if spec is None or spec == "":
        spec = os.environ.get("GEMMTUNE_DEVICE", "0") or "0"
    return str(spec).strip()


def device_specs(spec: str | int | None = None) -> list[str]:
    """The devices of a ``--device`` value: one spec, a comma-separated list of them, or ``all``
    (every device of every platform). Lists are checked here; a single spec by its worker."""
    spec = device_spec(spec)
    if spec.lower() == "all":
        return [str(info.index) for info in list_devices()]
    if "," not in spec:
        return [spec]
    parts = [p.strip() for p in spec.split(",")]
    if not all(parts):
        raise GemmtuneError(f"bad device list {spec!r}: expected e.g. 0,1")
    seen = {}
    for part in parts:
        info = resolve_device(part)
        if info.index in seen:
            raise GemmtuneError(f"device list {spec!r} names device {info.index} twice ({seen[info.index]} and {part})")
        seen[info.index] = part
    return parts


def open_device(spec: str | int | None = None) -> tuple[DeviceInfo, cl.Device]:
    """The device named by ``spec``: a flat index ``N`` or ``P:D`` (platform : device)."""
    spec = device_spec(spec)
    found = _enumerated()   # described (its compiler probed) only for the device chosen
    if not found:
        raise GemmtuneError(NO_PLATFORM)
    listing = "; ".join(f"{index} = {pi}:{di} {d.name.strip()}" for index, pi, di, _, d in found)
    m = re.fullmatch(r"(\d+)(?::(\d+))?", spec)
    if not m:
        raise GemmtuneError(f"bad device {spec!r}: give an index N or P:D (devices: {listing})")
    for index, pi, di, platform, dev in found:
        if (m.group(2) is None and index == int(m.group(1))) or (
            m.group(2) is not None and (pi, di) == (int(m.group(1)), int(m.group(2)))
        ):
            return _info(index, pi, di, platform, dev), dev
    raise GemmtuneError(f"no device {spec} (devices: {listing})")


def resolve_device(spec: str | int | None = None) -> DeviceInfo:
    return open_device(spec)[0]
