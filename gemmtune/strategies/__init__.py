"""Search strategies, by name: what ``--sampler`` (search) and ``--samplers`` (replay) offer.
A new strategy is a module beside these and one entry here."""

from __future__ import annotations

from gemmtune.errors import GemmtuneError
from gemmtune.strategies.base import ASK, MAX_FREE_PROPOSALS, Strategy
from gemmtune.strategies.grid import Grid
from gemmtune.strategies.learned import Learned
from gemmtune.strategies.optuna_cmaes import OptunaCmaEs
from gemmtune.strategies.optuna_tpe import OptunaTpe
from gemmtune.strategies.random_pick import RandomPick
from gemmtune.strategies.tpe import Tpe
from gemmtune.strategies.tpe_seeded import TpeSeeded

STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (Tpe, RandomPick, Grid, TpeSeeded, Learned, OptunaTpe,
                                                                OptunaCmaEs)}


# What gemmtune search uses without --sampler, and what gemmtune replay's "default" replays.
DEFAULT = "learned"


def names(command: str) -> list[str]:
    """The strategies ``command`` (search or replay) offers, in the registry's order."""
    return [name for name, s in STRATEGIES.items() if command in s.commands]


def make_strategy(name: str, seed: int | None, command: str = "search") -> Strategy:
    if name not in names(command):
        raise GemmtuneError(f"unknown sampler {name!r}: use one of {', '.join(names(command))}")
    return STRATEGIES[name](seed)


__all__ = ["ASK", "DEFAULT", "MAX_FREE_PROPOSALS", "STRATEGIES", "Strategy", "make_strategy", "names"]
