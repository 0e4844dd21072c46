"""The ``gemmtune`` command line: each command is a few lines over the library."""

from __future__ import annotations

import functools
import json
import os
import sys

import click

from gemmtune import strategies
from gemmtune.config_text import parse_config
from gemmtune.errors import GemmtuneError
from gemmtune.precision import PRECISIONS, get_precision

# The time budget of a search given neither --trials nor --timeout: on a 2-core CPU, about 60
# trials of the CPU space, and the whole command within 5 minutes.
DEFAULT_TIMEOUT = 240.0


class Cli(click.Group):
    """Every error ends as one line on stderr: exit 2 for bad input, 130 for Ctrl-C."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except GemmtuneError as e:
            click.echo(f"Error: {_scrubbed(str(e), args)}", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"Error: {_scrubbed(e.format_message(), args)}", err=True)
            sys.exit(e.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("Interrupted.", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def _scrubbed(message: str, args) -> str:
    """An error message without the password of any database URL given: the messages mask it
    already, and this keeps one that slipped through (a driver's own text) from showing it."""
    import os

    from gemmtune.urls import scrub

    args = list(sys.argv[1:] if args is None else args)
    urls = [os.environ.get("GEMMTUNE_DB")]
    urls += [b for a, b in zip(args, args[1:]) if a == "--db"]
    urls += [a[len("--db="):] for a in args if isinstance(a, str) and a.startswith("--db=")]
    for url in filter(None, urls):
        message = scrub(message, url)
    return " ".join(message.splitlines())  # one line, whatever a message held


@click.group(cls=Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gemmtune")
def cli():
    """Tune OpenCL GEMM kernels for a device, and reuse what was found."""


def main():
    cli(prog_name="gemmtune")


# ---------------------------------------------------------------- shared options

def device_option(f):
    return click.option("--device", "device", default=None, metavar="N|P:D",
                        help="Device: flat index from `gemmtune devices`, or platform:device. "
                             "Default: $GEMMTUNE_DEVICE, else 0.")(f)


def precision_option(f):
    return click.option("--precision", "-p", default="s", show_default=True,
                        type=click.Choice(list(PRECISIONS), case_sensitive=False),
                        help="s, d (real float/double), c, z (complex float/double).")(f)


def shape_options(f):
    """--m/--n/--k or --size; passes ``shape=(m, n, k)`` to the command."""
    dims = click.IntRange(min=1)

    @click.option("--size", type=dims, default=None, help="M = N = K = SIZE (default 1024).")
    @click.option("--k", "k", type=dims, default=None, help="Inner dimension K.")
    @click.option("--n", "n", type=dims, default=None, help="Columns of C.")
    @click.option("--m", "m", type=dims, default=None, help="Rows of C.")
    @functools.wraps(f)
    def wrapper(*args, m, n, k, size, **kwargs):
        default = size or 1024
        return f(*args, shape=(m or default, n or default, k or default), **kwargs)

    return wrapper


def format_option(*choices):
    return click.option("--format", "fmt", type=click.Choice(choices), default=choices[0],
                        show_default=True, help="Output format.")


def space_option(f):
    return click.option("--space", "space_file", type=click.Path(dir_okay=False), default=None,
                        help="Search-space TOML file (default: the shipped space of the device's type: "
                        "configs/space-cpu.toml on a CPU, configs/space.toml elsewhere).")(f)


def emit(rows: list[dict], fmt: str) -> None:
    """Print rows as a table, CSV or JSON on stdout."""
    import pandas as pd  # here, not at the top: it alone would double the start-up of every command

    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo("(none)")
    elif fmt == "csv":
        click.echo(pd.DataFrame(rows).to_csv(index=False), nl=False)
    else:
        click.echo(pd.DataFrame(rows).to_string(index=False))


# ---------------------------------------------------------------- devices

@cli.command()
@format_option("table", "json")
def devices(fmt):
    """List every OpenCL device of every platform, under one flat index."""
    from gemmtune.device import list_devices

    found = [d.to_json() for d in list_devices()]
    if fmt == "table":
        found = [{"index": d["index"], "type": d["type"], "name": d["name"], "platform": d["platform"],
                  "CUs": d["compute_units"], "MHz": d["max_clock_mhz"],
                  "global GiB": round(d["global_mem_bytes"] / 2**30, 1),
                  "local KiB": d["local_mem_bytes"] // 1024, "max WG": d["max_work_group_size"],
                  "fp64": "yes" if d["double_precision"] else "no"} for d in found]
    emit(found, fmt)


# ---------------------------------------------------------------- space

@cli.command()
@device_option
@precision_option
@shape_options
@space_option
@format_option("table", "json", "csv")
@click.option("--count", is_flag=True, help="Print only the number of valid configurations.")
@click.option("--explain", is_flag=True, help="Show how many configurations each constraint removed.")
def space(device, precision, shape, space_file, fmt, count, explain):
    """Enumerate the valid kernel configurations for a device, precision and shape."""
    from gemmtune import space as sp
    from gemmtune import valid
    from gemmtune.device import resolve_device

    dev = resolve_device(device)
    prec = get_precision(precision)
    the_space = sp.load_space(space_file, device=dev)
    if explain:
        counts = valid.explain(the_space, dev, prec)
        rows = [{"kernel": c.kernel, "constraint": c.constraint.number, "name": c.constraint.name,
                 "rule": c.constraint.text,
                 "removed": c.removed, "broken": c.broken} for c in counts]
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
    try:
        for text in space_rows(the_space, dev, prec, fmt):
            click.echo(text, nl=False)
    except BrokenPipeError:
        # the reader has all it wanted (`gemmtune space | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def space_rows(the_space, dev, prec, fmt: str):
    """The valid configurations as ``emit`` would print their ``describe`` rows, as text chunk
    by chunk: the first rows go out long before the last are found, and memory holds one chunk.

    The table's column widths come from the values the space allows and the device's limits,
    known before any row, rather than from the rows printed. With several kernel families the
    columns are those of all of them; a family's row leaves the others' blank (CSV) or "-".
    """
    import numpy as np

    from gemmtune.valid import iter_valid_columns

    families = the_space.families
    columns = list(dict.fromkeys(c for fs in families for c in [*fs.values, "kernel", "local_mem_bytes",
                                                                     "work_group_size"]))
    width = {c: len(c) for c in columns}
    for fs in families:
        width["kernel"] = max(width["kernel"], len(fs.family.name))
        for name, values in fs.values.items():
            width[name] = max(width[name], *(len(str(v)) for v in values))
    # Valid configurations fit the device's local memory and work-group size (constraints of every family).
    width["local_mem_bytes"] = max(width["local_mem_bytes"], len(str(dev.local_mem_bytes)))
    width["work_group_size"] = max(width["work_group_size"], len(str(dev.max_work_group_size)))
    for c in columns:
        if c != "kernel":
            width[c] += 1   # pandas keeps a place for the sign in number columns; so does this

    def template(fs) -> tuple[str, list[str]]:
        """A %-format of one row of ``fs``, and the names of the numbers it takes, in order."""
        kernel = fs.family.name.replace("%", "%%")
        if fmt == "json":   # describe()'s order
            fields = [f"    {json.dumps(c)}: %d" for c in fs.values]
            fields += [f"    \"kernel\": {json.dumps(kernel)}", '    "local_mem_bytes": %d', '    "work_group_size": %d']
            return "  {\n" + ",\n".join(fields) + "\n  }", [*fs.values, "local_mem_bytes", "work_group_size"]
        mine = {*fs.values, "local_mem_bytes", "work_group_size"}
        if fmt == "csv":
            form = ",".join("%d" if c in mine else kernel if c == "kernel" else "" for c in columns)
        else:
            form = " ".join(f"%{width[c]}d" if c in mine else (kernel if c == "kernel" else "-").rjust(width[c])
                            for c in columns)
        return form, [c for c in columns if c in mine]

    def numbers(fs, cols, names: list[str]) -> list[list[int]]:
        p = {k: cols[k] for k in fs.values}
        size = len(next(iter(p.values())))
        derived = {"local_mem_bytes": np.broadcast_to(fs.family.local_mem_bytes(p, prec), size),
                   "work_group_size": np.broadcast_to(fs.family.work_group_size(p), size)}
        return np.column_stack([p[c] if c in p else derived[c] for c in names]).tolist()

    templates = {fs.family.name: template(fs) for fs in families}
    rows = 0
    for fs, cols in iter_valid_columns(the_space, dev, prec):
        form, names = templates[fs.family.name]
        lines = [form % tuple(r) for r in numbers(fs, cols, names)]
        if fmt == "json":
            yield ("[\n" if not rows else ",\n") + ",\n".join(lines)
        else:
            if not rows:
                yield (",".join(columns) if fmt == "csv" else " ".join(c.rjust(width[c]) for c in columns)) + "\n"
            yield "\n".join(lines) + "\n"
        rows += len(lines)
    if fmt == "json":
        yield "\n]\n" if rows else "[]\n"
    elif not rows:
        yield "(none)\n"


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
    config = parse_config(config_text) if config_text else None
    from gemmtune.compute import verify_config  # after the checks: OpenCL and the results store

    result = verify_config(device, get_precision(precision), *shape, config=config, alpha=alpha,
                           beta=beta, trans_a=trans_a, trans_b=trans_b, seed=seed)
    if fmt == "json":
        click.echo(json.dumps(result.to_json()))
    else:
        for key, value in result.to_json().items():
            click.echo(f"{key:20} {value}")
    return 0 if result.passed else 1


# ---------------------------------------------------------------- search

def db_option(f):
    return click.option("--db", default=None, metavar="URL",
                        help="SQLAlchemy URL of the results database. Default: $GEMMTUNE_DB, else "
                             "sqlite:///results/gemmtune.db (under the current directory).")(f)


def shapes_option(f):
    return click.option("--shapes", "shapes_spec", default=None, metavar="FILE|m,n,k;...",
                        help="The problems: a CSV or TOML file of m, n, k and optional precision, trans_a, "
                             "trans_b (see shapes/suite.csv), or inline \"m,n,k;m,n,k,d,T,N\".")(f)


def parse_sizes(sizes: str) -> list[int]:
    try:
        found = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise GemmtuneError(f"bad --sizes {sizes!r}: expected integers like 1024,2048") from None
    if not found or min(found) < 1:
        raise GemmtuneError(f"bad --sizes {sizes!r}: sizes must be at least 1")
    return found


def workload(precision: str, sizes: str | None, shapes_spec: str | None):
    """The problems of --shapes, or the cubes of --sizes, each with its precision."""
    from gemmtune.shapes import Shape, load_shapes

    if sizes and shapes_spec:
        raise GemmtuneError("give --sizes or --shapes, not both")
    found = load_shapes(shapes_spec) if shapes_spec else [Shape(s, s, s) for s in parse_sizes(sizes or "1024,2048,4096")]
    return [s.with_precision(precision.lower()) for s in found]


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
        trial = f"trial {p.done}" if p.total is None else f"trial {p.done}/{total}"
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
        "m": s.shape[0], "n": s.shape[1], "k": s.shape[2],
        "trials": s.trials, "failures": dict(s.failures), "stopped_by": s.stopped_by,
        "elapsed_s": round(s.elapsed, 2), "valid_configurations": s.space_size,
        "device_busy_share": None if s.device_busy is None else round(s.device_busy, 3),
        "best": None if best is None else {
            "kernel": best["kernel"], "params": json.loads(best["params"]), "gflops": best["gflops"],
            "time_ms": best["time_ms"], "ci_ms": [best["ci_low_ms"], best["ci_high_ms"]],
            "trial": int(best["trial"]), "found_at": best["created_at"]},
        "tie_with_runner_up": s.tie_with_runner_up,
        "baseline": None if s.baseline is None else {
            "params": json.loads(s.baseline["params"]), "status": s.baseline["status"],
            "gflops": s.baseline["gflops"]},
        "speedup_over_baseline": s.speedup,
    }


def print_summary(d: dict) -> None:
    click.echo(f"study      {d['study']}  ({d['db']})")
    click.echo(f"device     {d['device']}" + (f" (devices {', '.join(map(str, d['devices']))})"
                                                 if len(d["devices"]) > 1 else ""))
    click.echo(f"problem    {d['precision']}gemm {d['m']}x{d['n']}x{d['k']}")
    failed = ", ".join(f"{n} {r}" for r, n in sorted(d["failures"].items())) or "none"
    click.echo(f"this run   {d['trials']} trials in {d['elapsed_s']:.1f} s (stopped: {d['stopped_by']}), "
               f"failed: {failed}; {d['valid_configurations']} valid configurations")
    if d["device_busy_share"] is not None:
        click.echo(f"pipeline   timing worker{'s' if len(d['devices']) > 1 else ''} busy "
                   f"{100 * d['device_busy_share']:.0f}% of the wall time")
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
@click.option("--trials", type=int, default=None,
              help="New trials to measure (default: as many as --timeout allows; with --shapes and no "
                   "--timeout, 30 per problem; with --sampler grid, the whole space).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"Stop starting trials after this many seconds (default {DEFAULT_TIMEOUT:g} for one problem "
                   "when --trials is not given either, and not with --sampler grid; trials in flight then "
                   "finish).")
@click.option("--trial-timeout", type=click.FloatRange(min=0, min_open=True), default=120.0,
              show_default=True, help="Seconds one trial (build, verify, time) may take.")
@click.option("--sampler", type=click.Choice(strategies.names("search")), default="tpe", show_default=True)
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=None, help="Seed of the sampler (0 to 2**32 - 1).")
@db_option
@click.option("--study", default=None, help="Study name (default: from device, precision and shape).")
@space_option
@click.option("--time-cap", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True,
              help="Device seconds of timing per configuration, at most.")
@click.option("--jobs", type=click.IntRange(min=0), default=None,
              help="Compiler processes building ahead of the device (default: one per spare core; "
                   "0: build on the timing worker, one candidate at a time).")
@click.option("--early-stop", type=click.FloatRange(min=0, max=1, max_open=True), default=0.5, show_default=True,
              help="Stop timing a candidate once its speed is surely below this fraction of the best "
                   "(status slow); 0 disables.")
@click.option("--no-seed", is_flag=True,
              help="Do not measure the performance model's 10 best-predicted configurations first.")
@click.option("--heartbeat-grace", "grace", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a trial of another search process may go without a heartbeat before it is "
                   "failed and recorded as lost (its process or machine died).")
@shapes_option
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@format_option("table", "json")
def search(device, precision, shape, trials, timeout, trial_timeout, sampler, seed, db, study,
           space_file, time_cap, jobs, early_stop, no_seed, grace, shapes_spec, quiet, fmt):
    """Search the valid space with Optuna; build, verify and time each trial; record every result."""
    if trials is not None and trials < 1:
        raise GemmtuneError(f"--trials must be at least 1, got {trials}")
    shapes = None
    if shapes_spec is not None:
        given = [f"--{p}" for p in ("m", "n", "k", "size")
                 if click.get_current_context().get_parameter_source(p) == click.core.ParameterSource.COMMANDLINE]
        if given or study:
            raise GemmtuneError(f"--shapes names the problems, and each gets a study of its own: leave "
                                f"{', '.join(given + (['--study'] if study else []))} out")
        shapes = workload(precision, None, shapes_spec)
    from gemmtune.search import SearchRequest, run_search  # after the checks: a second of imports
    from gemmtune.timing import TimingPolicy

    if timeout is None and trials is None and sampler != "grid" and shapes is None:
        timeout = DEFAULT_TIMEOUT   # the Quick start: ends by itself, however many trials fit
    # Under a time budget a search (each problem of a workload) runs until its share is spent.
    unbounded = sampler == "grid" or timeout is not None
    req = SearchRequest(device=device, precision=precision, m=shape[0], n=shape[1], k=shape[2],
                        trials=trials if trials is not None or unbounded else 30,
                        timeout=timeout, trial_timeout=trial_timeout, sampler=sampler, seed=seed,
                        db=db, study=study, space_file=space_file, policy=TimingPolicy(max_seconds=time_cap),
                        jobs=jobs, early_stop=early_stop or None, seeds=0 if no_seed else 10, grace=grace)
    line = _ProgressLine(quiet)
    if shapes is None:
        summaries, left = run_search(req, line), []
    else:
        from gemmtune.workload import run_workload

        def step(s):
            if not quiet:
                line.close()
                budget = "" if s.seconds is None else f", {s.seconds:,.0f} s of the budget"
                again = " again (second pass, where the first paid)" if s.second else ""
                click.echo(f"[{s.index}/{s.total}] {s.shape}: searching{again}{budget}, starting from "
                           f"{s.nearby} configuration(s) of nearby shapes", err=True)
        summaries, left = run_workload(req, shapes, line, step)
    line.close()
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


# ---------------------------------------------------------------- report, export

def result_filters(f):
    """Optional filters on the results table; passes ``filters`` (a gemmtune.report.Filters).

    Not device_option/precision_option/shape_options: those default to device 0, precision s
    and 1024³, while these must default to everything stored.
    """
    dims = click.IntRange(min=1)

    @click.option("--device", default=None, metavar="N|P:D|NAME",
                  help="Only this device: an index or P:D of this machine, or any part of a device "
                       "name (case-insensitive; results from other machines too). Default: all.")
    @click.option("--precision", "-p", default=None, type=click.Choice(list(PRECISIONS), case_sensitive=False),
                  help="Only this precision. Default: all.")
    @click.option("--m", "m", type=dims, default=None, help="Only M = this.")
    @click.option("--n", "n", type=dims, default=None, help="Only N = this.")
    @click.option("--k", "k", type=dims, default=None, help="Only K = this.")
    @click.option("--size", type=dims, default=None, help="Only M = N = K = SIZE (--m/--n/--k override).")
    @click.option("--study", default=None, help="Only this study.")
    @functools.wraps(f)
    def wrapper(*args, device, precision, m, n, k, size, study, **kwargs):
        from gemmtune.report import Filters

        return f(*args, filters=Filters(device, precision, m or size, n or size, k or size, study), **kwargs)

    return wrapper


@cli.command()
@result_filters
@db_option
@format_option("table", "csv", "json", "markdown")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Show the TOP best configurations of each shape instead of the summary.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
              help="Also plot best-so-far GFLOP/s per search and best GFLOP/s against size "
                   "(needs matplotlib: pip install 'gemmtune[plot]').")
@click.option("--importance", is_flag=True, help="Add Optuna's parameter importances of each study shown.")
@click.option("--model", "with_model", is_flag=True,
              help="Add the performance model's predicted GFLOP/s of each configuration shown and its rank "
                   "correlation (Spearman) with the measured times of each shape.")
def report(filters, db, fmt, top, plot_file, importance, with_model):
    """Show the best configurations found, per device, precision and shape."""
    from gemmtune import report as rp

    if plot_file:
        from gemmtune.report_plot import require_matplotlib

        require_matplotlib()
    found = rp.load(db, filters)
    if found.skipped_note():
        click.echo(found.skipped_note(), err=True)
    if found.rows.empty:
        click.echo(found.nothing_message())
        return 0
    frame = rp.top(found.rows, top) if top else rp.summary(found.rows, found.peaks)
    if with_model:
        frame, notes = rp.add_model(frame, found)
        for note in notes:
            click.echo(note, err=True)
    if importance:
        frame, notes = rp.add_importance(frame, found.url)
        for note in notes:
            click.echo(note, err=True)
    click.echo(rp.render(frame, fmt), nl=False)
    if plot_file:
        from gemmtune.report_plot import plot

        plot(found.rows, plot_file)
        click.echo(f"Plot written to {plot_file}.", err=True)
    return 0


@cli.command()
@result_filters
@db_option
@format_option("json", "header")
@click.option("-o", "--output", default="-", show_default=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="File to write; - for stdout.")
def export(filters, db, fmt, output):
    """Write the best configuration per device, precision and shape as JSON or a C header."""
    from gemmtune import export as ex
    from gemmtune.report import load

    found = load(db, filters)
    if found.skipped_note():
        click.echo(found.skipped_note(), err=True)
    entries = ex.best_entries(found.rows)
    text = ex.to_json(entries, found.shown) if fmt == "json" else ex.to_header(entries, found.shown)
    if not entries:
        click.echo(found.nothing_message() + " Exported "
                   + ("no entries." if fmt == "json" else "the shipped defaults only."), err=True)
    if output == "-":
        click.echo(text, nl=False)
    else:
        ex.write(text, output)
    return 0


# ---------------------------------------------------------------- bench

@cli.command()
@device_option
@precision_option
@click.option("--sizes", default=None, metavar="S1,S2,...",
              help="Cube sizes M = N = K to measure (default 1024,2048,4096).")
@shapes_option
@click.option("--baseline", "baselines", default="numpy", show_default=True, metavar="B1,B2,...",
              help="numpy, torch, cupy, and/or config:NAME=VALUE,... (';' separates several configs).")
@db_option
@click.option("--time-cap", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True,
              help="Seconds of timing per contender and problem, at most.")
@format_option("table", "json")
def bench(device, precision, sizes, shapes_spec, baselines, db, time_cap, fmt):
    """Measure the tuned configuration against baselines as a caller pays: wall clock per call."""
    from gemmtune.bench import geometric_means, parse_baselines, run_bench
    from gemmtune.timing import TimingPolicy

    shapes = workload(precision, sizes, shapes_spec)
    items = parse_baselines(baselines)
    rows = run_bench(device, shapes, items, db, TimingPolicy(max_seconds=time_cap),
                     progress=lambda i, total, s: click.echo(f"[{i}/{total}] {s} done", err=True))
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
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Real multiply-adds per chain and work-item (default 16384; complex: a quarter as many).")
@click.option("--copy-mib", type=click.IntRange(min=1), default=None,
              help="MiB copied for the bandwidth (default 256 on a GPU, 64 otherwise).")
@click.option("--time-cap", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Device seconds of timing per quantity, at most.")
@format_option("table", "json")
def peak(device, precisions, db, iterations, copy_mib, time_cap, fmt):
    """Measure the device's multiply-add throughput per precision and its memory bandwidth."""
    from gemmtune.peak import PeakSizes, run_peak
    from gemmtune.timing import TimingPolicy

    given = {"iterations": iterations} if iterations else {}
    run = run_peak(device, precisions, db, PeakSizes(**given, copy_mib=copy_mib,
                                                     policy=TimingPolicy(max_seconds=time_cap)))
    nominal = run.nominal()
    rows = [{**p.to_json(), "nominal": nominal.get(p.quantity)} for p in run.peaks]
    if fmt == "json":
        click.echo(json.dumps({"device": run.device.key, "device_name": run.device.name, "db": run.db,
                               "created_at": run.created_at, "peaks": rows}, indent=2))
        return
    click.echo(f"device  {run.device.key}  (stored in {run.db})")
    emit([{"precision": r["precision"], "value": f"{r['value']:,.1f}", "unit": r["unit"],
           "nominal": f"{r['nominal']:,.0f}", "median_ms": f"{r['median_ms']:.4g}", "repeats": r["repeats"]}
          for r in rows], "table")


# ---------------------------------------------------------------- replay

@cli.command()
@db_option
@click.option("--study", required=True, help="The exhaustive (grid) study to replay.")
@click.option("--samplers", default=",".join(strategies.names("replay")), show_default=True, metavar="S1,S2,...",
              help=f"Samplers to compare: {', '.join(strategies.names('replay'))} (tpe-seeded: TPE after the "
                   "model's best predictions).")
@click.option("--seeds", type=click.IntRange(min=1), default=20, show_default=True,
              help="Replays per sampler, with sampler seeds 0 .. SEEDS-1.")
@click.option("--target", type=click.FloatRange(0, 1, min_open=True), default=0.95, show_default=True,
              help="Stop at a measured trial reaching this fraction of the study's best GFLOP/s.")
@click.option("--model-seeds", type=click.IntRange(min=1), default=10, show_default=True,
              help="Configurations tpe-seeded measures first: the model's best predictions, one per "
                   "distinct prediction.")
@click.option("--device-info", type=click.Path(dir_okay=False), default=None, metavar="FILE.json",
              help="The study's device for the model, as `gemmtune devices --format json` printed it "
                   "(default: as the search stored it in the database, else the device of this machine "
                   "with the study's device key).")
@click.option("--space", "space_file", type=click.Path(dir_okay=False), default=None,
              help="The study's search-space TOML file (default: the space rebuilt from the recorded rows).")
@format_option("table", "json")
def replay(db, study, samplers, seeds, target, model_seeds, device_info, space_file, fmt):
    """Compare samplers by re-running searches against an exhaustive study's recorded results."""
    from gemmtune import replay as rp

    names = [s.strip() for s in samplers.split(",") if s.strip()]
    seeded = [n for n in names if n in strategies.STRATEGIES and strategies.STRATEGIES[n].model_seeded]
    land = rp.load_landscape(db, study, space_file)
    if land.skipped:
        click.echo(land.skipped, err=True)
    device = rp.device_for(land, device_info) if seeded or device_info else None
    if seeded and device is None:
        raise GemmtuneError(f"{seeded[0]} needs the study's device ({land.device_name}) for the model; neither the "
                            "database nor this machine describes it: pass --device-info FILE (saved with "
                            f"`gemmtune devices --format json` on its machine) or leave {seeded[0]} out of --samplers")
    result = rp.replay(land, names, seeds, target, model_seeds, device)
    d = result.to_json()
    if fmt == "json":
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(f"study    {d['study']}  ({d['db']})")
    click.echo(f"problem  {d['precision']}gemm {d['m']}x{d['n']}x{d['k']} on {d['device_name']}: "
               f"{d['recorded']} configurations recorded ({d['ok']} ok), best {d['best_gflops']:,.1f} GFLOP/s")
    click.echo(f"measured trials to reach {target:g} x best, over {seeds} seeds"
               + (f" ({', '.join(seeded)}: the model's {model_seeds} best first)" if seeded else "") + ":")
    emit(result.table().to_dict(orient="records"), "table")
    if d["model_spearman"] is not None:
        click.echo(f"model    Spearman rank correlation of predicted and measured times: {d['model_spearman']:.3f}")
