"""The search loop: Optuna proposes configurations of the valid space (``session``), the
pipeline builds and measures them (``pipeline``), and every measured trial becomes one row of
``results``, committed when the trial ends (``recording``). One StudySearch per study (``study_search``).
"""

from __future__ import annotations

import math
import signal
import socket
import threading
import time
from multiprocessing import connection as mp_connection
from typing import Callable

from gemmtune.db.connect import writing
from gemmtune.db.store import Store, database_url, probe
from gemmtune.errors import GemmtuneError
from gemmtune.execution.processes import Compilers, Runner
from gemmtune.families import FAMILIES
from gemmtune.devices.info import core_plan, host_cores
from gemmtune.inputs import check_jobs, check_problem, check_seed, check_study_name
from gemmtune.precision import Precision, get_precision
from gemmtune.search.finalists import needs_finalists, time_finalists
from gemmtune.search.study_search import StudySearch
from gemmtune.search.prior import PriorModels
from gemmtune.search.request import Progress, SearchRequest, Summary
from gemmtune.files.shipped import configs_dir
from gemmtune.space import Space, load_space, parse_space
from gemmtune.strategies import STRATEGIES, make_strategy
from gemmtune.space.valid import ValidConfigs


def check_request(req: SearchRequest) -> None:
    """Refuse bad options before any device opens."""
    if req.trials is not None and req.trials < 1:
        raise GemmtuneError(f"--trials must be at least 1, got {req.trials}")
    make_strategy(req.sampler, req.seed)   # an unknown name fails here
    if req.early_stop is not None and not 0 <= req.early_stop < 1:
        raise GemmtuneError(f"--early-stop must be in [0, 1), got {req.early_stop}")
    check_jobs(req.jobs)
    # What the command line's option types bound, for the library's callers too (nan fails
    # every comparison, so each bound is asked as what must hold).
    for name, value in (("--timeout", req.timeout), ("--trial-timeout", req.trial_timeout),
                        ("--time-cap", req.policy.max_seconds)):
        if value is not None and not 0 < value < math.inf:
            raise GemmtuneError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    if not 1 <= req.grace < math.inf:
        raise GemmtuneError(f"--heartbeat-grace must be at least 1 second and finite, got {req.grace!r}")
    check_seed(req.seed)
    check_study_name(req.study)
    if isinstance(req.batch, bool) or not isinstance(req.batch, int) or not 1 <= req.batch < 2**31:
        raise GemmtuneError(f"--batch must be a whole number from 1 to {2**31 - 1}, got {req.batch!r}")


def run_search(req: SearchRequest, progress: Callable[[Progress], None] | None = None) -> list[Summary]:
    """Search, measure and record on every device of ``req.device``; one Summary per study
    (devices of one model share one). Ctrl-C ends it early (``stopped_by``)."""
    with Testbed(req) as testbed:
        return testbed.search(req, progress)


class Testbed:
    """The timing workers, compiler processes and database of a search, opened once for every
    problem searched with them: a workload's problems share them, so each pays for its trials,
    not for starting processes and opening devices again (seconds each, on a GPU)."""

    def __init__(self, req: SearchRequest, problems: list[tuple[Precision, int, int, int, int]] | None = None):
        """``problems``: (precision, m, n, k, batch) of each search to come (default: ``req``'s),
        checked against the devices before anything opens."""
        from gemmtune.devices.opencl import device_specs, resolve_device

        check_request(req)
        # A given space file is read (and refused) now; without one, each device gets the
        # shipped space of its type once it is open.
        self.space = load_space(req.space_file) if req.space_file is not None else None
        self.req, self.specs = req, device_specs(req.device)
        # What would otherwise fail only after the workers opened their devices fails now: the
        # database, its lock and the devices.
        self.infos = list({i.key: i for i in map(resolve_device, self.specs)}.values())
        for prec, m, n, k, batch in problems or [(get_precision(req.precision), req.m, req.n, req.k, req.batch)]:
            for info in self.infos:
                check_problem(info, prec, m, n, k, batch=batch)
        self.url = database_url(req.db)   # resolved once: every part of the search opens this one
        self.early_lock = probe(self.url, lock=True)
        self.runners: list[Runner] = []
        self.compilers: dict[str, Compilers | None] = {}
        self.valid: dict[tuple[str, str, bool], tuple[Space, ValidConfigs]] = {}
        self.store = self.lock = self.priors = None

    @property
    def db(self):
        """The database as the search reads it: its store once open (no engine more), else its URL."""
        return self.store if self.store is not None else self.url

    def __enter__(self):
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _open(self) -> None:
        # The cost model of the seeds and the learned strategy, fitted while the workers start
        # (seconds each, on a GPU).
        early = STRATEGIES[self.req.sampler].fits_model(self.req.seeds)
        self.priors = PriorModels(self.url, self.infos, early=early)
        # Several timing workers share the host: each gets cores of its own, and the compilers
        # the rest. Measured on two H200s of one host, two unpinned workers each spent 1.6 times
        # as long per trial on the host (read-back, comparison, even waiting for the device) as
        # one alone; pinned to 8 cores each, no longer than alone.
        plan = core_plan(len(self.specs)) if len(self.specs) > 1 else None
        shares, compiler_cores = plan if plan else (None, None)
        for i, spec in enumerate(self.specs):
            self.runners.append(Runner(spec, self.req.trial_timeout, wait=False, cores=shares[i] if shares else None))
        for r in self.runners:
            r.ready()
        self.groups: dict[str, list[Runner]] = {}
        for r in self.runners:
            self.groups.setdefault(r.device.key, []).append(r)
        if self.req.study and len(self.groups) > 1:
            names = " and ".join(sorted({g[0].device.name for g in self.groups.values()}))
            raise GemmtuneError(f"--study names one study, but the devices are of different models ({names}), "
                                "each searched in a study of its own: leave --study out")
        jobs = default_jobs(compiler_cores) if self.req.jobs is None else self.req.jobs
        for key, group in self.groups.items():
            self.compilers[key] = Compilers(group[0].spec, max(1, jobs // len(self.groups)), self.req.trial_timeout,
                                            cores=compiler_cores or None) if jobs else None

    def _valid(self, dev, prec: Precision, batched: bool = False) -> tuple[Space, ValidConfigs]:
        key = (dev.key, prec.code, batched)
        if key not in self.valid:
            searched = batch_space(self.space or shipped_batch_space(dev)) if batched else \
                self.space or load_space(device=dev)
            valid = ValidConfigs(searched, dev, prec)   # drawn from and counted, never listed whole
            if not valid:
                raise GemmtuneError(f"no configuration of {searched.origin} is valid on device {dev.index} "
                                    f"for precision {prec.code} (see gemmtune space --explain)")
            valid.count_aside()   # for the summary, while the search runs
            self.valid[key] = searched, valid
        return self.valid[key]

    def search(self, req: SearchRequest, progress=None) -> list[Summary]:
        """One search of ``req``'s problem (its precision and shape; the rest as opened)."""
        prec = get_precision(req.precision)
        for info in self.infos:
            check_problem(info, prec, req.m, req.n, req.k, batch=req.batch)
        plans = [(group, *self._valid(group[0].device, prec, req.batch > 1)) for group in self.groups.values()]
        if self.store is None:   # opened last: bad input above leaves no database behind
            self.store = Store(self.url)
            self.lock = self.early_lock or self.store.lock()
        searches: list[StudySearch] = []
        with writing(self.store.url):   # a database failing mid-search (a full disk): one error, rows kept
            try:
                for group, searched, valid in plans:
                    searches.append(StudySearch(req, prec, searched, valid, group,
                                                self.compilers[group[0].device.key], self.store, self.priors))
                return _search(searches, req, progress)
            finally:
                for search in searches:
                    search.close()  # the proposing process, then Optuna's connections, before the store's

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        for lock in {id(x): x for x in (self.lock, self.early_lock) if x is not None}.values():
            lock.close()
        for compilers in self.compilers.values():
            if compilers is not None:
                compilers.close()
        for r in self.runners:
            r.close()


# The shipped spaces of a batch where a device type has one of its own (else its usual space's
# families that take batches): on a CPU, xgemm_cpu with operands read in place too.
BATCH_SPACES = {"CPU": "space-cpu-batch.toml"}


def shipped_batch_space(dev) -> Space:
    name = BATCH_SPACES.get(dev.type)
    if name is None:
        return load_space(device=dev)
    return parse_space((configs_dir() / name).read_text(encoding="utf-8"), f"configs/{name}")


def batch_space(space: Space) -> Space:
    """The families of ``space`` that plan a batch as one launch (``Family.takes_batch``): what a
    batched problem searches."""
    families = [fs for fs in space.families if fs.family.takes_batch]
    if not families:
        takes = ", ".join(name for name, f in FAMILIES.items() if f.takes_batch)
        raise GemmtuneError(f"no kernel family of {space.origin} takes a batch (those that do: {takes})")
    return Space(families, space.origin)


def default_jobs(compiler_cores: tuple[int, ...] | None = None) -> int:
    """One compiler process per core left to the compilers where they are pinned; else one per
    core beside the one the parent and the timing worker share."""
    if compiler_cores:
        return len(compiler_cores)
    return max(1, host_cores() - 1)


class _CtrlC:
    """Ctrl-C as a flag, not an exception: an exception could land inside a database write and
    leave its transaction holding SQLite's lock. ``wakeup`` becomes readable when it is pressed,
    so the main loop's wait returns at once."""

    def __enter__(self):
        self.pressed = False
        self.wakeup, self._writer = socket.socketpair()
        for end in (self.wakeup, self._writer):
            end.setblocking(False)
        self._handler = self._fd = None
        if threading.current_thread() is threading.main_thread():
            self._fd = signal.set_wakeup_fd(self._writer.fileno())
            self._handler = signal.signal(signal.SIGINT, self._press)
        return self

    def _press(self, signum, frame):
        self.pressed = True

    def drain(self) -> None:
        try:
            while self.wakeup.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def __exit__(self, *exc):
        if self._handler is not None:
            signal.signal(signal.SIGINT, self._handler)
            signal.set_wakeup_fd(self._fd)
        self.wakeup.close()
        self._writer.close()


def _search(searches: list[StudySearch], req: SearchRequest, progress) -> list[Summary]:
    with _CtrlC() as ctrl_c:
        return _run_searches(searches, req, progress, ctrl_c)


def _run_searches(searches: list[StudySearch], req: SearchRequest, progress, ctrl_c: _CtrlC) -> list[Summary]:
    start = time.monotonic()
    for search in searches:
        search.start, search.progress = start, progress
        search.pipeline.idle.start = start
        search.heartbeat()  # trials of searches that died before this one started
    beat, beat_s = start, min(search.session.beat for search in searches)
    try:
        while True:
            if ctrl_c.pressed:
                raise KeyboardInterrupt
            now = time.monotonic()
            asked = False
            for search in searches:
                if search.stopped_by is None and req.timeout is not None and now - start >= req.timeout:
                    search.stop("timeout")
                search.pipeline.collect()
                search.pipeline.feed()
                asked = search.fill_one() or asked
                search.pipeline.feed()
                search.pipeline.idle.note(search.pipeline, time.monotonic(), winding_down=not search.asking)
            if now - beat >= beat_s:
                beat = now
                for search in searches:
                    search.heartbeat()
            if all(search.finished for search in searches):
                break
            waits, deadlines = [], []
            for search in searches:
                w, d = search.pipeline.waits()
                if search.ahead and search.stopped_by is None and search.pipeline.has_room():
                    w.append(search.proposer.connection)   # a proposal made ahead would be taken
                waits += w
                deadlines += d
            if asked:
                continue  # more to ask: look at the devices again first, without waiting
            until = min(deadlines + [beat + beat_s])
            mp_connection.wait(waits + [ctrl_c.wakeup], timeout=max(0.0, until - time.monotonic()))
            ctrl_c.drain()
        for search in searches:
            if needs_finalists(search) and not ctrl_c.pressed:
                search.finalists = time_finalists(search, lambda: ctrl_c.pressed)
        if ctrl_c.pressed:   # while the finalists were timed again: those done stand, the search says so
            for search in searches:
                search.stopped_by = "interrupted"
    except KeyboardInterrupt:
        for search in searches:
            search.interrupt()
    elapsed = time.monotonic() - start
    for search in searches:
        search.pipeline.idle.note(search.pipeline, start + elapsed)
    return [search.summary(elapsed, search.pipeline.idle.shares(elapsed, len(search.pipeline.runners)))
            for search in searches]
