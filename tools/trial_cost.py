"""What the search process spends on the database for each measured trial, without a device:
a trial stored in the study with its parameters (as the proposals made ahead are), its
configuration claimed, the result told to Optuna and the results row written (eight time
samples, as a short timing has), over a study as ``gemmtune search`` opens it.

    python tools/trial_cost.py [--trials 300] [--db sqlite:///scratch.db] [--device 0] [-p s]

Prints the median milliseconds of each step and their sum, over the trials after the first
20 (the first ones warm the caches). A timing worker waits for this process whenever a
trial on the device takes less than this and the proposals together. ``--db``: a database to
write into (default: a new SQLite file in a temporary folder); it must not hold a study named
``trial-cost``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

STEPS = ("store", "claim", "tell", "record")
WARM = 20   # trials left out of the medians


def measure(url: str, trials: int, device: str, precision: str) -> dict[str, list[float]]:
    """Milliseconds of each step, per trial."""
    from gemmtune.db.store import Store
    from gemmtune.devices.opencl import resolve_device
    from gemmtune.errors import GemmtuneError
    from gemmtune.execution.messages import Outcome
    from gemmtune.precision import get_precision
    from gemmtune.search.ahead import Journal
    from gemmtune.search.proposals import Proposals
    from gemmtune.search.recording import claim_text, record
    from gemmtune.search.proposer import Proposer
    from gemmtune.search.session import StudySession, quiet_heartbeat
    from gemmtune.space import load_space
    from gemmtune.strategies import DEFAULT, make_strategy
    from gemmtune.measure.timing import Timing
    from gemmtune.space.valid import ValidConfigs

    dev, prec = resolve_device(device), get_precision(precision)
    space = load_space(device=dev)
    valid, rng = ValidConfigs(space, dev, prec), random.Random(0)
    configs = list(dict.fromkeys(valid.sample(2 * trials, rng)))[:trials]
    if len(configs) < trials:
        raise GemmtuneError(f"--trials {trials}: the device's space has {len(configs)} configurations to draw")
    strategy = make_strategy(DEFAULT, 0)
    proposals = Proposals(space, strategy.ordinal)
    store = Store(url)
    name = "trial-cost"
    if store.frame(study=name).shape[0]:
        raise GemmtuneError(f"{store.shown} already holds a study {name!r}")
    session = StudySession(url, name, strategy, 60, lambda *lost: None, proposals)
    proposer = Proposer(session.study, proposals, valid, Journal(), strategy, rng, [], batch=session.storage.batch,
                        copy=session.copy, claim=lambda key, trial: store.claim(name, claim_text(key), trial.number))
    spent: dict[str, list[float]] = {step: [] for step in STEPS}
    try:
        with quiet_heartbeat():
            for i, config in enumerate(configs):
                key = config.key
                t0 = time.perf_counter()
                trial = proposer.store(config)
                t1 = time.perf_counter()
                proposer.claimed(key, trial)
                session.started(trial)
                t2 = time.perf_counter()
                value = None if i % 10 == 9 else 100.0 + i   # every tenth a failure, as searches have them
                status = "ok" if value is not None else "wrong_result"
                proposer.tell_study(trial, value, status)
                session.ended(trial)
                t3 = time.perf_counter()
                timing = Timing((1.0 + i / 1000,) * 8, (0.9,) * 8, (0.95,) * 8) if value is not None else None
                record(store, name, trial.number, dev, prec, 64, 64, 64, config, Outcome(status, timing), False)
                t4 = time.perf_counter()
                for step, a, b in zip(STEPS, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                    spent[step].append((b - a) * 1e3)
    finally:
        session.close()
        store.close()
    return spent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=300, help=f"trials to store and tell (default 300; more than {WARM})")
    ap.add_argument("--db", help="database URL to write into (default: a new SQLite file in a temporary folder)")
    ap.add_argument("--device", default="0", help="the device whose space the configurations come from (default 0)")
    ap.add_argument("-p", "--precision", default="s")
    args = ap.parse_args(argv)
    if args.trials <= WARM:
        print(f"Error: --trials must be more than {WARM}, got {args.trials}", file=sys.stderr)
        return 2
    from gemmtune.errors import GemmtuneError

    with tempfile.TemporaryDirectory() as scratch:
        url = args.db or f"sqlite:///{Path(scratch) / 'trial-cost.db'}"
        try:
            spent = measure(url, args.trials, args.device, args.precision)
        except GemmtuneError as e:
            print(f"Error: {e}", file=sys.stderr)
            return 2
    medians = {step: statistics.median(values[WARM:]) for step, values in spent.items()}
    print(f"median ms per trial over {args.trials - WARM} trials")
    for step, ms in medians.items():
        print(f"{step:8s} {ms:6.2f}")
    print(f"{'total':8s} {sum(medians.values()):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
