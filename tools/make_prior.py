"""Write the prior a device's searches learn from before their database holds anything
(``gemmtune.models.shipped_prior``): the ``ok`` and ``slow`` rows of exhaustive studies recorded on it.

    python tools/make_prior.py --device-name "NVIDIA H200" -o configs/prior-nvidia-h200.csv.gz land.db [more.db ...]

Each database's rows of devices named ``--device-name``, at every study, are read as
``gemmtune report`` reads them (rows no reader may use are left out), and written sorted, with
GFLOP/s to one decimal, as gzipped CSV whose bytes depend on the rows alone.
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
from pathlib import Path

import pandas as pd

from gemmtune.db.rows import screen
from gemmtune.db.store import Store
from gemmtune.errors import GemmtuneError
from gemmtune.models.shipped_prior import COLUMNS
from gemmtune.files.output import write_file


def prior_rows(urls: list[str], device_name: str) -> pd.DataFrame:
    parts = []
    for url in urls:
        store = Store(url, create=False)
        try:
            rows = store.frame(device_name=device_name)
        finally:
            store.close()
        parts.append(rows[rows.status.isin(("ok", "slow")) & (rows.gflops > 0)])
    kept = screen(pd.concat(parts, ignore_index=True)).rows
    if kept.empty:
        raise GemmtuneError(f"no ok or slow rows of a device named {device_name!r}")
    if (kept.groupby("study")[["precision", "m", "n", "k", "trans_a", "trans_b"]].nunique() > 1).any(axis=None):
        raise GemmtuneError("one study name holds several problems; rename the studies first")
    kept = kept.assign(gflops=kept.gflops.round(1))[list(COLUMNS)]
    return kept.sort_values(["study", "kernel", "params"], kind="stable").reset_index(drop=True)


def compressed(rows: pd.DataFrame) -> bytes:
    """Gzipped CSV with no name or time in its header: the same rows, the same bytes."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9, mtime=0, filename="") as out:
        out.write(rows.to_csv(index=False).encode())
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("databases", nargs="+", type=Path)
    parser.add_argument("--device-name", required=True)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    try:
        missing = [db for db in args.databases if not db.is_file()]
        if missing:
            raise GemmtuneError(f"no database file {missing[0]}")
        rows = prior_rows([f"sqlite:///{db}" for db in args.databases], args.device_name)
        write_file(args.output, compressed(rows))   # whole or not at all, never through a link
    except GemmtuneError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"{len(rows)} rows of {rows.study.nunique()} studies -> {args.output}")


if __name__ == "__main__":
    main()
