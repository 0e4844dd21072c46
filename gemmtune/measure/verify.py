"""Checking a GEMM result against numpy in float64 / complex128 (pure numpy, no OpenCL).

Three figures describe a result C against the reference R computed in double precision:

* ``max_rel_error``: max |C - R| / |R| over the elements, as the seed paper's delta (without
  its factor 100). It is reported, not judged: an element of R near zero inflates it however
  good the kernel is.
* ``norm_rel_error``: ||C - R||_F / ||R||_F.
* ``componentwise_error``: max |C - R| / (|alpha| |op(A)| |op(B)| + |beta| |C0|), the error of
  each element relative to the size of the terms it sums. This one decides pass or fail.

Tolerance, per precision: ``16 * sqrt(k + 2) * u``, u the unit roundoff (2^-24 for s and c,
2^-53 for d and z). Summing k products in any order leaves an error that grows like a random
walk, sqrt(k) * u relative to the sum of the terms' magnitudes (Higham and Mary, "A new
approach to probabilistic rounding error analysis", 2019); the worst case k * u is reached
only by adversarial data, never by uniform random operands. The factor 16 keeps correct
kernels clear of it, while a dropped, doubled or misplaced term moves an element by about
1/k of its scale, which exceeds the tolerance for every k below 10^4 in single and far beyond
in double precision. An unwritten element (NaN from the poisoned output) always fails.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from functools import cache, cached_property

import numpy as np

from gemmtune.errors import OperandError
from gemmtune.devices.info import host_cores
from gemmtune.precision import Precision


def op(x: np.ndarray, flag: str) -> np.ndarray:
    """op() of a matrix, or of each matrix of a stack (the last two dimensions)."""
    return x if flag == "N" else np.swapaxes(x.conj() if flag == "C" else x, -1, -2)


def check_scalars(prec: Precision, alpha, beta) -> None:
    """OperandError unless alpha and beta are numbers the kernels can apply in ``prec``: every
    path into a product (``gemm``, ``Gemm``, ``verify_config``, ``gemmtune verify``) calls this.

    A kernel takes each scalar converted to the precision's type, so anything else goes wrong
    silently there: a string or an array has no single value, a complex value loses its
    imaginary part in a real precision, NaN and infinities make every element of C NaN or
    infinite (which no check tells from a broken kernel), a magnitude beyond the type's largest
    becomes infinite and one below its smallest normal becomes 0 or a subnormal, which OpenCL
    devices may flush to 0 in single precision. bool is refused as almost surely a misplaced flag.
    """
    low, high = _normal_range(prec.dtype)
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Number):
            raise OperandError(f"{name} must be a real or complex number, got {type(value).__name__} {_shown(value)}")
        if not prec.is_complex and isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
            raise OperandError(f"{name} = {_shown(value)} is complex but the operands are real ({prec.dtype})")
        try:
            finite = not (value != value or abs(value) == math.inf)   # not NaN, nor infinite in any part
        except ArithmeticError:   # a signalling NaN (decimal) refuses to compare
            finite = False
        if not finite:
            raise OperandError(f"{name} must be finite, got {_shown(value)}")
        try:
            parts = (complex(value).real, complex(value).imag)
        except (TypeError, ValueError, OverflowError):
            parts = (math.inf,)   # an int beyond any float
        if any(x != 0 and not low <= abs(x) <= high for x in parts):
            raise OperandError(f"{name} = {_shown(value)} is outside the range of precision {prec.code} "
                               f"({prec.dtype}): magnitudes from {low:.3g} to {high:.3g}, or 0")


def _shown(value) -> str:
    """One line, however large an array is."""
    shown = " ".join(repr(value).split())
    return shown if len(shown) <= 60 else shown[:57] + "..."


@cache
def _normal_range(dtype: np.dtype) -> tuple[float, float]:
    info = np.finfo(dtype)
    return float(info.smallest_normal), float(info.max)


def random_matrix(prec: Precision, shape, rng: np.random.Generator) -> np.ndarray:
    """Uniform in [-1, 1) (real and imaginary parts), in the precision's own type."""
    x = rng.uniform(-1.0, 1.0, size=shape)
    if prec.is_complex:
        x = x + 1j * rng.uniform(-1.0, 1.0, size=shape)
    return np.ascontiguousarray(x.astype(prec.dtype))


def tolerance(prec: Precision, k: int) -> float:
    return float(16.0 * np.sqrt(k + 2) * prec.unit_roundoff)


@dataclass(frozen=True)
class Reference:
    """alpha * op(a) @ op(b) + beta * c in double precision, and the scale of its terms."""

    value: np.ndarray
    scale: np.ndarray
    k: int

    @cached_property
    def norm(self) -> float:
        return float(np.linalg.norm(self.value.reshape(-1)))

    @classmethod
    def compute(cls, prec: Precision, a, b, c, alpha, beta, trans_a="N", trans_b="N") -> "Reference":
        rd = prec.reference_dtype
        opa, opb = op(a.astype(rd), trans_a), op(b.astype(rd), trans_b)
        value = alpha * (opa @ opb)
        scale = abs(alpha) * (np.abs(opa) @ np.abs(opb))
        if beta != 0 and c is not None:
            value = value + beta * c.astype(rd)
            scale = scale + abs(beta) * np.abs(c.astype(rd))
        return cls(value, scale, opa.shape[-1])


@dataclass(frozen=True)
class Check:
    max_rel_error: float
    norm_rel_error: float
    componentwise_error: float
    tolerance: float
    passed: bool

    def to_json(self) -> dict:
        return {"max_rel_error": self.max_rel_error, "norm_rel_error": self.norm_rel_error,
                "componentwise_error": self.componentwise_error, "tolerance": self.tolerance,
                "passed": self.passed}


CHUNK = 1 << 18   # elements per piece of the comparison, one task for a thread


def compare(result: np.ndarray, ref: Reference, prec: Precision) -> Check:
    # In cache-sized pieces, spread over threads (numpy releases the GIL): a trial at 4096^2
    # would otherwise spend more time here than on the device.
    flat_c, flat_r, flat_s = result.reshape(-1), ref.value.reshape(-1), ref.scale.reshape(-1)
    rd = prec.reference_dtype

    def piece(lo: int) -> tuple[float, float, float]:
        hi = lo + CHUNK
        diff = np.abs(np.subtract(flat_c[lo:hi], flat_r[lo:hi], dtype=rd))   # NaN where C is NaN
        ratio = np.abs(flat_r[lo:hi])  # |R| here, not stored: one array fewer to stream from memory
        # fmax skips the 0/0 of an exact element where R or its scale is 0 (no error), and the
        # NaN of an unwritten element, which the sum of squares catches instead.
        with np.errstate(divide="ignore", invalid="ignore"):  # per thread, as numpy keeps it
            rel = np.fmax.reduce(np.divide(diff, ratio, out=ratio), initial=0.0)
            cw = np.fmax.reduce(np.divide(diff, flat_s[lo:hi], out=ratio), initial=0.0)
        # Not np.dot: that is BLAS, whose own thread pool (sized for every core of the machine at
        # import) then runs under each of these threads. In a timing worker pinned to a few
        # cores, that made a trial three times slower (two H200s of one host, 8 cores each).
        return rel, cw, float(np.square(diff, out=ratio).sum())

    parts = np.array(list(_pool().map(piece, range(0, flat_c.size, CHUNK))) or [(0.0, 0.0, 0.0)])
    max_rel, max_cw = (float(x) for x in parts[:, :2].max(axis=0))
    sum_sq = float(parts[:, 2].sum())
    diff_finite = bool(np.isfinite(sum_sq))   # False for a NaN (unwritten) or infinity anywhere in C
    finite = diff_finite and bool(np.isfinite(max_cw))
    norm_diff = float(np.sqrt(sum_sq))
    norm_rel = norm_diff / ref.norm if ref.norm > 0 else norm_diff
    tol = tolerance(prec, ref.k)
    return Check(
        max_rel_error=max_rel if diff_finite else float("nan"),
        norm_rel_error=norm_rel if finite else float("nan"),
        componentwise_error=max_cw if finite else float("nan"),
        tolerance=tol,
        passed=bool(finite and max_cw <= tol),
    )


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=min(8, host_cores()))
