"""What a strategy may draw from while it proposes: the valid configurations not yet measured
(``gemmtune.strategies.base.Candidates``)."""

from __future__ import annotations

import random
from typing import Callable

from gemmtune.models.breeding import children
from gemmtune.space import Config, Space


class Unmeasured:
    """The configurations of ``valid`` whose keys are not in ``measured``, drawn with ``rng``;
    ``is_valid`` says whether a configuration is one of ``valid``, ``space`` what values each
    family's parameters take."""

    valid: list[Config]
    measured: dict
    rng: random.Random
    is_valid: Callable[[Config], bool]
    space: Space

    def unmeasured(self) -> list[Config]:
        return [c for c in self.valid if c.key not in self.measured]

    def random_unmeasured(self) -> Config | None:
        # Rejection is cheap while most of the space is unmeasured. A large valid set draws from
        # the product of its values (``ValidConfigs.pick``): picking by position would count the
        # set first (4.5 s for z on the H200, every proposal waiting behind it).
        for _ in range(64):
            c = self.valid.pick(self.rng) if hasattr(self.valid, "pick") else self.rng.choice(self.valid)
            if c.key not in self.measured:
                return c
        left = self.unmeasured()
        return self.rng.choice(left) if left else None

    def sample_unmeasured(self, count: int) -> list[Config]:
        """Up to ``count`` unmeasured configurations, drawn without replacement (every one, where
        the valid set is no larger)."""
        if hasattr(self.valid, "sample"):   # every one where there are no more, without counting them
            drawn = self.valid.sample(count, self.rng)
        elif len(self.valid) <= count:
            return self.unmeasured()
        else:
            drawn = self.rng.sample(list(self.valid), count)
        return [c for c in drawn if c.key not in self.measured]

    def first_unmeasured(self, order) -> Config | None:
        return next((c for c in order if c.key not in self.measured), None)

    def unmeasured_neighbour(self, config: Config) -> Config | None:
        """A valid, unmeasured configuration that differs from ``config`` in one parameter, drawn
        at random: a step to the next value of the space first, any other value after; None
        where there is none."""
        values = self.space.family(config.kernel).values
        steps, jumps = [], []
        for name, choices in values.items():
            here = config.params.get(name)
            if here not in choices:
                continue
            i = choices.index(here)
            for j, value in enumerate(choices):
                if j != i:
                    (steps if abs(j - i) == 1 else jumps).append((name, value))
        self.rng.shuffle(steps)
        self.rng.shuffle(jumps)
        for name, value in steps + jumps:
            c = Config.of(config.kernel, {**config.params, name: value})
            if c.key not in self.measured and self.is_valid(c):
                return c
        return None

    def unmeasured_children(self, parents, each: int) -> list[Config]:
        """Valid, unmeasured configurations, up to ``each`` per parent, each one of ``parents``
        with a few parameters set to other values of the space (``breeding.children``)."""
        return children(parents, lambda kernel: self.space.family(kernel).values, self.is_valid, self.rng, each,
                        known=lambda c: c.key in self.measured)
