"""What the default strategy's proposals cost as a search grows, without building or timing
anything: the search's own proposer (``proposer.Proposer``) over an in-memory study, as the
proposing process of ``gemmtune search`` runs it, on a made-up landscape (the analytic model's
GFLOP/s with a fixed per-configuration noise; every tenth configuration fails).

    python tools/proposal_cost.py --device-info docs/landscapes/nvidia-h200.json -p z --trials 3000
    python tools/proposal_cost.py --device 0 -p s --trials 500

Every ``--every`` measured trials it prints the milliseconds of proposing per measured trial
over that stretch (invalid and measured-before proposals included, as they cost the proposer
the same), the trials in the study, the proposals per measured trial and the best made-up
GFLOP/s measured so far (what the proposals found); at the end, why the
proposals that measured nothing were passed over. A search of the device keeps its timing
worker busy only while a measured trial costs the proposer less than the device and the
compilers take for one.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
import zlib
from collections import Counter


def described(args):
    if args.device_info:
        from gemmtune.devices.info import read_device_info

        return read_device_info(args.device_info)
    from gemmtune.devices.opencl import resolve_device

    return resolve_device(str(args.device))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="0", help="a device of this machine (default 0)")
    ap.add_argument("--device-info", metavar="FILE.json", help="a device as `gemmtune devices --format json` printed it")
    ap.add_argument("-p", "--precision", default="s")
    ap.add_argument("--shape", default="1280,1792,1024", help="m,n,k (default 1280,1792,1024)")
    ap.add_argument("--trials", type=int, default=2000, help="measured trials (default 2000)")
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    import optuna

    from gemmtune.models import analytic
    from gemmtune.precision import get_precision
    from gemmtune.search.study_search import Broken
    from gemmtune.search.proposals import Proposals
    from gemmtune.search.proposer import Proposer
    from gemmtune.search.session import quiet_optuna
    from gemmtune.space import load_space
    from gemmtune.strategies import DEFAULT, make_strategy
    from gemmtune.space.valid import ValidConfigs

    dev, prec = described(args), get_precision(args.precision)
    m, n, k = (int(x) for x in args.shape.split(","))
    space = load_space(device=dev)
    valid = ValidConfigs(space, dev, prec)
    flops = prec.flops(m, n, k)

    def measure(config):
        h = zlib.crc32(repr(config.key).encode())
        if h % 10 == 0:
            return None
        noise = math.exp(0.3 * ((h >> 8) % 1000 / 1000 - 0.5))
        return flops / analytic.predict(config, dev, prec, m, n, k).time_s / 1e9 * noise

    strategy = make_strategy(DEFAULT, args.seed)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=strategy.sampler(constant_liar=True))
    measured: dict = {}
    broken = Broken(dev, prec)
    proposer = Proposer(study, Proposals(space, strategy.ordinal), valid, measured, strategy, random.Random(args.seed),
                        [], why_invalid=broken, is_valid=lambda c: space.allows(c) and broken(c) is None)
    print(f"{dev.name}, {prec.code} {m}x{n}x{k}: {len(valid):,} valid configurations; strategy {DEFAULT}")
    print(f"{'measured':>8} {'in study':>9} {'proposals per measured':>23} {'ms per measured':>16} {'best so far':>12}")
    start = last = time.perf_counter()
    last_study, best = 0, 0.0
    with quiet_optuna():
        for i in range(1, args.trials + 1):
            proposal = proposer.next()
            if proposal is None:
                break
            trial, config, key = proposal
            value = measure(config)
            measured[key] = ("ok", value) if value else ("wrong_result", None)
            best = max(best, value or 0.0)
            proposer.tell(trial, config, value)
            if i % args.every == 0:
                now, in_study = time.perf_counter(), len(study.get_trials(deepcopy=False))
                print(f"{i:8d} {in_study:9d} {(in_study - last_study) / args.every:23.1f} "
                      f"{1000 * (now - last) / args.every:16.1f} {best:12,.0f}", flush=True)
                last, last_study = time.perf_counter(), in_study
    why = Counter(t.user_attrs.get("skipped", "measured") for t in study.get_trials(deepcopy=False))
    print(f"{time.perf_counter() - start:.1f} s in all; proposals by outcome:",
          ", ".join(f"{reason} {count}" for reason, count in why.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
