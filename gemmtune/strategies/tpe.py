"""TPE: Optuna's tree-structured Parzen estimator decides what to measure."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from gemmtune.strategies.base import Strategy

REPEATS = 3   # free proposals in a row before a repeat is answered with its neighbour

if TYPE_CHECKING:
    import optuna


class Tpe(Strategy):
    name = "tpe"

    def sampler(self, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
        import optuna

        from gemmtune.optuna_adapter import GroupedTpe  # TPESampler, multivariate and grouped

        # Arguments spelled out: Optuna 5 changed TPE's defaults, and results should not move with
        # them. With several candidates in flight, the constant liar keeps TPE from proposing them
        # again. group: each kernel family's parameters exist only with its KERNEL value; grouped,
        # TPE models each family's parameters jointly instead of sampling all but KERNEL one by
        # one, and asks cost less: with the constant liar, every sampling reads the study afresh.
        with warnings.catch_warnings():  # "group is experimental": not the user's concern
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # KERNEL picks the family (search.proposals.Proposals): only the chosen family's group is sampled.
            return GroupedTpe(choice="KERNEL", n_startup_trials=10, n_ei_candidates=24, constant_liar=constant_liar,
                              seed=self.seed)

    def repeated(self, config, candidates):
        # Once TPE has found a good region it proposes what it measured there again and again
        # (each repeat told its value again sharpens its estimate of that region): runs of up
        # to MAX_FREE_PROPOSALS asks late in a search, each a full TPE proposal. After a few,
        # one step away from the repeat is where it points; before, TPE's own next choice.
        return candidates.unmeasured_neighbour(config) if candidates.free >= REPEATS else None
