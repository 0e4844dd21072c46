"""The performance model: formulas against hand-computed cases, ranking, rank correlation.

Every expected number below is worked out by hand from the formulas in gemmtune/models/analytic.py's
docstring, written as the arithmetic that gives it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers_foundation import make_device

from gemmtune.devices.info import DeviceInfo
from gemmtune.models import analytic
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space, make_config

S, Z = get_precision("s"), get_precision("z")


def device(**changes) -> DeviceInfo:
    # 4 compute units at 1,000 MHz, 48 KiB, 1,024 work-items: the hand-computed figures use these.
    return make_device(**{"compute_units": 4, "global_mem_bytes": 2**32, "max_alloc_bytes": 2**30, **changes})


GPU = device()
CPU = device(type="CPU", name="Some CPU", compute_units=2, max_clock_mhz=2000, local_mem_bytes=512 * 1024,
             max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096))


def k5(**p) -> Config:
    """A whole configuration: these values, the rest at the kernel's defaults."""
    return make_config(load_space(), "xgemm_k5", {"TSM": 32, "TSN": 64, "TSK": 16, "WPTN": 4, "PAD": 1,
                                                  "TRANSPOSEX": 16, "TRANSPOSEY": 8, **p})


def rt(**p) -> Config:
    return make_config(load_space(), "xgemm_rt", {"MWG": 64, "NWG": 64, "KWG": 16, "MDIMC": 16, "NDIMC": 8,
                                                  "VWG": 4, "VLM": 4, "VLN": 4, "PIPE": 2, "PADL": 0, "UNROLL": 1,
                                                  "BKFAST": 0, "WARPM": 0, "TRANSPOSEX": 16, "TRANSPOSEY": 16, **p})


def test_k5_single_unpadded_by_hand():
    pr = analytic.predict(k5(), GPU, S, 64, 64, 64, {"s": 1000.0, "bandwidth": 100.0})
    assert pr.flops == pr.padded_flops == 2 * 64**3
    assert pr.padded_shape == (64, 64, 64)
    # A is used as given; B is transposed (reads 64·64, writes 64·64 elements).
    assert pr.kernels == 2
    assert pr.pass_bytes == 4 * (64 * 64 + 64 * 64)
    # A once per column of tiles (64/64 = 1), B once per row of tiles (64/32 = 2), C written.
    assert pr.main_bytes == 4 * (64 * 64 * 1 + 64 * 64 * 2 + 64 * 64)
    assert pr.intensity == pytest.approx(2 * 64**3 / (4 * (4096 + 8192 + 4096) + 32768))
    assert pr.local_mem_bytes == (16 * 32 + 64 * (16 + 1)) * 4
    assert pr.work_group_size == 32 * 16
    assert pr.groups == 2
    assert pr.resident == min(49152 // 6400, 1024 // 512) == 2
    # 1 x 4 results per work-item: 4 multiply-adds, 1 + 4 local reads and, on a GPU, a share of
    # the slice stores (32 of A and 64 of B over 512 work-items; B's rows 16 + 1 floats apart do
    # not conflict); one round of 2 groups on 4 compute units.
    eff = 4 / (4 + 1 + 4 + (32 + 64) / 512)
    assert pr.efficiency == pytest.approx(eff)
    compute = 1 * 4 / 2 * (2 * 64**3) / (1000e9 * eff)
    assert pr.compute_s == pytest.approx(compute)
    assert pr.memory_s == pytest.approx(65536 / 100e9)
    assert pr.pass_s == pytest.approx(32768 / 100e9)
    assert pr.launch_s == pytest.approx(2 * 5e-6)
    assert pr.time_s == pytest.approx(compute + 32768 / 100e9 + 2 * 5e-6)
    assert pr.bound == "compute"
    assert pr.gflops == pytest.approx(2 * 64**3 / pr.time_s / 1e9)
    assert pr.peaks == analytic.Peaks(1000.0, 100.0, True)


def test_k5_double_complex_padded_on_a_cpu_by_hand():
    config = k5(TSM=16, TSN=32, TSK=8, WPTN=4, PAD=2)
    pr = analytic.predict(config, CPU, Z, 50, 40, 30, {"z": 50.0, "bandwidth": 10.0})
    assert pr.flops == 8 * 50 * 40 * 30
    assert pr.padded_shape == (64, 64, 32) and pr.padded_flops == 8 * 64 * 64 * 32
    # Both operands are padded: A copied (50·30 -> 64·32), B transposed (30·40 -> 64·32).
    assert pr.kernels == 3
    assert pr.pass_bytes == 16 * (50 * 30 + 64 * 32 + 30 * 40 + 64 * 32)
    # A read 64/32 = 2 times, B 64/16 = 4 times, C (50 x 40) written once.
    assert pr.main_bytes == 16 * (64 * 32 * 2 + 64 * 32 * 4 + 50 * 40)
    assert pr.local_mem_bytes == (8 * 16 + 32 * (8 + 2)) * 16
    assert pr.work_group_size == 16 * 8 and pr.groups == 4 * 2
    assert pr.resident == min(512 * 1024 // 7168, 4096 // 128) == 32
    assert pr.efficiency == pytest.approx(4 / 9)  # a CPU needs no latency hiding: occupancy 1
    compute = math.ceil(8 / 2) * 2 / 8 * (8 * 64 * 64 * 32) / (50e9 * 4 / 9)
    assert pr.compute_s == pytest.approx(compute)
    assert pr.memory_s == pytest.approx(16 * 14288 / 10e9)
    assert pr.time_s == pytest.approx(compute + 16 * 6796 / 10e9 + 3 * 30e-6)


@pytest.mark.parametrize("bkfast, kernels, pass_elements", [(0, 2, 2 * 128 * 128), (1, 1, 0)])
def test_rt_bkfast_reads_an_untransposed_b_as_given(bkfast, kernels, pass_elements):
    pr = analytic.predict(rt(BKFAST=bkfast), GPU, S, 128, 128, 128, {"s": 1000.0, "bandwidth": 100.0})
    assert pr.kernels == kernels and pr.pass_bytes == 4 * pass_elements
    assert pr.main_bytes == 4 * (128 * 128 * 2 + 128 * 128 * 2 + 128 * 128)
    assert pr.local_mem_bytes == 2 * 16 * (64 + 64) * 4 and pr.work_group_size == 128
    assert pr.resident == min(49152 // 16384, 1024 // 128) == 3
    # 4 x 8 results per work-item: 32 / (32 + 4 + 8 + (64 + 64) / 128 stores).
    assert pr.efficiency == pytest.approx(32 / 45)
    compute = 1 * 4 / 4 * (2 * 128**3) / (1000e9 * 32 / 45)
    assert pr.time_s == pytest.approx(compute + 4 * pass_elements / 100e9 + kernels * 5e-6)


def test_pass_rules_follow_the_operand_layouts():
    peaks = {"s": 1000.0, "bandwidth": 100.0}
    # BKFAST = 1 with a padded n: B is copied (not transposed) into Kp x Np.
    pr = analytic.predict(rt(BKFAST=1), GPU, S, 128, 100, 128, peaks)
    assert pr.kernels == 2 and pr.pass_bytes == 4 * (128 * 100 + 128 * 128)
    # A B given transposed is what BKFAST = 0 reads: no pass; BKFAST = 1 must transpose it back.
    assert analytic.predict(rt(BKFAST=0), GPU, S, 128, 128, 128, peaks, trans_b="T").kernels == 1
    assert analytic.predict(rt(BKFAST=1), GPU, S, 128, 128, 128, peaks, trans_b="T").kernels == 2
    # A transposed A is always prepared; beta != 0 reads C as well as writing it.
    assert analytic.predict(k5(), GPU, S, 64, 64, 64, peaks, trans_a="T").kernels == 3
    plain = analytic.predict(k5(), GPU, S, 64, 64, 64, peaks)
    assert analytic.predict(k5(), GPU, S, 64, 64, 64, peaks, beta=1.0).main_bytes == plain.main_bytes + 4 * 64 * 64


def test_pass_count_matches_what_gemm_operation_enqueues():
    """The model's pass rules against the real thing, on the PoCL device."""
    import pyopencl as cl

    from gemmtune.devices.opencl import open_device
    from gemmtune.launch.operation import GemmOperation
    from gemmtune.space import load_space

    info, dev = open_device(0)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    space = load_space()
    small = {"MWG": 32, "NWG": 32, "KWG": 16, "MDIMC": 8, "NDIMC": 8, "VWG": 2, "VLM": 2, "VLN": 2}
    cases = [(k5(TSM=16, TSN=16, TSK=16, WPTN=2), 32, 32, 32, "N", "N"),
             (k5(TSM=16, TSN=16, TSK=16, WPTN=2), 32, 32, 32, "N", "T"),
             (k5(TSM=16, TSN=16, TSK=16, WPTN=2), 20, 32, 32, "T", "T"),
             (rt(**small, BKFAST=1), 32, 32, 32, "N", "N"),
             (rt(**small, BKFAST=1), 32, 30, 32, "N", "N"),
             (rt(**small, BKFAST=1), 32, 32, 32, "N", "T"),
             (rt(**small, BKFAST=0), 32, 32, 32, "N", "T")]
    for config, m, n, k, ta, tb in cases:
        op = GemmOperation(queue, config, space.family(config.kernel).source, S, m, n, k, ta, tb)
        bufs = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * max(m, n, k) ** 2) for _ in range(3)]
        events = op.enqueue(*bufs)
        queue.finish()
        predicted = analytic.predict(config, info, S, m, n, k, trans_a=ta, trans_b=tb)
        assert predicted.kernels == len(events), (config, m, n, k, ta, tb)


def test_low_occupancy_on_a_gpu_costs_efficiency():
    # 64 work-items per group, and local memory for only one group per compute unit: half of
    # the 128 work-items that hide latency.
    config = k5(TSM=16, TSN=16, TSK=16, WPTN=4, PAD=0)
    pr = analytic.predict(config, device(local_mem_bytes=3000), S, 1024, 1024, 1024)
    assert pr.local_mem_bytes == 2048 and pr.work_group_size == 64 and pr.resident == 1
    # Per k a work-item does 1 x 4 multiply-adds and 1 + 4 local reads, and stores its share of
    # the slices, (16 + 16 x 16) / 64: B's rows lie TSK + PAD = 16 floats apart, a 16-way conflict.
    assert pr.efficiency == pytest.approx(4 / (9 + (16 + 16 * 16) / 64) * 0.5)
    assert analytic.predict(config, GPU, S, 1024, 1024, 1024).efficiency == pytest.approx(4 / 13.25)


def test_rt_unstaged_stores_nothing_and_takes_no_local_memory():
    staged, unstaged = rt(), rt(STAGE=0, PIPE=0, VWG=1)
    pr = [analytic.predict(c, GPU, S, 1024, 1024, 1024) for c in (staged, unstaged)]
    assert pr[0].local_mem_bytes == 2 * 16 * (64 + 64) * 4 and pr[1].local_mem_bytes == 0
    # 16 x 8 work-items, 4 x 8 results each: per k 32 multiply-adds and 12 reads; staged, also
    # the work-item's share of storing the slices, (64 + 64) / 128.
    assert pr[0].efficiency == pytest.approx(32 / 45)
    assert pr[1].efficiency == pytest.approx(32 / 44)
    assert pr[1].resident == 8    # bounded by work-items alone


@pytest.mark.parametrize("precision, tsk, pad, ways", [
    ("s", 32, 0, 32), ("s", 32, 2, 2), ("s", 16, 1, 1), ("s", 8, 4, 4),
    ("d", 16, 0, 16), ("d", 16, 1, 1), ("d", 8, 2, 2), ("z", 16, 0, 8), ("z", 8, 1, 1),
])
def test_k5_b_stores_conflict_as_the_padding_decides(precision, tsk, pad, ways):
    from gemmtune.families import FAMILIES

    # gcd of the row stride in 4-byte words and the 32 banks, over the words of one element.
    p = {"TSM": 64, "TSN": 64, "TSK": tsk, "WPTN": 8, "PAD": pad, "TRANSPOSEX": 16, "TRANSPOSEY": 16}
    assert FAMILIES["xgemm_k5"].store_conflicts(p, get_precision(precision)) == (1, ways)


def test_bank_conflicts_cost_on_a_gpu_only():
    padded, plain = k5(TSM=64, TSN=64, TSK=32, WPTN=8, PAD=2), k5(TSM=64, TSN=64, TSK=32, WPTN=8, PAD=0)
    gpu = [analytic.predict(c, GPU, S, 1024, 1024, 1024) for c in (padded, plain)]
    # 64 x 8 work-items: per k, 8 multiply-adds, 9 reads, (64 + 64 x ways) / 512 stores.
    assert gpu[0].efficiency == pytest.approx(8 / (17 + (64 + 64 * 2) / 512))
    assert gpu[1].efficiency == pytest.approx(8 / (17 + (64 + 64 * 32) / 512))
    assert gpu[0].time_s < gpu[1].time_s
    cpu = [analytic.predict(c, CPU, S, 1024, 1024, 1024) for c in (padded, plain)]
    assert cpu[0].time_s == cpu[1].time_s  # a CPU's local memory has no banks


def test_edge_tiles_and_the_last_round_cost_time():
    peaks = {"s": 1000.0, "bandwidth": 1e6}  # compute-bound: the memory term is negligible
    exact = analytic.predict(k5(), GPU, S, 256, 256, 256, peaks)
    ragged = analytic.predict(k5(), GPU, S, 257, 256, 256, peaks)  # one row more: a whole row of tiles
    assert ragged.padded_shape == (288, 256, 256)
    assert ragged.compute_s > exact.compute_s * 1.1
    # A single work-group leaves three of the four compute units idle: it takes as long as four.
    one = analytic.predict(k5(), GPU, S, 32, 64, 256, peaks)
    four = analytic.predict(k5(), GPU, S, 128, 64, 256, peaks)
    assert one.groups == 1 and four.groups == 4
    assert one.compute_s == pytest.approx(four.compute_s)


def test_nominal_peaks_formula():
    assert analytic.nominal_peaks(GPU) == pytest.approx(
        {"s": 4 * 1.0 * 128 * 2, "c": 1024, "d": 512, "z": 512, "bandwidth": 1024 / 12})
    assert analytic.nominal_peaks(CPU)["s"] == pytest.approx(2 * 2.0 * 16 * 2)
    assert "d" not in analytic.nominal_peaks(device(double_precision=False))


def test_measured_peaks_replace_nominal_ones():
    nominal = analytic.resolve_peaks(GPU, S)
    assert nominal == analytic.Peaks(1024.0, 1024 / 12, False)
    half = analytic.resolve_peaks(GPU, S, {"s": 77.0})
    assert (half.gflops, half.bandwidth_gbs, half.measured) == (77.0, pytest.approx(1024 / 12), False)
    assert analytic.resolve_peaks(GPU, S, {"s": 77.0, "bandwidth": 5.0}) == analytic.Peaks(77.0, 5.0, True)
    slow = analytic.predict(k5(), GPU, S, 512, 512, 512, {"s": 1.0, "bandwidth": 1.0})
    assert slow.time_s > analytic.predict(k5(), GPU, S, 512, 512, 512).time_s * 100


def test_rank_puts_better_reuse_first():
    poor = k5(TSM=16, TSN=16, TSK=16, WPTN=1, PAD=0)            # 1 result per work-item, tiny tiles
    fair = k5(TSM=64, TSN=64, TSK=16, WPTN=8, PAD=0)            # 8 per work-item
    good = rt(MWG=128, NWG=128, KWG=16, MDIMC=16, NDIMC=16)     # 8 x 8 per work-item, big tiles
    for dev in (GPU, CPU):
        assert analytic.rank([poor, good, fair], dev, S, 1024, 1024, 1024) == [good, fair, poor]
        p = [analytic.predict(c, dev, S, 1024, 1024, 1024) for c in (poor, fair, good)]
        assert p[0].intensity < p[1].intensity < p[2].intensity
    # Equal predicted times go to the configuration that moves fewer bytes; configurations that
    # differ only in what the model does not see keep their order.
    peaks = {"s": 1.0, "bandwidth": 1e6}  # compute-bound: time depends on efficiency alone
    small, large = k5(TSM=16, TSN=64, TSK=16, WPTN=8), k5(TSM=64, TSN=64, TSK=16, WPTN=8)
    p_small, p_large = (analytic.predict(c, CPU, S, 512, 512, 512, peaks) for c in (small, large))
    assert p_small.time_s == p_large.time_s and p_small.bytes > p_large.bytes
    assert analytic.rank([small, large], CPU, S, 512, 512, 512, peaks) == [large, small]
    a, b = rt(UNROLL=1), rt(UNROLL=8)
    assert analytic.rank([b, a], GPU, S, 512, 512, 512) == [b, a]


def test_seeds_are_the_best_predictions_one_per_distinct_prediction():
    a, b = rt(UNROLL=1), rt(UNROLL=8)                  # the model cannot tell these apart
    worse = k5(TSM=16, TSN=16, TSK=16, WPTN=1, PAD=0)
    assert analytic.rank([worse, a, b], GPU, S, 512, 512, 512) == [a, b, worse]
    assert analytic.best_tilings([worse, a, b], GPU, S, 512, 512, 512, count=2) == [a, worse]
    assert analytic.best_tilings([worse, a, b], GPU, S, 512, 512, 512, count=1) == [a]
    assert analytic.best_tilings([worse, a, b], GPU, S, 512, 512, 512, count=10) == [a, worse]


def test_each_seed_is_the_one_of_its_prediction_nearest_a_known_good_configuration():
    # What the model cannot see is taken from the configurations given as near (the shape's
    # default, the nearest tuned shapes' bests): of a, b and c, tied, the seed is the one
    # nearest any of them (another family's is at no distance); without them, rank order.
    a, b, c = rt(UNROLL=1, PADL=0, VWG=1), rt(UNROLL=8, PADL=0, VWG=4), rt(UNROLL=4, PADL=4, VWG=4)
    worse = k5(TSM=16, TSN=16, TSK=16, WPTN=1, PAD=0)
    tied = [a, b, c, worse]
    assert analytic.best_tilings(tied, GPU, S, 512, 512, 512, count=2) == [a, worse]
    assert analytic.best_tilings(tied, GPU, S, 512, 512, 512, count=2, near=[rt(UNROLL=8, PADL=0, VWG=2)]) == [b, worse]
    assert analytic.best_tilings(tied, GPU, S, 512, 512, 512, count=2,
                       near=[k5(TSM=64, TSN=64, TSK=32, WPTN=8, PAD=2), rt(UNROLL=4, PADL=2, VWG=4)]) == [c, worse]
    assert analytic.best_tilings(tied, GPU, S, 512, 512, 512, count=2, near=[worse]) == [a, worse]


@pytest.mark.parametrize("code", ["d", "z"])
def test_matrix_instructions_double_the_compute_rate_where_the_device_has_them(code):
    prec = get_precision(code)
    fma = rt(MWG=64, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VLM=1, VLN=1, STAGE=1, MMA=0)
    mma = Config.of("xgemm_rt", {**fma.params, "MMA": 1})
    tensor = device(fp64_matrix=True)
    p_fma, p_mma = (analytic.predict(c, tensor, prec, 1024, 1024, 1024) for c in (fma, mma))
    assert p_mma.compute_s == pytest.approx(p_fma.compute_s / analytic.MATRIX_SPEEDUP)
    assert p_mma.efficiency == p_fma.efficiency and p_mma.bytes == p_fma.bytes
    # Without the instructions (where MMA 1 is not valid anyway) nothing changes.
    assert analytic.predict(mma, GPU, prec, 1024, 1024, 1024).compute_s == pytest.approx(p_fma.compute_s)


def test_seeds_include_matrix_configurations_where_they_pay():
    # The default search starts from the model's seeds: an FMA configuration with the better
    # register tile (8 x 8 results per work-item against 4 x 8) still ranks below the matrix one
    # on a device with the instructions, and above it on one without.
    tensor = device(fp64_matrix=True)
    fma = rt(MWG=64, NWG=64, KWG=8, MDIMC=8, NDIMC=8, VLM=1, VLN=1, STAGE=1, MMA=0)
    mma = rt(MWG=64, NWG=64, KWG=8, MDIMC=16, NDIMC=8, VLM=1, VLN=1, STAGE=1, MMA=1)
    d = get_precision("d")
    assert analytic.predict(fma, tensor, d, 2048, 2048, 2048).efficiency > analytic.predict(mma, tensor, d, 2048, 2048, 2048).efficiency
    assert analytic.best_tilings([fma, mma], tensor, d, 2048, 2048, 2048, count=1) == [mma]
    assert analytic.best_tilings([fma, mma], GPU, d, 2048, 2048, 2048, count=1) == [fma]


def test_spearman_on_known_data():
    assert analytic.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert analytic.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert analytic.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(1 - 6 * 2 / (4 * (16 - 1)))
    assert np.isnan(analytic.spearman([1, 2, 3], [5, 5, 5]))
    assert np.isnan(analytic.spearman([1], [2]))


def test_model_imports_no_opencl():
    import subprocess
    import sys

    code = "import sys, gemmtune.models.analytic; assert 'pyopencl' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_split_tiles_leave_no_compute_unit_idle_in_the_model():
    # 5 tiles of 64 x 64 on 4 compute units: two rounds, the second a quarter full, unless the
    # last tile is split along K (STREAMK); 8 tiles fill two rounds either way.
    whole, split = rt(STREAMK=0), rt(STREAMK=2)
    t0, t2 = (analytic.predict(c, GPU, S, 320, 64, 1024).compute_s for c in (whole, split))
    assert t0 == pytest.approx(t2 * 2 * 4 / 5)
    full0, full2 = (analytic.predict(c, GPU, S, 512, 64, 1024).compute_s for c in (whole, split))
    assert full0 == pytest.approx(full2)
    # The split costs a pass: each of the 8 work-groups of a round leaves about a part per tile
    # it touches, 5 + 8 parts of 64 x 64 written and read back, and the 5 tiles of C written.
    p0, p2 = (analytic.predict(c, GPU, S, 320, 64, 1024) for c in (whole, split))
    assert p2.kernels == p0.kernels + 1 and p2.pass_bytes - p0.pass_bytes == 4 * 64 * 64 * (2 * (5 + 8) + 5)
    assert analytic.predict(split, GPU, S, 512, 64, 1024).kernels == analytic.predict(whole, GPU, S, 512, 64, 1024).kernels


def test_a_problem_smaller_than_one_tile_of_a_family_that_does_not_pad_is_one_work_group():
    """xgemm_cpu guards its edges instead of padding: 40 x 40 with a 48-row tile is one partial
    tile along M, not none (a division by zero once)."""
    from gemmtune.families import FAMILIES

    cpu = FAMILIES["xgemm_cpu"]
    config = Config.of("xgemm_cpu", {**cpu.defaults, "VW": 16, "MV": 3, "WGS": 1})
    tm, tn, _ = cpu.tile(config.params)
    assert tm > 40
    p = analytic.predict(config, GPU, S, 40, 40, 40)
    assert p.groups == -(-40 // tn) and p.time_s > 0


def test_farthest_weighs_the_unseen_values_of_the_picks_family():
    """Of configurations predicted alike, the one whose values differ most (log2 steps) from all
    those taken; a configuration of another family is not "far", it is another kernel."""
    space = load_space()
    rt = lambda **p: make_config(space, "xgemm_rt", {"MWG": 64, "NWG": 64, "MDIMC": 8, "NDIMC": 8, **p})
    taken = [rt(KWG=8, UNROLL=1, PIPE=1), rt(KWG=8, UNROLL=1, PIPE=6)]
    near, far = rt(KWG=16, UNROLL=1, PIPE=1), rt(KWG=32, UNROLL=8, PIPE=1)
    direct = make_config(space, "xgemm_direct", {"MWG": 64, "NWG": 64})
    assert analytic.farthest([direct, near, far, *taken], taken) == far
    assert analytic.farthest([near, far], taken[:1]) == far
    assert analytic.farthest([direct], taken) == direct   # nothing of the family: what there is
