"""``gemmtune export``: the tuned configurations for programs that do not use gemmtune.

JSON (``to_json``)::

    {"gemmtune_version": "0.1.0", "database": "sqlite:///results/gemmtune.db",
     "entries": [{"device": "<platform> | <device name> | <driver version>",
                  "device_name": "...", "precision": "s", "m": 1024, "n": 1024, "k": 1024,
                  "kernel": "xgemm_k5", "params": {"TSM": 64, ...}, "gflops": 1234.5,
                  "batch": 1, "time_ms": 1.74, "study": "...", "trial": 17}, ...]}

one entry per (device, precision, m, n, k, ops, batch): its best ``ok`` row. Shapes are BLAS's
(column-major, C is m x n), as ``gemmtune search`` uses them; ``batch`` is the problems of one
launch (docs/batched.md), ``gflops`` and ``time_ms`` the whole batch's.

C header (``to_header``): one block of ``#define``s per device and precision, chosen by macros
the including program defines; see the header's own comment (``HEADER_USAGE``). Per device and
precision the block holds the best configuration of the largest shape tuned one problem a launch
(by m*n*k, then GFLOP/s; a batch's needs a batched build and launch, which the header does not
describe): large problems are what tuning is for, and the configuration of one shape is valid
for all. The ``#else`` block holds the shipped defaults of ``configs/defaults.toml``.

Both leave out rows whose parameters are not those of a shipped kernel family (tuned from a
custom ``--space`` source): the kernels in ``kernels/`` could not use them.

Both are safe for their readers whatever the database holds: the database URL is written without
its password, JSON escapes every string, and the header holds names from the database (study,
device, driver, platform) only in comments reduced to printable ASCII without backslashes,
question marks and comment delimiters, so that none can end its comment or start a directive;
every macro name is checked to be a C identifier and every value an integer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from gemmtune.space.defaults import AVX2_TABLE, shipped_default
from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.files.output import write_file
from gemmtune.precision import PRECISIONS
from gemmtune.space import shipped_families
from gemmtune.db.tuned import shipped_config
from gemmtune.db.urls import shown

# defaults.toml's tables besides OTHER, each with what selects it in the header: the device type
# the includer defines and, for a CPU, the vectors its compiler targets (as
# gemmtune.space.defaults.table_name picks: 256-bit ones, AVX2, take CPU-256)
DEFAULT_TABLES = (("GPU", "defined(GEMMTUNE_DEVICE_TYPE_GPU)"),
                  (AVX2_TABLE, "defined(GEMMTUNE_DEVICE_TYPE_CPU) && defined(__AVX__) && !defined(__AVX512F__)"),
                  ("CPU", "defined(GEMMTUNE_DEVICE_TYPE_CPU)"),
                  ("OTHER", None))


def best_entries(rows: pd.DataFrame) -> list[dict]:
    """The best ok row of each (device, precision, m, n, k, ops, batch) among shipped-family
    configurations, as JSON entries, sorted by device, precision, shape, ops and batch."""
    from gemmtune.report.table import with_ops

    space = shipped_families()
    ok = with_ops(rows[rows.status == "ok"]).sort_values(["gflops", "id"], ascending=[False, True])
    entries: dict[tuple, dict] = {}
    for row in ok.itertuples():
        key = (row.device, row.precision, int(row.m), int(row.n), int(row.k), row.ops, int(row.batch))
        if key in entries:
            continue
        config = shipped_config(row.kernel, row.params, space)
        if config is None:
            continue
        entries[key] = {"device": row.device, "device_name": row.device_name, "precision": row.precision,
                        "m": key[2], "n": key[3], "k": key[4], "ops": row.ops, "batch": key[6],
                        "kernel": config.kernel,
                        "params": config.params, "gflops": float(row.gflops),
                        "time_ms": None if pd.isna(row.time_ms) else float(row.time_ms),
                        "study": row.study, "trial": int(row.trial)}
    return [entries[key] for key in sorted(entries)]


def to_json(entries: list[dict], database: str) -> str:
    from gemmtune import __version__

    return json.dumps({"gemmtune_version": __version__, "database": shown(database), "entries": entries},
                      indent=2, allow_nan=False) + "\n"


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def comment_text(text) -> str:
    """``text`` as it may stand in a ``//`` comment of the header: printable ASCII, with other
    characters as ``_``. A newline would end the comment and let the rest start a directive; a
    backslash at the end of a line (``??/`` where trigraphs are on) would continue the comment
    into the next line and swallow it; ``*/`` and ``/*`` are broken up so that the text cannot
    end or open a block comment wherever it is copied."""
    safe = "".join(c if " " <= c <= "~" and c not in "\\?" else "_" for c in str(text))
    while "*/" in safe or "/*" in safe:
        safe = safe.replace("*/", "*_").replace("/*", "_*")
    return safe


def _define(name: str, value) -> str:
    """One ``#define`` of an integer; the header's own names and the kernels' parameters only."""
    if not _IDENTIFIER.fullmatch(name) or isinstance(value, bool) or not isinstance(value, int):
        raise GemmtuneError(f"refusing to export #define {name!r} {value!r}: not a C identifier and an integer")
    return f"#define {name} {value}"


def _string(name: str, value: str, pattern: re.Pattern) -> str:
    if not _IDENTIFIER.fullmatch(name) or not pattern.fullmatch(value):
        raise GemmtuneError(f"refusing to export #define {name!r} {value!r}")
    return f'#define {name} "{value}"'


def device_macro(device_key: str) -> str:
    """The macro that selects a device's blocks: GEMMTUNE_DEVICE_ and the key in capitals,
    every run of other characters than letters and digits as one underscore."""
    return "GEMMTUNE_DEVICE_" + re.sub(r"[^A-Za-z0-9]+", "_", device_key).strip("_").upper()


def header_choice(entries: list[dict]) -> dict[tuple[str, str], dict]:
    """(device, precision) -> the entry the header uses: the largest shape's best, of one problem a
    launch (the header's kernel is built without BATCH)."""
    chosen: dict[tuple[str, str], dict] = {}
    for e in entries:
        if e.get("batch", 1) > 1:
            continue
        key = (e["device"], e["precision"])
        size = (e["m"] * e["n"] * e["k"], e["gflops"])
        if key not in chosen or size > (chosen[key]["m"] * chosen[key]["n"] * chosen[key]["k"], chosen[key]["gflops"]):
            chosen[key] = e
    return chosen


HEADER_USAGE = """\
For a library that chooses the configuration at run time from the device's name and the
problem, and carries out every launch of every family (padding, packing, stream-K's pieces and
fix-up): gemmtune export --format c -o DIR (gemmtune's docs/c.md). This header leaves both to
the includer.

Define, then #include this file, in both the host program and the OpenCL source:

  GEMMTUNE_DEVICE_<DEVICE>  the macro of your device, from the list below, and
  PRECISION                 32 (s), 64 (d), 3232 (c) or 6464 (z), as kernels/common.cl
                            reads it (default 32).

A device and precision listed below get their tuned configuration. Any other gets the
shipped default (gemmtune's configs/defaults.toml) of its device type: define
GEMMTUNE_DEVICE_TYPE_GPU or GEMMTUNE_DEVICE_TYPE_CPU, or neither for the conservative
OTHER one. Every block defines the kernel parameters and
  GEMMTUNE_KERNEL         the kernel family, e.g. "xgemm_k5"
  GEMMTUNE_KERNEL_SOURCE  its file in gemmtune's kernels/, e.g. "xgemm_k5.cl"
  GEMMTUNE_TUNED          1 for a tuned configuration, 0 for a default.
In the OpenCL source, put the #include before the text of GEMMTUNE_KERNEL_SOURCE (each
includes common.cl; xgemm_k5.cl and xgemm_rt.cl include pad.cl, xgemm_rt.cl its parts
xgemm_rt_*.cl, and xgemm_cpu.cl xgemm_cpu_planar.cl): these #defines take the place of its
#ifndef defaults. The host launches that kernel with the geometry the parameters imply
(gemmtune's docs/kernels.md, "Host launches, generated"). Per device and precision the block
holds the best configuration of the largest shape tuned (m*n*k); a configuration is valid for
every shape: xgemm_k5 and xgemm_rt read operands padded to tile multiples, the other families
read them in place and guard the edges. A configuration tuned on NVIDIA's compute capability 9.0 may take
up to 226 KiB of local memory, which its OpenCL driver builds although it reports 48 KiB.
xgemm_rt's PIPE 5 to 7 copy with NVIDIA's cp.async only where the
OpenCL build defines CP_ASYNC=1 (compute capability 8.0 and later, as gemmtune's own builds
do); without it they copy with loads and stores, correct but slower. Its MMA 1 and 2 multiply
with NVIDIA's FP64 matrix instructions only where the build defines MMA_F64=1 (compute
capability 9.0 and later); without it the kernel spells each instruction out through local
memory, correct but far slower (a path for testing; gemmtune never tunes MMA there).
With STREAMK > 0 the host also passes xgemm the list of pieces the last tiles are cut into,
and launches xgemm_fixup after it (see the top of xgemm_rt.cl; gemmtune's families.py,
stream_k_pieces, computes the lists for a shape and device)."""


def _block(config, lines: list[str], tuned: bool) -> list[str]:
    family = FAMILIES[config.kernel]
    out = [*lines, _define("GEMMTUNE_TUNED", int(tuned)),
           _string("GEMMTUNE_KERNEL", config.kernel, _IDENTIFIER),
           _string("GEMMTUNE_KERNEL_SOURCE", family.source_file, _FILE_NAME)]
    out += [_define(name, value) for name, value in config.items]
    return out


def to_header(entries: list[dict], database: str) -> str:
    """A C header for OpenCL C and host C alike (see HEADER_USAGE)."""
    from gemmtune import __version__

    chosen = header_choice(entries)
    macros: dict[str, str] = {}
    for device in sorted({d for d, _ in chosen}):
        macro = device_macro(device)
        while macro in macros.values():  # keys that differ only in punctuation
            macro += "_"
        macros[device] = macro
    usage = "\n".join(f"// {line}".rstrip() for line in HEADER_USAGE.splitlines())
    order = list(PRECISIONS)
    tuned_precisions = {d: ", ".join(sorted((c for dd, c in chosen if dd == d), key=order.index)) for d in macros}
    devices = "\n".join(f"//   {macros[d]}\n//       {comment_text(d)} (precisions {tuned_precisions[d]})"
                        for d in macros) or "//   (none: nothing was tuned)"
    out = [f"// gemmtune: tuned kernel configurations, exported by gemmtune {comment_text(__version__)} from "
           f"{comment_text(shown(database))}.",
           "//", usage, "//", "// Devices:", devices,
           "#ifndef GEMMTUNE_TUNED_H", "#define GEMMTUNE_TUNED_H", "",
           "#ifndef PRECISION", "#define PRECISION 32", "#endif", ""]
    branch = "#if"
    for (device, code), e in sorted(chosen.items(), key=lambda item: (item[0][0], order.index(item[0][1]))):
        config = shipped_config(e["kernel"], e["params"])
        out += _block(config, [f"{branch} defined({macros[device]}) && PRECISION == {PRECISIONS[code].cl_define}",
                               f"// {comment_text(e['device_name'])}, {code}gemm {e['m']}x{e['n']}x{e['k']}: "
                               f"{e['gflops']:.6g} GFLOP/s (study {comment_text(e['study'])}, trial {e['trial']})"],
                          True)
        branch = "#elif"
    if chosen:
        out += ["#else  // not tuned here: the shipped defaults"]
    branch = "#if"
    for table, selected in DEFAULT_TABLES:
        for prec in PRECISIONS.values():
            test = f"PRECISION == {prec.cl_define}"
            if selected is not None:
                test = f"{selected} && {test}"
            out += _block(shipped_default(table, prec), [f"{branch} {test}",
                          f"// shipped default, {table} {prec.code}gemm"], False)
            branch = "#elif"
    out += ["#else", '#error "gemmtune: PRECISION must be 32, 64, 3232 or 6464"', "#endif"]
    if chosen:
        out += ["#endif"]
    out += ["", "#endif  // GEMMTUNE_TUNED_H", ""]
    return "\n".join(out)


def write(text: str, output: str | Path) -> None:
    """Write ``output`` whole or not at all, never through a link (``gemmtune.files.output.write_file``):
    a reader never finds half a header."""
    write_file(output, text)
