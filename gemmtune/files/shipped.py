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
    An include resolves to a file in the first file's directory or the shipped kernels'; one
    outside them (``"/dev/zero"``, ``"../../etc/passwd"``) or one that includes itself, at any
    remove, is a GemmtuneError naming the chain of files.
    """
    from gemmtune.errors import GemmtuneError
    from gemmtune.files import read_text

    first = Path(str(kernel_file(name, base))).resolve()
    roots = (Path(str(kernels_dir())).resolve(), first.parent)
    done: set[Path] = set()

    def inline(path: Path, chain: tuple[Path, ...]) -> str:
        done.add(path)
        chain = (*chain, path)

        def include(match: re.Match) -> str:
            wanted = match.group(1)
            ref = Path(str(kernel_file(wanted, path.parent))).resolve()
            if not any(ref.is_relative_to(root) for root in roots):
                raise GemmtuneError(f"kernel source {path}: #include \"{wanted}\" is outside {roots[1]} and "
                                    "the shipped kernels")
            if ref in chain:
                raise GemmtuneError(f"kernel source {first}: includes itself "
                                    f"({' -> '.join(p.name for p in (*chain, ref))})")
            if ref in done:   # a diamond, common.cl through pad.cl and directly
                return f"// {wanted}: already included"
            return inline(ref, chain)

        return _INCLUDE.sub(include, read_text(path, "kernel source"))

    return inline(first, ())
