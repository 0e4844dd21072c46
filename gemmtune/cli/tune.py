"""Commands that look at the device and its space, and tune: devices, space, verify, search."""

from __future__ import annotations

import json
import os
import sys

import click

from gemmtune import strategies
from gemmtune.cli.base import (
    DEFAULT_TIMEOUT,
    MAX_COUNT,
    BoundedFloat,
    BoundedInt,
    cli,
    db_option,
    device_option,
    emit,
    format_option,
    precision_option,
    seconds_type,
    shape_options,
    shapes_option,
    space_option,
    workload,
)
from gemmtune.space.text import parse_config
from gemmtune.errors import GemmtuneError
from gemmtune.inputs import SEED_MAX
from gemmtune.precision import get_precision

# ---------------------------------------------------------------- devices

@cli.command()
@format_option("table", "json")
def devices(fmt):
    """List every OpenCL device of every platform, under one flat index."""
    from gemmtune.devices.opencl import list_devices

    found = [d.to_json() for d in list_devices()]
    if fmt == "table":
        def cell(d, field, text):   # "*": not what the driver reported (a footnote says why)
            return f"*{text}" if field in d["fallbacks"] else text

        rows = [{"index": d["index"], "type": d["type"], "name": d["name"], "platform": d["platform"],
                 "CUs": cell(d, "compute_units", d["compute_units"]), "MHz": cell(d, "max_clock_mhz", d["max_clock_mhz"]),
                 "global GiB": cell(d, "global_mem_bytes", round(d["global_mem_bytes"] / 2**30, 1)),
                 "local KiB": cell(d, "local_mem_bytes", d["local_mem_bytes"] // 1024),
                 "max WG": cell(d, "max_work_group_size", d["max_work_group_size"]),
                 "fp64": cell(d, "double_precision", "yes" if d["double_precision"] else "no"),
                 # a CPU's vector registers as its compiler targets them (AVX2: 16 x 32 B)
                 "vectors": cell(d, "vector_registers", f"{d['vector_registers']} x {d['vector_bytes']} B"
                                 if d["vector_registers"] else "-")}
                for d in found]
        emit(rows, fmt)
        notes = [f"* device {d['index']}, {field}: {why}" for d in found for field, why in d["fallbacks"].items()]
        if notes:
            click.echo("\n" + "\n".join(notes))
        return
    emit(found, fmt)


# ---------------------------------------------------------------- space

LISTED = 100_000   # configurations `space` lists without --limit


@cli.command()
@device_option
@precision_option
@shape_options
@space_option
@format_option("table", "json", "csv")
@click.option("--count", is_flag=True, help="Print only the number of valid configurations.")
@click.option("--explain", is_flag=True, help="Show how many configurations each constraint removed.")
# --limit's bound: space.MAX_POINTS, more than any space has
@click.option("--limit", type=BoundedInt(0, 2**30), default=None, metavar="N", help="List the first N valid "
              f"configurations (0: all). Without it, more than {LISTED:,} are refused before anything is written.")
def space(device, precision, shape, space_file, fmt, count, explain, limit):
    """Enumerate the valid kernel configurations for a device, precision and shape."""
    from gemmtune.space import listing, valid
    from gemmtune import space as sp
    from gemmtune.devices.opencl import resolve_device

    dev = resolve_device(device)
    prec = get_precision(precision)
    the_space = sp.load_space(space_file, device=dev)
    if explain:
        counts = valid.explain(the_space, dev, prec)
        rows = [{"kernel": c.kernel, "constraint": c.constraint.number, "name": c.constraint.name,
                 "rule": c.constraint.text, "removed": c.removed, "broken": c.broken} for c in counts]
        valid = the_space.size - sum(c.removed for c in counts)
        if fmt == "json":
            click.echo(json.dumps({"total": the_space.size, "valid": valid, "constraints": rows}, indent=2))
            return
        emit(rows, fmt)
        if fmt == "table":
            click.echo(f"\n{the_space.size} configurations in {the_space.origin}, {valid} valid on "
                       f"device {dev.index} ({dev.name}) for precision {prec.code}. 'removed' counts "
                       f"each configuration under the first constraint it breaks.")
        return
    if count:
        click.echo(valid.count_valid(the_space, dev, prec))
        return
    out = listing.space_rows(the_space, dev, prec, fmt, LISTED if limit is None else limit)
    if limit is None and None in (out := list(out)):   # nothing is written before the listing is known to fit
        raise GemmtuneError(f"more than {LISTED:,} configurations are valid: --limit N lists the first N, "
                            "--limit 0 all of them, --count counts them")
    try:
        for text in out:
            click.echo(text or f"Listed the first {limit:,}; more are valid.", nl=not text, err=not text)
    except BrokenPipeError:   # the reader has all it wanted (`gemmtune space | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# ---------------------------------------------------------------- verify

@cli.command()
@device_option
@precision_option
@shape_options
@click.option("--config", "config_text", default=None, metavar="NAME=VALUE,...",
              help="Kernel parameters; the rest take their defaults. Default: the shipped default.")
@click.option("--alpha", type=float, default=1.0, show_default=True)
@click.option("--beta", type=float, default=0.0, show_default=True)
@click.option("--trans-a", type=click.Choice(["N", "T", "C"]), default="N", show_default=True,
              help="op(A): N none, T transpose, C conjugate transpose.")
@click.option("--trans-b", type=click.Choice(["N", "T", "C"]), default="N", show_default=True)
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=None,
              help="Seed of the random operands (0 to 2**32 - 1).")
@format_option("table", "json")
def verify(device, precision, shape, config_text, alpha, beta, trans_a, trans_b, seed, fmt):
    """Run one configuration on random data and check it against numpy in double precision."""
    from gemmtune.measure.verify import check_scalars

    config = parse_config(config_text) if config_text is not None else None
    # As verify_config does, before OpenCL starts: a scalar the precision cannot hold (1e300 in
    # single) would otherwise fail the check as if the kernel were wrong.
    check_scalars(get_precision(precision), alpha, beta)
    from gemmtune.call.compute import verify_config  # after the checks: OpenCL and the results store

    result = verify_config(device, get_precision(precision), *shape, config=config, alpha=alpha,
                           beta=beta, trans_a=trans_a, trans_b=trans_b, seed=seed)
    if fmt == "json":
        click.echo(json.dumps(result.to_json()))
    else:
        for key, value in result.to_json().items():
            click.echo(f"{key:20} {value}")
    return 0 if result.passed else 1


# ---------------------------------------------------------------- search

class _ProgressLine:
    """One line on stderr, redrawn in place on a terminal, appended per trial otherwise."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.tty = sys.stderr.isatty()

    def __call__(self, p) -> None:
        if self.quiet:
            return
        total = "?" if p.total is None else p.total
        best = "-" if p.best_gflops is None else f"{p.best_gflops:,.1f}"
        last = p.last.status if p.last_gflops is None else f"{p.last_gflops:,.1f} GFLOP/s"
        where = "" if p.device is None else f"device {p.device.index}: "
        trial = "again" if p.again else f"trial {p.done}" if p.total is None else f"trial {p.done}/{total}"
        left = "" if p.left is None else f", {p.left:,.0f} s left"
        line = (f"{trial}  best {best} GFLOP/s  failed {p.failures}  "
                f"{p.elapsed:,.0f} s{left}  | {where}{p.last_config} -> {last}")
        if self.tty:
            click.echo("\r\033[K" + line[: click.get_terminal_size()[0] - 1], nl=False, err=True)
        else:
            click.echo(line, err=True)

    def close(self) -> None:
        if self.tty and not self.quiet:
            click.echo("", err=True)


def summary_dict(s) -> dict:
    best = s.best
    return {
        "study": s.study, "db": s.db, "device": s.device.key,
        "devices": [d.index for d in s.devices], "precision": s.precision,
        "m": s.shape[0], "n": s.shape[1], "k": s.shape[2], "batch": s.batch,
        "trials": s.trials, "failures": dict(s.failures), "stopped_by": s.stopped_by,
        "elapsed_s": round(s.elapsed, 2), "valid_configurations": s.space_size,
        "device_busy_share": None if s.device_busy is None else round(s.device_busy, 3),
        "device_idle_share": None if s.device_idle is None else {k: round(v, 3) for k, v in s.device_idle.items()},
        "learned_from": s.learned_from,
        "best": None if best is None else {
            "kernel": best["kernel"], "params": json.loads(best["params"]), "gflops": best["gflops"],
            "time_ms": best["time_ms"], "ci_ms": [best["ci_low_ms"], best["ci_high_ms"]],
            "trial": int(best["trial"]), "found_at": best["created_at"]},
        "tie_with_runner_up": s.tie_with_runner_up,
        "baseline": None if s.baseline is None else {
            "params": json.loads(s.baseline["params"]), "status": s.baseline["status"],
            "gflops": s.baseline["gflops"]},
        "speedup_over_baseline": s.speedup,
        "finalists_timed_again": s.finalists,
    }


def print_summary(d: dict) -> None:
    click.echo(f"study      {d['study']}  ({d['db']})")
    click.echo(f"device     {d['device']}" + (f" (devices {', '.join(map(str, d['devices']))})"
                                                 if len(d["devices"]) > 1 else ""))
    batch = d.get("batch", 1)   # a summary written before batches has none
    batch = f", a batch of {batch:,} in one launch (GFLOP/s of the whole batch)" if batch > 1 else ""
    click.echo(f"problem    {d['precision']}gemm {d['m']}x{d['n']}x{d['k']}{batch}")
    failed = ", ".join(f"{n} {r}" for r, n in sorted(d["failures"].items())) or "none"
    click.echo(f"this run   {d['trials']} trials in {d['elapsed_s']:.1f} s (stopped: {d['stopped_by']}), "
               f"failed: {failed}; {d['valid_configurations']} valid configurations")
    if d["device_busy_share"] is not None:
        idle = d["device_idle_share"] or {}
        waits = f"; nothing to measure, waiting for a build {100 * idle['build']:.0f}%, for a proposal " \
                f"{100 * idle['proposal']:.0f}%, for this process {100 * idle['process']:.0f}%" if idle else ""
        click.echo(f"pipeline   timing worker{'s' if len(d['devices']) > 1 else ''} busy "
                   f"{100 * d['device_busy_share']:.0f}% of the wall time{waits}")
    if (src := d["learned_from"]) is not None:
        shipped = "" if not src["shipped_rows"] else (
            f" and {src['shipped_rows']:,} shipped rows of {src['shipped_for']}"
            + (", a device of its kind" if src["borrowed"] else ""))
        click.echo(f"model      learned from {src['database_rows']:,} rows of the device's other studies{shipped}"
                   if src["enough"] else f"model      none: {src['database_rows']} rows of the device's other studies, "
                                         "fewer than a model needs")
    if d.get("finalists_timed_again"):
        click.echo(f"finalists  {d['finalists_timed_again']} rows timed again with no build running (the baseline "
                   "and the fastest): the figures below are theirs")
    b = d["best"]
    if b is None:
        click.echo("best       no configuration has run correctly yet")
        return
    params = ",".join(f"{k}={v}" for k, v in b["params"].items())
    lo, hi = b["ci_ms"]
    ci = "" if lo is None else f", 95% CI of the time {lo:.4g}-{hi:.4g} ms"
    click.echo(f"best       {b['gflops']:,.1f} GFLOP/s  {b['kernel']} {params}")
    click.echo(f"           {b['time_ms']:.4g} ms median{ci}; trial {b['trial']}, found {b['found_at']}")
    if d["tie_with_runner_up"] is not None:
        click.echo("           statistically tied with the runner-up" if d["tie_with_runner_up"]
                   else "           significantly faster than the runner-up (one-tailed, 95%)")
    base = d["baseline"]
    if base is not None and d["speedup_over_baseline"]:
        click.echo(f"baseline   {base['gflops']:,.1f} GFLOP/s (built-in default): speedup "
                   f"{d['speedup_over_baseline']:.2f}x")
    elif base is not None:
        click.echo(f"baseline   built-in default failed: {base['status']}")


@cli.command()
@click.option("--device", "device", default=None, metavar="N|P:D|LIST|all",
              help="Device(s): a flat index from `gemmtune devices` or platform:device, a comma-separated "
                   "list of them, or all. Devices of one model and driver search one study together; "
                   "other models get studies of their own. Default: $GEMMTUNE_DEVICE, else 0.")
@precision_option
@shape_options
@click.option("--trials", type=BoundedInt(1, MAX_COUNT), default=None,
              help="New trials to measure (default: as many as --timeout allows; with --shapes and no "
                   "--timeout, 30 per problem; with --strategy grid, the whole space).")
@click.option("--timeout", type=seconds_type(), default=None,
              help=f"Stop starting trials after this many seconds (default {DEFAULT_TIMEOUT:g} for one problem "
                   "when --trials is not given either, and not with --strategy grid; trials in flight then "
                   "finish).")
@click.option("--trial-timeout", type=seconds_type(), default=120.0,
              show_default=True, help="Seconds one trial (build, verify, time) may take.")
@click.option("--strategy", "--sampler", "strategy", type=click.Choice(strategies.names("search")),
              default=strategies.DEFAULT, show_default=True,
              help="What chooses the trials after the seeds: learned (a cost model fitted to the device's results "
                   "at other shapes, and TPE), tpe, random, or grid (every valid configuration). --sampler is an "
                   "alias.")
@click.option("--seed", type=BoundedInt(0, SEED_MAX), default=None, help="Seed of the sampler (0 to 2**32 - 1).")
@db_option
@click.option("--study", default=None, help="Study name (default: from device, precision and shape).")
@space_option
@click.option("--time-cap", type=seconds_type(), default=2.0, show_default=True,
              help="Seconds of timing per configuration once it has 6 samples.")
@click.option("--jobs", type=int, default=None,
              help="Compiler processes building ahead of the device (default: one per spare core; "
                   "0: build on the timing worker, one candidate at a time); more than the cores this "
                   "process may run on is refused.")
@click.option("--early-stop", type=BoundedFloat(0, 1, max_open=True), default=0.5, show_default=True,
              help="Stop timing a candidate once its speed is surely below this fraction of the best "
                   "(status slow); 0 disables.")
@click.option("--no-seed", is_flag=True,
              help="Do not measure the performance model's 10 best-predicted configurations first.")
@click.option("--heartbeat-grace", "grace", type=seconds_type(1), default=60.0, show_default=True,
              help="Seconds a trial of another search process may go without a heartbeat before it is "
                   "failed and recorded as lost (its process or machine died).")
@shapes_option
@click.option("--batch", type=BoundedInt(1, 2**31 - 1), default=None, metavar="N",
              help="Tune N problems of the shape at once, one launch (the objective: the whole batch's GFLOP/s; "
                   "a shapes file gives each problem's batch in its batch column).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@format_option("table", "json")
def search(device, precision, shape, trials, timeout, trial_timeout, strategy, seed, db, study,
           space_file, time_cap, jobs, early_stop, no_seed, grace, shapes_spec, batch, quiet, fmt):
    """Search the valid space with Optuna; build, verify and time each trial; record every result."""
    shapes = None
    if shapes_spec is not None:
        given = [f"--{p}" for p in ("m", "n", "k", "size")
                 if click.get_current_context().get_parameter_source(p) == click.core.ParameterSource.COMMANDLINE]
        if given or study or batch is not None:
            left_out = given + (["--study"] if study else []) + (["--batch"] if batch is not None else [])
            raise GemmtuneError(f"--shapes names the problems (a batch column gives each one's batch), and each gets "
                                f"a study of its own: leave {', '.join(left_out)} out")
        shapes = workload(precision, None, shapes_spec)
    from gemmtune.search import SearchRequest, run_search  # after the checks: a second of imports
    from gemmtune.measure.timing import TimingPolicy

    if timeout is None and trials is None and strategy != "grid" and shapes is None:
        timeout = DEFAULT_TIMEOUT   # the Quick start: ends by itself, however many trials fit
    # Under a time budget a search (each problem of a workload) runs until its share is spent.
    unbounded = strategy == "grid" or timeout is not None
    req = SearchRequest(device=device, precision=precision, m=shape[0], n=shape[1], k=shape[2], batch=batch or 1,
                        trials=trials if trials is not None or unbounded else 30,
                        timeout=timeout, trial_timeout=trial_timeout, sampler=strategy, seed=seed,
                        db=db, study=study, space_file=space_file, policy=TimingPolicy(max_seconds=time_cap),
                        jobs=jobs, early_stop=early_stop or None, seeds=0 if no_seed else 10, grace=grace)
    line = _ProgressLine(quiet)
    if shapes is None:
        summaries, left = run_search(req, line), []
    else:
        from gemmtune.search.workload import run_workload

        def step(s):
            if not quiet:
                line.close()
                budget = "" if s.seconds is None else f", {s.seconds:,.0f} s of the budget"
                again = " again (second pass, where the first paid)" if s.second else ""
                click.echo(f"[{s.index}/{s.total}] {s.shape}: searching{again}{budget}, starting from "
                           f"{s.nearby} configuration(s) of nearby shapes", err=True)
        summaries, left = run_workload(req, shapes, line, step)
    line.close()
    for note in dict.fromkeys(s.skipped for s in summaries if s.skipped):   # one store: the same rows for all
        click.echo(note, err=True)
    if left:
        click.echo(f"The budget ran out before {len(left)} problem(s): {', '.join(map(str, left))}; "
                   "run the command again to go on.", err=True)
    found = [summary_dict(s) for s in summaries]
    if fmt == "json":  # one study: its object; several (devices of different models): a list
        click.echo(json.dumps(found[0] if len(found) == 1 else found, indent=2, default=str))
    else:
        for i, d in enumerate(found):
            if i:
                click.echo("")
            print_summary(d)
    return 130 if any(s.stopped_by == "interrupted" for s in summaries) else 0


