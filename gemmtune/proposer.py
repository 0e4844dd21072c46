"""Proposals: what the search measures next, and how a configuration becomes an Optuna trial.

Driven with ``study.ask()`` / ``study.tell()`` so that gemmtune decides what a trial costs:

* A proposal that breaks a constraint is told to Optuna as PRUNED (TPE ranks pruned trials
  below every completed one, so it learns to avoid them) without any build, and does not count
  against ``--trials``. Neither does a proposal measured before in this study: Optuna is told
  the earlier value, and nothing is rebuilt.
* After a run of such free proposals the search queues a random unmeasured valid
  configuration, so a sampler stuck on measured or invalid points cannot stall it.
* ``random`` queues a configuration drawn uniformly from the valid, unmeasured ones: drawn
  from the product of the parameters' values, half its proposals or more would break a
  constraint, and each costs the database as much as a measured one.
* ``grid`` queues every valid configuration in turn and stops when none is left.

The live search and ``gemmtune replay`` both propose through ``Proposer``, so that both follow
one set of rules.
"""

from __future__ import annotations

import contextlib
import copy
import random
import warnings
from typing import Callable

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from gemmtune.errors import GemmtuneError
from gemmtune.space import Config, Space

SAMPLERS = ("tpe", "random", "grid")
MAX_FREE_PROPOSALS = 25   # invalid or already-measured proposals in a row before a random pick


def make_sampler(name: str, seed: int | None, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
    # Arguments spelled out: Optuna 5 changed TPE's defaults, and results should not move with them.
    # With several candidates in flight, the constant liar keeps TPE from proposing them again.
    # group: each kernel family's parameters exist only with its KERNEL value; grouped, TPE models
    # each family's parameters jointly instead of sampling all but KERNEL one by one, and asks
    # cost less: with the constant liar, every sampling reads the study's trials afresh.
    if name == "tpe":
        with warnings.catch_warnings():  # "group is experimental": not the user's concern
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(n_startup_trials=10, n_ei_candidates=24, multivariate=True,
                                              group=True, constant_liar=constant_liar, seed=seed)
    if name in ("random", "grid"):  # grid enqueues every point itself; the sampler never decides
        return optuna.samplers.RandomSampler(seed=seed)
    raise GemmtuneError(f"unknown sampler {name!r}: use one of {', '.join(SAMPLERS)}")


IN_FLIGHT = ("in_flight", "elsewhere")   # statuses of ``measured`` that are not results yet


@contextlib.contextmanager
def one_read(study: optuna.Study):
    """The study's trials read once for the whole block (one ask and its suggestions).

    With the constant liar, Optuna's TPE reads every trial of the study afresh for each group of
    parameters it samples, so that it sees the latest running ones: five reads per gemmtune
    proposal (three groups, and the search space), each a round of queries, and the largest
    cost of the search process per trial. Within one proposal nothing else is told or asked,
    so one read serves them all."""
    read = study._get_trials
    trials: list | None = None

    def get_trials(deepcopy: bool = True, states=None, use_cache: bool = False):
        nonlocal trials
        if trials is None:
            trials = read(deepcopy=False, use_cache=False)
        picked = trials if states is None else [t for t in trials if t.state in states]
        return copy.deepcopy(picked) if deepcopy else picked

    outer = vars(study).get("_get_trials")   # inside another one_read: leave that one in place
    study._get_trials = get_trials
    try:
        yield
    finally:
        if outer is None:
            del study._get_trials
        else:
            study._get_trials = outer


def config_key(kernel: str, params: dict) -> tuple:
    return (kernel, tuple(sorted(params.items())))


class Proposals:
    """Maps configurations to Optuna parameters and back."""

    def __init__(self, space: Space):
        self.space = space
        self.multi = len(space.families) > 1

    def name(self, kernel: str, param: str) -> str:
        return f"{kernel}.{param}" if self.multi else param

    @property
    def kernels(self) -> list[str]:
        """The values of the KERNEL parameter (present only with several families)."""
        return [fs.family.name for fs in self.space.families]

    def suggest(self, trial: optuna.Trial) -> Config:
        kernel = self.space.families[0].family.name
        if self.multi:
            kernel = trial.suggest_categorical("KERNEL", self.kernels)
        fs = self.space.family(kernel)
        return Config.of(kernel, {p: trial.suggest_categorical(self.name(kernel, p), values)
                                  for p, values in fs.values.items()})

    def decode(self, params: dict) -> Config | None:
        """The configuration of a trial's Optuna parameters (None if it has none of this space)."""
        kernel = params.get("KERNEL", self.space.families[0].family.name)
        try:
            fs = self.space.family(kernel)
            return Config.of(kernel, {p: params[self.name(kernel, p)] for p in fs.values})
        except (KeyError, GemmtuneError):
            return None

    def start(self, study: optuna.Study, config: Config) -> optuna.Trial:
        """A running trial of ``config``, its parameters written with it in one transaction.
        enqueue_trial, ask and the suggestions take five, and ask a scan for waiting trials
        besides: with devices measuring several candidates a second, that was the search
        process's largest cost per trial. The sampler sees the trial as it sees an enqueued one."""
        dists = {self.name(config.kernel, p): CategoricalDistribution(values)
                 for p, values in self.space.family(config.kernel).values.items()}
        params = {self.name(config.kernel, p): v for p, v in config.items}
        if self.multi:
            dists["KERNEL"] = CategoricalDistribution(self.kernels)
            params["KERNEL"] = config.kernel
        template = optuna.trial.create_trial(state=TrialState.RUNNING, params=params, distributions=dists)
        return optuna.Trial(study, study._storage.create_new_trial(study._study_id, template_trial=template))


class Proposer:
    """The next candidate to measure, by the rules in the module docstring.

    ``measured`` maps configuration keys to (status, GFLOP/s or None) and is shared with the
    caller, who adds each measured candidate; a proposal of a key already there is told that
    value again, or PRUNED while it is in flight ("in_flight" here, "elsewhere" in another
    process). ``pending`` configurations are proposed first (``Proposals.start``); ``grid`` (a list) makes the order
    exhaustive instead of the sampler's, ``uniform`` draws every candidate at random from the
    valid ones (the ``random`` sampler). ``claim(key, trial)``, where given, takes a
    configuration for this process (False: another process has it; ``refresh()`` then reads
    what the others measured into ``measured``). ``batch()``, where given, groups a proposal's
    storage writes into one transaction (``BatchedStorage.batch``); ``asked(trial)`` is called
    first thing after each ask (the search records its first heartbeat). Used by the live
    search and by ``gemmtune replay``, so that both follow one set of rules.
    """

    def __init__(self, study, proposals: "Proposals", valid: list[Config], measured: dict, rng: random.Random,
                 pending: list[Config], grid: list[Config] | None = None, uniform: bool = False, why_invalid=None,
                 claim: Callable | None = None, refresh: Callable | None = None,
                 batch: Callable = contextlib.nullcontext, asked: Callable | None = None,
                 is_valid: Callable[[Config], bool] | None = None):
        self.study, self.proposals, self.valid, self.measured = study, proposals, valid, measured
        self.rng, self.pending, self.grid, self.why_invalid = rng, pending, grid, why_invalid
        self.uniform = uniform
        self.claim, self.refresh, self.batch, self.asked = claim, refresh, batch, asked
        if is_valid is None:
            valid_keys = {config_key(c.kernel, c.params) for c in valid}
            is_valid = lambda c: config_key(c.kernel, c.params) in valid_keys  # noqa: E731
        # ``is_valid`` (whether a configuration is one of ``valid``) by a rule instead of a set
        # of keys: a set costs 1.4 KB a configuration, 3.4 GB for the 2.36 million of s on PoCL.
        self.is_valid = is_valid
        self.free = 0   # proposals in a row that cost nothing (invalid or measured before)

    def unmeasured(self) -> list[Config]:
        return [c for c in self.valid if config_key(c.kernel, c.params) not in self.measured]

    def random_unmeasured(self) -> Config | None:
        for _ in range(64):  # rejection is cheap while most of the space is unmeasured
            c = self.rng.choice(self.valid)
            if config_key(c.kernel, c.params) not in self.measured:
                return c
        left = self.unmeasured()
        return self.rng.choice(left) if left else None

    def _tell_known(self, trial, status: str, value: float | None) -> None:
        in_flight = status in IN_FLIGHT
        with self.batch():
            trial.set_user_attr("skipped", "in flight" if in_flight else "measured before")
        if value is not None:
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=TrialState.PRUNED if in_flight else TrialState.FAIL)
        self.free += 1

    def next(self):
        """(trial, config, key) of a valid, unmeasured configuration, or None when none is left.
        The key is marked "in_flight" in ``measured``."""
        study, measured = self.study, self.measured
        while True:
            if not self.pending:
                if self.grid is not None:
                    nxt = next((c for c in self.grid if config_key(c.kernel, c.params) not in measured), None)
                    if nxt is None:
                        return None
                    self.pending.append(nxt)
                elif self.uniform or self.free >= MAX_FREE_PROPOSALS:
                    nxt = self.random_unmeasured()
                    if nxt is None:
                        return None
                    self.pending.append(nxt)
            if self.pending:
                config = self.pending.pop(0)
                trial = self.proposals.start(study, config)
            else:
                config = None
            with one_read(study):
                if config is None:
                    trial = study.ask()
                if self.asked is not None:
                    self.asked(trial)
                with self.batch():
                    if config is None:
                        config = self.proposals.suggest(trial)
                    key = config_key(config.kernel, config.params)
                    invalid = not self.is_valid(config)
                    if invalid:
                        broken = self.why_invalid(config) if self.why_invalid else None
                        trial.set_user_attr("skipped", f"invalid: {broken.name if broken else 'not in space'}")
            if invalid:
                study.tell(trial, state=TrialState.PRUNED)
                self.free += 1
                continue
            if key in measured:
                self._tell_known(trial, *measured[key])
                continue
            if self.claim is not None and not self.claim(key, trial):
                if self.refresh is not None:
                    self.refresh()
                measured.setdefault(key, ("elsewhere", None))
                self._tell_known(trial, *measured[key])
                continue
            self.free = 0
            measured[key] = ("in_flight", None)
            return trial, config, key
