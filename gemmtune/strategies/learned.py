"""The learned strategy, the search's default: after the seeds (none with ``--no-seed``), a cost
model trained on everything the device measured at other problems proposes, and TPE beside it.

Its caller fits ``gemmtune.models.learned.CostModel`` to the device's rows of other studies (every
shape and precision, and on a device the package ships results for, those: the prior) once, for
the seeds and this strategy alike (``search.prior.PriorModels``). After each result the
strategy fits a second, small model to what the prior model got wrong about this search's rows
(their targets less the prior's predictions), and predicts with the sum of the two: the prior
says what tends to be fast anywhere, the correction what is true at this shape (refitting the
prior instead costs seconds per trial; the correction, milliseconds).

A ranking draws up to POOL unmeasured configurations, adds the previous ranking's
``breeding.PARENTS`` best and CHILDREN children of each (``gemmtune.models.breeding``: in a space of
millions, a draw of a thousand holds the model's best only by luck; the first ranking breeds
from the seeds' bred sample, ``breed_from``), and orders them by
predicted speed plus KAPPA times the spread of the trees (an upper confidence bound: uncertain
regions get tried); the next BATCH proposals are its best, in that order, and the next ranking
uses the model refitted since. A ranking of the H200's z space costs 0.07 s on a laptop's core and twice that
on the H200's host, where a trial at 1024³ takes 50 ms: ranked for every proposal, the timing
worker there waited for proposals 61-76 % of the time, and 0-5 % in batches (AutoTVM, whose
model this follows, proposes in batches of 64). A share EXPLORE of the proposals goes to TPE,
which sees every result too: half, because the prior's rows come from reduced spaces, and on
the H200's whole space, with one proposal in ten, the search found 4-8 % less than TPE alone at
z 1024³ (a region the model ranks low), and with half, as much or more at five shapes
(docs/search.md, "A new shape").

Where the prior has fewer than ``learned.MIN_ROWS`` rows (an empty database on a device the
package ships nothing for, as the Quick start's), TPE proposes throughout: trees refitted
beside a search on a CPU device would take cores from the device it times, and a model of the
search's own few rows has nothing to transfer.

In a search (``asynchronous``) the models are fitted on a thread of their own while the search
goes on (scikit-learn's trees are built without Python's lock), and a ranking uses the latest
fitted one. A replay fits before each ranking, so that it is deterministic.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from gemmtune.models import breeding
from gemmtune.strategies.base import ASK, MAX_FREE_PROPOSALS
from gemmtune.strategies.tpe import Tpe

POOL = 1000      # configurations scored per ranking
BATCH = 8        # proposals served from one ranking
KAPPA = 0.5      # weight of the spread in the score (targets are log GFLOP/s)
EXPLORE = 0.5    # share of proposals left to TPE
CHILDREN = 8     # children of each of the last ranking's breeding.PARENTS best, in the next pool
FEATURE_CACHE = 50_000   # configurations whose features are kept
_FITTERS: dict[int, ThreadPoolExecutor] = {}


def _fitter() -> ThreadPoolExecutor:
    """This process's fitting thread: a search proposes in a forked child (``search.ahead``),
    where a pool the parent had started has no thread and would run nothing."""
    pool = _FITTERS.get(os.getpid())
    if pool is None:
        pool = _FITTERS[os.getpid()] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gemmtune-fit")
    return pool


class Learned(Tpe):
    name = "learned"
    wants_prior = True
    asynchronous = False   # refit on a thread (a search sets it)

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        self.problem = None
        self.mine: dict[tuple, tuple] = {}   # config key -> (config, GFLOP/s)
        self.prior_model = None              # CostModel of the prior, fitted once
        self.model = None                    # the latest fitted model (prior, corrected)
        self.fitting: Future | None = None
        self.stale = True
        self._features: dict = {}
        self._ranked: list = []              # the latest ranking's best not yet proposed, best first
        self._elite: list = []               # the latest ranking's PARENTS best: they breed the next pool

    def prepare(self, problem, prior, fitted=None) -> None:
        from gemmtune.models.learned import prior_model  # pandas and scikit-learn: here

        self.problem = problem
        self.prior_model = self.model = fitted if fitted is not None else prior_model(prior, problem.dev, problem.peaks)

    def breed_from(self, parents) -> None:
        self._elite = list(parents)[:breeding.PARENTS]

    @property
    def learns(self) -> bool:
        """Whether the device's other results taught a model (else TPE proposes throughout)."""
        return self.prior_model is not None

    def tell(self, config, value) -> None:
        if value is not None and value > 0:
            self.mine[config.key] = (config, value)
            self.stale = True

    def _rows(self, configs) -> np.ndarray:
        from gemmtune.models.learned import features

        if len(self._features) > FEATURE_CACHE:
            self._features.clear()
        missing = [c for c in configs if c not in self._features]
        if missing:
            self._features.update(zip(missing, features(missing, self.problem)))
        return np.asarray([self._features[c] for c in configs])

    def _own_data(self):
        from gemmtune.models.learned import relative_targets

        configs, values = zip(*self.mine.values())
        return self._rows(configs), relative_targets(np.asarray(values), np.zeros(len(values)))

    def _fit_now(self, own) -> None:
        from gemmtune.models.learned import Corrected

        self.model = Corrected(self.prior_model, *own, seed=self.seed) if own else self.prior_model

    def _fit(self) -> bool:
        """Whether a fitted model is there to propose with; refits where results came since."""
        if not self.learns:
            return False
        busy = self.fitting is not None and not self.fitting.done()
        if self.stale and not busy:
            own, self.stale = (self._own_data() if self.mine else None), False
            if self.asynchronous:
                self.fitting = _fitter().submit(self._fit_now, own)
            else:
                self._fit_now(own)
        return self.model is not None

    def propose(self, candidates):
        if candidates.free >= MAX_FREE_PROPOSALS:
            return candidates.random_unmeasured()
        if not self.learns or candidates.rng.random() < EXPLORE:
            return ASK
        config = candidates.first_unmeasured(self._ranked)
        if config is not None:
            self._ranked = self._ranked[self._ranked.index(config) + 1:]
            return config
        if not self._fit():
            return ASK
        # Random draws, and the last ranking's best with their children (``gemmtune.models.breeding``):
        # where the space is larger than the pool, its best are found by breeding, not by luck.
        pool = candidates.sample_unmeasured(POOL)
        elite = [c for c in self._elite if candidates.first_unmeasured([c]) is not None]
        pool = list(dict.fromkeys([*pool, *elite, *candidates.unmeasured_children(self._elite, CHILDREN)]))
        if not pool:
            return ASK
        mean, spread = self.model.predict(self._rows(pool))
        order = np.argsort(-(mean + KAPPA * spread), kind="stable")
        self._elite = [pool[i] for i in order[:breeding.PARENTS]]
        self._ranked = [pool[i] for i in order[1:BATCH]]
        return pool[order[0]]
