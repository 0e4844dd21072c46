"""Ratios of gemmtune to each baseline, per bench run and size, from bench JSON files (argv), and their spread."""
import json, statistics, sys
rows = {}
for path in sys.argv[1:]:
    for r in json.load(open(path)):
        if r["contender"] != "gemmtune" and r["gemmtune_ratio"] is not None:
            rows.setdefault((r["size"], r["contender"]), []).append(r["gemmtune_ratio"])
        if r["contender"] == "gemmtune":
            rows.setdefault((r["size"], "gemmtune GFLOP/s"), []).append(r["gflops"])
for (size, name), v in sorted(rows.items()):
    f = (lambda x: f"{x:,.0f}") if "GFLOP" in name else (lambda x: f"{x:.3f}")
    print(f"{size:5d} {name:17s} runs {len(v):2d}  min {f(min(v))}  median {f(statistics.median(v))}  max {f(max(v))}  "
          + ("" if "GFLOP" in name else f">=1.0 in {sum(x >= 1.0 for x in v)}  ") + " ".join(f(x) for x in v))
