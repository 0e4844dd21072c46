"""Commands that measure against baselines and peaks: bench, peak."""

from __future__ import annotations

import dataclasses
import json

import click

from gemmtune.cli.base import (BoundedInt, cli, db_option, device_option, emit, format_option, precision_option,
                               seconds_type, shapes_option, workload)
from gemmtune.errors import GemmtuneError


# ---------------------------------------------------------------- bench

@cli.command()
@device_option
@precision_option
@click.option("--sizes", default=None, metavar="S1,S2,...",
              help="Cube sizes M = N = K to measure (default 1024,2048,4096).")
@shapes_option
@click.option("--batch", type=BoundedInt(1, 2**31 - 1), default=None, metavar="N",
              help="Problems of each --sizes cube at once, as one batched call (a shapes file's batch column).")
@click.option("--baseline", "baselines", default="numpy", show_default=True, metavar="B1,B2,...",
              help="numpy, torch, cupy, clblast, 3m, cublas-3m and/or config:NAME=VALUE,... (';' separates several "
                   "configs; 3m and cublas-3m: the 3M complex products, c and z).")
@click.option("--clblast", "clblast", default=None, metavar="PATH",
              help="CLBlast's library for --baseline clblast (default: $GEMMTUNE_CLBLAST, else found by name).")
@db_option
@click.option("--time-cap", type=seconds_type(), default=2.0, show_default=True,
              help="Seconds of timing per contender and problem once it has 6 samples.")
@format_option("table", "json")
def bench(device, precision, sizes, shapes_spec, batch, baselines, clblast, db, time_cap, fmt):
    """Measure the tuned configuration against baselines as a caller pays: wall clock per call."""
    from gemmtune.bench import geometric_means, parse_baselines, run_bench
    from gemmtune.measure.timing import TimingPolicy

    if batch is not None and shapes_spec is not None:
        raise GemmtuneError("--batch goes with --sizes; a shapes file gives each problem's batch in its batch column")
    shapes = workload(precision, sizes, shapes_spec)
    if batch is not None:
        shapes = [dataclasses.replace(s, batch=batch) for s in shapes]
    items = parse_baselines(baselines)
    rows = run_bench(device, shapes, items, db, TimingPolicy(max_seconds=time_cap),
                     progress=lambda i, total, s: click.echo(f"[{i}/{total}] {s} done", err=True), clblast=clblast)
    means = geometric_means(rows)
    if fmt == "json":
        click.echo(json.dumps({"rows": rows, "geometric_mean_ratio": means}, indent=2))
        return

    def ms(x):
        return "-" if x is None else f"{x:.4g}"

    table = [{"problem": r["shape"], "contender": r["contender"], "source": r["source"],
              "GFLOP/s": "-" if r["gflops"] is None else f"{r['gflops']:,.1f}",
              "wall ms": ms(r["time_ms"]), "device ms": ms(r["device_ms"]), "host ms": ms(r["host_ms"]),
              "this/gemmtune": "-" if r["gemmtune_ratio"] is None else f"{r['gemmtune_ratio']:.3f}",
              "note": r["skipped"] or r["config"]} for r in rows]
    emit(table, "table")
    for name, mean in means.items():
        click.echo(f"geometric mean of {name}'s time over gemmtune's, {len(shapes)} problem(s): {mean:.3f}")


# ---------------------------------------------------------------- peak

@cli.command()
@device_option
@click.option("--precision", "-p", "precisions", default=None, metavar="P1,P2,...",
              help="Precisions to measure: s, d, c, z, comma-separated. Default: every one the device supports.")
@db_option
@click.option("--iterations", type=BoundedInt(1, 2**24), default=None,   # 4x it is the CPU kernel's int
              help="Real multiply-adds per chain and work-item (default 16384; complex: a quarter as many).")
@click.option("--copy-mib", type=BoundedInt(1, 2**20), default=None,
              help="MiB copied for the bandwidth (default 256 on a GPU, 64 otherwise).")
@click.option("--time-cap", type=seconds_type(), default=1.0, show_default=True,
              help="Device seconds of timing per quantity once it has 6 samples.")
@format_option("table", "json")
def peak(device, precisions, db, iterations, copy_mib, time_cap, fmt):
    """Measure the device's multiply-add throughput per precision and its memory bandwidth."""
    from gemmtune.files.output import terminal_text
    from gemmtune.bench.peak import PeakSizes, run_peak
    from gemmtune.measure.timing import TimingPolicy

    given = {"iterations": iterations} if iterations else {}
    run = run_peak(device, precisions, db, PeakSizes(**given, copy_mib=copy_mib,
                                                     policy=TimingPolicy(max_seconds=time_cap)))
    nominal = run.nominal()
    rows = [{**p.to_json(), "nominal": nominal.get(p.quantity)} for p in run.peaks]
    if fmt == "json":
        click.echo(json.dumps({"device": run.device.key, "device_name": run.device.name, "db": run.db,
                               "created_at": run.created_at, "peaks": rows}, indent=2))
        return
    click.echo(terminal_text(f"device  {run.device.key}  (stored in {run.db})"))  # the driver's names
    emit([{"precision": r["precision"], "value": f"{r['value']:,.1f}", "unit": r["unit"],
           "nominal": f"{r['nominal']:,.0f}", "median_ms": f"{r['median_ms']:.4g}", "repeats": r["repeats"]}
          for r in rows], "table")


