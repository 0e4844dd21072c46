"""BatchedStorage: a trial's parameters committed as one transaction, and read back intact."""

from __future__ import annotations

import warnings

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from gemmtune.optuna_adapter import BatchedStorage

VALUES = {f"P{i}": [1, 2, 4, 8] for i in range(12)}


@pytest.fixture
def storage(tmp_path):
    s = BatchedStorage(f"sqlite:///{tmp_path / 'o.db'}")
    yield s
    s.engine.dispose()


def commits(engine) -> list:
    seen = []
    sa.event.listen(engine, "commit", lambda conn: seen.append(1))
    return seen


def study_of(storage) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=storage, study_name="x", direction="maximize", load_if_exists=True,
                               sampler=optuna.samplers.RandomSampler(seed=3))


def test_a_batch_commits_a_dozen_parameters_and_an_attribute_at_once(storage, tmp_path):
    study = study_of(storage)
    trial = study.ask()
    seen = commits(storage.engine)
    with storage.batch():
        params = {name: trial.suggest_categorical(name, values) for name, values in VALUES.items()}
        trial.set_user_attr("why", "test")
        assert not seen  # nothing written before the block ends
    assert len(seen) == 1
    # Unbatched, every suggestion is a transaction of its own.
    other = study.ask()
    before = len(seen)
    for name, values in VALUES.items():
        other.suggest_categorical(name, values)
    assert len(seen) - before == len(VALUES)
    study.tell(trial, 1.0)
    # Another process opening the database sees the trial as if written one by one.
    fresh = BatchedStorage(f"sqlite:///{tmp_path / 'o.db'}")
    try:
        got = optuna.load_study(study_name="x", storage=fresh).trials[0]
    finally:
        fresh.engine.dispose()
    assert got.params == params and got.user_attrs == {"why": "test"} and got.state == TrialState.COMPLETE
    assert got.distributions == {n: optuna.distributions.CategoricalDistribution(v) for n, v in VALUES.items()}


def test_a_batch_checks_distributions_like_optuna(storage):
    study = study_of(storage)
    with storage.batch():
        study.ask().suggest_categorical("P0", [1, 2])
    with pytest.raises(ValueError):  # the same name with other choices, as Optuna refuses it
        with warnings.catch_warnings(), storage.batch():
            warnings.simplefilter("ignore")
            study.ask().suggest_categorical("P0", [1, 2, 3])


def test_trials_that_never_sent_a_heartbeat_are_found_after_the_grace_period(storage):
    import time

    study = study_of(storage)
    silent, beating = study.ask(), study.ask()
    storage.record_heartbeat(beating._trial_id)
    study.tell(study.ask(), 1.0)  # finished: never a candidate
    time.sleep(1.1)
    assert storage.unbeaten_trial_ids(study._study_id, 1.0) == [silent._trial_id]
    assert storage.unbeaten_trial_ids(study._study_id, 3600.0) == []  # not yet past its grace
    other = optuna.create_study(storage=storage, study_name="other")
    assert storage.unbeaten_trial_ids(other._study_id, 1.0) == []


def test_a_study_session_retries_when_another_process_creates_the_tables_first(tmp_path, monkeypatch):
    """Processes starting together race to create Optuna's tables; on PostgreSQL the loser gets
    a ProgrammingError (type "studydirection" already exists) and retries; a database that keeps
    refusing is one line naming the study and the database's own message."""
    from gemmtune.errors import GemmtuneError
    from gemmtune.search import proposals, session
    from gemmtune.space import load_space
    from gemmtune.strategies import make_strategy

    real, calls = session.BatchedStorage, []

    def racing(url, **kwargs):
        calls.append(url)
        if len(calls) == 1 or "refusing" in url:
            raise sa.exc.ProgrammingError("CREATE TYPE studydirection", {}, Exception('type "studydirection" already exists'))
        return real(url, **kwargs)

    monkeypatch.setattr(session, "BatchedStorage", racing)
    monkeypatch.setattr(session.time, "sleep", lambda s: None)
    args = (make_strategy("tpe", 0), 60.0, lambda number, params: None, proposals.Proposals(load_space()))
    opened = session.StudySession(f"sqlite:///{tmp_path / 'o.db'}", "raced", *args)
    assert len(calls) == 2 and opened.study.study_name == "raced"
    opened.storage.engine.dispose()
    with pytest.raises(GemmtuneError, match=r"cannot create the study 'refused' in .*refusing.*studydirection"):
        session.StudySession(f"sqlite:///{tmp_path / 'refusing.db'}", "refused", *args)
    assert len(calls) == 5
