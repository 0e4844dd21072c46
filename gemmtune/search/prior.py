"""What a search learns from before its first seed: the device's results rows at other studies,
with those the package ships for its model (``gemmtune.models.shipped_prior``), and the cost model
fitted to them (``learned.prior_model``, for ``learned.seeds``).

Fitting takes seconds on a busy host (scikit-learn's import, the features of every row, the
trees), so it starts on a thread when the search opens its workers, which take seconds to start
anyway. A study's search takes that model where its own prior is exactly the rows it learned from, and
fits its own otherwise (a resumed study, a workload's later problem)."""

from __future__ import annotations

import threading

import pandas as pd

from gemmtune.db.rows import recorded_batch
from gemmtune.db.store import Store
from gemmtune.devices.info import DeviceInfo
from gemmtune.models import learned, shipped_prior


def other_rows(store: Store, device: str, study: str) -> pd.DataFrame:
    """The results rows of device key ``device`` at every study but ``study``, of one problem a
    launch: what a search of ``study`` learns from. (The model predicts one problem's speed; a
    batch's rows measure many problems at once.)"""
    rows = store.frame(device=device)
    return rows[(rows.study != study) & (recorded_batch(rows.batch) == 1)]


def search_prior(store: Store, dev: DeviceInfo, study: str) -> pd.DataFrame:
    """What a search of ``study`` on ``dev`` learns from: the device's rows at other studies and
    the rows shipped for its model (``replay`` judges with the first alone)."""
    shipped = shipped_prior.rows_for(dev)
    mine = other_rows(store, dev.key, study)
    return pd.concat([mine, shipped], ignore_index=True) if len(shipped) else mine


def sources(prior: pd.DataFrame, dev: DeviceInfo, fitted: learned.CostModel | None) -> dict:
    """What a search's prior holds, for its summary: rows of the database, rows shipped, the
    device those were recorded on (``dev``'s own model, or one of its kind: ``borrowed``), and
    whether they were ``enough`` for a model (``fitted``: the one they taught, or None; asked of
    ``PriorModels.model`` after the seeds or the strategy got it, it answers from its cache)."""
    shipped = prior.study.astype(str).str.startswith(shipped_prior.PREFIX)
    source = shipped_prior.source(dev) if shipped.any() else None
    return {"database_rows": int((~shipped).sum()), "shipped_rows": int(shipped.sum()), "shipped_for": source,
            "borrowed": source is not None and source != dev.name, "enough": fitted is not None}


class PriorModels:
    """``early``: fit the devices' models on a thread now (a search with seeds); else each is
    fitted when a study's search asks for it."""

    def __init__(self, url: str, devices: list[DeviceInfo], early: bool = True):
        self._fitted: dict[str, tuple[tuple[int, ...], learned.CostModel | None]] = {}
        self._recent: dict[str, tuple[tuple[int, ...], learned.CostModel | None]] = {}   # the last fitted when asked
        self._thread = threading.Thread(target=self._fit, args=(url, devices), daemon=True)
        if early:
            self._thread.start()

    def _fit(self, url: str, devices: list[DeviceInfo]) -> None:
        try:
            import sklearn.ensemble  # noqa: F401  (the import alone is a second on a laptop)

            store = Store(url, create=False)
            try:
                for dev in devices:
                    rows = search_prior(store, dev, study="")   # a new study's prior: every row
                    fitted = learned.prior_model(rows, dev, store.latest_peaks(dev.key), jobs=-1)
                    self._fitted[dev.key] = tuple(rows.id), fitted
            finally:
                store.close()
        except Exception:  # noqa: BLE001  the study's search fits for itself; what failed here fails there, reported
            pass

    def model(self, prior: pd.DataFrame | None, dev: DeviceInfo, peaks) -> learned.CostModel | None:
        """The cost model of ``prior`` (the device's rows at other studies): the one fitted early
        or last if it learned from exactly these rows, else one fitted now. A study's search asks twice, for
        its seeds and for a learning strategy, and a fit takes seconds."""
        if self._thread.ident is not None:
            self._thread.join()
        ids = tuple(prior.id) if prior is not None else None
        for kept in (self._fitted, self._recent):
            kept_ids, fitted = kept.get(dev.key, (None, None))
            if ids is not None and kept_ids == ids:
                return fitted
        fitted = learned.prior_model(prior, dev, peaks, jobs=-1)
        if ids is not None:
            self._recent[dev.key] = ids, fitted
        return fitted
