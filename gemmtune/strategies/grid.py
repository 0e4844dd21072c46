"""Grid: every valid configuration in the space's order, until none is left."""

from __future__ import annotations

from gemmtune.strategies.base import Strategy


class Grid(Strategy):
    name = "grid"
    commands = ("search",)   # a replay of a grid study by grid would find the best by its position
    allows_model_seeds = False
    exhaustive = True

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        self.order = None

    def propose(self, candidates):
        if self.order is None:   # listed once: the proposals walk it in order
            self.order = list(candidates.valid)
        return candidates.first_unmeasured(self.order)
