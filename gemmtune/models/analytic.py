"""A performance model of one configured GEMM: what it moves, what it computes, how long it takes.

Pure Python, no OpenCL: it reads the configuration through its kernel family (``tile``,
``padded_shape``, ``local_size``, ``local_mem_bytes``, ``pass_elements``, ``matrix_instructions``, ``shared_tiles``) and the device through its
``DeviceInfo``, so it can rank a whole space before anything is built. Only the ranking of
configurations on one device, precision and shape is meant to be right; absolute times are
rough. Shapes are column-major (C is m x n, inner dimension k), as in the ``results`` table.

Notation: p the parameters; (TM, TN, TK) the family's ``tile`` (by default its ``tile_params``' values);
(Mp, Np, Kp) the shape padded to their multiples; e the bytes of one element (4, 8, 8, 16 for
s, d, c, z); (lx, ly) the work-group's ``local_size``; CU the device's compute units.

Flops and bytes
    flops          = 2·m·n·k (s, d) or 8·m·n·k (c, z): the useful work, as GFLOP/s counts it.
    padded flops   = the same of (Mp, Np, Kp): what the GEMM kernel really computes.
    A pass         = pad.cl copy (or transpose) of A, run unless op(A) = N and (Mp, Kp) = (m, k):
                     reads m·k and writes Mp·Kp elements.
    B pass         = pad.cl pass over B, run unless B is already in the layout the kernel reads:
                     with ``b_k_fast`` (BKFAST = 1) that is op(B) = N and (Np, Kp) = (n, k) (then
                     the pass is a copy, else a transpose back); otherwise op(B) = T and
                     (Np, Kp) = (n, k) (so an untransposed B is always transposed). Reads k·n,
                     writes Np·Kp elements. Both rules are those of gemmtune.launch.operation.GemmOperation.
    main bytes     = e · (Mp·Kp·Np/TN + Np·Kp·Mp/TM + m·n·(2 if beta != 0 else 1)): every column of
                     work-groups (TN wide) reads all of A, every row of them (TM high) all of B,
                     and C is written once (read first when beta != 0). Caches are ignored: only
                     the reuse the tiling makes in local memory counts.
    bytes          = main bytes + the passes' bytes.
    intensity      = flops / bytes (flop per byte of global-memory traffic, the whole operation).

Work-groups
    groups         = (Mp/TM) · (Np/TN); work-items per group = lx·ly (``work_group_size``);
                     local memory per group = the family's ``local_mem_bytes``.
    resident       = work-groups one compute unit can hold at once: min(local memory of the
                     device // local memory per group, max work-group size // work-items per
                     group), at least 1. Assumptions: a compute unit has as much local memory as
                     OpenCL lets one work-group use, and holds as many work-items as one
                     work-group may have (both understate an NVIDIA SM, which holds 2048 threads
                     and more shared memory); registers are not visible through OpenCL and are
                     ignored (constraint 8 of xgemm_rt bounds them).
    rounds         = ceil(groups / CU): work-groups the busiest compute unit runs.

Efficiency (the fraction of the compute peak the kernel can reach)
    register tile  = each work-item computes wm x wn results with wm = TM/lx, wn = TN/ly
                     (xgemm_k5: 1 x WPTN; xgemm_rt: WPTM x WPTN). Per k it reads wm + wn values
                     from local memory for wm·wn multiply-adds; counting a local read as one
                     issue slot, like a multiply-add: reg = wm·wn / (wm·wn + wm + wn). On a GPU
                     the slots also count the work-item's share of storing the k-slice, TM + TN
                     values over lx·ly work-items, each store weighted by its bank conflicts
                     (the family's ``store_conflicts``; xgemm_k5's B rows lie TSK + PAD elements
                     apart, so a store conflicts gcd((TSK + PAD)·e/4, 32)/(e/4) ways over 32 banks
                     of 4 bytes; xgemm_rt with STAGE = 0 stores nothing, ca = cb = 0):
                     reg = wm·wn / (wm·wn + wm + wn + (TM·ca + TN·cb)/(lx·ly)).
    occupancy      = min(1, min(resident, rounds) · work-items per group / LATENCY_ITEMS), where
                     LATENCY_ITEMS work-items per compute unit hide memory latency: 128 on a GPU
                     (4 warps of 32; a guess), 1 elsewhere (a CPU runs a work-group as a loop).
    efficiency     = reg · occupancy. Vector widths, PIPE, UNROLL, padding and WARPM are not
                     modelled: configurations that differ only in them predict the same.
    matrix         = MATRIX_SPEEDUP where the multiplies go to matrix instructions (xgemm_rt's
                     MMA = 1, d and z on a device with ``fp64_matrix``), else 1: their peak over
                     the FMA peak, 2 on the H200 (66 against 33.5 TFLOP/s, docs/fp64.md). Without
                     it the model would rank them with FMA tiles of the same shape, and its seeds,
                     which start the default search, would never include one.

Time
    compute        = rounds · CU / groups · padded flops / (peak flop/s · efficiency · matrix): the padded
                     shape is the edge tiles' cost, rounds · CU / groups >= 1 that of the last,
                     partly filled round of work-groups over the compute units.
    memory         = main bytes / bandwidth.
    time           = max(compute, memory) + passes' bytes / bandwidth + kernels · LAUNCH_S[type]
                     (kernels = 1 + passes; LAUNCH_S 5 µs on a GPU, 30 µs elsewhere: guesses).
    rank           = by time, then by bytes: when compute bounds the time, the configurations of
                     one efficiency tie, and the one that moves less data (more reuse, less for the
                     caches this model ignores) goes first.
    seeds          = the best-ranked configurations, one per distinct (time, bytes): those the
                     model cannot tell apart are measured once, so that seeds differ in tiling;
                     which of them, the one nearest a configuration known to run well
                     (``learned.seeds`` adds the learned model's pick of each).

Peaks
    Measured ones (``gemmtune peak``, the ``peaks`` table: GFLOP/s per precision, GB/s of a copy)
    are used where given (and positive). Otherwise nominal estimates from the DeviceInfo, whose
    clock and compute units are positive whatever the driver reported (``info.substitute``):
    fp32 = CU · clock (MHz) / 1000 · LANES[type] · 2 GFLOP/s, LANES the fp32 multiply-add lanes of
    one compute unit (128 on a GPU: an NVIDIA SM; 16 elsewhere: two 8-wide FMA units of a CPU
    core); s and c run at fp32, d and z at fp32 / 2 (a complex multiply-add is 4 real ones and is
    counted as 8 flops, so its flop rate is that of its real type); bandwidth = fp32 /
    MACHINE_BALANCE GB/s with MACHINE_BALANCE = 12 flop/byte (about that of current GPUs and
    server CPUs). Only the ranking on one device matters then, not the absolute numbers.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from gemmtune.families import FAMILIES
from gemmtune.devices.info import DeviceInfo
from gemmtune.launch.plan import Problem
from gemmtune.precision import Precision
from gemmtune.space import Config

LANES = {"GPU": 128}              # fp32 multiply-add lanes per compute unit; others: DEFAULT_LANES
DEFAULT_LANES = 16
MACHINE_BALANCE = 12.0            # nominal flop per byte of global-memory bandwidth
LATENCY_ITEMS = {"GPU": 128}      # resident work-items per compute unit that hide latency; others: 1
LAUNCH_S = {"GPU": 5e-6}          # seconds per kernel launch; others: DEFAULT_LAUNCH_S
DEFAULT_LAUNCH_S = 30e-6
BANDWIDTH = "bandwidth"           # the key of the bandwidth in a peaks mapping
MATRIX_SPEEDUP = 2.0              # FP64 matrix instructions over FP64 multiply-adds (the H200's)


@dataclass(frozen=True)
class Peaks:
    """The two ceilings of the model for one device and precision."""

    gflops: float          # multiply-add throughput, GFLOP/s
    bandwidth_gbs: float   # global-memory bandwidth, GB/s (bytes read + written)
    measured: bool         # both from measurements (else at least one is nominal)


def nominal_peaks(dev: DeviceInfo) -> dict[str, float]:
    """Nominal GFLOP/s per precision and GB/s under the key ``"bandwidth"`` (see the module)."""
    fp32 = dev.compute_units * dev.max_clock_mhz / 1000 * LANES.get(dev.type, DEFAULT_LANES) * 2
    peaks = {"s": fp32, "c": fp32, BANDWIDTH: fp32 / MACHINE_BALANCE}
    if dev.double_precision:
        peaks.update(d=fp32 / 2, z=fp32 / 2)
    return peaks


def resolve_peaks(dev: DeviceInfo, prec: Precision, measured: Mapping[str, float] | None = None) -> Peaks:
    """The measured peaks where ``measured`` (as ``Store.latest_peaks`` returns) has them, else
    the nominal ones."""
    # A stored value that is not a positive number (a failed or hand-made measurement) is not one.
    measured = {k: float(v) for k, v in (measured or {}).items()
                if isinstance(v, (int, float)) and math.isfinite(v) and v > 0}
    nominal = nominal_peaks(dev)
    flops = measured.get(prec.code) or nominal.get(prec.code) or nominal["s"] / 2
    bandwidth = measured.get(BANDWIDTH) or nominal[BANDWIDTH]
    return Peaks(float(flops), float(bandwidth), prec.code in measured and BANDWIDTH in measured)


@dataclass(frozen=True)
class Prediction:
    """What the model says about one configuration; times in seconds, sizes in bytes."""

    flops: int                 # useful flops (2mnk or 8mnk)
    padded_flops: int          # flops of the padded shape, what the kernel computes
    padded_shape: tuple[int, int, int]
    main_bytes: int            # global-memory traffic of the GEMM kernel
    pass_bytes: int            # traffic of the pad/transpose passes
    kernels: int               # launches: the GEMM kernel plus the passes
    intensity: float           # flops / (main_bytes + pass_bytes)
    local_mem_bytes: int       # per work-group
    work_group_size: int       # work-items per work-group
    groups: int                # work-groups of the GEMM kernel
    resident: int              # work-groups one compute unit can hold
    efficiency: float          # fraction of the compute peak reachable
    compute_s: float
    memory_s: float            # of the GEMM kernel's traffic
    pass_s: float
    launch_s: float
    time_s: float
    peaks: Peaks

    @property
    def bytes(self) -> int:
        return self.main_bytes + self.pass_bytes

    @property
    def gflops(self) -> float:
        """Predicted GFLOP/s of the whole operation, counted as the results table does."""
        return self.flops / self.time_s / 1e9

    @property
    def bound(self) -> str:
        """``compute`` or ``memory``: which term limits the GEMM kernel."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


def predict(config: Config, dev: DeviceInfo, prec: Precision, m: int, n: int, k: int,
            peaks: Mapping[str, float] | None = None, *, trans_a: str = "N", trans_b: str = "N",
            beta: float = 0.0) -> Prediction:
    """The model's figures for ``config`` computing C (m x n) = op(A)·op(B) (+ beta·C) on ``dev``.

    ``peaks``: measured peaks as ``Store.latest_peaks`` returns them (precision -> GFLOP/s,
    ``"bandwidth"`` -> GB/s); missing ones are nominal. ``trans_a``/``trans_b`` are N, T or C;
    the defaults (and beta = 0) are what ``gemmtune search`` measures.
    """
    family = FAMILIES[config.kernel]
    p = config.params
    e = prec.bytes
    tm, tn, _ = family.tile(p)
    mp, np_, kp = family.padded_shape(p, m, n, k)

    moved = family.pass_elements(p, Problem(m, n, k, trans_a, trans_b))
    passes, pass_elements = len(moved), sum(moved)
    c_elements = m * n * (2 if beta != 0 else 1)
    # Tiles of C along each side (a family that pads makes them exact; one that guards its edges
    # runs a partial last tile).
    tiles_m, tiles_n = -(-mp // tm), -(-np_ // tn)
    main_bytes = e * (mp * kp * tiles_n + np_ * kp * tiles_m + c_elements)
    pass_bytes = e * pass_elements

    lx, ly = family.local_size(p)
    items = lx * ly
    local = family.local_mem_bytes(p, prec)
    by_local = dev.local_mem_bytes // local if local > 0 else math.inf
    resident = max(1, int(min(by_local, dev.max_work_group_size // items)))
    groups = tiles_m * tiles_n
    rounds = -(-groups // dev.compute_units)

    wm, wn = tm / lx, tn / ly
    slots = wm * wn + wm + wn   # per k: multiply-adds and local reads
    if dev.type == "GPU":       # and the slices' stores into local memory, with bank conflicts
        ca, cb = family.store_conflicts(p, prec)
        slots += (tm * ca + tn * cb) / items
    register_tile = wm * wn / slots
    occupancy = min(1.0, min(resident, rounds) * items / LATENCY_ITEMS.get(dev.type, 1))
    efficiency = register_tile * occupancy

    peak = resolve_peaks(dev, prec, peaks)
    flops, padded = prec.flops(m, n, k), prec.flops(mp, np_, kp)
    matrix = MATRIX_SPEEDUP if family.matrix_instructions(p, dev, prec) else 1.0
    # The last round of work-groups leaves compute units idle, unless stream-K shares it out:
    # then the parts of the split tiles go to memory and back (about a part per split tile and
    # per run), and a fixup kernel adds them up into C.
    shared, runs = family.shared_tiles(p, mp, np_, dev.compute_units)
    tail = 1.0 if shared else rounds * dev.compute_units / groups
    if shared:
        passes += 1
        pass_bytes += e * tm * tn * (2 * (shared + runs) + shared * (2 if beta != 0 else 1))
    compute_s = tail * padded / (peak.gflops * 1e9 * efficiency * matrix)
    memory_s = main_bytes / (peak.bandwidth_gbs * 1e9)
    pass_s = pass_bytes / (peak.bandwidth_gbs * 1e9)
    launch_s = (1 + passes) * LAUNCH_S.get(dev.type, DEFAULT_LAUNCH_S)
    return Prediction(
        flops=flops, padded_flops=padded, padded_shape=(mp, np_, kp), main_bytes=main_bytes,
        pass_bytes=pass_bytes, kernels=1 + passes, intensity=flops / (main_bytes + pass_bytes),
        local_mem_bytes=local, work_group_size=items, groups=groups, resident=resident,
        efficiency=efficiency, compute_s=compute_s, memory_s=memory_s, pass_s=pass_s, launch_s=launch_s,
        time_s=max(compute_s, memory_s) + pass_s + launch_s, peaks=peak)


def rank(configs: Iterable[Config], dev: DeviceInfo, prec: Precision, m: int, n: int, k: int,
         peaks: Mapping[str, float] | None = None) -> list[Config]:
    """``configs`` best-predicted first: shortest predicted time, then (among equal times) fewest
    bytes moved; configurations equal in both keep their order."""
    def key(config):
        p = predict(config, dev, prec, m, n, k, peaks)
        return p.time_s, p.bytes

    return sorted(configs, key=key)


def tied_groups(configs: Iterable[Config], dev: DeviceInfo, prec: Precision, m: int, n: int, k: int,
                count: int = 10, peaks: Mapping[str, float] | None = None) -> list[list[Config]]:
    """The ``count`` best distinct predictions (time, then bytes), each as the configurations
    predicted so, in ``rank`` order. Those of one prediction differ only in what the model does
    not see (vector widths, PIPE, UNROLL, padding, ...); fewer groups when there are fewer
    distinct predictions."""
    groups: dict[tuple, list[Config]] = {}
    for config in rank(configs, dev, prec, m, n, k, peaks):
        p = predict(config, dev, prec, m, n, k, peaks)
        if (p.time_s, p.bytes) not in groups:
            if len(groups) == count:
                break
            groups[p.time_s, p.bytes] = []
        groups[p.time_s, p.bytes].append(config)
    return list(groups.values())


def nearest(tied: Sequence[Config], near: Sequence[Config] = ()) -> Config:
    """The configuration of ``tied`` nearest (``defaults.distance``) to any of ``near``; the first
    where none is nearer (no ``near``, or only other families')."""
    from gemmtune.space.defaults import distance

    return min(tied, key=lambda c: min((distance(c, ref) for ref in near), default=0.0))


def farthest(tied: Sequence[Config], taken: Sequence[Config]) -> Config:
    """The configuration of ``tied`` farthest (``defaults.distance``) from all of ``taken``: of
    a tiling's configurations, the one whose values of what the model does not see differ most
    from those already chosen; the first of equally far ones. Only the families of ``taken``
    are weighed (another family is at an infinite distance, not an unseen value)."""
    from gemmtune.space.defaults import distance

    kin = [c for c in tied if any(c.kernel == ref.kernel for ref in taken)] or list(tied)
    return max(kin, key=lambda c: min((distance(c, ref) for ref in taken), default=0.0))


def best_tilings(configs: Iterable[Config], dev: DeviceInfo, prec: Precision, m: int, n: int, k: int,
                 count: int = 10, peaks: Mapping[str, float] | None = None,
                 near: Sequence[Config] = ()) -> list[Config]:
    """The ``count`` best-predicted configurations to measure first, one per distinct prediction
    (``tied_groups``), so that the seeds try ``count`` different tilings. Of the configurations
    the model cannot tell apart, the one nearest a configuration of ``near`` (those the device is
    known to run well: the shape's default, the nearest tuned shapes' bests), so that what the
    model cannot judge is taken from what was measured; without ``near``, the first in rank order."""
    return [nearest(tied, near) for tied in tied_groups(configs, dev, prec, m, n, k, count, peaks)]


def spearman(predicted_times, measured_times) -> float:
    """Spearman's rank correlation of predicted and measured times (1: the same order; nan when
    either is constant or there are fewer than two)."""
    if len(predicted_times) < 2:
        return math.nan
    from scipy import stats  # here: seeding a search needs the model, not scipy's half-second import

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        return float(stats.spearmanr(predicted_times, measured_times).statistic)
