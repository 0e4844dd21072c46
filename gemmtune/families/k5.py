"""The SGEMM tutorial's kernel 5 (kernels/xgemm_k5.cl)."""

from __future__ import annotations

import math

from gemmtune.families.base import PADDING, TILE, WIDTH, Constraint, Params, _safe, fits_work_group
from gemmtune.families.padded import TRANSPOSE_FITS, TRANSPOSE_RANGES, Padded


class TiledK5(Padded):
    """The tutorial's kernel 5 (kernels/xgemm_k5.cl): TSM x RTSN work-items per TSM x TSN tile."""

    def local_size(self, p):
        return p["TSM"], p["TSN"] // p["WPTN"]

    def global_size(self, p, mp, np_, split=None):
        return mp, np_ // p["WPTN"]

    def local_mem_bytes(self, p, prec):
        return (p["TSK"] * p["TSM"] + p["TSN"] * (p["TSK"] + p["PAD"])) * prec.bytes

    def store_conflicts(self, p, prec):
        # Consecutive work-items store Bsub[n][k] for consecutive n: rows TSK + PAD elements
        # apart, what PAD is for. A's stores go to consecutive addresses.
        words = prec.bytes // 4
        return 1, max(1, math.gcd((p["TSK"] + p["PAD"]) * words, 32) // words)


def _wgs(p: Params) -> int:
    return p["TSM"] * (p["TSN"] // p["WPTN"])


XGEMM_K5 = TiledK5(
    name="xgemm_k5",
    source_file="xgemm_k5.cl",
    kernel_name="xgemm",
    tile_params=("TSM", "TSN", "TSK"),
    constraints=(
        Constraint(1, "WPTN divides TSN", "TSN % WPTN == 0",
                   lambda p, dev, prec: p["TSN"] % p["WPTN"] == 0),
        Constraint(2, "work-group", "TSM <= max work-item size[0], RTSN = TSN / WPTN <= max "
                   "work-item size[1], TSM * RTSN <= max work-group size",
                   lambda p, dev, prec: fits_work_group(p["TSM"], p["TSN"] // p["WPTN"], dev)),
        Constraint(3, "loads per thread", "(TSK * TSM) % (TSM * RTSN) == 0 and "
                   "(TSK * TSN) % (TSM * RTSN) == 0",
                   lambda p, dev, prec: (_wgs(p) > 0)
                   & ((p["TSK"] * p["TSM"]) % _safe(_wgs(p)) == 0)
                   & ((p["TSK"] * p["TSN"]) % _safe(_wgs(p)) == 0)),
        Constraint(4, "local memory", "(TSK * TSM + TSN * (TSK + PAD)) * bytes per element <= "
                   "local memory size",
                   lambda p, dev, prec: XGEMM_K5.local_mem_bytes(p, prec) <= dev.local_mem_bytes),
        TRANSPOSE_FITS,
    ),
    ranges={"TSM": TILE, "TSN": TILE, "TSK": TILE, "WPTN": WIDTH, "PAD": PADDING, **TRANSPOSE_RANGES},
)


