"""Workloads: the GEMM problems a search tunes and a bench measures, from a file or a string.

A problem is BLAS's (column-major: C is m x n, inner dimension k) with an optional precision and
op() of each operand, and a batch: how many such problems at once (1 by default; docs/batched.md).
``--shapes`` takes a CSV file (a header naming m, n, k and any of precision, trans_a, trans_b,
batch), a TOML file (``[[shape]]`` tables with those keys), or the problems inline as
``"m,n,k;m,n,k,d,T,N;m,n,k,s,N,N,1000"``. Nothing here imports OpenCL.
"""

from __future__ import annotations

import csv
import io
from reprlib import repr as shown   # values in messages, cut short: a field may be 128 KiB
from dataclasses import dataclass
from pathlib import Path

from gemmtune.errors import GemmtuneError
from gemmtune.files import parse_toml, read_text
from gemmtune.launch.plan import Problem
from gemmtune.precision import PRECISIONS

COLUMNS = ("m", "n", "k", "precision", "trans_a", "trans_b", "batch")
MAX_DIM = 2**31 - 1
MAX_SHAPES = 10_000


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    precision: str | None = None   # None: the command's --precision
    trans_a: str = "N"
    trans_b: str = "N"
    batch: int = 1

    def __str__(self) -> str:
        ops = "" if (self.trans_a, self.trans_b) == ("N", "N") else f" {self.trans_a}{self.trans_b}"
        batch = f"{self.batch} x " if self.batch > 1 else ""
        return f"{batch}{self.precision or ''}{self.m}x{self.n}x{self.k}{ops}"

    @property
    def lead(self) -> tuple[int, ...]:
        """The batch as a leading dimension of the operands: none for one problem."""
        return (self.batch,) if self.batch > 1 else ()

    def with_precision(self, code: str) -> "Shape":
        return Shape(self.m, self.n, self.k, self.precision or code, self.trans_a, self.trans_b, self.batch)


def packed_problem(m: int, n: int, k: int, trans_a: str = "N", trans_b: str = "N", batch: int = 1) -> Problem:
    """The launch problem of a search or bench: packed operands, and where ``batch`` > 1 that many
    problems one after another in each buffer (strides of a whole matrix)."""
    if batch == 1:
        return Problem(m, n, k, trans_a, trans_b)
    return Problem(m, n, k, trans_a, trans_b, batch=batch, strides=(m * k, k * n, m * n))


def _shape(values: dict, where: str) -> Shape:
    unknown = sorted(set(values) - set(COLUMNS))
    if unknown:
        raise GemmtuneError(f"{where}: unknown column {shown(unknown[0])} (known: {', '.join(COLUMNS)})")
    dims = []
    for name in ("m", "n", "k", "batch"):
        value = values.get(name)
        if name == "batch" and (value is None or str(value).strip() == ""):
            value = 1
        if value is None or str(value).strip() == "":
            raise GemmtuneError(f"{where}: {name} is missing")
        try:
            if isinstance(value, (bool, float)):
                raise ValueError
            number = value if isinstance(value, int) else int(str(value).strip())
        except ValueError:
            raise GemmtuneError(f"{where}: {name} must be a whole number, got {shown(str(value))}") from None
        if not 1 <= number <= MAX_DIM:
            raise GemmtuneError(f"{where}: {name} must be between 1 and {MAX_DIM}, got {shown(value)}")
        dims.append(number)
    precision = str(values.get("precision") or "").strip().lower() or None
    if precision is not None and precision not in PRECISIONS:
        raise GemmtuneError(f"{where}: precision must be one of {', '.join(PRECISIONS)}, got {shown(precision)}")
    ops = []
    for name in ("trans_a", "trans_b"):
        op = str(values.get(name) or "N").strip().upper()
        if op not in ("N", "T", "C"):
            raise GemmtuneError(f"{where}: {name} must be N, T or C, got {shown(values.get(name))}")
        ops.append(op)
    return Shape(*dims[:3], precision, *ops, dims[3])


def parse_inline(text: str) -> list[Shape]:
    """``m,n,k[,precision[,trans_a[,trans_b[,batch]]]]`` items separated by ';'."""
    shapes = []
    for i, item in enumerate(filter(None, (part.strip() for part in text.split(";"))), 1):
        fields = [f.strip() for f in item.split(",")]
        if not 3 <= len(fields) <= len(COLUMNS):
            raise GemmtuneError(f"--shapes item {i} ({shown(item)}): expected m,n,k[,precision[,trans_a[,trans_b[,batch]]]]")
        shapes.append(_shape(dict(zip(COLUMNS, fields)), f"--shapes item {i} ({shown(item)})"))
    return shapes


def _parse_csv(text: str, origin: str) -> list[Shape]:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    try:
        header = [h.strip().lower() for h in (reader.fieldnames or [])]
        if not {"m", "n", "k"} <= set(header):
            got = shown(", ".join(header)) if header else "nothing"
            raise GemmtuneError(f"shapes file {origin}: the header must name m, n and k (got {got})")
        twice = sorted({h for h in header if header.count(h) > 1})
        if twice:   # DictReader would keep the last column of the name, silently
            raise GemmtuneError(f"shapes file {origin}: the header names {shown(twice[0])} twice")
        reader.fieldnames = header
        shapes = []
        for i, row in enumerate(reader, 2):
            if None in row:
                raise GemmtuneError(f"shapes file {origin}, row {i}: more fields than the header names")
            shapes.append(_shape({k: v for k, v in row.items() if v is not None}, f"shapes file {origin}, row {i}"))
    except csv.Error as e:   # a field longer than csv.field_size_limit(), a NUL byte
        raise GemmtuneError(f"shapes file {origin}, line {reader.line_num}: not valid CSV ({e})") from None
    return shapes


def _parse_toml(text: str, origin: str) -> list[Shape]:
    table = parse_toml(text, f"shapes file {origin}")
    rows = table.get("shape")
    if set(table) != {"shape"} or not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise GemmtuneError(f"shapes file {origin}: expected [[shape]] tables with m, n, k and nothing else")
    return [_shape(row, f"shapes file {origin}, shape {i}") for i, row in enumerate(rows, 1)]


def load_shapes(spec: str) -> list[Shape]:
    """The problems of ``--shapes``: a .csv or .toml file, or inline ``m,n,k;...``. Duplicates
    are dropped (first kept); an empty set is an error."""
    path = Path(spec)
    if spec.lower().endswith((".csv", ".toml")) or (path.suffix and path.exists()):
        text = read_text(path, "shapes file")
        shapes = _parse_toml(text, spec) if spec.lower().endswith(".toml") else _parse_csv(text, spec)
    else:
        shapes = parse_inline(spec)
    shapes = list(dict.fromkeys(shapes))
    if not shapes:
        raise GemmtuneError(f"--shapes {shown(spec)} names no problem")
    if len(shapes) > MAX_SHAPES:
        raise GemmtuneError(f"--shapes {shown(spec)} names {len(shapes)} problems; at most {MAX_SHAPES}")
    return shapes
