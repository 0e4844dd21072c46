"""Finalists, timed again once the search is over. On a CPU device the timing worker shares its
cores with the compilers building the next candidates, so each trial is timed under a load that
comes and goes: the shipped default measured 94 GFLOP/s as a search's first trial (s 256^3 on
PoCL) and 168 alone, where the search's best, timed in a lull at 154, ran at 151 alone. With no
build running, the baseline and then the fastest row are timed again until the fastest row is
one timed alone; those rows take the quiet figures, their ``detail`` keeps the search's."""

from __future__ import annotations

import json
from typing import Callable

import pandas as pd

from gemmtune.db.rows import screen
from gemmtune.search.pipeline import IDENTICAL, identical_note
from gemmtune.search.recording import measured_fields
from gemmtune.space import Config, config_key

FINALISTS = 4   # at most this many rows re-timed besides the baseline


def needs_finalists(search) -> bool:
    """Only where the compilers and the timing worker share the device's cores."""
    return search.pipeline.builds is not None and search.dev.type == "CPU"


def time_finalists(search, stopped: Callable[[], bool] = lambda: False, most: int = FINALISTS) -> int:
    """Time the study's rows that this process measured again, quietly: the baseline, the ``most``
    fastest by the search's figures, then the fastest until it is one timed again (at most ``most``
    more: the quiet figures are the higher, so this seldom takes one). Rows that other processes
    sharing the study measured are theirs to time again, on their machines. Returns how many were."""
    store, dev, runner = search.store, search.dev, search.pipeline.runners[0]
    done: set[int] = set()

    def ok_rows() -> list:
        """The measured rows (a row with another's figures, an identical binary, goes with it),
        fastest first; of a shared database, those any reader may use."""
        rows = screen(store.frame(study=search.name, device=dev.key, status="ok"), search.space).rows
        rows = rows[~rows.detail.fillna("").str.startswith(IDENTICAL) & rows.trial.isin(search.rows.mine)]
        return list(rows.sort_values("gflops", ascending=False, kind="stable").itertuples())

    def again(row) -> None:
        done.add(int(row.id))
        config = Config.of(row.kernel, json.loads(row.params))
        outcome = runner.run(search.pipeline.job(config, early_stop=False))
        if outcome.status != "ok":   # flaky: its search figures stand, marked
            store.update(int(row.id), detail=f"timed again after the search: {outcome.status} "
                                             f"({outcome.detail or 'no detail'}); figures of the search kept")
        else:
            fields = measured_fields(search.prec, search.flops, outcome)
            del fields["compile_s"], fields["trial_s"]   # the trial's own
            # the search's figure; where a search before this one timed the row again, its figure
            fields["search_gflops"] = row.gflops if pd.isna(row.search_gflops) else row.search_gflops
            fields["detail"] = (f"timed again after the search, no build running; "
                                f"{fields['search_gflops']:,.1f} GFLOP/s during the search")
            store.update(int(row.id), **fields)
            copies = store.frame(study=search.name, device=dev.key, detail=identical_note(int(row.trial)))
            for copy in copies.itertuples():
                store.update(int(copy.id), **{**fields, "detail": copy.detail})
        search.told_again(config, outcome, fields["gflops"] if outcome.status == "ok" else None)

    rows = ok_rows()
    first = [r for r in rows if config_key(r.kernel, json.loads(r.params)) == search.baseline_key][:1]
    for row in first + [r for r in rows if r not in first][:most]:
        if stopped():
            return len(done)
        again(row)
    for _ in range(most):
        rows = ok_rows()
        if not rows or int(rows[0].id) in done or stopped():
            break
        again(rows[0])
    return len(done)
