"""Summarize `gemmtune bench --format json` from stdin: size, contender (STREAMK/BKFAST of configs), GFLOP/s, ratio."""
import json, re, sys
for r in json.load(sys.stdin):
    name = r["contender"]
    if name.startswith("config:") or name == "gemmtune":
        keys = re.findall(r"(MWG|NWG|STREAMK|BKFAST|PIPE)=(\d+)", r.get("config") or name)
        name = (name if name == "gemmtune" else "config") + " " + " ".join(f"{k}={v}" for k, v in keys)
    g = "-" if r["gflops"] is None else f"{r['gflops']:,.0f}"
    ratio = "-" if r["gemmtune_ratio"] is None else f"{r['gemmtune_ratio']:.3f}"
    print(f"{r['size']:5d}  {name:40s} {g:>8s}  gemmtune/this {ratio}  {r['skipped'] or ''}")
