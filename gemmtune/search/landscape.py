"""A landscape: what a study recorded, as a lookup table from configuration to GFLOP/s that a
replay searches instead of the device (``gemmtune.search.replay``), with what a search at its problem
would start from (the nearest tuned shapes' bests, the device's rows at other problems) and the
description of its device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gemmtune.db.rows import recorded_op, screen, skipped_note
from gemmtune.db.store import Store, database_url
from gemmtune.errors import GemmtuneError
from gemmtune.families import FAMILIES
from gemmtune.devices.info import DeviceInfo, read_device_info
from gemmtune.models import shipped_prior
from gemmtune.precision import Precision, get_precision
from gemmtune.space import Config, FamilySpace, Space, load_space, shipped_families


@dataclass(frozen=True)
class Landscape:
    """What an exhaustive study recorded: the lookup table a replay searches."""

    study: str
    url: str
    device: str                   # device key
    device_name: str
    precision: Precision
    shape: tuple[int, int, int]
    space: Space
    configs: list[Config]         # recorded configurations in the space, in the space's order
    values: dict[tuple, tuple[str, float | None]]   # config key -> (status, recorded GFLOP/s or None)
    baseline: Config | None
    peaks: dict[str, float]       # the device's measured peaks in the same database, if any
    described: DeviceInfo | None = None   # the device as the search stored it (table devices)
    skipped: str | None = None            # which recorded rows no reader may use (gemmtune.db.rows), if any
    space_file: str | None = None         # the space file it was loaded with, if any

    @property
    def best(self) -> float:
        return max(v for s, v in self.values.values() if s == "ok")

    def gflops(self, config: Config) -> float | None:
        """The measured GFLOP/s of an ``ok`` configuration, else None."""
        status, value = self.values[config.key]
        return value if status == "ok" else None


def recorded_space(rows: pd.DataFrame, study: str) -> Space:
    """Each family's recorded values. A parameter the kernel gained since takes its source default,
    what the kernel did then (``FamilySpace.complete``); rows naming one it lost are left out."""
    shipped, families = shipped_families(), []
    for name in [f for f in FAMILIES if f in set(rows.kernel)]:
        source = shipped.family(name)
        written = [json.loads(p) for p in rows.params[rows.kernel == name]]
        if any(p.keys() != written[0].keys() for p in written):
            raise GemmtuneError(f"study {study!r} has {name} rows with different parameters: give its --space")
        params = [p for p in map(source.complete, written) if p is not None]
        if params:
            values = {key: sorted({p[key] for p in params}) for key in params[0]}
            families.append(FamilySpace(FAMILIES[name], values, source=source.source, source_name="(recorded)"))
    return Space(families, origin=f"the configurations recorded in study {study}")


def place(space: Space, kernel: str, params: dict) -> tuple[tuple, Config] | None:
    """Where a recorded configuration comes in the space's Cartesian product (families in order,
    then each parameter's value index, as ``valid_configs`` orders them), and the configuration
    as the space spells it (``FamilySpace.complete``); None if it is not in the space."""
    for i, fs in enumerate(space.families):
        p = fs.complete(params) if fs.family.name == kernel else None
        if p is not None and all(p[k] in values for k, values in fs.values.items()):
            return (i, *(values.index(p[k]) for k, values in fs.values.items())), Config.of(kernel, p)
    return None


def load_landscape(db: str | None, study: str, space_file: str | Path | None = None) -> Landscape:
    """The study's recorded results; GemmtuneError when it has none or no correct one."""
    given = load_space(space_file) if space_file is not None else None
    store = Store(database_url(db), create=False)
    try:
        recorded = store.frame(study=study)
        screened = screen(recorded, given)
        rows = screened.rows
        if rows.empty:
            where = ("there is no such database yet" if not store.exists else "it has no results rows"
                     if recorded.empty else screened.note())
            raise GemmtuneError(f"no results for study {study!r} in {store.shown} ({where})")
        first = rows.iloc[0]
        peaks = store.latest_peaks(first.device)
        described = store.device_info(first.device)
    finally:
        store.close()
    if len(rows[["device", "precision", "m", "n", "k"]].drop_duplicates()) > 1:
        raise GemmtuneError(f"study {study!r} mixes devices, precisions or shapes")
    space = given if given is not None else recorded_space(rows, study)
    values, configs, baseline = {}, {}, None
    for row in rows.itertuples():
        placed = place(space, row.kernel, json.loads(row.params))
        if placed is None:
            continue
        position, config = placed
        key = config.key
        configs.setdefault(key, (position, config))
        gflops = None if pd.isna(row.gflops) else float(row.gflops)
        values[key] = (row.status, gflops)  # later rows win, as in search
        if row.baseline and baseline is None:
            baseline = config
    if not any(s == "ok" for s, _ in values.values()):
        raise GemmtuneError(f"study {study!r} has no correct ('ok') configuration in {space.origin}")
    return Landscape(study, store.url, first.device, first.device_name, get_precision(first.precision),
                     (int(first.m), int(first.n), int(first.k)), space,
                     [c for _, c in sorted(configs.values(), key=lambda pc: pc[0])], values, baseline, peaks,
                     described, "\n".join(filter(None, (screened.note(), skipped_note(store.skipped)))) or None,
                     None if space_file is None else str(space_file))


def recorded_nearby(land: Landscape, dev: DeviceInfo) -> list[Config]:
    """What a search at the study's shape starts from after its baseline (``tuned.nearby_configs``:
    the best configurations of the nearest other tuned shapes in the same database), as the
    landscape spells those it recorded."""
    from gemmtune.db.tuned import nearby_configs as tuned_nearby

    placed = [place(land.space, c.kernel, c.params) for c in tuned_nearby(land.url, dev, land.precision, *land.shape)]
    return [config for _, config in filter(None, placed) if config.key in land.values]


def other_studies(land: Landscape, device: DeviceInfo | None = None) -> pd.DataFrame:
    """``land``'s device's rows in its database, and those ``device`` borrows (``shipped_prior.borrowed``),
    at other problems: a search at a new problem has none there, and another recording of its
    problem would teach the model what it is judged on."""
    store = Store(land.url, create=False)
    try:
        rows = store.frame(device=land.device)
    finally:
        store.close()
    if device is not None and len(borrowed := shipped_prior.borrowed(device)):
        rows = pd.concat([rows, borrowed.assign(device=land.device)], ignore_index=True)
    problem = pd.MultiIndex.from_frame(rows[["precision", "m", "n", "k"]].assign(
        trans_a=recorded_op(rows.trans_a), trans_b=recorded_op(rows.trans_b)))
    return rows[~problem.isin(problem[(rows.study == land.study).to_numpy()])]


def device_for(land: Landscape, info_file: str | Path | None = None) -> DeviceInfo | None:
    """The study's device, for the model: from ``info_file`` (``gemmtune devices --format json``'s:
    the entry of the study's device name, or the only one), else as its search stored it, else
    this machine's device of the study's key; None when none has it."""
    if info_file is not None:
        return read_device_info(info_file, land.device_name)
    if land.described is not None:
        return land.described
    try:
        from gemmtune.devices.opencl import list_devices

        return next((d for d in list_devices() if d.key == land.device), None)
    except GemmtuneError:  # no OpenCL platform here
        return None
