"""Launch plans: what a kernel family enqueues for one problem, as plain data (no OpenCL).

A family turns a configuration and a :class:`Problem` into a :class:`Plan`: the scratch
buffers and the kernels to enqueue in order with their sizes and
arguments. ``gemmtune.kernels.GemmOperation`` carries any plan out, so it knows no family by
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
CALL_ARGUMENTS = (A, B, C, OFFSET_A, OFFSET_B, OFFSET_C, ALPHA, BETA)


@dataclass(frozen=True)
class Problem:
    """C (m x n) <- alpha * op(A) * op(B) + beta * C, column-major, BLAS's meaning.

    ``lda``/``ldb``/``ldc`` are the leading dimensions (None: the operand's rows as stored,
    i.e. packed). ``views``: the operands may start at element offsets other than 0, bound
    on each call.
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

    def __post_init__(self):
        # Normalise the leading dimensions, so equal problems compare (and cache) equal.
        object.__setattr__(self, "lda", self.lda or (self.m if self.trans_a == "N" else self.k))
        object.__setattr__(self, "ldb", self.ldb or (self.k if self.trans_b == "N" else self.n))
        object.__setattr__(self, "ldc", self.ldc or self.m)


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
        if ld * cols >= INDEX_LIMIT:
            raise GemmtuneError(f"{name} spans {ld * cols} elements; {family} indexes at most {INDEX_LIMIT - 1}")


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
