"""The four BLAS precisions: element types, sizes, flop counts and rounding units."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemmtune.errors import GemmtuneError


@dataclass(frozen=True)
class Precision:
    code: str            # BLAS letter: s, d, c, z
    dtype: np.dtype      # element type of the operands
    cl_define: int       # value of the PRECISION macro in kernels/common.cl
    flops_per_madd: int  # 2 for a real multiply-add, 8 for a complex one

    @property
    def bytes(self) -> int:
        return self.dtype.itemsize

    @property
    def is_complex(self) -> bool:
        return self.dtype.kind == "c"

    @property
    def needs_double(self) -> bool:
        return self.code in "dz"

    @property
    def unit_roundoff(self) -> float:
        return float(np.finfo(self.dtype).eps) / 2

    @property
    def nan(self) -> np.ndarray:
        """What an output is poisoned with before a product writes it, as a fill pattern: NaN,
        in both parts of a complex element."""
        return np.array(complex(np.nan, np.nan) if self.is_complex else np.nan, dtype=self.dtype)

    @property
    def reference_dtype(self) -> np.dtype:
        """float64 or complex128: what numpy checks results in."""
        return np.dtype(np.complex128 if self.is_complex else np.float64)

    def flops(self, m: int, n: int, k: int) -> int:
        return self.flops_per_madd * m * n * k


PRECISIONS: dict[str, Precision] = {
    "s": Precision("s", np.dtype(np.float32), 32, 2),
    "d": Precision("d", np.dtype(np.float64), 64, 2),
    "c": Precision("c", np.dtype(np.complex64), 3232, 8),
    "z": Precision("z", np.dtype(np.complex128), 6464, 8),
}


def get_precision(code: str) -> Precision:
    try:
        return PRECISIONS[code.lower()]
    except (KeyError, AttributeError):
        raise GemmtuneError(f"unknown precision {code!r}: use one of s, d, c, z") from None


def precision_of(dtype) -> Precision:
    """The precision whose element type is ``dtype``."""
    dtype = np.dtype(dtype)
    for p in PRECISIONS.values():
        if p.dtype == dtype:
            return p
    raise ValueError(f"unsupported dtype {dtype}: use float32, float64, complex64 or complex128")


def require_precision(dev, prec: Precision) -> None:
    """Constraint 6: d and z only where the device (a ``DeviceInfo``) has doubles."""
    if prec.needs_double and not dev.double_precision:
        raise GemmtuneError(f"device {dev.index} ({dev.name}) does not support double precision, "
                            f"needed for precision {prec.code!r}")
