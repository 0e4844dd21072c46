"""Launch plans: what a kernel family enqueues for one problem, as plain data (no OpenCL).

A family turns a configuration and a :class:`Problem` into a :class:`Plan`: the scratch
buffers and the kernels to enqueue in order with their sizes and
arguments. ``gemmtune.launch.operation.GemmOperation`` carries any plan out, so it knows no family by
name, and the performance model and the exported header read the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemmtune.errors import GemmtuneError

# Symbolic kernel arguments, bound when the operation is enqueued: the caller's buffers, their
# element offsets, and the scalars.
A, B, C = "A", "B", "C"
OFFSET_A, OFFSET_B, OFFSET_C = "offset_a", "offset_b", "offset_c"
ALPHA, BETA = "alpha", "beta"
# The array form of a batch: per problem, the element offsets of A, B and C (int32 x 3), a
# buffer bound per call like the operands.
BATCH_OFFSETS = "batch_offsets"
CALL_ARGUMENTS = (A, B, C, OFFSET_A, OFFSET_B, OFFSET_C, ALPHA, BETA, BATCH_OFFSETS)


@dataclass(frozen=True)
class Problem:
    """C (m x n) <- alpha * op(A) * op(B) + beta * C, column-major, BLAS's meaning.

    ``lda``/``ldb``/``ldc`` are the leading dimensions (None: the operand's rows as stored,
    i.e. packed). ``views``: the operands may start at element offsets other than 0, bound
    on each call. ``batch`` problems of this shape at once: problem z's operands start
    z x ``strides`` (of A, B, C; 0 for an operand all share) past the offsets, or, with
    ``table``, at the offsets of a table bound on each call (BATCH_OFFSETS).
    """
    m: int
    n: int
    k: int
    trans_a: str = "N"
    trans_b: str = "N"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None
    views: bool = False
    batch: int = 1
    strides: tuple[int, int, int] = (0, 0, 0)
    table: bool = False

    def __post_init__(self):
        # Normalise the leading dimensions, so equal problems compare (and cache) equal.
        object.__setattr__(self, "lda", self.lda or (self.m if self.trans_a == "N" else self.k))
        object.__setattr__(self, "ldb", self.ldb or (self.k if self.trans_b == "N" else self.n))
        object.__setattr__(self, "ldc", self.ldc or self.m)

    @property
    def batched(self) -> bool:
        return self.batch > 1

    def batch_defines(self) -> dict[str, int]:
        """common.cl's BATCH for every kernel of a batched launch; nothing for one problem, whose
        builds stay those of an unbatched launch."""
        return {"BATCH": 2 if self.table else 1} if self.batched else {}

    def batch_args(self) -> tuple:
        """What every kernel of a batched launch takes after its own arguments (common.cl's BATCH_ARGS)."""
        if not self.batched:
            return ()
        return (BATCH_OFFSETS,) if self.table else tuple(self.strides)


INDEX_LIMIT = 2**31   # kernels index with int


def check_leading_dimensions(problem: Problem, family: str) -> None:
    """For a family that reads operands in place: each leading dimension at least its operand's
    rows (ValueError), and each operand within what an int can index (GemmtuneError)."""
    m, n, k = problem.m, problem.n, problem.k
    stored = {"A": (m, k) if problem.trans_a == "N" else (k, m), "B": (k, n) if problem.trans_b == "N" else (n, k),
              "C": (m, n)}
    for name, ld in (("A", problem.lda), ("B", problem.ldb), ("C", problem.ldc)):
        rows, cols = stored[name]
        if ld < rows:
            raise ValueError(f"leading dimension of {name} ({ld}) is below its {rows} rows")
        stride = problem.strides["ABC".index(name)] if problem.batched and not problem.table else 0
        span = (problem.batch - 1) * stride + ld * cols   # every problem of a strided batch
        if span >= INDEX_LIMIT:
            raise GemmtuneError(f"{name} spans {span} elements; {family} indexes at most {INDEX_LIMIT - 1}")


@dataclass(frozen=True)
class Scratch:
    """A device buffer the plan needs: ``nbytes`` uninitialised, or filled from ``table``
    (rows of int32, e.g. stream-K's pieces)."""
    name: str
    nbytes: int = 0
    table: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True)
class Launch:
    """One kernel enqueue. ``args``: ints (passed as int32), names of scratch buffers, or the
    call arguments above. ``gemm``: part of the product itself; False for a pass that prepares
    an operand (timed apart as the passes' share). ``defines``: the kernel is in a program of
    its own, the family's source built with these defines alone (so that candidates which
    differ only in the product share it); None: in the configuration's program."""
    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    args: tuple
    gemm: bool = True
    defines: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True)
class Plan:
    scratch: tuple[Scratch, ...] = ()
    launches: tuple[Launch, ...] = ()

    @property
    def kernel_launches(self) -> int:
        """How many of the last launches are the product's own (the rest prepare operands)."""
        return sum(launch.gemm for launch in self.launches)

    @property
    def scratch_bytes(self) -> int:
        return sum(s.nbytes for s in self.scratch)
