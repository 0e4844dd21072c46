"""Random: each candidate drawn uniformly from the valid, unmeasured configurations. Drawn from
the product of the parameters' values instead, half the proposals or more would break a
constraint, and each costs the database as much as a measured one."""

from __future__ import annotations

from gemmtune.strategies.base import Strategy


class RandomPick(Strategy):
    name = "random"

    def propose(self, candidates):
        return candidates.random_unmeasured()
