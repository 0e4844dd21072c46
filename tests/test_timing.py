"""When timing stops: every timed row has a 95 % interval of its median, however small the time cap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers_foundation import TINY_SPACE

from gemmtune.execution.timing_worker import MAX_BATCH, batch_size
from gemmtune.precision import get_precision
from gemmtune.space import load_space
from gemmtune.measure.timing import MIN_SAMPLES, TimingPolicy, enough, median_ci
from gemmtune.space.valid import valid_configs


def test_the_time_cap_stops_sampling_only_once_the_median_has_an_interval():
    policy = TimingPolicy(max_seconds=0.01, max_repeats=200)
    spread = list(np.linspace(1.0, 3.0, MIN_SAMPLES))  # too wide to converge
    assert math.isnan(median_ci(spread[:-1])[0]) and not math.isnan(median_ci(spread)[0])
    assert not enough(spread[:-1], spent_s=5.0, policy=policy)
    assert enough(spread, spent_s=5.0, policy=policy)
    assert not enough(spread, spent_s=0.001, policy=policy)
    assert enough([2.0] * 10, spent_s=0.0, policy=policy)               # converged
    assert enough([1.0, 9.0] * 2, spent_s=0.0, policy=TimingPolicy(max_repeats=4))


def test_the_interval_of_the_median_is_scipys_quantile_test_interval():
    from scipy import stats

    rng = np.random.default_rng()
    for n in [*range(MIN_SAMPLES, 40), 97, 200, 1000]:
        for x in (rng.lognormal(size=n), rng.integers(0, 4, size=n).astype(float)):   # ties too
            ci = stats.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(0.95)
            assert median_ci(list(x)) == (float(ci.low), float(ci.high)), n
    low, high = median_ci([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 9.0, 7.0, 8.0, 10.0])   # unsorted samples
    assert low < 5.5 < high and {low, high} <= set(range(1, 11))


def test_a_sample_batches_fewer_calls_when_the_cap_could_not_hold_enough_samples():
    assert batch_size(0.001) == MAX_BATCH                                   # tiny kernel: amortise
    assert batch_size(0.001, call_ms=0.5, cap_s=0.03) == 10                 # 6 samples x 10 x 0.5 ms = 30 ms
    assert batch_size(0.001, call_ms=50.0, cap_s=0.03) == 1
    assert batch_size(0.5, call_ms=0.6, cap_s=100.0) == 2                   # device time decides


@pytest.mark.parametrize("cap", [1e-6, 0.05])
def test_a_trial_under_any_time_cap_has_an_interval_around_its_median(cap, tmp_path):
    from gemmtune.execution.messages import Job
    from gemmtune.execution.processes import Runner

    (tmp_path / "tiny.toml").write_text(TINY_SPACE)
    space = load_space(tmp_path / "tiny.toml")
    with Runner(0, trial_timeout=30) as runner:
        config = valid_configs(space, runner.device, get_precision("s"))[0]
        outcome = runner.run(Job(config, space.family("xgemm_k5").source, "s", 40, 24, 56,
                                 TimingPolicy(max_seconds=cap)))
    assert outcome.status == "ok" and outcome.check.passed
    t = outcome.timing
    assert t.repeats >= MIN_SAMPLES
    low, high = t.ci_ms
    assert low <= t.median_ms <= high


def test_a_worker_reads_every_result_afresh_into_the_memory_it_maps_once_per_shape(tmp_path):
    # Trials of one shape share one mapped host buffer: a later kernel's wrong or unwritten
    # result must still be caught, never pass on what an earlier trial left there.
    import pyopencl as cl
    from faults import write_fault_space

    from gemmtune.devices.opencl import open_device
    from gemmtune.execution.messages import Job
    from gemmtune.execution.timing_worker import _trial

    space = load_space(write_fault_space(tmp_path, (1, 5, 8)))
    family = space.family("xgemm_k5")
    info, dev = open_device("0")
    queue = cl.CommandQueue(cl.Context([dev]), properties=cl.command_queue_properties.PROFILING_ENABLE)
    problems: dict = {}
    statuses, buffers = [], []
    for fault in (1, 5, 1, 8):
        config = next(c for c in valid_configs(space, info, get_precision("s")) if c.params["FAULT"] == fault)
        outcome = _trial(cl, queue, problems, Job(config, family.source, "s", 40, 24, 56, TimingPolicy(max_seconds=0.01)))
        statuses.append(outcome.status)
        (pb,) = problems.values()
        buffers.append(pb.result)
    assert statuses == ["ok", "wrong_result", "ok", "wrong_result"]
    assert all(b is buffers[0] for b in buffers) and isinstance(buffers[0].base, cl.MemoryMap)
