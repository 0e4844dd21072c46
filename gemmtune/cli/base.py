"""The command line's group, its error handling, and the options and helpers its commands share."""

from __future__ import annotations

import functools
import json
import math
import os
import sys

import click

from gemmtune.errors import GemmtuneError
from gemmtune.precision import PRECISIONS
from gemmtune.shapes import MAX_DIM

# The time budget of a search given neither --trials nor --timeout: on a 2-core CPU, about 60
# trials of the CPU space, and the whole command within 5 minutes.
DEFAULT_TIMEOUT = 240.0
# Bounds of the numeric options: beyond them a value is a typo, and one that would overflow a
# wait, a kernel's int or the machine's memory.
MAX_SECONDS = 30 * 24 * 3600.0
MAX_COUNT = 1_000_000   # trials, configurations shown


class Command(click.Command):
    """A command whose options refuse an empty value: "" given explicitly (an unset variable in a
    script) is a mistake, never a request for the option's default."""

    def invoke(self, ctx):
        for param in self.params:
            value = ctx.params.get(param.name)
            if isinstance(value, str) and not value.strip():
                raise click.BadParameter("empty (leave the option out for its default)", ctx, param)
        return super().invoke(ctx)


class Cli(click.Group):
    """Every error ends as one line on stderr: exit 2 for bad input and output that cannot be
    written, 130 for Ctrl-C."""

    command_class = Command

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            _flush_output()
        except OSError as e:
            if not _writing_output(e):
                raise
            _discard_output()   # a closed pipe (EPIPE) click itself ends quietly, with exit code 1
            _say(f"Error: cannot write the output: {e.strerror or e}")
            sys.exit(2)
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


def _flush_output() -> None:
    sys.stdout.flush()   # here, where a failure is reported, rather than at the interpreter's exit


def _writing_output(e: OSError) -> bool:
    """Whether ``e`` came from writing the command's output (a full disk, a closed pipe)."""
    writers = (click.utils.echo.__code__, _flush_output.__code__)
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code not in writers:
        tb = tb.tb_next
    return tb is not None


def _discard_output() -> None:
    """Send stdout to /dev/null: what it still buffers is flushed again at exit, and would fail."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):   # not a file (a test's capture)
        pass


def _say(line: str) -> None:
    try:
        click.echo(line, err=True)
    except OSError:   # stderr cannot be written either: the exit code says it
        pass


class BoundedInt(click.IntRange):
    """A whole number between two bounds, both required."""

    def __init__(self, low: int, high: int):
        super().__init__(low, high)


class BoundedFloat(click.FloatRange):
    """A finite number between two bounds, both required: click's FloatRange alone lets nan
    through, since every comparison with it is false."""

    name = "number"

    def __init__(self, low: float, high: float, min_open: bool = False, max_open: bool = False):
        super().__init__(low, high, min_open=min_open, max_open=max_open)

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number.", param, ctx)
        return number


def seconds_type(low: float = 0.0) -> BoundedFloat:
    """A duration in seconds, above ``low`` (0 excluded)."""
    return BoundedFloat(low, MAX_SECONDS, min_open=low == 0)


def _scrubbed(message: str, args) -> str:
    """An error message without the password of any database URL given: the messages mask it
    already, and this keeps one that slipped through (a driver's own text) from showing it."""
    import os

    from gemmtune.db.urls import scrub

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
    dims = BoundedInt(1, MAX_DIM)

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
    """Print rows as a table, CSV or JSON on stdout, every string cell made safe for its format
    (``gemmtune.files.output.cells``: device and study names may come from anywhere)."""
    import pandas as pd  # here, not at the top: it alone would double the start-up of every command

    from gemmtune.files.output import cells

    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo("(none)")
    elif fmt == "csv":
        click.echo(cells(pd.DataFrame(rows), fmt).to_csv(index=False), nl=False)
    else:
        click.echo(cells(pd.DataFrame(rows), "table").to_string(index=False))


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
    if not found:
        raise GemmtuneError(f"bad --sizes {sizes!r}: names no size")
    if not 1 <= min(found) <= max(found) <= MAX_DIM:
        raise GemmtuneError(f"bad --sizes {sizes!r}: sizes must be from 1 to {MAX_DIM}")
    return found


def workload(precision: str, sizes: str | None, shapes_spec: str | None):
    """The problems of --shapes, or the cubes of --sizes, each with its precision."""
    from gemmtune.shapes import Shape, load_shapes

    if sizes is not None and shapes_spec is not None:
        raise GemmtuneError("give --sizes or --shapes, not both")
    found = load_shapes(shapes_spec) if shapes_spec is not None else [
        Shape(s, s, s) for s in parse_sizes("1024,2048,4096" if sizes is None else sizes)]
    return [s.with_precision(precision.lower()) for s in found]
