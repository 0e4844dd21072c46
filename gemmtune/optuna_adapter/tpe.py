"""gemmtune's grouped TPE (``GroupedTpe``): what Optuna's proposes, sampled only in the chosen
family's group, from a bounded history, and among its candidates those a proposer takes."""

from __future__ import annotations

import json
from typing import Callable

import numpy as np
from optuna.samplers._tpe.sampler import _RELATIVE_PARAMS_KEY, _SYSTEM_ATTR_MAX_LENGTH

from gemmtune.optuna_adapter.history import BoundedHistory
from gemmtune.optuna_adapter.incremental import IncrementalTpe


class GroupedTpe(IncrementalTpe):
    """``TPESampler(multivariate=True, group=True, ...)`` for less, proposing what Optuna's does
    (``tests/test_optuna_adapter.py`` compares them; docs/search.md, "The search pipeline",
    measures each part):

    * each trial's work is done once, not again for each proposal (``IncrementalTpe``);
    * with ``choice`` (gemmtune's ``KERNEL``, which picks a family) only the chosen family's
      group is sampled: Optuna samples every group and the trial uses one (the same
      distribution, another random stream);
    * its estimators see a bounded history (``BoundedHistory``): a proposal costs the same in
      the tenth thousand trials as in the first;
    * with ``accept`` (set by the proposer for each proposal) it takes the best candidate that
      ``accept`` takes, where Optuna takes the best of all (``_compute_acquisition_func``)."""

    def __init__(self, choice: str | None = None, **kwargs):
        super().__init__(multivariate=True, group=True, **kwargs)
        self._history = BoundedHistory()
        self._choice = choice
        self.accept: Callable[[dict], bool] | None = None   # set per proposal (``_compute_acquisition_func``)
        self._sampling: tuple[dict, dict] | None = None     # (parameters chosen, the group's space) while sampling

    def sample_relative(self, study, trial, search_space: dict) -> dict:
        with self._history.view(study), self._split_once(study):
            return self._sample_groups(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        with self._history.view(study), self._split_once(study):
            return super().sample_independent(study, trial, param_name, param_distribution)

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
