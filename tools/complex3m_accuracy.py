"""How accurate the 3M complex product is beside the standard one, on the device.

    python tools/complex3m_accuracy.py [--device N] [--size 1024] [--precision c|z] [--ratio R]

Multiplies two random n x n complex matrices whose imaginary parts are ``--ratio`` times their
real parts (1: as large; small: where 3M's T3 - T1 - T2 cancels) with ``complex_algorithm``
"standard" and "3m", and prints for each the normwise relative error of the real and of the
imaginary part of the product against numpy in complex128, and the componentwise error that
``gemmtune verify`` judges (scaled by |A| |B|).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--precision", choices=("c", "z"), default="c")
    parser.add_argument("--ratio", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if not 1 <= args.size <= 16384 or not 0 < args.ratio < np.inf:
        print("Error: --size must be from 1 to 16384 and --ratio a positive number", file=sys.stderr)
        sys.exit(2)

    import gemmtune
    from gemmtune.precision import get_precision
    from gemmtune.measure.verify import Reference, compare

    prec, n = get_precision(args.precision), args.size
    rng = np.random.default_rng(args.seed)

    def operand():
        return (rng.standard_normal((n, n)) + 1j * args.ratio * rng.standard_normal((n, n))).astype(prec.dtype)

    a, b = operand(), operand()
    ref = Reference.compute(prec, a, b, None, 1.0, 0.0)
    exact = a.astype(np.complex128) @ b.astype(np.complex128)
    rows = []
    for algorithm in ("standard", "3m"):
        got = gemmtune.gemm(a, b, device=args.device, complex_algorithm=algorithm)
        error = got.astype(np.complex128) - exact
        rows.append({"algorithm": algorithm,
                     "real": float(np.linalg.norm(error.real) / np.linalg.norm(exact.real)),
                     "imaginary": float(np.linalg.norm(error.imag) / np.linalg.norm(exact.imag)),
                     "componentwise": compare(got, ref, prec).componentwise_error})
    print(f"{prec.code} {n}^3, imaginary parts {args.ratio:g} x the real parts; normwise relative errors:")
    for r in rows:
        print(f"{r['algorithm']:>9}  real part {r['real']:.3g}  imaginary part {r['imaginary']:.3g}  "
              f"componentwise {r['componentwise']:.3g}")
    return rows


if __name__ == "__main__":
    main()
