"""Timing statistics: when to stop repeating, confidence intervals, and ties (pure Python).

Times come from device profiling events. A measurement repeats until the distribution-free
95 % confidence interval of the median (order statistics, whose ranks ``scipy.stats.quantile_test``
gives) is within ``rel_ci`` of the median, or until a cap of repeats or seconds. Medians resist
the occasional slow launch that would drag a mean.

Two configurations are compared as the seed paper decides between variants: a one-tailed test
at 95 % confidence (here Mann-Whitney U on the time samples, which assumes no distribution),
asking whether the faster-looking one is really faster. When it is not, they are a tie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

# scipy.stats is imported inside the functions that run a statistical test: importing it takes
# 0.5-2 s on a 2-core machine, longer than a search otherwise needs to reach its first trial.

CONFIDENCE = 0.95
MIN_SAMPLES = 6   # the fewest samples whose median has a 95 % interval


@dataclass(frozen=True)
class TimingPolicy:
    warmup: int = 2            # launches before any sample is kept
    min_repeats: int = 10      # samples before the interval is judged
    max_repeats: int = 200     # cap on samples
    max_seconds: float = 2.0   # cap on time spent sampling one configuration (after MIN_SAMPLES)
    rel_ci: float = 0.02       # stop once the interval lies within this fraction of the median


def median_ci(samples) -> tuple[float, float]:
    """95 % confidence interval of the median; (nan, nan) with too few samples (< MIN_SAMPLES)."""
    x = np.sort(np.asarray(samples, dtype=float))
    if x.size < MIN_SAMPLES:
        return math.nan, math.nan
    low, high = _median_ci_ranks(x.size)
    return (float(x[low]) if low is not None else math.nan), (float(x[high]) if high is not None else math.nan)


@cache
def _median_ci_ranks(n: int) -> tuple[int | None, int | None]:
    """The order statistics (0-based; None: beyond the samples) that bound the median's interval
    among ``n`` samples. They depend on ``n`` alone, so scipy's interval of the ranks 0 .. n-1 is
    their positions. A timing worker asks after every sample, and scipy's test took 1-2 ms a call
    on the H200's host: 40 % of the timing worker's time at z 1024^3."""
    from scipy import stats

    ranks = np.arange(n, dtype=float)
    ci = stats.quantile_test(ranks, q=float(np.median(ranks)), p=0.5).confidence_interval(CONFIDENCE)
    return tuple(None if math.isnan(v) else int(v) for v in (ci.low, ci.high))


def converged(samples, policy: TimingPolicy) -> bool:
    if len(samples) < policy.min_repeats:
        return False
    med = float(np.median(samples))
    low, high = median_ci(samples)
    return med - low <= policy.rel_ci * med and high - med <= policy.rel_ci * med


def enough(samples, spent_s: float, policy: TimingPolicy) -> bool:
    """Sampling stops at the repeat cap, once the interval is tight, or once the time cap is
    spent: but never before the median has an interval, so every timed row carries one."""
    n = len(samples)
    return (n >= policy.max_repeats or converged(samples, policy)
            or (spent_s >= policy.max_seconds and n >= MIN_SAMPLES))


@dataclass(frozen=True)
class Timing:
    """Samples of one configuration, in milliseconds: per call as a caller pays (see
    gemmtune.execution.timing_worker), and the device time of its GEMM kernels (no passes) and of the whole operation."""

    samples_ms: tuple[float, ...]
    kernel_ms: tuple[float, ...]
    device_ms: tuple[float, ...] = ()

    @property
    def repeats(self) -> int:
        return len(self.samples_ms)

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples_ms))

    @property
    def min_ms(self) -> float:
        return float(np.min(self.samples_ms))

    @property
    def kernel_median_ms(self) -> float:
        return float(np.median(self.kernel_ms))

    @property
    def device_median_ms(self) -> float | None:
        return float(np.median(self.device_ms)) if self.device_ms else None

    @property
    def ci_ms(self) -> tuple[float, float]:
        return median_ci(self.samples_ms)


def significantly_faster(fast_ms, slow_ms, confidence: float = CONFIDENCE) -> bool:
    """True when times ``fast_ms`` are smaller than ``slow_ms`` by a one-tailed test."""
    if len(fast_ms) < 3 or len(slow_ms) < 3:
        return False
    from scipy import stats

    p = stats.mannwhitneyu(fast_ms, slow_ms, alternative="less").pvalue
    return bool(p < 1 - confidence)


def is_tie(a_ms, b_ms) -> bool:
    """Neither sample set is significantly faster than the other."""
    return not (significantly_faster(a_ms, b_ms) or significantly_faster(b_ms, a_ms))


def gflops(flops: int, time_ms: float) -> float:
    return flops / (time_ms * 1e-3) / 1e9
