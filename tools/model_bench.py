"""How well the learned cost model ranks each landscape of the search-efficiency benchmark
(docs/search.md), two ways: fitted to the other landscapes (what a search at a new problem
has, and what issue 26's target judges), and fitted to the landscape's own rows, k-fold (what
the features can explain there at all). Where the second is high and the first low, the
other landscapes teach something that does not hold there.

    python tools/model_bench.py --db land25.db [--folds 5] [--forest-seed 0] [--device nvidia-h200]

``--db``: a landscapes' database as tools/replay_bench.py writes it (written first where it
does not exist, of ``--device``'s landscapes). Prints a Markdown table, a row per landscape,
and the count of each column at 0.7 or more.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_bench  # noqa: E402

GOOD = 0.7


def within(land, dev, folds: int, seed: int) -> float:
    """Spearman of the landscape's correct rows with the predictions of trees fitted, fold by
    fold, to its other correct rows."""
    from sklearn.model_selection import KFold

    from gemmtune.models import analytic, learned

    ok = [c for c in land.configs if land.gflops(c) is not None]
    x = learned.features(ok, learned.DeviceProblem(dev, land.precision, *land.shape, peaks=land.peaks))
    gflops = np.array([land.gflops(c) for c in ok])
    y = learned.relative_targets(gflops, np.zeros(len(ok)))
    predicted = np.empty(len(ok))
    for fit, held in KFold(folds, shuffle=True, random_state=seed).split(x):
        predicted[held] = learned.CostModel(seed).fit(x[fit], y[fit]).predict(x[held])[0]
    return analytic.spearman(-predicted, 1 / gflops)


def rows(db: Path, folds: int, seed: int) -> list[tuple[str, int, float | None, float]]:
    """Per landscape: its name, correct configurations, Spearman left out and within."""
    from gemmtune.db.store import Store
    from gemmtune.models import learned
    from gemmtune.search import replay

    store = Store(f"sqlite:///{db}", create=False)
    try:
        studies = sorted(set(store.frame().study))
    finally:
        store.close()
    out = []
    for study in studies:
        land = replay.load_landscape(f"sqlite:///{db}", study)
        dev = replay.device_for(land)
        fitted = learned.prior_model(replay.other_studies(land, dev), dev, land.peaks, seed=seed)
        ok = sum(land.gflops(c) is not None for c in land.configs)
        out.append((study, ok, replay.learned_spearman(land, dev, fitted), within(land, dev, folds, seed)))
        print(f"{study}", file=sys.stderr, flush=True)
    return out


def table(found: list[tuple[str, int, float | None, float]], folds: int) -> str:
    lines = [f"| landscape | correct | Spearman, the others' model | Spearman, its own ({folds}-fold) |",
             "|---|---|---|---|"]
    # "–": no other problem in the database taught a model
    lines += [f"| {s} | {n} | {'–' if a is None else f'{a:.2f}'} | {b:.2f} |" for s, n, a, b in found]
    left, own = (sum(row[i] is not None and row[i] >= GOOD for row in found) for i in (2, 3))
    return "\n".join(lines) + f"\n\nAt least {GOOD}: {left} of {len(found)} left out, {own} of {len(found)} within."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, required=True, help="the landscapes' SQLite file (written if missing)")
    ap.add_argument("--device", default=replay_bench.DEVICE,
                    help=f"whose landscapes a missing --db gets (default: {replay_bench.DEVICE})")
    ap.add_argument("--folds", type=int, default=5, help="folds of the within-landscape fits (default 5)")
    ap.add_argument("--forest-seed", type=int, default=0, help="random seed of the trees and the folds (default 0)")
    args = ap.parse_args(argv)
    if args.folds < 2:
        print(f"Error: --folds must be at least 2, got {args.folds}", file=sys.stderr)
        return 2
    if not 0 <= args.forest_seed < 2**32:
        print(f"Error: --forest-seed must be in 0 .. 2**32 - 1, got {args.forest_seed}", file=sys.stderr)
        return 2
    from gemmtune.errors import GemmtuneError

    try:
        if not args.db.exists():
            print(f"writing {args.db}: {replay_bench.build(args.db, device=args.device)} rows", file=sys.stderr, flush=True)
        found = rows(args.db, args.folds, args.forest_seed)
    except GemmtuneError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    print(table(found, args.folds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
