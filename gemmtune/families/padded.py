"""Families whose main kernel reads zero-padded operands of tile multiples, which kernels/pad.cl
prepares (copies, transposes, conjugates) where the caller's operand is not already so."""

from __future__ import annotations

from gemmtune.families.base import (PREPARATION, PRODUCT, TILE, WIDTH, Constraint, Family, Params, _roundup,
                                    fits_work_group, part_defines)
from gemmtune.launch.plan import (A, ALPHA, B, BETA, C, OFFSET_A, OFFSET_B, Launch, Plan, Problem, Scratch,
                                  check_leading_dimensions)
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




def preparation_defines(p: Params, prec: Precision, batch: dict[str, int] | None = None) -> tuple[tuple[str, int], ...]:
    """The build of pad.cl's kernels apart from the product (common.cl's PART 2): what they read,
    the precision and the transpose tile (and a batch's BATCH), so that the candidates of a search
    share a few builds."""
    return part_defines(PREPARATION, prec, **{name: p[name] for name in ("TRANSPOSEX", "TRANSPOSEY", "TRANSPOSEW")},
                        **(batch or {}))


def batch_build(problem: Problem) -> tuple[dict[str, int], tuple]:
    """common.cl's BATCH defines and the arguments after each kernel's own, for a family whose
    kernels read operands from offset 0 unless batched: a batch's, or for one problem at offsets,
    those of a batch of one with strides 0 (its kernels then take the offsets); none otherwise,
    so that a single problem's builds stay those of an unbatched launch."""
    if problem.batched:
        return problem.batch_defines(), problem.batch_args()
    return ({"BATCH": 1}, (0, 0, 0)) if problem.views else ({}, ())


def _prepare(src: str, ld: int, transpose: bool, conj: bool, rows: int, cols: int, rows_p: int,
             cols_p: int, dst: str, p: Params, prec: Precision, device,
             batch: tuple[int, dict[str, int], tuple] | None = None) -> Launch:
    """dst (rows_p x cols_p, column-major) <- src (rows x cols), zero-padded and conjugated if
    asked; with ``transpose``, src is stored cols x rows and dst gets its transpose. ``batch``:
    (problems along dimension 2, each copy packed after the last; pad.cl's BATCH defines; the
    operand's offset and index, 0 A or 1 B, then BATCH_ARGS)."""
    if not transpose:
        # A fixed work-group (the kernel guards the edges): with the local size left to the
        # driver, PoCL compiles a new work-group function for every new shape.
        tile = copy_tile(device)
        size = (_roundup(rows_p, tile[0]), _roundup(-(-cols_p // COPY_PER_ITEM), tile[1]))
        args = (rows, cols, ld, rows_p, cols_p, int(conj), src, dst)
    else:
        tx, ty, tw = p["TRANSPOSEX"], p["TRANSPOSEY"], p["TRANSPOSEW"]   # tiles of ty * tw input columns
        size, tile = (_roundup(cols_p, tx), _roundup(rows_p, ty * tw) // tw), (tx, ty)
        args = (cols, rows, ld, cols_p, rows_p, int(conj), src, dst)
    if batch:
        problems, defines, more = batch
        size, tile, args = (*size, problems), (*tile, 1), (*args, *more)
    return Launch("pad_transpose" if transpose else "pad_copy", size, tile, args, gemm=False,
                  defines=preparation_defines(p, prec, batch[1] if batch else None))


class Padded(Family):
    """A main kernel ``xgemm(M, N, Kp, alpha, beta, A, lda, B, ldb, C, ldc, ...)`` reading A as
    Mp x Kp and B as Np x Kp (or Kp x Np where ``b_k_fast``), column-major, zero-padded."""

    def build_defines(self, p, prec, problem):
        # the product alone: the preparation kernels are built apart
        return {"PART": PRODUCT, **batch_build(problem)[0]}

    def operand_alignment(self, p: Params) -> int:
        """Elements to which the main kernel's vector loads need an operand it reads in place
        aligned: a batch's strides must be multiples of it."""
        return 1

    def b_k_fast(self, p: Params) -> bool:
        """Whether the kernel reads B as Kp x Np (k fastest) rather than Np x Kp."""
        return bool(p.get("BKFAST", 0))

    def main_launches(self, p: Params, prec: Precision, problem: Problem, padded: tuple[int, int, int],
                      operands: tuple, compute_units: int,
                      batch: tuple | None = None) -> tuple[tuple[Scratch, ...], tuple[Launch, ...]]:
        """The product's own kernels, given the prepared operands (a, lda, b, ldb); ``batch``, for a
        family that takes batches: (packed_a, packed_b, *BATCH_ARGS), the elements between the
        problems' prepared copies of A and B (0: one copy for all; -1: read in place)."""
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
        if (problem.views or problem.batched) and not self.takes_batch:
            raise ValueError(f"{self.name} reads one problem's operands, from offset 0 only")
        m, n, k = problem.m, problem.n, problem.k
        mp, np_, kp = padded = self.padded_shape(p, m, n, k)
        a_pass, b_pass = self._passes(p, problem, padded)
        defines, batch_args = batch_build(problem)
        copies = (1, 1)
        if defines:
            check_leading_dimensions(problem, self.name)
            # In place only at offset 0, a problem a whole number of the kernel's vectors after the
            # last; otherwise prepared, each problem's copy (one for an operand all share) packed.
            aligned = [not problem.views and not problem.table and stride % self.operand_alignment(p) == 0
                       for stride in problem.strides[:2]]
            a_pass, b_pass = a_pass or not aligned[0], b_pass or not aligned[1]
            copies = tuple(1 if not problem.table and stride == 0 else problem.batch for stride in problem.strides[:2])
        scratch, launches, packed = [], [], [-1, -1]
        a, lda = A, problem.lda
        if a_pass:
            scratch.append(Scratch("a_padded", copies[0] * mp * kp * prec.bytes))
            launches.append(_prepare(A, lda, problem.trans_a != "N", problem.trans_a == "C", m, k, mp, kp,
                                     "a_padded", p, prec, device,
                                     (copies[0], defines, (OFFSET_A, 0, *batch_args)) if defines else None))
            a, lda, packed[0] = "a_padded", mp, (copies[0] > 1) * mp * kp
        rows, cols, rows_p, cols_p = self._b_layout(p, problem, padded)
        b, ldb = B, problem.ldb
        if b_pass:
            # The kernel reads op(B) transposed (Np x Kp), or as it is where it reads B k-fastest.
            transpose = problem.trans_b != "N" if self.b_k_fast(p) else problem.trans_b == "N"
            scratch.append(Scratch("b_padded", copies[1] * np_ * kp * prec.bytes))
            launches.append(_prepare(B, ldb, transpose, problem.trans_b == "C", rows, cols, rows_p, cols_p,
                                     "b_padded", p, prec, device,
                                     (copies[1], defines, (OFFSET_B, 1, *batch_args)) if defines else None))
            b, ldb, packed[1] = "b_padded", rows_p, (copies[1] > 1) * np_ * kp
        more_scratch, main = self.main_launches(p, prec, problem, (mp, np_, kp), (a, lda, b, ldb), compute_units,
                                                (*packed, *batch_args) if defines else None)
        return Plan((*scratch, *more_scratch), (*launches, *main))
