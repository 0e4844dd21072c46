"""How busy the search process keeps a device, with no device: ``gemmtune search`` as it runs
(the proposals, the learned model and the shipped prior, the database, the loop), its timing
worker and compilers replaced by stand-ins that answer each job after a fixed time, on a
device described by a JSON file (default: the H200 of the landscapes).

    python tools/pipeline_bench.py [--device-info docs/landscapes/nvidia-h200.json] [-p z]
        [--size 1024] [--device-ms 25] [--build-ms 400] [--jobs 15] [--timeout 30] [--db URL]

The stand-in device "measures" each candidate in ``--device-ms`` (a GFLOP/s from the analytic
model with a fixed per-configuration noise, so that what the search learns still steers it);
each of ``--jobs`` stand-in compilers "builds" one in ``--build-ms``. Neither uses a processor
while it waits, so the host's cores are the search process's and its proposing child's.
Prints the search's summary line of the timing worker's busy share and what it waited for:
where this process is the wait, it is what holds a device back at that pace. The figures of a
real device differ (a timing worker also reads back and checks each result); what this
measures is the search's own share.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV = "GEMMTUNE_PIPELINE_BENCH"   # the stand-ins' settings, as JSON: spawned workers inherit it


def _settings() -> dict:
    return json.loads(os.environ[ENV])


def _ready(conn):
    """Say the described device is open, as a worker does; returns it."""
    from gemmtune.devices.info import read_device_info

    dev = read_device_info(_settings()["device_info"])
    conn.send(("ready", dev))
    return dev


def stand_in_worker(conn, device, parent, quiet, cores=None) -> None:
    """A timing worker: every job ``ok`` after ``device_ms``, at the analytic model's speed."""
    from gemmtune.execution.child import (
        incoming_jobs as jobs,  # the real workers' reader: the next job waits in the process
    )
    from gemmtune.execution.messages import Outcome
    from gemmtune.models import analytic
    from gemmtune.precision import get_precision
    from gemmtune.measure.timing import Timing

    settings = _settings()
    dev = _ready(conn)
    free = time.perf_counter()
    for job in jobs(conn):
        t0 = time.perf_counter()
        prec = get_precision(job.precision)
        predicted = analytic.predict(job.config, dev, prec, job.m, job.n, job.k, trans_a=job.trans_a, trans_b=job.trans_b)
        noise = zlib.crc32(repr(job.config.key).encode()) % 1000 / 1000
        ms = predicted.time_s * 1e3 * math.exp(0.3 * (noise - 0.5))
        time.sleep(max(0.0, settings["device_ms"] / 1e3 - (time.perf_counter() - t0)))
        samples = (ms,) * 8
        done = time.perf_counter()
        conn.send(Outcome("ok", Timing(samples, samples, samples), trial_s=done - t0, idle_s=t0 - free))
        free = done


def stand_in_compiler(conn, device, parent, quiet, cores=None) -> None:
    """A compiler: every build ``ok`` after ``build_ms`` (a binary of ``binary_kb``), a digest of its own."""
    from gemmtune.execution.child import incoming_jobs as jobs
    from gemmtune.execution.messages import Built

    settings = _settings()
    build_s = settings["build_ms"] / 1e3
    _ready(conn)
    for job in jobs(conn):
        if settings["busy_builds"]:   # a processor's work, as a real compiler's is
            end = time.perf_counter() + build_s
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(build_s)
        digest = hashlib.sha256(repr((job.config, job.precision, job.problem)).encode()).hexdigest()
        binary = bytes(settings["binary_kb"] * 1024) or None   # the parent relays it to the timing worker
        conn.send(Built("ok", binary, digest, build_s))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device-info", default=str(REPO / "docs/landscapes/nvidia-h200.json"),
                    help="the device, as `gemmtune devices --format json` printed it (default: the H200's)")
    ap.add_argument("-p", "--precision", default="z")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--device-ms", type=float, default=25.0, help="the stand-in device's time per trial (default 25)")
    ap.add_argument("--build-ms", type=float, default=400.0, help="a stand-in compiler's time per build (default 400)")
    ap.add_argument("--jobs", type=int, default=15, help="stand-in compilers (default 15)")
    ap.add_argument("--binary-kb", type=int, default=0,
                    help="size of the program binary each stand-in build returns (default 0: none, as on PoCL)")
    ap.add_argument("--busy-builds", action="store_true",
                    help="the stand-in compilers keep a processor busy while they build, as real ones do")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds of search (default 30)")
    ap.add_argument("--db", help="database URL (default: a new SQLite file in a temporary folder)")
    args = ap.parse_args(argv)
    for name in ("device_ms", "build_ms", "timeout"):
        if not getattr(args, name) > 0:
            print(f"Error: --{name.replace('_', '-')} must be positive, got {getattr(args, name):g}", file=sys.stderr)
            return 2
    if args.binary_kb < 0:
        print(f"Error: --binary-kb must be at least 0, got {args.binary_kb}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"Error: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    from gemmtune.devices import opencl as device
    from gemmtune.cli import cli
    from gemmtune.errors import GemmtuneError
    from gemmtune.execution import processes
    from gemmtune.devices.info import read_device_info

    try:
        dev = read_device_info(args.device_info)
    except (GemmtuneError, OSError, ValueError) as e:
        print(f"Error: cannot read --device-info {args.device_info}: {e}", file=sys.stderr)
        return 2
    os.environ[ENV] = json.dumps({"device_info": str(Path(args.device_info).resolve()),
                                  "device_ms": args.device_ms, "build_ms": args.build_ms,
                                  "busy_builds": args.busy_builds, "binary_kb": args.binary_kb})
    # The search opens its workers and checks its device through these names. The stand-ins go
    # by this module's name, not __main__'s, so that spawned workers find them however this
    # script was started (a profiler's __main__ is the profiler).
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import pipeline_bench

    processes.worker_main, processes.compiler_main = pipeline_bench.stand_in_worker, pipeline_bench.stand_in_compiler
    processes.host_cores = lambda: args.jobs   # the described host's: stand-in compilers keep no core busy
    device.resolve_device = lambda spec: dev
    with tempfile.TemporaryDirectory() as scratch:
        db = args.db or f"sqlite:///{Path(scratch) / 'pipeline.db'}"
        cli.main(["search", "--device", "0", "-p", args.precision, "--size", str(args.size), "--timeout",
                  str(args.timeout), "--jobs", str(args.jobs), "--db", db, "-q"], prog_name="gemmtune")   # exits


if __name__ == "__main__":
    sys.exit(main())
