"""Kernel families: a kernel source plus what gemmtune needs to know to launch it (no OpenCL).

Each family is a module here: its parameters come from its ``.cl`` file, its constraints and its
launch plan (gemmtune.launch.plan) from its class. ``FAMILIES`` lists them; nothing outside this
package names a family to launch or model it.
"""

from gemmtune.families.base import Constraint, Family, Params, fits_work_group, kernel_parameters
from gemmtune.families.cpu import XGEMM_CPU
from gemmtune.families.direct import XGEMM_DIRECT
from gemmtune.families.k5 import XGEMM_K5
from gemmtune.families.padded import COPY_PER_ITEM, COPY_TILES, TRANSPOSE_FITS, copy_tile
from gemmtune.families.rt import IDLE_WORTH_SHARING, XGEMM_RT, Split, stream_k_pieces
from gemmtune.families.thin import XGEMM_THIN

FAMILIES: dict[str, Family] = {f.name: f for f in (XGEMM_K5, XGEMM_RT, XGEMM_DIRECT, XGEMM_THIN, XGEMM_CPU)}

__all__ = ["COPY_PER_ITEM", "COPY_TILES", "Constraint", "FAMILIES", "Family", "IDLE_WORTH_SHARING", "Params",
           "Split", "TRANSPOSE_FITS", "XGEMM_CPU", "XGEMM_DIRECT", "XGEMM_K5", "XGEMM_RT", "XGEMM_THIN", "copy_tile", "fits_work_group",
           "kernel_parameters", "stream_k_pieces"]
