"""The learned strategy: a cost model trained on everything the device measured proposes.

Before the search it fits ``gemmtune.learned.CostModel`` to the device's rows of other studies
(every shape and precision: the prior), once. After each result it fits a second, small model
to what the prior model got wrong about this search's rows (their targets less the prior's
predictions), and predicts with the sum of the two: the prior says what tends to be fast
anywhere, the correction what is true at this shape. Refitting the prior with each result
instead costs seconds per trial on a database of ten thousand rows; the correction costs
milliseconds. Without a prior, the correction is the whole model. Each proposal draws up to
POOL unmeasured configurations and takes the one with the best predicted speed plus KAPPA
times the spread of the trees (an upper confidence bound: uncertain regions get tried). A
share EXPLORE of the proposals, and every proposal while fewer than ``learned.MIN_ROWS`` rows
exist, go to TPE, which sees every result too. With a prior the analytic model's seeds are not
measured: the learned model's own picks come first (transfer between shapes).

In a search (``asynchronous``) the models are fitted on a thread of their own while the search
goes on (scikit-learn's trees are built without Python's lock), and proposals use the latest
fitted ones: the prior's fit takes seconds, and must not hold the devices up. A replay fits
before each proposal, so that it is deterministic.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from gemmtune.strategies.base import ASK, MAX_FREE_PROPOSALS
from gemmtune.strategies.tpe import Tpe

POOL = 1000      # configurations scored per proposal
KAPPA = 0.5      # weight of the spread in the score (targets are log GFLOP/s)
EXPLORE = 0.1    # share of proposals left to TPE
FEATURE_CACHE = 50_000   # configurations whose features are kept
_FITTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gemmtune-fit")


class Learned(Tpe):
    name = "learned"
    wants_prior = True
    asynchronous = False   # refit on a thread (a search sets it)

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        self.problem = None
        self.prior_x = self.prior_y = None
        self.mine: dict[tuple, tuple] = {}   # config key -> (config, GFLOP/s)
        self.prior_model = None              # CostModel of the prior, fitted once
        self.model = None                    # the latest fitted model (prior, corrected)
        self.fitting: Future | None = None
        self.stale = True
        self._features: dict = {}

    def prepare(self, problem, prior) -> None:
        from gemmtune.learned import MIN_ROWS, training_rows  # pandas and scikit-learn: here

        self.problem = problem
        if prior is not None and len(prior):
            self.prior_x, self.prior_y = training_rows(prior, problem.dev, problem.peaks)
        if self.prior_y is not None and len(self.prior_y) >= MIN_ROWS:
            self.allows_model_seeds = False

    def tell(self, config, value) -> None:
        if value is not None and value > 0:
            self.mine[(config.kernel, tuple(sorted(config.params.items())))] = (config, value)
            self.stale = True

    def _rows(self, configs) -> np.ndarray:
        from gemmtune.learned import features

        if len(self._features) > FEATURE_CACHE:
            self._features.clear()
        missing = [c for c in configs if c not in self._features]
        if missing:
            self._features.update(zip(missing, features(missing, self.problem)))
        return np.asarray([self._features[c] for c in configs])

    def _own_data(self):
        from gemmtune.learned import relative_targets

        configs, values = zip(*self.mine.values())
        return self._rows(configs), relative_targets(np.asarray(values), np.zeros(len(values)))

    def _fit_now(self, own) -> None:
        from gemmtune.learned import MIN_ROWS, CostModel, Corrected

        if self.prior_model is None and self.prior_y is not None and len(self.prior_y) >= MIN_ROWS:
            self.prior_model = CostModel(self.seed).fit(self.prior_x, self.prior_y)
        self.model = Corrected(self.prior_model, *own, seed=self.seed) if own else self.prior_model

    def _fit(self) -> bool:
        """Whether a fitted model is there to propose with; refits where results came since."""
        from gemmtune.learned import MIN_ROWS

        prior = 0 if self.prior_y is None else len(self.prior_y)
        if prior < MIN_ROWS and len(self.mine) < MIN_ROWS:
            return False
        busy = self.fitting is not None and not self.fitting.done()
        if self.stale and not busy:
            own, self.stale = (self._own_data() if self.mine else None), False
            if self.asynchronous:
                self.fitting = _FITTER.submit(self._fit_now, own)
            else:
                self._fit_now(own)
        return self.model is not None

    def propose(self, candidates):
        if candidates.free >= MAX_FREE_PROPOSALS:
            return candidates.random_unmeasured()
        if self.problem is None or candidates.rng.random() < EXPLORE or not self._fit():
            return ASK
        pool = candidates.sample_unmeasured(POOL)
        if not pool:
            return ASK
        mean, spread = self.model.predict(self._rows(pool))
        return pool[int(np.argmax(mean + KAPPA * spread))]
