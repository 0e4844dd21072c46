"""Families whose main kernel reads zero-padded operands of tile multiples, which kernels/pad.cl
prepares (copies, transposes, conjugates) where the caller's operand is not already so."""

from __future__ import annotations

from gemmtune.families.base import (PREPARATION, PRODUCT, TILE, WIDTH, Constraint, Family, Params, _roundup,
                                    fits_work_group, part_defines)
from gemmtune.launch import A, ALPHA, B, BETA, C, Launch, Plan, Problem, Scratch
from gemmtune.precision import Precision

# pad_copy's work-group: the first of these the device takes (32 down a column is the fastest
# on an H200, see docs/performance.md), and the elements of a row each of its work-items moves,
# a work-group's height of columns apart.
COPY_TILES = ((32, 8), (32, 2))
COPY_PER_ITEM = 4


def copy_tile(device) -> tuple[int, int]:
    """pad_copy's work-group on ``device``: the first of COPY_TILES within its limits (the last
    if none is)."""
    return next((t for t in COPY_TILES if fits_work_group(*t, device)), COPY_TILES[-1])


def transpose_columns(p: Params):
    """Input columns of pad.cl's transpose tile."""
    return p["TRANSPOSEY"] * p["TRANSPOSEW"]


def transpose_local_bytes(p: Params, prec: Precision) -> int:
    """Local memory of pad.cl's transpose tile: TRANSPOSEY * TRANSPOSEW rows of TRANSPOSEX + 1
    elements."""
    return transpose_columns(p) * (p["TRANSPOSEX"] + 1) * prec.bytes


TRANSPOSE_RANGES = {"TRANSPOSEX": TILE, "TRANSPOSEY": TILE, "TRANSPOSEW": WIDTH}   # pad.cl's parameters

TRANSPOSE_FITS = Constraint(
    5, "transpose tile",
    "TRANSPOSEX <= max work-item size[0], TRANSPOSEY <= max work-item size[1], "
    "TRANSPOSEX * TRANSPOSEY <= max work-group size, its local tile of "
    "TRANSPOSEY * TRANSPOSEW x (TRANSPOSEX + 1) elements fits local memory",
    lambda p, dev, prec: (
        fits_work_group(p["TRANSPOSEX"], p["TRANSPOSEY"], dev)
        & (transpose_local_bytes(p, prec) <= dev.local_mem_bytes)
    ),
)




def preparation_defines(p: Params, prec: Precision) -> tuple[tuple[str, int], ...]:
    """The build of pad.cl's kernels apart from the product (common.cl's PART 2): what they read,
    the precision and the transpose tile, so that the candidates of a search share a few builds."""
    return part_defines(PREPARATION, prec, **{name: p[name] for name in ("TRANSPOSEX", "TRANSPOSEY", "TRANSPOSEW")})


def _prepare(src: str, ld: int, transpose: bool, conj: bool, rows: int, cols: int, rows_p: int,
             cols_p: int, dst: str, p: Params, prec: Precision, device) -> Launch:
    """dst (rows_p x cols_p, column-major) <- src (rows x cols), zero-padded and conjugated if
    asked; with ``transpose``, src is stored cols x rows and dst gets its transpose."""
    defines = preparation_defines(p, prec)
    if not transpose:
        # A fixed work-group (the kernel guards the edges): with the local size left to the
        # driver, PoCL compiles a new work-group function for every new shape.
        tile = copy_tile(device)
        size = (_roundup(rows_p, tile[0]), _roundup(-(-cols_p // COPY_PER_ITEM), tile[1]))
        return Launch("pad_copy", size, tile, (rows, cols, ld, rows_p, cols_p, int(conj), src, dst), gemm=False,
                      defines=defines)
    tx, ty, tw = p["TRANSPOSEX"], p["TRANSPOSEY"], p["TRANSPOSEW"]   # tiles of ty * tw input columns
    size = (_roundup(cols_p, tx), _roundup(rows_p, ty * tw) // tw)
    return Launch("pad_transpose", size, (tx, ty), (cols, rows, ld, cols_p, rows_p, int(conj), src, dst),
                  gemm=False, defines=defines)


class Padded(Family):
    """A main kernel ``xgemm(M, N, Kp, alpha, beta, A, lda, B, ldb, C, ldc, ...)`` reading A as
    Mp x Kp and B as Np x Kp (or Kp x Np where ``b_k_fast``), column-major, zero-padded."""

    def build_defines(self, p, prec, problem):
        return {"PART": PRODUCT}   # the product alone: the preparation kernels are built apart

    def b_k_fast(self, p: Params) -> bool:
        """Whether the kernel reads B as Kp x Np (k fastest) rather than Np x Kp."""
        return bool(p.get("BKFAST", 0))

    def main_launches(self, p: Params, prec: Precision, problem: Problem, padded: tuple[int, int, int],
                      operands: tuple, compute_units: int) -> tuple[tuple[Scratch, ...], tuple[Launch, ...]]:
        """The product's own kernels, given the prepared operands (a, lda, b, ldb)."""
        mp, np_, kp = padded
        a, lda, b, ldb = operands
        size = self.global_size(p, mp, np_)
        return (), (Launch(self.kernel_name, size, self.local_size(p),
                           (problem.m, problem.n, kp, ALPHA, BETA, a, lda, b, ldb, C, problem.ldc)),)

    def _b_layout(self, p: Params, problem: Problem, padded) -> tuple[int, int, int, int]:
        """B as the kernel reads it: (rows, cols, rows padded, cols padded), column-major."""
        k, n, (_, np_, kp) = problem.k, problem.n, padded
        return (k, n, kp, np_) if self.b_k_fast(p) else (n, k, np_, kp)

    def _passes(self, p: Params, problem: Problem, padded) -> tuple[bool, bool]:
        """Whether A and B need a preparation pass: the kernel reads an operand as it is only
        in its own layout (A untransposed; B transposed, or untransposed where it reads B
        k-fastest), of tile multiples and packed."""
        mp, _, kp = padded
        a = not (problem.trans_a == "N" and (mp, kp) == (problem.m, problem.k) and problem.lda == problem.m)
        rows, cols, rows_p, cols_p = self._b_layout(p, problem, padded)
        b = not (problem.trans_b == ("N" if self.b_k_fast(p) else "T") and (rows_p, cols_p) == (rows, cols)
                 and problem.ldb == rows)
        return a, b

    def pass_elements(self, p, problem):
        padded = self.padded_shape(p, problem.m, problem.n, problem.k)
        mp, np_, kp = padded
        a, b = self._passes(p, problem, padded)
        return (*((problem.m * problem.k + mp * kp,) if a else ()), *((problem.k * problem.n + np_ * kp,) if b else ()))

    def plan(self, p, prec, problem, device, compute_units):
        if problem.views:
            raise ValueError(f"{self.name} reads operands from offset 0 only")
        m, n, k = problem.m, problem.n, problem.k
        mp, np_, kp = padded = self.padded_shape(p, m, n, k)
        a_pass, b_pass = self._passes(p, problem, padded)
        scratch, launches = [], []
        a, lda = A, problem.lda
        if a_pass:
            scratch.append(Scratch("a_padded", mp * kp * prec.bytes))
            launches.append(_prepare(A, lda, problem.trans_a != "N", problem.trans_a == "C", m, k, mp, kp,
                                     "a_padded", p, prec, device))
            a, lda = "a_padded", mp
        rows, cols, rows_p, cols_p = self._b_layout(p, problem, padded)
        b, ldb = B, problem.ldb
        if b_pass:
            # The kernel reads op(B) transposed (Np x Kp), or as it is where it reads B k-fastest.
            transpose = problem.trans_b != "N" if self.b_k_fast(p) else problem.trans_b == "N"
            scratch.append(Scratch("b_padded", np_ * kp * prec.bytes))
            launches.append(_prepare(B, ldb, transpose, problem.trans_b == "C", rows, cols, rows_p, cols_p,
                                     "b_padded", p, prec, device))
            b, ldb = "b_padded", rows_p
        more_scratch, main = self.main_launches(p, prec, problem, (mp, np_, kp), (a, lda, b, ldb), compute_units)
        return Plan((*scratch, *more_scratch), (*launches, *main))
