"""The CPU family (kernels/xgemm_cpu.cl): each work-item keeps an MR x NR block of C in vector
registers and walks K, like a CPU BLAS micro-kernel; no local memory, no barriers. Operands are
read at any offset and leading dimension; op(A) and op(B) may first be packed into panels."""

from __future__ import annotations

from gemmtune.families.base import FLAG, PREPARATION, PRODUCT, TILE, WIDTH, Constraint, Family, Params, part_defines
from gemmtune.launch.plan import (A, ALPHA, B, BETA, C, OFFSET_A, OFFSET_B, OFFSET_C, Launch, Plan, Scratch,
                                  check_leading_dimensions)
from gemmtune.precision import Precision

OPS = {"N": 0, "T": 1, "C": 2}
PACK_WG = 16          # the packing kernels' fixed work-group size (the kernel's PACK_WG)
# The register file assumed where the device's is not known (``DeviceInfo.vector_registers``):
# AVX-512's 32 vector registers of 64 bytes. A block sized for it spills on a CPU compiled for
# AVX2 (16 of 32 bytes) and ran a fifth as fast there, correct all the same.
VECTOR_REGISTERS = 32
REGISTER_BYTES = 64
# A batch's work-item whose block is a whole problem computes several problems in turn where one
# is little work: each work-group costs the runtime time to start, and a s 16^3 problem is 8 KFLOP.
# 10,000 of them on the 2-core EPYC: PoCL 57 GFLOP/s one a work-item, 86 with 32 to 512; Intel's
# runtime 59 with 2, 87 with 32, 122 with 512 (d: the same within noise). At least ITEM_FLOPS a
# work-item, while the batch keeps GROUPS_PER_UNIT work-groups per compute unit.
ITEM_FLOPS = 1 << 22
GROUPS_PER_UNIT = 8


def register_file(dev) -> tuple[int, int]:
    """The device's vector registers: how many, and bytes each."""
    count, size = getattr(dev, "vector_registers", 0), getattr(dev, "vector_bytes", 0)
    return (count, size) if count and size else (VECTOR_REGISTERS, REGISTER_BYTES)


def _mr(p: Params):
    return p["MV"] * p["VW"]


def planar(p: Params, prec: Precision):
    """Whether the kernel keeps real and imaginary parts in vectors of their own (complex
    precisions with VW > 1): twice the vectors, each of VW real parts."""
    return (p["VW"] > 1) & bool(prec.is_complex)


def _registers(p: Params, prec: Precision, register_bytes: int = REGISTER_BYTES):
    """Vector registers the block needs: MV * NR accumulators, MV vectors of A, one broadcast
    of B (each twice where planar); a vector wider than a register takes several."""
    parts = 1 + planar(p, prec)
    per_vector = -(-(p["VW"] * prec.bytes // parts) // register_bytes)
    return (p["MV"] * p["NR"] + p["MV"] + 1) * per_vector * parts


def _registers_fit(p: Params, dev, prec: Precision):
    count, size = register_file(dev)
    return _registers(p, prec, size) <= count


def _pack_defines(flag: str, block: int, prec: Precision, problem, planar_a: bool = False
                  ) -> tuple[tuple[str, int], ...]:
    """The build of one packing kernel (common.cl's PART 2): what it depends on, the panel's
    width and op() of its operand, so that every candidate with that panel shares one program.
    On PoCL with 2 cores, the two packing kernels were 0.1 s of a candidate's 0.35 s of building."""
    # VW 1: any precision takes it; MR rows of A as MV = MR, the panel planar if the product's is
    if flag == "PACKA":
        own = {"PACKA": 1, "PACKB": 0, "VW": 1, "MV": block, "TRANSA": OPS[problem.trans_a],
               **({"PLANAR": 1} if planar_a else {})}
    else:
        own = {"PACKA": 0, "PACKB": 1, "VW": 1, "MV": 1, "NR": block, "TRANSB": OPS[problem.trans_b]}
    return part_defines(PREPARATION, prec, **own, **problem.batch_defines())


def whole_problems(problem, compute_units: int, wgs: int = 1) -> bool:
    """Whether each work-item of a batch's product computes whole problems (every block of
    each, ``problems_per_item`` of them in turn) rather than one block of one: where a problem
    is little work and the batch alone keeps every compute unit busy. The work-groups of a
    block each were most of the time of small problems: s 64^3 in batches of 1,000 on the
    2-core EPYC, 4,000 work-groups of 0.13 MFLOP ran at 60 GFLOP/s (docs/batched.md)."""
    m, n, k = max(problem.m, 1), max(problem.n, 1), max(problem.k, 1)
    return (problem.batched and 2 * m * n * k <= ITEM_FLOPS
            and problem.batch >= wgs * max(1, compute_units) * GROUPS_PER_UNIT)


def problems_per_item(p: Params, problem, compute_units: int) -> int:
    """How many problems of a batch each work-item of the product computes, one after another:
    several where it computes whole problems (``whole_problems``, or a block as large as the
    problem), else one. (Work-items that share a problem and each went on to others ran far
    apart and read its operands from memory again: s 16^3 with two work-items a problem ran at
    0.4x with 64 problems each.)"""
    m, n, k = max(problem.m, 1), max(problem.n, 1), max(problem.k, 1)
    if (m > _mr(p) or n > p["NR"] * p["NB"]) and not whole_problems(problem, compute_units, p["WGS"]):
        return 1
    want = ITEM_FLOPS // (2 * m * n * k)
    groups = max(1, problem.batch // (p["WGS"] * max(1, compute_units) * GROUPS_PER_UNIT))
    return int(max(1, min(want, groups, problem.batch)))


class Cpu(Family):
    def local_size(self, p):
        return p["WGS"], 1

    def global_size(self, p, mp, np_, split=None):
        """Work-items over an mp x np_ product (not rounded to tiles: the kernel guards edges)."""
        rows = max(1, -(-mp // _mr(p)))
        cols = max(1, -(-np_ // (p["NR"] * p["NB"])))
        wgs = p["WGS"]
        if p["ORDER"]:
            return -(-rows // wgs) * wgs, cols
        return -(-cols // wgs) * wgs, rows

    def local_mem_bytes(self, p, prec):
        return 0

    def tile(self, p):
        # a work-item's block of C, MR x NR (WGS work-items per group, side by side along M for
        # the model), one step of K at a time
        return _mr(p) * p["WGS"], p["NR"], 1

    def padded_shape(self, p, m, n, k):
        # The kernel reads the operands in place with edge guards: nothing is padded.
        return m, n, k

    def build_defines(self, p, prec, problem):
        # PART 1: the product alone; the packing kernels are built apart (``_pack_defines``)
        return {"TRANSA": OPS[problem.trans_a], "TRANSB": OPS[problem.trans_b], "PART": PRODUCT,
                **problem.batch_defines()}

    def pass_elements(self, p, problem):
        m, n, k = problem.m, problem.n, problem.k
        mr, nr = _mr(p), p["NR"]
        passes = []
        if p["PACKA"]:
            passes.append(m * k + -(-m // mr) * mr * k)
        if p["PACKB"]:
            passes.append(n * k + -(-n // nr) * nr * k)
        return tuple(passes)

    def plan(self, p, prec, problem, device, compute_units):
        m, n, k = problem.m, problem.n, problem.k
        check_leading_dimensions(problem, self.name)
        mr, nr = _mr(p), p["NR"]
        scratch, launches, packed = [], [], []
        # Batched: every launch gets a dimension 2 of one work-item per problem, each problem
        # packed into panels of its own (the kernel finds problem z's z panels' sizes in).
        batch, extra = problem.batch, problem.batch_args()
        grid = (batch,) if problem.batched else ()
        # Panels of MR rows of op(A) (NR columns of op(B)), contiguous along K, with zeros past
        # M (N): ceil(M / MR) * MR * K elements (the kernel's launch notes).
        for flag, name, kernel, rows, block, operand, offset, ld in (
                ("PACKA", "Ap", "xgemm_pack_a", m, mr, A, OFFSET_A, problem.lda),
                ("PACKB", "Bp", "xgemm_pack_b", n, nr, B, OFFSET_B, problem.ldb)):
            if not p[flag]:
                continue
            blocks = max(1, -(-rows // block))
            scratch.append(Scratch(name, prec.bytes * blocks * block * k * batch))
            packed.append(name)
            if k > 0:
                launches.append(Launch(kernel, (-(-k // PACK_WG) * PACK_WG, blocks, *grid),
                                       (PACK_WG, 1, *(1,) * len(grid)),
                                       (rows, k, operand, offset, ld, name, *extra), gemm=False,
                                       defines=_pack_defines(flag, block, prec, problem,
                                                             bool(planar(p, prec)))))
        per_item = problems_per_item(p, problem, compute_units) if problem.batched else 1
        # whole problems a work-item: one work-group wide (the kernel walks a problem's blocks)
        blocks = (p["WGS"], 1) if whole_problems(problem, compute_units, p["WGS"]) else self.global_size(p, m, n)
        launches.append(Launch(self.kernel_name, (*blocks, *(-(-g // per_item) for g in grid)),
                               (*self.local_size(p), *(1,) * len(grid)),
                               (m, n, k, ALPHA, BETA, A, OFFSET_A, problem.lda, B, OFFSET_B, problem.ldb,
                                C, OFFSET_C, problem.ldc, *packed, *extra,
                                *((batch, per_item) if problem.batched else ()))))
        return Plan(tuple(scratch), tuple(launches))


def _fill(p: Params, prec: Precision):
    width = p["VW"] * (prec.bytes // (2 if prec.is_complex else 1))
    return (width == 32) | (width == 64) | ((p["VW"] == 1) & bool(prec.is_complex))


XGEMM_CPU = Cpu(
    name="xgemm_cpu",
    source_file="xgemm_cpu.cl",
    kernel_name="xgemm",
    tile_params=("VW", "NR", "KU"),
    constraints=(
        Constraint(1, "vector width", "VW in {1, 2, 4, 8, 16}; for complex precisions VW > 1 needs PACKA 1 "
                   "(the panel of A holds real and imaginary parts apart)",
                   lambda p, dev, prec: ((p["VW"] & (p["VW"] - 1)) == 0) & (p["VW"] <= 16)
                   & ((p["VW"] == 1) | (p["PACKA"] == 1) | (not prec.is_complex))),
        Constraint(2, "registers", "(MV * NR + MV + 1) * ceil(VW * bytes per part / register bytes) * parts "
                   "<= vector registers: accumulators, A's vectors and B's broadcast fit the registers the "
                   "device's compiler targets (AVX-512: 32 of 64 bytes, AVX2: 16 of 32; complex with VW > 1: "
                   "2 parts, real and imaginary, of half the element's bytes; else 1)",
                   _registers_fit),
        Constraint(3, "work-group", "WGS <= max work-group size and max work-item size[0]",
                   lambda p, dev, prec: (p["WGS"] <= dev.max_work_group_size)
                   & (p["WGS"] <= dev.max_work_item_sizes[0])),
        Constraint(4, "grid order", "ORDER 1 needs PACKB 1: row blocks side by side read B in place "
                   "with a stride of ldb (d 2048^3: 60 GFLOP/s against 135 with ORDER 0)",
                   lambda p, dev, prec: (p["ORDER"] == 0) | (p["PACKB"] == 1)),
        Constraint(5, "vector fill", "VW * bytes per part is 32 or 64 (a part: a real element, or the real "
                   "or imaginary half of a complex one), or VW 1 for complex precisions: narrower vectors "
                   "leave lanes idle, wider ones are no register of the ISA",
                   lambda p, dev, prec: _fill(p, prec)),
    ),
    ranges={"VW": (1, 16), "MV": (1, 16), "NR": (1, 64), "KU": (1, 64), "NB": WIDTH, "KC": (0, 1 << 16),
            "WGS": TILE, "ORDER": FLAG, "PACKA": FLAG, "PACKB": FLAG},
    takes_views=True,
    takes_batch=True,
)
