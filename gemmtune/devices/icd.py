"""Which OpenCL implementations a process sees: the system's, and those installed from PyPI
that register themselves nowhere (Intel's CPU runtime), registered beside them before the
first OpenCL call."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

# Intel's OpenCL CPU runtime from PyPI (intel-opencl-rt, the `intel` extra) installs
# libintelocl.so into the environment's lib/, with an ICD file that names a placeholder path no
# loader reads. The ICD loader (ocl-icd, bundled with pyopencl) reads one vendors directory,
# /etc/OpenCL/vendors or $OCL_ICD_VENDORS, when the first OpenCL call is made: before that,
# gemmtune points $OCL_ICD_VENDORS at a directory holding the system's ICD files and one for the
# wheel's library, so that both the system's drivers and Intel's runtime are listed, and every
# process started from this one inherits the same list. The library finds its own dependencies
# (RUNPATH $ORIGIN): no LD_LIBRARY_PATH. $GEMMTUNE_INTEL_OPENCL=0 turns this off, a path names
# the library to register; a set $OCL_ICD_VENDORS is the user's choice and left alone.
INTEL_OPENCL_ENV = "GEMMTUNE_INTEL_OPENCL"
SYSTEM_VENDORS = "/etc/OpenCL/vendors"


def pip_intel_opencl() -> Path | None:
    """libintelocl.so as $GEMMTUNE_INTEL_OPENCL names it, else as the installed intel-opencl-rt
    distribution lists it; None where neither gives an existing file, or where it is turned off."""
    chosen = os.environ.get(INTEL_OPENCL_ENV, "").strip()
    if chosen == "0":
        return None
    if chosen and chosen != "1":
        return Path(chosen).resolve() if Path(chosen).is_file() else None
    try:
        files = metadata.distribution("intel-opencl-rt").files or []
    except metadata.PackageNotFoundError:
        return None
    found = [Path(f.locate()).resolve() for f in files if f.name == "libintelocl.so"]
    return next((f for f in found if f.is_file()), None)


def _vendor_dirs() -> list[Path]:
    dirs = [Path(os.environ.get("OPENCL_VENDOR_PATH") or SYSTEM_VENDORS)]
    if (Path(sys.prefix) / "conda-meta").is_dir():   # conda's loader reads the environment's own
        dirs.append(Path(sys.prefix) / "etc" / "OpenCL" / "vendors")
    return dirs


def register_pip_runtimes() -> Path | None:
    """Set $OCL_ICD_VENDORS to a directory of the system's ICD files and one naming the pip-installed
    Intel runtime (see above); the directory, or None where nothing was done. An ICD file of the
    system that names an existing libintelocl (a system-wide install) leaves Intel's runtime to
    the system; one that names a missing one (the wheel's placeholder path) is left out."""
    given = os.environ.get("OCL_ICD_VENDORS")
    if not sys.platform.startswith("linux") or (given and not _made_here(given)):
        return None
    if given and (Path(given) / INTEL_ICD).is_file():
        return Path(given)   # a parent process registered it
    library = pip_intel_opencl()
    if library is None:
        return None
    icds = {}
    for folder in _vendor_dirs():
        try:
            for f in sorted(folder.glob("*.icd")):
                icds.setdefault(f.name, f.read_text(encoding="utf-8", errors="replace").strip())
        except OSError:
            continue
    if any(("libintelocl" in text and Path(text).is_file()) or text == str(library) for text in icds.values()):
        return None
    icds = {name: text for name, text in icds.items() if "libintelocl" not in text}
    icds[INTEL_ICD] = str(library)   # sorts after the system's: their devices keep their indices
    target = _vendors_dir(icds)
    if target is not None:
        os.environ["OCL_ICD_VENDORS"] = str(target)
    return target


INTEL_ICD = "zz-gemmtune-intel-cpu.icd"


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gemmtune" / "opencl-vendors"


def _made_here(folder: str) -> bool:
    """Whether a vendors directory is one ``register_pip_runtimes`` makes (a process inherits it;
    one removed since, as by a cleaned cache, is made again)."""
    return Path(folder).parent == _cache() or Path(folder).name.startswith(TEMPORARY_VENDORS)


TEMPORARY_VENDORS = "gemmtune-opencl-vendors-"


def _write(folder: Path, icds: dict[str, str]) -> None:
    for name, text in icds.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")


def _vendors_dir(icds: dict[str, str]) -> Path | None:
    """A directory of ICD files (name: contents): in the user's cache, named by its contents and
    renamed into place whole, so that processes starting together share one; a temporary one
    where the cache cannot be written; None where neither can."""
    cache = _cache()
    target = cache / hashlib.sha256(repr(sorted(icds.items())).encode()).hexdigest()[:16]
    try:
        if not (target / INTEL_ICD).is_file():
            cache.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=cache))
            _write(staging, icds)
            try:
                staging.rename(target)
            except OSError:   # another process made it first, with the same files
                shutil.rmtree(staging, ignore_errors=True)
        return target
    except OSError:
        pass
    try:
        target = Path(tempfile.mkdtemp(prefix=TEMPORARY_VENDORS))
        _write(target, icds)
        return target
    except OSError:
        return None
