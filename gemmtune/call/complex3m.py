"""The 3M complex product: three real GEMMs instead of four (Gauss's trick), asked for by name.

With op(A) = Ar + i Ai and op(B) = Br + i Bi,

    T1 = Ar Br,   T2 = Ai Bi,   T3 = (Ar + Ai)(Br + Bi)
    op(A) op(B) = (T1 - T2) + i (T3 - T1 - T2)

costs three real products of the same shape (6 real flops per complex multiply-add instead of
8), as cuBLAS's and OpenBLAS's ``cgemm3m``. One pass splits each operand into its real part,
its imaginary part and their sum (conjugated where op() is ``C``), the tuned real GEMM of the
other precision (s for c, d for z) runs three times, and one pass forms
``alpha * (P + i Q) + beta * C`` in C's view. The imaginary part loses the componentwise
accuracy of the standard product: T3 - T1 - T2 cancels where the imaginary part is small
against the operands (Higham, "Stability of a method for multiplying complex matrices with
three real matrix multiplications", 1992); normwise it stays within a small multiple of the
standard bound. It is never chosen silently: only ``complex_algorithm="3m"`` runs it.
"""

from __future__ import annotations


import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from gemmtune.errors import GemmtuneError
from gemmtune.launch.operation import Prepared
from gemmtune.call.operands import View, check_device_memory
from gemmtune.precision import Precision, get_precision

ALGORITHMS = ("standard", "3m")

_SOURCE = r"""
#if IS_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real;
#else
typedef float real;
#endif

// x is a row-major complex matrix, rows x cols, its rows ld complex elements apart, from
// element offset off; r, i and s (real part, imaginary part, their sum) are contiguous.
__kernel void split(__global const real *x, const int off, const int ld, const int cols,
                    const real conj, __global real *r, __global real *i, __global real *s) {
  const int col = get_global_id(0), row = get_global_id(1);
  const long at = 2 * ((long)off + (long)row * ld + col);
  const long out = (long)row * cols + col;
  const real re = x[at], im = conj * x[at + 1];
  r[out] = re; i[out] = im; s[out] = re + im;
}

// c <- alpha (t1 - t2 + i (t3 - t1 - t2)) + beta c over c's view; c is not read where
// read_c is 0 (beta == 0: C may hold anything, NaN included).
__kernel void combine(__global const real *t1, __global const real *t2, __global const real *t3,
                      const int cols, __global real *c, const int off, const int ldc,
                      const real ar, const real ai, const real br, const real bi, const int read_c) {
  const int col = get_global_id(0), row = get_global_id(1);
  const long in = (long)row * cols + col;
  const long at = 2 * ((long)off + (long)row * ldc + col);
  const real a = t1[in], b = t2[in];
  const real p = a - b, q = t3[in] - a - b;
  real re = ar * p - ai * q, im = ar * q + ai * p;
  if (read_c) {
    const real cr = c[at], ci = c[at + 1];
    re += br * cr - bi * ci;
    im += br * ci + bi * cr;
  }
  c[at] = re; c[at + 1] = im;
}
"""


def check_algorithm(name: str, prec: Precision) -> str:
    """``name`` if it is a complex algorithm that applies to ``prec``; GemmtuneError otherwise."""
    if name not in ALGORITHMS:
        raise GemmtuneError(f"unknown complex_algorithm {name!r}: use one of {', '.join(ALGORITHMS)}")
    if name == "3m" and not prec.is_complex:
        raise GemmtuneError(f"complex_algorithm '3m' needs complex operands (c or z), not {prec.code}")
    return name


class Complex3M:
    """c <- alpha op(a) op(b) + beta c for complex pyopencl arrays, in place, by three real GEMMs.

    Takes what ``Gemm`` takes for c and z (views, ops N/T/C, alpha and beta complex), once
    ``Gemm`` has checked them, and returns the events it enqueued.
    ``real`` is the ``Gemm`` of the matching real precision that runs the three products; its
    configuration is the tuned (or given) one of the real problem. Scratch buffers (three real
    copies of each operand, three real products) are kept per problem, as ``Gemm`` keeps its
    own: calls must run in order on an in-order queue.
    """

    _MAX_PROBLEMS = 16

    def __init__(self, queue: cl.CommandQueue, precision: Precision, real):
        self.queue, self.precision, self.real = queue, precision, real
        self.real_dtype = get_precision("d" if precision.code == "z" else "s").dtype
        options = [f"-DIS_DOUBLE={int(precision.code == 'z')}"]
        self.program = cl.Program(queue.context, _SOURCE).build(options=options)
        self._split = cl.Kernel(self.program, "split")
        self._combine = cl.Kernel(self.program, "combine")
        self._scratch = Prepared(self._MAX_PROBLEMS)   # the parts of a, b and c by their shapes

    def _buffers(self, a_shape, b_shape, c_shape):
        def make():
            item = self.real_dtype.itemsize
            check_device_memory(self.real.info, f"the 3m product's parts in precision {self.precision.code}",
                                {f"{part} of {name}": item * int(np.prod(shape))
                                 for name, shape in (("a", a_shape), ("b", b_shape), ("c", c_shape))
                                 for part in ("real part", "imaginary part", "sum")})

            def three(shape):
                return tuple(cla.empty(self.queue, shape, self.real_dtype) for _ in range(3))
            return three(a_shape), three(b_shape), three(c_shape)
        return self._scratch.get_or_make((a_shape, b_shape, c_shape), make)

    def _enqueue_split(self, x, view: View, parts, conj: bool, wait) -> cl.Event:
        rows, cols = x.shape
        real = self.real_dtype.type
        self._split.set_args(x.base_data, np.int32(view.first), np.int32(view.ld), np.int32(cols),
                             real(-1 if conj else 1), *(p.data for p in parts))
        return cl.enqueue_nd_range_kernel(self.queue, self._split, (cols, rows), None, wait_for=wait)

    def __call__(self, a, b, c, views: tuple[View, View, View], *, alpha=1.0, beta=0.0, trans_a="N",
                 trans_b="N") -> list[cl.Event]:
        """Enqueue the product on validated, non-empty operands (``Gemm`` checks them, and
        ``views`` is where its checks found them); its events."""
        (ar_, ai_, as_), (br_, bi_, bs_), (t1, t2, t3) = self._buffers(a.shape, b.shape, c.shape)
        real_op = {"N": False, "T": True, "C": True}
        wait_a = [*a.events] or None
        wait_b = [*b.events] or None
        # The queue is in order (as Gemm requires): the scratch arrays carry no events of their own.
        va, vb, vc = views
        events = [self._enqueue_split(a, va, (ar_, ai_, as_), trans_a == "C", wait_a),
                  self._enqueue_split(b, vb, (br_, bi_, bs_), trans_b == "C", wait_b)]
        for x, y, t in ((ar_, br_, t1), (ai_, bi_, t2), (as_, bs_, t3)):
            self.real(x, y, t, trans_a=real_op[trans_a], trans_b=real_op[trans_b])
            events += self.real.last_events
        alpha, beta = complex(alpha), complex(beta)
        rows, cols = c.shape
        real = self.real_dtype.type
        self._combine.set_args(t1.data, t2.data, t3.data, np.int32(cols), c.base_data, np.int32(vc.first),
                               np.int32(vc.ld), real(alpha.real), real(alpha.imag), real(beta.real), real(beta.imag),
                               np.int32(beta != 0))
        for t in (t1, t2, t3):
            del t.events[:]
        event = cl.enqueue_nd_range_kernel(self.queue, self._combine, (cols, rows), None,
                                           wait_for=[*c.events] or None)
        c.add_event(event)
        return [*events, event]
