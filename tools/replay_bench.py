"""The search-efficiency benchmark of docs/search.md: every exhaustive landscape the project
recorded on a device, each replayed (``gemmtune replay``) with the other landscapes as the
device's other results, so that no learned model is judged on what it learned from.

    python tools/replay_bench.py --db land25.db --samplers default,random,optuna-cmaes,optuna-tpe --seeds 50 --jobs 2
    python tools/replay_bench.py --device nvidia-h100 --db h100.db

``--db`` (a SQLite file) is written first where it does not exist, from what the repository
holds for ``--device`` (default nvidia-h200): its description, ``docs/landscapes/DEVICE.json``
(what ``gemmtune devices --format json`` printed), its ``gemmtune peak`` figures where they were
measured (``DEVICE-peaks.json``; the models' features depend on them, and without them they use
the device's nominal peaks, as a search does), the landscapes of ``docs/landscapes/*-DEVICE.csv.gz``
(with the baseline each measured first), and the landscapes the package ships as the device's
prior (configs/prior-nvidia-h200.csv.gz: 16 on the H200; their ``ok`` and ``slow`` rows). Each
landscape's figures go to ``--out`` (JSON) as they come; a second run with the same file
replays only what it lacks. Prints a Markdown table: per landscape and sampler the
median of the measured trials to ``--target`` x the landscape's best (quartiles beside), the
learned model's rank correlation, and whether the default meets the bar of issue 26: a median
at most half the best stock sampler's (random, optuna-tpe, optuna-cmaes). Where the best stock
median is under 2 no strategy can (every search measures at least one trial).

``--forest-seed N`` fits the learned model's trees with another random seed than a search's (0):
the default's figures for that forest are kept apart (the stock samplers learn nothing, and
theirs serve every forest), so that a verdict can be checked against the forest it was made
with.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LANDSCAPES = REPO / "docs" / "landscapes"
DEVICE = "nvidia-h200"
STOCK = ("random", "optuna-tpe", "optuna-cmaes")


def devices() -> list[str]:
    """The devices the repository holds landscapes of."""
    return sorted(p.name.removesuffix(".json") for p in LANDSCAPES.glob("*.json") if not p.name.endswith("-peaks.json"))


def build(path: Path, studies=None, device: str = DEVICE) -> int:
    """Write the landscapes' database of ``device`` at ``path`` (a new file), of every landscape
    or those named in ``studies``; how many rows it holds."""
    import pandas as pd

    from gemmtune import __version__
    from gemmtune.db.store import Store, results
    from gemmtune.errors import GemmtuneError
    from gemmtune.devices.info import read_device_info
    from gemmtune.models import shipped_prior

    if device not in devices():
        raise GemmtuneError(f"no landscapes of a device {device!r} (there are: {', '.join(devices())})")
    dev = read_device_info(LANDSCAPES / f"{device}.json")
    parts = [shipped_prior.read(f) for f in sorted(LANDSCAPES.glob(f"*-{device}.csv.gz"))]
    shipped = REPO / "configs" / shipped_prior.file_name(dev.name)
    if shipped.is_file():
        parts.append(shipped_prior.read(shipped).assign(baseline=0))
    rows = pd.concat(parts, ignore_index=True)
    if rows.duplicated(["study", "kernel", "params"]).any():
        raise GemmtuneError(f"a landscape of {device} is in two files")
    if studies is not None:
        rows = rows[rows.study.isin(studies)]
    records = []
    for row in rows.to_dict(orient="records"):
        records.append({**row, "device": dev.key, "device_name": dev.name, "baseline": int(row["baseline"]) == 1,
                        "gflops": float(row["gflops"]), "trial": int(row["trial"]),
                        "created_at": "2026-12-04T00:00:00+00:00", "gemmtune_version": __version__,
                        # Rows written before transposes were recorded leave them empty.
                        "trans_a": row["trans_a"] or None, "trans_b": row["trans_b"] or None})
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    store = Store(f"sqlite:///{partial}")
    try:
        store.save_device(dev)
        if (peaks := LANDSCAPES / f"{device}-peaks.json").is_file():
            store.save_peaks(dev.key, dev.name, json.loads(peaks.read_text()))
        with store.engine.begin() as conn:   # one transaction: 17k rows in a second
            conn.execute(results.insert(), records)
    finally:
        store.close()
    partial.rename(path)   # whole or not at all
    return len(records)


def key(study: str, sampler: str, target: float, seeds: int, forest: int = 0) -> str:
    """Where a figure is kept: a forest other than a search's only for a sampler that learns."""
    from gemmtune.search.replay import learns

    return f"{study}|{sampler}|{target}|{seeds}" + (f"|forest {forest}" if forest and learns(sampler) else "")


def run(db: Path, out: Path, samplers: list[str], seeds: int, target: float, jobs: int,
        only: list[str] | None = None, forest: int = 0) -> dict:
    """Replay every landscape in ``db`` (or those named in ``only``) with ``samplers``; the
    figures, also kept in ``out``."""
    from gemmtune.db.store import Store
    from gemmtune.errors import GemmtuneError
    from gemmtune.search import replay

    try:
        done = json.loads(out.read_text()) if out.exists() else {}
    except (OSError, ValueError) as e:
        raise GemmtuneError(f"cannot read the figures of {out}: {e}") from None
    store = Store(f"sqlite:///{db}", create=False)
    try:
        studies = sorted(set(store.frame().study))
    finally:
        store.close()
    if not studies:
        raise GemmtuneError(f"no landscapes in {db}")
    if only:
        unknown = [s for s in only if s not in studies]
        if unknown:
            raise GemmtuneError(f"no landscape {unknown[0]!r} in {db} (it has: {', '.join(studies)})")
        studies = [s for s in studies if s in only]
    for study in studies:
        missing = [s for s in samplers if key(study, s, target, seeds, forest) not in done]
        if not missing:
            continue
        print(f"{study}: {', '.join(missing)}", file=sys.stderr, flush=True)
        land = replay.load_landscape(f"sqlite:///{db}", study)
        result = replay.replay(land, missing, seeds, target, device=replay.device_for(land), jobs=jobs,
                               forest_seed=forest).to_json()
        for entry in result["samplers"]:
            done[key(study, entry["sampler"], target, seeds, forest)] = {
                "study": study, "precision": result["precision"], "recorded": result["recorded"],
                "ok": result["ok"], "learned_spearman": result["learned_spearman"],
                **{name: entry[name] for name in ("sampler", "median", "q1", "q3", "trials")}}
        partial = out.with_name(out.name + ".partial")
        partial.write_text(json.dumps(done, indent=1))
        os.replace(partial, out)
    return done


def verdict(default: float, stock: list[float]) -> str:
    """The bar: the default's median at most half the best stock sampler's."""
    best = min(stock)
    if best < 2:
        return "out of reach"
    return "met" if default <= best / 2 else "missed"


def table(done: dict, samplers: list[str], seeds: int, target: float, forest: int = 0) -> str:
    """Markdown: a row per landscape, a dash where a sampler was not replayed; the bar judged
    against the stock samplers replayed there, the geometric means over the landscapes every
    sampler was replayed at."""
    studies = sorted({e["study"] for e in done.values() if e["sampler"] in samplers})
    lines = [f"| landscape | configurations | {' | '.join(samplers)} | Spearman | bar |",
             "|" + "---|" * (len(samplers) + 4)]
    verdicts, logs = [], {s: [] for s in samplers}
    for study in studies:
        entries = {s: done.get(key(study, s, target, seeds, forest)) for s in samplers}
        present = {s: e for s, e in entries.items() if e is not None}
        if not present:
            continue
        first = next(iter(present.values()))
        cells = ["–" if e is None else f"{e['median']:g}" + ("" if e["q1"] == e["q3"] else f" ({e['q1']:g}–{e['q3']:g})")
                 for e in entries.values()]
        if len(present) == len(samplers):
            for s, e in present.items():
                logs[s].append(math.log(e["median"]))
        stock = [e["median"] for s, e in present.items() if s in STOCK]
        bar = verdict(present["default"]["median"], stock) if "default" in present and stock else ""
        verdicts.append(bar)
        spearman = first["learned_spearman"]
        lines.append(f"| {study} | {first['recorded']} | {' | '.join(cells)} | "
                     f"{'' if spearman is None else f'{spearman:.2f}'} | {bar} |")
    complete = len(next(iter(logs.values()), []))
    means = " | ".join(f"{math.exp(sum(v) / len(v)):.2f}" if v else "" for v in logs.values())
    lines.append(f"| **geometric mean** ({complete} with every sampler) | | {means} | | |")
    counts = ", ".join(f"{name} at {verdicts.count(name)}" for name in ("met", "missed", "out of reach")
                       if verdicts.count(name))
    judged = sum(1 for v in verdicts if v)
    return "\n".join(lines) + (f"\n\nThe bar: {counts} of {judged}." if counts else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, required=True, help="the landscapes' SQLite file (written if missing)")
    ap.add_argument("--device", default=DEVICE, help=f"whose landscapes a missing --db gets (default: {DEVICE})")
    ap.add_argument("--out", type=Path, help="figures, kept between runs (default: the database's name .json)")
    ap.add_argument("--samplers", default="default,random,optuna-tpe,optuna-cmaes")
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--jobs", type=int, default=1, help="processes replaying seeds side by side (0: one per core)")
    ap.add_argument("--studies", default="", help="replay only these landscapes (comma-separated; default: all)")
    ap.add_argument("--forest-seed", type=int, default=0,
                    help="random seed of the learned model's trees (default: 0, a search's)")
    args = ap.parse_args(argv)
    samplers = [s for s in args.samplers.split(",") if s]
    out = args.out or args.db.with_suffix(".json")

    from gemmtune.errors import GemmtuneError

    try:
        from gemmtune.search.replay import check_samplers

        samplers = check_samplers(samplers)   # before anything is written; without repeats
        if not 0 <= args.forest_seed < 2**32:
            raise GemmtuneError(f"--forest-seed must be in 0 .. 2**32 - 1, got {args.forest_seed}")
        if not args.db.exists():
            print(f"writing {args.db}: {build(args.db, device=args.device)} rows", file=sys.stderr, flush=True)
        done = run(args.db, out, samplers, args.seeds, args.target, args.jobs,
                   [s for s in args.studies.split(",") if s], args.forest_seed)
    except GemmtuneError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    print(table(done, samplers, args.seeds, args.target, args.forest_seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
