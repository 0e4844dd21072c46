"""The sampler's in-memory copy of a database study (gemmtune.search.session.StudyCopy): it
starts from the database's finished trials, mirrors what each stored trial is told, and learns
other processes' results from the results rows."""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import SMALL_SPACE  # noqa: E402

from gemmtune.optuna_adapter import BatchedStorage, trial_id  # noqa: E402
from gemmtune.search.proposals import Proposals
from gemmtune.search.recording import read_results
from gemmtune.search.proposer import Proposer
from gemmtune.search.session import StudyCopy
from gemmtune.space import Config, config_key, parse_space
from gemmtune.strategies import make_strategy

SPACE = parse_space(SMALL_SPACE, "test")


def configs(space=SPACE) -> list[Config]:
    """Every point of ``space`` (all valid here: the proposer is given them as its valid set)."""
    fs = space.families[0]
    return [Config.of("xgemm_k5", dict(zip(fs.values, point))) for point in itertools.product(*fs.values.values())]


@pytest.fixture
def study(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = BatchedStorage(f"sqlite:///{tmp_path / 'o.db'}")
    yield optuna.create_study(storage=storage, study_name="s", direction="maximize",
                              sampler=optuna.samplers.RandomSampler(seed=1))
    storage.engine.dispose()


def proposer(study, copy, pending=()):
    valid = configs()
    return Proposer(study, Proposals(SPACE), valid, {}, make_strategy("tpe", 3), random.Random(3), list(pending),
                    copy=copy)


def test_the_copy_starts_from_the_finished_trials_of_the_database(study):
    proposals = Proposals(SPACE)
    done, running = configs()[:2], configs()[2]
    for config, value in zip(done, (5.0, 7.0)):
        study.tell(proposals.start(study, config), value)
    proposals.start(study, running)   # another process's, still running
    copy = StudyCopy(study, optuna.samplers.RandomSampler(seed=1), proposals)
    got = {c.key: t.value for t in copy.study.trials
           for c in [proposals.decode(t.params)]}
    assert got == {c.key: v for c, v in zip(done, (5.0, 7.0))}


def test_every_stored_trial_is_told_to_its_copy_alike(study):
    proposals = Proposals(SPACE)
    copy = StudyCopy(study, make_strategy("tpe", 3).sampler(constant_liar=True), proposals)
    study.sampler = Refusing()   # proposals come from the copy: the database's study is never sampled
    seeded = configs()[3]
    p = proposer(study, copy, pending=[seeded])
    values = {}
    for i in range(6):
        trial, config, key = p.next()
        value = None if i == 2 else float(10 + i)
        p.tell(trial, config, value, "ok" if value else "wrong_result")
        values[key] = value
    first, *_ = p.study.trials
    assert proposals.decode(first.params) == seeded   # the pending configuration went first, in both
    stored = {config_key(*_kp(proposals, t)): (t.state, t.value) for t in study.trials}
    copied = {config_key(*_kp(proposals, t)): (t.state, t.value) for t in copy.study.trials}
    assert stored == copied and len(copied) == 6
    assert {k: v for k, (s, v) in copied.items()} == values
    assert not copy.copies and not any(t.state == TrialState.RUNNING for t in copy.study.trials)


def test_a_result_for_a_trial_another_process_failed_leaves_it_failed_and_teaches_the_copy(study):
    # Told after another process failed the trial as stale (this one paused past the grace
    # period): the database keeps the failure, the copy and the strategy learn the measurement.
    proposals = Proposals(SPACE)
    copy = StudyCopy(study, optuna.samplers.RandomSampler(seed=1), proposals)
    p = proposer(study, copy)
    trial, config, key = p.next()
    other, _, _ = p.next()
    trial.storage.set_trial_state_values(trial_id(trial), TrialState.FAIL)   # as the stale check does
    p.tell(trial, config, 12.0, "ok")
    p.tell(other, config, 13.0, "ok")
    assert [(t.state, t.value) for t in study.trials] == [(TrialState.FAIL, None), (TrialState.COMPLETE, 13.0)]
    assert sorted(t.value for t in copy.study.trials) == [12.0, 13.0] and not copy.copies


class Refusing(optuna.samplers.RandomSampler):
    def sample_relative(self, study, trial, search_space):
        raise AssertionError("the database's study was sampled")

    def sample_independent(self, study, trial, param_name, param_distribution):
        raise AssertionError("the database's study was sampled")


def _kp(proposals, trial):
    config = proposals.decode(trial.params)
    return config.kernel, config.params


def test_other_processes_results_are_learned_once_and_only_theirs(study, tmp_path):
    from gemmtune.db.store import Store

    proposals = Proposals(SPACE)
    copy = StudyCopy(study, optuna.samplers.RandomSampler(seed=1), proposals)
    mine, in_flight, theirs, failed = configs()[:4]
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    for number, (config, status, gflops) in enumerate(((mine, "ok", 3.0), (in_flight, "ok", 4.0),
                                                        (theirs, "ok", 9.0), (failed, "wrong_result", None))):
        store.add(study="s", trial=number, device="d", device_name="d", precision="s", m=8, n=8, k=8,
                  kernel=config.kernel, params=json.dumps(config.params), status=status, gflops=gflops)
    measured = {mine.key: ("ok", 3.0),
                in_flight.key: ("in_flight", None)}
    read_results(store, "s", SPACE, 0, measured, copy.learn)
    learned = {config_key(*_kp(proposals, t)): (t.state, t.value) for t in copy.study.trials}
    assert learned == {theirs.key: (TrialState.COMPLETE, 9.0),
                       failed.key: (TrialState.PRUNED, None)}
    # Read again (another refresh, or a row of a configuration already known): nothing new.
    copy.learn(theirs, 9.0)
    read_results(store, "s", SPACE, 0, measured, copy.learn)
    assert len(copy.study.trials) == 2
    # A configuration this search's space cannot express teaches nothing.
    copy.learn(Config.of("xgemm_k5", {**theirs.params, "TSM": 64}), 1.0)
    assert len(copy.study.trials) == 2
    store.close()


def test_only_the_proposals_to_measure_are_written_to_the_database(study):
    proposals = Proposals(SPACE)
    copy = StudyCopy(study, make_strategy("tpe", 3).sampler(constant_liar=True), proposals)
    half = configs()[::2]   # the others break a constraint here
    p = Proposer(study, proposals, half, {}, make_strategy("tpe", 3), random.Random(3), [], copy=copy)
    for i in range(8):
        trial, config, key = p.next()
        assert config in half and trial.study is study
        p.measured[key] = ("ok", float(i))   # as the search records it
        p.tell(trial, config, float(i), "ok")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 8
    # In the copy alone: the invalid proposals, pruned, and those measured before, told their value.
    pruned = [t for t in copy.study.trials if t.state == TrialState.PRUNED]
    assert pruned and all(proposals.decode(t.params) not in half for t in pruned)
    again = [t for t in copy.study.trials if t.state == TrialState.COMPLETE][8:]
    assert all(p.measured[config_key(*_kp(proposals, t))] == ("ok", t.value) for t in again)
    assert len(copy.study.trials) == 8 + len(pruned) + len(again)


WIDE = parse_space("[xgemm_k5]\nTSM = [16, 32, 64, 128]\nTSN = [16, 32, 64]\nTSK = [8, 16]\nWPTN = [1, 2, 4]\n"
                   "PAD = [0, 1]\nTRANSPOSEX = [8]\nTRANSPOSEY = [8]\n", "test")


def _differ(a: Config, b: Config) -> list[str]:
    return [name for name in a.params if a.params[name] != b.params[name]]


def test_an_unmeasured_neighbour_differs_in_one_parameter_a_step_first():
    p = Proposer(None, Proposals(WIDE), configs(WIDE), {}, make_strategy("tpe", 3), random.Random(3), [])
    values = WIDE.families[0].values
    middle = Config.of("xgemm_k5", {name: v[len(v) // 2] for name, v in values.items()})
    seen = set()
    for _ in range(30):
        got = p.unmeasured_neighbour(middle)
        (name,) = _differ(middle, got)
        seen.add(name)
        step = abs(values[name].index(got.params[name]) - values[name].index(middle.params[name]))
        assert step == 1 and p.is_valid(got)
    assert len(seen) > 2                                   # drawn at random among the steps
    # Every step measured: a larger change of one parameter; everything measured: none.
    for name, choices in values.items():
        i = choices.index(middle.params[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(choices):
                c = Config.of("xgemm_k5", {**middle.params, name: choices[j]})
                p.measured[c.key] = ("ok", 1.0)
    got = p.unmeasured_neighbour(middle)
    (name,) = _differ(middle, got)
    assert abs(values[name].index(got.params[name]) - values[name].index(middle.params[name])) > 1
    for c in configs(WIDE):
        p.measured[c.key] = ("ok", 1.0)
    assert p.unmeasured_neighbour(middle) is None


def test_a_repeated_proposal_is_followed_by_a_neighbour_for_tpe_only():
    """TPE's sampler re-proposing what was measured costs an ask each time: the proposer then
    measures an unmeasured neighbour of it. Other strategies ask again."""
    from gemmtune.strategies.base import MAX_FREE_PROPOSALS, Strategy
    from gemmtune.strategies.tpe import REPEATS, Tpe

    fixed = configs(WIDE)[40]
    for base, neighbour in ((Tpe, True), (Strategy, False)):
        class Stuck(base):
            def propose(self, candidates):
                return fixed if candidates.free < MAX_FREE_PROPOSALS else candidates.random_unmeasured()

        strategy = Stuck(3)
        p = Proposer(optuna.create_study(direction="maximize", sampler=strategy.sampler()), Proposals(WIDE),
                     configs(WIDE), {}, strategy, random.Random(3), [])
        trial, config, key = p.next()
        assert config == fixed
        p.measured[key] = ("ok", 5.0)
        p.tell(trial, config, 5.0)
        trial, config, key = p.next()
        repeats = [t for t in p.study.trials if t.params == p.study.trials[0].params][1:]
        assert repeats and all(t.state == TrialState.COMPLETE and t.value == 5.0 for t in repeats)  # told again
        if neighbour:   # after REPEATS free proposals in a row
            assert len(_differ(fixed, config)) == 1 and len(repeats) == REPEATS
        else:   # asked again until the run of free proposals ends in a random pick
            assert len(repeats) == MAX_FREE_PROPOSALS and config != fixed


def test_a_sampler_accepts_a_candidate_only_if_it_is_valid():
    # SMALL_SPACE fixes TRANSPOSEX and TRANSPOSEY to one value each: samplers leave those out
    # of a candidate, and the check completes it.
    from types import SimpleNamespace

    from gemmtune.search.proposer import accepting

    proposals = Proposals(SPACE)
    fs = SPACE.families[0]
    single = [p for p, values in fs.values.items() if len(values) == 1]
    assert single
    invalid, fresh = configs()[:2]

    def candidate(config):
        return {name: v for name, v in proposals.params(config).items() if name not in single}

    sampler = SimpleNamespace(accept=None)
    with accepting(sampler, proposals, lambda c: c != invalid):
        assert [sampler.accept(candidate(c)) for c in (invalid, fresh)] == [False, True]
        assert not sampler.accept({k: v for k, v in candidate(fresh).items() if k != "TSM"})   # one missing
    assert sampler.accept is None
    assert proposals.decode(candidate(fresh)) is None   # incomplete without ``complete``
    assert proposals.decode(candidate(fresh), complete=True) == fresh
    stock = SimpleNamespace()
    with accepting(stock, proposals, lambda c: False):   # a sampler without ``accept``: untouched
        assert not hasattr(stock, "accept")


def test_proposals_made_with_accept_skip_fewer_invalid_configurations(monkeypatch):
    # Half of 576 configurations invalid, spread over the space: the default sampler's invalid
    # proposals until 40 are measured, with and without its candidates screened (the first ten,
    # random, are alike).
    import contextlib

    import gemmtune.search.proposer as proposer

    space = parse_space("[xgemm_k5]\nTSM = [16, 32, 64, 128]\nTSN = [16, 32, 64, 128]\nTSK = [8, 16, 32]\n"
                        "WPTN = [1, 2, 4, 8]\nPAD = [0, 1, 2]\nTRANSPOSEX = [8]\nTRANSPOSEY = [8]\n", "test")
    every = configs(space)
    ok = set(every[::2])

    def invalid_proposals():
        strategy = make_strategy("tpe", 4)
        p = Proposer(optuna.create_study(direction="maximize", sampler=strategy.sampler()), Proposals(space), every,
                     {}, strategy, random.Random(4), [], is_valid=lambda c: c in ok)
        for _ in range(40):
            trial, config, key = p.next()
            p.measured[key] = ("ok", float(sum(config.params.values())))
            p.tell(trial, config, p.measured[key][1], "ok")
        return sum(t.user_attrs.get("skipped", "").startswith("invalid") for t in p.study.trials)

    screened = invalid_proposals()
    monkeypatch.setattr(proposer, "accepting", lambda *args: contextlib.nullcontext())
    unscreened = invalid_proposals()
    assert screened < unscreened / 2, (screened, unscreened)
