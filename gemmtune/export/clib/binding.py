"""A ctypes view of the exported library's ``gemmtune.h``: its structures and functions, for
Python programs (the tests, tools/clib_bench.py) that drive a compiled library with pyopencl's
objects (``.int_ptr``)."""

from __future__ import annotations

import ctypes as C
from pathlib import Path

ROW_MAJOR, COL_MAJOR = 101, 102
OPS = {"N": 111, "T": 112, "C": 113}


class Arg(C.Structure):
    _fields_ = [("kind", C.c_int), ("value", C.c_int64)]


class Launch(C.Structure):
    _fields_ = [("kernel", C.c_char * 32), ("gemm", C.c_int), ("dims", C.c_int), ("global_size", C.c_size_t * 3),
                ("local_size", C.c_size_t * 3), ("nargs", C.c_int), ("args", Arg * 24), ("defines", C.c_char * 256)]


class Scratch(C.Structure):
    _fields_ = [("name", C.c_char * 16), ("nbytes", C.c_size_t), ("rows", C.c_int), ("cols", C.c_int),
                ("table", C.POINTER(C.c_int))]


class Plan(C.Structure):
    _fields_ = [("family", C.c_char * 16), ("source", C.c_char * 8), ("shape", C.c_int64 * 3), ("nparams", C.c_int),
                ("param_names", C.c_char_p * 40), ("param_values", C.c_int * 40), ("options", C.c_char * 1024),
                ("nscratch", C.c_int), ("scratch", Scratch * 5), ("nlaunches", C.c_int), ("launches", Launch * 4)]


class Facts(C.Structure):
    _fields_ = [("max_work_group_size", C.c_size_t), ("max_work_item_sizes", C.c_size_t * 3),
                ("compute_units", C.c_int64)]


class Float2(C.Structure):
    _fields_ = [("x", C.c_float), ("y", C.c_float)]


class Double2(C.Structure):
    _fields_ = [("x", C.c_double), ("y", C.c_double)]


SCALARS = {"s": C.c_float, "d": C.c_double, "c": Float2, "z": Double2}


def load(path: str | Path) -> C.CDLL:
    """The compiled library at ``path``, its functions typed."""
    lib = C.CDLL(str(path))
    i64, vp = C.c_int64, C.c_void_p
    for code, scalar in SCALARS.items():
        f = getattr(lib, f"gemmtune_{code}gemm")
        f.argtypes = [vp, vp, C.c_int, C.c_int, C.c_int, i64, i64, i64, scalar, vp, i64, i64, vp, i64, i64, scalar,
                      vp, i64, i64, C.POINTER(vp)]
        f = getattr(lib, f"gemmtune_{code}gemm_strided_batched")
        f.argtypes = [vp, vp, C.c_int, C.c_int, C.c_int, i64, i64, i64, scalar, vp, i64, i64, i64, vp, i64, i64, i64,
                      scalar, vp, i64, i64, i64, i64, C.POINTER(vp)]
        offsets = C.POINTER(i64)
        f = getattr(lib, f"gemmtune_{code}gemm_batched")
        f.argtypes = [vp, vp, C.c_int, C.c_int, C.c_int, i64, i64, i64, C.POINTER(scalar), vp, offsets, i64, vp,
                      offsets, i64, C.POINTER(scalar), vp, offsets, i64, i64, C.POINTER(vp)]
    lib.gemmtune_create.argtypes = [vp, vp, C.POINTER(vp)]
    lib.gemmtune_release.argtypes = [vp]
    lib.gemmtune_last_error.argtypes = [vp]
    lib.gemmtune_last_error.restype = C.c_char_p
    lib.gemmtune_status_message.restype = C.c_char_p
    lib.gemmtune_plan.argtypes = [vp, C.c_char, C.c_int, C.c_int, i64, i64, i64, i64, i64, i64, C.c_int,
                                  C.POINTER(Plan)]
    lib.gemmtune_plan_config.argtypes = [C.c_char_p, C.c_int, C.POINTER(C.c_char_p), C.POINTER(C.c_int),
                                         C.POINTER(Facts), C.c_char, C.c_int, C.c_int, i64, i64, i64, i64, i64, i64,
                                         C.c_int, C.POINTER(Plan)]
    lib.gemmtune_plan_batched.argtypes = [*lib.gemmtune_plan.argtypes[:-1], i64, C.POINTER(i64), C.c_int,
                                          C.POINTER(Plan)]
    lib.gemmtune_plan_config_batched.argtypes = [*lib.gemmtune_plan_config.argtypes[:-1], i64, C.POINTER(i64),
                                                 C.c_int, C.POINTER(Plan)]
    lib.gemmtune_plan_release.argtypes = [C.POINTER(Plan)]
    return lib




def scalar(prec: str, value: complex):
    """alpha or beta for ``gemmtune_<prec>gemm``."""
    return SCALARS[prec](value.real, value.imag) if prec in "cz" else SCALARS[prec](value.real)


def scalars(prec: str, values) -> C.Array:
    """alphas or betas for ``gemmtune_<prec>gemm_batched``."""
    return (SCALARS[prec] * len(values))(*(scalar(prec, v) for v in values))


def offsets(values) -> C.Array:
    """An operand's offsets for ``gemmtune_<prec>gemm_batched``."""
    return (C.c_int64 * len(values))(*values)
