"""How a configuration becomes an Optuna trial's parameters and back: one categorical parameter
per kernel parameter (named ``FAMILY.PARAM`` with several families, the family itself as
``KERNEL``), or its value's position for samplers that search numbers."""

from __future__ import annotations

import contextlib
from typing import Callable

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from gemmtune.errors import GemmtuneError
from gemmtune.optuna_adapter import start_running_trial
from gemmtune.space import Config, Space


class Proposals:
    """Maps configurations to Optuna parameters and back. Each parameter is a category, or with
    ``ordinal`` the position of its value (0, 1, ...), for samplers that search numbers (CMA-ES
    drops categories from its search); the family stays a category either way."""

    def __init__(self, space: Space, ordinal: bool = False):
        self.space = space
        self.multi = len(space.families) > 1
        self.ordinal = ordinal

    def name(self, kernel: str, param: str) -> str:
        return f"{kernel}.{param}" if self.multi else param

    @property
    def kernels(self) -> list[str]:
        """The values of the KERNEL parameter (present only with several families)."""
        return [fs.family.name for fs in self.space.families]

    def suggest(self, trial: optuna.Trial) -> Config:
        kernel = self.space.families[0].family.name
        if self.multi:
            kernel = trial.suggest_categorical("KERNEL", self.kernels)
        fs = self.space.family(kernel)
        if self.ordinal:
            return Config.of(kernel, {p: values[trial.suggest_int(self.name(kernel, p), 0, len(values) - 1)]
                                      for p, values in fs.values.items()})
        return Config.of(kernel, {p: trial.suggest_categorical(self.name(kernel, p), values)
                                  for p, values in fs.values.items()})

    def decode(self, params: dict, complete: bool = False) -> Config | None:
        """The configuration of a trial's Optuna parameters (None if it has none of this space);
        with ``complete``, a parameter of one value may be missing (samplers leave those out)."""
        kernel = params.get("KERNEL", self.space.families[0].family.name)
        try:
            fs = self.space.family(kernel)
            only = {p: values[0] if not self.ordinal else 0 for p, values in fs.values.items()
                    if complete and len(values) == 1}
            given = {p: params[n] if (n := self.name(kernel, p)) in params or p not in only else only[p]
                     for p in fs.values}
        except (KeyError, GemmtuneError):
            return None
        if self.ordinal:
            if not all(0 <= i < len(fs.values[p]) for p, i in given.items()):
                return None
            given = {p: fs.values[p][i] for p, i in given.items()}
        return Config.of(kernel, given)

    def params(self, config: Config) -> dict:
        """``config`` as a trial's parameters."""
        values = self.space.family(config.kernel).values
        params = {self.name(config.kernel, p): values[p].index(v) if self.ordinal else v for p, v in config.items}
        return {**params, "KERNEL": config.kernel} if self.multi else params

    def distributions(self, config: Config) -> dict:
        dists = {self.name(config.kernel, p): IntDistribution(0, len(values) - 1) if self.ordinal
                 else CategoricalDistribution(values)
                 for p, values in self.space.family(config.kernel).values.items()}
        return {**dists, "KERNEL": CategoricalDistribution(self.kernels)} if self.multi else dists

    def start(self, study: optuna.Study, config: Config, batch: Callable = contextlib.nullcontext) -> optuna.Trial:
        """A running trial of ``config``, its parameters written together in ``batch()``."""
        return start_running_trial(study, self.params(config), self.distributions(config), batch)
