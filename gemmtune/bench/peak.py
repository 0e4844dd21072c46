"""``gemmtune peak``: measure a device's multiply-add throughput and global-memory bandwidth.

Two OpenCL microbenchmarks (``kernels/peak.cl``), run in this process:

* multiply-add throughput, per precision: ``items`` work-items each run 16 independent chains of
  multiply-adds c <- c·a + b, ``iterations`` of them per chain in a real precision and a quarter
  as many in a complex one (a complex multiply-add is four real ones: the launches take about
  as long); flops = items · 16 · multiply-adds per chain · 2 (real) or · 8 (complex), as GEMM
  GFLOP/s counts them;
  on a CPU, ``kernels/peak_cpu.cl`` instead (``measure_madd_cpu``): explicit vectors in
  registers, which PoCL's vectoriser of scalar work-items does not reach;
* bandwidth: a device-to-device copy of ``copy_mib`` MiB, 16 bytes per work-item; GB/s counts
  the bytes read plus the bytes written (2 · size), 1 GB = 10⁹ bytes.

Times are from OpenCL profiling events with the discipline of ``gemmtune.measure.timing``: warm-up
launches, then repeats until the 95 % confidence interval of the median is within 2 % of it
(or the caps of the policy); the median time gives the value. Results go to the ``peaks``
table (``Store.save_peaks``), where the performance model finds them (``Store.latest_peaks``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

from gemmtune.db.connect import writing
from gemmtune.db.store import Store, database_url, probe
from gemmtune.db.urls import shown
from gemmtune.devices.opencl import open_device
from gemmtune.errors import GemmtuneError
from gemmtune.devices.info import DeviceInfo
from gemmtune.launch.operation import BUILD_OPTIONS
from gemmtune.models.analytic import BANDWIDTH, nominal_peaks
from gemmtune.precision import PRECISIONS, Precision, get_precision
from gemmtune.files.shipped import load_kernel_source
from gemmtune.space import require_precision
from gemmtune.measure.timing import TimingPolicy, enough

CHAINS = 16            # must match the CHAINS the kernel is built with
LOCAL_SIZE = 256       # work-items per work-group of both kernels (or the device's maximum)
COPY_ITEM_BYTES = 16   # one float4 per work-item
# On a CPU (kernels/peak_cpu.cl): 12 chains cover the multiply-add latency of two FMA pipes
# (4 cycles each) and fit 16 vector registers; the vector widths tried, in bytes (SSE, AVX2,
# AVX-512): PoCL splits a vector wider than the ISA's, so the best of them is the ISA's.
CPU_CHAINS = 12
CPU_VECTOR_BYTES = (16, 32, 64)


@dataclass(frozen=True)
class PeakSizes:
    """How much work one launch does. With the defaults a launch takes about 10-30 ms on a
    2-core CPU under PoCL and a few ms on a large GPU; a whole ``gemmtune peak`` about 6 s on
    that CPU."""

    iterations: int = 16384         # real multiply-adds per chain (complex: a quarter as many)
    items: int | None = None        # work-items of the multiply-add kernel; default per device
    copy_mib: int | None = None     # MiB copied; default 256 on a GPU, 64 elsewhere (beyond caches)
    policy: TimingPolicy = field(default_factory=lambda: TimingPolicy(max_seconds=1.0))

    def madd_items(self, dev: DeviceInfo) -> int:
        # Enough work-items to fill every compute unit many times over: 2048 per GPU compute
        # unit (a full NVIDIA SM), 256 per CPU core (one work-group, run as a vectorised loop).
        return self.items or dev.compute_units * (2048 if dev.type == "GPU" else LOCAL_SIZE)

    def copy_bytes(self, dev: DeviceInfo) -> int:
        """Bytes of each copy buffer: the size asked, within one allocation and a quarter of the
        device memory, in whole 16-byte items."""
        size = (self.copy_mib or (256 if dev.type == "GPU" else 64)) * 2**20
        limit = min(dev.max_alloc_bytes or size, dev.global_mem_bytes // 4)
        return max(COPY_ITEM_BYTES, min(size, limit) // COPY_ITEM_BYTES * COPY_ITEM_BYTES)


@dataclass(frozen=True)
class Peak:
    """One measured quantity: a precision's multiply-add throughput, or the bandwidth."""

    quantity: str          # s, d, c, z or "bandwidth"
    value: float           # GFLOP/s or GB/s, from the median time
    unit: str
    median_ms: float
    repeats: int

    def to_json(self) -> dict:
        return {"precision": self.quantity, "value": self.value, "unit": self.unit,
                "median_ms": self.median_ms, "repeats": self.repeats}


def parse_precisions(text: str | None, dev: DeviceInfo) -> list[Precision]:
    """``"s,c"`` -> those precisions (each must be supported); None -> every one the device has."""
    if text is None:
        return [p for p in PRECISIONS.values() if dev.double_precision or not p.needs_double]
    chosen = [get_precision(code.strip()) for code in text.split(",") if code.strip()]
    if not chosen:
        raise GemmtuneError("empty --precision: give s, d, c and/or z, comma-separated")
    for prec in chosen:
        require_precision(dev, prec)
    return list(dict.fromkeys(chosen))


def _time(launch, policy: TimingPolicy) -> list[float]:
    """Samples in ms of ``launch()`` (which returns its event), as gemmtune.measure.timing decides."""
    for _ in range(policy.warmup):
        launch().wait()
    samples, spent = [], 0.0
    while not enough(samples, spent, policy):
        event = launch()
        event.wait()
        samples.append((event.profile.end - event.profile.start) * 1e-6)
        spent += samples[-1] * 1e-3
    return samples


def _build(ctx: cl.Context, source_file: str, options: list[str], what: str) -> cl.Program:
    """A peak kernel built, or GemmtuneError naming ``what`` did not build."""
    try:
        with warnings.catch_warnings():
            # the remarks some drivers make on every build (Intel's runtime) are not the user's
            warnings.simplefilter("ignore", cl.CompilerWarning)
            return cl.Program(ctx, load_kernel_source(source_file)).build(options=options)
    except cl.RuntimeError as e:
        raise GemmtuneError(f"{what} does not build: {str(e).splitlines()[0]}") from None


def _program(ctx: cl.Context, prec: Precision) -> cl.Program:
    options = [*BUILD_OPTIONS, f"-DPRECISION={prec.cl_define}", f"-DCHAINS={CHAINS}"]
    return _build(ctx, "peak.cl", options, f"the peak kernel for precision {prec.code}")


def _peak(quantity: str, amount: float, unit: str, samples: list[float]) -> Peak:
    median = float(np.median(samples))
    return Peak(quantity, amount / (median * 1e-3) / 1e9, unit, median, len(samples))


def cpu_madd_flops(items: int, vecw: int, iterations: int) -> int:
    """Flops of one launch of peak_cpu.cl's madd_vec: per work-item CPU_CHAINS vectors of
    ``vecw`` lanes, each lane ``iterations`` multiply-adds of 2 flops."""
    return items * CPU_CHAINS * vecw * iterations * 2


def measure_madd_cpu(queue: cl.CommandQueue, dev: DeviceInfo, prec: Precision, sizes: PeakSizes) -> Peak:
    """Multiply-add throughput of a CPU's vector units (kernels/peak_cpu.cl), the best of
    vectors of 16, 32 and 64 bytes. Work-groups of one work-item, 8 per compute unit, so PoCL
    runs each as one loop with its chains in registers, and a core another process shares
    unevenly does not leave the other idle. A complex precision is measured as its real type:
    a complex multiply-add is four real ones, no faster per flop."""
    items = dev.compute_units * 8
    # 4 times the iterations: a launch of the default would take well under a millisecond
    iterations = sizes.iterations * 4
    base = np.float32 if prec.code in "sc" else np.float64
    out = cl.Buffer(queue.context, cl.mem_flags.WRITE_ONLY, items * np.dtype(base).itemsize)
    best = None
    for width_bytes in CPU_VECTOR_BYTES:
        vecw = width_bytes // np.dtype(base).itemsize
        options = [*BUILD_OPTIONS, f"-DPRECISION={prec.cl_define}", f"-DVECW={vecw}", f"-DCHAINS={CPU_CHAINS}"]
        program = _build(queue.context, "peak_cpu.cl", options, f"the CPU peak kernel for precision {prec.code}")
        kernel = cl.Kernel(program, "madd_vec")
        # a < 1 and b small: every lane converges to a normal number (no denormal slow path)
        samples = _time(lambda: kernel(queue, (items,), (1,), np.int32(iterations), base(0.999), base(1e-3), out),
                        sizes.policy)
        peak = _peak(prec.code, cpu_madd_flops(items, vecw, iterations), "GFLOP/s", samples)
        if best is None or peak.value > best.value:
            best = peak
    return best


def measure_madd(queue: cl.CommandQueue, dev: DeviceInfo, prec: Precision, sizes: PeakSizes) -> Peak:
    """Multiply-add throughput of one precision, GFLOP/s."""
    if dev.type == "CPU":
        return measure_madd_cpu(queue, dev, prec, sizes)
    local = min(LOCAL_SIZE, dev.max_work_group_size)
    items = -(-sizes.madd_items(dev) // local) * local
    kernel = cl.Kernel(_program(queue.context, prec), "madd")
    out = cl.Buffer(queue.context, cl.mem_flags.WRITE_ONLY, items * prec.bytes)
    # |a| < 1 and b small: every chain converges to b / (1 - a), a normal number (no overflow, no
    # denormal slow path)
    a, b = (np.array(0.999 + 0.001j if prec.is_complex else 0.999, dtype=prec.dtype),
            np.array(1e-3 + 1e-3j if prec.is_complex else 1e-3, dtype=prec.dtype))
    iterations = max(1, sizes.iterations * 2 // prec.flops_per_madd)
    samples = _time(lambda: kernel(queue, (items,), (local,), np.int32(iterations), a, b, out), sizes.policy)
    return _peak(prec.code, items * CHAINS * iterations * prec.flops_per_madd, "GFLOP/s", samples)


def measure_bandwidth(queue: cl.CommandQueue, dev: DeviceInfo, sizes: PeakSizes) -> Peak:
    """Global-memory bandwidth of a device-to-device copy, GB/s of bytes read + written."""
    size = sizes.copy_bytes(dev)
    local = min(LOCAL_SIZE, dev.max_work_group_size)
    kernel = cl.Kernel(_program(queue.context, PRECISIONS["s"]), "copy")
    src = cl.Buffer(queue.context, cl.mem_flags.READ_ONLY, size)
    dst = cl.Buffer(queue.context, cl.mem_flags.WRITE_ONLY, size)
    cl.enqueue_fill_buffer(queue, src, np.float32(1), 0, size)  # pages touched before timing
    items = size // COPY_ITEM_BYTES
    launch = -(-items // local) * local  # whole work-groups; the kernel skips the items beyond
    samples = _time(lambda: kernel(queue, (launch,), (local,), np.uint64(items), src, dst), sizes.policy)
    return _peak(BANDWIDTH, 2 * size, "GB/s", samples)


@dataclass(frozen=True)
class PeakRun:
    device: DeviceInfo
    peaks: list[Peak]
    db: str                # without the password
    created_at: str

    def nominal(self) -> dict[str, float]:
        return nominal_peaks(self.device)


def run_peak(device: str | int | None = None, precisions: str | None = None, db: str | None = None,
             sizes: PeakSizes = PeakSizes(), save: bool = True) -> PeakRun:
    """Measure every requested precision (default: all the device supports) and the bandwidth,
    and append them to the ``peaks`` table of ``db`` (unless ``save`` is False). Bad input
    raises GemmtuneError before anything is measured or written."""
    if sizes.iterations < 1 or (sizes.items is not None and sizes.items < 1) or \
            (sizes.copy_mib is not None and sizes.copy_mib < 1):
        raise GemmtuneError("peak sizes must be at least 1")
    info, cl_device = open_device(device)
    chosen = parse_precisions(precisions, info)
    url = database_url(db)
    probe(url)  # a database that cannot be used fails now, not after the measurement
    ctx = cl.Context([cl_device])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    peaks = [measure_madd(queue, info, prec, sizes) for prec in chosen]
    peaks.append(measure_bandwidth(queue, info, sizes))
    created = ""
    if save:
        store = Store(url)
        try:
            with writing(url):   # a full disk or a server gone: one error, not a driver's traceback
                created = store.save_peaks(info.key, info.name, {p.quantity: p.value for p in peaks})
                store.save_device(info)
        finally:
            store.close()
    return PeakRun(info, peaks, shown(url), created)
