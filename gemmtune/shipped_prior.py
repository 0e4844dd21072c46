"""Results the project measured, shipped with the package: what a search on a device of the
same model learns from before its own database holds anything.

``configs/prior-<device name>.csv.gz`` holds the ``ok`` and ``slow`` rows of exhaustive studies
recorded on that device (``tools/make_prior.py`` writes it; docs/search.md, "The shipped
prior", says which). A search adds them to the rows its learned model is
fitted to (``gemmtune.search.prior.search_prior``) on a device of that name, whatever driver
it runs; ``gemmtune replay`` never does, so that no landscape is judged by a model that learned
from it. Their study names begin with ``PREFIX`` and their ids are negative: they can never be
mistaken for a database's rows. Pure pandas; no OpenCL.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import numpy as np
import pandas as pd

from gemmtune.info import DeviceInfo

PREFIX = "shipped:"
COLUMNS = ("study", "precision", "m", "n", "k", "trans_a", "trans_b", "kernel", "params", "status", "gflops",
           "trial")
TEXT = {"study": str, "precision": str, "trans_a": str, "trans_b": str, "kernel": str, "params": str, "status": str}


def file_name(device_name: str) -> str:
    """``prior-nvidia-h200.csv.gz`` for "NVIDIA H200"."""
    return "prior-" + re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") + ".csv.gz"


def read(source) -> pd.DataFrame:
    """The rows of a prior file (a path, or a file opened in binary mode), as written."""
    return pd.read_csv(source, compression="gzip", dtype=TEXT, keep_default_na=False)


@functools.lru_cache(maxsize=4)
def _read(device_name: str) -> pd.DataFrame | None:
    ref = resources.files("gemmtune.configs") / file_name(device_name)
    if not ref.is_file():
        return None
    with ref.open("rb") as f:
        return read(f)


def rows_for(dev: DeviceInfo) -> pd.DataFrame:
    """The shipped rows of ``dev``'s model as rows of ``dev`` (its key and name), as
    ``Store.frame`` reads a database's; empty where none are shipped."""
    rows = _read(dev.name)
    if rows is None:
        return pd.DataFrame(columns=["id", "device", "device_name", *COLUMNS])
    return rows.assign(study=PREFIX + rows.study, device=dev.key, device_name=dev.name,
                       id=-1 - np.arange(len(rows)))
