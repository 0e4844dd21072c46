"""What a sampler reads of a study: its trials read once for a whole proposal (``one_read``),
and of a long study only the trials TPE learns from (``BoundedHistory``)."""

from __future__ import annotations

import contextlib
import copy
import heapq
from typing import Callable

import optuna
from optuna.trial import TrialState


@contextlib.contextmanager
def one_read(study: optuna.Study):
    """The study's trials read once for the whole block (one ask and its suggestions): with the
    constant liar, Optuna's TPE reads them afresh for each group it samples (five rounds of queries
    a proposal, once the search process's largest cost per trial), and within one proposal
    nothing else is told or asked."""
    read = study._get_trials
    trials: list | None = None

    def trials_once() -> list:
        nonlocal trials
        if trials is None:
            trials = read(deepcopy=False, use_cache=False)
        return trials

    with _reading(study, trials_once):
        yield


@contextlib.contextmanager
def _reading(study: optuna.Study, trials: Callable[[], list]):
    """Within the block the study's reads of its trials (``Study._get_trials``, which Optuna's
    samplers call) filter ``trials()`` instead; a read already replaced by an outer block is put
    back after."""
    def get_trials(deepcopy: bool = True, states=None, use_cache: bool = False):
        picked = trials() if states is None else [t for t in trials() if t.state in states]
        return copy.deepcopy(picked) if deepcopy else picked

    outer = vars(study).get("_get_trials")
    study._get_trials = get_trials
    try:
        yield
    finally:
        if outer is None:
            del study._get_trials
        else:
            study._get_trials = outer


HISTORY = 1000   # finished trials TPE's estimators see besides the best (``BoundedHistory``)
BEST = 50        # best completed trials always among them: TPE's "good" group is at most 25


class BoundedHistory:
    """What TPE reads of a study: at most the ``best`` best completed trials, the ``keep``
    latest other finished ones, and every running one (``view``). Unbounded, a long search at a
    small problem slowed from 9 trials a second to 2 in fifteen minutes on the H200. TPE's "good"
    group (its 25 best past 250 trials) is kept; old "bad" trials are forgotten, as a
    sliding-window TPE does; the best are updated from the trials finished since the last read."""

    def __init__(self, keep: int = HISTORY, best: int = BEST):
        self.keep, self.best = keep, best
        self.study = None
        self.settled = 0                         # leading trials finished and counted in ``top``
        self.top: list[tuple] = []               # (value, number, trial): the best of them, a heap
        self.last: tuple | None = None           # (the trials read, what was kept of them)

    @contextlib.contextmanager
    def view(self, study: optuna.Study):
        trials = study._get_trials(deepcopy=False, states=None, use_cache=False)
        if study is not self.study or len(trials) < self.settled:
            self.study, self.settled, self.top, self.last = study, 0, [], None
        if len(trials) <= self.keep + self.best:
            yield
            return
        # A proposal views the study once per group it samples, all within one read (``one_read``
        # hands out the same list each time): what to keep is worked out once for that list.
        if self.last is None or self.last[0] is not trials:
            self.last = trials, self._kept(trials)
        with _reading(study, lambda: self.last[1]):
            yield

    def _kept(self, trials: list) -> list:
        while self.settled < len(trials) and trials[self.settled].state != TrialState.RUNNING:
            self._count(trials[self.settled], self.top)
            self.settled += 1
        # From the first running trial on: counted afresh each time, as their states may change.
        tail, top = trials[self.settled:], list(self.top)
        for t in tail:
            self._count(t, top)
        latest = []
        for t in reversed(trials):
            if len(latest) == self.keep:
                break
            if t.state != TrialState.RUNNING:
                latest.append(t)
        chosen = {t.number: t for *_, t in top} | {t.number: t for t in latest}
        running = [t for t in tail if t.state == TrialState.RUNNING]
        return sorted([*chosen.values(), *running], key=lambda t: t.number)

    def _count(self, trial, top: list) -> None:
        if trial.state == TrialState.COMPLETE:
            if len(top) < self.best:
                heapq.heappush(top, (trial.value, trial.number, trial))
            elif trial.value > top[0][0]:
                heapq.heapreplace(top, (trial.value, trial.number, trial))
