"""Proposals made ahead in a process of their own (gemmtune.search.ahead): the search process
gets valid, unmeasured configurations that it stores, claims and tells, and the child learns
every result; what became known after the child proposed it is never measured twice."""

from __future__ import annotations

import random
import sys
import time
from multiprocessing import connection as mp_connection
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers_foundation, whatever the import mode
from helpers_foundation import SMALL_SPACE  # noqa: E402
from test_study_copy import Refusing, configs  # noqa: E402

from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.optuna_adapter import BatchedStorage  # noqa: E402
from gemmtune.search.ahead import AHEAD, AheadProposer, Journal, NotReady, ahead_possible  # noqa: E402
from gemmtune.search.proposals import Proposals
from gemmtune.search.proposer import Proposer  # noqa: E402
from gemmtune.search.session import StudyCopy  # noqa: E402
from gemmtune.space import parse_space  # noqa: E402
from gemmtune.strategies import make_strategy  # noqa: E402

pytestmark = pytest.mark.skipif(not ahead_possible(), reason="proposals are made ahead where fork is the way")
SPACE = parse_space(SMALL_SPACE, "test")


@pytest.fixture
def study(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = BatchedStorage(f"sqlite:///{tmp_path / 'o.db'}")
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize", sampler=Refusing())
    yield study
    storage.engine.dispose()


def ahead_proposer(study, claim=None, refresh=None, valid=None):
    proposals = Proposals(SPACE)
    strategy = make_strategy("tpe", 3)
    copy = StudyCopy(study, strategy.sampler(constant_liar=True), proposals)
    measured = Journal()
    valid = configs() if valid is None else valid
    keys = {c.key for c in valid}
    inner = Proposer(study, proposals, valid, measured, strategy, random.Random(3), [], claim=claim, refresh=refresh,
                     is_valid=lambda c: c.key in keys, copy=copy)
    return AheadProposer(inner), measured


def take(ahead, timeout=20.0):
    """The next proposal, waiting for the child as the search loop does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ahead.next()
        if got is not NotReady:
            return got
        mp_connection.wait([ahead.connection], timeout=1.0)
    raise AssertionError("no proposal within the time")


def fill(ahead, count):
    """Wait until the child has ``count`` proposals ready, read into ``ahead.ready``."""
    deadline = time.monotonic() + 20
    while len(ahead.ready) < count and time.monotonic() < deadline:
        mp_connection.wait([ahead.connection], timeout=1.0)
        while ahead.connection.poll(0):
            ahead.ready.append(ahead.connection.recv())
    assert len(ahead.ready) >= count


def test_a_journal_remembers_what_was_set_and_removed():
    j = Journal({"a": 1})
    j["b"] = 2
    j.setdefault("a", 5)
    j.setdefault("c", 3)
    j.pop("a")
    assert j.take() == {"b": 2, "c": 3, "a": None} and j.take() == {}
    assert dict(j) == {"b": 2, "c": 3}


def test_proposals_made_ahead_are_valid_distinct_and_every_result_reaches_the_child(study):
    ahead, measured = ahead_proposer(study)
    try:
        seen = []
        for i in range(24):
            trial, config, key = take(ahead)
            assert measured[key] == ("in_flight", None) and key not in seen
            seen.append(key)
            value = float(sum(config.params.values()) % 17) if i % 5 else None
            ahead.tell(trial, config, value, "ok" if value is not None else "wrong_result")
            measured[key] = ("ok" if value is not None else "wrong_result", value)
        stored = [t for t in study.trials]
        assert len(stored) == 24 and all(t.state.is_finished() for t in stored)   # only what was measured
        assert sum(t.state == TrialState.COMPLETE for t in stored) == 24 - 5
    finally:
        ahead.close()
    assert not ahead.process.is_alive()


def test_a_proposal_measured_meanwhile_is_passed_over_and_told_to_the_child(study):
    ahead, measured = ahead_proposer(study)
    try:
        fill(ahead, AHEAD)
        number, config = ahead.ready[0]
        key = config.key
        measured[key] = ("ok", 3.0)   # another process's result, read after the child proposed it
        trial, got, got_key = take(ahead)
        assert got_key != key
        ahead.tell(trial, got, 1.0, "ok")
        # The child was told: it goes on proposing, never that configuration again.
        for _ in range(12):
            trial, got, got_key = take(ahead)
            assert got_key != key
            ahead.tell(trial, got, 1.0, "ok")
            measured[got_key] = ("ok", 1.0)
        assert all(Proposals(SPACE).decode(t.params) != config for t in study.trials)
    finally:
        ahead.close()


def test_a_configuration_claimed_by_another_process_is_stored_pruned_and_not_measured(study):
    refused = []

    def claim(key, trial):
        if not refused:
            refused.append(key)
            return False
        return True

    ahead, measured = ahead_proposer(study, claim=claim)
    try:
        trial, config, key = take(ahead)
        assert refused and key != refused[0] and measured[refused[0]] == ("elsewhere", None)
        first = study.trials[0]
        assert first.state == TrialState.PRUNED and first.user_attrs["skipped"] == "in flight"
        ahead.tell(trial, config, 2.0, "ok")
    finally:
        ahead.close()


def test_a_dead_proposing_process_is_an_error_not_a_hang(study):
    ahead, _ = ahead_proposer(study)
    try:
        take(ahead)
        ahead.process.kill()
        ahead.process.join()
        with pytest.raises(GemmtuneError, match="proposes configurations stopped"):
            for _ in range(2 * AHEAD + 2):   # what it sent before it died is taken first
                take(ahead, timeout=2.0)
    finally:
        ahead.close()


def test_every_configuration_proposed_once_then_none(study):
    valid = configs()[:9]
    ahead, measured = ahead_proposer(study, valid=valid)
    try:
        got = []
        while True:
            proposal = take(ahead)
            if proposal is None:
                break
            trial, config, key = proposal
            got.append(key)
            ahead.tell(trial, config, 1.0, "ok")
            measured[key] = ("ok", 1.0)
        assert sorted(got) == sorted(c.key for c in valid)
    finally:
        ahead.close()
