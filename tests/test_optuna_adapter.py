"""Each use of Optuna's private names (``gemmtune.optuna_adapter``) against the installed
Optuna: a change of Optuna's internals fails here, by name, rather than deep in a search."""

from __future__ import annotations

import time

import numpy as np
import optuna
import pytest
import sqlalchemy as sa
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from gemmtune.optuna_adapter import BatchedStorage, BoundedHistory, GroupedTpe, one_read, start_running_trial, trial_id

# What Optuna says of its experimental heartbeats, which the search uses through ask/tell
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning",
                                        "ignore:Heartbeat of storage")


@pytest.fixture
def storage(tmp_path):
    s = BatchedStorage(f"sqlite:///{tmp_path / 'a.db'}", heartbeat_interval=1, grace_period=2)
    yield s
    s.engine.dispose()


@pytest.fixture
def study(storage):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=storage, study_name="a", direction="maximize",
                               sampler=optuna.samplers.RandomSampler(seed=1))


def test_trial_id_is_the_storage_id_of_a_live_and_a_frozen_trial(storage, study):
    study.tell(study.ask(), 1.0)
    trial = study.ask()
    assert storage.get_trial(trial_id(trial)).number == trial.number == 1
    frozen = study.trials[1]
    assert trial_id(frozen) == trial_id(trial)
    assert storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("a"), 1) == trial_id(trial)


def test_a_running_trial_is_written_with_its_parameters_in_two_commits(storage, study):
    dists = {"A": CategoricalDistribution([1, 2, 4]), "B": CategoricalDistribution(["x", "y"])}
    seen = []
    sa.event.listen(storage.engine, "commit", lambda conn: seen.append(1))
    trial = start_running_trial(study, {"A": 4, "B": "y"}, dists, storage.batch)
    assert len(seen) <= 3   # the trial, then its parameters together; Optuna's cache may read it back
    many = {f"P{i}": CategoricalDistribution([1, 2, 4]) for i in range(12)}
    before = len(seen)
    start_running_trial(study, {name: 2 for name in many}, many, storage.batch)
    assert len(seen) - before <= 3   # not a transaction per parameter
    frozen = storage.get_trial(trial_id(trial))
    assert frozen.state == TrialState.RUNNING and frozen.params == {"A": 4, "B": "y"}
    assert frozen.distributions == dists and frozen.number == trial.number == 0
    # The sampler takes the parameters as given, as it does an enqueued trial's.
    assert trial.suggest_categorical("A", [1, 2, 4]) == 4
    study.tell(trial, 1.0)
    assert study.trials[0].state == TrialState.COMPLETE


def test_one_read_reads_the_trials_once_and_puts_the_study_back(storage, study):
    for value in (1.0, 2.0):
        study.tell(study.ask(), value)
    reads = []
    real = study._storage.get_all_trials   # through Optuna's cache in front of the storage
    study._storage.get_all_trials = lambda *a, **k: (reads.append(1), real(*a, **k))[1]
    with one_read(study):
        for _ in range(3):
            assert len(study._get_trials(deepcopy=False)) == 2
            assert len(study._get_trials(states=(TrialState.COMPLETE,))) == 2
        with one_read(study):   # nested: served by the outer block's read, which it leaves in place
            study._get_trials()
        assert "_get_trials" in vars(study)
    assert len(reads) == 1 and "_get_trials" not in vars(study)
    study.tell(study.ask(), 3.0)
    assert len(study._get_trials(deepcopy=False)) == 3


def test_a_batch_queues_parameters_and_attributes_through_the_private_writers(storage, study):
    trial = study.ask()
    seen = []
    sa.event.listen(storage.engine, "commit", lambda conn: seen.append(1))
    with storage.batch():
        trial.suggest_categorical("A", [1, 2])
        trial.suggest_categorical("B", [3, 4])
        trial.set_user_attr("k", "v")
        assert not seen and len(storage._queued) == 3   # RDBStorage._set_trial_param is what Optuna calls
    assert len(seen) == 1
    frozen = storage.get_trial(trial_id(trial))
    assert set(frozen.params) == {"A", "B"} and frozen.user_attrs == {"k": "v"}


def test_a_batch_reads_the_trial_once_for_all_its_parameters(storage, study):
    names = [f"P{i}" for i in range(12)]
    dists = {name: CategoricalDistribution([1, 2, 4]) for name in names}
    start_running_trial(study, {name: 1 for name in names}, dists, storage.batch)   # distributions now known
    reads = []
    sa.event.listen(storage.engine, "before_cursor_execute",
                    lambda conn, cursor, text, *a: reads.append(text) if text.lstrip().upper().startswith("SELECT") else None)
    trial = start_running_trial(study, {name: 4 for name in names}, dists, storage.batch)
    of_trials = [t for t in reads if "FROM trials" in t and "trial_params" not in t]
    assert len(of_trials) <= 3   # creating it and reading it back; not once per parameter
    assert storage.get_trial(trial_id(trial)).params == {name: 4 for name in names}
    study.tell(trial, 1.0)
    cached = study._storage   # what passes the parameter's known distribution, as in a search
    with pytest.raises(RuntimeError):   # a finished trial takes no parameters, as with Optuna's writer
        with storage.batch():
            cached.set_trial_param(trial_id(trial), "P1", 0, dists["P1"])
    with pytest.raises(ValueError):     # nor a distribution incompatible with the study's
        with storage.batch():
            cached.set_trial_param(trial_id(study.ask()), "P0", 0, CategoricalDistribution(["x", "y"]))


def test_unbeaten_trials_are_read_from_optuna_tables(storage, study):
    study_id = storage.get_study_id_from_name("a")
    silent = start_running_trial(study, {"A": 1}, {"A": CategoricalDistribution([1, 2])})
    beating = study.ask()
    storage.record_heartbeat(trial_id(beating))
    time.sleep(1.1)
    assert storage.unbeaten_trial_ids(study_id, 1.0) == [trial_id(silent)]
    assert storage.unbeaten_trial_ids(study_id, 3600.0) == []


def _conditional_run(sampler, families=("a", "b", "c"), n=60, ahead=0):
    # A conditional space as gemmtune's: each family's parameters exist only with its KERNEL;
    # some proposals are pruned, as invalid ones are; ``ahead`` trials stay running while the
    # next is asked, as candidates in flight do.
    study = optuna.create_study(direction="maximize", sampler=sampler)
    proposed, flying = [], []
    for i in range(n):
        trial = study.ask()
        kernel = trial.suggest_categorical("KERNEL", list(families)) if len(families) > 1 else families[0]
        params = {f"{kernel}.{p}": trial.suggest_categorical(f"{kernel}.{p}", [1, 2, 4, 8, 16])
                  for p in ("x", "y", "z")}
        proposed.append((kernel, params, set(trial.relative_params)))
        flying.append((i, trial, kernel, params))
        if len(flying) <= ahead:
            continue
        i, trial, kernel, params = flying.pop(0)
        if i % 7 == 3:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, sum(params.values()) * (2 if kernel == "b" else 1) - (i % 5))
    return proposed


@pytest.mark.parametrize("constant_liar", [False, True])
def test_grouped_tpe_adds_each_trial_to_its_groups_once_and_proposes_as_optuna_does(constant_liar):
    args = dict(n_startup_trials=10, n_ei_candidates=24, constant_liar=constant_liar, seed=7)
    for families in (("a",), ("a", "b", "c")):   # without a choice, several families too
        with pytest.warns(optuna.exceptions.ExperimentalWarning):
            stock = optuna.samplers.TPESampler(multivariate=True, group=True, **args)
        ours = GroupedTpe(**args)
        assert _conditional_run(ours, families) == _conditional_run(stock, families)
        assert len(ours._grouped) == sum(1 for i in range(60) if i % 7 != 3)   # each completed trial once


def test_grouped_tpe_looks_only_at_trials_that_may_have_finished_since_the_last_proposal():
    sampler = GroupedTpe(n_startup_trials=10, seed=5)   # asked here directly, not by the study
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    dists = {"x": CategoricalDistribution([1, 2, 3]), "y": CategoricalDistribution([1, 2])}
    late = study.ask(dists)                                  # running while 30 others finish
    for i in range(30):
        t = study.ask(dists)
        study.tell(t, float(i)) if i % 3 else study.tell(t, state=TrialState.PRUNED)
    added = []
    groups = sampler._group_decomposed_search_space._search_space
    real_add = groups.add_distributions
    groups.add_distributions = lambda d: added.append(d) or real_add(d)
    space = sampler.infer_relative_search_space(study, late)
    assert set(space) == {"x", "y"} and len(added) == 20     # every completed trial, once
    assert sampler._settled == 0                              # nothing passed over for good: trial 0 runs
    copied = sampler._search_space_group
    sampler.infer_relative_search_space(study, late)
    assert len(added) == 20 and sampler._search_space_group is copied   # nothing new: no copy either
    study.tell(late, 100.0)                                   # the oldest finishes last
    sampler.infer_relative_search_space(study, late)
    assert len(added) == 21 and sampler._search_space_group is not copied
    assert sampler._settled == 31                             # all finished: none is looked at again
    t = study.ask(dists)
    study.tell(t, 1.0)
    sampler.infer_relative_search_space(study, t)
    assert len(added) == 22 and sampler._settled == 32
    # What a fresh sampler works out from the whole study is the same.
    fresh = GroupedTpe(n_startup_trials=10, seed=5)
    assert fresh.infer_relative_search_space(study, t) == sampler.infer_relative_search_space(study, t)


def test_bounded_history_works_out_what_to_keep_once_per_read():
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    history = BoundedHistory(keep=5, best=3)
    running = _told(study)
    for i in range(20):
        _told(study, value=float(i))
    kept = []
    real = history._kept
    history._kept = lambda trials: kept.append(1) or real(trials)

    def seen():
        with history.view(study):
            return [t.number for t in study._get_trials(deepcopy=False, states=None, use_cache=False)]

    with one_read(study):                                      # one proposal: its groups view alike
        first, second = seen(), seen()
    assert first == second and len(kept) == 1
    assert first == [0, 16, 17, 18, 19, 20]                   # the running one, the 3 best and the 5 latest
    study.tell(running, -1.0)                                  # outside a read, each view reads afresh:
    assert seen() == [16, 17, 18, 19, 20] and len(kept) == 2   # finished, neither best nor latest


def test_grouped_tpe_converts_trials_as_optuna_does_in_order_with_running_ones_among_them():
    from optuna.distributions import IntDistribution

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=2))
    full = {"x": CategoricalDistribution([1, 2, 4]), "y": IntDistribution(0, 9)}
    running = []
    for i in range(700):   # past the first block of rows, so that the columns grow
        t = study.ask(full if i % 5 else {"x": full["x"]})   # every fifth lacks y
        if i % 97 == 3:
            running.append(t)                                # running among the finished
        else:
            study.tell(t, float(i % 13))
    ours = GroupedTpe(seed=0)
    stock = optuna.samplers.TPESampler(seed=0)
    for _ in range(2):   # the second time from the kept columns
        trials = study.get_trials(deepcopy=False)
        got, want = ours._get_internal_repr(trials, full, study), stock._get_internal_repr(trials, full, study)
        assert got.keys() == want.keys()
        for name in full:
            assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name])
    study.tell(running[0], 5.0)   # a running trial finishes: its values are kept from now on
    trials = study.get_trials(deepcopy=False)
    got, want = ours._get_internal_repr(trials[::-1], full, study), stock._get_internal_repr(trials[::-1], full, study)
    assert all(np.array_equal(got[n], want[n]) for n in full) and len(got["x"]) == 560
    assert ours._get_internal_repr([], full, study)["x"].size == 0


@pytest.mark.parametrize("constant_liar", [False, True])
def test_grouped_tpe_samples_only_the_chosen_familys_group(constant_liar):
    args = dict(n_startup_trials=10, n_ei_candidates=24, constant_liar=constant_liar, seed=7)
    got = _conditional_run(GroupedTpe(choice="KERNEL", **args))
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        stock = _conditional_run(optuna.samplers.TPESampler(multivariate=True, group=True, **args))
    assert got[:10] == stock[:10]                      # random start-up trials: nothing to skip
    for kernel, params, relative in got[10:]:
        assert "KERNEL" in relative and relative - {"KERNEL"} == set(params)
    for kernel, params, relative in stock[10:]:
        assert relative > {"KERNEL", *params}          # Optuna samples the other families' too
    # It still learns: family b scores twice as much, and most proposals after the start go to it.
    assert sum(k == "b" for k, _, _ in got[30:]) > 15


def _told(study, value=None, state=None):
    trial = study.ask({"x": CategoricalDistribution([1, 2, 3])})
    if value is not None:
        study.tell(trial, value)
    elif state is not None:
        study.tell(trial, state=state)
    return trial


def test_bounded_history_shows_the_best_the_latest_and_the_running():
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    history = BoundedHistory(keep=5, best=3)
    late = _told(study)                                    # running while the others finish
    for i in range(20):
        _told(study, value=float((i * 7) % 20)) if i % 4 else _told(study, state=TrialState.PRUNED)
    running = _told(study)
    numbers = lambda trials: [t.number for t in trials]    # noqa: E731
    everything = study.get_trials(deepcopy=False)
    with history.view(study):
        seen = study._get_trials(deepcopy=False, states=None, use_cache=False)
        complete = study._get_trials(deepcopy=True, states=(TrialState.COMPLETE,))
    done = [t for t in everything if t.state == TrialState.COMPLETE]
    best3 = sorted(done, key=lambda t: t.value)[-3:]
    latest5 = [t for t in everything if t.state.is_finished()][-5:]
    assert numbers(seen) == sorted({*numbers(best3), *numbers(latest5), late.number, running.number})
    assert all(t.state == TrialState.COMPLETE for t in complete) and len(complete) < len(done)
    assert "_get_trials" not in vars(study)                # the study is put back
    # A trial that finishes after later ones did, with the best value, is among the best next time.
    study.tell(late, 100.0)
    with history.view(study):
        seen = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=False)
    assert late.number in numbers(seen) and running.number not in numbers(seen)
    assert len(seen) <= 3 + 5


def test_grouped_tpe_reads_a_bounded_history_and_proposes_as_optuna_does_within_it():
    args = dict(n_startup_trials=10, n_ei_candidates=24, constant_liar=True, seed=7)
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        stock = optuna.samplers.TPESampler(multivariate=True, group=True, **args)
    # Within the bound, the same proposals; beyond it, TPE's estimators see at most the bound.
    assert _conditional_run(GroupedTpe(**args), ("a",), n=80) == _conditional_run(stock, ("a",), n=80)
    ours = GroupedTpe(**args)
    ours._history = BoundedHistory(keep=20, best=5)
    read = []
    real = GroupedTpe._build_parzen_estimator

    def spy(self, study, search_space, trials, handle_below):
        read.append(len(trials))
        return real(self, study, search_space, trials, handle_below)

    GroupedTpe._build_parzen_estimator = spy
    try:
        _conditional_run(ours, ("a",), n=80)
    finally:
        GroupedTpe._build_parzen_estimator = real
    assert read and max(read) <= 20 + 5 + 1                # below + above: the kept trials, and the one asked
    assert max(read) > 20                                  # the bound is reached, not undershot


def test_grouped_tpe_splits_once_per_proposal_and_converts_a_trial_once_proposing_as_optuna_does(monkeypatch):
    from optuna.samplers._tpe import sampler as tpe_module

    args = dict(n_startup_trials=10, n_ei_candidates=24, constant_liar=True, seed=3)
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        stock = optuna.samplers.TPESampler(multivariate=True, group=True, **args)
    # Candidates in flight while others are asked, pruned ones among the finished: the same
    # proposals as Optuna's, though its split and conversions are done once.
    assert _conditional_run(GroupedTpe(**args), ("a",), n=70, ahead=3) == _conditional_run(stock, ("a",), n=70, ahead=3)
    splits, converted = [], []
    real_split = tpe_module._split_trials
    spy = lambda *a: splits.append(1) or real_split(*a)   # noqa: E731
    monkeypatch.setattr(tpe_module, "_split_trials", spy)
    real_convert = CategoricalDistribution.to_internal_repr
    monkeypatch.setattr(CategoricalDistribution, "to_internal_repr",
                        lambda self, v: converted.append(1) or real_convert(self, v))
    ours = GroupedTpe(choice="KERNEL", **args)
    proposed = _conditional_run(ours, n=60, ahead=3)
    assert tpe_module._split_trials is spy                 # put back after each proposal
    # Two groups a proposal (KERNEL, then the family's) once 10 have finished: one split each.
    sampled = sum(1 for _, _, relative in proposed if relative)
    assert sampled >= 40 and len(splits) == sampled
    # Each finished trial's 4 parameters converted once (60 asked, 3 running at the end), and the
    # running trials' each time they are read; converting every trial for each estimator costs
    # ten times as many.
    assert len(converted) < 10 * 60 * 4
    assert ours._rows and all(len(observed.data) == len(names) and max(observed.at.values()) < observed.used
                              for names, observed in ours._rows.items())


def test_a_candidate_accept_refuses_scores_below_every_other_unless_it_refuses_all(monkeypatch):
    scores = np.array([3.0, 9.0, 5.0, 7.0])
    monkeypatch.setattr(optuna.samplers.TPESampler, "_compute_acquisition_func",
                        lambda self, samples, below, above: scores.copy())
    sampler = GroupedTpe(choice="KERNEL", seed=0)
    space = {"a.x": CategoricalDistribution([1, 2, 4, 8])}
    samples = {"a.x": np.array([0.0, 1.0, 2.0, 3.0])}   # internal: positions of 1, 2, 4, 8
    seen = []
    sampler.accept = lambda params: seen.append(params) or params["a.x"] in (1, 4)
    assert list(sampler._compute_acquisition_func(samples, None, None)) == list(scores)   # not sampling a group
    sampler._sampling = {"KERNEL": "a"}, space
    got = sampler._compute_acquisition_func(samples, None, None)
    assert seen == [{"KERNEL": "a", "a.x": v} for v in (1, 2, 4, 8)]   # with what was chosen before
    assert list(got) == [3.0, -np.inf, 5.0, -np.inf]   # TPE's pick becomes x = 4, the best accepted
    sampler.accept = lambda params: False
    assert list(sampler._compute_acquisition_func(samples, None, None)) == list(scores)


@pytest.mark.parametrize("families", [("a",), ("a", "b", "c")], ids=["one-family", "a-choice"])
def test_grouped_tpe_proposes_only_what_accept_takes_when_a_candidate_is_taken(families):
    # TPE's favourite region (high values, family b) refused: after the start-up trials every
    # proposal is one that ``accept`` takes; without it, TPE goes there.
    def refused(params):
        return any(v == 16 for k, v in params.items() if k != "KERNEL")

    args = dict(n_startup_trials=10, n_ei_candidates=24, seed=3)
    free = _conditional_run(GroupedTpe(choice="KERNEL", **args), families, n=50)
    assert sum(refused(p) for _, p, _ in free[10:]) > 5
    sampler = GroupedTpe(choice="KERNEL", **args)
    sampler.accept = lambda params: not refused(params)
    held = _conditional_run(sampler, families, n=50)
    assert held[:10] == free[:10]   # random start-up: nothing chosen among candidates
    assert not any(refused(p) for _, p, _ in held[10:])
