"""What a search strategy is: it proposes the next configuration to measure and is told each
result. The search and ``gemmtune replay`` drive every strategy through
``gemmtune.search.proposer.Proposer``, which owns the rules common to all of them (invalid
proposals, configurations measured before, claims of other processes)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Protocol, Sequence

# optuna is imported where a sampler is made: the command line reads this registry, and most
# commands never search.
if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from gemmtune.models.learned import CostModel, DeviceProblem
    from gemmtune.space import Config

MAX_FREE_PROPOSALS = 25   # invalid or already-measured proposals in a row before a random pick


class ASK:
    """What ``propose`` returns to let the Optuna sampler choose (``study.ask``)."""


class Candidates(Protocol):
    """What a strategy may know of the valid space while it proposes."""

    rng: random.Random
    valid: Sequence[Config]         # in the space's order
    free: int                       # proposals in a row that cost nothing (invalid or measured before)

    def unmeasured(self) -> list[Config]: ...
    def random_unmeasured(self) -> Config | None: ...
    def sample_unmeasured(self, count: int) -> list[Config]: ...
    def first_unmeasured(self, order: Sequence[Config]) -> Config | None: ...
    def unmeasured_neighbour(self, config: Config) -> Config | None: ...
    def unmeasured_children(self, parents: Sequence[Config], each: int) -> list[Config]: ...


class Strategy:
    """A way to choose configurations. A subclass sets ``name`` and overrides what differs;
    registering it in ``gemmtune.strategies.STRATEGIES`` puts it on the command line.

    ``commands``: where it is offered (``search`` measures, ``replay`` looks results up).
    ``model_seeded``: whether the model's best predictions are measured first (in a search,
    ``--no-seed`` turns that off for every strategy that allows it; ``allows_model_seeds``).
    ``exhaustive``: it measures every valid configuration, and the search's budget is the space.
    ``wants_prior``: ``prepare`` is given the device's results rows of other studies.
    ``ordinal``: its sampler sees each parameter as the position of its value (a number), not as
    a category (``gemmtune.search.proposals.Proposals``).
    """

    name = ""
    commands: tuple[str, ...] = ("search", "replay")
    model_seeded = False
    allows_model_seeds = True
    exhaustive = False
    wants_prior = False   # reads the device's earlier results rows (``prepare``)
    ordinal = False

    @classmethod
    def fits_model(cls, seeds: int) -> bool:
        """Whether a search with this strategy and ``seeds`` model seeds (``--no-seed``: 0) needs
        the cost model of the device's other studies: to learn from, or to pick its seeds."""
        return cls.wants_prior or bool(seeds and cls.allows_model_seeds)

    def __init__(self, seed: int | None = None):
        self.seed = seed

    def sampler(self, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
        """The Optuna sampler that decides the proposals left to ``ASK``; a strategy that always
        picks itself still needs one for Optuna's study."""
        import optuna

        return optuna.samplers.RandomSampler(seed=self.seed)

    def propose(self, candidates: Candidates) -> Config | type[ASK] | None:
        """The next configuration, ``ASK`` for the sampler's choice, or None when none is left.
        After a run of free proposals a random unmeasured configuration, so that a sampler stuck
        on measured or invalid points cannot stall the search."""
        if candidates.free >= MAX_FREE_PROPOSALS:
            return candidates.random_unmeasured()
        return ASK

    def repeated(self, config: Config, candidates: Candidates) -> Config | None:
        """The sampler proposed ``config``, measured before (it is told the value again): what to
        measure next instead, or None to ask the strategy again."""
        return None

    def prepare(self, problem: DeviceProblem, prior: pd.DataFrame | None, fitted: CostModel | None = None) -> None:
        """Before the first proposal: the problem searched (``gemmtune.models.learned.DeviceProblem``), the
        device's results rows recorded before this search (other studies; None: none read) and,
        where the caller fitted it already, their cost model (``learned.prior_model``)."""

    def breed_from(self, parents: Sequence[Config]) -> None:
        """The cost model's best configurations found before the first proposal, best first (the
        seeds' bred sample, ``search.opening.model_seeds``): a strategy that breeds the model's best
        goes on from them rather than from a random draw. The others ignore them."""

    def tell(self, config: Config, value: float | None) -> None:
        """A measured result (GFLOP/s, None for a failure). Optuna's samplers learn from the
        study instead, so the strategies here need nothing more."""
