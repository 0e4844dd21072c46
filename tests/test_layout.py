"""The codebase stays one a newcomer can read: packages in layers that import only downwards, no
import cycles, Optuna's private names in one adapter package, nothing in results/; and, as a smell
detector, modules, classes and kernel files of readable size.

Each check names the offenders, so a failure says what to split or move.
"""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "gemmtune"
# Sizes past these are a smell: a module or class holding two concepts, to be split along them
# (not trimmed by a few lines to pass).
MODULE_LINES = 400
CLASS_LINES = 150
KERNEL_LINES = 400

# The layers, top first, as docs/architecture.md draws them: a module imports (at load or
# inside a function) only modules of its own layer or lower ones. Each entry names a top-level
# module or package of gemmtune/, or a module inside a package that sits in a layer of its own
# (space/valid.py counts the valid set in a child process started as execution's are).
LAYERS = [
    ("commands", {"cli", "__main__"}),
    ("uses", {"search", "report", "export", "bench", "call"}),
    ("strategies", {"strategies"}),
    ("models", {"models"}),
    ("services", {"db", "execution", "space.valid", "space.listing", "optuna_adapter"}),
    ("core", {"errors", "precision", "launch", "files", "inputs", "devices", "families", "space",
              "measure", "shapes"}),
]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_symlink() or any(p.is_symlink() for p in path.parents if PACKAGE in p.parents):
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def test_no_module_over_400_lines_and_no_class_over_150():
    long_modules = {n: len(p.read_text().splitlines()) for n, p in modules().items()}
    long_modules = {n: count for n, count in long_modules.items() if count > MODULE_LINES}
    long_classes = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_LINES:
                long_classes[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    assert not long_modules and not long_classes, (long_modules, long_classes)


def _imports_anywhere(path: Path, known: set[str]) -> set[str]:
    """The package's modules that the module at ``path`` imports, at load or in a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found & known


def _layer(name: str) -> int | None:
    """The layer of the longest entry that ``name`` is or lies inside."""
    parts = name.split(".")[1:]
    for depth in range(len(parts), 0, -1):
        key = ".".join(parts[:depth])
        found = next((i for i, (_, entries) in enumerate(LAYERS) if key in entries), None)
        if found is not None:
            return found
    return None


def test_every_module_has_a_layer():
    assert not [name for name in modules() if name != "gemmtune" and _layer(name) is None]


def test_modules_import_only_their_layer_and_those_below():
    """The root package (``__version__``, the public names) is everyone's to import."""
    found = modules()
    upward = sorted(f"{name} -> {target} ({LAYERS[_layer(name)][0]} -> {LAYERS[_layer(target)][0]})"
                    for name, path in found.items() if name != "gemmtune"
                    for target in _imports_anywhere(path, set(found) - {"gemmtune"})
                    if _layer(target) < _layer(name))
    assert not upward, upward


def test_execution_is_the_searchs_alone():
    """Worker processes are started by the search; what else forks binds its child to its life
    as they do (``execution.child``), and nothing else of execution is reached from outside."""
    found = modules()
    outside = sorted(f"{name} -> {target}" for name, path in found.items()
                     if not name.startswith(("gemmtune.execution", "gemmtune.search"))
                     for target in _imports_anywhere(path, set(found))
                     if target.startswith("gemmtune.execution") and target != "gemmtune.execution.child")
    assert not outside, outside


def test_no_import_cycle_inside_the_package():
    """Not even through an import inside a function: such a cycle is a concept split across two
    modules. The root package (the public names, loaded lazily) is no module's dependency."""
    found = modules()
    graph = {name: _imports_anywhere(path, set(found) - {"gemmtune", name}) for name, path in found.items()}
    # A package's __init__ re-exporting its own modules is not a cycle of the code's layers.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    cycles = []
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles


def test_optunas_private_names_live_in_one_package():
    private = re.compile(r"\.(_get_trials|_storage|_rdb|_create_scoped_session|_trial_id|_study_id|_cached_frozen_trial)\b"
                         r"|optuna\.storages\._|from optuna\.\w+\._")
    users = sorted(name for name, path in modules().items() if private.search(path.read_text()))
    assert users and all(name.startswith("gemmtune.optuna_adapter.") for name in users), users


def test_kernel_files_are_of_readable_size():
    long_files = {p.name: n for p in sorted((REPO / "kernels").glob("*.cl"))
                  if (n := len(p.read_text().splitlines())) > KERNEL_LINES}
    assert not long_files, long_files


def test_every_package_is_in_the_distribution():
    """pyproject.toml lists the packages a wheel ships: a package made by a move is listed too."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in PACKAGE.rglob("__init__.py")
             if not any(q.is_symlink() for q in p.parents if PACKAGE in q.parents)}
    assert found <= listed, sorted(found - listed)


def test_results_holds_no_tracked_file_but_its_placeholder():
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert tracked in ([], ["results/.gitkeep"]), tracked
