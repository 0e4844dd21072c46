"""Kernel sources and shipped configuration files, found through importlib.resources.

``kernels/`` and ``configs/`` are installed as the packages ``gemmtune.kernel_sources`` and
``gemmtune.configs``, so this works the same in a wheel, an editable install and a checkout.
"""

from __future__ import annotations

import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

_INCLUDE = re.compile(r'^[ \t]*#include[ \t]+"([^"]+)"[^\n]*$', re.MULTILINE)


def kernels_dir() -> Traversable:
    return files("gemmtune.kernel_sources")


def configs_dir() -> Traversable:
    return files("gemmtune.configs")


def kernel_file(name: str, base: Path | None = None) -> Traversable:
    """A kernel file by name: relative to ``base`` if it exists there, else the shipped one."""
    if base is not None and (base / name).is_file():
        return base / name
    path = Path(name)
    if path.is_absolute() and path.is_file():
        return path
    return kernels_dir() / name


def load_kernel_source(name: str, base: Path | None = None) -> str:
    """The text of a kernel file with its ``#include "..."`` lines inlined (each file once).

    OpenCL compilers can resolve includes themselves with ``-I``, but inlining keeps a build
    independent of where the package lives and gives drivers one self-contained source.
    """
    seen: set[str] = set()

    def inline(ref: Traversable) -> str:
        seen.add(ref.name)
        here = Path(str(ref)).parent

        def include(match: re.Match) -> str:
            name = match.group(1)
            if name in seen:
                return f"// {name}: already included"
            return inline(kernel_file(name, here))

        return _INCLUDE.sub(include, ref.read_text(encoding="utf-8"))

    return inline(kernel_file(name, base))
