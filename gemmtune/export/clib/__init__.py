"""``gemmtune export --format c``: a self-contained C library (``gemmtune.h``, ``gemmtune.c``,
``CMakeLists.txt``) that runs the tuned configurations from C and C++ (docs/c.md).

What is data here is emitted as data: the kernel sources with their includes inlined, the
configurations, the tuned problems per device name and precision, the shipped defaults per
shape class (repaired for each described device as ``class_default`` repairs them), and the
constants the plans read. What a family computes per problem (``Family.plan``) is ported once to
C in ``gemmtune_impl.c``; tests/test_clib.py compares its plans with Python's, so that the two
cannot drift apart unnoticed. Selection happens at run time from the device's name, never from
its driver version or compiler macros.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from gemmtune.space.defaults import (AVX2_TABLE, BATCH_MICRO_VOLUME, BATCH_TINY_VOLUME, FIT_PADDING, LONG_K,
                                     MEDIUM_VOLUME, SKINNY, SMALL_VOLUME, TINY_VOLUME, WHOLE, WHOLE_GROUPS_PER_UNIT,
                                     class_default, class_entry, shipped_defaults, whole_tiles_fit)
from gemmtune.errors import GemmtuneError
from gemmtune.families import COPY_PER_ITEM, COPY_TILES, FAMILIES, IDLE_WORTH_SHARING, cpu, direct, thin
from gemmtune.devices.info import DeviceInfo
from gemmtune.launch.operation import BUILD_OPTIONS
from gemmtune.launch.plan import INDEX_LIMIT
from gemmtune.precision import PRECISIONS
from gemmtune.files.shipped import load_kernel_source
from gemmtune.space import RESERVED
from gemmtune.db.tuned import OTHER_OPS

FILES = ("gemmtune.h", "gemmtune.c", "CMakeLists.txt", "example.c")
# The C port of each family's plan (gemmtune_impl.c): a family without one cannot be exported.
KINDS = {"xgemm_cpu": "GT_CPU", "xgemm_direct": "GT_DIRECT", "xgemm_thin": "GT_THIN", "xgemm_k5": "GT_K5",
         "xgemm_rt": "GT_RT"}
DEVICE_TYPES = ("CPU", "GPU", "OTHER")   # gemmtune_impl.c's GT_TYPE_*
# defaults.toml's table of a device of each type that was not described: a CPU's compiler may
# target 256-bit vectors, on which the AVX-512 table's blocks spill (CPU-256's run on both)
TYPE_TABLES = {"CPU": AVX2_TABLE, "GPU": "GPU", "OTHER": "OTHER"}
CLASSES = ("tiny", "small", "medium", "large", "skinny_m", "skinny_n", "vector", "batch_micro", "batch_tiny",
           "batch_small", "batch_medium", "batch_large")


def parameters(family) -> list[str]:
    """The family's tunable parameters, in its source's order (PRECISION is the build's own)."""
    return [name for name in family.defaults if name not in RESERVED]


def template(name: str) -> str:
    return (files("gemmtune.export.clib") / name).read_text(encoding="utf-8")


def c_string(text: str) -> str:
    """``text`` as a C string literal: printable ASCII as itself except ``\\``, ``"`` and ``?``
    (no trigraph can form), every other byte (newlines, UTF-8) as an octal escape."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        out.append("\\" + ch if ch in '\\"?' else ch if 32 <= byte < 127 else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def comment(text) -> str:
    """``text`` for inside a ``/* */`` comment: printable ASCII without ``\\`` and ``?``, and no
    ``*/`` or ``/*`` (export.comment_text's rule)."""
    from gemmtune.export import comment_text

    return comment_text(text)


class _Emitter:
    def __init__(self):
        self.configs: dict[tuple, int] = {}
        self.config_lines: list[str] = []

    def config(self, config) -> int:
        family = FAMILIES[config.kernel]
        names = parameters(family)
        if set(config.params) != set(names):
            raise GemmtuneError(f"cannot export a configuration of {config.kernel} with parameters "
                                f"{sorted(config.params)}: the family's are {sorted(names)}")
        values = tuple(int(config.params[name]) for name in names)
        key = (config.kernel, values)
        if key not in self.configs:
            index = self.configs[key] = len(self.configs)
            self.config_lines.append(f"static const int gt_values_{index}[] = {{{', '.join(map(str, values))}}};")
        return self.configs[key]


def _families() -> tuple[list[str], dict[str, int]]:
    lines, order = [], {}
    rows = []
    for i, (name, family) in enumerate(FAMILIES.items()):
        if name not in KINDS:
            raise GemmtuneError(f"family {name} has no C plan in gemmtune_impl.c")
        order[name] = i
        source = load_kernel_source(family.source_file).splitlines(keepends=True)
        lines.append(f"static const char *const gt_source_{i}[] = {{")
        lines += [f"  {c_string(line)}," for line in source]
        lines.append("};")
        params = parameters(family)
        lines.append(f"static const char *const gt_params_{i}[] = {{{', '.join(c_string(p) for p in params)}}};")
        lines.append(f"static const int gt_defaults_{i}[] = {{{', '.join(str(family.defaults[p]) for p in params)}}};")
        lines.append(f"static const int gt_ranges_{i}[][2] = {_brace([family.value_range(p) for p in params])};")
        tile = ", ".join(c_string(p) for p in family.tile_params)
        rows.append(f"  {{{c_string(name)}, {KINDS[name]}, {int(family.takes_views)}, {int(family.takes_batch)}, "
                    f"gt_source_{i}, {len(source)}, {len(params)}, gt_params_{i}, gt_defaults_{i}, gt_ranges_{i}, "
                    f"{{{tile}}}}},")
    return [*lines, "static const gt_family gt_families[] = {", *rows, "};"], order


def _defaults(emit: _Emitter, found_of, views_of) -> list[list[int]]:
    """[precision][class] -> configuration index (-1: none)."""
    table = []
    for prec in PRECISIONS.values():
        row = []
        for cls in CLASSES:
            try:
                row.append(emit.config(views_of(prec, cls)) if views_of else emit.config(found_of(prec, cls)))
            except GemmtuneError:   # a precision the device cannot do, nothing valid there
                row.append(-1)
        table.append(row)
    return table


def _whole_fits(info: DeviceInfo, prec) -> bool:
    try:
        return whole_tiles_fit(info, prec)
    except GemmtuneError:   # a precision the device cannot do
        return False


def _brace(table) -> str:
    return "{" + ", ".join(_brace(x) if isinstance(x, (list, tuple)) else str(x) for x in table) + "}"


def ranked_rows(rows, devices: dict[str, DeviceInfo | None]) -> list[dict]:
    """The ``ok`` rows of ``results`` (a DataFrame, ``report.load``'s) as best_config ranks them
    (``tuned_shapes``): configurations of a shipped family that are valid on their device (as far
    as its stored description tells), best first (GFLOP/s, then the earlier row)."""
    from gemmtune.space import shipped_families
    from gemmtune.db.tuned import shipped_config

    space = shipped_families()
    ranked = []
    for row in rows[rows.status == "ok"].sort_values(["gflops", "id"], ascending=[False, True]).itertuples():
        config = shipped_config(row.kernel, row.params, space)
        info, prec = devices.get(row.device), PRECISIONS[row.precision]
        if config is None or (info is not None and FAMILIES[config.kernel].broken(config.params, info, prec)):
            continue
        ranked.append({"device": row.device, "device_name": row.device_name, "precision": row.precision,
                       "m": int(row.m), "n": int(row.n), "k": int(row.k), "ops": _op(row.trans_a) + _op(row.trans_b),
                       "config": config})
    return ranked


def _op(value) -> str:
    return value if value in ("N", "T", "C") else "N"   # rows recorded before ops were: N


def generate(ranked: list[dict], devices: dict[str, DeviceInfo | None], database: str) -> dict[str, str]:
    """The library's files by name. ``ranked``: the tuned results, best first (``ranked_rows``);
    ``devices``: the stored description of each device key (None where there is none)."""
    from gemmtune import __version__

    emit = _Emitter()
    family_lines, family_index = _families()
    # Devices by name: keys that differ in the driver version alone are one device here. Per
    # precision, the first (best) row of each problem, in the order of their best rows: the
    # order best_config breaks a tie of distances in.
    names: dict[str, dict] = {}
    for e in ranked:
        device = names.setdefault(e["device_name"], {"info": None, "rows": {}})
        device["info"] = device["info"] or devices.get(e["device"])
        device["rows"].setdefault(e["precision"], {}).setdefault((e["m"], e["n"], e["k"], e["ops"]), e["config"])
    tuned_lines, device_lines = [], []
    for name, device in sorted(names.items()):
        spans = []
        for code in PRECISIONS:
            first = len(tuned_lines)
            for (m, n, k, ops), config in device["rows"].get(code, {}).items():
                tuned_lines.append(f"  {{{m}, {n}, {k}, '{ops[0]}', '{ops[1]}', {emit.config(config)}}},")
            spans.append((first, len(tuned_lines)))
        info = device["info"]
        if info is None:
            defaults = views = [[-1] * len(CLASSES) for _ in PRECISIONS]
            whole = [0] * len(PRECISIONS)
        else:
            whole = [int(_whole_fits(info, prec)) for prec in PRECISIONS.values()]
            # each class's own default: gt_select makes batch_fit's choice among them
            defaults = _defaults(emit, lambda prec, cls: class_default(info, prec, cls,
                                                                       batched=cls.startswith("batch_")), None)
            views = _defaults(emit, None, lambda prec, cls: class_default(info, prec, cls, views=True,
                                                                          batched=cls.startswith("batch_")))
        device_lines.append(f"  /* {comment(name)} */")
        device_lines.append(f"  {{{c_string(name)}, {_brace(spans)}, {_brace(defaults)}, {_brace(views)}, "
                            f"{_brace(whole)}}},")
    type_defaults, type_views, type_whole = [], [], []
    for device_type in DEVICE_TYPES:
        found = {code: shipped_defaults(TYPE_TABLES[device_type], prec) for code, prec in PRECISIONS.items()}

        def entry(prec, cls, views=False, found=found):
            # class_default's rule, without a device to repair for: a view takes a family that
            # reads views, a batch one that takes batches, else the views class's
            config = class_entry(found[prec.code], cls)
            family = FAMILIES[config.kernel]
            fits = (family.takes_views or not views) and (family.takes_batch or not cls.startswith("batch_"))
            return config if fits else class_entry(found[prec.code], "views")

        type_defaults.append(_defaults(emit, entry, None))
        # without a device to check them on, as its type's defaults: where batch_micro's is direct
        type_whole.append([int(entry(prec, "batch_micro").kernel == "xgemm_direct") for prec in PRECISIONS.values()])
        type_views.append(_defaults(emit, None, lambda prec, cls, entry=entry: entry(prec, cls, views=True)))
    configs = sorted(emit.configs.items(), key=lambda item: item[1])
    defines = [f"#define GT_VERSION {c_string(__version__)}",
               f"#define GT_NCLASSES {len(CLASSES)}",
               f"#define GT_PRECISION_CODES {c_string(''.join(PRECISIONS))}",
               f"#define GT_PRECISION_DEFINES {_brace([p.cl_define for p in PRECISIONS.values()])}",
               f"#define GT_PRECISION_BYTES {_brace([p.bytes for p in PRECISIONS.values()])}",
               f"#define GT_PRECISION_COMPLEX {_brace([int(p.is_complex) for p in PRECISIONS.values()])}",
               f"#define GT_PRECISION_DOUBLE {_brace([int(p.needs_double) for p in PRECISIONS.values()])}",
               *(f"#define GT_CLASS_{cls.upper()} {i}" for i, cls in enumerate(CLASSES)),
               f"#define GT_TINY_VOLUME {TINY_VOLUME}.0", f"#define GT_SMALL_VOLUME {SMALL_VOLUME}.0",
               f"#define GT_BATCH_MICRO_VOLUME {BATCH_MICRO_VOLUME}.0",
               f"#define GT_BATCH_TINY_VOLUME {BATCH_TINY_VOLUME}.0",
               f"#define GT_FIT_PADDING {FIT_PADDING!r}",
               f"#define GT_WHOLE {WHOLE}", f"#define GT_WHOLE_GROUPS_PER_UNIT {WHOLE_GROUPS_PER_UNIT}",
               f"#define GT_MEDIUM_VOLUME {MEDIUM_VOLUME}.0", f"#define GT_SKINNY {SKINNY}",
               f"#define GT_LONG_K {LONG_K}", f"#define GT_OTHER_OPS {OTHER_OPS!r}",
               f"#define GT_BUILD_OPTIONS {c_string(' '.join(BUILD_OPTIONS))}",
               f"#define GT_COPY_PER_ITEM {COPY_PER_ITEM}", f"#define GT_PACK_WG {cpu.PACK_WG}",
               f"#define GT_ITEM_FLOPS {cpu.ITEM_FLOPS}LL", f"#define GT_GROUPS_PER_UNIT {cpu.GROUPS_PER_UNIT}",
               f"#define GT_DIRECT_PARTS_BYTES {direct.PARTS_BYTES}LL",
               f"#define GT_THIN_PARTS_BYTES {thin.PARTS_BYTES}LL", f"#define GT_RESIDENT_GROUPS {thin.RESIDENT_GROUPS}",
               f"#define GT_SHORTEST_PART {thin.SHORTEST_PART}", f"#define GT_SUM_GROUP {thin.SUM_GROUP}",
               f"#define GT_IDLE_WORTH_SHARING {IDLE_WORTH_SHARING!r}", f"#define GT_INDEX_LIMIT {INDEX_LIMIT}LL",
               f"#define GT_NCOPY_TILES {len(COPY_TILES)}", f"#define GT_NFAMILIES {len(FAMILIES)}",
               f"#define GT_NDEVICES {len(device_lines) // 2}"]
    data = [
        *family_lines,
        f"static const int gt_copy_tiles[][2] = {_brace(COPY_TILES)};",
        *emit.config_lines,
        "static const gt_config gt_configs[] = {",
        *(f"  {{{family_index[kernel]}, gt_values_{i}}},  /* {kernel} */" for (kernel, _), i in configs),
        "};",
        "/* the tuned problems of each device and precision, best first (tuned.py's order for ties) */",
        "static const gt_tuned gt_tuned_rows[] = {", *tuned_lines, "  {0, 0, 0, 'N', 'N', -1}  /* end */", "};",
        "static const gt_device gt_devices[] = {", *device_lines,
        "  {\"\", {{0, 0}}, {{-1}}, {{-1}}, {0}}  /* end */", "};",
        f"/* the defaults of a device not described here, by type ({', '.join(DEVICE_TYPES)}), precision and class */",
        f"static const int gt_type_defaults[3][4][GT_NCLASSES] = {_brace(type_defaults)};",
        f"static const int gt_type_views[3][4][GT_NCLASSES] = {_brace(type_views)};",
        f"static const int gt_type_whole[3][4] = {_brace(type_whole)};",
    ]
    impl = template("gemmtune_impl.c")
    if "/* @DATA@ */" not in impl:
        raise GemmtuneError("gemmtune_impl.c lacks its data marker")
    head, tail = impl.split("/* @DATA@ */")
    what = (f"/* gemmtune {comment(__version__)}: exported from {comment(database)} by gemmtune export --format c.\n"
            f" * Devices: {comment(', '.join(sorted(names)) or 'none tuned')}. */\n")
    source = what + "\n".join(defines) + "\n" + head + "\n".join(data) + "\n" + tail
    return {"gemmtune.h": template("gemmtune.h"), "gemmtune.c": source, "CMakeLists.txt": template("CMakeLists.txt"),
            "example.c": template("example.c")}


def check_directory(directory: str | Path) -> None:
    """Refuse, before any work, a ``directory`` that is something else, or whose library files
    ``write_file`` could not replace."""
    from gemmtune.files.output import writable

    directory = Path(directory)
    if directory.is_symlink():
        raise GemmtuneError(f"cannot write into {directory}: it is a symbolic link, and gemmtune writes no file "
                            "through a link: name the directory itself")
    if directory.exists() and not directory.is_dir():
        raise GemmtuneError(f"{directory} is not a directory: export --format c writes its files into one")
    for name in FILES:
        writable(directory / name)


def write(library: dict[str, str], directory: str | Path) -> None:
    """Write the library's files into ``directory`` (made if missing), each whole or not at all."""
    from gemmtune.files.output import write_file

    check_directory(directory)
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GemmtuneError(f"cannot make directory {directory}: {e.strerror or e}") from None
    for name in FILES:
        write_file(directory / name, library[name])


# ---------------------------------------------------------------- docs/kernels.md's launches

LAUNCH_DOCS = ("<!-- launches: written by gemmtune.export.clib.write_launch_docs from the families' plans; "
               "tests/test_clib.py checks it -->", "<!-- end of launches -->")
# Per family: a configuration (changes to the kernel's defaults) and a column-major problem whose
# plan has every pass the family can enqueue, on a device of 4 compute units and groups of 256.
LAUNCH_EXAMPLES = {
    "xgemm_cpu": ({"PACKA": 1, "PACKB": 1, "ORDER": 1}, ("s", 37, 29, 41, "T", "N")),
    "xgemm_direct": ({"KSPLIT": 2}, ("s", 37, 29, 41, "T", "C")),
    "xgemm_thin": ({"KSPLIT": 4}, ("s", 3, 67, 300, "N", "T")),
    "xgemm_k5": ({}, ("s", 37, 29, 41, "T", "T")),
    "xgemm_rt": ({"STREAMK": 1}, ("s", 61, 29, 41, "N", "N")),
}


def launch_docs() -> str:
    """Markdown: each family's launches for an example problem, from ``Family.plan`` itself."""
    from gemmtune.launch.plan import Problem
    from gemmtune.space import make_config, shipped_families

    dev = DeviceInfo(index=0, platform_index=0, device_index=0, platform="example", name="example", vendor="example",
                     type="GPU", opencl_version="OpenCL 3.0", driver_version="1", compute_units=4, max_clock_mhz=1000,
                     global_mem_bytes=1 << 32, local_mem_bytes=1 << 16, max_work_group_size=256,
                     max_work_item_sizes=(256, 256, 64), double_precision=True)
    out = [LAUNCH_DOCS[0], "",
           "What each family enqueues for one problem, as `Family.plan` makes it (and the exported C library's "
           "`gemmtune_plan` returns it for any problem): in order, each kernel with its program (*own*: the "
           "configuration's build; else a build of the family's source with these defines alone, shared by every "
           "configuration that has them), global and local size, and arguments (`int` values, the call's "
           "operands, offsets and scalars, and scratch buffers). Shown for s on a device of 4 compute units and "
           "work-groups of up to 256; every size and argument follows the problem.", ""]
    for name, (changes, (code, m, n, k, ta, tb)) in LAUNCH_EXAMPLES.items():
        config = make_config(shipped_families(), name, changes)
        prec = PRECISIONS[code]
        problem = Problem(m, n, k, ta, tb)
        out += [f"### `{name}`", "",
                f"{', '.join(f'{key}={value}' for key, value in config.items)}; C ({m} x {n}) ← "
                f"op(A) · op(B) with K = {k}, op(A) = {ta}, op(B) = {tb}, packed leading dimensions.", "",
                *_launch_table(FAMILIES[name].plan(config.params, prec, problem, dev, dev.compute_units))]
        if FAMILIES[name].takes_batch:
            span_a = m * k
            batch = Problem(m, n, k, ta, tb, batch=BATCH_EXAMPLE, strides=(span_a, 0, m * n))
            out += [f"As a batch of {BATCH_EXAMPLE} such problems, one after another in A and C ({span_a} and "
                    f"{m * n} elements apart), B shared (stride 0):", "",
                    *_launch_table(FAMILIES[name].plan(config.params, prec, batch, dev, dev.compute_units))]
    return "\n".join([*out, LAUNCH_DOCS[1]]) + "\n"


BATCH_EXAMPLE = 6


def _launch_table(plan) -> list[str]:
    out = ["| kernel | program | global | local | arguments |", "|---|---|---|---|---|"]
    for launch in plan.launches:
        program = " ".join(f"{d}={v}" for d, v in launch.defines) if launch.defines else "*own*"
        out.append(f"| `{launch.kernel}` | {program} | {' x '.join(map(str, launch.global_size))} | "
                   f"{' x '.join(map(str, launch.local_size))} | {', '.join(map(str, launch.args))} |")
    scratch = ", ".join(f"{s.name} ({len(s.table)} x 4 ints)" if s.table is not None
                        else f"{s.name} ({s.nbytes} bytes)" for s in plan.scratch)
    return [*out, "", f"Scratch buffers: {scratch or 'none'}.", ""]


def write_launch_docs(path: str | Path) -> None:
    """Put ``launch_docs()`` into the markdown file at ``path``, in place of what stands between
    its markers (at the end where it has none)."""
    from gemmtune.files.output import write_file

    text = Path(path).read_text(encoding="utf-8")
    start, end = text.find(LAUNCH_DOCS[0]), text.find(LAUNCH_DOCS[1])
    if start < 0 or end < 0:
        text = text.rstrip("\n") + "\n\n## Host launches, generated\n\n" + launch_docs()
    else:
        text = text[:start] + launch_docs() + text[end + len(LAUNCH_DOCS[1]) + 1:]
    write_file(path, text)
