"""How far breeding (``gemmtune.models.breeding``) takes the learned cost model's best beyond a sample of
the device's whole valid space, at a problem none of the landscapes holds (docs/search.md,
"Breeding the model's best"). The model is fitted to every landscape of the database, as a
search's is to the device's other problems; the device is the landscapes'.

    python tools/breed_bench.py --db land25.db -p s --shape 1792,1536,1280 [--samples 4] [--device nvidia-h200]

``--db``: a landscapes' database as tools/replay_bench.py writes it (written first where it
does not exist). Per sample of ``opening.MODEL_SAMPLE`` configurations (the seeds' sample), a row:
the model's best score in the sample and after breeding from it (its predicted log GFLOP/s
relative to the problem's best: 0 is the best, higher is better), how many configurations
breeding scored, the seconds each took, and the tile of the best bred configuration.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_bench  # noqa: E402


def breed(db: Path, precision: str, shape: tuple[int, int, int], samples: int) -> list[dict]:
    """One dict per sample: its best score, the bred best, how many were bred, the seconds."""
    from gemmtune.db.store import Store
    from gemmtune.errors import GemmtuneError
    from gemmtune.models import learned
    from gemmtune.precision import get_precision
    from gemmtune.search import opening, replay
    from gemmtune.space import load_space
    from gemmtune.space.valid import ValidConfigs

    store = Store(f"sqlite:///{db}", create=False)
    try:
        rows = store.frame()
    finally:
        store.close()
    if rows.empty:
        raise GemmtuneError(f"{db} holds no results")
    land = replay.load_landscape(f"sqlite:///{db}", sorted(set(rows.study))[0])
    dev, prec = replay.device_for(land), get_precision(precision)
    fitted = learned.prior_model(rows, dev, land.peaks)
    if fitted is None:
        raise GemmtuneError(f"{db} holds too few usable rows to fit a model")
    valid = ValidConfigs(load_space(device=dev), dev, prec)
    problem = learned.DeviceProblem(dev, prec, *shape, peaks=land.peaks)

    def score(configs):
        return fitted.score(configs, problem)

    out = []
    for seed in range(samples):
        rng = random.Random(seed)
        start = time.perf_counter()
        sample = valid.sample(opening.MODEL_SAMPLE, rng)
        scores = score(sample)
        drawn_s = time.perf_counter() - start
        start = time.perf_counter()
        bred = opening.breed(valid, score, dict(zip(sample, scores)), rng)   # as a search breeds its seeds' sample
        bred_s = time.perf_counter() - start
        top = max(bred, key=bred.get) if bred else None
        out.append({"sample": float(scores.max()), "bred": max(float(scores.max()), *bred.values()),
                    "count": len(bred), "sample_s": drawn_s, "bred_s": bred_s, "best": top})
    return out


def tile(config) -> str:
    if config is None:
        return "–"
    p = config.params
    return f"{config.kernel} {p.get('MWG', '?')} x {p.get('NWG', '?')}, {p.get('MDIMC', '?')} x {p.get('NDIMC', '?')}"


def table(found: list[dict]) -> str:
    lines = ["| sample | its best | bred best | bred | seconds (sample, breeding) | best bred |", "|---|---|---|---|---|---|"]
    lines += [f"| {i} | {r['sample']:.3f} | {r['bred']:.3f} | {r['count']} | {r['sample_s']:.2f}, {r['bred_s']:.2f} | "
              f"{tile(r['best'])} |" for i, r in enumerate(found)]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, required=True, help="the landscapes' SQLite file (written if missing)")
    ap.add_argument("--device", default=replay_bench.DEVICE,
                    help=f"whose landscapes a missing --db gets (default: {replay_bench.DEVICE})")
    ap.add_argument("-p", "--precision", default="s", help="s, d, c or z (default s)")
    ap.add_argument("--shape", default="1792,1536,1280", help="m,n,k (default 1792,1536,1280)")
    ap.add_argument("--samples", type=int, default=4, help="samples drawn, each with its own seed (default 4)")
    args = ap.parse_args(argv)
    from gemmtune.errors import GemmtuneError
    from gemmtune.precision import get_precision
    from gemmtune.shapes import parse_inline

    try:
        try:
            shapes = parse_inline(args.shape)
        except GemmtuneError as e:   # its words are of --shapes items: say which option this is
            raise GemmtuneError(f"--shape {args.shape!r}: {str(e).split(': ', 1)[-1]}") from None
        if len(shapes) != 1 or shapes[0].precision is not None:
            raise GemmtuneError(f"--shape must be one problem m,n,k, got {args.shape!r}")
        if args.samples < 1:
            raise GemmtuneError(f"--samples must be at least 1, got {args.samples}")
        get_precision(args.precision)
        if not args.db.exists():
            print(f"writing {args.db}: {replay_bench.build(args.db, device=args.device)} rows", file=sys.stderr, flush=True)
        found = breed(args.db, args.precision, (shapes[0].m, shapes[0].n, shapes[0].k), args.samples)
    except GemmtuneError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
