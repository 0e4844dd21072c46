"""The Optuna session: the study a search runs in, opened on the results database with batched
writes and heartbeats (``StudySession``), and its copy in memory that the sampler reads
(``StudyCopy``); a replay's study in memory (``memory_study``). The only module that opens
Optuna's studies (Optuna's private names are in ``optuna_adapter``); ``proposer`` asks and tells
them.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from typing import Callable

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from gemmtune.db.connect import fast_sqlite
from gemmtune.db.urls import db_error, shown
from gemmtune.errors import GemmtuneError
from gemmtune.optuna_adapter import BatchedStorage, trial_id
from gemmtune.search.proposals import Proposals
from gemmtune.space import Config
from gemmtune.strategies import Strategy

FAILED = TrialState.PRUNED               # how a measured failure is told: below every result
HEARTBEAT_S = 5                          # seconds between heartbeats of the trials in flight, at most


def heartbeat_interval(grace: float) -> int:
    """Whole seconds between heartbeats: a few beats fit in the grace period, so a live trial
    is never taken for a dead one."""
    return max(1, min(HEARTBEAT_S, int(grace // 3)))


@contextlib.contextmanager
def quiet_optuna():
    """Optuna's warnings that a feature is experimental (multivariate, grouped TPE; heartbeats):
    not the user's concern."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


@contextlib.contextmanager
def quiet_heartbeat():
    """Optuna warns that heartbeats are meant for Study.optimize, and that they are experimental;
    gemmtune drives ask/tell and records the heartbeats itself."""
    with quiet_optuna():
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        yield


def memory_study(strategy: Strategy) -> optuna.Study:
    """A study kept in memory, as replay uses."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=None, direction="maximize", sampler=strategy.sampler())


class StudyCopy:
    """An in-memory study beside ``study``, sampled by ``sampler``; ``proposals`` (a
    ``proposals.Proposals``) maps configurations to trial parameters and back."""

    def __init__(self, study: optuna.Study, sampler: optuna.samplers.BaseSampler, proposals):
        self.proposals = proposals
        self.study = optuna.create_study(storage=None, direction="maximize", sampler=sampler)
        done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
        self.study.add_trials(done)
        self.known = {self._key(t.params) for t in done}   # configurations with a finished trial here
        self.copies: dict[int, optuna.Trial] = {}          # the database trial's id -> its copy

    def _key(self, params: dict) -> tuple | None:
        config = self.proposals.decode(params)
        return config.key if config is not None else None

    def ask(self, config: Config | None) -> tuple[optuna.Trial, Config]:
        """A running trial here: the sampler's choice, or ``config``."""
        if config is not None:
            self.study.enqueue_trial(self.proposals.params(config), skip_if_exists=False)
        trial = self.study.ask()
        return trial, self.proposals.suggest(trial)

    def bind(self, stored: optuna.Trial, copy: optuna.Trial) -> optuna.Trial:
        """``stored``, whose results are from now on told to ``copy`` too."""
        self.copies[trial_id(stored)] = copy
        return stored

    def tell(self, trial: optuna.Trial, value: float | None = None, state: TrialState | None = None) -> None:
        """What the database's trial was told, told to its copy (or to ``trial`` itself, a copy
        never stored)."""
        stored = trial.study is not self.study
        copy = self.copies.pop(trial_id(trial), None) if stored else trial
        if copy is None:
            return
        if value is not None:
            self.study.tell(copy, value)
        else:
            self.study.tell(copy, state=state)
        if stored or state != TrialState.PRUNED:   # measured (a failure too), not merely proposed
            self.known.add(self._key(copy.params))

    def learn(self, config: Config, value: float | None) -> None:
        """Another process's result for ``config`` (None: failed), unless one is known here."""
        key, params = config.key, self.proposals.params(config)
        if key in self.known or self._key(params) != key:
            return   # known here, or not a point of this search's space: it teaches the sampler nothing
        distributions = self.proposals.distributions(config)
        if any(params[name] not in dist.choices for name, dist in distributions.items()):
            return
        self.study.add_trial(optuna.trial.create_trial(
            params=params, distributions=distributions, value=value,
            state=TrialState.COMPLETE if value is not None else FAILED))
        self.known.add(key)


class StudySession:
    """One study in a relational database, shared with any other process searching it: the
    trials in flight here send heartbeats, and a trial whose process stopped sending them is
    failed by whichever process notices (``lost(number, params)`` is called for it, once here)."""

    def __init__(self, url: str, name: str, strategy: Strategy, grace: float,
                 lost: Callable[[int, dict], None], proposals: Proposals, attempts: int = 3):
        self.name, self.grace, self.on_lost = name, grace, lost
        self.beat = heartbeat_interval(grace)
        self.flying: dict[int, optuna.Trial] = {}   # trial id -> trial, everything asked and not told
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        for attempt in range(attempts):
            try:
                with quiet_heartbeat():
                    self.storage = BatchedStorage(url, heartbeat_interval=self.beat, grace_period=int(math.ceil(grace)),
                                                  heartbeat_stale_trial_callback=self._stale)
                fast_sqlite(self.storage.engine)
                self.study = optuna.create_study(storage=self.storage, study_name=name, direction="maximize",
                                                 load_if_exists=True, sampler=strategy.sampler(constant_liar=True))
                self.study_id = self.storage.get_study_id_from_name(name)
                self.copy = StudyCopy(self.study, strategy.sampler(constant_liar=True), proposals)
                return
            except (sa.exc.IntegrityError, sa.exc.ProgrammingError) as e:
                # Processes starting together race to create Optuna's tables (a duplicate key, or on
                # PostgreSQL a type that already exists: a ProgrammingError); the loser retries, as
                # store._open_tables does for the results tables.
                if attempt == attempts - 1:
                    why = ("tables created concurrently by another process" if isinstance(e, sa.exc.IntegrityError)
                           else db_error(e, url))
                    raise GemmtuneError(f"cannot create the study {name!r} in {shown(url)}: {why}") from None
                time.sleep(0.5 * (attempt + 1))
            except Exception as e:  # storage errors come in many types; the message says which
                raise GemmtuneError(f"cannot open the study {name!r} in {shown(url)}: {db_error(e, url)}") from None

    def started(self, trial) -> None:
        self.flying[trial_id(trial)] = trial

    def ended(self, trial) -> None:
        self.flying.pop(trial_id(trial), None)

    def _stale(self, study, frozen) -> None:
        """Optuna failed a stale trial (its process stopped sending heartbeats)."""
        if trial_id(frozen) in self.flying:  # our own, late after a long pause: its result comes
            return
        self.on_lost(frozen.number, frozen.params)

    def heartbeat(self) -> None:
        for beating in self.flying:
            self.storage.record_heartbeat(beating)
        with quiet_heartbeat():
            optuna.storages.fail_stale_trials(self.study)
        for dead in self.storage.unbeaten_trial_ids(self.study_id, self.grace):
            if dead not in self.flying and self.storage.set_trial_state_values(dead, TrialState.FAIL):
                self._stale(self.study, self.storage.get_trial(dead))

    def close(self) -> None:
        self.storage.engine.dispose()
