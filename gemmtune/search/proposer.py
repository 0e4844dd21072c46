"""The proposer: what fills the trials of a search's or a replay's study
(``gemmtune.search.proposals`` spells a configuration as a trial's parameters; ``session`` opens
the study). The only module that asks and tells Optuna's studies (Optuna's private names are in
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
import random
from typing import Callable

import optuna
from optuna.trial import TrialState

from gemmtune.optuna_adapter import one_read, trial_id
from gemmtune.search.candidates import Unmeasured
from gemmtune.search.proposals import Proposals
from gemmtune.search.session import FAILED, StudyCopy
from gemmtune.space import Config
from gemmtune.strategies import ASK, Strategy

IN_FLIGHT = ("in_flight", "elsewhere")   # statuses of ``measured`` that are not results yet


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
