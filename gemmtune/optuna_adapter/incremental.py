"""Optuna's grouped TPE with each trial's work done once (``IncrementalTpe``): a proposal adds
only the trials finished since the last one to the parameter groups, splits the trials into good
and bad once, and converts a finished trial's parameters and constraints once, where Optuna does
all of it again for every group of every proposal."""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import optuna
from optuna.samplers._tpe import sampler as tpe_module
from optuna.trial import TrialState


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


class IncrementalTpe(optuna.samplers.TPESampler):
    """``TPESampler(group=True, ...)`` proposing what Optuna's does, for less; takes the same
    arguments. A subclass wraps each proposal's sampling (``sample_relative``,
    ``sample_independent``) in ``_split_once``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._grouped: set[int] = set()   # numbers of the trials already in the groups
        self._grouped_in = None           # the study they are trials of
        self._settled = 0                 # leading trials of it finished, and so looked at for good
        self._converted_in = None   # the study whose finished trials' conversions are kept:
        self._rows: dict[tuple, _Observed] = {}   # parameter names -> the finished trials' internal values
        self._infeasible: dict[int, float] = {}   # trial number -> its constraints' score

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
