"""cuBLAS's own 3M complex product (``cublasCgemm3m`` / ``cublasZgemm3m``), for ``gemmtune bench``.

Neither torch nor cupy exposes these two calls, so the bench reaches them through cuBLAS's C API
in the library torch has loaded, with a handle of its own on torch's current stream.
"""

from __future__ import annotations

import ctypes

_CODES = {"N": 0, "T": 1, "C": 2}   # cublasOperation_t


class _Complex(ctypes.Structure):
    _fields_ = [("x", ctypes.c_double), ("y", ctypes.c_double)]


class _ComplexFloat(ctypes.Structure):
    _fields_ = [("x", ctypes.c_float), ("y", ctypes.c_float)]


def _loaded_cublas() -> str:
    """The path of the libcublas this process has loaded (torch loads it on its first matmul)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libcublas.so" in path:
                return path
    raise RuntimeError("no libcublas is loaded in this process")


class Gemm3M:
    """``run(x, y, out, trans_a, trans_b)``: cuBLAS's 3M product on torch's column-major view of
    row-major tensors, as the bench's torch contender multiplies ``x @ y``."""

    def __init__(self, code: str):
        import torch

        torch.ones(2, 2, device="cuda") @ torch.ones(2, 2, device="cuda")   # loads cuBLAS
        self.lib = ctypes.CDLL(_loaded_cublas())
        self.code = code
        self.scalar = _ComplexFloat if code == "c" else _Complex
        self.call = getattr(self.lib, "cublasCgemm3m" if code == "c" else "cublasZgemm3m")
        self.handle = ctypes.c_void_p()
        status = self.lib.cublasCreate_v2(ctypes.byref(self.handle))
        if status:
            raise RuntimeError(f"cublasCreate failed with status {status}")
        stream = torch.cuda.current_stream().cuda_stream
        self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream))
        self.one, self.zero = self.scalar(1, 0), self.scalar(0, 0)

    def __call__(self, a_cm, lda: int, b_cm, ldb: int, c_cm, ldc: int, m: int, n: int, k: int,
                 trans_a: str, trans_b: str) -> None:
        """C (m x n, column-major) = op(A) op(B), each operand a tensor whose memory is the
        column-major matrix."""
        status = self.call(self.handle, _CODES[trans_a], _CODES[trans_b], m, n, k, ctypes.byref(self.one),
                           ctypes.c_void_p(a_cm.data_ptr()), lda, ctypes.c_void_p(b_cm.data_ptr()), ldb,
                           ctypes.byref(self.zero), ctypes.c_void_p(c_cm.data_ptr()), ldc)
        if status:
            raise RuntimeError(f"cublas{self.code.upper()}gemm3m failed with status {status}")
