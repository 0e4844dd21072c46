"""The ``gemmtune`` command line: each command is a few lines over the library.

The group and what commands share live in ``base``; the commands in ``tune`` (devices, space,
verify, search), ``results`` (report, export, replay) and ``measure`` (bench, peak), which
register themselves on the group when imported here.
"""

from gemmtune.cli import measure, results, tune  # noqa: F401 - registers the commands
from gemmtune.cli.base import cli, emit, main

__all__ = ["cli", "emit", "main"]
