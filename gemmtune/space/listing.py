"""``gemmtune space``'s listing: the valid configurations of a space as text in the command's
format, streamed chunk by chunk, so that a listing of millions starts at once and holds one
chunk in memory."""

from __future__ import annotations

import json

import numpy as np

from gemmtune.space.valid import iter_valid_columns


def space_rows(the_space, dev, prec, fmt: str, limit: int = 0):
    """The valid configurations (the first ``limit``, then None if there are more) as ``emit``
    would print their ``describe`` rows, as text chunk by chunk: the first rows go out long
    before the last are found, and memory holds one chunk.

    The table's column widths come from the values the space allows and the device's limits,
    known before any row, rather than from the rows printed. With several kernel families the
    columns are those of all of them; a family's row leaves the others' blank (CSV) or "-".
    """
    families = the_space.families
    columns = list(dict.fromkeys(c for fs in families for c in [*fs.values, "kernel", "local_mem_bytes",
                                                                     "work_group_size"]))
    width = {c: len(c) for c in columns}
    for fs in families:
        width["kernel"] = max(width["kernel"], len(fs.family.name))
        for name, values in fs.values.items():
            width[name] = max(width[name], *(len(str(v)) for v in values))
    # Valid configurations fit the device's local memory and work-group size (constraints of every family).
    width["local_mem_bytes"] = max(width["local_mem_bytes"], len(str(dev.local_mem_bytes)))
    width["work_group_size"] = max(width["work_group_size"], len(str(dev.max_work_group_size)))
    for c in columns:
        if c != "kernel":
            width[c] += 1   # pandas keeps a place for the sign in number columns; so does this

    def template(fs) -> tuple[str, list[str]]:
        """A %-format of one row of ``fs``, and the names of the numbers it takes, in order."""
        kernel = fs.family.name.replace("%", "%%")
        if fmt == "json":   # describe()'s order
            fields = [f"    {json.dumps(c)}: %d" for c in fs.values]
            fields += [f"    \"kernel\": {json.dumps(kernel)}", '    "local_mem_bytes": %d', '    "work_group_size": %d']
            return "  {\n" + ",\n".join(fields) + "\n  }", [*fs.values, "local_mem_bytes", "work_group_size"]
        mine = {*fs.values, "local_mem_bytes", "work_group_size"}
        if fmt == "csv":
            form = ",".join("%d" if c in mine else kernel if c == "kernel" else "" for c in columns)
        else:
            form = " ".join(f"%{width[c]}d" if c in mine else (kernel if c == "kernel" else "-").rjust(width[c])
                            for c in columns)
        return form, [c for c in columns if c in mine]

    def numbers(fs, cols, names: list[str]) -> list[list[int]]:
        p = {k: cols[k] for k in fs.values}
        size = len(next(iter(p.values())))
        derived = {"local_mem_bytes": np.broadcast_to(fs.family.local_mem_bytes(p, prec), size),
                   "work_group_size": np.broadcast_to(fs.family.work_group_size(p), size)}
        return np.column_stack([p[c] if c in p else derived[c] for c in names]).tolist()

    templates = {fs.family.name: template(fs) for fs in families}
    rows, more = 0, False
    for fs, cols in iter_valid_columns(the_space, dev, prec):
        if more := bool(limit) and rows >= limit:
            break
        form, names = templates[fs.family.name]
        lines = [form % tuple(r) for r in numbers(fs, cols, names)]
        more, lines = bool(limit) and rows + len(lines) > limit, lines[:limit - rows if limit else None]
        if fmt == "json":
            yield ("[\n" if not rows else ",\n") + ",\n".join(lines)
        else:
            if not rows:
                yield (",".join(columns) if fmt == "csv" else " ".join(c.rjust(width[c]) for c in columns)) + "\n"
            yield "\n".join(lines) + "\n"
        rows += len(lines)
    if fmt == "json":
        yield "\n]\n" if rows else "[]\n"
    elif not rows:
        yield "(none)\n"
    if more:
        yield None
