"""The direct family (kernels/xgemm_direct.cl): the caller's operands read in place, any op(),
leading dimension and offset, bounds-checked tiles, one launch (two where K is cut into parts)."""

from __future__ import annotations

from gemmtune.families.base import (FIXUP, PADDING, PRODUCT, TILE, Constraint, Family, Params, _roundup, _safe,
                                    part_defines, register_budget, work_group_fits, work_per_item)
from gemmtune.families.padded import copy_tile
from gemmtune.launch.plan import (A, ALPHA, B, BETA, C, OFFSET_A, OFFSET_B, OFFSET_C, Launch, Plan, Scratch,
                                  check_leading_dimensions)
from gemmtune.precision import Precision

OPS = {"N": 0, "T": 1, "C": 2}
# The parts' sums of a K cut into parts take a scratch buffer of parts x M x N elements: no more
# parts than fit this many bytes, so a large C is never cut (it has work-groups enough anyway).
PARTS_BYTES = 64 << 20


def _wgs(p: Params):
    return p["MDIMC"] * p["NDIMC"]


class Direct(Family):
    def local_size(self, p):
        return p["MDIMC"], p["NDIMC"]

    def global_size(self, p, mp, np_, split=None):
        return mp // p["MWG"] * p["MDIMC"], np_ // p["NWG"] * p["NDIMC"]

    def local_mem_bytes(self, p, prec):
        return p["KWG"] * (p["MWG"] + p["NWG"] + 2 * p["PADL"]) * prec.bytes

    def build_defines(self, p, prec, problem):
        # PART 1: the product alone; xgemm_direct_sum is built apart, once per precision
        return {"TRANSA": OPS[problem.trans_a], "TRANSB": OPS[problem.trans_b], "PART": PRODUCT,
                **problem.batch_defines()}

    def parts(self, p: Params, prec: Precision, m: int, n: int, k: int) -> tuple[int, int]:
        """How many parts K is cut into for an m x n x k problem, and the K-length of each (a
        multiple of KWG; the last part may be shorter)."""
        slices = -(-k // p["KWG"])
        parts = max(1, min(p["KSPLIT"], slices, PARTS_BYTES // (m * n * prec.bytes)))
        length = -(-slices // parts) * p["KWG"]
        return -(-k // length), length

    def plan(self, p, prec, problem, device, compute_units):
        m, n, k = problem.m, problem.n, problem.k
        check_leading_dimensions(problem, self.name)
        mp, np_, _ = self.padded_shape(p, m, n, k)
        # Batched, dimension 2 is the problem: K is not cut (the batch fills the device instead)
        parts, length = (1, max(k, 1)) if problem.batched else self.parts(p, prec, m, n, k)
        work = Scratch("work", prec.bytes * (parts * m * n if parts > 1 else 1))
        launches = [Launch(self.kernel_name, (*self.global_size(p, mp, np_), parts * problem.batch),
                           (*self.local_size(p), 1),
                           (m, n, k, ALPHA, BETA, A, OFFSET_A, problem.lda, B, OFFSET_B, problem.ldb,
                            C, OFFSET_C, problem.ldc, length, "work", *problem.batch_args()))]
        if parts > 1:
            tile = copy_tile(device)
            launches.append(Launch("xgemm_direct_sum", (_roundup(m, tile[0]), _roundup(n, tile[1])), tile,
                                   (m, n, parts, ALPHA, BETA, C, OFFSET_C, problem.ldc, "work"),
                                   defines=part_defines(FIXUP, prec)))
        return Plan((work,), tuple(launches))


XGEMM_DIRECT = Direct(
    name="xgemm_direct",
    source_file="xgemm_direct.cl",
    kernel_name="xgemm_direct",
    tile_params=("MWG", "NWG", "KWG"),
    constraints=(
        work_per_item(1),
        work_group_fits(2),
        Constraint(3, "slices per thread", "KWG * MWG and KWG * NWG multiples of MDIMC * NDIMC",
                   lambda p, dev, prec: ((p["KWG"] * p["MWG"]) % _safe(_wgs(p)) == 0)
                   & ((p["KWG"] * p["NWG"]) % _safe(_wgs(p)) == 0)),
        Constraint(4, "local memory", "KWG * (MWG + NWG + 2 * PADL) * bytes per element <= local memory size",
                   lambda p, dev, prec: XGEMM_DIRECT.local_mem_bytes(p, prec) <= dev.local_mem_bytes),
        register_budget(5),
    ),
    ranges={"MWG": TILE, "NWG": TILE, "KWG": TILE, "MDIMC": TILE, "NDIMC": TILE, "PADL": PADDING, "KSPLIT": TILE},
    takes_views=True,
    takes_batch=True,
)
