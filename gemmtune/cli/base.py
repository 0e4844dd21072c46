"""The command line's group, its error handling, and the options and helpers its commands share."""

from __future__ import annotations

import functools
import json
import sys

import click

from gemmtune.errors import GemmtuneError
from gemmtune.precision import PRECISIONS

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
    """Print rows as a table, CSV or JSON on stdout, every string cell made safe for its format
    (``gemmtune.output.cells``: device and study names may come from anywhere)."""
    import pandas as pd  # here, not at the top: it alone would double the start-up of every command

    from gemmtune.output import cells

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
