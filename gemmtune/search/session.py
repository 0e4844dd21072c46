"""The Optuna session: the study a search or a replay runs in, and the proposer that fills its
trials (``gemmtune.search.proposals`` spells a configuration as a trial's parameters). The
only module that asks, tells and opens Optuna's studies (Optuna's private names are in
``optuna_adapter``).

Driven with ``study.ask()`` / ``study.tell()`` so that gemmtune decides what a trial costs:

* A proposal that breaks a constraint is told to Optuna as PRUNED (TPE ranks pruned trials
  below every completed one, so it learns to avoid them) without any build, and does not count
  against ``--trials``. A measured configuration that failed (its build, its launch, its check)
  is told PRUNED too (``FAILED``), so that TPE learns where configurations fail as it learns
  where they are invalid; told FAIL, as Optuna's own ``optimize`` tells an exception, TPE would
  not see them, and kept proposing launches a device refuses (docs/search.md, "The search pipeline").
  A proposal measured before in this study does not count either: Optuna is told the earlier
  value (or that it failed), and nothing is rebuilt; the strategy may name what to measure
  instead (``Strategy.repeated``: TPE's takes an unmeasured neighbour).
* What to propose is the strategy's choice (``gemmtune.strategies``): a configuration of its
  own, or Optuna's sampler's.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
import warnings
from typing import Callable

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from gemmtune.db.connect import fast_sqlite
from gemmtune.db.urls import db_error, shown
from gemmtune.errors import GemmtuneError
from gemmtune.optuna_adapter import BatchedStorage, one_read, trial_id
from gemmtune.search.candidates import Unmeasured
from gemmtune.search.proposals import Proposals
from gemmtune.space import Config
from gemmtune.strategies import ASK, Strategy

IN_FLIGHT = ("in_flight", "elsewhere")   # statuses of ``measured`` that are not results yet
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


@contextlib.contextmanager
def accepting(sampler, proposals: Proposals, is_valid: Callable[[Config], bool]):
    """Within the block a sampler that can choose among its candidates (``GroupedTpe.accept``)
    takes its best valid one, sparing the proposal an invalid choice would cost. Measured ones
    stay acceptable: told their value again, repeats sharpen TPE's estimate of a good region, and
    refusing them too cost the replays trials (docs/search.md, "Tried and not kept")."""
    if not hasattr(sampler, "accept"):
        yield
        return

    def accept(params: dict) -> bool:   # a candidate leaves out the parameters of one value
        config = proposals.decode(params, complete=True)
        return config is not None and is_valid(config)

    sampler.accept = accept
    try:
        yield
    finally:
        sampler.accept = None


def _finish(trial: optuna.Trial, value: float | None, state: TrialState) -> None:
    """``study.tell`` for a trial of the database's study, whose sampler is the copy's: the
    storage's own write, without the two reads of the trial that ``tell`` makes to check it:
    telling took 2.7-3.0 ms of the search process's 6.9-7.6 ms of database work a trial on a
    2-core machine, and takes 0.9 (``tools/trial_cost.py``). A trial already finished
    raises ``UpdateFinishedTrialError``, as ``tell`` did."""
    trial.storage.set_trial_state_values(trial_id(trial), TrialState.COMPLETE if value is not None else state,
                                         None if value is None else [float(value)])


class Proposer(Unmeasured):
    """The next candidate to measure, by the rules in the module docstring.

    ``measured`` maps configuration keys to (status, GFLOP/s or None) and is shared with the
    caller, who adds each measured candidate; a proposal of a key already there is told that
    value again, or PRUNED while it is in flight ("in_flight" here, "elsewhere" in another
    process). ``pending`` configurations are proposed first (``Proposals.start``), then the
    ``strategy``'s. ``claim(key, trial)``, where given, takes a configuration for this process
    (False: another process has it; ``refresh()`` then reads what the others measured into
    ``measured``). ``batch()``, where given, groups a proposal's storage writes into one
    transaction (``BatchedStorage.batch``). With ``copy`` (a ``StudyCopy`` of ``study``)
    proposals are sampled from the copy, and only those to measure are written to ``study``.
    Used by the live search and by ``gemmtune replay``, so that both follow one set of rules.
    """

    def __init__(self, study, proposals: Proposals, valid, measured: dict, strategy: Strategy,
                 rng: random.Random, pending: list[Config], why_invalid=None, claim: Callable | None = None,
                 refresh: Callable | None = None, batch: Callable = contextlib.nullcontext,
                 is_valid: Callable[[Config], bool] | None = None,
                 copy: StudyCopy | None = None):
        self.study, self.proposals, self.valid, self.measured = study, proposals, valid, measured
        self.space = proposals.space
        self.copy = copy   # where proposals are sampled, if not in ``study`` itself
        self.strategy, self.rng, self.pending, self.why_invalid = strategy, rng, pending, why_invalid
        self.claim, self.refresh, self.batch = claim, refresh, batch
        if is_valid is None:
            valid_keys = {c.key for c in valid}
            is_valid = lambda c: c.key in valid_keys  # noqa: E731
        # ``is_valid`` (whether a configuration is one of ``valid``) by a rule instead of a set
        # of keys: a set costs 1.4 KB a configuration, 3.4 GB for the 2.36 million of s on PoCL.
        self.is_valid = is_valid
        self.free = 0   # proposals in a row that cost nothing (invalid or measured before)

    def tell_known(self, trial, status: str, value: float | None) -> None:
        """A proposal of a configuration measured before (or in flight) told so: nothing measured."""
        in_flight = status in IN_FLIGHT
        with self.batch():
            trial.set_user_attr("skipped", "in flight" if in_flight else "measured before")
        self._tell(trial, value, FAILED)   # in flight (no value yet), or failed before
        self.free += 1

    def _tell(self, trial, value: float | None, state: TrialState) -> None:
        """``value``, or where it is None ``state``, told to the study and the sampler's copy
        (only to the copy, a proposal never stored: invalid, or measured before)."""
        if self.copy is None:   # a study Optuna's sampler proposes from itself (a replay's)
            if value is not None:
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=state)
            return
        if trial.study is self.copy.study:
            self.copy.tell(trial, value, state)
            return
        try:
            _finish(trial, value, state)
        finally:
            self.copy.tell(trial, value, state)

    def _propose(self):
        """(trial, config, invalid), or None when the strategy has nothing left."""
        study = self.study
        if not self.pending:
            choice = self.strategy.propose(self)
            if choice is None:
                return None
            if choice is not ASK:
                self.pending.append(choice)
        config = self.pending.pop(0) if self.pending else None
        if self.copy is not None:
            trial, config = self.copy.ask(config)   # stored once it is to be measured (``_store``)
        elif config is not None:
            trial = self.proposals.start(study, config, self.batch)
        with one_read(study):
            if config is None:
                trial = study.ask()
            with self.batch():
                if config is None:
                    with accepting(trial.study.sampler, self.proposals, self.is_valid):
                        config = self.proposals.suggest(trial)
                invalid = not self.is_valid(config)
                if invalid:
                    broken = self.why_invalid(config) if self.why_invalid else None
                    trial.set_user_attr("skipped", f"invalid: {broken.name if broken else 'not in space'}")
        return trial, config, invalid

    def next(self):
        """(trial, config, key) of a valid, unmeasured configuration, or None when none is left.
        The key is marked "in_flight" in ``measured``."""
        measured = self.measured
        while True:
            proposed = self._propose()
            if proposed is None:
                return None
            trial, config, invalid = proposed
            key = config.key
            if invalid:
                self._tell(trial, None, TrialState.PRUNED)
                self.free += 1
                continue
            if key in measured:
                self.tell_known(trial, *measured[key])
                instead = None if measured[key][0] in IN_FLIGHT else self.strategy.repeated(config, self)
                if instead is not None:
                    self.pending.append(instead)
                continue
            if self.copy is not None:   # sampled from the copy: the study's own trial, bound to it
                trial = self.copy.bind(self.store(config), trial)
            if not self.claimed(key, trial):
                continue
            self.free = 0
            measured[key] = ("in_flight", None)
            return trial, config, key

    def claimed(self, key: tuple, trial) -> bool:
        """Whether this process measures ``key`` (``trial`` stored for it); if not, ``trial`` is told so."""
        if self.claim is None or self.claim(key, trial):
            return True
        if self.refresh is not None:
            self.refresh()
        self.measured.setdefault(key, ("elsewhere", None))
        self.tell_known(trial, *self.measured[key])
        return False

    def store(self, config: Config):
        """A running trial of ``config`` written to the study now."""
        return self.proposals.start(self.study, config, self.batch)

    def tell(self, trial, config: Config, value: float | None, status: str | None = None) -> None:
        """A measured candidate's result (GFLOP/s, None for a failure), told to both."""
        self.tell_study(trial, value, status)
        self.strategy.tell(config, value)

    def tell_study(self, trial, value: float | None, status: str | None = None) -> None:
        """The result told to the study (and its copy), ``status`` kept on the trial unless ok."""
        try:
            if status not in (None, "ok"):   # a complete trial says ok: one write a trial less
                trial.set_user_attr("status", status)
            self._tell(trial, value, FAILED)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            pass  # failed as stale while this process was paused past the grace period; its row stands

    def abandon(self, trial, status: str) -> None:
        """A candidate dropped before it was measured: told failed, with why (FAIL: nothing was
        learned about the configuration)."""
        trial.set_user_attr("status", status)
        self._tell(trial, None, TrialState.FAIL)


# The sampler's copy of a study kept in a database. Optuna's samplers read the whole study for
# every proposal, and on a relational storage that read and the writes around it are most of a
# proposal's time: 41-54 ms where the same TPE takes 2-7 ms on a study in memory
# (docs/search.md, "The search pipeline"). So a search proposes from a copy in memory and
# writes each trial to the database once, with its parameters, as before: the database's study
# stays the record that other processes share and a later search resumes. The copy starts from
# the database's finished trials and learns what other processes measure from the results rows
# (``learn``), which the search reads anyway.
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
