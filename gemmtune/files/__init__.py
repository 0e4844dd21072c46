"""Files gemmtune reads and writes. Here: files a user names (shapes, spaces, device
descriptions, kernel sources), read as UTF-8 text no larger than a bound and TOML parsed, each
failure one GemmtuneError naming the file; ``shipped``: the files installed with the package;
``output``: what gemmtune writes for its user."""

from __future__ import annotations

import tomllib
from pathlib import Path

from gemmtune.errors import GemmtuneError

# Such files are a few KiB; this bounds what one can make the parsers hold, and what a device
# file given by mistake reads.
MAX_FILE_BYTES = 16 * 2**20


def read_text(path: str | Path, what: str, limit: int | None = None) -> str:
    """The UTF-8 text of the file ``path`` (``what`` says what it is, for errors), read no
    further than ``limit`` bytes (default MAX_FILE_BYTES)."""
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise GemmtuneError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise GemmtuneError(f"cannot read {what} {path}: larger than {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GemmtuneError(f"cannot read {what} {path}: not UTF-8 text "
                            f"(byte {e.start} is {data[e.start]:#04x})") from None


def parse_toml(text: str, what: str) -> dict:
    """``text`` as TOML; GemmtuneError naming ``what`` (a file) where it is not valid."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GemmtuneError(f"{what} is not valid TOML: {e}") from None
    except RecursionError:
        # tomllib descends one Python call per level of nested arrays and inline tables
        raise GemmtuneError(f"{what} nests arrays or inline tables too deeply") from None
