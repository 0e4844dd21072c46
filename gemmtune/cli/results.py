"""Commands over recorded results: report, export, replay."""

from __future__ import annotations

import functools
import json

import click

from gemmtune import strategies
from gemmtune.cli.base import MAX_COUNT, BoundedFloat, BoundedInt, cli, db_option, emit, format_option
from gemmtune.errors import GemmtuneError
from gemmtune.precision import PRECISIONS
from gemmtune.shapes import MAX_DIM

# ---------------------------------------------------------------- report, export

def result_filters(f):
    """Optional filters on the results table; passes ``filters`` (a gemmtune.report.table.Filters).

    Not device_option/precision_option/shape_options: those default to device 0, precision s
    and 1024³, while these must default to everything stored.
    """
    dims = BoundedInt(1, MAX_DIM)

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
        from gemmtune.report.table import Filters

        return f(*args, filters=Filters(device, precision, m or size, n or size, k or size, study), **kwargs)

    return wrapper


@cli.command()
@result_filters
@db_option
@format_option("table", "csv", "json", "markdown")
@click.option("--top", type=BoundedInt(1, MAX_COUNT), default=None,
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
    from gemmtune.report import table as rp
    from gemmtune.report.importance import add_importance

    if plot_file:
        from gemmtune.files.output import STDOUT, writable
        from gemmtune.report.plot import require_matplotlib

        require_matplotlib()
        if plot_file == STDOUT:
            raise GemmtuneError("--plot needs a file name: the report itself goes to standard output")
        writable(plot_file)  # refused now, not after the report is out
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
        frame, notes = add_importance(frame, found.url)
        for note in notes:
            click.echo(note, err=True)
    click.echo(rp.render(frame, fmt), nl=False)
    if plot_file:
        from gemmtune.report.plot import plot

        plot(found.rows, plot_file)
        click.echo(f"Plot written to {plot_file}.", err=True)
    return 0


@cli.command()
@result_filters
@db_option
@format_option("json", "header", "c")
@click.option("-o", "--output", default="-", show_default=True, type=click.Path(allow_dash=True),
              help="File to write (whole or not at all; a link or other non-regular file is refused); - for stdout. "
                   "With --format c: the directory the library's files go into (made if missing).")
def export(filters, db, fmt, output):
    """Write the best configuration per device, precision and shape as JSON, a C header, or a C
    library (--format c: gemmtune.h, gemmtune.c and CMakeLists.txt in the -o directory)."""
    from gemmtune import export as ex
    from gemmtune.files.output import STDOUT, writable
    from gemmtune.report.table import load

    if fmt == "c":
        from gemmtune.export import clib

        if output == STDOUT:
            raise GemmtuneError("--format c writes a directory of files (gemmtune.h, gemmtune.c, CMakeLists.txt): "
                                "give -o DIR")
        clib.check_directory(output)   # refused before the database is read
    elif output != STDOUT:
        writable(output)
    found = load(db, filters)
    if found.skipped_note():
        click.echo(found.skipped_note(), err=True)
    if fmt == "c":
        ranked = clib.ranked_rows(found.rows, found.devices)
        clib.write(clib.generate(ranked, found.devices, found.shown), output)
        if not ranked:
            click.echo(found.nothing_message() + " Exported the shipped defaults only.", err=True)
        return 0
    entries = ex.best_entries(found.rows)
    text = ex.to_json(entries, found.shown) if fmt == "json" else ex.to_header(entries, found.shown)
    if not entries:
        click.echo(found.nothing_message() + " Exported "
                   + ("no entries." if fmt == "json" else "the shipped defaults only."), err=True)
    if output == STDOUT:
        click.echo(text, nl=False)
    else:
        ex.write(text, output)
    return 0


# ---------------------------------------------------------------- replay

MAX_REPLAYS = 10_000   # replays per strategy, and model seeds: each costs a search's proposals

@cli.command()
@db_option
@click.option("--study", required=True, help="The exhaustive (grid) study to replay.")
@click.option("--strategies", "--samplers", "names", default=",".join(strategies.names("replay")), show_default=True,
              metavar="S1,S2,...",
              help=f"Strategies to compare: default (what search does without --strategy), "
                   f"{', '.join(strategies.names('replay'))} (tpe-seeded: TPE after the model's best predictions; "
                   "learned: the cost model trained on the device's results at other problems in the database; "
                   "optuna-tpe, optuna-cmaes: Optuna's samplers as they come). --samplers is an alias.")
@click.option("--seeds", type=BoundedInt(1, MAX_REPLAYS), default=20, show_default=True,
              help="Replays per strategy, with sampler seeds 0 .. SEEDS-1.")
@click.option("--target", type=BoundedFloat(0, 1, min_open=True), default=0.95, show_default=True,
              help="Stop at a measured trial reaching this fraction of the study's best GFLOP/s.")
@click.option("--model-seeds", type=BoundedInt(1, MAX_REPLAYS), default=10, show_default=True,
              help="Configurations tpe-seeded measures first: the model's best predictions, one per "
                   "distinct prediction.")
@click.option("--device-info", type=click.Path(dir_okay=False), default=None, metavar="FILE.json",
              help="The study's device for the model, as `gemmtune devices --format json` printed it "
                   "(default: as the search stored it in the database, else the device of this machine "
                   "with the study's device key).")
@click.option("--space", "space_file", type=click.Path(dir_okay=False), default=None,
              help="The study's search-space TOML file (default: the space rebuilt from the recorded rows).")
@click.option("--jobs", type=click.IntRange(min=0), default=1, show_default=True,
              help="Processes replaying seeds side by side (0: one per core); the counts are the same.")
@format_option("table", "json")
def replay(db, study, names, seeds, target, model_seeds, device_info, space_file, jobs, fmt):
    """Compare search strategies by re-running searches against an exhaustive study's recorded results."""
    from gemmtune.files.output import terminal_text
    from gemmtune.search import replay as rp

    names = [s.strip() for s in names.split(",") if s.strip()]
    seeded = [n for n in names if n == "default" or (n in strategies.STRATEGIES and (
        strategies.STRATEGIES[n].model_seeded or strategies.STRATEGIES[n].wants_prior))]
    land = rp.load_landscape(db, study, space_file)
    if land.skipped:
        click.echo(land.skipped, err=True)
    device = rp.device_for(land, device_info) if seeded or device_info else None
    if seeded and device is None:
        raise GemmtuneError(f"{seeded[0]} needs the study's device ({land.device_name}) for the model; neither the "
                            "database nor this machine describes it: pass --device-info FILE (saved with "
                            f"`gemmtune devices --format json` on its machine) or leave {seeded[0]} out of --strategies")
    result = rp.replay(land, names, seeds, target, model_seeds, device, jobs)
    first = [n for n in names if n == "default" or strategies.STRATEGIES[n].model_seeded]
    d = result.to_json()
    if fmt == "json":
        click.echo(json.dumps(d, indent=2))
        return
    # names from the database, for a terminal
    click.echo(terminal_text(f"study    {d['study']}  ({d['db']})"))
    click.echo(terminal_text(f"problem  {d['precision']}gemm {d['m']}x{d['n']}x{d['k']} on {d['device_name']}: "
                             f"{d['recorded']} configurations recorded ({d['ok']} ok), "
                             f"best {d['best_gflops']:,.1f} GFLOP/s"))
    click.echo(f"measured trials to reach {target:g} x best, over {seeds} seeds"
               + (f" ({', '.join(first)}: the model's {model_seeds} best first where allowed)" if first else "") + ":")
    emit(result.table().to_dict(orient="records"), "table")
    if d["model_spearman"] is not None:
        click.echo(f"model    Spearman rank correlation of predicted and measured times: {d['model_spearman']:.3f}")
    if d["learned_spearman"] is not None:
        click.echo(f"learned  the same, of the cost model fitted to the device's other problems: "
                   f"{d['learned_spearman']:.3f}")
