"""Optuna's TPE as it comes (``TPESampler`` with its defaults), through the plain ask/tell loop:
the yardstick ``gemmtune replay`` compares the other strategies with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gemmtune.strategies.base import Strategy

if TYPE_CHECKING:
    import optuna


class OptunaTpe(Strategy):
    name = "optuna-tpe"
    commands = ("replay",)

    def sampler(self, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
        import optuna

        return optuna.samplers.TPESampler(seed=self.seed)
