"""Every use of Optuna's private names, in one place: its public API has no way to do what these
do, and a change of its internals should break one module (``tests/test_optuna_adapter.py``
exercises each use against the installed Optuna; pyproject.toml allows 4.9 on, where RDBStorage
first takes ``heartbeat_stale_trial_callback``).

* ``BatchedStorage``: Optuna's relational storage, a trial's parameters written in one
  transaction (Optuna commits every ``suggest_*``: a dozen transactions a proposal, once most of
  the search process's time per trial), and the trials that died before their first heartbeat.
* ``one_read``: the study's trials read once for a whole proposal.
* ``start_running_trial``: a running trial created with its parameters in one write.
* ``trial_id``: the storage's id of a trial, which heartbeats and stale-trial checks take.
* ``GroupedTpe``: Optuna's grouped TPE for less (a bounded history, ``BoundedHistory``; each trial
  grouped, split and converted once), choosing among its candidates those a proposer takes.
"""

from __future__ import annotations

import contextlib
import copy
import heapq
import json
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import numpy as np
import optuna
from optuna.samplers._tpe import sampler as tpe_module
from optuna.samplers._tpe.sampler import _RELATIVE_PARAMS_KEY, _SYSTEM_ATTR_MAX_LENGTH
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import TrialState


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """The storage's id of a trial (``number`` counts within the study; the storage's heartbeat
    and state calls take the id)."""
    return trial._trial_id


def start_running_trial(study: optuna.Study, params: dict, distributions: dict,
                        batch: Callable = contextlib.nullcontext) -> optuna.Trial:
    """A running trial with ``params``, its parameters together in ``batch()`` (one transaction
    with ``BatchedStorage.batch``; enqueue_trial, ask and the suggestions take five, and a template
    trial looks each parameter's earlier distribution up: 42 ms for 15 parameters on a 2-core
    machine). The sampler sees the trial as it sees an enqueued one."""
    storage = study._storage
    created = storage.create_new_trial(study._study_id)
    with batch():
        for name, value in params.items():
            dist = distributions[name]
            storage.set_trial_param(created, name, dist.to_internal_repr(value), dist)
    return optuna.Trial(study, created)


@contextlib.contextmanager
def one_read(study: optuna.Study):
    """The study's trials read once for the whole block (one ask and its suggestions): with the
    constant liar, Optuna's TPE reads them afresh for each group it samples (five rounds of queries
    a proposal, once the search process's largest cost per trial), and within one proposal
    nothing else is told or asked."""
    read = study._get_trials
    trials: list | None = None

    def trials_once() -> list:
        nonlocal trials
        if trials is None:
            trials = read(deepcopy=False, use_cache=False)
        return trials

    with _reading(study, trials_once):
        yield


@contextlib.contextmanager
def _reading(study: optuna.Study, trials: Callable[[], list]):
    """Within the block the study's reads of its trials (``Study._get_trials``, which Optuna's
    samplers call) filter ``trials()`` instead; a read already replaced by an outer block is put
    back after."""
    def get_trials(deepcopy: bool = True, states=None, use_cache: bool = False):
        picked = trials() if states is None else [t for t in trials() if t.state in states]
        return copy.deepcopy(picked) if deepcopy else picked

    outer = vars(study).get("_get_trials")
    study._get_trials = get_trials
    try:
        yield
    finally:
        if outer is None:
            del study._get_trials
        else:
            study._get_trials = outer


HISTORY = 1000   # finished trials TPE's estimators see besides the best (``BoundedHistory``)
BEST = 50        # best completed trials always among them: TPE's "good" group is at most 25


class BoundedHistory:
    """What TPE reads of a study: at most the ``best`` best completed trials, the ``keep``
    latest other finished ones, and every running one (``view``). Unbounded, a long search at a
    small problem slowed from 9 trials a second to 2 in fifteen minutes on the H200. TPE's "good"
    group (its 25 best past 250 trials) is kept; old "bad" trials are forgotten, as a
    sliding-window TPE does; the best are updated from the trials finished since the last read."""

    def __init__(self, keep: int = HISTORY, best: int = BEST):
        self.keep, self.best = keep, best
        self.study = None
        self.settled = 0                         # leading trials finished and counted in ``top``
        self.top: list[tuple] = []               # (value, number, trial): the best of them, a heap
        self.last: tuple | None = None           # (the trials read, what was kept of them)

    @contextlib.contextmanager
    def view(self, study: optuna.Study):
        trials = study._get_trials(deepcopy=False, states=None, use_cache=False)
        if study is not self.study or len(trials) < self.settled:
            self.study, self.settled, self.top, self.last = study, 0, [], None
        if len(trials) <= self.keep + self.best:
            yield
            return
        # A proposal views the study once per group it samples, all within one read (``one_read``
        # hands out the same list each time): what to keep is worked out once for that list.
        if self.last is None or self.last[0] is not trials:
            self.last = trials, self._kept(trials)
        with _reading(study, lambda: self.last[1]):
            yield

    def _kept(self, trials: list) -> list:
        while self.settled < len(trials) and trials[self.settled].state != TrialState.RUNNING:
            self._count(trials[self.settled], self.top)
            self.settled += 1
        # From the first running trial on: counted afresh each time, as their states may change.
        tail, top = trials[self.settled:], list(self.top)
        for t in tail:
            self._count(t, top)
        latest = []
        for t in reversed(trials):
            if len(latest) == self.keep:
                break
            if t.state != TrialState.RUNNING:
                latest.append(t)
        chosen = {t.number: t for *_, t in top} | {t.number: t for t in latest}
        running = [t for t in tail if t.state == TrialState.RUNNING]
        return sorted([*chosen.values(), *running], key=lambda t: t.number)

    def _count(self, trial, top: list) -> None:
        if trial.state == TrialState.COMPLETE:
            if len(top) < self.best:
                heapq.heappush(top, (trial.value, trial.number, trial))
            elif trial.value > top[0][0]:
                heapq.heapreplace(top, (trial.value, trial.number, trial))


class _Observed:
    """Finished trials' internal values for one set of parameters, a column per parameter and a
    row per trial (``at``: trial number -> row; -1 for a trial that lacks one of them)."""

    def __init__(self):
        self.used, self.at, self.data = 0, {}, None   # rows used, at, the columns (numpy arrays)

    def add(self, row: tuple) -> int:
        if self.data is None:   # each column of the type Optuna's would be (int for a category)
            self.data = [np.empty(256, dtype=np.asarray(v).dtype) for v in row]
        elif self.used == len(self.data[0]):
            self.data = [np.concatenate([column, np.empty_like(column)]) for column in self.data]
        for column, value in zip(self.data, row):
            column[self.used] = value
        self.used += 1
        return self.used - 1

    def columns(self, names: tuple, rows: list[int]) -> dict:
        if not rows:   # as Optuna's: empty float arrays
            return {name: np.asarray(()) for name in names}
        index = np.asarray(rows)
        return {name: column[index] for name, column in zip(names, self.data)}


class GroupedTpe(optuna.samplers.TPESampler):
    """``TPESampler(multivariate=True, group=True, ...)`` for less, proposing what Optuna's does
    (``tests/test_optuna_adapter.py`` compares them; docs/search.md, "The search pipeline",
    measures each part):

    * each completed trial is added to the parameter groups once, not again for each proposal;
    * with ``choice`` (gemmtune's ``KERNEL``, which picks a family) only the chosen family's
      group is sampled: Optuna samples every group and the trial uses one (the same
      distribution, another random stream);
    * its estimators see a bounded history (``BoundedHistory``): a proposal costs the same in
      the tenth thousand trials as in the first;
    * the trials are split into good and bad once per proposal (``_split_once``), and a
      finished trial's parameters and constraints are converted once (``_get_internal_repr``);
    * with ``accept`` (set by the proposer for each proposal) it takes the best candidate that
      ``accept`` takes, where Optuna takes the best of all (``_compute_acquisition_func``)."""

    def __init__(self, choice: str | None = None, **kwargs):
        super().__init__(multivariate=True, group=True, **kwargs)
        self._grouped: set[int] = set()   # numbers of the trials already in the groups
        self._grouped_in = None           # the study they are trials of
        self._settled = 0                 # leading trials of it finished, and so looked at for good
        self._history = BoundedHistory()
        self._choice = choice
        self._converted_in = None   # the study whose finished trials' conversions are kept:
        self._rows: dict[tuple, _Observed] = {}   # parameter names -> the finished trials' internal values
        self._infeasible: dict[int, float] = {}   # trial number -> its constraints' score
        self.accept: Callable[[dict], bool] | None = None   # set per proposal (``_compute_acquisition_func``)
        self._sampling: tuple[dict, dict] | None = None     # (parameters chosen, the group's space) while sampling

    def sample_relative(self, study, trial, search_space: dict) -> dict:
        with self._history.view(study), self._split_once(study):
            return self._sample_groups(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        with self._history.view(study), self._split_once(study):
            return super().sample_independent(study, trial, param_name, param_distribution)

    @contextlib.contextmanager
    def _split_once(self, study):
        """Within the block TPE's split of the trials into good and bad (``_split_trials``, which
        ``_sample`` calls for every group) is worked out once per set of trials, and a finished
        trial's constraints looked up once: nothing is told while a proposal samples."""
        if study is not self._converted_in:
            self._converted_in, self._rows, self._infeasible = study, {}, {}
        split_trials, infeasible_score, memo = tpe_module._split_trials, tpe_module._get_infeasible_trial_score, {}

        def split(study, trials, n_below, *rest):
            key = (n_below, *rest, tuple(t.number for t in trials))
            if key not in memo:
                memo[key] = split_trials(study, trials, n_below, *rest)
            below, above = memo[key]
            return list(below), list(above)

        def infeasible(trial):   # only finished trials are asked
            score = self._infeasible.get(trial.number)
            if score is None:
                score = self._infeasible[trial.number] = infeasible_score(trial)
            return score

        tpe_module._split_trials, tpe_module._get_infeasible_trial_score = split, infeasible
        try:
            yield
        finally:
            tpe_module._split_trials, tpe_module._get_infeasible_trial_score = split_trials, infeasible_score

    def _get_internal_repr(self, trials, search_space, *study) -> dict:
        """Optuna's, each finished trial's values converted once (with its own distribution, which
        Optuna keeps equal in a study) and kept in columns, from which a proposal's trials are
        picked by index (``_Observed``). Optuna 5 passes the study; 4.9 does not."""
        names = tuple(search_space)
        observed = self._rows.get(names)
        if observed is None:
            observed = self._rows[names] = _Observed()
        at, picked, running = observed.at, [], []
        for trial in trials:
            if trial.state.is_finished():
                i = at.get(trial.number)
                if i is None:
                    params, dists = trial.params, trial.distributions
                    i = at[trial.number] = (observed.add(tuple(dists[n].to_internal_repr(params[n]) for n in names))
                                            if params.keys() >= search_space.keys() else -1)
            else:   # running: its values may still change, so they are not kept
                running.append((len(picked), trial))
                i = None
            picked.append(i)
        kept = observed.used
        try:
            for place, trial in running:
                params = self._get_params(trial, *study)
                picked[place] = (observed.add(tuple(search_space[n].to_internal_repr(params[n]) for n in names))
                                 if params.keys() >= search_space.keys() else -1)
            return observed.columns(names, [i for i in picked if i >= 0])
        finally:
            observed.used = kept   # the running trials' rows are dropped

    def _sample_groups(self, study, trial, search_space: dict) -> dict:
        spaces = self._search_space_group.search_spaces
        if self._choice is None or not any(self._choice in s for s in spaces):
            self._sampling = {}, search_space
            params, self._sampling = super().sample_relative(study, trial, search_space), None
            return params
        params: dict = {}
        for space in sorted(spaces, key=lambda s: self._choice not in s):   # the choice first
            if self._choice not in space and not all(name.startswith(f"{params.get(self._choice)}.") for name in space):
                continue
            wanted = {name: d for name, d in sorted(space.items()) if not d.single() and name in search_space}
            self._sampling = (dict(params), wanted) if self._choice not in space else None
            params.update(self._sample_relative(study, trial, wanted))
        self._sampling = None
        if params and self._constant_liar:   # as Optuna shares them with other processes
            text = json.dumps(params)
            for i in range(0, len(text), _SYSTEM_ATTR_MAX_LENGTH):
                study._storage.set_trial_system_attr(trial._trial_id, f"{_RELATIVE_PARAMS_KEY}:{i // _SYSTEM_ATTR_MAX_LENGTH}",
                                                     text[i:i + _SYSTEM_ATTR_MAX_LENGTH])
        return params

    def _compute_acquisition_func(self, samples, mpe_below, mpe_above):
        """Optuna's scores of its candidates, those that ``accept`` refuses (with the parameters
        chosen before; the proposer refuses invalid configurations, each a whole proposal more)
        below every other; all as Optuna's where it refuses every one."""
        scores = super()._compute_acquisition_func(samples, mpe_below, mpe_above)
        chosen, space = self._sampling or ({}, {})
        if self.accept is None or not space or not samples.keys() <= space.keys():
            return scores
        ok = np.array([self.accept({**chosen, **{n: space[n].to_external_repr(v[i]) for n, v in samples.items()}})
                       for i in range(len(scores))])
        return np.where(ok, scores, -np.inf) if ok.any() else scores

    def infer_relative_search_space(self, study, trial) -> dict:
        # Only the trials from the first one unfinished at the last proposal on are looked at:
        # reading every completed trial cost a third of a proposal in a study of ten thousand.
        trials = study._get_trials(deepcopy=False, states=None, use_cache=False)
        if study is not self._grouped_in or len(trials) < self._settled:
            self._grouped_in, self._settled, self._grouped = study, 0, set()
        groups = self._group_decomposed_search_space._search_space
        added = self._search_space_group is None
        for done in trials[self._settled:]:
            if done.state == TrialState.COMPLETE and done.number not in self._grouped:
                groups.add_distributions(done.distributions)
                self._grouped.add(done.number)
                added = True
        while self._settled < len(trials) and trials[self._settled].state.is_finished():
            self._settled += 1
        if added:   # else the groups are as the last proposal copied them
            self._search_space_group = copy.deepcopy(groups)   # what sample_relative reads
        return {name: dist for space in self._search_space_group.search_spaces
                for name, dist in sorted(space.items()) if not dist.single()}


class BatchedStorage(optuna.storages.RDBStorage):
    """``optuna.storages.RDBStorage`` with ``batch()``; takes the same arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._queued: list[Callable] | None = None
        self._read: dict[int, Any] = {}   # trial id -> its row, read once while a batch is written

    @contextlib.contextmanager
    def batch(self):
        """Queue parameter and user-attribute writes until the block ends, then commit them as
        one transaction (also when the block raises: what was suggested stays suggested)."""
        if self._queued is not None:  # nested: the outer block commits
            yield
            return
        self._queued = []
        try:
            yield
        finally:
            queued, self._queued = self._queued, None
            if queued:
                self._read = {}
                try:
                    with _create_scoped_session(self.scoped_session) as session:
                        for write in queued:
                            write(session)
                finally:
                    self._read = {}

    # Optuna's cached storage calls this one for every suggested parameter.
    def _set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                         distribution, previous_distribution) -> None:
        if self._queued is None:
            return super()._set_trial_param(trial_id, param_name, param_value_internal, distribution,
                                            previous_distribution)
        self._queued.append(lambda session: self._add_param(
            session, trial_id, param_name, param_value_internal, distribution, previous_distribution))

    def _add_param(self, session, trial_id: int, name: str, value: float, distribution, previous) -> None:
        """``_set_trial_param_without_commit`` with the trial read once per batch (Optuna's reads
        it for every parameter); without the parameter's earlier distribution, Optuna's own."""
        if previous is None:
            return self._set_trial_param_without_commit(session, trial_id, name, value, distribution, None)
        trial = self._read.get(trial_id)   # held here: the session keeps only weak references
        if trial is None:
            trial = self._read[trial_id] = models.TrialModel.find_or_raise_by_id(trial_id, session)
        self.check_trial_is_updatable(trial_id, trial.state)
        optuna.distributions.check_distribution_compatibility(previous, distribution)
        session.add(models.TrialParamModel(trial_id=trial_id, param_name=name, param_value=value,
                                           distribution_json=optuna.distributions.distribution_to_json(distribution)))

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        if self._queued is None:
            return super().set_trial_user_attr(trial_id, key, value)
        self._queued.append(lambda session: self._set_trial_attr_without_commit(
            session, models.TrialUserAttributeModel, trial_id, key, value))

    def unbeaten_trial_ids(self, study_id: int, grace: float) -> list[int]:
        """Trials RUNNING for more than ``grace`` seconds without a heartbeat: their process died
        before the first beat, and Optuna's stale-trial check passes over them."""
        started, now = _trial_start()
        since = now - timedelta(seconds=grace)
        with _create_scoped_session(self.scoped_session) as session:
            return [trial_id for (trial_id,) in session.query(models.TrialModel.trial_id).filter(
                models.TrialModel.study_id == study_id, models.TrialModel.state == TrialState.RUNNING,
                started < since, ~models.TrialModel.heartbeats.any())]


def _trial_start():
    """The column of a trial's start and the time now as written there (Optuna 5: UTC,
    ``_datetime_start_utc``; Optuna 4: local time, ``datetime_start``; both without a zone)."""
    utc = getattr(models.TrialModel, "_datetime_start_utc", None)
    if utc is not None:
        return utc, datetime.now(timezone.utc).replace(tzinfo=None)
    return models.TrialModel.datetime_start, datetime.now()
