"""A copy of the shipped xgemm_k5 kernel with faults injected, one per value of FAULT.

Made from kernels/xgemm_k5.cl by textual patches at test time, so it follows the real kernel:
  FAULT 1: correct   2: does not compile   3: reads far out of bounds   4: never ends
  5: wrong result (drops the last K-step)   6: launch error (required work-group size mismatch)
  7: right but slow (the whole product computed 64 times over)
  8: right, but one element of C left unwritten (the output's poison must catch it)
"""

from __future__ import annotations

from pathlib import Path

from gemmtune.files.shipped import kernel_file

PATCHES = [
    ('#include "pad.cl"', '''#ifndef FAULT
#define FAULT 1     // which fault to inject
#endif
#if FAULT == 2
this line is not OpenCL C
#endif
#include "pad.cl"'''),
    ("__kernel __attribute__((reqd_work_group_size(TSM, RTSN, 1)))",
     "__kernel __attribute__((reqd_work_group_size(TSM, RTSN + (FAULT == 6), 1)))"),
    ("  for (int w = 0; w < WPTN; w++) { acc[w] = ZERO; }\n", '''#if FAULT == 7
  for (int rep = 0; rep < 64; rep++) {
#endif
  for (int w = 0; w < WPTN; w++) { acc[w] = ZERO; }
'''),
    ("\n  const int m = m0 + row;", '''
#if FAULT == 7
  }
#endif
  const int m = m0 + row;'''),
    ("  for (int k0 = 0; k0 < Kp; k0 += TSK) {", '''#if FAULT == 3
  acc[0] += A[(ulong)get_global_id(0) * 0x1000000000UL + 0x40000000000UL];
#endif
#if FAULT == 4
  volatile __global real* spin = C;
  while (1) { spin[0] = acc[0]; }
#endif
#if FAULT == 5
  for (int k0 = 0; k0 < Kp - TSK; k0 += TSK) {
#else
  for (int k0 = 0; k0 < Kp; k0 += TSK) {
#endif'''),
    ("      if (n < N) { STORE_AXPBY(C[n * ldc + m], acc[w], alpha, beta); }",
     "      if (n < N && !(FAULT == 8 && n == N - 1 && m == M - 1)) { STORE_AXPBY(C[n * ldc + m], acc[w], alpha, beta); }"),
]

SPACE = """
[xgemm_k5]
source = "faulty_k5.cl"
TSM = [16]
TSN = [16]
TSK = [16]
WPTN = [2]
PAD = [1]
TRANSPOSEX = [8]
TRANSPOSEY = [8]
FAULT = [1, 2, 3, 4, 5, 6]
"""


def write_fault_space(where: Path, faults=(1, 2, 3, 4, 5, 6)) -> Path:
    """Write faulty_k5.cl and a space file with one configuration per fault; returns the space."""
    source = kernel_file("xgemm_k5.cl").read_text(encoding="utf-8")
    for old, new in PATCHES:
        assert source.count(old) == 1, f"xgemm_k5.cl changed: cannot inject a fault at {old!r}"
        source = source.replace(old, new)
    (where / "faulty_k5.cl").write_text(source)
    space = where / "faults.toml"
    space.write_text(SPACE.replace("FAULT = [1, 2, 3, 4, 5, 6]", f"FAULT = {list(faults)}"))
    return space
