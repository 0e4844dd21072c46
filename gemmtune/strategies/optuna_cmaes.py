"""Optuna's CMA-ES as it comes (``CmaEsSampler`` with its defaults), through the plain ask/tell
loop: a second yardstick for ``gemmtune replay``, beside ``optuna-tpe`` and random.

CMA-ES searches numbers, so it sees each parameter as the position of its value (ordered as the
space lists them). It searches only the parameters every trial has: with several families, each
family's own parameters are left to its independent sampler (random), as Optuna does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gemmtune.strategies.base import Strategy

if TYPE_CHECKING:
    import optuna


class OptunaCmaEs(Strategy):
    name = "optuna-cmaes"
    commands = ("replay",)
    ordinal = True

    def sampler(self, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
        import optuna

        return optuna.samplers.CmaEsSampler(seed=self.seed, warn_independent_sampling=False)
