"""Proposals made ahead, in a process of their own, so that the devices never wait for the
sampler.

At 1024³ on the H200 the search process was busy all the time and the timing worker 39 % of
it: a sampling profile of the search process put 53 % of its time in TPE's proposals and
35 % in writing trials to the database (docs/search.md, "The search pipeline"). Here a
child process proposes from the study's copy in memory (``proposer.Proposer`` as a replay
runs it, with the same rules: invalid and measured-before proposals are told there and never
reach the search process), while the search process stores what is proposed, claims it and
records results. The child keeps ``AHEAD`` proposals ready; the sampler sees them as running
trials (the constant liar), as it sees candidates in flight.

The child is forked: it starts with the search's state (the copy, the strategy and what it
learned before, the valid space) without pickling any of it, and touches nothing the parent
owns (it writes to no database and opens no device). Where fork is not the platform's way
(``ahead_possible``), the search proposes in its own process, as a replay does.
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing as mp
import os
import signal
from collections import deque

import optuna

from gemmtune.errors import GemmtuneError
from gemmtune.execution.child import die_with_parent
from gemmtune.devices.info import forking_is_safe as ahead_possible
from gemmtune.search.proposer import Proposer


AHEAD = 4   # proposals the child keeps ready: enough to cover a burst of free builders


class NotReady:
    """What ``AheadProposer.next`` returns while the child is still proposing."""



class Journal(dict):
    """A dict that remembers which keys were set or removed since ``take()``: the search's
    ``measured``, whose changes the child must see."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.changed: dict = {}

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.changed[key] = value

    def pop(self, key, *default):
        self.changed[key] = None
        return super().pop(key, *default)

    def setdefault(self, key, value=None):
        if key not in self:
            self[key] = value
        return self[key]

    def take(self) -> dict:
        changed, self.changed = self.changed, {}
        return changed


def _serve(conn, parent_end, proposer: Proposer, learn, parent: int) -> None:
    """The child: propose while fewer than AHEAD are out, apply what the parent says. It ends
    when told, or with the parent (killed: at once, ``die_with_parent``; else its end of the
    pipe closes, as the copy of it forked here is closed first)."""
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    parent_end.close()
    flying: dict[int, optuna.Trial] = {}           # proposed here -> its trial in the copy
    out, done = 0, False
    while True:
        if out < AHEAD and not done and not conn.poll(0):
            proposal = proposer.next()
            if proposal is None:
                done = True
                conn.send(None)
                continue
            trial, config, _ = proposal
            flying[trial.number] = trial
            out += 1
            conn.send((trial.number, config))
            continue
        try:
            while not conn.poll(1.0):
                if os.getppid() != parent:
                    return
            kind, *args = conn.recv()
        except (EOFError, OSError):   # the parent is gone
            return
        if kind == "close":
            return
        if kind == "measured":
            for key, value in args[0].items():
                if value is None:
                    proposer.measured.pop(key, None)
                else:
                    proposer.measured[key] = value
        elif kind == "learn":
            learn(*args)
        elif kind == "took":
            out -= 1
        elif kind == "known":     # measured or claimed elsewhere before the parent took it
            number, status, value = args
            out -= 1
            proposer.tell_known(flying.pop(number), status, value)
        elif kind == "tell":
            number, config, value, status = args
            proposer.tell(flying.pop(number), config, value, status)
        elif kind == "abandon":
            number, status = args
            proposer.abandon(flying.pop(number), status)


class AheadProposer:
    """``proposer.Proposer``'s interface for a search (``next``, ``tell``, ``abandon``), its
    proposals made in a child process. ``next`` returns ``NotReady`` rather than wait for the
    child; ``connection`` becomes readable when a proposal arrives. ``proposer`` (over the
    study's copy, its ``measured`` a ``Journal``) stays here for what touches the database:
    storing, claiming and telling the trials."""

    def __init__(self, proposer: Proposer):
        if proposer.copy is None or not isinstance(proposer.measured, Journal):
            raise ValueError("proposals are made ahead from a study's copy, with measured a Journal")
        self.proposer, self.measured = proposer, proposer.measured
        self.measured.take()
        child = copy.copy(proposer)   # proposes from the copy alone, as a replay does
        child.study, child.copy, child.measured = proposer.copy.study, None, dict(proposer.measured)
        child.claim = child.refresh = None
        child.batch = contextlib.nullcontext
        self.connection, child_end = mp.Pipe()
        self.process = mp.get_context("fork").Process(
            target=_serve, args=(child_end, self.connection, child, proposer.copy.learn, os.getpid()),
            name="gemmtune-proposer", daemon=True)
        self.process.start()
        child_end.close()
        self.ready: deque = deque()
        self.numbers: dict[int, int] = {}   # the database trial's number -> the child's

    def _send(self, *message) -> None:
        changed = self.measured.take()
        try:
            if changed:
                self.connection.send(("measured", changed))
            if message:
                self.connection.send(message)
        except (OSError, EOFError):
            raise GemmtuneError("the process that proposes configurations stopped") from None

    def learn(self, config, value) -> None:
        """Another process's result, for the child's copy of the study."""
        self._send("learn", config, value)

    def next(self):
        """(trial, config, key) as ``Proposer.next``; ``NotReady`` while none is ready."""
        self._send()
        p = self.proposer
        while True:
            try:
                while self.connection.poll(0):
                    self.ready.append(self.connection.recv())
            except (EOFError, OSError):
                raise GemmtuneError("the process that proposes configurations stopped") from None
            if not self.ready:
                return NotReady
            item = self.ready.popleft()
            if item is None:
                return None
            number, config = item
            key = config.key
            if key in self.measured:   # became known after the child proposed it
                self._send("known", number, *self.measured[key])
                continue
            trial = p.store(config)
            if not p.claimed(key, trial):
                self._send("known", number, *self.measured[key])
                continue
            self.measured[key] = ("in_flight", None)
            self.numbers[trial.number] = number
            self._send("took", number)
            return trial, config, key

    def tell(self, trial, config, value: float | None, status: str | None = None) -> None:
        self.proposer.tell_study(trial, value, status)
        self._send("tell", self.numbers.pop(trial.number), config, value, status)

    def abandon(self, trial, status: str) -> None:
        self.proposer.abandon(trial, status)
        self._send("abandon", self.numbers.pop(trial.number), status)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.connection.send(("close",))
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()
