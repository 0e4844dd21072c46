"""Results the project measured, shipped with the package: what a search on a device of the
same model learns from before its own database holds anything.

``configs/prior-<device name>.csv.gz`` holds the ``ok`` and ``slow`` rows of exhaustive studies
recorded on that device (``tools/make_prior.py`` writes it; docs/search.md, "The shipped
prior", says which), and ``prior-<device name>.json`` the device as ``gemmtune devices --format
json`` described it. A search adds them to the rows its learned model is fitted to
(``gemmtune.search.prior.search_prior``) on a device of that name, whatever driver it runs, and
on a device the package ships none for, those of a device of the same kind (``KIND``: an H100
learns from the H200's). ``gemmtune replay`` never adds a device's own, so that no landscape is
judged by a model that learned from it; borrowed ones it adds at other problems than its own.
Their study names begin with ``PREFIX`` and their ids are negative: they can never be mistaken
for a database's rows. Pure pandas; no OpenCL.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import numpy as np
import pandas as pd

from gemmtune.devices.info import DeviceInfo, read_device_info

PREFIX = "shipped:"
COLUMNS = ("study", "precision", "m", "n", "k", "trans_a", "trans_b", "kernel", "params", "status", "gflops",
           "trial")
# What a device must share with one the package ships rows of to learn from them: the same
# vendor and type, and the limits that decide which kernels it runs and how many at once.
# Whatever else differs (compute units, clocks, memory) the model's features see.
KIND = ("vendor", "type", "local_mem_bytes", "registers_per_group", "max_work_group_size", "fp64_matrix")
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


@functools.lru_cache(maxsize=1)
def shipped_devices() -> tuple[DeviceInfo, ...]:
    """The devices the package ships rows of, as they described themselves."""
    return tuple(read_device_info(ref) for ref in sorted(resources.files("gemmtune.configs").iterdir(),
                                                          key=lambda r: r.name)
                 if ref.name.startswith("prior-") and ref.name.endswith(".json"))


def source(dev: DeviceInfo) -> str | None:
    """The name of the device whose shipped rows teach ``dev``'s model: its own, else the first
    shipped device of its kind (``KIND``); None for neither."""
    if _read(dev.name) is not None:
        return dev.name
    return next((d.name for d in shipped_devices() if all(getattr(d, f) == getattr(dev, f) for f in KIND)), None)


def borrowed(dev: DeviceInfo) -> pd.DataFrame:
    """The shipped rows ``dev`` learns from that are another device's (``rows_for``); else empty."""
    return rows_for(dev) if source(dev) not in (None, dev.name) else rows_for(None)


def rows_for(dev: DeviceInfo | None) -> pd.DataFrame:
    """The shipped rows of ``dev``'s model (``source``) as rows of ``dev`` (its key and name), as
    ``Store.frame`` reads a database's; empty where none are shipped (or for None)."""
    name = None if dev is None else source(dev)
    rows = None if name is None else _read(name)
    if rows is None:
        return pd.DataFrame(columns=["id", "device", "device_name", *COLUMNS])
    return rows.assign(study=PREFIX + rows.study, device=dev.key, device_name=dev.name,
                       id=-1 - np.arange(len(rows)))
