"""Optuna's parameter importances of the studies ``gemmtune report --importance`` shows.

Read through Optuna's own storage API (never with SQL), from a database opened read-only, and
past trials Optuna cannot read: a shared database may hold any row.
"""

from __future__ import annotations

import pandas as pd

from gemmtune.db.urls import db_error, shown
from gemmtune.errors import GemmtuneError


def _completed_trials(url: str, study: str):
    """The study's direction and completed trials as Optuna reads them from the database (opened
    read-only: a reader creates none of Optuna's tables), and how many of its trials Optuna
    could not read (a distribution it does not know, JSON it cannot parse: one such row spoils
    Optuna's reading of all, so the trials are then read one by one); or a sentence saying why
    there are none."""
    import itertools

    import optuna
    from optuna.exceptions import StorageInternalError

    from gemmtune.db.connect import read_only_url

    complete = optuna.trial.TrialState.COMPLETE
    readable = read_only_url(url)
    try:
        storage = optuna.storages.RDBStorage(readable if isinstance(readable, str)
                                             else readable.render_as_string(hide_password=False),
                                             skip_table_creation=True)
        stored = optuna.load_study(study_name=study, storage=storage)
        direction = stored.direction
    except KeyError:
        return f"Study {study!r} has no Optuna study in {shown(url)}, so no parameter importances."
    except (StorageInternalError, RuntimeError, ValueError) as e:
        # No Optuna tables (a database of results rows alone), or a study gemmtune did not make
        why = db_error(e.__cause__ or e, url) if isinstance(e, StorageInternalError) else str(e)
        return f"Study {study!r}: no Optuna study readable in {shown(url)} ({why}), so no parameter importances."
    except Exception as e:  # storage errors come in many types; the message says which
        raise GemmtuneError(f"cannot read the study {study!r} in {shown(url)}: {db_error(e, url)}") from None
    try:
        return direction, stored.get_trials(deepcopy=False, states=(complete,)), 0
    except (ValueError, TypeError, KeyError):
        pass
    study_id, trials, unreadable = storage.get_study_id_from_name(study), [], 0
    for number in itertools.count():
        try:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        except KeyError:
            break
        try:
            trial = storage.get_trial(trial_id)
        except (ValueError, TypeError, KeyError):
            unreadable += 1
            continue
        if trial.state == complete:
            trials.append(trial)
    return direction, trials, unreadable


def importance(url: str, study: str) -> tuple[dict[str, float] | str, str | None]:
    """Optuna's parameter importances of a study (PED-ANOVA, which needs no scikit-learn),
    or a sentence saying why there are none; and a sentence saying how many stored trials were
    skipped and why, None when none were. Trials that only repeated an earlier measurement are
    left out, so a configuration counts once."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    read = _completed_trials(url, study)
    if isinstance(read, str):
        return read, None
    direction, stored, unreadable = read
    own = optuna.create_study(direction=direction)
    trials = []
    for trial in (t for t in stored if "skipped" not in t.user_attrs):
        try:
            own.add_trial(trial)   # checks the trial's values against its distributions
            trials.append(trial)
        except (ValueError, TypeError):
            unreadable += 1
    note = None if not unreadable else (
        f"Study {study!r}: skipped {unreadable} stored trial{'s' if unreadable != 1 else ''} Optuna cannot read "
        "(an unknown distribution or a value outside it) in its parameter importances.")
    if len({tuple(sorted(t.params.items())) for t in trials}) < 2:
        return (f"Study {study!r}: parameter importances need at least 2 completed trials with "
                f"different parameters; it has {len(trials)}."), note
    values = optuna.importance.get_param_importances(own, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    return {name: float(v) for name, v in values.items()}, note


def add_importance(frame: pd.DataFrame, url: str) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` with an ``importance`` column (parameter -> importance, for each row's study),
    and a sentence for each study that has none."""
    found, notes = {}, []
    for study in frame.study.dropna().unique():
        value, skipped = importance(url, study)
        if skipped:
            notes.append(skipped)
        if isinstance(value, str):
            notes.append(value)
            value = None
        found[study] = value
    return frame.assign(importance=[found.get(s) for s in frame.study]), notes


def importance_text(values: dict | None) -> str:
    """Importances as short text, the largest first; parameters at 0 summed up as "others"."""
    if not values:
        return "-"
    ranked = sorted(values.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {x:.2f}" for name, x in ranked if round(x, 2) > 0)
    return shown + (" (others 0)" if any(round(x, 2) == 0 for _, x in ranked) else "")
